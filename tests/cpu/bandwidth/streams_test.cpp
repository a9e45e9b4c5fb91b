// tests/cpu/bandwidth/streams_test.cpp: the memory streams of src/cpu/bandwidth (streams.hpp,
// floors.hpp) on every SIMD target compiled in that this CPU supports: copy_stream copies every
// byte exactly, copy_inplace_stream gives x * kInPlaceFactor rounded as float32, for any size and
// alignment, both access patterns and several threads, and neither writes a byte outside its
// destination. No timing here (that is `rotary bench` and bench/).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cpu/bandwidth/buffer.hpp"
#include "cpu/bandwidth/floors.hpp"
#include "cpu/bandwidth/streams.hpp"
#include "rotary/apply.hpp"

namespace rotary {
namespace {

using bandwidth::Pattern;

constexpr uint64_t kSeed = 20261125;
constexpr size_t kGuardBytes = 192;      // around every destination: must stay as they were
constexpr unsigned char kGuardByte = 0xA5;

// Sizes around every boundary the streams have: the 64-byte line, the vector, the 4 KiB page
// (where threads split a stream), the 16 KiB block of the four-page pattern.
const std::vector<size_t> kCopySizes = {0,    1,    7,     63,    64,    65,    127,   200,
                                        4095, 4096, 4097,  16383, 16384, 16385, 40000, 3 * 16384 + 2 * 4096 + 13};
// Element counts for the in-place stream (floats).
const std::vector<size_t> kFloatCounts = {0, 1, 3, 15, 16, 17, 100, 1023, 4096 + 5, 2 * 4096 + 3, 3 * 4096 + 1024 + 7};
const std::vector<int> kThreadCounts = {1, 2, 3};

// Runs body once per target, forced, with the target in the trace; restores the automatic choice.
template <typename Body>
void for_each_target(Body&& body) {
  (void)bandwidth::stream_target();  // apply $ROTARY_CPU_TARGET first, so that it cannot undo a force below
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    force_cpu_target(target);
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(kSeed));
    body(target);
  }
  force_cpu_target("");
}

std::vector<unsigned char> random_bytes(size_t count, std::mt19937_64& generator) {
  std::vector<unsigned char> bytes(count);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(generator());
  return bytes;
}

// Where the guard bytes of `region` (kGuardBytes before and after `count` bytes at `begin`) differ
// from kGuardByte, as a message; empty when none does.
std::string damaged_guards(const unsigned char* region_begin, size_t offset, size_t count, size_t region_bytes) {
  for (size_t i = 0; i < region_bytes; ++i) {
    if (i >= offset && i < offset + count) continue;
    if (region_begin[i] != kGuardByte) {
      return "byte " + std::to_string(static_cast<long long>(i) - static_cast<long long>(offset)) +
             " relative to the destination was written";
    }
  }
  return "";
}

TEST(BandwidthStreams, RunWithTheTargetTheKernelsRunWith) {
  for_each_target([](const std::string& target) {
    EXPECT_EQ(bandwidth::stream_target(), target);
    EXPECT_EQ(bandwidth::stream_target(), current_cpu_target());
  });
}

TEST(BandwidthStreams, CopyIsExactForAnySizeAndAlignmentAndWritesNothingOutside) {
  std::mt19937_64 generator(kSeed);
  for_each_target([&](const std::string&) {
    for (const Pattern pattern : {Pattern::Sequential, Pattern::FourPages}) {
      for (const int threads : kThreadCounts) {
        for (const size_t size : kCopySizes) {
          for (const size_t src_offset : {size_t{0}, size_t{1}, size_t{8}, size_t{60}}) {
            for (const size_t dst_offset : {size_t{0}, size_t{3}, size_t{32}, size_t{64 - 1}}) {
              SCOPED_TRACE(::testing::Message() << bandwidth::to_string(pattern) << ", " << threads << " threads, "
                                                << size << " bytes, src +" << src_offset << ", dst +" << dst_offset);
              // Page-aligned regions, so that the offsets are the pointers' alignments.
              bandwidth::Buffer src_region(src_offset + size + 1);
              bandwidth::Buffer dst_region(kGuardBytes + 64 + size + kGuardBytes);
              auto* src = reinterpret_cast<unsigned char*>(src_region.data()) + src_offset;
              auto* dst_begin = reinterpret_cast<unsigned char*>(dst_region.data());
              const size_t dst_at = 64 * (kGuardBytes / 64) + dst_offset;  // aligned as dst_offset says
              const std::vector<unsigned char> data = random_bytes(size, generator);
              if (size > 0) std::memcpy(src, data.data(), size);
              std::memset(dst_begin, kGuardByte, dst_region.bytes());
              bandwidth::copy_stream(reinterpret_cast<std::byte*>(dst_begin + dst_at),
                                     reinterpret_cast<const std::byte*>(src), size, threads, pattern);
              ASSERT_TRUE(size == 0 || std::memcmp(dst_begin + dst_at, data.data(), size) == 0);
              ASSERT_TRUE(size == 0 || std::memcmp(src, data.data(), size) == 0) << "the source changed";
              ASSERT_EQ(damaged_guards(dst_begin, dst_at, size, dst_region.bytes()), "");
            }
          }
        }
      }
    }
  });
}

