// tests/cli/diagnose_cli_test.cpp: `rotary diagnose` run as a user runs it: .npy samples of a
// buggy or correct implementation (float64, float32, [rows, heads, head_dim]), exit codes 0 / 1 /
// 2, the mismatch text, --json, and bad input named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/npy.hpp"
#include "cli_runner.hpp"
#include "core/json.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/presets.hpp"
#include "rotary/tensor.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test::ScratchDir;

const std::vector<int64_t> kPositions = {0, 1, 9, 70, 600, 5000, 40000, 300000};

npy::Array float64_array(const std::vector<double>& values, std::vector<int64_t> shape) {
  npy::Array array{npy::ElementType::Float64, std::move(shape), std::vector<unsigned char>(values.size() * 8)};
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}
npy::Array float32_array(const std::vector<double>& values, std::vector<int64_t> shape) {
  std::vector<float> narrow(values.begin(), values.end());
  npy::Array array{npy::ElementType::Float32, std::move(shape), std::vector<unsigned char>(values.size() * 4)};
  std::memcpy(array.bytes.data(), narrow.data(), array.bytes.size());
  return array;
}
npy::Array half_array(const std::vector<double>& values, std::vector<int64_t> shape, npy::ElementType type) {
  std::vector<uint16_t> bits;
  for (const double v : values) bits.push_back(type == npy::ElementType::Float16 ? double_to_f16(v) : double_to_bf16(v));
  npy::Array array{type, std::move(shape), std::vector<unsigned char>(values.size() * 2)};
  std::memcpy(array.bytes.data(), bits.data(), array.bytes.size());
  return array;
}
npy::Array int64_array(const std::vector<int64_t>& values) {
  npy::Array array{npy::ElementType::Int64, {static_cast<int64_t>(values.size())},
                   std::vector<unsigned char>(values.size() * 8)};
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

struct Bug {
  bool interleaved = false;  // pairs (2i, 2i+1) instead of the spec's half split
  bool float16_cos_sin = false;
  bool swap_cos_sin = false;  // y = x sin + rotate_half(x) cos
};

// x (random) and y for `rows` vectors of head_dim, each row at kPositions[row / heads], rotated
// by the spec's float64 frequencies with NeoX pairing, or with the bug.
void synthesize(const RopeSpec& spec, int64_t heads, const Bug& bug, std::vector<double>& x, std::vector<double>& y,
                const std::vector<int64_t>& positions = kPositions) {
  const Frequencies f = frequencies(spec, positions.back() + 1);
  const int64_t rows = static_cast<int64_t>(positions.size()) * heads, half = spec.rotary_dim / 2;
  std::mt19937_64 rng(2020);
  std::normal_distribution<double> normal;
  x.resize(static_cast<size_t>(rows * spec.head_dim));
  for (double& value : x) value = normal(rng);
  y = x;
  const auto f16 = [](double v) {
    int e = 0;
    const double m = std::frexp(v, &e);
    return v == 0 ? 0.0 : std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const double p = static_cast<double>(positions[static_cast<size_t>(r / heads)]);
    for (int64_t i = 0; i < half; ++i) {
      double c = f.attention_scaling * std::cos(p * f.inv_freq[static_cast<size_t>(i)]);
      double s = f.attention_scaling * std::sin(p * f.inv_freq[static_cast<size_t>(i)]);
      if (bug.float16_cos_sin) {
        c = f16(c);
        s = f16(s);
      }
      if (bug.swap_cos_sin) std::swap(c, s);
      const int64_t a = bug.interleaved ? 2 * i : i, b = bug.interleaved ? 2 * i + 1 : i + half;
      const size_t base = static_cast<size_t>(r * spec.head_dim);
      y[base + a] = x[base + a] * c - x[base + b] * s;
      y[base + b] = x[base + b] * c + x[base + a] * s;
    }
  }
}

test::CliResult run(const std::string& arguments) { return test::run_cli(arguments); }

TEST(DiagnoseCli, NamesInterleavedPairingOfAHalfSplitModelAndExitsOne) {
  ScratchDir dir("rotary_diagnose_pairing");
  std::vector<double> x, y;
  synthesize(preset("llama-3.1-8b").spec, 1, {.interleaved = true}, x, y);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  const std::string files = "--x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " + (dir / "p.npy");
  const test::CliResult r = run("diagnose " + files + " --preset llama-3.1-8b");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("pairing            interleaved: (x[2i], x[2i+1])"));
  EXPECT_THAT(r.out, HasSubstr("nearest preset     llama-3.1-8b (llama3; matches"));
  EXPECT_THAT(r.out, HasSubstr("Against llama-3.1-8b (preset llama-3.1-8b): 1 mismatch\n  pairing: your implementation "
                               "pairs (x[2i], x[2i+1]) (interleaved, GPT-J); this model pairs (x[i], x[i+64]) "
                               "(half-split, NeoX)\n"));
  // No target: the findings alone, exit 0.
  const test::CliResult alone = run("diagnose " + files);
  EXPECT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_THAT(alone.out, Not(HasSubstr("Against")));
  // --json: the mismatches as data.
  const test::CliResult js = run("diagnose " + files + " --preset llama-3.1-8b --json");
  EXPECT_EQ(js.exit_code, 1) << js.err;
  const json::Value doc = json::parse(js.out, "diagnose --json");
  EXPECT_EQ(doc.find("pairing")->as_string(), "interleaved");
  EXPECT_FALSE(doc.find("matches")->as_bool());
  ASSERT_EQ(doc.find("mismatches")->as_array().size(), 1u);
  EXPECT_EQ(doc.find("mismatches")->as_array()[0].find("aspect")->as_string(), "pairing");
}

