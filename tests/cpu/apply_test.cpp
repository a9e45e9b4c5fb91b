// tests/cpu/apply_test.cpp: the fast CPU apply() (Highway SIMD, threads) against the float64
// reference, on every compiled SIMD target.
//
// The main test runs random, seeded calls (random_calls.hpp: the families, the configurations,
// and their comparison with the reference, tolerances derived there) on every target; the others
// are targeted: thread counts, large streamed calls, concurrency, in place, bad input, NaN and
// Inf, bf16 / f16 rounding, head orders, decode calls, table growth, head strides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <tuple>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "cpu/kernels.hpp"  // cpu::set_max_head_groups: both head orders on every machine
#include "cpu/storage.hpp"  // bits16::bf16_round_bits
#include "tests/cpu/random_calls.hpp"

namespace rotary {
namespace {

using reference::TableValues;
using ::testing::ContainerEq;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StrEq;
using ::testing::ThrowsMessage;

using namespace random_calls;  // NOLINT: the tests are written in the generator's terms

// ---- tests --------------------------------------------------------------------------------------

constexpr int kFamiliesPerTarget = 100;
constexpr int kConfigsPerFamily = 20;

TEST(ApplyCpu, MatchesReferenceOnRandomConfigsForEveryTarget) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t target_seed = seed_of(target);
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(target_seed));
    const ForcedTarget forced(target);
    ASSERT_EQ(current_cpu_target(), target);
    int failing = 0;
    int64_t checked = 0;
    for (int f = 0; f < kFamiliesPerTarget && failing < 10; ++f) {
      const Family family = draw_family(target_seed * 1000 + static_cast<uint64_t>(f));
      SCOPED_TRACE(family.text);
      ASSERT_NO_THROW(validate(family.spec));
      // One table per family, shared by its configurations: the first call grows a stored table,
      // later calls grow it further or read existing rows.
      const CosSinTable table(family.spec, family.table_options);
      for (int j = 0; j < kConfigsPerFamily && failing < 10; ++j) {
        const Config config = draw_config(family, family.seed * 100 + static_cast<uint64_t>(j));
        SCOPED_TRACE(config.describe());
        const std::string problems = run_and_check(config, table);
        ++checked;
        if (!problems.empty()) {
          ADD_FAILURE() << "apply() differs from reference::apply on " << target << ":\n" << problems;
          ++failing;
        }
      }
    }
    if (failing >= 10) ADD_FAILURE() << "stopped " << target << " after 10 failing configurations";
    if (failing == 0) {
      EXPECT_EQ(checked, kFamiliesPerTarget * kConfigsPerFamily);
    }
  }
}

// Threads split the work, never the arithmetic: 1, 2 and 3 threads give the same bytes.
TEST(ApplyCpu, BitwiseIdenticalForAnyThreadCount) {
  const SavedThreadCount saved;
  struct Case {
    std::string name;
    Family family;
    Config config;
  };
  std::vector<Case> cases;
  {
    Case one{"f32 bshd 1x512x8x128 neox, k 2 heads", family_of(text_spec(128, Style::NeoX)), {}};
    cases.push_back(std::move(one));
    Case two{"bf16 bshd 1x512x8x128 gptj yarn, k 8 heads, in place", {}, {}};
    RopeSpec yarn = text_spec(128, Style::GPTJ);
    yarn.scaling.type = ScalingType::Yarn;
    yarn.scaling.factor = 4.0;
    yarn.scaling.original_max_position_embeddings = 4096;
    yarn.max_position_embeddings = 16384;
    two.family = family_of(yarn);
    cases.push_back(std::move(two));
    Case three{"f16 thd 700 tokens x 4 heads x 96, mrope interleaved, rotary_dim 64 at offset 16, strided", {}, {}};
    RopeSpec mrope = text_spec(64, Style::NeoX);
    mrope.axes = PositionAxes::MRope;
    mrope.mrope = {{12, 10, 10}, MRopeAssignment::Interleaved};
    TableOptions on_the_fly;
    on_the_fly.storage = Storage::OnTheFly;
    three.family = family_of(mrope, on_the_fly);
    cases.push_back(std::move(three));
  }
  cases[0].config = plain_config(cases[0].family, Layout::BSHD, 1, 512, 8, 2, 128, DType::F32);
  cases[1].config = plain_config(cases[1].family, Layout::BSHD, 1, 512, 8, 8, 128, DType::BF16);
  cases[1].config.in_place = true;
  cases[2].config = plain_config(cases[2].family, Layout::THD, 1, 700, 4, 2, 96, DType::F16);
  cases[2].config.cu_seqlens = {0, 1, 300, 300, 700};
  cases[2].config.options.rotary_offset = 16;
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& test_case = cases[i];
    Config& c = test_case.config;
    c.family = &test_case.family;
    c.seed = 31000 + i;
    Rng rng(c.seed);
    c.source = Source::PerToken;
    c.per_token.resize(static_cast<size_t>(streams_of(test_case.family.spec) * c.tokens()));
    for (int64_t& p : c.per_token) p = rng.uniform(0, i == 2 ? kMaxPosition : 4000);
    plan_tensors(c, i == 2 ? &rng : nullptr);
  }
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name + "\n" + test_case.config.describe());
    const Config& c = test_case.config;
    const CosSinTable table(test_case.family.spec, test_case.family.table_options);
    const Buffers initial = make_buffers(c);
    std::vector<Buffers> results;
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      ASSERT_EQ(num_threads(), threads);
      Buffers buffers = initial;
      const std::optional<std::string> error = run(c, table, buffers, true);
      ASSERT_FALSE(error.has_value()) << *error;
      results.push_back(std::move(buffers));
    }
    for (size_t n = 1; n < results.size(); ++n) {
      for (size_t b = 0; b < initial.size(); ++b) {
        EXPECT_TRUE(results[n][b] == results[0][b]) << n + 1 << " threads differ from 1 thread in buffer " << b;
      }
    }
    // And the result is right.
    set_num_threads(2);
    const std::string problems = run_and_check(c, table, &initial);
    EXPECT_TRUE(problems.empty()) << problems;
  }
}

// Re-strides a plain BSHD view so that its heads are `head_stride` elements apart (tokens
// contiguous), for heads at chosen alignments.
void set_head_stride(Config& c, ViewPlan& plan, int64_t head_stride) {
  plan.stride = {plan.extent[kSeq] * plan.extent[kHeads] * head_stride, plan.extent[kHeads] * head_stride, head_stride, 1};
  c.buffer_elements[static_cast<size_t>(plan.buffer)] =
      plan.index(plan.extent[0] - 1, plan.extent[1] - 1, plan.extent[2] - 1, plan.extent[3] - 1) + 1;
  c.placement += "(" + std::string(&plan == &c.q_out ? "q_out" : "a view") + " re-strided: heads " +
                 std::to_string(head_stride) + " elements apart)\n";
}

