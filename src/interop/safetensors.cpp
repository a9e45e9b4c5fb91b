// src/interop/safetensors.cpp: the safetensors reader and writer (safetensors.hpp says what is
// checked and why).
#include "interop/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include "core/json.hpp"
#include "rotary/error.hpp"
#include "core/shape_text.hpp"

namespace rotary::safetensors {
namespace {

// The reference reader's limit (tensor.rs, MAX_HEADER_SIZE): a header is a few MB at most.
constexpr int64_t kMaxHeaderLength = 100'000'000;

struct DtypeInfo {
  std::string_view name;
  int64_t size;  // bytes per element; 0 for the sub-byte types
};

// safetensors' Dtype enum (tensor.rs) and its sizes; C64 is a pair of F32.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8},  {"U64", 8},     {"C64", 8},     {"F4", 0},
    {"F6_E2M3", 0}, {"F6_E3M2", 0},
};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

std::string known_dtypes() {
  std::string names;
  for (const DtypeInfo& info : kDtypes) {
    if (info.size == 0) continue;
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  return names;
}

// Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF), as Rust's from_utf8.
// Returns the offset of the first invalid byte, or -1.
int64_t first_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    size_t length = 0;
    uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07;
    } else {
      return static_cast<int64_t>(i);
    }
    if (size - i < length) return static_cast<int64_t>(i);
    for (size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
      code = (code << 6) | (bytes[i + k] & 0x3F);
    }
    const uint32_t minimum = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
    if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return static_cast<int64_t>(i);
    i += length;
  }
  return -1;
}

std::string quoted(std::string_view name) { return json::quote(name); }

// A non-negative integer from the header, or an error naming the tensor, the field and the value.
int64_t non_negative(const json::Value& value, std::string_view source, std::string_view tensor,
                     std::string_view field) {
  if (!value.is_number() || !value.is_integer() || value.as_int64() < 0) {
    throw Error(detail::concat(source, ": tensor ", quoted(tensor), ": ", field,
                               " must be an integer >= 0 (got ", value.describe(), ")"));
  }
  return value.as_int64();
}

TensorEntry read_entry(const std::string& name, const json::Value& value, std::string_view source) {
  if (!value.is_object()) {
    throw Error(detail::concat(source, ": tensor ", quoted(name),
                               " must be an object {dtype, shape, data_offsets} (got ", value.describe(), ")"));
  }
  TensorEntry entry;
  entry.name = name;
  const json::Value* dtype = nullptr;
  const json::Value* shape = nullptr;
  const json::Value* offsets = nullptr;
  for (const auto& [key, field] : value.as_object()) {
    const json::Value** slot = key == "dtype" ? &dtype : key == "shape" ? &shape : key == "data_offsets" ? &offsets : nullptr;
    if (slot == nullptr) {
      throw Error(detail::concat(source, ": tensor ", quoted(name), ": unknown field ", quoted(key),
                                 " (a tensor has dtype, shape and data_offsets)"));
    }
    if (*slot != nullptr) {
      throw Error(detail::concat(source, ": tensor ", quoted(name), ": field ", quoted(key), " appears twice"));
    }
    *slot = &field;
  }
  for (const auto& [field, key] : {std::pair{dtype, "dtype"}, {shape, "shape"}, {offsets, "data_offsets"}}) {
    if (field == nullptr) throw Error(detail::concat(source, ": tensor ", quoted(name), " has no ", key));
  }
  if (!dtype->is_string()) {
    throw Error(detail::concat(source, ": tensor ", quoted(name), ": dtype must be a string (got ",
                               dtype->describe(), ")"));
  }
  entry.dtype = dtype->as_string();
  const DtypeInfo* info = find_dtype(entry.dtype);
  if (info == nullptr) {
    throw Error(detail::concat(source, ": tensor ", quoted(name), ": unknown dtype ", quoted(entry.dtype),
                               " (known: ", known_dtypes(), ")"));
  }
  if (info->size == 0) {
    throw Error(detail::concat(source, ": tensor ", quoted(name), ": dtype ", entry.dtype,
                               " packs elements into fractions of a byte, which rotary does not read"));
  }
  entry.element_size = info->size;
  if (!shape->is_array()) {
    throw Error(detail::concat(source, ": tensor ", quoted(name), ": shape must be an array of integers (got ",
                               shape->describe(), ")"));
  }
  for (size_t i = 0; i < shape->as_array().size(); ++i) {
    entry.shape.push_back(non_negative(shape->as_array()[i], source, name, detail::concat("shape[", i, "]")));
  }
  if (!offsets->is_array() || offsets->as_array().size() != 2) {
    throw Error(detail::concat(source, ": tensor ", quoted(name),
                               ": data_offsets must be an array [begin, end] (got ", offsets->describe(), ")"));
  }
  entry.begin = non_negative(offsets->as_array()[0], source, name, "data_offsets[0]");
  entry.end = non_negative(offsets->as_array()[1], source, name, "data_offsets[1]");
  if (entry.end < entry.begin) {
    throw Error(detail::concat(source, ": tensor ", quoted(name), ": data_offsets [", entry.begin, ", ", entry.end,
                               "] end before they begin"));
  }
  // elements x size == END - BEGIN, without overflow: a shape whose product passes int64 cannot
  // match any span a file holds.
  int64_t bytes = entry.element_size;
  bool overflow = false;
  for (const int64_t extent : entry.shape) overflow = overflow || __builtin_mul_overflow(bytes, extent, &bytes);
  if (std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end()) {
    bytes = 0;
    overflow = false;
  }
  if (overflow || bytes != entry.end - entry.begin) {
    throw Error(detail::concat(source, ": tensor ", quoted(name), ": shape ", json_shape_text(entry.shape), " of ",
                               entry.dtype, " needs ",
                               overflow ? std::string("more than 2^63") : std::to_string(bytes),
                               " bytes, but data_offsets [", entry.begin, ", ", entry.end, "] span ",
                               entry.end - entry.begin));
  }
  return entry;
}

}  // namespace