TEST(DiagnoseCli, NamesFloat16CosSin) {
  ScratchDir dir("rotary_diagnose_f16");
  std::vector<double> x, y;
  synthesize(preset("qwen2.5-7b-yarn").spec, 1, {.float16_cos_sin = true}, x, y);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  const test::CliResult r = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                (dir / "p.npy") + " --preset qwen2.5-7b-yarn");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  precision: your implementation computes its angles or cos/sin in float16"));
}

TEST(DiagnoseCli, CorrectFloat32HeadsMatchAndExitZero) {
  ScratchDir dir("rotary_diagnose_heads");
  std::vector<double> x, y;
  const RopeSpec spec = preset("gpt-neox-20b").spec;
  synthesize(spec, 4, {}, x, y);
  npy::write(dir / "x.npy", float32_array(x, {8, 4, 96}));
  npy::write(dir / "y.npy", float32_array(y, {8, 4, 96}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  const test::CliResult r = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                (dir / "p.npy") + " --preset gpt-neox-20b");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Diagnosis of 32 rows (8 distinct positions, up to 300000), head_dim 96"));
  EXPECT_THAT(r.out, HasSubstr("rotated dims       [0, 24) (24 dims), 72 passed through"));
  EXPECT_THAT(r.out, HasSubstr("): no mismatch"));
}

// Storage rounding is not an implementation's defect: float16 and bfloat16 samples of a correct
// implementation match (the thresholds scale with the storage's unit roundoff).
TEST(DiagnoseCli, CorrectFloat16AndBfloat16SamplesMatch) {
  ScratchDir dir("rotary_diagnose_half");
  std::vector<double> x, y;
  synthesize(preset("llama-3.1-8b").spec, 1, {}, x, y);
  npy::write(dir / "p.npy", int64_array(kPositions));
  for (const npy::ElementType type : {npy::ElementType::Float16, npy::ElementType::BFloat16}) {
    SCOPED_TRACE(std::string(npy::to_string(type)));
    npy::write(dir / "x.npy", half_array(x, {8, 128}, type));
    npy::write(dir / "y.npy", half_array(y, {8, 128}, type));
    const test::CliResult r = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                  (dir / "p.npy") + " --preset llama-3.1-8b");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("pairing            half-split"));
    EXPECT_THAT(r.out, HasSubstr("): no mismatch"));
  }
}

// y that is not x rotated pair by pair is refused: exit 2 and the reason, no findings printed.
TEST(DiagnoseCli, RefusesYThatIsNotARotation) {
  ScratchDir dir("rotary_diagnose_not_rotation");
  std::vector<double> x, y;
  synthesize(preset("llama-3.1-8b").spec, 1, {}, x, y);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  std::vector<double> twice = x, zero(x.size(), 0.0), noise = x;
  for (double& value : twice) value *= 2.0;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  for (double& value : noise) value = normal(rng);
  npy::write(dir / "twice.npy", float64_array(twice, {8, 128}));
  npy::write(dir / "zero.npy", float64_array(zero, {8, 128}));
  npy::write(dir / "noise.npy", float64_array(noise, {8, 128}));
  const struct {
    std::string y, message;
  } cases[] = {
      {"twice.npy", "diagnose: y is not a rotation of x by a position-dependent angle: every pair has the same angle "
                    "at all 8 distinct positions (y = 2 * x: nothing rotates)"},
      {"zero.npy", "diagnose: y is not a rotation of x: y is 0 at all 128 changed elements in all 8 rows"},
      {"noise.npy", "diagnose: y is not a rotation of x pair by pair: no pairing keeps each pair's norm ratio"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.y);
    const test::CliResult r = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / c.y) + " --positions " +
                                  (dir / "p.npy") + " --preset llama-3.1-8b");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.out, Not(HasSubstr("nearest preset")));
  }
}

