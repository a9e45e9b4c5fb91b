// tests/core/table_test.cpp: CosSinTable and RopeCache (table.hpp).
//
// Exactness is checked against an independent binary128 evaluation: theta = powq(base, -2i/d)
// and cosq/sinq of p * theta (libquadmath reduces the argument itself), rounded to float32.
// "Within 1 ulp" means the table's float32 bit pattern is at most 1 away from that correctly
// rounded value (docs/numerics.md explains why 1 and not 0: ties within ~1e-3 ulp).
#include "rotary/table.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rotary/error.hpp"
#include "tests/support/spec_builder.hpp"
#include "tests/support/ulp.hpp"

#if defined(ROTARY_HAVE_QUADMATH)
#include <quadmath.h>
#endif

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::StrEq;
using ::testing::ThrowsMessage;

RopeSpec llama2_spec() { return test::rope_spec({.name = "llama2"}); }

#if defined(ROTARY_HAVE_QUADMATH)
// Independent reference: binary128 end to end.
float reference_value(double base, int64_t dim, int64_t pair, int64_t position, bool sine, double scaling) {
  const __float128 theta = powq(static_cast<__float128>(base), -static_cast<__float128>(2 * pair) / dim);
  const __float128 angle = static_cast<__float128>(position) * theta;
  const __float128 v = (sine ? sinq(angle) : cosq(angle)) * static_cast<__float128>(scaling);
  return static_cast<float>(v);  // binary128 -> float32 rounds once
}

struct UlpStats {
  int64_t entries = 0;
  int64_t exact = 0;
  int64_t max_ulps = 0;
};

// Compares rows at the given positions against the reference.
UlpStats measure(const CosSinTable& table, const std::vector<int64_t>& positions, double base) {
  UlpStats stats;
  const int64_t pairs = table.num_pairs();
  std::vector<float> c(pairs), s(pairs);
  for (int64_t p : positions) {
    table.row(p, c.data(), s.data());
    for (int64_t i = 0; i < pairs; ++i) {
      for (int sine = 0; sine < 2; ++sine) {
        const float expected = reference_value(base, 2 * pairs, i, p, sine != 0, table.attention_scaling());
        const float got = sine ? s[i] : c[i];
        const int64_t ulps = test::ulp_distance(got, expected);
        ++stats.entries;
        stats.exact += ulps == 0;
        stats.max_ulps = std::max(stats.max_ulps, ulps);
        EXPECT_LE(ulps, 1) << "position " << p << " pair " << i << (sine ? " sin " : " cos ") << got << " vs "
                           << expected;
      }
    }
  }
  return stats;
}

TEST(Table, ExactWithinOneUlpAtEveryPowerOfTwo) {
  const CosSinTable table(llama2_spec(), {.storage = Storage::OnTheFly});
  std::vector<int64_t> positions = {0, 1, 2, 3};
  for (int k = 2; k <= 31; ++k) {
    positions.push_back((int64_t{1} << k) - 1);
    if (k < 31) positions.push_back(int64_t{1} << k);
  }
  const UlpStats stats = measure(table, positions, 1e4);
  EXPECT_EQ(stats.max_ulps <= 1, true);
  EXPECT_GT(static_cast<double>(stats.exact) / static_cast<double>(stats.entries), 0.99);
}

TEST(Table, ExactWithinOneUlpOnRandomPositionsOfEveryMagnitude) {
  RopeSpec spec = llama2_spec();
  spec.theta_base = 500000.0;
  const CosSinTable table(spec, {.storage = Storage::OnTheFly});
  std::mt19937_64 rng(20261122);
  std::vector<int64_t> positions;
  for (int k = 0; k < 31; ++k) {
    std::uniform_int_distribution<int64_t> in_octave(int64_t{1} << k, (int64_t{2} << k) - 1);
    for (int j = 0; j < 6; ++j) positions.push_back(in_octave(rng));
  }
  SCOPED_TRACE("seed 20261122");
  const UlpStats stats = measure(table, positions, 5e5);
  EXPECT_GT(static_cast<double>(stats.exact) / static_cast<double>(stats.entries), 0.99);
}

