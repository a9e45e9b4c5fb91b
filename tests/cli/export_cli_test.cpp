// tests/cli/export_cli_test.cpp: `rotary export` run as a user runs it: the .npy it writes (shape,
// dtype, values against the library's export_table()), its message, and bad input named with no
// file left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "cli/npy.hpp"
#include "cli_runner.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/presets.hpp"

namespace rotary {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test::ScratchDir;

TEST(ExportCli, WritesEachFormatAsTheLibraryBuildsIt) {
  ScratchDir dir("rotary_export_cli");
  const RopeSpec spec = preset("llama-3.1-8b").spec;
  struct Case {
    std::string flags;
    ExportOptions options;
    npy::ElementType type;
  };
  const Case cases[] = {
      {"--format vllm --dtype bfloat16 --max-position 40",
       {.format = ExportFormat::Vllm, .max_position = 40, .dtype = DType::BF16}, npy::ElementType::BFloat16},
      {"--format flashinfer --max-position 40", {.format = ExportFormat::FlashInfer, .max_position = 40},
       npy::ElementType::Float32},
      {"--format flash-attn --dtype float16 --max-position 40",
       {.format = ExportFormat::FlashAttn, .max_position = 40, .dtype = DType::F16}, npy::ElementType::Float16},
      {"--format transformer-engine --max-position 40",
       {.format = ExportFormat::TransformerEngine, .max_position = 40}, npy::ElementType::Float32},
      {"--format llama-cpp-freq-factors", {.format = ExportFormat::LlamaCppFreqFactors}, npy::ElementType::Float32},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const std::string out = dir / "table.npy";
    const test::CliResult r = test::run_cli("export --preset llama-3.1-8b " + c.flags + " -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("rotary: wrote " + out));
    const npy::Array array = npy::read(out);
    const ExportedArray expected = export_table(spec, c.options);
    EXPECT_EQ(array.type, c.type);
    EXPECT_EQ(array.shape, expected.shape);
    EXPECT_EQ(array.bytes, expected.bytes);
  }
  const npy::Array vllm = npy::read(dir / "table.npy");  // the last: freq factors
  EXPECT_THAT(vllm.shape, ElementsAre(64));
}

TEST(ExportCli, RefusesBadInputNamingTheFlagAndWritesNothing) {
  ScratchDir dir("rotary_export_cli_bad");
  const std::string out = dir / "t.npy";
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"--format vllm", "--dtype is required for --format vllm"},
      {"--format vllm --dtype float64", "--dtype must be float32, bfloat16 or float16 (got \"float64\")"},
      {"--format vulkan --dtype float32", "--format must be one of vllm, flashinfer, flash-attn, transformer-engine, "
                                          "llama-cpp-freq-factors (got \"vulkan\")"},
      {"--dtype float32", "--format is required"},
      {"--format flashinfer --max-position 0", "--max-position"},
      {"--format flashinfer --factor-set medium", "--factor-set must be short or long"},
      {"--format llama-cpp-freq-factors --max-position 9", "--max-position is not read by --format llama-cpp-freq-factors"},
      {"--format transformer-engine --preset qwen2.5-7b-yarn", "cannot carry attention_scaling"},
      {"--format flashinfer --preset phi-3-mini-128k", "rope_type longrope switches"},
      {"--format llama-cpp-freq-factors --preset phi-3-mini-128k", "--factor-set is required for rope_type longrope"},
      {"--format flashinfer --dtype bfloat16", "--dtype must be float32 for --format flashinfer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const test::CliResult r = test::run_cli("export " + c.args + " -o " + out);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_TRUE(dir.names().empty());
  }
  const test::CliResult no_output = test::run_cli("export --format flashinfer");
  EXPECT_EQ(no_output.exit_code, 2);
  EXPECT_THAT(no_output.err, HasSubstr("-o FILE.npy is required"));
  // An unwritable directory: an error naming the path, nothing written.
  const test::CliResult unwritable = test::run_cli("export --format flashinfer -o " + dir / "missing/t.npy");
  EXPECT_EQ(unwritable.exit_code, 2);
  EXPECT_THAT(unwritable.err, HasSubstr("missing/t.npy"));
  EXPECT_TRUE(dir.names().empty());
}

TEST(ExportCli, LongRopeFactorSetsWriteTheirList) {
  ScratchDir dir("rotary_export_cli_longrope");
  const RopeSpec spec = preset("phi-3-mini-128k").spec;
  const test::CliResult r = test::run_cli("export --preset phi-3-mini-128k --format llama-cpp-freq-factors "
                                          "--factor-set long -o " + dir / "long.npy");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rope_factors_long.weight"));
  const npy::Array a = npy::read(dir / "long.npy");
  ASSERT_EQ(a.size(), static_cast<int64_t>(spec.scaling.long_factor.size()));
  for (size_t i = 0; i < spec.scaling.long_factor.size(); ++i) {
    float v;
    std::memcpy(&v, a.bytes.data() + 4 * i, 4);
    EXPECT_EQ(v, static_cast<float>(spec.scaling.long_factor[i]));
  }
}

}  // namespace
}  // namespace rotary