// Eight sorted random positions in [0, 8192) (no step of 1): the interleaved-pairing bug is the
// only mismatch; what the positions cannot pin down reads "cannot tell", never a false value.
TEST(DiagnoseCli, RandomPositionsNameNoFalseMismatch) {
  ScratchDir dir("rotary_diagnose_random");
  const std::vector<int64_t> positions = {412, 1337, 2050, 3001, 4444, 5913, 7000, 8100};
  std::vector<double> x, y;
  synthesize(preset("llama-3.1-8b").spec, 1, {.interleaved = true}, x, y, positions);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(positions));
  const test::CliResult r = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                (dir / "p.npy") + " --preset llama-3.1-8b");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("): 1 mismatch\n  pairing: your implementation pairs (x[2i], x[2i+1])"));
  for (const char* wrong : {"position_offset:", "precision:", "inv_freq:", "theta:", "float16", "backward"}) {
    EXPECT_THAT(r.out, Not(HasSubstr(wrong)));
  }
  // Positions 0, 4, 8, ...: theta and theta + pi/2 fit alike, so theta and the presets are untold.
  const std::vector<int64_t> aliased = {0, 4, 8, 12, 16, 20, 24, 28};
  synthesize(preset("llama-3.1-8b").spec, 1, {.interleaved = true}, x, y, aliased);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(aliased));
  const test::CliResult a = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                (dir / "p.npy") + " --preset llama-3.1-8b --json");
  const json::Value doc = json::parse(a.out, "diagnose --json");
  EXPECT_TRUE(doc.find("fitted_theta_base")->is_null());
  EXPECT_EQ(doc.find("nearest_preset")->as_string(), "");
  bool theta_untold = false;
  for (const json::Value& property : doc.find("cannot_tell")->as_array()) theta_untold |= property.as_string() == "theta";
  EXPECT_TRUE(theta_untold) << a.out;
  for (const json::Value& m : doc.find("mismatches")->as_array()) {
    EXPECT_NE(m.find("aspect")->as_string(), "inv_freq") << a.out;
    EXPECT_NE(m.find("aspect")->as_string(), "theta") << a.out;
  }
  const test::CliResult text = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                   (dir / "p.npy") + " --preset llama-3.1-8b");
  EXPECT_THAT(text.out, HasSubstr("  frequencies        cannot tell from these positions; use positions 0..7 or more "
                                  "rows ("));
  EXPECT_THAT(text.out, Not(HasSubstr("nearest preset")));
  EXPECT_THAT(text.out, HasSubstr("not compared: theta"));
}

// A correct implementation sampled at aliased positions (0, 4, 8, ...): nothing differs in what
// the samples show, but theta was not compared, so the exit status is 3, not a pass (0). With
// positions that pin everything down the same implementation exits 0.
TEST(DiagnoseCli, ExitsThreeWhenSomethingWasNotCompared) {
  ScratchDir dir("rotary_diagnose_uncompared");
  const std::vector<int64_t> aliased = {0, 4, 8, 12, 16, 20, 24, 28};
  std::vector<double> x, y;
  synthesize(preset("llama-3.1-8b").spec, 1, {}, x, y, aliased);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(aliased));
  const std::string command = "diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                              (dir / "p.npy") + " --preset llama-3.1-8b";
  const test::CliResult r = run(command);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("): no mismatch in what these samples show\n  not compared: theta"));
  EXPECT_EQ(run(command + " --json").exit_code, 3);
  // Without a target nothing is compared, and the findings alone exit 0.
  EXPECT_EQ(run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " + (dir / "p.npy"))
                .exit_code,
            0);
  synthesize(preset("llama-3.1-8b").spec, 1, {}, x, y);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  const test::CliResult clean = run(command);
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  EXPECT_THAT(clean.out, HasSubstr("): no mismatch\n"));
}

TEST(DiagnoseCli, NamesSwappedCosAndSin) {
  ScratchDir dir("rotary_diagnose_swap");
  std::vector<double> x, y;
  synthesize(preset("llama-3.1-8b").spec, 1, {.swap_cos_sin = true}, x, y);
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  const test::CliResult r = run("diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                                (dir / "p.npy") + " --preset llama-3.1-8b");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  cos and sin        swapped: every pair turns by pi/2 - p*theta"));
  EXPECT_THAT(r.out, HasSubstr("): 1 mismatch\n  cos_sin: your implementation swaps cos and sin"));
  EXPECT_THAT(r.out, Not(HasSubstr("position_offset:")));
  EXPECT_THAT(r.out, Not(HasSubstr("direction:")));
}

