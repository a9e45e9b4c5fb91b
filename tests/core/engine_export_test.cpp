// tests/core/engine_export_test.cpp: export_table() (include/rotary/engine_export.hpp): each
// format's shape, dtype and layout; its values against the exact table rounded once to the dtype
// and against an independent long double evaluation; the llama.cpp factors against frequencies;
// and every refusal naming its argument.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "tests/support/spec_builder.hpp"
#include "tests/support/ulp.hpp"

namespace rotary {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// Element n of an exported array, widened to double.
double element(const ExportedArray& a, int64_t n) {
  if (a.dtype == DType::F32) {
    float v;
    std::memcpy(&v, a.bytes.data() + 4 * n, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, a.bytes.data() + 2 * n, 2);
  return a.dtype == DType::BF16 ? bf16_to_float(bits) : f16_to_float(bits);
}

uint16_t bits16(const ExportedArray& a, int64_t n) {
  uint16_t bits;
  std::memcpy(&bits, a.bytes.data() + 2 * n, 2);
  return bits;
}

// A spec with a YaRN attention scaling, so that scaling is in the values.
RopeSpec yarn_spec() {
  RopeSpec spec = test::rope_spec({.name = "yarn", .head_dim = 64, .rotary_dim = 48, .theta_base = 1e6,
                                   .max_position_embeddings = 2048});
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 4.0;
  spec.scaling.original_max_position_embeddings = 512;
  return spec;
}

// cos/sin(p * inv_freq) * scaling in long double, from frequencies() (independent of the table).
double reference_value(const RopeSpec& spec, int64_t p, int64_t pair, bool sine) {
  // frequencies() once per spec (the tests' specs differ in these fields).
  static std::string cached_key;
  static Frequencies f;
  const std::string key = spec.name + "/" + std::to_string(spec.theta_base) + "/" + std::to_string(spec.rotary_dim);
  if (cached_key != key) {
    f = frequencies(spec, 0);
    cached_key = key;
  }
  const long double angle = static_cast<long double>(p) * static_cast<long double>(f.inv_freq[pair]);
  return static_cast<double>((sine ? std::sin(angle) : std::cos(angle)) * static_cast<long double>(f.attention_scaling));
}

TEST(EngineExport, VllmIsCatCosSinInTheModelDtypeRoundedOnceFromTheExactValue) {
  const RopeSpec spec = yarn_spec();
  const CosSinTable table(spec, {.storage = Storage::OnTheFly});
  const int64_t pairs = spec.rotary_dim / 2;
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(to_string(dtype));
    const ExportedArray a = export_table(spec, {.format = ExportFormat::Vllm, .max_position = 300, .dtype = dtype});
    EXPECT_EQ(a.tensor_name, "cos_sin_cache");
    EXPECT_EQ(a.dtype, dtype);
    EXPECT_THAT(a.shape, ElementsAre(300, spec.rotary_dim));
    ASSERT_EQ(static_cast<int64_t>(a.bytes.size()), 300 * spec.rotary_dim * dtype_size(dtype));
    std::vector<double> c(pairs), s(pairs);
    std::vector<float> c32(pairs), s32(pairs);
    for (int64_t p = 0; p < 300; ++p) {
      table.row_f64(p, c.data(), s.data());
      table.row(p, c32.data(), s32.data());
      for (int64_t i = 0; i < pairs; ++i) {
        const int64_t at = p * spec.rotary_dim;
        if (dtype == DType::F32) {  // the exact table's float32 values, bit for bit
          ASSERT_EQ(element(a, at + i), static_cast<double>(c32[i])) << p << " " << i;
          ASSERT_EQ(element(a, at + pairs + i), static_cast<double>(s32[i])) << p << " " << i;
        } else {  // one rounding from the double, not through float32
          const auto narrow = dtype == DType::BF16 ? double_to_bf16 : double_to_f16;
          ASSERT_EQ(bits16(a, at + i), narrow(c[i])) << p << " " << i;
          ASSERT_EQ(bits16(a, at + pairs + i), narrow(s[i])) << p << " " << i;
        }
        // Independently: within half an ulp of the dtype (plus the reference's own ~1e-15).
        const double half_ulp = dtype == DType::F32 ? 0x1p-24 : dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;
        const double scale = table.attention_scaling();
        EXPECT_LE(std::abs(element(a, at + i) - reference_value(spec, p, i, false)), half_ulp * scale + 1e-12);
        EXPECT_LE(std::abs(element(a, at + pairs + i) - reference_value(spec, p, i, true)), half_ulp * scale + 1e-12);
      }
    }
  }
}

TEST(EngineExport, FlashInferIsVllmsLayoutInFloat32) {
  const RopeSpec spec = yarn_spec();
  const ExportedArray vllm = export_table(spec, {.format = ExportFormat::Vllm, .max_position = 100, .dtype = DType::F32});
  const ExportedArray fi = export_table(spec, {.format = ExportFormat::FlashInfer, .max_position = 100});
  EXPECT_EQ(fi.dtype, DType::F32);
  EXPECT_EQ(fi.shape, vllm.shape);
  EXPECT_EQ(fi.bytes, vllm.bytes);
  EXPECT_THAT([&] { export_table(spec, {.format = ExportFormat::FlashInfer, .max_position = 100, .dtype = DType::BF16}); },
              ThrowsMessage<Error>(HasSubstr("dtype must be float32 for format flashinfer")));
}

TEST(EngineExport, FlashAttnStacksCosAndSinEachSeqlenByHalfRotaryDim) {
  RopeSpec spec = test::rope_spec({.head_dim = 32, .theta_base = 5e5, .max_position_embeddings = 64});
  const ExportedArray a = export_table(spec, {.format = ExportFormat::FlashAttn, .dtype = DType::BF16});
  EXPECT_THAT(a.shape, ElementsAre(2, 64, 16));  // default rows: max_position_embeddings
  EXPECT_EQ(a.dtype, DType::BF16);
  const CosSinTable table(spec, {.storage = Storage::OnTheFly});
  std::vector<double> c(16), s(16);
  for (int64_t p = 0; p < 64; ++p) {
    table.row_f64(p, c.data(), s.data());
    for (int64_t i = 0; i < 16; ++i) {
      ASSERT_EQ(bits16(a, p * 16 + i), double_to_bf16(c[i]));
      ASSERT_EQ(bits16(a, 64 * 16 + p * 16 + i), double_to_bf16(s[i]));
    }
  }
}

TEST(EngineExport, TransformerEngineAnglesAreDuplicatedHalvesReducedModuloTwoPi) {
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    SCOPED_TRACE(to_string(style));
    RopeSpec spec = test::rope_spec({.head_dim = 16, .theta_base = 10000, .max_position_embeddings = 8, .style = style});
    const int64_t rows = 70000;  // angles far past 2 pi for the fast pairs
    const ExportedArray a = export_table(spec, {.format = ExportFormat::TransformerEngine, .max_position = rows});
    EXPECT_EQ(a.tensor_name, "freqs");
    EXPECT_THAT(a.shape, ElementsAre(rows, 1, 1, 16));
    EXPECT_EQ(a.dtype, DType::F32);
    std::mt19937_64 rng(7);
    for (int n = 0; n < 400; ++n) {
      const int64_t p = n < 8 ? n : static_cast<int64_t>(rng() % rows);
      for (int64_t k = 0; k < 16; ++k) {
        const int64_t pair = style == Style::NeoX ? k % 8 : k / 2;
        const double angle = element(a, p * 16 + k);
        ASSERT_LE(std::abs(angle), std::numbers::pi + 1e-6);
        // cos/sin of the float32 angle: within its rounding (ulp(pi)/2 = 1.2e-7) of the truth.
        EXPECT_NEAR(std::cos(angle), reference_value(spec, p, pair, false), 1.3e-7) << p << " " << k;
        EXPECT_NEAR(std::sin(angle), reference_value(spec, p, pair, true), 1.3e-7) << p << " " << k;
      }
    }
  }
}