// Outputs of 16 MiB or more are written with non-temporal stores where both NeoX halves of a
// head are vector-aligned, ordinary stores elsewhere: the same values either way, on every target.
TEST(ApplyCpu, MatchesReferenceOnLargeStreamedCallsForEveryTarget) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  const uint64_t seed = 35000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  struct Case {
    Family family;
    Config config;
  };
  std::vector<Case> cases(2);
  // f32, 2048 tokens x 16 heads x 128: a 16 MiB output, every head aligned.
  cases[0].family = family_of(text_spec(128, Style::NeoX));
  cases[0].config = plain_config(cases[0].family, Layout::BSHD, 1, 2048, 16, 0, 128, DType::F32);
  cases[0].config.offsets = {rng.uniform(0, 9000)};
  // bf16, 4096 tokens x 16 heads x 128, rotary_dim 64 at offset 32 (pass-through copies on both
  // sides), k 4 heads; q_out heads 136 elements apart, so that their alignment alternates.
  cases[1].family = family_of(text_spec(64, Style::NeoX));
  cases[1].config = plain_config(cases[1].family, Layout::BSHD, 1, 4096, 16, 4, 128, DType::BF16);
  cases[1].config.options.rotary_offset = 32;
  cases[1].config.offsets = {rng.uniform(0, 7000)};
  // f16, 2048 tokens x 32 heads x 128 (16 MiB): the F16C conversions of the AVX2 / AVX3 targets
  // streamed, against the integer conversions of the others and the reference.
  cases.push_back({});
  cases[2].family = family_of(text_spec(128, Style::NeoX));
  cases[2].config = plain_config(cases[2].family, Layout::BSHD, 1, 2048, 32, 8, 128, DType::F16);
  cases[2].config.offsets = {rng.uniform(0, 9000)};
  // Calls this large are memory-bound, and the kernels interleave q and k heads by GQA group
  // (rotate_kernels-inl.h, RotateTokenImpl). In place f32, q 12 / k 4 heads (3 q heads a group: a
  // pair and a single), 17 MiB.
  cases.push_back({});
  cases[3].family = family_of(text_spec(128, Style::NeoX));
  cases[3].config = plain_config(cases[3].family, Layout::BSHD, 2, 1100, 12, 4, 128, DType::F32);
  cases[3].config.in_place = true;
  cases[3].config.offsets = {rng.uniform(0, 5000), rng.uniform(0, 5000)};
  // bf16 GPT-J (never streamed) out of place, q 10 / k 2 heads, head_dim 96 with rotary_dim 80
  // (odd vector counts, scalar tails, pass-through copies), THD.
  cases.push_back({});
  cases[4].family = family_of(text_spec(80, Style::GPTJ));
  cases[4].config = plain_config(cases[4].family, Layout::THD, 1, 9000, 10, 2, 96, DType::BF16);
  cases[4].config.cu_seqlens = {0, 4000, 9000};
  cases[4].config.offsets = {rng.uniform(0, 5000), rng.uniform(0, 5000)};
  // xPos: q and k take different cos/sin rows, so no interleaving; f32 streamed, q 8 / k 8 heads.
  cases.push_back({});
  RopeSpec xpos = text_spec(128, Style::NeoX);
  xpos.xpos = XPos{512.0};
  cases[5].family = family_of(xpos);
  cases[5].config = plain_config(cases[5].family, Layout::BSHD, 1, 2100, 8, 8, 128, DType::F32);
  cases[5].config.offsets = {rng.uniform(0, 3000)};
  // f32 GPT-J streamed (interleaved in registers on SSSE3/SSE4/AVX2, StoreInterleaved2 through
  // the cache on the others), q 16 / k 4 heads, 21 MB.
  cases.push_back({});
  cases[6].family = family_of(text_spec(128, Style::GPTJ));
  cases[6].config = plain_config(cases[6].family, Layout::BSHD, 1, 2048, 16, 4, 128, DType::F32);
  cases[6].config.offsets = {rng.uniform(0, 9000)};
  for (size_t i = 0; i < cases.size(); ++i) {
    Config& c = cases[i].config;
    c.family = &cases[i].family;
    c.seed = seed + i;
    c.options.direction = rng.coin() ? Direction::Forward : Direction::Backward;
    c.source = Source::SequenceOffsets;
    plan_tensors(c, nullptr);
    if (i == 1) set_head_stride(c, c.q_out, 136);
  }
  for (const Case& test_case : cases) {
    const Config& c = test_case.config;
    SCOPED_TRACE(c.describe());
    const CosSinTable table(test_case.family.spec, test_case.family.table_options);
    // The inputs and the reference once; apply() on every target.
    const Buffers initial = make_buffers(c);
    Buffers ref = initial;
    const std::optional<std::string> ref_error = run(c, table, ref, false);
    ASSERT_FALSE(ref_error.has_value()) << *ref_error;
    for (const std::string& target : targets) {
      SCOPED_TRACE("target " + target);
      const ForcedTarget forced(target);
      Buffers fast = initial;
      const std::optional<std::string> error = run(c, table, fast, true);
      ASSERT_FALSE(error.has_value()) << *error;
      Problems problems;
      check_results(c, table, initial, fast, ref, problems);
      EXPECT_TRUE(problems.empty()) << problems.str();
    }
  }
}

// Concurrent callers share the thread pool (one call at a time runs on it, the others wait)
// and a stored table that each of them grows: every result is still right.
TEST(ApplyCpu, ConcurrentCallersShareThePoolAndAGrowingTable) {
  const SavedThreadCount saved;
  set_num_threads(2);
  const uint64_t seed = 36000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Family family = family_of(text_spec(64, Style::NeoX));
  const CosSinTable shared(family.spec, family.table_options);  // grown by the concurrent calls
  const CosSinTable own(family.spec, family.table_options);     // for the reference
  constexpr size_t kCallers = 3;
  std::vector<Config> configs;
  std::vector<Buffers> initial, ref;
  for (size_t i = 0; i < kCallers; ++i) {
    // 1024 tokens x (8 + 2) heads x 64: large enough for the pool; positions 500 + 3000 i + s.
    Config c = plain_config(family, Layout::BSHD, 1, 1024, 8, 2, 64, i == 1 ? DType::BF16 : DType::F32);
    c.seed = seed + i;
    c.source = Source::SequenceOffsets;
    c.offsets = {3000 * static_cast<int64_t>(i) + 500};
    plan_tensors(c, nullptr);
    initial.push_back(make_buffers(c));
    Buffers r = initial.back();
    ASSERT_FALSE(run(c, own, r, false).has_value());
    ref.push_back(std::move(r));
    configs.push_back(std::move(c));
  }
  std::vector<Buffers> fast(kCallers);
  std::vector<std::string> errors(kCallers);
  std::vector<std::thread> callers;
  for (size_t i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      for (int repeat = 0; repeat < 3; ++repeat) {
        Buffers buffers = initial[i];
        if (const std::optional<std::string> error = run(configs[i], shared, buffers, true)) errors[i] = *error;
        fast[i] = std::move(buffers);
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (size_t i = 0; i < kCallers; ++i) {
    SCOPED_TRACE(configs[i].describe());
    EXPECT_EQ(errors[i], "");
    Problems problems;
    check_results(configs[i], own, initial[i], fast[i], ref[i], problems);
    EXPECT_TRUE(problems.empty()) << problems.str();
  }
}

// In place (q_out == q, k_out == k) writes the same bits as out of place into other buffers.
TEST(ApplyCpu, InPlaceEqualsOutOfPlace) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t target_seed = seed_of(target) + 7;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(target_seed));
    const ForcedTarget forced(target);
    int failing = 0;
    for (int f = 0; f < 20 && failing < 5; ++f) {
      const Family family = draw_family(target_seed * 1000 + static_cast<uint64_t>(f));
      SCOPED_TRACE(family.text);
      const CosSinTable table(family.spec, family.table_options);
      for (int j = 0; j < 10 && failing < 5; ++j) {
        const Config c = draw_config(family, family.seed * 100 + static_cast<uint64_t>(j), {true});
        SCOPED_TRACE(c.describe());
        const Buffers initial = make_buffers(c);
        Buffers out_of_place = initial, in_place = initial;
        const std::optional<std::string> error = run(c, table, out_of_place, true);
        ASSERT_FALSE(error.has_value()) << *error;
        Config in_place_config = c;
        in_place_config.q_out = c.q;
        in_place_config.k_out = c.k;
        const std::optional<std::string> in_place_error = run(in_place_config, table, in_place, true);
        ASSERT_FALSE(in_place_error.has_value()) << *in_place_error;
        Problems problems;
        for (const bool is_q : {true, false}) {
          const ViewPlan& in = is_q ? c.q : c.k;
          const ViewPlan& out = is_q ? c.q_out : c.k_out;
          if (!in.present()) continue;
          const unsigned char* a = out_of_place[static_cast<size_t>(out.buffer)].data();
          const unsigned char* b = in_place[static_cast<size_t>(in.buffer)].data();
          in.for_each([&](int64_t bb, int64_t s, int64_t h, int64_t d) {
            if (std::memcmp(a + out.index(bb, s, h, d) * dtype_size(out.dtype), b + in.index(bb, s, h, d) * dtype_size(in.dtype),
                            static_cast<size_t>(dtype_size(in.dtype))) != 0) {
              problems.add(std::string(is_q ? "q" : "k") + "(" + std::to_string(bb) + ", " + std::to_string(s) + ", " +
                           std::to_string(h) + ", " + std::to_string(d) + "): out of place " +
                           hex_bits(a, out.dtype, out.index(bb, s, h, d)) + ", in place " +
                           hex_bits(b, in.dtype, in.index(bb, s, h, d)));
            }
          });
        }
        // The in-place call wrote nothing but q and k.
        Problems outside;
        Buffers reference_in_place = initial;
        ASSERT_FALSE(run(in_place_config, table, reference_in_place, false).has_value());
        check_results(in_place_config, table, initial, in_place, reference_in_place, outside);
        if (!problems.empty() || !outside.empty()) {
          ADD_FAILURE() << problems.str() << outside.str();
          ++failing;
        }
      }
    }
  }
}

