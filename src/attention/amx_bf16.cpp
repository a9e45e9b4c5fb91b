// src/attention/amx_bf16.cpp: amx_bf16.hpp (the bf16 prefill's scores and p.v on AMX tiles),
// with inline assembly for the tile instructions and AVX-512 intrinsics behind function target
// attributes; elsewhere (non-x86-64, non-Linux, or compilers without the intrinsics) stubs that
// are never called, since cpu_has_amx_bf16() is false there.
#include "attention/amx_bf16.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ROTARY_HAVE_AMX 1
#endif

namespace rotary::attention_internal {

std::atomic<bool> use_amx_bf16{true};
std::atomic<int64_t> amx_prefill_items{0};
std::atomic<int64_t> amx_value_fallbacks{0};

#ifdef ROTARY_HAVE_AMX

namespace {

// The tile instructions in AT&T syntax (GCC's and clang's default). Tile numbers are part of the
// instruction, so they are macro arguments. Loads and stores say they touch memory, so that the
// compiler finishes the stores that packed a buffer before a tile reads it.
#define ROTARY_TILE_LOAD(tile, base, stride_bytes) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"(base), "r"(static_cast<long>(stride_bytes)) : "memory")
#define ROTARY_TILE_STORE(tile, base, stride_bytes) \
  __asm__ volatile("tilestored %%tmm" #tile ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride_bytes)) : "memory")
#define ROTARY_TILE_ZERO(tile) __asm__ volatile("tilezero %%tmm" #tile ::)
// C += A . B (Intel operand order: tdpbf16ps C, A, B).
#define ROTARY_TILE_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

// ldtilecfg's 64-byte operand (Intel SDM vol. 1, "Tile configuration"): palette 1, per tile its
// bytes per row and rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

bool detect_amx_bf16() {
  // ROTARY_NO_AMX=1 (any value but "0"): never ask for the tile state. The request enlarges every
  // signal frame of the process (Linux's xstate.rst), which a program with small alternate signal
  // stacks may not want; the other paths give the same results within the same bound.
  if (const char* env = std::getenv("ROTARY_NO_AMX"); env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0) {
    return false;
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // OSXSAVE
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool amx_tile = (d & (1u << 24)) != 0, amx_bf16 = (d & (1u << 22)) != 0;
  if (!amx_tile || !amx_bf16) return false;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bf16"))) {
    return false;
  }
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((xcr0_lo & kTileState) != kTileState) return false;
  // Linux keeps the tile data off until a process asks (Documentation/arch/x86/xstate.rst):
  // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18). Without it the first tile
  // instruction raises SIGILL.
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

// 16 x 16 32-bit lanes transposed in registers: x[i] lane c becomes x[c] lane i.
__attribute__((target("avx512f"))) inline void transpose16(__m512i x[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(x[2 * i], x[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(x[2 * i], x[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + c]: per 128-bit block L, rows 4i..4i+3 of column 4L + c
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88), w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
    x[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    x[8 + c] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
    x[4 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    x[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
  }
}

// bf16(p) (round to nearest even) in the low 16 bits of each 32-bit lane, and that value as float32.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline __m512i to_bf16_lanes(__m512 p, __m512* as_float) {
  const __m512i bits = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)));
  *as_float = _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
  return bits;
}

}  // namespace

bool cpu_has_amx_bf16() {
  static const bool has = detect_amx_bf16();
  return has;
}

void amx_begin() {
  TileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.bytes_per_row[i] = 64;
    config.rows[i] = 16;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
}

void amx_end() { __asm__ volatile("tilerelease" ::); }

__attribute__((target("avx512f"))) void scores_amx_transposed(const uint32_t* qt_pairs, int64_t rows_pad,
                                                              const uint16_t* k, int64_t k_stride, int64_t keys,
                                                              int64_t dim, float scale, float* st, uint16_t* k_pad) {
  const int64_t steps = amx_pair_rows(dim) / 16;  // 32 values of the head dim per step
  const int64_t width = steps * 32;
  const int64_t q_stride_bytes = rows_pad * 4;
  // Per 16 keys, where its A tiles start: K in place, or a zero-padded copy in k_pad, so that no
  // tile row reads past a K row or past the keys.
  const int64_t key_tiles = (keys + 15) / 16;
  const uint16_t* a[4] = {};
  int64_t a_stride_bytes[4] = {};
  for (int64_t g = 0; g < key_tiles; ++g) {
    const int64_t n = std::min<int64_t>(16, keys - 16 * g);
    a[g] = k + 16 * g * k_stride;
    a_stride_bytes[g] = k_stride * 2;
    if (dim % 32 == 0 && n == 16) continue;
    uint16_t* copy = k_pad + 16 * g * width;
    for (int64_t i = 0; i < 16; ++i) {
      uint16_t* row = copy + i * width;
      int64_t copied = 0;
      if (i < n) {
        std::memcpy(row, k + (16 * g + i) * k_stride, static_cast<size_t>(dim) * sizeof(uint16_t));
        copied = dim;
      }
      std::memset(row + copied, 0, static_cast<size_t>(width - copied) * sizeof(uint16_t));
    }
    a[g] = copy;
    a_stride_bytes[g] = width * 2;
  }
  // 2 x 2 C tiles (32 keys x 32 rows) at a time: per step two A and two B tiles feed four
  // independent products (a tile register is reloaded only after four products).
  for (int64_t g = 0; g < key_tiles; g += 2) {
    const bool g2 = g + 1 < key_tiles;
    for (int64_t rb = 0; rb < rows_pad; rb += 32) {
      const bool r2 = rb + 16 < rows_pad;
      ROTARY_TILE_ZERO(0);
      ROTARY_TILE_ZERO(1);
      ROTARY_TILE_ZERO(2);
      ROTARY_TILE_ZERO(3);
      for (int64_t s = 0; s < steps; ++s) {
        const uint32_t* b = qt_pairs + s * 16 * rows_pad + rb;
        ROTARY_TILE_LOAD(4, a[g] + s * 32, a_stride_bytes[g]);
        ROTARY_TILE_LOAD(6, b, q_stride_bytes);
        ROTARY_TILE_DP(0, 4, 6);
        if (r2) {
          ROTARY_TILE_LOAD(7, b + 16, q_stride_bytes);
          ROTARY_TILE_DP(1, 4, 7);
        }
        if (g2) {
          ROTARY_TILE_LOAD(5, a[g + 1] + s * 32, a_stride_bytes[g + 1]);
          ROTARY_TILE_DP(2, 5, 6);
          if (r2) ROTARY_TILE_DP(3, 5, 7);
        }
      }
      float* c = st + 16 * g * rows_pad + rb;
      ROTARY_TILE_STORE(0, c, q_stride_bytes);
      if (r2) ROTARY_TILE_STORE(1, c + 16, q_stride_bytes);
      if (g2) {
        ROTARY_TILE_STORE(2, c + 16 * rows_pad, q_stride_bytes);
        if (r2) ROTARY_TILE_STORE(3, c + 16 * rows_pad + 16, q_stride_bytes);
      }
    }
  }
  // The scale on the finished dot products, as the vdpbf16ps path applies it.
  const __m512 s = _mm512_set1_ps(scale);
  const int64_t stored = (keys + 15) / 16 * 16;
  for (int64_t j = 0; j < stored; ++j) {
    float* row = st + j * rows_pad;
    for (int64_t r = 0; r < rows_pad; r += 16) _mm512_storeu_ps(row + r, _mm512_mul_ps(_mm512_loadu_ps(row + r), s));
  }
}

namespace {

// 16 float32 values of a row from x (the first `count`, zeros past them), as bf16 hi and lo
// (hi = bf16(x), lo = bf16(x - hi); x - hi is exact), each 16 values in a 256-bit vector. The
// lanes holding NaN or an infinity are returned as a mask (their split means nothing: inf - inf).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline __mmask16 split16(const float* x, int64_t count,
                                                                                       __m256i* hi, __m256i* lo) {
  __m512 v = _mm512_setzero_ps();
  if (count >= 16) {
    v = _mm512_loadu_ps(x);
  } else if (count > 0) {
    v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), x);
  }
  __m512 hf;
  const __m512i h = to_bf16_lanes(v, &hf);
  *hi = _mm512_cvtepi32_epi16(h);
  *lo = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf)));
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), exponent), exponent);
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) bool split_rows_amx(const float* x, int64_t rows,
                                                                                  int64_t stride, int64_t dim,
                                                                                  uint16_t* hi, uint16_t* lo) {
  const int64_t width = amx_pair_rows(dim) * 2;
  const int64_t padded = (rows + 15) / 16 * 16;
  __mmask16 non_finite = 0;
  for (int64_t j = 0; j < padded; ++j) {
    for (int64_t e = 0; e < width; e += 16) {
      __m256i h = _mm256_setzero_si256(), l = h;
      if (j < rows) non_finite |= split16(x + j * stride + e, dim - e, &h, &l);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + j * width + e), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + j * width + e), l);
    }
  }
  return non_finite == 0;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) bool split_pairs_amx(const float* x, int64_t rows,
                                                                                   int64_t stride, int64_t dim,
                                                                                   uint32_t* hi_pairs,
                                                                                   uint32_t* lo_pairs, int64_t rows_pad) {
  const int64_t pair_rows = amx_pair_rows(dim);
  __mmask16 non_finite = 0;
  for (int64_t rb = 0; rb < rows_pad; rb += 16) {
    for (int64_t pb = 0; pb < pair_rows; pb += 16) {
      __m512i h[16], l[16];
      for (int64_t i = 0; i < 16; ++i) {  // row rb + i, values 2 pb .. 2 pb + 31: 16 pairs
        __m256i h0 = _mm256_setzero_si256(), l0 = h0, h1 = h0, l1 = h0;
        if (rb + i < rows) {
          const float* row = x + (rb + i) * stride + 2 * pb;
          non_finite |= split16(row, dim - 2 * pb, &h0, &l0);
          non_finite |= split16(row + 16, dim - 2 * pb - 16, &h1, &l1);
        }
        h[i] = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
        l[i] = _mm512_inserti64x4(_mm512_castsi256_si512(l0), l1, 1);
      }
      transpose16(h);  // now h[i] = pair pb + i of the 16 rows
      transpose16(l);
      for (int64_t i = 0; i < 16; ++i) {
        _mm512_storeu_si512(hi_pairs + (pb + i) * rows_pad + rb, h[i]);
        _mm512_storeu_si512(lo_pairs + (pb + i) * rows_pad + rb, l[i]);
      }
    }
  }
  return non_finite == 0;
}