TEST(EngineExport, LlamaCppFreqFactorsForLlama3AreTheDefaultOverScaledRatio) {
  const RopeSpec spec = preset("llama-3.1-8b").spec;
  const ExportedArray a = export_table(spec, {.format = ExportFormat::LlamaCppFreqFactors});
  EXPECT_EQ(a.tensor_name, "rope_freqs.weight");
  EXPECT_THAT(a.shape, ElementsAre(64));
  const std::vector<double> unscaled = default_inv_freq(spec);
  const Frequencies f = frequencies(spec, 0);
  for (int64_t i = 0; i < 64; ++i) {
    const float factor = static_cast<float>(element(a, i));
    EXPECT_LE(test::ulp_distance(factor, static_cast<float>(unscaled[i] / f.inv_freq[i])), 1) << i;
  }
  EXPECT_EQ(element(a, 0), 1.0);    // high-frequency pairs kept
  EXPECT_EQ(element(a, 63), 8.0);   // low-frequency pairs interpolated by the factor
  EXPECT_GT(element(a, 32), 1.0);   // the smooth band in between (wavelengths 2048 to 8192)
  EXPECT_LT(element(a, 32), 8.0);
}

TEST(EngineExport, LlamaCppFreqFactorsForLongRopeNeedAFactorSet) {
  const RopeSpec spec = preset("phi-3-mini-128k").spec;
  for (const LongRopeFactorSet set : {LongRopeFactorSet::Short, LongRopeFactorSet::Long}) {
    const ExportedArray a = export_table(spec, {.format = ExportFormat::LlamaCppFreqFactors, .factor_set = set});
    const std::vector<double>& factors =
        set == LongRopeFactorSet::Long ? spec.scaling.long_factor : spec.scaling.short_factor;
    EXPECT_EQ(a.tensor_name, set == LongRopeFactorSet::Long ? "rope_factors_long.weight" : "rope_factors_short.weight");
    ASSERT_THAT(a.shape, ElementsAre(static_cast<int64_t>(factors.size())));
    for (size_t i = 0; i < factors.size(); ++i) EXPECT_EQ(element(a, i), static_cast<double>(static_cast<float>(factors[i])));
  }
  EXPECT_THAT([&] { export_table(spec, {.format = ExportFormat::LlamaCppFreqFactors}); },
              ThrowsMessage<Error>(HasSubstr("factor_set is required for rope_type longrope")));
}