TEST(ApplyCpu, ForcingAnUnknownTargetNamesTheAvailableOnes) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_THAT(targets, Contains(current_cpu_target()));
  const std::string automatic = current_cpu_target();
  EXPECT_EQ(automatic, targets.front()) << "the automatic choice is the best target";
  try {
    force_cpu_target("NOPE");
    ADD_FAILURE() << "force_cpu_target(\"NOPE\") did not throw";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_THAT(message, HasSubstr("NOPE"));
    for (const std::string& target : targets) EXPECT_THAT(message, HasSubstr(target));
  }
  EXPECT_EQ(current_cpu_target(), automatic) << "a failed force changes nothing";
  for (const std::string& target : targets) {
    const ForcedTarget forced(target);
    EXPECT_EQ(current_cpu_target(), target);
  }
  EXPECT_EQ(current_cpu_target(), automatic);
  EXPECT_THAT([] { set_num_threads(0); }, ThrowsMessage<Error>(HasSubstr("0")));
  EXPECT_THAT([] { set_num_threads(257); }, ThrowsMessage<Error>(HasSubstr("257")));
}

// Bad calls: apply() checks exactly as the reference does, with the same message, and writes
// nothing.
TEST(ApplyCpu, RejectsTheSameBadInputAsTheReference) {
  const uint64_t seed = 32000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  std::vector<float> arena(8192);
  for (float& v : arena) v = static_cast<float>(rng.value());
  float* base = arena.data();
  auto bshd = [&](float* data, int64_t b, int64_t s, int64_t h, int64_t d) {
    return contiguous_view(data, DType::F32, Layout::BSHD, {b, s, h, d});
  };
  const CosSinTable table(text_spec(16, Style::NeoX));
  TableOptions fixed_options;
  fixed_options.fixed_positions = 8;
  const CosSinTable fixed(text_spec(16, Style::NeoX), fixed_options);
  RopeSpec mrope_spec = text_spec(16, Style::NeoX);
  mrope_spec.axes = PositionAxes::MRope;
  mrope_spec.mrope = {{4, 2, 2}, MRopeAssignment::Chunked};
  const CosSinTable mrope(mrope_spec);
  const std::vector<int64_t> negative = {0, 1, -1, 3};
  const std::vector<int64_t> past_fixed = {0, 1, 2, 8};
  const std::vector<int64_t> offsets = {5};
  const std::vector<int64_t> bad_cu = {0, 2, 3};
  struct Bad {
    std::string what;
    TensorView q, k, q_out, k_out;
    Positions positions;
    const CosSinTable* table;
    ApplyOptions options;
  };
  const TensorView q = bshd(base, 1, 4, 2, 16), k = bshd(base + 1000, 1, 4, 1, 16);
  const TensorView q_out = bshd(base + 2000, 1, 4, 2, 16), k_out = bshd(base + 3000, 1, 4, 1, 16);
  std::vector<Bad> bad;
  bad.push_back({"head_dim below rotary_dim", bshd(base, 1, 4, 2, 8), k, bshd(base + 2000, 1, 4, 2, 8), k_out, {}, &table, {}});
  bad.push_back({"rotary_offset past the head", q, k, q_out, k_out, {}, &table, {Direction::Forward, 2, 0}});
  bad.push_back({"k seq differs", q, bshd(base + 1000, 1, 3, 1, 16), q_out, bshd(base + 3000, 1, 3, 1, 16), {}, &table, {}});
  bad.push_back({"q_out shape differs", q, k, bshd(base + 2000, 1, 4, 3, 16), k_out, {}, &table, {}});
  bad.push_back({"q_out partially overlaps q", q, k, bshd(base + 1, 1, 4, 2, 16), k_out, {}, &table, {}});
  bad.push_back({"q_out overlaps k", q, k, bshd(base + 1000 + 16, 1, 4, 2, 16), k_out, {}, &table, {}});
  bad.push_back({"negative position", q, k, q_out, k_out, Positions::per_token(negative), &table, {}});
  bad.push_back({"position past a fixed table", q, k, q_out, k_out, Positions::per_token(past_fixed), &fixed, {}});
  bad.push_back({"offset + s past a fixed table", q, k, q_out, k_out, Positions::sequence_offsets(offsets), &fixed, {}});
  bad.push_back({"k without k_out", q, k, q_out, TensorView{}, {}, &table, {}});
  bad.push_back({"m-rope needs 3 streams", q, k, q_out, k_out, Positions::per_token(past_fixed), &mrope, {}});
  TensorView strided_zero = q_out;
  strided_zero.stride_elems[1] = 0;
  bad.push_back({"output stride 0", q, k, strided_zero, k_out, {}, &table, {}});
  {
    const TensorView thd_q = contiguous_view(base, DType::F32, Layout::THD, {4, 2, 16, 0});
    const TensorView thd_q_out = contiguous_view(base + 2000, DType::F32, Layout::THD, {4, 2, 16, 0});
    bad.push_back({"cu_seqlens does not end at the token count", thd_q, TensorView{}, thd_q_out, TensorView{},
                   Positions::arange(bad_cu), &table, {}});
  }
  for (const Bad& call : bad) {
    SCOPED_TRACE(call.what);
    const std::vector<float> before = arena;
    std::string reference_message;
    try {
      reference::apply(call.q, call.k, call.q_out, call.k_out, call.positions, *call.table, call.options);
    } catch (const Error& error) {
      reference_message = error.what();
    }
    ASSERT_FALSE(reference_message.empty()) << "harness: the reference accepted the call";
    EXPECT_EQ(std::memcmp(arena.data(), before.data(), arena.size() * sizeof(float)), 0);
    EXPECT_THAT([&] { apply(call.q, call.k, call.q_out, call.k_out, call.positions, *call.table, call.options); },
                ThrowsMessage<Error>(StrEq(reference_message)));
    EXPECT_EQ(std::memcmp(arena.data(), before.data(), arena.size() * sizeof(float)), 0) << "apply() wrote before throwing";
  }
}