void scores_amx_split(const uint32_t* q_hi, const uint32_t* q_lo, int64_t rows_pad, const uint16_t* k_hi,
                      const uint16_t* k_lo, int64_t keys, int64_t dim, float* st) {
  const int64_t steps = amx_pair_rows(dim) / 16;
  const int64_t width = steps * 32;
  const int64_t q_stride_bytes = rows_pad * 4, k_stride_bytes = width * 2;
  // Per 16 keys and 32 rows, two C tiles; per step the K tiles hi and lo, and q's hi then lo
  // tiles for the two row blocks: k_hi q_hi + k_lo q_hi + k_hi q_lo (k_lo q_lo, under 2^-16 of
  // the product, is left out: docs/attention.md, "Error analysis").
  for (int64_t kb = 0; kb < keys; kb += 16) {
    for (int64_t rb = 0; rb < rows_pad; rb += 32) {
      const bool r2 = rb + 16 < rows_pad;
      ROTARY_TILE_ZERO(0);
      ROTARY_TILE_ZERO(1);
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t k_at = kb * width + s * 32, q_at = s * 16 * rows_pad + rb;
        ROTARY_TILE_LOAD(4, k_hi + k_at, k_stride_bytes);
        ROTARY_TILE_LOAD(5, k_lo + k_at, k_stride_bytes);
        ROTARY_TILE_LOAD(6, q_hi + q_at, q_stride_bytes);
        ROTARY_TILE_DP(0, 4, 6);
        ROTARY_TILE_DP(0, 5, 6);
        if (r2) {
          ROTARY_TILE_LOAD(7, q_hi + q_at + 16, q_stride_bytes);
          ROTARY_TILE_DP(1, 4, 7);
          ROTARY_TILE_DP(1, 5, 7);
        }
        ROTARY_TILE_LOAD(6, q_lo + q_at, q_stride_bytes);
        ROTARY_TILE_DP(0, 4, 6);
        if (r2) {
          ROTARY_TILE_LOAD(7, q_lo + q_at + 16, q_stride_bytes);
          ROTARY_TILE_DP(1, 4, 7);
        }
      }
      ROTARY_TILE_STORE(0, st + kb * rows_pad + rb, q_stride_bytes);
      if (r2) ROTARY_TILE_STORE(1, st + kb * rows_pad + rb + 16, q_stride_bytes);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) bool pack_values_amx(const uint16_t* v, int64_t v_stride,
                                                                          int64_t keys, int64_t dv, int64_t o_stride,
                                                                          uint32_t* vt_pairs) {
  // Built as [pair][value] lanes (two V rows interleaved), 16 pairs at a time, then transposed in
  // registers to [value][pair]. Any value with an all-ones exponent (NaN, +-inf) refuses the tile.
  const __m512i exponent = _mm512_set1_epi32(0x7f80);
  __mmask16 non_finite = 0;
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t eb = 0; eb < o_stride; eb += 16) {
      const int64_t count = std::clamp<int64_t>(dv - eb, 0, 16);
      const auto mask = static_cast<__mmask16>((1u << count) - 1);
      __m512i x[16];
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t j0 = 2 * (16 * h + i), j1 = j0 + 1;
        __m256i a = _mm256_setzero_si256(), b = a;
        if (count == 16) {
          if (j0 < keys) a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j0 * v_stride + eb));
          if (j1 < keys) b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j1 * v_stride + eb));
        } else {
          if (j0 < keys) a = _mm256_maskz_loadu_epi16(mask, v + j0 * v_stride + eb);
          if (j1 < keys) b = _mm256_maskz_loadu_epi16(mask, v + j1 * v_stride + eb);
        }
        const __m512i a32 = _mm512_cvtepu16_epi32(a), b32 = _mm512_cvtepu16_epi32(b);
        non_finite |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(a32, exponent), exponent);
        non_finite |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(b32, exponent), exponent);
        x[i] = _mm512_or_si512(a32, _mm512_slli_epi32(b32, 16));
      }
      transpose16(x);
      uint32_t* out = vt_pairs + (h * o_stride + eb) * 16;
      for (int64_t i = 0; i < 16; ++i) _mm512_storeu_si512(out + i * 16, x[i]);
    }
  }
  return non_finite == 0;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void values_amx(
    const float* p, int64_t rows, int64_t rows_pad, int64_t keys, const uint32_t* vt_pairs, const float* alpha, float* ot,
    int64_t o_stride, uint32_t* p_pairs) {
  const int64_t halves = (keys + 31) / 32;  // 32 keys (16 pairs) per tile step
  // The weights as B tiles, [pair][row] as the scores lie, hi at p_pairs and lo 32 pair rows on.
  uint32_t* hi_pairs = p_pairs;
  uint32_t* lo_pairs = p_pairs + 32 * rows_pad;
  for (int64_t kp = 0; kp < halves * 16; ++kp) {
    const int64_t j0 = 2 * kp, j1 = j0 + 1;
    for (int64_t rb = 0; rb < rows_pad; rb += 16) {
      const __m512 p0 = j0 < keys ? _mm512_loadu_ps(p + j0 * rows_pad + rb) : _mm512_setzero_ps();
      const __m512 p1 = j1 < keys ? _mm512_loadu_ps(p + j1 * rows_pad + rb) : _mm512_setzero_ps();
      __m512 h0f, h1f, unused;
      const __m512i h0 = to_bf16_lanes(p0, &h0f), h1 = to_bf16_lanes(p1, &h1f);
      const __m512i l0 = to_bf16_lanes(_mm512_sub_ps(p0, h0f), &unused);  // p - hi: exact in float32
      const __m512i l1 = to_bf16_lanes(_mm512_sub_ps(p1, h1f), &unused);
      _mm512_storeu_si512(hi_pairs + kp * rows_pad + rb, _mm512_or_si512(h0, _mm512_slli_epi32(h1, 16)));
      _mm512_storeu_si512(lo_pairs + kp * rows_pad + rb, _mm512_or_si512(l0, _mm512_slli_epi32(l1, 16)));
    }
  }
  // ot = alpha ot + V^T (hi + lo), 2 x 2 C tiles (32 values x 32 rows) at a time: per half of the
  // keys two A tiles of V^T, and per hi / lo two B tiles of weights, feed four independent
  // products. alpha is per row, so per column of ot: one vector multiply-add per 16 values.
  alignas(64) float c[32 * 32];
  const int64_t p_stride_bytes = rows_pad * 4;
  for (int64_t eb = 0; eb < o_stride; eb += 32) {
    const bool e2 = eb + 16 < o_stride;
    for (int64_t rb = 0; rb < rows; rb += 32) {
      const bool r2 = rb + 16 < rows;
      ROTARY_TILE_ZERO(0);
      ROTARY_TILE_ZERO(1);
      ROTARY_TILE_ZERO(2);
      ROTARY_TILE_ZERO(3);
      for (int64_t h = 0; h < halves; ++h) {
        const uint32_t* a = vt_pairs + (h * o_stride + eb) * 16;
        ROTARY_TILE_LOAD(4, a, 64);
        if (e2) ROTARY_TILE_LOAD(5, a + 256, 64);
        for (int which = 0; which < 2; ++which) {
          const uint32_t* b = (which == 0 ? hi_pairs : lo_pairs) + 16 * h * rows_pad + rb;
          ROTARY_TILE_LOAD(6, b, p_stride_bytes);
          ROTARY_TILE_DP(0, 4, 6);
          if (e2) ROTARY_TILE_DP(2, 5, 6);
          if (r2) {
            ROTARY_TILE_LOAD(7, b + 16, p_stride_bytes);
            ROTARY_TILE_DP(1, 4, 7);
            if (e2) ROTARY_TILE_DP(3, 5, 7);
          }
        }
      }
      // c[e][r]: tile 0 values eb.., rows rb..; 1 rows rb + 16..; 2 values eb + 16..; 3 both.
      ROTARY_TILE_STORE(0, c, 128);
      if (r2) ROTARY_TILE_STORE(1, c + 16, 128);
      if (e2) {
        ROTARY_TILE_STORE(2, c + 16 * 32, 128);
        if (r2) ROTARY_TILE_STORE(3, c + 16 * 32 + 16, 128);
      }
      const int64_t values = e2 ? 32 : 16, row_vecs = r2 ? 2 : 1;
      for (int64_t x = 0; x < row_vecs; ++x) {
        const __m512 scale = _mm512_loadu_ps(alpha + rb + 16 * x);
        for (int64_t e = 0; e < values; ++e) {
          float* at = ot + (eb + e) * rows_pad + rb + 16 * x;
          _mm512_storeu_ps(at, _mm512_fmadd_ps(scale, _mm512_loadu_ps(at), _mm512_load_ps(c + e * 32 + 16 * x)));
        }
      }
    }
  }
}

