// src/cpu/bandwidth/stream_kernels.hpp: one thread's part of a stream, run with the current
// Highway target (stream_kernels.cpp; internal to rotary_bandwidth: streams.cpp splits a stream
// into parts and calls these). No Highway type here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cpu/bandwidth/streams.hpp"

namespace rotary::bandwidth::detail {

// Streaming copy of [src, src + bytes) to dst, any alignment, no overlap; no fence (the caller
// fences once per part).
void copy_part(std::byte* dst, const std::byte* src, size_t bytes, Pattern pattern);

// x[i] *= kInPlaceFactor for i in [0, count); x aligned for float.
void scale_part(float* x, size_t count, Pattern pattern);

// The xor of the whole 64-bit words of [data, data + bytes) (data 8-byte aligned), read line
// after line with no stores.
uint64_t read_part(const std::byte* data, size_t bytes);

// The name of the target HWY_DYNAMIC_DISPATCH picks now.
std::string dispatched_target();

}  // namespace rotary::bandwidth::detail