int64_t dtype_size(std::string_view dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  return info == nullptr ? 0 : info->size;
}

Header parse(std::string_view file, std::string_view source) {
  return parse_prefix(file, static_cast<int64_t>(file.size()), source);
}

int64_t header_end(std::string_view first_8_bytes) {
  if (first_8_bytes.size() < 8) return 8;
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(first_8_bytes[static_cast<size_t>(i)]);
  return length > static_cast<uint64_t>(kMaxHeaderLength) ? 8 : 8 + static_cast<int64_t>(length);
}

Header parse_prefix(std::string_view file, int64_t file_size, std::string_view source) {
  if (static_cast<int64_t>(file.size()) < std::min<int64_t>(file_size, 8)) {
    throw Error(detail::concat(source, ": internal: parse_prefix was given ", file.size(), " bytes of a ", file_size,
                               "-byte file, fewer than its header length field"));
  }
  if (file_size < 8) {
    throw Error(detail::concat(source, ": not a safetensors file: ", file_size,
                               " bytes, fewer than the 8-byte header length"));
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  if (length > static_cast<uint64_t>(kMaxHeaderLength)) {
    throw Error(detail::concat(source, ": header length ", length, " is larger than the format's limit of ",
                               kMaxHeaderLength, " bytes (not a safetensors file?)"));
  }
  Header header;
  header.header_length = static_cast<int64_t>(length);
  header.data_start = 8 + header.header_length;
  if (header.data_start > file_size) {
    throw Error(detail::concat(source, ": header length ", length, " runs past the end of the file (", file_size,
                               " bytes; the header would end at byte ", header.data_start, ")"));
  }
  if (static_cast<int64_t>(file.size()) < header.data_start) {
    throw Error(detail::concat(source, ": internal: parse_prefix was given ", file.size(), " bytes, fewer than the ",
                               header.data_start, " the header takes"));
  }
  const std::string_view text = file.substr(8, static_cast<size_t>(length));
  if (const int64_t bad = first_invalid_utf8(text); bad >= 0) {
    throw Error(detail::concat(source, ": header is not UTF-8 (invalid byte 0x",
                               detail::hex_text(static_cast<unsigned char>(text[static_cast<size_t>(bad)])),
                               " at header offset ", bad, ")"));
  }
  if (text.empty() || text[0] != '{') {
    throw Error(detail::concat(source, ": header must be a JSON object starting with '{' (got ",
                               text.empty() ? std::string("an empty header") : quoted(text.substr(0, 16)), ")"));
  }
  json::ParseOptions options;
  options.max_bytes = kMaxHeaderLength;
  options.max_depth = 64;
  const json::Value root = json::parse(text, detail::concat(source, " header"), nullptr, options);
  if (!root.is_object()) {
    throw Error(detail::concat(source, ": header must be a JSON object (got ", root.describe(), ")"));
  }
  std::unordered_set<std::string> names;
  for (const auto& [name, value] : root.as_object()) {
    if (!names.insert(name).second) {
      throw Error(detail::concat(source, ": tensor ", quoted(name), " appears twice in the header"));
    }
    if (name == "__metadata__") {
      if (value.is_null()) continue;  // the reference reads it as an Option: null is no metadata
      if (!value.is_object()) {
        throw Error(detail::concat(source, ": __metadata__ must be an object of strings (got ", value.describe(), ")"));
      }
      std::unordered_set<std::string> keys;
      for (const auto& [key, text_value] : value.as_object()) {
        if (!keys.insert(key).second) {
          throw Error(detail::concat(source, ": __metadata__ key ", quoted(key), " appears twice"));
        }
        if (!text_value.is_string()) {
          throw Error(detail::concat(source, ": __metadata__[", quoted(key), "] must be a string (got ",
                                     text_value.describe(), ")"));
        }
        header.metadata.emplace_back(key, text_value.as_string());
      }
      continue;
    }
    header.tensors.push_back(read_entry(name, value, source));
  }

  // The tensors tile the buffer: ordered by (begin, end), each begins where the last ended.
  const int64_t buffer_size = file_size - header.data_start;
  std::vector<size_t> order(header.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TensorEntry& x = header.tensors[a];
    const TensorEntry& y = header.tensors[b];
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  int64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const size_t index : order) {
    const TensorEntry& entry = header.tensors[index];
    if (entry.end > buffer_size) {
      throw Error(detail::concat(source, ": tensor ", quoted(entry.name), ": data_offsets [", entry.begin, ", ",
                                 entry.end, "] run past the data buffer (", buffer_size, " bytes after the header)"));
    }
    if (entry.begin < covered) {
      throw Error(detail::concat(source, ": tensor ", quoted(entry.name), ": data_offsets [", entry.begin, ", ",
                                 entry.end, "] overlap tensor ", quoted(previous->name), " [", previous->begin, ", ",
                                 previous->end, "]"));
    }
    if (entry.begin > covered) {
      throw Error(detail::concat(source, ": tensor ", quoted(entry.name), ": data_offsets [", entry.begin, ", ",
                                 entry.end, "] leave bytes [", covered, ", ", entry.begin, ") of the buffer unused",
                                 previous ? detail::concat(" after tensor ", quoted(previous->name)) : std::string(),
                                 " (the format's tensors tile the buffer)"));
    }
    covered = entry.end;
    if (entry.end > entry.begin || previous == nullptr) previous = &entry;
  }
  if (covered != buffer_size) {
    throw Error(detail::concat(source, ": the data buffer holds ", buffer_size, " bytes but its tensors end at byte ",
                               covered, previous ? detail::concat(" (tensor ", quoted(previous->name), ")") : std::string(),
                               "; ", buffer_size - covered, " trailing bytes belong to no tensor"));
  }
  return header;
}

std::string serialize(const std::vector<TensorData>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
  json::Writer writer(json::TextLayout::Compact);
  writer.begin_object();
  if (!metadata.empty()) {
    writer.key("__metadata__").begin_object();
    for (const auto& [key, value] : metadata) writer.key(key).value(value);
    writer.end_object();
  }
  std::unordered_set<std::string> names;
  int64_t offset = 0;
  for (const TensorData& tensor : tensors) {
    if (!names.insert(tensor.name).second || tensor.name == "__metadata__") {
      throw Error(detail::concat("safetensors: tensor name ", quoted(tensor.name), " is used twice or reserved"));
    }
    const int64_t size = dtype_size(tensor.dtype);
    if (size == 0) throw Error(detail::concat("safetensors: tensor ", quoted(tensor.name), ": unknown dtype ", quoted(tensor.dtype)));
    int64_t bytes = size;
    for (const int64_t extent : tensor.shape) {
      if (extent < 0 || __builtin_mul_overflow(bytes, extent, &bytes)) {
        throw Error(detail::concat("safetensors: tensor ", quoted(tensor.name), ": invalid shape ", json_shape_text(tensor.shape)));
      }
    }
    if (bytes != static_cast<int64_t>(tensor.bytes.size())) {
      throw Error(detail::concat("safetensors: tensor ", quoted(tensor.name), ": shape ", json_shape_text(tensor.shape),
                                 " of ", tensor.dtype, " needs ", bytes, " bytes (got ", tensor.bytes.size(), ")"));
    }
    writer.key(tensor.name).begin_object();
    writer.key("dtype").value(tensor.dtype);
    writer.key("shape").begin_array();
    for (const int64_t extent : tensor.shape) writer.value(extent);
    writer.end_array();
    writer.key("data_offsets").begin_array().value(offset).value(offset + bytes).end_array();
    writer.end_object();
    offset += bytes;
  }
  writer.end_object();
  std::string header = writer.str();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  uint64_t length = header.size();
  for (size_t i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  file += header;
  for (const TensorData& tensor : tensors) file += tensor.bytes;
  return file;
}

}  // namespace rotary::safetensors