TEST(EngineExport, RefusesWhatAFormatCannotExpressNamingTheArgument) {
  RopeSpec dynamic = test::rope_spec({.name = "dyn"});
  dynamic.scaling.type = ScalingType::Dynamic;
  dynamic.scaling.factor = 2.0;
  EXPECT_THAT([&] { export_table(dynamic, {.format = ExportFormat::Vllm, .dtype = DType::F32}); },
              ThrowsMessage<Error>(HasSubstr("format vllm is a static cache built once, and rope_type dynamic")));
  EXPECT_THAT([&] { export_table(dynamic, {.format = ExportFormat::Vllm, .dtype = DType::F32}); },
              ThrowsMessage<Error>(HasSubstr("vLLM's own dynamic cache keeps the unscaled frequencies")));
  const RopeSpec phi3 = preset("phi-3-mini-128k").spec;
  EXPECT_THAT([&] { export_table(phi3, {.format = ExportFormat::FlashInfer}); },
              ThrowsMessage<Error>(HasSubstr("rope_type longrope switches")));
  RopeSpec mrope_yarn = preset("qwen2-vl-7b").spec;
  mrope_yarn.scaling.type = ScalingType::Yarn;
  mrope_yarn.scaling.factor = 4.0;
  EXPECT_THAT([&] { export_table(mrope_yarn, {.format = ExportFormat::Vllm, .dtype = DType::BF16}); },
              ThrowsMessage<Error>(HasSubstr("MRotaryEmbedding computes YaRN's correction range over 4 x")));
  EXPECT_THAT([&] { export_table(yarn_spec(), {.format = ExportFormat::TransformerEngine}); },
              ThrowsMessage<Error>(HasSubstr("cannot carry attention_scaling")));
  RopeSpec xpos = test::rope_spec();
  xpos.xpos = XPos{};
  EXPECT_THAT([&] { export_table(xpos, {.format = ExportFormat::FlashAttn, .dtype = DType::F16}); },
              ThrowsMessage<Error>(HasSubstr("xPos")));
  const RopeSpec plain = test::rope_spec();
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::Vllm}); },
              ThrowsMessage<Error>(HasSubstr("dtype is required for format vllm")));
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::Vllm, .dtype = DType::F64}); },
              ThrowsMessage<Error>(HasSubstr("dtype must be float32, bfloat16 or float16")));
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::LlamaCppFreqFactors}); },
              ThrowsMessage<Error>(HasSubstr("rope_type default")));
  EXPECT_THAT([&] { export_table(preset("llama-3.1-8b").spec, {.format = ExportFormat::LlamaCppFreqFactors, .max_position = 8}); },
              ThrowsMessage<Error>(HasSubstr("max_position is not read by format llama-cpp-freq-factors")));
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::FlashInfer, .max_position = -1}); },
              ThrowsMessage<Error>(HasSubstr("max_position must be >= 1 (got -1)")));
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::FlashInfer, .max_position = kMaxPosition + 2}); },
              ThrowsMessage<Error>(HasSubstr("max_position must be <=")));
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::FlashInfer, .max_position = kMaxPosition + 1}); },
              ThrowsMessage<Error>(HasSubstr("bytes is more than")));
  RopeSpec no_context = test::rope_spec({.max_position_embeddings = 0});
  EXPECT_THAT([&] { export_table(no_context, {.format = ExportFormat::FlashInfer}); },
              ThrowsMessage<Error>(HasSubstr("max_position must be given")));
  EXPECT_THAT([&] { export_table(plain, {.format = ExportFormat::FlashInfer, .factor_set = LongRopeFactorSet::Long}); },
              ThrowsMessage<Error>(HasSubstr("factor_set is for format llama-cpp-freq-factors only")));
  EXPECT_THAT([&] { export_table(plain, {.format = static_cast<ExportFormat>(99)}); },
              ThrowsMessage<Error>(HasSubstr("format must be one of vllm, flashinfer")));
}