__attribute__((target("avx512f"))) void untranspose_amx(const float* ot, int64_t rows, int64_t rows_pad, int64_t o_stride,
                                                        float* o) {
  for (int64_t eb = 0; eb < o_stride; eb += 16) {
    for (int64_t rb = 0; rb < rows; rb += 16) {
      __m512i x[16];
      for (int64_t i = 0; i < 16; ++i) x[i] = _mm512_loadu_si512(ot + (eb + i) * rows_pad + rb);
      transpose16(x);
      const int64_t live = std::min<int64_t>(16, rows - rb);
      for (int64_t i = 0; i < live; ++i) _mm512_storeu_si512(o + (rb + i) * o_stride + eb, x[i]);
    }
  }
}
__attribute__((target("avx512f"))) void transpose_rows_amx(const float* o, int64_t rows, int64_t rows_pad,
                                                           int64_t o_stride, float* ot) {
  for (int64_t rb = 0; rb < rows; rb += 16) {
    const int64_t live = std::min<int64_t>(16, rows - rb);
    for (int64_t eb = 0; eb < o_stride; eb += 16) {
      __m512i x[16];
      for (int64_t i = 0; i < 16; ++i) {
        x[i] = i < live ? _mm512_loadu_si512(o + (rb + i) * o_stride + eb) : _mm512_setzero_si512();
      }
      transpose16(x);
      for (int64_t i = 0; i < 16; ++i) _mm512_storeu_si512(ot + (eb + i) * rows_pad + rb, x[i]);
    }
  }
}

#undef ROTARY_TILE_LOAD
#undef ROTARY_TILE_STORE
#undef ROTARY_TILE_ZERO
#undef ROTARY_TILE_DP

#else

bool cpu_has_amx_bf16() { return false; }
void amx_begin() {}
void amx_end() {}
void scores_amx_transposed(const uint32_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float, float*, uint16_t*) {}
bool pack_values_amx(const uint16_t*, int64_t, int64_t, int64_t, int64_t, uint32_t*) { return false; }
void values_amx(const float*, int64_t, int64_t, int64_t, const uint32_t*, const float*, float*, int64_t, uint32_t*) {}
void untranspose_amx(const float*, int64_t, int64_t, int64_t, float*) {}
bool split_rows_amx(const float*, int64_t, int64_t, int64_t, uint16_t*, uint16_t*) { return false; }
bool split_pairs_amx(const float*, int64_t, int64_t, int64_t, uint32_t*, uint32_t*, int64_t) { return false; }
void scores_amx_split(const uint32_t*, const uint32_t*, int64_t, const uint16_t*, const uint16_t*, int64_t, int64_t,
                      float*) {}
void transpose_rows_amx(const float*, int64_t, int64_t, int64_t, float*) {}

#endif

}  // namespace rotary::attention_internal
