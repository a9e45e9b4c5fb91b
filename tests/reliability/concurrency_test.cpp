// tests/reliability/concurrency_test.cpp: rotary::apply while other threads grow the tables it
// reads, a RopeCache switching tables under concurrent callers, and non-finite inputs.
//
// The concurrent test is in `make sanitize`'s ThreadSanitizer run (SANITIZE_TSAN_TESTS matches
// Reliability.Concurrent); every result is checked against reference::apply.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

RopeSpec text_spec(ScalingType scaling = ScalingType::Default) {
  RopeSpec spec = test::rope_spec({.name = "reliability", .head_dim = 64, .max_position_embeddings = 2048});
  spec.scaling.type = scaling;
  if (scaling == ScalingType::Dynamic) spec.scaling.factor = 2.0;
  return spec;
}

// One float32 BSHD call with random inputs in [-1, 1] and per-token positions in [min, max].
struct SmallCall {
  SmallCall(std::mt19937_64& rng, int64_t max_position, int64_t min_position = 0) {
    std::uniform_int_distribution<int64_t> seq_dist(1, 33), heads_dist(1, 4), position_dist(min_position, max_position);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    seq = seq_dist(rng);
    heads_q = heads_dist(rng);
    heads_k = 1 + heads_q / 2;
    q.resize(static_cast<size_t>(seq * heads_q * 64));
    k.resize(static_cast<size_t>(seq * heads_k * 64));
    for (float& x : q) x = value(rng);
    for (float& x : k) x = value(rng);
    for (int64_t s = 0; s < seq; ++s) positions.push_back(position_dist(rng));
  }

  // Rotates q and k with `table`, by rotary::apply (fast) or reference::apply.
  std::pair<std::vector<float>, std::vector<float>> run(const CosSinTable& table, bool fast) const {
    std::vector<float> q_out(q.size()), k_out(k.size());
    const TensorView qv = contiguous_view(const_cast<float*>(q.data()), DType::F32, Layout::BSHD, {1, seq, heads_q, 64});
    const TensorView kv = contiguous_view(const_cast<float*>(k.data()), DType::F32, Layout::BSHD, {1, seq, heads_k, 64});
    const TensorView qo = contiguous_view(q_out.data(), DType::F32, Layout::BSHD, {1, seq, heads_q, 64});
    const TensorView ko = contiguous_view(k_out.data(), DType::F32, Layout::BSHD, {1, seq, heads_k, 64});
    const Positions p = Positions::per_token(positions);  // seq of them
    // RopeCache's tables are for the call that asked (a grown table serves shorter calls, as in
    // transformers): its seq_len is named, as a RopeCache user does.
    const ApplyOptions options{.seq_len = table.seq_len()};
    if (fast) {
      apply(qv, kv, qo, ko, p, table, options);
    } else {
      reference::apply(qv, kv, qo, ko, p, table, options);
    }
    return {std::move(q_out), std::move(k_out)};
  }

  int64_t seq = 0, heads_q = 0, heads_k = 0;
  std::vector<float> q, k;
  std::vector<int64_t> positions;
};

// Inputs in [-1, 1]: the float32 kernel is within 4e-7 (|a| + |c|) <= 8e-7 of the reference
// computed from the same float32 table values (docs/numerics.md, "The SIMD kernels"); 1e-6 leaves room.
std::string compare(const std::pair<std::vector<float>, std::vector<float>>& fast,
                    const std::pair<std::vector<float>, std::vector<float>>& ref) {
  for (int which = 0; which < 2; ++which) {
    const std::vector<float>& f = which == 0 ? fast.first : fast.second;
    const std::vector<float>& r = which == 0 ? ref.first : ref.second;
    for (size_t i = 0; i < f.size(); ++i) {
      if (!(std::abs(f[i] - r[i]) <= 1e-6f)) {
        return detail::concat(which == 0 ? "q" : "k", "[", i, "]: apply ", f[i], ", reference ", r[i]);
      }
    }
  }
  return "";
}