// vLLM's row counts, per class's _compute_cos_sin_cache (src/core/engines/vllm.cpp cites the files):
// L = max_position_embeddings, L0 = the original context, s = the factor.
TEST(EngineExport, VllmCacheRowsAreWhatEachVllmClassBuilds) {
  // Default and Llama 3: L (base.py, llama3_rope.py).
  EXPECT_EQ(vllm_cache_rows(preset("llama-2-7b").spec), 4096);
  EXPECT_EQ(vllm_cache_rows(preset("llama-3.1-8b").spec), 131072);
  // YaRN: ceil(L0 x s) (yarn_scaling_rope.py); Qwen2.5's L is 32768, vLLM builds 4 x 32768.
  EXPECT_EQ(vllm_cache_rows(preset("qwen2.5-7b-yarn").spec), 131072);
  // DeepSeek YaRN: arange(L0 x s) = 4096 x 40 (deepseek_scaling_rope.py).
  EXPECT_EQ(vllm_cache_rows(preset("deepseek-v3").spec), 163840);
  // Linear: ceil(L x s): vLLM reads L as the length before scaling (linear_scaling_rope.py), so
  // Gemma 3's global layers (L 131072, x8) get 2^20 rows.
  const HfRopeConfig gemma = preset("gemma-3-27b");
  const RopeSpec& global = gemma.layer_type_specs.front().second;
  ASSERT_EQ(gemma.layer_type_specs.front().first, "full_attention");
  EXPECT_EQ(vllm_cache_rows(global), 1048576);
  RopeSpec linear = test::rope_spec({.max_position_embeddings = 1000});
  linear.scaling.type = ScalingType::Linear;
  linear.scaling.factor = 2.5;
  EXPECT_EQ(vllm_cache_rows(linear), 2500);
  linear.scaling.factor = 1.0001;
  EXPECT_EQ(vllm_cache_rows(linear), 1001);  // ceil(1000.1): torch.arange of a float length
  // Dynamic NTK: L x s (dynamic_ntk_scaling_rope.py).
  RopeSpec dynamic = test::rope_spec({.max_position_embeddings = 2048});
  dynamic.scaling.type = ScalingType::Dynamic;
  dynamic.scaling.factor = 2.0;
  EXPECT_EQ(vllm_cache_rows(dynamic), 4096);
  // LongRoPE: L0 short rows + L long rows (phi3_long_rope_scaled_rope.py).
  EXPECT_EQ(vllm_cache_rows(preset("phi-3-mini-128k").spec), 4096 + 131072);
  // M-RoPE: 4 x L (mrope.py).
  EXPECT_EQ(vllm_cache_rows(preset("qwen2-vl-7b").spec), 4 * 32768);
  EXPECT_EQ(vllm_cache_rows(test::rope_spec({.max_position_embeddings = 0})), 0);
}