TEST(Table, ExactTinyValuesNearZeroCrossingsStayWithinOneUlp) {
  // Pair 0 has theta = 1, so cos(p) is tiny for integers p near odd multiples of pi/2:
  // |cos p| = 4.4e-3 (11), 2.5e-5 (51819), 5.5e-6 (52174), 2.9e-7 (573204), 2.6e-7 (4846147).
  // These take the exact fallback path (|v| < 2^-16).
  const CosSinTable table(llama2_spec(), {.storage = Storage::OnTheFly});
  for (int64_t p : {int64_t{11}, int64_t{33}, int64_t{344}, int64_t{699}, int64_t{51819}, int64_t{52174},
                    int64_t{260515}, int64_t{573204}, int64_t{4846147}}) {
    std::vector<float> c(64), s(64);
    table.row(p, c.data(), s.data());
    EXPECT_LE(test::ulp_distance(c[0], reference_value(1e4, 128, 0, p, false, 1.0)), 1) << p << " " << c[0];
    EXPECT_LE(test::ulp_distance(s[0], reference_value(1e4, 128, 0, p, true, 1.0)), 1) << p << " " << s[0];
  }
}
#endif  // ROTARY_HAVE_QUADMATH

TEST(Table, StoredAndOnTheFlyRowsAreIdentical) {
  RopeSpec spec = llama2_spec();
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 4.0;
  spec.scaling.original_max_position_embeddings = 1024;
  const CosSinTable stored(spec, {.initial_positions = 70000});
  const CosSinTable fly(spec, {.storage = Storage::OnTheFly});
  EXPECT_GE(stored.size(), 70000);
  EXPECT_EQ(fly.size(), 0);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pos(0, 69999);
  std::vector<float> c1(64), s1(64), c2(64), s2(64);
  for (int n = 0; n < 500; ++n) {
    const int64_t p = n < 300 ? n : pos(rng);
    stored.row(p, c1.data(), s1.data());
    fly.row(p, c2.data(), s2.data());
    ASSERT_EQ(c1, c2) << p;
    ASSERT_EQ(s1, s2) << p;
  }
}

TEST(Table, RowZeroIsScalingTimesOneAndZero) {
  RopeSpec spec = llama2_spec();
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 16.0;
  spec.scaling.original_max_position_embeddings = 1024;
  const CosSinTable table(spec);
  std::vector<float> c(64), s(64);
  table.row(0, c.data(), s.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(c[i], static_cast<float>(table.attention_scaling()));
    EXPECT_EQ(s[i], 0.0f);
  }
}

// A stored table's memory, in bytes, at 64 pairs (llama2_spec): the page directory (2048 leaf
// pointers), one leaf (4096 page pointers), one page (256 rows x 2 x 64 floats).
constexpr int64_t kDirectoryBytes = 2048 * 8;
constexpr int64_t kLeafBytes = 4096 * 8;
constexpr int64_t kPageBytes = 256 * 2 * 64 * 4;

TEST(Table, GrowsOnDemandAndKeepsEarlierRowsInPlace) {
  const CosSinTable table(llama2_spec());
  EXPECT_EQ(table.size(), 0);
  std::vector<float> c(64), s(64);
  table.row(10, c.data(), s.data());
  const float* first = table.stored_row(10);
  EXPECT_EQ(table.size(), 256);  // the page of rows 0-255
  EXPECT_EQ(first[1], c[1]);
  EXPECT_EQ(first[64 + 1], s[1]);
  table.row(1000000, c.data(), s.data());
  EXPECT_EQ(table.size(), 256);  // a far row stores its own page: the prefix stays
  EXPECT_TRUE(table.is_stored(1000000));
  table.row(300, c.data(), s.data());
  EXPECT_EQ(table.size(), 512);
  EXPECT_EQ(table.stored_row(10), first);  // rows never move
}

