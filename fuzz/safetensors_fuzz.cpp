// fuzz/safetensors_fuzz.cpp: the safetensors reader (src/interop/safetensors.hpp) and checkpoint
// conversion between pairing conventions (include/rotary/convert.hpp) on arbitrary files.
//
// Input: byte 0 picks one of a few small attention geometries (Llama GQA, partial rotary,
// DeepSeek MLA) and the pairing to convert to; the rest is the file.
// Properties:
//   - safetensors::parse accepts the file or throws rotary::Error naming the source; an accepted
//     header's tensors lie inside the file, each one's span fits its dtype and shape, and together
//     they tile the data buffer;
//   - convert_safetensors accepts the file or throws rotary::Error and leaves it unchanged;
//   - an accepted conversion keeps the file's size and header bytes, and converting back to the
//     other pairing gives the input byte for byte.
// Anything else thrown (std::bad_alloc, std::out_of_range, ...) reaches libFuzzer as a crash.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "interop/safetensors.hpp"
#include "rotary/convert.hpp"
#include "rotary/error.hpp"

namespace rotary::fuzz {
namespace {

CheckpointGeometry geometry_for(uint8_t choice) {
  CheckpointGeometry g;
  g.source = "fuzz config";
  switch (choice % 3) {
    case 0:  // Llama, 4 heads, 2 kv heads, head_dim 8
      g.num_attention_heads = 4;
      g.num_key_value_heads = 2;
      g.head_dim = 8;
      g.rotary_dim = 8;
      break;
    case 1:  // partial rotary: 2 heads of 6, the leading 4 rotated
      g.num_attention_heads = 2;
      g.num_key_value_heads = 2;
      g.head_dim = 6;
      g.rotary_dim = 4;
      break;
    default:  // DeepSeek MLA: 2 heads of nope 2 + rope 4, kv_lora_rank 4
      g.num_attention_heads = 2;
      g.num_key_value_heads = 2;
      g.head_dim = 6;
      g.rotary_dim = 4;
      g.rotary_offset = 2;
      g.kv_lora_rank = 4;
      break;
  }
  return g;
}

}  // namespace

int safetensors_one_input(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const CheckpointGeometry geometry = geometry_for(data[0]);
  const Style to = (data[0] & 0x80) != 0 ? Style::NeoX : Style::GPTJ;
  const std::string original(reinterpret_cast<const char*>(data + 1), size - 1);

  safetensors::Header header;
  try {
    header = safetensors::parse(original, "fuzz.safetensors");
  } catch (const Error& error) {
    require(starts_with(error.what(), "fuzz.safetensors"), "safetensors errors name the source", error.what());
    return 0;
  }
  const auto file_size = static_cast<int64_t>(original.size());
  require(header.data_start == 8 + header.header_length && header.data_start <= file_size,
          "the header lies inside the file", std::to_string(header.data_start));
  int64_t covered = 0;
  for (const safetensors::TensorEntry& t : header.tensors) {
    require(0 <= t.begin && t.begin <= t.end && header.data_start + t.end <= file_size, "a tensor lies inside the file",
            t.name);
    int64_t elements = 1;
    for (const int64_t extent : t.shape) elements *= extent;  // fits: checked against the span by parse
    require(elements * t.element_size == t.end - t.begin, "a tensor's span fits its dtype and shape", t.name);
    covered += t.end - t.begin;
  }
  require(covered == file_size - header.data_start, "the tensors tile the data buffer", std::to_string(covered));

  std::string file = original;
  try {
    convert_safetensors(file, geometry, {.to = to}, "fuzz.safetensors");
  } catch (const Error& error) {
    require(file == original, "a refused conversion leaves the file unchanged", error.what());
    return 0;
  }
  require(file.size() == original.size(), "conversion keeps the file's size");
  require(file.compare(0, static_cast<size_t>(header.data_start), original, 0, static_cast<size_t>(header.data_start)) == 0,
          "conversion keeps the header bytes");
  convert_safetensors(file, geometry, {.to = to == Style::GPTJ ? Style::NeoX : Style::GPTJ}, "fuzz.safetensors");
  require(file == original, "converting back gives the input byte for byte");
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::safetensors_one_input)