// NaN and Inf inputs poison their own pair only (the partner may become NaN: Inf * 0 where
// sin is 0, Inf - Inf): every other output is finite and within tolerance.
TEST(ApplyCpu, NanAndInfStayInTheirLanes) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t seed = seed_of(target) + 33000;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(seed));
    const ForcedTarget forced(target);
    Rng rng(seed);
    for (const Style style : {Style::NeoX, Style::GPTJ}) {
      for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
        const Family family = family_of(text_spec(48, style));
        const CosSinTable table(family.spec, family.table_options);
        Config c = plain_config(family, Layout::BSHD, 2, 5, 4, 2, 64, dtype);
        c.seed = rng.bits() % 1000000;
        c.options.rotary_offset = 8;
        c.in_place = rng.coin();
        c.source = Source::PerToken;
        c.per_token = {0, 1, 2, 3, 4, 100, 2000, 4000, 7, 9};
        plan_tensors(c, &rng);
        SCOPED_TRACE(std::string(to_string(dtype)) + " " + std::string(to_string(style)) + "\n" + c.describe());
        Buffers initial = make_buffers(c);
        const std::vector<double> poisons = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                             -std::numeric_limits<double>::infinity()};
        int64_t poisoned = 0;
        for (int n = 0; n < 12; ++n) {
          const int64_t b = rng.uniform(0, 1), s = rng.uniform(0, 4), h = rng.uniform(0, 3), d = rng.uniform(0, 63);
          store(initial[static_cast<size_t>(c.q.buffer)].data(), dtype, c.q.index(b, s, h, d), rng.pick(poisons));
          poisoned += d >= 8 && d < 56;
        }
        ASSERT_GT(poisoned, 0);
        const std::string problems = run_and_check(c, table, &initial);
        EXPECT_TRUE(problems.empty()) << problems;
      }
    }
  }
}

// The bf16 kernels round without a NaN test (dtype_io-inl.h, F32ToBf16High): correct only
// because every NaN they meet has zero low 16 bits. Here NaNs with the largest payloads (0x7FFF,
// 0xFFFF: a carry from the rounding would flip the sign or clear the exponent), signalling NaNs
// and infinities go through both styles, NeoX's split path included on every target (64 pairs,
// at least 2N on all of them), with other lanes at magnitudes where a product overflows.
TEST(ApplyCpu, Bf16NanPayloadsAndOverflow) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  const std::vector<uint16_t> poisons = {0x7FFF, 0xFFFF, 0x7F81, 0xFF81, 0x7FC0, 0x7F80, 0xFF80};
  for (const std::string& target : targets) {
    const uint64_t seed = seed_of(target) + 35000;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(seed));
    const ForcedTarget forced(target);
    Rng rng(seed);
    for (const auto& [style, backward] : {std::pair{Style::NeoX, false}, std::pair{Style::NeoX, true},
                                          std::pair{Style::GPTJ, false}, std::pair{Style::GPTJ, true}}) {
      const Family family = family_of(text_spec(128, style));
      const CosSinTable table(family.spec, family.table_options);
      Config c = plain_config(family, Layout::BSHD, 1, 6, 4, 2, 128, DType::BF16);
      c.seed = rng.bits() % 1000000;
      c.in_place = rng.coin();
      c.options.direction = backward ? Direction::Backward : Direction::Forward;
      c.source = Source::PerToken;
      c.per_token = {0, 1, 3, 1000, 4000, 4095};
      plan_tensors(c, &rng);
      SCOPED_TRACE(c.describe());
      Buffers initial = make_buffers(c);
      unsigned char* q = initial[static_cast<size_t>(c.q.buffer)].data();
      for (int n = 0; n < 24; ++n) {
        const int64_t s = rng.uniform(0, 5), h = rng.uniform(0, 3), d = rng.uniform(0, 127);
        const uint16_t bits = poisons[static_cast<size_t>(n) % poisons.size()];
        std::memcpy(q + c.q.index(0, s, h, d) * 2, &bits, 2);
      }
      // Large finite values (the largest bf16, 0x7F7F, and its negative): a*C - c*S may
      // overflow float32 to an infinity, which the rounding must keep.
      for (int n = 0; n < 8; ++n) {
        const int64_t s = rng.uniform(0, 5), h = rng.uniform(0, 3), d = rng.uniform(0, 127);
        const uint16_t bits = n % 2 == 0 ? 0x7F7F : 0xFF7F;
        std::memcpy(q + c.q.index(0, s, h, d) * 2, &bits, 2);
      }
      const std::string problems = run_and_check(c, table, &initial);
      EXPECT_TRUE(problems.empty()) << problems;
    }
  }
}