// The user probe that found the bug: one row at 10^6 grew the table to 10^6 rows (0.5 GB at 64
// pairs, kept for the table's lifetime), and one at 2^31 - 1 failed past max_bytes. Now each
// stores the page of 256 rows that holds it: 176 KiB, of which 128 KiB is the page.
TEST(Table, FarPositionStoresItsPageNotATableUpToIt) {
  const CosSinTable fly(llama2_spec(), {.storage = Storage::OnTheFly});
  EXPECT_EQ(fly.stored_bytes(), 0);
  std::vector<float> c(64), s(64), fly_c(64), fly_s(64);
  for (const int64_t position : {int64_t{1000000}, int64_t{4000000}, kMaxPosition}) {
    SCOPED_TRACE(position);
    const CosSinTable table(llama2_spec());
    EXPECT_EQ(table.stored_bytes(), kDirectoryBytes);
    table.row(position, c.data(), s.data());
    EXPECT_EQ(table.stored_bytes(), kDirectoryBytes + kLeafBytes + kPageBytes);  // 180224
    EXPECT_EQ(table.size(), 0);
    const int64_t page_first = position / 256 * 256;
    EXPECT_TRUE(table.is_stored(position));
    EXPECT_TRUE(table.is_stored(page_first));
    EXPECT_FALSE(table.is_stored(page_first - 1));
    EXPECT_FALSE(table.is_stored(0));
    EXPECT_FALSE(table.is_stored(page_first + 256));  // past the page (past 2^31 - 1 for the last)
    EXPECT_THAT([&] { table.stored_row(page_first - 1); },
                ThrowsMessage<Error>(HasSubstr("stored_row: position must be a stored row (see is_stored(); "
                                               "reserve_rows() stores rows) (got " +
                                               std::to_string(page_first - 1) + ")")));
    // Every row of the page is the on-the-fly row, bit for bit.
    for (int64_t p = page_first; p < std::min(page_first + 256, kMaxPosition + 1); ++p) {
      const float* stored = table.stored_row(p);
      fly.row(p, fly_c.data(), fly_s.data());
      ASSERT_EQ(std::memcmp(stored, fly_c.data(), 64 * sizeof(float)), 0) << p;
      ASSERT_EQ(std::memcmp(stored + 64, fly_s.data(), 64 * sizeof(float)), 0) << p;
    }
  }
}

// Decode steps at 10^6 .. 10^6 + 1000 read rows in 5 pages (3906 to 3910): the table holds those,
// in slabs that at most double what is used (under 2 MiB), not 10^6 rows.
TEST(Table, DecodeStepsAtAFarPositionStoreOnlyTheirPages) {
  const CosSinTable table(llama2_spec());
  const CosSinTable fly(llama2_spec(), {.storage = Storage::OnTheFly});
  std::vector<float> c(64), s(64), fly_c(64), fly_s(64);
  for (int64_t position = 1000000; position <= 1001000; ++position) {
    table.row(position, c.data(), s.data());
    fly.row(position, fly_c.data(), fly_s.data());
    ASSERT_EQ(c, fly_c) << position;
    ASSERT_EQ(s, fly_s) << position;
  }
  EXPECT_EQ(table.size(), 0);
  EXPECT_GE(table.stored_bytes(), kDirectoryBytes + kLeafBytes + 5 * kPageBytes);
  EXPECT_LE(table.stored_bytes(), kDirectoryBytes + kLeafBytes + 2 * 5 * kPageBytes);  // 1.3 MB; was 1.07 GB
}

TEST(Table, ReserveRowsStoresOnlyThePagesOfItsPositions) {
  const CosSinTable table(llama2_spec());
  const std::vector<int64_t> positions = {70001, 5, 70000, int64_t{1} << 30, 5};
  table.reserve_rows(positions);
  // Pages 0, 273 (positions 69888-70143) and 2^22, in one slab of 3 pages; leaves 0 and 1024.
  EXPECT_EQ(table.stored_bytes(), kDirectoryBytes + 2 * kLeafBytes + 3 * kPageBytes);
  EXPECT_EQ(table.size(), 256);
  for (const int64_t p : {int64_t{0}, int64_t{255}, int64_t{69888}, int64_t{70143}, int64_t{1} << 30}) {
    EXPECT_TRUE(table.is_stored(p)) << p;
  }
  for (const int64_t p : {int64_t{256}, int64_t{69887}, int64_t{70144}, (int64_t{1} << 30) - 1}) {
    EXPECT_FALSE(table.is_stored(p)) << p;
  }
  table.reserve_rows(positions);  // stored already: nothing more
  EXPECT_EQ(table.stored_bytes(), kDirectoryBytes + 2 * kLeafBytes + 3 * kPageBytes);
  table.reserve_positions(1000);  // rows [0, 1000): pages 1-3 join page 0
  EXPECT_EQ(table.size(), 1024);
  EXPECT_FALSE(table.is_stored(-1));
  EXPECT_FALSE(table.is_stored(kMaxPosition + 1));
  const std::vector<int64_t> negative = {3, -1};
  EXPECT_THAT([&] { table.reserve_rows(negative); },
              ThrowsMessage<Error>(HasSubstr("CosSinTable::reserve_rows: position must be >= 0 (got -1)")));
  const CosSinTable fly(llama2_spec(), {.storage = Storage::OnTheFly});
  fly.reserve_rows(positions);
  EXPECT_EQ(fly.stored_bytes(), 0);
  EXPECT_FALSE(fly.is_stored(5));
}