TEST(BandwidthStreams, InPlaceMultipliesEveryFloatOnceForAnySizeAndAlignmentAndWritesNothingOutside) {
  std::mt19937_64 generator(kSeed + 1);
  std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  for_each_target([&](const std::string&) {
    for (const Pattern pattern : {Pattern::Sequential, Pattern::FourPages}) {
      for (const int threads : kThreadCounts) {
        for (const size_t count : kFloatCounts) {
          for (const size_t float_offset : {size_t{0}, size_t{1}, size_t{3}, size_t{15}}) {
            // 0-3 trailing bytes that make no whole float: left alone.
            const size_t trailing = count % 4;
            SCOPED_TRACE(::testing::Message() << bandwidth::to_string(pattern) << ", " << threads << " threads, "
                                              << count << " floats + " << trailing << " bytes, at +"
                                              << float_offset * sizeof(float) << " bytes");
            bandwidth::Buffer region(kGuardBytes + (count + float_offset) * sizeof(float) + trailing + kGuardBytes);
            auto* begin = reinterpret_cast<unsigned char*>(region.data());
            std::memset(begin, kGuardByte, region.bytes());
            const size_t at = kGuardBytes + float_offset * sizeof(float);  // kGuardBytes is a multiple of 64
            std::vector<float> values(count);
            for (float& v : values) v = std::ldexp((generator() & 1) ? -magnitude(generator) : magnitude(generator), exponent(generator));
            if (count > 0) std::memcpy(begin + at, values.data(), count * sizeof(float));
            bandwidth::copy_inplace_stream(reinterpret_cast<std::byte*>(begin + at), count * sizeof(float) + trailing,
                                           threads, pattern);
            std::vector<float> result(count);
            if (count > 0) std::memcpy(result.data(), begin + at, count * sizeof(float));
            for (size_t i = 0; i < count; ++i) {
              const float expected = values[i] * bandwidth::kInPlaceFactor;  // one float32 rounding
              ASSERT_EQ(std::memcmp(&result[i], &expected, sizeof(float)), 0)
                  << "float " << i << ": " << values[i] << " -> " << result[i] << ", expected " << expected;
            }
            ASSERT_EQ(damaged_guards(begin, at, count * sizeof(float), region.bytes()), "");
          }
        }
      }
    }
  });
}

// read_stream: the xor of exactly the whole 64-bit words asked for, on every target, any size and
// word alignment, over 1-3 pool threads (a large size so that the pool splits it). The buffer is
// a vector of exactly the words needed, so ASan sees any read past its end.
TEST(BandwidthStreams, ReadXorsEveryWholeWordOnceOverThePool) {
  std::mt19937_64 generator(kSeed);
  const int saved_threads = num_threads();
  std::vector<size_t> sizes = kCopySizes;
  sizes.push_back((size_t{3} << 20) + 4096 * 5 + 24 + 5);
  for_each_target([&](const std::string&) {
    for (const int threads : kThreadCounts) {
      set_num_threads(threads);
      for (const size_t size : sizes) {
        for (const size_t offset_words : {size_t{0}, size_t{1}, size_t{3}, size_t{7}}) {
          SCOPED_TRACE(::testing::Message() << threads << " threads, " << size << " bytes, +" << offset_words << " words");
          std::vector<uint64_t> region(offset_words + (size + 7) / 8);
          for (uint64_t& word : region) word = generator();
          uint64_t expected = 0;
          for (size_t i = 0; i < size / 8; ++i) expected ^= region[offset_words + i];
          const uint64_t got = bandwidth::read_stream(reinterpret_cast<const std::byte*>(region.data() + offset_words), size);
          ASSERT_EQ(got, expected);
        }
      }
    }
  });
  set_num_threads(saved_threads);
}