// The kernels' bf16 rounding of two vectors at once (dtype_io-inl.h, RoundJoinBf16: the
// rounding decision made in 16-bit lanes) against the scalar float_to_bf16, on every target, over
// a dense sample of float32 bit patterns: every low half (0x0000-0xFFFF, which decides the
// rounding: ties at 0x8000, the largest low half 0xFFFF) under 64 kept halves (both signs, odd and
// even, zero, subnormal, the largest finite that rounds up to infinity, infinity, quiet NaN with
// zero low bits, the only NaNs arithmetic hands the rounding) and random patterns up to 2^22 in
// all; even and odd lanes get different patterns.
TEST(ApplyCpu, Bf16RoundingOfTwoVectorsIsNearestEvenOnEveryTarget) {
  std::vector<uint32_t> patterns;
  const std::vector<uint32_t> kept = {0x0000, 0x0001, 0x0002, 0x007F, 0x0080, 0x0081, 0x3F80, 0x3F81, 0x3FFF,
                                      0x4000, 0x7F7E, 0x7F7F, 0x7F80, 0x7FC0, 0x8000, 0x8001, 0xBF80, 0xBF81,
                                      0xC000, 0xFF7F, 0xFF80, 0xFFC0, 0x1234, 0x4321, 0x7F00, 0x00FF, 0x8080,
                                      0x8081, 0xFE01, 0x0100, 0x7FFF & 0x7F7F, 0x5555};
  for (const uint32_t high : kept) {
    for (uint32_t low = 0; low <= 0xFFFF; ++low) {
      const uint32_t bits = (high << 16) | low;
      const bool nan = (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
      // The kernels round only results of arithmetic: a NaN is then quiet, and its low 16 bits
      // are zero (F32ToBf16High). float_to_bf16 would quiet a signalling one.
      if (nan && (low != 0 || (bits & 0x00400000u) == 0)) continue;
      patterns.push_back(bits);
    }
  }
  Rng rng(36000);
  while (patterns.size() < (size_t{1} << 22)) {
    const auto bits = static_cast<uint32_t>(rng.bits());
    const bool nan = (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
    patterns.push_back(nan ? (bits & 0xFFFF0000u) | 0x00400000u : bits);
  }
  const size_t n = patterns.size() / 2;
  std::vector<float> even(n), odd(n);
  std::memcpy(even.data(), patterns.data(), n * sizeof(float));
  std::memcpy(odd.data(), patterns.data() + n, n * sizeof(float));
  std::reverse(odd.begin(), odd.end());  // other neighbours than in `even`
  std::vector<uint32_t> expected(n);
  for (size_t i = 0; i < n; ++i) {
    expected[i] = static_cast<uint32_t>(float_to_bf16(even[i])) | (static_cast<uint32_t>(float_to_bf16(odd[i])) << 16);
  }
  for (const std::string& target : cpu_targets()) {
    SCOPED_TRACE("target " + target);
    const ForcedTarget forced(target);
    std::vector<uint32_t> out(n, 0xDEADBEEFu);
    cpu::round_join_bf16(even.data(), odd.data(), out.data(), static_cast<int64_t>(n));
    int64_t wrong = 0;
    for (size_t i = 0; i < n && wrong < 5; ++i) {
      if (out[i] != expected[i]) {
        ++wrong;
        uint32_t e = 0, o = 0;
        std::memcpy(&e, &even[i], 4);
        std::memcpy(&o, &odd[i], 4);
        ADD_FAILURE() << std::hex << "even 0x" << e << ", odd 0x" << o << ": got 0x" << out[i] << ", want 0x"
                      << expected[i];
      }
    }
  }
}

// The kernels' own conversions of bf16 and f16 (LoadF32 / StoreF32), on every target, against the
// scalar ones: widening over all 65,536 patterns of each, exactly (NaNs: a NaN, with the sign);
// narrowing over a dense sample of float32 patterns: every pattern of the bits a rounding to the
// type can look at (the low 16 bits for bf16; the low 13, and for the values f16 holds only as
// subnormals or not at all, the whole range of exponents) under a set of kept parts, plus random
// ones. f16 narrowing: every value, NaNs included (a quiet NaN with the sign); bf16: every value
// but NaNs with low bits (F32ToBf16High's precondition: the kernels never produce them).
TEST(ApplyCpu, Bf16AndF16ConversionsAreExactOnEveryTarget) {
  std::vector<uint16_t> all16(65536);
  for (uint32_t i = 0; i < 65536; ++i) all16[i] = static_cast<uint16_t>(i);
  std::vector<float> narrow_in;
  Rng rng(37000);
  // Every float32 exponent with 4 mantissa prefixes and every 13-bit tail, both signs: covers f16
  // normals, subnormals, underflow to zero and overflow, each with every rounding position.
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t prefix : {0u, 1u, 0x2AAu, 0x3FFu}) {
        for (uint32_t tail = 0; tail < (1u << 13); tail += (exponent >= 101 && exponent <= 143) ? 1 : 37) {
          const uint32_t bits = (sign << 31) | (exponent << 23) | (prefix << 13) | tail;
          float value;
          std::memcpy(&value, &bits, 4);
          narrow_in.push_back(value);
        }
      }
    }
  }
  for (int n = 0; n < (1 << 20); ++n) {
    const auto bits = static_cast<uint32_t>(rng.bits());
    float value;
    std::memcpy(&value, &bits, 4);
    narrow_in.push_back(value);
  }
  const auto same_float = [](float got, float want) {
    if (std::isnan(want)) return std::isnan(got) && std::signbit(got) == std::signbit(want);
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    return a == b;
  };
  for (const std::string& target : cpu_targets()) {
    SCOPED_TRACE("target " + target);
    const ForcedTarget forced(target);
    for (DType dtype : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(dtype == DType::F16 ? "f16" : "bf16");
      const bool f16 = dtype == DType::F16;
      std::vector<float> widened(all16.size());
      cpu::widen_16bit(dtype, all16.data(), widened.data(), static_cast<int64_t>(all16.size()));
      int wrong = 0;
      for (size_t i = 0; i < all16.size() && wrong < 5; ++i) {
        const float want = f16 ? f16_to_float(all16[i]) : bf16_to_float(all16[i]);
        if (!same_float(widened[i], want)) {
          ++wrong;
          ADD_FAILURE() << "widen 0x" << std::hex << all16[i] << ": got " << widened[i] << ", want " << want;
        }
      }
      std::vector<float> in;
      for (float v : narrow_in) {
        uint32_t bits = 0;
        std::memcpy(&bits, &v, 4);
        const bool nan = std::isnan(v);
        if (!f16 && nan && ((bits & 0xFFFFu) != 0 || (bits & 0x00400000u) == 0)) continue;  // see above
        if (f16 && nan && (bits & 0x00400000u) == 0) continue;  // arithmetic hands over quiet NaNs only
        in.push_back(v);
      }
      std::vector<uint16_t> narrowed(in.size(), 0xDEAD);
      cpu::narrow_16bit(dtype, in.data(), narrowed.data(), static_cast<int64_t>(in.size()));
      for (size_t i = 0; i < in.size() && wrong < 10; ++i) {
        const uint16_t want = f16 ? float_to_f16(in[i]) : float_to_bf16(in[i]);
        const bool ok = std::isnan(in[i]) ? ((narrowed[i] & 0x7FFF) > (f16 ? 0x7C00 : 0x7F80) &&
                                              (narrowed[i] & 0x8000) == (want & 0x8000))
                                           : narrowed[i] == want;
        if (!ok) {
          ++wrong;
          uint32_t bits = 0;
          std::memcpy(&bits, &in[i], 4);
          ADD_FAILURE() << "narrow 0x" << std::hex << bits << ": got 0x" << narrowed[i] << ", want 0x" << want;
        }
      }
    }
  }
}

// ---- every float32 pattern ---------------------------------------------------------------------

// Calls fn(bits, n) on chunks of float32 bit patterns: all 2^32 when `every_pattern`, else every
// pattern whose exponent field is 0, 1, 0xFE or 0xFF (zeros, denormals, the smallest normals, the
// largest, infinities, NaNs: each with every mantissa and both signs) and every 251st mantissa of
// the other exponents (a stride prime to every field width). Returns how many it gave.
template <typename Fn>
uint64_t for_each_float32_chunk(bool every_pattern, Fn&& fn) {
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint32_t> bits(kChunk);
  uint64_t given = 0;
  uint32_t run = 0, mantissa = 0;  // run: sign and exponent field (512 runs of 2^23 mantissas)
  while (run < 512) {
    size_t n = 0;
    while (n < kChunk && run < 512) {
      const uint32_t exponent = run & 0xFFu;
      const uint32_t step = every_pattern || exponent <= 1 || exponent >= 0xFE ? 1 : 251;
      bits[n++] = ((run >> 8) << 31) | (exponent << 23) | mantissa;
      mantissa += step;
      if (mantissa >= (1u << 23)) mantissa = 0, ++run;
    }
    if (!fn(bits.data(), n)) break;
    given += n;
  }
  return given;
}