// Stored rows at page edges and at every magnitude up to 2^31 - 1, exact and HFCompat, with an
// attention scaling and an odd pair count: the on-the-fly rows, bit for bit.
TEST(Table, StoredPagesHoldTheOnTheFlyRowsBitForBit) {
  RopeSpec spec = llama2_spec();
  spec.head_dim = spec.rotary_dim = 46;
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 4.0;
  spec.scaling.original_max_position_embeddings = 1024;
  std::vector<int64_t> positions = {0, 255, 256, 65535, 65536, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, 1000000,
                                    kMaxPosition - 256, kMaxPosition - 255, kMaxPosition};
  std::mt19937_64 rng(11);
  for (int octave = 0; octave < 31; ++octave) {
    std::uniform_int_distribution<int64_t> pos(int64_t{1} << octave, (int64_t{2} << octave) - 1);
    for (int n = 0; n < 4; ++n) positions.push_back(pos(rng));
  }
  for (const Precision precision : {Precision::Exact, Precision::HFCompat}) {
    SCOPED_TRACE(to_string(precision));
    const CosSinTable stored(spec, {.precision = precision});
    const CosSinTable fly(spec, {.precision = precision, .storage = Storage::OnTheFly});
    std::vector<float> c(23), s(23), fly_c(23), fly_s(23);
    for (const int64_t p : positions) {
      stored.row(p, c.data(), s.data());
      fly.row(p, fly_c.data(), fly_s.data());
      ASSERT_EQ(c, fly_c) << p;
      ASSERT_EQ(s, fly_s) << p;
      // The rest of its page, stored with it.
      const int64_t neighbour = p % 256 == 255 ? p - 1 : p + 1;
      fly.row(neighbour, fly_c.data(), fly_s.data());
      const float* row = stored.stored_row(neighbour);
      ASSERT_EQ(std::vector<float>(row, row + 23), fly_c) << neighbour;
      ASSERT_EQ(std::vector<float>(row + 23, row + 46), fly_s) << neighbour;
    }
  }
  // A fixed table whose last page is partial: rows to its end, and not one past it.
  const CosSinTable fixed(spec, {.fixed_positions = 3000});
  const CosSinTable fly(spec, {.storage = Storage::OnTheFly});
  EXPECT_EQ(fixed.size(), 3000);
  EXPECT_TRUE(fixed.is_stored(2999));
  EXPECT_FALSE(fixed.is_stored(3000));
  std::vector<float> fly_c(23), fly_s(23);
  for (int64_t p = 2816; p < 3000; ++p) {
    fly.row(p, fly_c.data(), fly_s.data());
    ASSERT_EQ(std::memcmp(fixed.stored_row(p), fly_c.data(), 23 * sizeof(float)), 0) << p;
  }
}