// Appliers read a stored table while a grower extends it and other threads share a dynamic-NTK
// RopeCache whose table changes with their calls' lengths. Each apply is compared with the
// reference on an on-the-fly table of the same spec (bitwise the same rows) or, for the cache,
// on the very table the cache returned.
TEST(ReliabilityConcurrent, ApplyWhileTablesGrowAndRopeCacheSwitches) {
  const CosSinTable shared(text_spec(), {.initial_positions = 16});
  const CosSinTable own(text_spec(), {.storage = Storage::OnTheFly});
  RopeCache cache(text_spec(ScalingType::Dynamic));
  std::atomic<bool> stop{false};
  constexpr int kAppliers = 2, kCacheUsers = 2, kIterations = 40;
  std::vector<std::string> errors(kAppliers + kCacheUsers + 1);

  std::vector<std::thread> threads;
  for (int t = 0; t < kAppliers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + static_cast<uint64_t>(t));
      for (int n = 0; n < kIterations && errors[t].empty(); ++n) {
        const SmallCall call(rng, 2000 * (n + 1));  // ever higher positions: the table grows under readers
        try {
          const std::string problem = compare(call.run(shared, true), call.run(own, false));
          if (!problem.empty()) errors[t] = detail::concat("applier ", t, " call ", n, ": ", problem);
        } catch (const Error& error) {
          errors[t] = error.what();
        }
      }
    });
  }
  for (int t = 0; t < kCacheUsers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(2000 + static_cast<uint64_t>(t));
      const size_t slot = static_cast<size_t>(kAppliers + t);
      for (int n = 0; n < kIterations && errors[slot].empty(); ++n) {
        // Lengths past max_position_embeddings 2048 grow the cache's table; every fifth call is
        // short again, which sends the cache back to the original table (transformers' reset).
        const int64_t max_position = n % 5 == 4 ? 100 : 2048 + 500 * n + 37 * t;
        const SmallCall call(rng, max_position);
        const std::shared_ptr<const CosSinTable> table = cache.table_for(max_position);
        try {
          const std::string problem = compare(call.run(*table, true), call.run(*table, false));
          if (!problem.empty()) errors[slot] = detail::concat("cache user ", t, " call ", n, ": ", problem);
        } catch (const Error& error) {
          errors[slot] = error.what();
        }
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(3000);
    std::vector<float> c(32), s(32), rc(32), rs(32);
    for (int64_t target = 1024; !stop.load(); target = target < 120000 ? target * 3 / 2 : 1024) {
      shared.reserve_positions(target);
      const int64_t p = std::uniform_int_distribution<int64_t>(0, target)(rng);
      shared.row(p, c.data(), s.data());
      own.row(p, rc.data(), rs.data());
      if (c != rc || s != rs) errors.back() = detail::concat("grower: row ", p, " differs from the on-the-fly row");
      std::this_thread::yield();
    }
  });
  for (size_t t = 0; t + 1 < threads.size(); ++t) threads[t].join();
  stop.store(true);
  threads.back().join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
}