// ---- AVX3_BF16: the CPU's own bf16 conversions (rotate_kernels_bf16_hw.cpp) --------------------

// Every float32 bit pattern through AVX3_BF16's conversions: the single-vector store
// (narrow_16bit) and the two-vector rounding and join (round_join_bf16, each pattern once as an
// even and once as an odd lane, beside a different neighbour), both against float_to_bf16 bit for
// bit: NaNs (quiet and signalling, either sign, any payload), denormals (which the instruction
// reads as zero and the fix-up corrects), results that round into bf16's denormal range or up to
// 2^-126, ties to even and odd, overflow to infinity, zeros and infinities. The software path
// (AVX3 and below) is checked against the same function by the tests above, over the inputs it
// is defined for; so AVX3_BF16 gives the software path's bits wherever the kernels can reach.
// The ctest one runs for_each_float32_chunk's sample (every pattern of the exponent fields 0, 1,
// 0xFE, 0xFF, where every special class lives, and about 2^24 others); the DISABLED_ one all 2^32.
void check_bf16_hardware_conversion(bool every_pattern) {
  if (!cpu::bf16_hardware_available()) {
    GTEST_SKIP() << "no AVX3_BF16 here: " << (cpu::bf16_hardware_compiled() ? "this CPU lacks AVX512_BF16" : "not compiled in this build");
  }
  const ForcedTarget forced("AVX3_BF16");
  ASSERT_TRUE(cpu::bf16_hardware_in_use());
  std::vector<float> values, odd_values;
  std::vector<uint32_t> odd_bits, joined;
  std::vector<uint16_t> narrowed;
  int wrong = 0;
  const uint64_t checked = for_each_float32_chunk(every_pattern, [&](const uint32_t* bits, size_t n) {
    values.resize(n), odd_values.resize(n), odd_bits.resize(n), joined.resize(n), narrowed.resize(n);
    // The odd lane: a bijection of the pattern (an odd multiplier), so that over the whole range
    // it too takes every pattern, beside unrelated even lanes.
    for (size_t i = 0; i < n; ++i) odd_bits[i] = bits[i] * 0x9E3779B1u;
    std::memcpy(values.data(), bits, n * 4);
    std::memcpy(odd_values.data(), odd_bits.data(), n * 4);
    cpu::narrow_16bit(DType::BF16, values.data(), narrowed.data(), static_cast<int64_t>(n));
    cpu::round_join_bf16(values.data(), odd_values.data(), joined.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n && wrong < 10; ++i) {
      const uint16_t want = float_to_bf16(values[i]);
      // The odd lanes against storage.hpp's branch-free copy of float_to_bf16 (checked against it
      // by storage_test), which the compiler vectorizes: float_to_bf16 is out of line, and a
      // second call per pattern made this test take half as long again.
      const uint32_t want_joined = want | (cpu::bits16::bf16_round_bits(odd_values[i]) & 0xFFFF0000u);
      if (narrowed[i] != want || joined[i] != want_joined) {
        ++wrong;
        ADD_FAILURE() << std::hex << "float32 0x" << bits[i] << " (odd lane 0x" << odd_bits[i] << "): narrowed 0x"
                      << narrowed[i] << ", joined 0x" << joined[i] << "; want 0x" << want << ", 0x" << want_joined;
      }
    }
    return wrong < 10;
  });
  if (every_pattern && wrong == 0) {
    EXPECT_EQ(checked, uint64_t{1} << 32);
  }
  ::testing::Test::RecordProperty("patterns", std::to_string(checked));
}

TEST(ApplyCpu, Bf16HardwareConversionMatchesFloatToBf16) { check_bf16_hardware_conversion(false); }
// All 2^32 patterns: about 15 s of CPU on an AMD EPYC (4 min of wall time in a
// ctest run on the loaded machine), so run by hand (--gtest_also_run_disabled_tests) after a
// change to the conversion, as tensor_test's all-floats tests are.
TEST(ApplyCpu, DISABLED_Bf16HardwareConversionMatchesFloatToBf16ForEveryFloat32) {
  check_bf16_hardware_conversion(true);
}

// f16 stores on the targets with F16C (AVX2, AVX3, AVX3_BF16: Highway's DemoteTo, VCVTPS2PH with
// the rounding in the immediate, to nearest even whatever MXCSR says) against float_to_f16 bit
// for bit, over the sample of for_each_float32_chunk on each (the DISABLED_ one: every float32
// pattern on the best such target): NaN payloads (quiet and signalling: quieted, top payload
// bits kept, as float_to_f16), denormal inputs (every one rounds to f16 zero, with its sign),
// results in f16's subnormal range, ties, overflow to infinity from 65520 up.
void check_f16c_conversion(bool every_pattern) {
  std::vector<std::string> f16c_targets;
  for (const std::string& target : cpu_targets()) {
    if (target == "AVX3_BF16" || target == "AVX3" || target == "AVX2") f16c_targets.push_back(target);
  }
  if (f16c_targets.empty()) GTEST_SKIP() << "no target with F16C (AVX2 or AVX3) on this CPU";
  std::vector<float> values;
  std::vector<uint16_t> narrowed;
  for (const std::string& target : f16c_targets) {
    SCOPED_TRACE("target " + target);
    const ForcedTarget forced(target);
    const bool dense = every_pattern && target == f16c_targets.front();
    int wrong = 0;
    const uint64_t checked = for_each_float32_chunk(dense, [&](const uint32_t* bits, size_t n) {
      values.resize(n), narrowed.resize(n);
      std::memcpy(values.data(), bits, n * 4);
      cpu::narrow_16bit(DType::F16, values.data(), narrowed.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n && wrong < 10; ++i) {
        const uint16_t want = float_to_f16(values[i]);
        if (narrowed[i] != want) {
          ++wrong;
          ADD_FAILURE() << std::hex << "float32 0x" << bits[i] << ": got 0x" << narrowed[i] << ", want 0x" << want;
        }
      }
      return wrong < 10;
    });
    if (dense && wrong == 0) {
      EXPECT_EQ(checked, uint64_t{1} << 32);
    }
  }
}

TEST(ApplyCpu, F16cConversionMatchesFloatToF16) { check_f16c_conversion(false); }
// All 2^32 patterns on the best F16C target: about 10 s of CPU; by hand, as above.
TEST(ApplyCpu, DISABLED_F16cConversionMatchesFloatToF16ForEveryFloat32) { check_f16c_conversion(true); }

// What the instruction does alone on this CPU: denormal inputs read as zero (so the fix-up above is
// needed, and the dense test would see its absence), and every other class as float_to_bf16. If a
// CPU ever converts denormals exactly, the first expectation fails and says so (the fix-up is then
// harmless, only unneeded).
TEST(ApplyCpu, Bf16HardwareInstructionReadsDenormalsAsZero) {
  if (!cpu::bf16_hardware_available()) {
    GTEST_SKIP() << "no AVX3_BF16 here: " << (cpu::bf16_hardware_compiled() ? "this CPU lacks AVX512_BF16" : "not compiled in this build");
  }
  const std::vector<uint32_t> patterns = {
      0x00000001u, 0x807FFFFFu, 0x00400000u, 0x007F8000u, 0x00008000u,  // denormals
      0x00800000u, 0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0xFF7F8000u,  // normals: min, ties even / odd, overflow
      0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u,              // infinities, zeros
      0x7F800001u, 0xFF812345u, 0x7FC00001u, 0x7FBFFFFFu};             // NaNs: signalling, quiet, payloads
  std::vector<float> in(16 * ((patterns.size() + 15) / 16), 1.0f);
  std::memcpy(in.data(), patterns.data(), patterns.size() * 4);
  std::vector<uint16_t> out(in.size());
  cpu::convert_bf16_hardware_unfixed(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < patterns.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << std::hex << "float32 0x" << patterns[i]);
    const bool denormal = (patterns[i] & 0x7F800000u) == 0 && (patterns[i] & 0x007FFFFFu) != 0;
    if (denormal) {
      EXPECT_EQ(out[i], (patterns[i] >> 16) & 0x8000u) << "a denormal input is read as a zero of its sign";
    } else {
      EXPECT_EQ(out[i], float_to_bf16(in[i]));
    }
  }
}