TEST(Table, ConcurrentReadersWhileGrowing) {
  const CosSinTable table(llama2_spec(), {.initial_positions = 16});
  const CosSinTable reference(llama2_spec(), {.storage = Storage::OnTheFly});
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t));
      std::vector<float> c(64), s(64), rc(64), rs(64);
      for (int n = 0; n < 400; ++n) {
        // Each thread asks for ever larger positions: growth and reads interleave.
        std::uniform_int_distribution<int64_t> pos(0, int64_t{200} * (n + 1));
        const int64_t p = pos(rng);
        table.row(p, c.data(), s.data());
        reference.row(p, rc.data(), rs.data());
        if (c != rc || s != rs) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Readers at near, far (10^6) and farthest (2^31 - 1) positions while others store pages in
// all three places: every row read is the on-the-fly row, and the table holds only the pages of
// the three windows. (In `make sanitize`'s ThreadSanitizer run: the name matches Concurrent.)
TEST(Table, ConcurrentReadersAtFarAndNearPositions) {
  const CosSinTable table(llama2_spec(), {.initial_positions = 512});
  const CosSinTable reference(llama2_spec(), {.storage = Storage::OnTheFly});
  constexpr int64_t kWindow = 3000;
  const int64_t window_starts[3] = {0, 1000000, kMaxPosition + 1 - kWindow};
  std::atomic<int> mismatches{0};
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + static_cast<uint64_t>(t));
      std::uniform_int_distribution<int64_t> offset(0, kWindow - 1);
      std::vector<float> c(64), s(64), rc(64), rs(64);
      try {
        for (int n = 0; n < 300; ++n) {
          const int64_t p = window_starts[(n + t) % 3] + offset(rng);
          if (t == 3 && n % 10 == 0) {  // one thread also stores a batch of rows, as apply() does
            std::vector<int64_t> batch;
            for (int i = 0; i < 16; ++i) batch.push_back(window_starts[i % 3] + offset(rng));
            table.reserve_rows(batch);
            for (const int64_t b : batch) mismatches += !table.is_stored(b);
          }
          table.row(p, c.data(), s.data());
          reference.row(p, rc.data(), rs.data());
          if (c != rc || s != rs) ++mismatches;
          if (p < 512) {  // the initial rows: stored rows, readable without growth
            const float* row = table.stored_row(p);
            if (std::memcmp(row, rc.data(), 64 * sizeof(float)) != 0) ++mismatches;
          }
        }
      } catch (const Error& error) {
        errors[t] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  EXPECT_EQ(mismatches.load(), 0);
  // 3000 rows span at most 13 pages: at most 39 pages in all (2 of them initial), leaves 0 (near
  // and 10^6) and 2047, and less than 4 MiB of slab unused: under 9.4 MB.
  EXPECT_GE(table.size(), 512);
  EXPECT_LT(table.stored_bytes(), kDirectoryBytes + 2 * kLeafBytes + 39 * kPageBytes + (4 << 20));
}

TEST(Table, FixedTableRejectsPositionsPastItsEnd) {
  const CosSinTable table(llama2_spec(), {.fixed_positions = 4096});
  EXPECT_EQ(table.size(), 4096);
  std::vector<float> c(64), s(64);
  EXPECT_NO_THROW(table.row(4095, c.data(), s.data()));
  EXPECT_THAT([&] { table.row(4096, c.data(), s.data()); },
              ThrowsMessage<Error>(HasSubstr("position must be < the fixed table length 4096 (got 4096)")));
}

TEST(Table, RejectsNegativeAndHugePositions) {
  const CosSinTable table(llama2_spec(), {.storage = Storage::OnTheFly});
  std::vector<float> c(64), s(64);
  EXPECT_THAT([&] { table.row(-1, c.data(), s.data()); },
              ThrowsMessage<Error>(HasSubstr("position must be >= 0 (got -1)")));
  EXPECT_THAT([&] { table.row(kMaxPosition + 1, c.data(), s.data()); },
              ThrowsMessage<Error>(HasSubstr("position must be <= 2147483647 (got 2147483648)")));
}

TEST(Table, GrowthPastMaxBytesSuggestsOnTheFly) {
  const CosSinTable table(llama2_spec(), {.max_bytes = 1 << 20});
  // Rows [0, 100000): 391 pages, 51 MB.
  EXPECT_THAT([&] { table.reserve_positions(100000); },
              ThrowsMessage<Error>(AllOf(HasSubstr("more than max_bytes 1048576"), HasSubstr("OnTheFly"))));
  EXPECT_EQ(table.stored_bytes(), kDirectoryBytes);
  std::vector<float> c(64), s(64);
  table.row(100000, c.data(), s.data());  // one page fits
  EXPECT_EQ(table.stored_bytes(), kDirectoryBytes + kLeafBytes + kPageBytes);
  // Rows in 8 more leaves: 8 leaves and 8 pages would take it to 1.4 MB. All or nothing: none is
  // stored.
  std::vector<int64_t> far;
  for (int64_t leaf = 1; leaf <= 8; ++leaf) far.push_back(leaf << 20);
  EXPECT_THAT([&] { table.reserve_rows(far); },
              ThrowsMessage<Error>(StrEq("CosSinTable: storing 8 more pages (256 rows x 64 pairs each, up to "
                                         "position 8388863) needs 1490944 bytes in all, more than max_bytes "
                                         "1048576 (use Storage::OnTheFly for very long contexts, or raise max_bytes)")));
  EXPECT_EQ(table.stored_bytes(), kDirectoryBytes + kLeafBytes + kPageBytes);
  for (const int64_t p : far) EXPECT_FALSE(table.is_stored(p)) << p;
}

TEST(Table, RejectsBadOptions) {
  EXPECT_THAT([] { CosSinTable(llama2_spec(), {.seq_len = -3}); },
              ThrowsMessage<Error>(HasSubstr("seq_len must be >= 0 (got -3)")));
  EXPECT_THAT([] { CosSinTable(llama2_spec(), {.precision = Precision::HFCompat, .hf_inv_freq = {1.0f, 0.5f}}); },
              ThrowsMessage<Error>(HasSubstr("hf_inv_freq must have rotary_dim/2 = 64 values (got 2)")));
  EXPECT_THAT([] { CosSinTable(llama2_spec(), {.hf_inv_freq = std::vector<float>(64, 1.0f)}); },
              ThrowsMessage<Error>(HasSubstr("hf_inv_freq is for Precision::HFCompat and Vllm only")));
}

TEST(Table, HfCompatRoundsPositionsPast2To24LikeTorch) {
  const CosSinTable table(llama2_spec(), {.precision = Precision::HFCompat, .storage = Storage::OnTheFly});
  std::vector<float> c1(64), s1(64), c2(64), s2(64);
  table.row(16777216, c1.data(), s1.data());
  table.row(16777217, c2.data(), s2.data());  // fl32(16777217) == 16777216
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(s1, s2);
  const CosSinTable exact(llama2_spec(), {.storage = Storage::OnTheFly});
  exact.row(16777217, c2.data(), s2.data());
  EXPECT_NE(c1, c2);  // the exact table keeps them apart
}

TEST(Table, ExpandRowLayouts) {
  const float values[3] = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(expand_row(values, 3, Style::NeoX), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(expand_row(values, 3, Style::GPTJ), (std::vector<float>{1, 1, 2, 2, 3, 3}));
}

TEST(RopeCache, DynamicGrowsThenResetsLikeHuggingFace) {
  RopeSpec spec = llama2_spec();
  spec.scaling.type = ScalingType::Dynamic;
  spec.scaling.factor = 2.0;
  RopeCache cache(spec);
  const auto original = cache.table_for(100);
  EXPECT_EQ(cache.max_seq_len_cached(), 4096);
  EXPECT_EQ(original->inv_freq(), frequencies(spec, 0).inv_freq);
  const auto grown = cache.table_for(8191);  // seq_len 8192 > 4096: recompute
  EXPECT_EQ(cache.max_seq_len_cached(), 8192);
  EXPECT_EQ(grown->inv_freq(), frequencies(spec, 8192).inv_freq);
  EXPECT_EQ(cache.table_for(5000), grown);  // 5001 <= 8192, not below 4096: keep
  EXPECT_EQ(cache.table_for(4000), original);  // 4001 < 4096 after growth: reset
  EXPECT_EQ(cache.max_seq_len_cached(), 4096);
}

TEST(RopeCache, LongRopeSwitchesPastTheOriginalLength) {
  RopeSpec spec = llama2_spec();
  spec.head_dim = spec.rotary_dim = 8;
  spec.max_position_embeddings = 131072;
  spec.scaling.type = ScalingType::LongRope;
  spec.scaling.original_max_position_embeddings = 4096;
  spec.scaling.short_factor = {1, 1, 2, 2};
  spec.scaling.long_factor = {1, 4, 8, 16};
  RopeCache cache(spec);
  const auto short_table = cache.table_for(4095);
  const auto long_table = cache.table_for(4096);
  EXPECT_NE(short_table, long_table);
  EXPECT_EQ(long_table->inv_freq(), frequencies(spec, 4097).inv_freq);
  EXPECT_EQ(short_table->inv_freq(), frequencies(spec, 0).inv_freq);
  EXPECT_EQ(cache.table_for(10), short_table);
}

TEST(RopeCache, OtherSchemesUseOneTable) {
  RopeCache cache(llama2_spec());
  EXPECT_EQ(cache.table_for(0), cache.table_for(1000000));
  EXPECT_THAT([&] { cache.table_for(-2); }, ThrowsMessage<Error>(HasSubstr("max_position must be >= 0 (got -2)")));
}

}  // namespace
}  // namespace rotary