// A per-layer-type target (Gemma 3) is compared with one layer type, named with --layer-type;
// without it the command refuses naming the choices rather than picking one.
TEST(DiagnoseCli, PerLayerTypeTargetNeedsLayerTypeAndNamesIt) {
  ScratchDir dir("rotary_diagnose_layer_types");
  const HfRopeConfig gemma = preset("gemma-3-27b");
  const RopeSpec* sliding = nullptr;
  for (const auto& [name, spec] : gemma.layer_type_specs) {
    if (name == "sliding_attention") sliding = &spec;
  }
  ASSERT_NE(sliding, nullptr);
  std::vector<double> x, y;
  synthesize(*sliding, 1, {}, x, y);  // theta 10000, no scaling: the local layers
  npy::write(dir / "x.npy", float64_array(x, {8, 128}));
  npy::write(dir / "y.npy", float64_array(y, {8, 128}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  const std::string base = "diagnose --x " + (dir / "x.npy") + " --y " + (dir / "y.npy") + " --positions " +
                           (dir / "p.npy") + " --preset gemma-3-27b";
  const test::CliResult none = run(base);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("diagnose: preset gemma-3-27b gives each layer type its own RoPE: choose one with "
                                  "--layer-type full_attention or sliding_attention (got none)"));
  EXPECT_TRUE(none.out.empty());
  const test::CliResult local = run(base + " --layer-type sliding_attention");
  EXPECT_EQ(local.exit_code, 0) << local.out << local.err;
  EXPECT_THAT(local.out, HasSubstr("(preset gemma-3-27b, layer type sliding_attention): no mismatch"));
  const test::CliResult global = run(base + " --layer-type full_attention --json");
  EXPECT_EQ(global.exit_code, 1) << global.out << global.err;  // theta 1e6 and linear x8 there
  const json::Value doc = json::parse(global.out, "diagnose --json");
  EXPECT_EQ(doc.find("layer_type")->as_string(), "full_attention");
  EXPECT_FALSE(doc.find("matches")->as_bool());
}

TEST(DiagnoseCli, BadInputIsAnErrorNamingTheArgument) {
  ScratchDir dir("rotary_diagnose_bad");
  std::vector<double> x, y;
  synthesize(preset("gpt-neox-20b").spec, 1, {}, x, y);
  npy::write(dir / "x.npy", float64_array(x, {8, 96}));
  npy::write(dir / "y.npy", float64_array(y, {8, 96}));
  npy::write(dir / "y4.npy", float64_array(std::vector<double>(y.begin(), y.begin() + 4 * 96), {4, 96}));
  std::vector<double> nan_y = y;
  nan_y[200] = std::nan("");
  npy::write(dir / "ynan.npy", float64_array(nan_y, {8, 96}));
  npy::write(dir / "p.npy", int64_array(kPositions));
  npy::write(dir / "same.npy", int64_array(std::vector<int64_t>(8, 7)));
  npy::write(dir / "p3.npy", int64_array({0, 1, 2}));
  const std::string x_arg = "diagnose --x " + (dir / "x.npy");
  const struct {
    std::string arguments, message;
  } cases[] = {
      {x_arg + " --y " + (dir / "y4.npy") + " --positions " + (dir / "p.npy"),
       "diagnose: --y must have the shape of --x, (8, 96) (got (4, 96))"},
      {x_arg + " --y " + (dir / "ynan.npy") + " --positions " + (dir / "p.npy"),
       "diagnose: y must be finite (got nan at row 2, column 8)"},
      {x_arg + " --y " + (dir / "y.npy") + " --positions " + (dir / "same.npy"),
       "positions must hold at least 2 distinct values to separate theta from the offset (got all 8 rows at position 7)"},
      {x_arg + " --y " + (dir / "y.npy") + " --positions " + (dir / "p3.npy"),
       "diagnose: --positions must be [rows] = (8,) to match --x (8, 96) (got (3,))"},
      {x_arg + " --y " + (dir / "y.npy"), "diagnose: --positions is required"},
      {x_arg + " --y " + (dir / "y.npy") + " --positions " + (dir / "p.npy") + " --preset llama-3.1-7b",
       "did you mean llama-3.1-8b?"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arguments);
    const test::CliResult r = run(c.arguments);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace rotary