// The kernels on AVX3_BF16 against AVX3's software rounding, bit for bit, and both against the
// float64 reference, with bf16 inputs where the conversion's special classes arise: denormal and
// tiny inputs (their products are float32 denormals, which the instruction alone would flush to
// zero), values near the largest bf16 (results that overflow to infinity), zeros, and random
// normals. Both pairings, both directions, in place and out of place, and a call large enough to be
// memory-bound and streamed.
TEST(ApplyCpu, Bf16HardwareKernelsGiveTheSoftwareBitsOnExtremeValues) {
  if (!cpu::bf16_hardware_available()) {
    GTEST_SKIP() << "no AVX3_BF16 here: " << (cpu::bf16_hardware_compiled() ? "this CPU lacks AVX512_BF16" : "not compiled in this build");
  }
  Rng rng(38000);
  // capped: huge values below 2^126, so that no result overflows: the reference check cannot
  // bound a finite reference against an infinity (both targets still must agree bit for bit on
  // the uncapped values, which do overflow).
  bool capped = false;
  const auto extreme_bf16 = [&]() -> uint16_t {
    const auto sign = static_cast<uint16_t>(rng.coin() ? 0x8000 : 0);
    const auto mantissa = static_cast<uint16_t>(rng.bits() & 0x7F);
    switch (rng.uniform(0, 4)) {
      case 0: return sign | mantissa;                                                   // denormal or zero
      case 1: return sign | static_cast<uint16_t>(rng.uniform(1, 12) << 7) | mantissa;  // tiny normal
      case 2: return sign | static_cast<uint16_t>(rng.uniform(0xF8, capped ? 0xFC : 0xFE) << 7) | mantissa;  // huge
      default: return sign | static_cast<uint16_t>(rng.uniform(0x70, 0x8F) << 7) | mantissa;  // ordinary
    }
  };
  int calls = 0;
  for (const auto& [style, backward] : {std::pair{Style::NeoX, false}, std::pair{Style::NeoX, true},
                                        std::pair{Style::GPTJ, false}, std::pair{Style::GPTJ, true}}) {
    for (const int64_t seq : {int64_t{5}, int64_t{400}}) {
      for (const int64_t dim : {int64_t{128}, int64_t{80}}) {
       for (const bool cap : {false, true}) {
        capped = cap;
        const Family family = family_of(text_spec(dim, style));
        const CosSinTable table(family.spec, family.table_options);
        Config c = plain_config(family, Layout::BSHD, 1, seq, 32, 8, dim, DType::BF16);
        c.seed = rng.bits() % 1000000;
        c.in_place = rng.coin();
        c.options.direction = backward ? Direction::Backward : Direction::Forward;
        plan_tensors(c, &rng);
        SCOPED_TRACE(c.describe());
        Buffers initial = make_buffers(c);
        for (const ViewPlan* view : {&c.q, &c.k}) {
          unsigned char* base = initial[static_cast<size_t>(view->buffer)].data();
          view->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
            const uint16_t value = extreme_bf16();
            std::memcpy(base + view->index(b, s, h, d) * 2, &value, 2);
          });
        }
        Buffers software = initial, hardware = initial;
        {
          const ForcedTarget forced("AVX3");
          ASSERT_FALSE(cpu::bf16_hardware_in_use());
          ASSERT_EQ(run(c, table, software, true), std::nullopt);
        }
        {
          const ForcedTarget forced("AVX3_BF16");
          ASSERT_TRUE(cpu::bf16_hardware_in_use());
          ASSERT_EQ(run(c, table, hardware, true), std::nullopt);
          if (capped) {
            const std::string problems = run_and_check(c, table, &initial);
            EXPECT_TRUE(problems.empty()) << problems;
          }
        }
        EXPECT_TRUE(software == hardware) << "AVX3_BF16's bytes differ from AVX3's" << (capped ? "" : " (uncapped)");
        ++calls;
       }
      }
    }
  }
  EXPECT_EQ(calls, 32);
}

// The kernels visit a token's heads in an interleaved order when they span more than a page and
// the CPU is one where that is faster (kernels.hpp, head_groups: up to 4 groups a page apart on
// Intel, head order elsewhere). Both orders are run on every machine here, on every target,
// against the reference: with at most 4 groups, head counts that give 4, 3, 2 and 1 groups
// (24 heads x 128 f32: 4; 7 heads x 256: 2 does not divide 7, so 1; 6 heads x 256: 2; 24 x 128
// bf16: 2), and with at most 1 (head order).
TEST(ApplyCpu, InterleavedHeadOrderMatchesTheReference) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  struct RestoreHeadGroups {
    ~RestoreHeadGroups() { cpu::set_max_head_groups(0); }
  } restore;
  for (const int64_t max_groups : {4, 1}) {
    cpu::set_max_head_groups(max_groups);
    ASSERT_EQ(cpu::max_head_groups(), max_groups);
    for (const std::string& target : targets) {
      const uint64_t seed = seed_of(target) + 36000 + static_cast<uint64_t>(max_groups);
      SCOPED_TRACE("target " + target + ", at most " + std::to_string(max_groups) + " head groups, seed " +
                   std::to_string(seed));
      const ForcedTarget forced(target);
      Rng rng(seed);
      for (const auto& [q_heads, k_heads, dim] :
           {std::tuple{24, 8, 128}, std::tuple{7, 6, 256}, std::tuple{12, 4, 256}, std::tuple{40, 8, 128}}) {
        for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
          const Family family = family_of(text_spec(dim, rng.coin() ? Style::NeoX : Style::GPTJ));
          const CosSinTable table(family.spec, family.table_options);
          Config c = plain_config(family, Layout::BSHD, 1, 3, q_heads, k_heads, dim, dtype);
          c.seed = rng.bits() % 1000000;
          c.in_place = rng.coin();
          c.source = Source::PerToken;
          c.per_token = {0, 17, 3000};
          plan_tensors(c, &rng);
          SCOPED_TRACE(c.describe());
          const std::string problems = run_and_check(c, table);
          EXPECT_TRUE(problems.empty()) << problems;
        }
      }
    }
  }
  EXPECT_THAT([] { cpu::set_max_head_groups(9); }, ThrowsMessage<Error>(HasSubstr("9")));
}