TEST(EngineExport, VllmDefaultRowsFollowVllmAndTheOtherFormatsKeepMaxPositionEmbeddings) {
  // yarn_spec: L 2048, L0 512, x4: vLLM builds 2048 rows; a YaRN spec whose L is the original
  // context (Qwen2.5's recipe) gets L0 x s rows, not L.
  RopeSpec qwen_like = yarn_spec();
  qwen_like.max_position_embeddings = 512;
  const ExportedArray a = export_table(qwen_like, {.format = ExportFormat::Vllm, .dtype = DType::BF16});
  EXPECT_THAT(a.shape, ElementsAre(2048, qwen_like.rotary_dim));
  // The rows past L are the exact table's too.
  const CosSinTable table(qwen_like, {.storage = Storage::OnTheFly});
  std::vector<double> c(24), s(24);
  table.row_f64(2047, c.data(), s.data());
  for (int64_t i = 0; i < 24; ++i) {
    ASSERT_EQ(bits16(a, 2047 * 48 + i), double_to_bf16(c[i]));
    ASSERT_EQ(bits16(a, 2047 * 48 + 24 + i), double_to_bf16(s[i]));
  }
  const ExportedArray fi = export_table(qwen_like, {.format = ExportFormat::FlashInfer});
  EXPECT_THAT(fi.shape, ElementsAre(512, qwen_like.rotary_dim));
  RopeSpec linear = test::rope_spec({.head_dim = 8, .max_position_embeddings = 10});
  linear.scaling.type = ScalingType::Linear;
  linear.scaling.factor = 3.0;
  EXPECT_THAT(export_table(linear, {.format = ExportFormat::Vllm, .dtype = DType::F32}).shape, ElementsAre(30, 8));
  // --max-position still sets the rows.
  EXPECT_THAT(export_table(linear, {.format = ExportFormat::Vllm, .max_position = 7, .dtype = DType::F32}).shape,
              ElementsAre(7, 8));
}

TEST(EngineExport, VllmLongRopeIsTheLongShortCacheShortRowsThenLongRows) {
  // A small LongRoPE spec: L0 64, L 256 (mscale sqrt(1 + ln 4 / ln 64)), distinct short and long lists.
  RopeSpec spec = test::rope_spec({.name = "longrope", .head_dim = 8, .max_position_embeddings = 256});
  spec.scaling.type = ScalingType::LongRope;
  spec.scaling.original_max_position_embeddings = 64;
  spec.scaling.short_factor = {1.0, 1.5, 2.0, 3.0};
  spec.scaling.long_factor = {1.0, 4.0, 16.0, 64.0};
  const ExportedArray a = export_table(spec, {.format = ExportFormat::Vllm, .dtype = DType::F32});
  EXPECT_EQ(a.tensor_name, "long_short_cos_sin_cache");
  ASSERT_THAT(a.shape, ElementsAre(64 + 256, 8));
  const CosSinTable short_table(spec, {.storage = Storage::OnTheFly, .seq_len = 64});
  const CosSinTable long_table(spec, {.storage = Storage::OnTheFly, .seq_len = 65});
  EXPECT_DOUBLE_EQ(short_table.attention_scaling(), std::sqrt(1 + std::log(4.0) / std::log(64.0)));
  std::vector<double> c(4), s(4);
  for (const int64_t row : {0, 1, 63, 64, 65, 200, 319}) {
    const bool is_long = row >= 64;
    (is_long ? long_table : short_table).row_f64(is_long ? row - 64 : row, c.data(), s.data());
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(element(a, row * 8 + i), static_cast<double>(static_cast<float>(c[i]))) << row << " " << i;
      EXPECT_EQ(element(a, row * 8 + 4 + i), static_cast<double>(static_cast<float>(s[i]))) << row << " " << i;
    }
  }
  // Row 64 is the long factors' position 0; row 65 their position 1 (pair 3 turns 64 / 3 times slower).
  EXPECT_EQ(element(a, 64 * 8), static_cast<double>(static_cast<float>(short_table.attention_scaling())));
  EXPECT_NE(element(a, 65 * 8 + 4 + 3), element(a, 1 * 8 + 4 + 3));  // sin of pair 3 at position 1
  // Its rows are fixed; an attention scaling vLLM would not apply is refused.
  EXPECT_THAT([&] { export_table(spec, {.format = ExportFormat::Vllm, .max_position = 100, .dtype = DType::F32}); },
              ThrowsMessage<Error>(HasSubstr("max_position is fixed for format vllm with rope_type longrope")));
  RopeSpec own_factor = spec;
  own_factor.scaling.attention_factor = 1.5;
  EXPECT_THAT([&] { export_table(own_factor, {.format = ExportFormat::Vllm, .dtype = DType::F32}); },
              ThrowsMessage<Error>(HasSubstr("attention scaling 1.5 (factor or attention_factor)")));
}

TEST(EngineExport, FormatNamesRoundTrip) {
  for (const std::string_view name : export_format_names()) {
    const std::optional<ExportFormat> f = parse_export_format(name);
    ASSERT_TRUE(f.has_value()) << name;
    EXPECT_EQ(to_string(*f), name);
  }
  EXPECT_FALSE(parse_export_format("vllm2").has_value());
}

}  // namespace
}  // namespace rotary
