// src/cpu/bandwidth/streams.hpp: the memory streams RoPE kernels are compared with.
//
// RoPE reads q and k once and writes them once, so no kernel can beat a stream that moves the
// same bytes. Each stream counts bytes = 2 x its size (every byte read once and written once),
// the rule the kernels' GB/s use:
//   copy          src -> dst with non-temporal (streaming) stores: the floor of out-of-place
//                 calls (the kernels stream their outputs too from 16 MiB, floors.hpp).
//   copy_inplace  x[i] = x[i] * kInPlaceFactor over one buffer of floats, ordinary stores: the
//                 floor of in-place calls. It writes lines it has just read, so it needs no
//                 read-for-ownership of a separate destination.
//   memcpy        glibc's memcpy as called, for reference. At these sizes it uses ordinary
//                 stores below its non-temporal threshold (3/4 of the shared cache it is told
//                 of: 192 MiB on the AMD EPYC VM, 104 MB on the Intel one), and ran at 0.5-0.8
//                 of the streaming copy there (docs/performance.md).
// copy and copy_inplace each come in two access patterns, because which is faster depends on
// the machine:
//   Sequential    64-byte line after 64-byte line.
//   FourPages     whole 16 KiB blocks, each step one 64-byte line from each of four consecutive
//                 pages, as glibc's memcpy copies buffers above its non-temporal threshold
//                 (large_memcpy_4x: four pages in flight keep more DRAM rows open). On the Intel
//                 machine without BF16 the four-page copy was the faster (25-29 GB/s with 1
//                 thread against 20-27); on the AMD EPYC AVX2 machine the sequential
//                 one (64-68 GB/s against 40-46).
// `rotary bench` times both and takes the faster as the floor (floors.hpp).
//
// One more stream bounds the kernels that only read (attention's decode: the KV cache is read,
// a few hundred bytes written):
//   read          every 64-bit word of a buffer xor-ed into a checksum, line after line, no
//                 stores; bytes = its size (each byte read once). It runs on rotary's worker pool
//                 (set_num_threads, cpu::parallel_rows), as attention does, so it pays no thread
//                 start that the decode does not.
// One core reads less than the copy moves (the EPYC AVX-512 machine, one thread: read 39-44 GB/s,
// copy 54-59 GB/s counting its bytes read + written), so a read-only kernel's ratio to the copy
// floor cannot reach 1 on one thread; `rotary bench` gives decode rows both ratios.
//
// The streams are Highway code compiled once per target (stream_kernels.cpp) and dispatched at
// run time like the kernels, so they use the same vector width: the target chosen by
// force_cpu_target() or $ROTARY_CPU_TARGET (include/rotary/apply.hpp), else the best one
// compiled in that this CPU supports. A floor is then measured with the target of the kernels
// it is compared with. (A baseline-SSE2 in-place loop was measurably slower on data in cache:
// 25 against 44 GB/s on an 84 MB buffer.)
//
// Threads: with `threads` > 1 the buffer is cut into that many contiguous parts, each starting a
// multiple of 4 KiB from the start; the calling thread streams the first, one std::thread each of
// the others (thread start-up, ~20-50 us, is inside the call: under 1% of a prefill-sized stream).
//
// Any size and any alignment: each part streams whole vectors from its first 64-byte boundary
// on and copies the bytes before it and after the last whole line (FourPages: after the last
// whole 16 KiB block, the rest goes line by line) without streaming stores. Nothing outside
// [dst, dst + bytes) is written. The benchmarks' buffers are page-aligned (buffer.hpp) and
// their parts whole blocks, so only whole lines and blocks are timed there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rotary::bandwidth {

// The two access patterns of copy and copy_inplace (see above).
enum class Pattern { Sequential, FourPages };
const char* to_string(Pattern pattern);  // "sequential", "4 pages at a time"

// 1 + 2^-23: values in [1, 2) stay normal (no denormal slow path) for millions of passes.
constexpr float kInPlaceFactor = 1.0000001f;

// copy: `bytes` from src to dst with streaming stores, then a store fence on each thread (the
// stores are weakly ordered: they are complete when this returns). src and dst do not overlap.
void copy_stream(std::byte* dst, const std::byte* src, size_t bytes, int threads,
                 Pattern pattern = Pattern::FourPages);

// copy_inplace: x[i] *= kInPlaceFactor for the bytes / 4 floats at `data` (aligned for float;
// trailing bytes that make no whole float are left alone), each product rounded as float32.
void copy_inplace_stream(std::byte* data, size_t bytes, int threads, Pattern pattern = Pattern::Sequential);

// read: the xor of the whole 64-bit words of [data, data + bytes) (data 8-byte aligned), split
// into contiguous 4 KiB-aligned parts over rotary's worker pool (num_threads() threads, as
// set_num_threads left it); the checksum is returned so that no load can be dropped.
uint64_t read_stream(const std::byte* data, size_t bytes);

// memcpy: glibc's, as called, on each part.
void memcpy_stream(std::byte* dst, const std::byte* src, size_t bytes, int threads);

// Fills a buffer with floats in [1, 2) (never zero, never denormal; no zero-page shortcuts).
void copy_inplace_init(std::byte* data, size_t bytes);

// The Highway target the streams run with now ("AVX3", "AVX2", ... as current_cpu_target()
// names them; under AVX3_BF16, which differs from AVX3 only in bf16 stores, the streams run
// AVX3's code and are named AVX3_BF16). Like every stream call, it first applies $ROTARY_CPU_TARGET once per process,
// as rotary::apply does on its first call.
std::string stream_target();

}  // namespace rotary::bandwidth
