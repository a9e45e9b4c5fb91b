// src/cli/npy.hpp: NumPy .npy files (format versions 1.0, 2.0 and 3.0), for the
// `rotary apply` command and for tests.
// Part of rotary_cli_commands, not of the library: the .npy format is how the command reads and
// writes tensors, not part of the RoPE API (the library takes TensorViews). Not installed.
//
// Element types: float32 ('<f4'), float16 ('<f2'), float64 ('<f8'), int64 ('<i8', positions),
// and bfloat16, which NumPy lacks: stored as uint16 bit patterns ('<u2'), or as ml_dtypes writes
// it ('<V2' / 'bfloat16'). Integers of the other widths ('|i1', '<i2', '<i4', '|u1', '<u4',
// '<u8') are read into int64 (Array::type Int64), as NumPy's astype(np.int64) would; a uint64
// value above the int64 range is an Error naming it. uint16 ('<u2') stays bfloat16. Only C
// order (fortran_order False) and little-endian data ('|' for one-byte kinds, '<' or '=' on
// this little-endian machine) are accepted.
//
// Every malformed or lying file is a rotary::Error naming the path and the problem: bad magic,
// unsupported version, a header that is not the Python dict NumPy writes, an unknown descr,
// fortran_order True, a negative or overflowing shape, a header longer than the file, data
// shorter (or longer) than the shape says. Reads never allocate more than the file holds, except
// that narrow integers take 8 bytes each once read (within ReadOptions::max_bytes).
//
// read() reads front to back and stops at the first problem: the magic string and version (8
// bytes; so /dev/zero or a 1 GiB file that is not a .npy fails at once, "not a .npy file (bad
// magic)"), then the header, then exactly the data the header declares. A regular file whose
// size disagrees with the header is refused before its data is read; a pipe or a device is read
// as far as the header says plus one byte, to see that it ends there. Nothing larger than
// ReadOptions::max_bytes is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rotary::npy {

enum class ElementType { Float32, Float16, BFloat16, Float64, Int64 };

std::string_view to_string(ElementType type);  // "float32", "float16", "bfloat16", "float64", "int64"
int64_t element_size(ElementType type);

struct Array {
  ElementType type = ElementType::Float32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // C order, little endian, exactly prod(shape) * element_size

  int64_t size() const;  // prod(shape); 1 for a 0-d array
};

struct ReadOptions {
  // The largest file accepted: header plus the data its shape declares. A file that declares more
  // is an Error naming both sizes, before any of its data is read: a cap like the config reader's
  // (json::ParseOptions::max_bytes), so that a wrong path or a lying header cannot exhaust memory.
  // 64 GiB holds any one q or k a single machine rotates; raise it for larger arrays.
  int64_t max_bytes = int64_t{64} << 30;
};

// Parses .npy bytes (`source` names them in errors).
Array parse(const std::vector<unsigned char>& file, const std::string& source, const ReadOptions& options = {});
// Reads a file (or a pipe, a device); errors name the path ("npy <path>: ...", or "<path>: cannot
// read file: <reason>").
Array read(const std::string& path, const ReadOptions& options = {});

// Serializes with a version 1.0 header (2.0 when the header needs it). bfloat16 is written as
// '<u2'.
std::vector<unsigned char> serialize(const Array& array);
// Writes atomically: to a temporary file beside `path`, then renamed over it, so that a failed
// write (full disk, size limit) leaves `path` as it was, never a truncated .npy. Errors name the
// path and the system's reason: "npy: cannot write <path>: <reason>".
void write(const std::string& path, const Array& array);

}  // namespace rotary::npy
