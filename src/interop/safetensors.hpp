// src/interop/safetensors.hpp: reading and writing safetensors files (Hugging Face's checkpoint
// format), for checkpoint conversion (include/rotary/convert.hpp). Internal, not installed: a file
// format is not part of the RoPE API; the CLI, the tests and the fuzzer include it as
// "interop/safetensors.hpp".
//
// The format (github.com/huggingface/safetensors, README "Format", and its reader,
// safetensors/src/tensor.rs: read_metadata, Metadata::validate, Dtype::size):
//   8 bytes    N, the header's length, an unsigned 64-bit little-endian integer
//   N bytes    a JSON object, UTF-8: {"<tensor name>": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [BEGIN, END]}, ..., "__metadata__": {"<key>": "<string>", ...}}
//              (__metadata__ optional; the writer pads the header with spaces to a multiple of 8)
//   the rest   the data buffer; a tensor's bytes are [BEGIN, END) of it, C order, little endian.
//
// What parse() checks, each failure a rotary::Error "<source>: ..." naming the tensor and the
// value (never a crash, never a read past the bytes given):
//   - the file holds the 8-byte length, N <= 100,000,000 (the reference reader's limit) and
//     8 + N <= file size;
//   - the header is UTF-8, starts with '{' and is one JSON object (core/json.hpp's reader);
//   - no name appears twice (JSON accepts it, the format cannot mean it);
//   - each tensor entry is an object with exactly dtype, shape and data_offsets: a known dtype
//     (unknown ones are refused, not guessed), a shape of integers >= 0, two integers
//     0 <= BEGIN <= END;
//   - elements(shape) x size(dtype) == END - BEGIN, computed without overflow;
//   - the tensors, ordered by BEGIN, tile the buffer: the first begins at 0, each begins where
//     the previous one ends (no gap, no overlap) and the last ends at the file's end, as the
//     reference's validate() requires;
//   - __metadata__, if present and not null (the reference reads it as an Option), is an object of
//     strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rotary::safetensors {

// Bytes per element of a safetensors dtype name ("F32" -> 4), or 0 for a name this reader does not
// know. The sub-byte types of newer writers (F4, F6_E2M3, F6_E3M2) are known but refused by
// parse(): their elements do not fill whole bytes.
int64_t dtype_size(std::string_view dtype);

struct TensorEntry {
  std::string name;
  std::string dtype;           // as the header spells it: "F32", "BF16", ...
  int64_t element_size = 0;    // bytes per element
  std::vector<int64_t> shape;
  int64_t begin = 0;           // offsets into the data buffer (after the header), END exclusive
  int64_t end = 0;
};

struct Header {
  int64_t header_length = 0;   // N
  int64_t data_start = 0;      // 8 + N: where the data buffer starts in the file
  std::vector<TensorEntry> tensors;                            // in header order
  std::vector<std::pair<std::string, std::string>> metadata;   // __metadata__, in header order
};

// Parses and checks a whole file held in `file` (see the file comment). `source` starts every
// message (a path). Throws rotary::Error.
Header parse(std::string_view file, std::string_view source);

// The same checks for a file of `file_size` bytes of which `prefix` holds the start, at least
// its first header_end(prefix) bytes (the whole header): what a reader that streams the data
// buffer needs. A prefix too short for the header is a caller's bug, reported as an Error.
Header parse_prefix(std::string_view prefix, int64_t file_size, std::string_view source);

// 8 + N for a file starting with `first_8_bytes` (8 when fewer than 8 are given or N is past
// the format's limit: parse_prefix then reports the file itself).
int64_t header_end(std::string_view first_8_bytes);

// A tensor to write: name, dtype, shape and its bytes (elements(shape) x dtype_size bytes).
struct TensorData {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A safetensors file holding `tensors` in the order given, and `metadata` (none when empty), the
// header padded with spaces to a multiple of 8 bytes as the reference writer does. Throws
// rotary::Error for an unknown dtype, a duplicate name or bytes that do not fit the shape.
std::string serialize(const std::vector<TensorData>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace rotary::safetensors