// Appliers at near positions, at 10^6 and at 2^31 - 1 share one stored table: each call stores
// the pages of its positions while the others read theirs. Every result matches the reference on
// an on-the-fly table, and the table holds the pages of the three windows, not 2^31 rows.
TEST(ReliabilityConcurrent, ApplyAtFarAndNearPositionsWhileOthersStorePages) {
  const CosSinTable shared(text_spec());
  const CosSinTable own(text_spec(), {.storage = Storage::OnTheFly});
  constexpr int64_t kWindow = 4096;  // 16 pages of 256 rows, or 17 where a window straddles one
  const int64_t window_starts[3] = {0, 1000000, kMaxPosition + 1 - kWindow};
  constexpr int kAppliers = 3, kIterations = 30;
  std::vector<std::string> errors(kAppliers);
  std::vector<std::thread> threads;
  for (int t = 0; t < kAppliers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(4000 + static_cast<uint64_t>(t));
      for (int n = 0; n < kIterations && errors[t].empty(); ++n) {
        const int64_t first = window_starts[(n + t) % 3];
        const SmallCall call(rng, first + kWindow - 1, first);
        try {
          const std::string problem = compare(call.run(shared, true), call.run(own, false));
          if (!problem.empty()) errors[t] = detail::concat("applier ", t, " call ", n, ": ", problem);
        } catch (const Error& error) {
          errors[t] = error.what();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  // 32 pairs: a page is 256 x 2 x 32 floats = 64 KiB. At most 16 + 17 + 16 pages, leaves 0 and
  // 2047 (32 KiB each), the directory (16 KiB), less than 4 MiB of slab unused: under 7.4 MB.
  constexpr int64_t kPageBytes = 256 * 2 * 32 * 4;
  EXPECT_LT(shared.stored_bytes(), 16384 + 2 * 32768 + 49 * kPageBytes + (4 << 20));
  EXPECT_GE(shared.stored_bytes(), 16384 + 2 * 32768 + 3 * kPageBytes);
}

// ---- non-finite inputs ------------------------------------------------------------------------

void store(std::vector<unsigned char>& buffer, DType dtype, size_t index, double value) {
  if (dtype == DType::F32) {
    const auto v = static_cast<float>(value);
    std::memcpy(buffer.data() + 4 * index, &v, 4);
  } else {
    const uint16_t bits = dtype == DType::BF16 ? double_to_bf16(value) : double_to_f16(value);
    std::memcpy(buffer.data() + 2 * index, &bits, 2);
  }
}

double load(const std::vector<unsigned char>& buffer, DType dtype, size_t index) {
  if (dtype == DType::F32) {
    float v = 0;
    std::memcpy(&v, buffer.data() + 4 * index, 4);
    return v;
  }
  uint16_t bits = 0;
  std::memcpy(&bits, buffer.data() + 2 * index, 2);
  return dtype == DType::BF16 ? bf16_to_float(bits) : f16_to_float(bits);
}

// A NaN or an infinity in q or k reaches only its own output element and its pair partner (the
// one element the rotation mixes it with); every other output keeps the exact bits of the run
// without it, and nothing crashes. Checked for both pairings, f32 / bf16 / f16 storage, in and
// out of place, on every compiled SIMD target and in the reference, with pass-through elements
// on both sides of the rotated block (head_dim 24, rotary_dim 16, rotary_offset 4).
TEST(ReliabilityNonFinite, NanAndInfReachOnlyTheirPair) {
  constexpr int64_t kHeadDim = 24, kRotaryDim = 16, kOffset = 4, kSeq = 3, kHeadsQ = 2, kHeadsK = 1;
  const double poisons[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity()};
  const std::vector<int64_t> positions = {0, 5, 100000};  // position 0: sin is exactly 0
  std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  targets.push_back("reference");
  for (const std::string& target : targets) {
    const bool fast = target != "reference";
    if (fast) force_cpu_target(target);
    for (const Style style : {Style::NeoX, Style::GPTJ}) {
      RopeSpec spec = text_spec();
      spec.head_dim = kHeadDim;
      spec.rotary_dim = kRotaryDim;
      spec.style = style;
      const CosSinTable table(spec);
      // The element a rotated element is paired with (itself when it passes through).
      auto partner = [&](int64_t d) -> int64_t {
        if (d < kOffset || d >= kOffset + kRotaryDim) return d;
        const int64_t r = d - kOffset;
        if (style == Style::NeoX) return kOffset + (r < kRotaryDim / 2 ? r + kRotaryDim / 2 : r - kRotaryDim / 2);
        return kOffset + (r ^ 1);
      };
      for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
        for (const bool in_place : {false, true}) {
          SCOPED_TRACE(detail::concat(target, " ", to_string(style), " ", to_string(dtype), in_place ? " in place" : ""));
          const int64_t size = dtype_size(dtype);
          const size_t q_count = kSeq * kHeadsQ * kHeadDim, k_count = kSeq * kHeadsK * kHeadDim;
          std::vector<unsigned char> q_in(q_count * size), k_in(k_count * size);
          std::mt19937_64 rng(77);
          std::uniform_real_distribution<double> value(-1.0, 1.0);
          for (size_t i = 0; i < q_count; ++i) store(q_in, dtype, i, value(rng));
          for (size_t i = 0; i < k_count; ++i) store(k_in, dtype, i, value(rng));
          // Runs the call on copies of (q, k); returns the outputs.
          auto run = [&](const std::vector<unsigned char>& q, const std::vector<unsigned char>& k) {
            std::vector<unsigned char> q_buf = q, k_buf = k;
            std::vector<unsigned char> q_out = in_place ? std::vector<unsigned char>() : std::vector<unsigned char>(q.size());
            std::vector<unsigned char> k_out = in_place ? std::vector<unsigned char>() : std::vector<unsigned char>(k.size());
            const TensorView qv = contiguous_view(q_buf.data(), dtype, Layout::BSHD, {1, kSeq, kHeadsQ, kHeadDim});
            const TensorView kv = contiguous_view(k_buf.data(), dtype, Layout::BSHD, {1, kSeq, kHeadsK, kHeadDim});
            const TensorView qo = in_place ? qv : contiguous_view(q_out.data(), dtype, Layout::BSHD, {1, kSeq, kHeadsQ, kHeadDim});
            const TensorView ko = in_place ? kv : contiguous_view(k_out.data(), dtype, Layout::BSHD, {1, kSeq, kHeadsK, kHeadDim});
            const Positions p = Positions::per_token(positions);  // kSeq of them
            const ApplyOptions options{.rotary_offset = kOffset};
            if (fast) {
              apply(qv, kv, qo, ko, p, table, options);
            } else {
              reference::apply(qv, kv, qo, ko, p, table, options);
            }
            return in_place ? std::make_pair(q_buf, k_buf) : std::make_pair(q_out, k_out);
          };
          const auto clean = run(q_in, k_in);
          for (const bool poison_k : {false, true}) {
            for (int64_t token = 0; token < kSeq; ++token) {
              for (int64_t d = 0; d < kHeadDim; ++d) {
                const double poison = poisons[static_cast<size_t>(token + d) % 3];
                const int64_t heads = poison_k ? kHeadsK : kHeadsQ;
                const int64_t head = heads - 1;
                const auto index = static_cast<size_t>((token * heads + head) * kHeadDim + d);
                std::vector<unsigned char> q = q_in, k = k_in;
                store(poison_k ? k : q, dtype, index, poison);
                const auto dirty = run(q, k);
                const std::vector<unsigned char>& out = poison_k ? dirty.second : dirty.first;
                const std::vector<unsigned char>& clean_out = poison_k ? clean.second : clean.first;
                const std::vector<unsigned char>& other = poison_k ? dirty.first : dirty.second;
                const std::vector<unsigned char>& clean_other = poison_k ? clean.first : clean.second;
                ASSERT_FALSE(std::isfinite(load(out, dtype, index)))
                    << "token " << token << " dim " << d << ": the poisoned element came out finite";
                if (partner(d) == d) {  // passed through: the same value, bit for bit
                  ASSERT_EQ(std::memcmp(out.data() + index * size, (poison_k ? k : q).data() + index * size, size), 0)
                      << "dim " << d << " passes through but changed";
                }
                const size_t partner_index = index - static_cast<size_t>(d) + static_cast<size_t>(partner(d));
                for (size_t e = 0; e < out.size() / static_cast<size_t>(size); ++e) {
                  if (e == index || e == partner_index) continue;
                  ASSERT_EQ(std::memcmp(out.data() + e * size, clean_out.data() + e * size, size), 0)
                      << "token " << token << " dim " << d << ": element " << e << " changed";
                }
                ASSERT_EQ(other, clean_other) << "poisoning one tensor changed the other";
              }
            }
          }
        }
      }
    }
  }
  force_cpu_target("");
}

}  // namespace
}  // namespace rotary