// A decode step (1 token, 32 heads) with 2 threads: correct, and the same bytes as 1 thread.
TEST(ApplyCpu, DecodeCallRunsOnTheCallingThread) {
  const SavedThreadCount saved;
  const uint64_t seed = 34000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Family family = family_of(text_spec(128, Style::NeoX));
  const CosSinTable table(family.spec, family.table_options);
  for (const DType dtype : {DType::BF16, DType::F32}) {
    Config c = plain_config(family, Layout::BSHD, 1, 1, 32, 8, 128, dtype);
    c.seed = seed + static_cast<uint64_t>(dtype);
    c.source = Source::SequenceOffsets;
    c.offsets = {5000};
    plan_tensors(c, nullptr);
    SCOPED_TRACE(c.describe());
    const Buffers initial = make_buffers(c);
    set_num_threads(1);
    Buffers one = initial;
    ASSERT_FALSE(run(c, table, one, true).has_value());
    set_num_threads(2);
    const std::string problems = run_and_check(c, table, &initial);
    EXPECT_TRUE(problems.empty()) << problems;
    Buffers two = initial;
    ASSERT_FALSE(run(c, table, two, true).has_value());
    EXPECT_THAT(two, ContainerEq(one));
  }
}

// The user probe behind stored pages: decode steps of 16 sequences x 1 token at positions
// 10^6 .. 10^6 + 1000, and up to 2^31 - 1, on a stored table. Every call writes the bytes the
// same call writes with an on-the-fly table (the same rows, the same kernel), the reference
// agrees within tolerance, and the table holds the 9 pages those positions fall in (a page: 256
// rows x 2 x 64 floats = 128 KiB), where it used to hold 10^6 rows (0.5 GB), and failed past
// max_bytes at 2^31 - 1.
TEST(ApplyCpu, DecodeAtFarPositionsStoresOnlyTheirPagesAndMatchesTheReference) {
  const uint64_t seed = 37000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Family family = family_of(text_spec(128, Style::NeoX));
  const Family fly_family = family_of(text_spec(128, Style::NeoX), {.storage = Storage::OnTheFly});
  const CosSinTable stored(family.spec, family.table_options);
  const CosSinTable fly(fly_family.spec, fly_family.table_options);
  for (const int64_t first : {int64_t{1000000}, kMaxPosition - 1000}) {
    for (int64_t step = 0; step <= 1000; ++step) {
      const DType dtype = step % 2 == 0 ? DType::F32 : DType::BF16;
      Config c = plain_config(family, Layout::BSHD, 16, 1, 8, 2, 128, dtype);
      c.seed = seed + static_cast<uint64_t>(step);
      c.source = Source::PerToken;
      c.per_token.assign(16, first + step);
      c.per_token[15] = first + 1000 - step;  // one sequence walks down: pages out of order
      c.in_place = step % 3 == 0;
      plan_tensors(c, nullptr);
      SCOPED_TRACE(c.describe());
      const Buffers initial = make_buffers(c);
      Buffers on_stored = initial, on_fly = initial;
      ASSERT_EQ(run(c, stored, on_stored, true), std::nullopt);
      ASSERT_EQ(run(c, fly, on_fly, true), std::nullopt);
      ASSERT_TRUE(on_stored == on_fly) << "stored and on-the-fly rows gave different outputs";
      if (step % 50 == 0) {
        const std::string problems = run_and_check(c, stored, &initial);
        ASSERT_TRUE(problems.empty()) << problems;
      }
    }
  }
  // Pages 3906-3910 (10^6 .. 10^6 + 1000) and 8388604-8388607 (2^31 - 1001 .. 2^31 - 1); leaves
  // 0 and 2047 (32 KiB each); the directory (16 KiB); slabs at most double what is used
  // (under 2 MiB).
  constexpr int64_t kPageBytes = 256 * 2 * 64 * 4;
  EXPECT_EQ(stored.size(), 0);
  EXPECT_GE(stored.stored_bytes(), 16384 + 2 * 32768 + 9 * kPageBytes);
  EXPECT_LE(stored.stored_bytes(), 16384 + 2 * 32768 + 2 * 9 * kPageBytes);  // 2.4 MB
}

// Growth past max_bytes is the one error apply() meets after its checks: it is thrown before
// anything is written (every byte of every buffer as it was), with the reference's message, and
// stores nothing; a call whose pages fit then runs.
TEST(ApplyCpu, GrowthPastMaxBytesThrowsBeforeWritingAnything) {
  const uint64_t seed = 38000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  // 32 pairs: a page is 64 KiB, a leaf 32 KiB, the directory 16 KiB.
  const Family family = family_of(text_spec(64, Style::GPTJ), {.max_bytes = 256 << 10});
  const CosSinTable table(family.spec, family.table_options);
  Config c = plain_config(family, Layout::BSHD, 16, 1, 4, 2, 64, DType::BF16);
  c.seed = seed;
  c.source = Source::PerToken;
  for (int64_t n = 0; n < 16; ++n) c.per_token.push_back((n + 1) << 20);  // 16 leaves, 16 pages: 1.5 MB
  plan_tensors(c, nullptr);
  const Buffers initial = make_buffers(c);
  Buffers fast = initial, ref = initial;
  const std::optional<std::string> fast_error = run(c, table, fast, true);
  const std::optional<std::string> ref_error = run(c, table, ref, false);
  ASSERT_TRUE(fast_error.has_value());
  EXPECT_THAT(*fast_error, HasSubstr("needs 1589248 bytes in all, more than max_bytes 262144"));
  EXPECT_EQ(ref_error, fast_error);
  EXPECT_TRUE(fast == initial) << "apply() wrote before throwing";
  EXPECT_TRUE(ref == initial) << "reference::apply wrote before throwing";
  EXPECT_EQ(table.stored_bytes(), 16384);
  EXPECT_FALSE(table.is_stored(int64_t{1} << 20));
  c.per_token.assign(16, 1000000);  // one page and one leaf: 112 KiB in all
  const std::string problems = run_and_check(c, table, &initial);
  EXPECT_TRUE(problems.empty()) << problems;
  EXPECT_EQ(table.stored_bytes(), 16384 + 32768 + 65536);
}

// A single head may have any head stride (it is never stepped), e.g. 2^62 elements, whose byte
// count overflows int64: the kernels must not multiply it (a fuzzer finding,
// tests/reliability/fuzz_crashes/apply_args/one_head_with_stride_2_pow_62; UBSan flags the
// overflow in `make sanitize`).
TEST(ApplyCpu, OneHeadMayHaveAnyHeadStride) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t seed = seed_of(target) + 37000;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(seed));
    const ForcedTarget forced(target);
    for (const Style style : {Style::NeoX, Style::GPTJ}) {
      for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
        for (const bool in_place : {false, true}) {
          const Family family = family_of(text_spec(64, style));
          const CosSinTable table(family.spec, family.table_options);
          Config c = plain_config(family, Layout::BSHD, 2, 3, 1, 1, 64, dtype);
          c.seed = seed + static_cast<uint64_t>(dtype) * 2 + (in_place ? 1 : 0);
          c.in_place = in_place;
          c.source = Source::PerToken;
          c.per_token = {0, 17, 3000, 5, 9000, 1};
          plan_tensors(c, nullptr);
          for (ViewPlan* plan : {&c.q, &c.k, &c.q_out, &c.k_out}) plan->stride[kHeads] = int64_t{1} << 62;
          SCOPED_TRACE(c.describe());
          const std::string problems = run_and_check(c, table);
          EXPECT_TRUE(problems.empty()) << problems;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rotary