TEST(BandwidthStreams, MemcpyStreamCopiesOverThreads) {
  std::mt19937_64 generator(kSeed + 2);
  for (const int threads : kThreadCounts) {
    const size_t size = 5 * 4096 + 17;
    bandwidth::Buffer src(size);
    bandwidth::Buffer dst(size);
    const std::vector<unsigned char> data = random_bytes(size, generator);
    std::memcpy(src.data(), data.data(), size);
    bandwidth::memcpy_stream(dst.data(), src.data(), size, threads);
    EXPECT_EQ(std::memcmp(dst.data(), data.data(), size), 0) << threads << " threads";
  }
}

TEST(BandwidthBuffer, IsPageAlignedAndZeroFilled) {
  bandwidth::Buffer buffer(10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % bandwidth::Buffer::kAlignment, 0u);
  EXPECT_EQ(buffer.bytes(), 10000u);
  for (size_t i = 0; i < buffer.bytes(); ++i) ASSERT_EQ(buffer.data()[i], std::byte{0}) << i;
  EXPECT_EQ(bandwidth::Buffer(0).data(), nullptr);
}

// A buffer of whole huge pages is 2 MiB-aligned, zero-filled, and (where Linux offers transparent
// huge pages) its mapping is marked eligible for them: the kernels and the floors in rotary bench
// are timed over the pages rotary's own large allocations get (core/huge_pages.hpp).
TEST(BandwidthBuffer, LargeBuffersAreOnHugePageBoundariesAndAdvised) {
  const size_t size = 3 * (size_t{2} << 20) + 17;
  bandwidth::Buffer buffer(size);
  const auto begin = reinterpret_cast<uintptr_t>(buffer.data());
  EXPECT_EQ(begin % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(buffer.bytes(), size);
  for (size_t i = 0; i < size; i += 4093) ASSERT_EQ(buffer.data()[i], std::byte{0}) << i;
  ASSERT_EQ(buffer.data()[size - 1], std::byte{0});
#if defined(__linux__)
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(thp, modes);
  if (modes.empty() || modes.find("[never]") != std::string::npos) GTEST_SKIP() << "no transparent huge pages here";
  // /proc/self/smaps: the mapping that holds the buffer, and its THPeligible field (Linux >= 5.0).
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int eligible = -1;
  while (std::getline(smaps, line)) {
    unsigned long long from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &from, &to) == 2) {  // a mapping's header line
      inside = from <= begin && begin < to;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) {
      eligible = std::atoi(line.c_str() + 12);
      break;
    }
  }
  if (eligible < 0) GTEST_SKIP() << "smaps has no THPeligible field";
  EXPECT_EQ(eligible, 1) << "THP modes: " << modes;
#endif
}

TEST(BandwidthFloors, RememberTheChosenPatternPerKindAndThreads) {
  bandwidth::Streams streams(64 * 1024);
  EXPECT_EQ(streams.floor(false, 1), Pattern::FourPages);  // the defaults
  EXPECT_EQ(streams.floor(true, 1), Pattern::Sequential);
  streams.choose_floor(false, 2, Pattern::Sequential);
  streams.choose_floor(true, 2, Pattern::FourPages);
  EXPECT_EQ(streams.floor(false, 2), Pattern::Sequential);
  EXPECT_EQ(streams.floor(true, 2), Pattern::FourPages);
  EXPECT_EQ(streams.floor(false, 1), Pattern::FourPages);
  // Every entry point runs, sizes above the buffers' are cut to them.
  streams.run(false, 1 << 20, 2);
  streams.run(true, 1 << 20, 2);
  streams.run_cached(false, 4096);
  streams.run_cached(true, 4096);
  streams.memcpy(1000, 1);
}

}  // namespace
}  // namespace rotary
