// src/cli/npy.cpp: reading and writing NumPy .npy files.
//
// Format (NumPy's numpy/lib/format.py, "NEP 1"): the magic "\x93NUMPY", a major and a minor
// version byte, the header length (little-endian uint16 in 1.0, uint32 in 2.0 and 3.0), then
// the header: the repr() of a Python dict, {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }, padded with spaces and a final '\n' so that the data starts at a multiple
// of 64 bytes. The data follows, C order, with nothing after it.
//
// NumPy reads the header with ast.literal_eval. We parse exactly the subset NumPy writes
// (strings, True / False, tuples of integers, in a dict of exactly these three keys) with a
// small recursive-descent parser, so that a file which is not a NumPy array is an Error with
// the offset of the problem rather than a guess.
//
// parse() and read() share one reader (read_npy) that takes the file front to back: the magic
// string first (8 bytes: a file that is not a .npy, even /dev/zero, fails there), then the
// header, then exactly the data the header declares. Every length read from the file is checked
// before it is used: against the file's size when that is known (a buffer, a regular file: a
// size that disagrees with the header is an error before the data is read), and against
// ReadOptions::max_bytes; a pipe is read only as far as the header says, plus one byte to see
// that it ends there. So a lying header can neither read past the end nor make us allocate more
// than the file holds (narrow integers excepted: read into int64, up to 8 times their file size,
// under the same cap), and no input is read without bound.
//
// write() goes through detail::AtomicFileSet (src/core/atomic_file.hpp): a temporary file, then a rename.
#include "cli/npy.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>

#include "core/atomic_file.hpp"
#include "rotary/error.hpp"
#include "core/shape_text.hpp"

namespace rotary::npy {

// The data bytes are handed to kernels as they are, and '=' (native) is read as '<'.
static_assert(std::endian::native == std::endian::little, "rotary's .npy support assumes a little-endian host");

std::string_view to_string(ElementType type) {
  switch (type) {
    case ElementType::Float32: return "float32";
    case ElementType::Float16: return "float16";
    case ElementType::BFloat16: return "bfloat16";
    case ElementType::Float64: return "float64";
    case ElementType::Int64: return "int64";
  }
  return "unknown";
}

int64_t element_size(ElementType type) {
  switch (type) {
    case ElementType::Float32: return 4;
    case ElementType::Float16: return 2;
    case ElementType::BFloat16: return 2;
    case ElementType::Float64: return 8;
    case ElementType::Int64: return 8;
  }
  return 0;
}

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// NumPy aligns the data to 64 bytes (format.py ARRAY_ALIGN) and leaves room in the header for
// the first axis to grow to 21 digits (GROWTH_AXIS_MAX_DIGITS), so that appending can rewrite
// the header in place. Writing the same bytes makes our files identical to np.save's.
constexpr size_t kArrayAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;

// File bytes quoted for a message: printable ASCII as is, the rest as \xNN, at most
// `max_chars` source bytes.
std::string quoted(std::string_view bytes, size_t max_chars = 40) {
  std::string out = "'";
  for (size_t i = 0; i < bytes.size() && i < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += bytes.size() > max_chars ? "...'" : "'";
  return out;
}

// Elements in `shape` (whose entries are >= 0), or nullopt when the product overflows int64. A
// zero extent makes the product 0 whatever the others are.
std::optional<int64_t> checked_count(const std::vector<int64_t>& shape) {
  for (int64_t extent : shape) {
    if (extent == 0) return 0;
  }
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(count, extent, &count)) return std::nullopt;
  }
  return count;
}

// ---------------------------------------------------------------------------------------------
// The header dict.

enum class Key { Descr, FortranOrder, Shape };
constexpr std::string_view kKeyNames[] = {"descr", "fortran_order", "shape"};
// What each key's value must be, for messages.
constexpr std::string_view kKeyExpectations[] = {"a string such as '<f4'", "True or False",
                                                 "a tuple of non-negative integers such as (2, 3)"};

struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

// Recursive descent over:
//   header  := ws '{' ws [entry (ws ',' ws entry)* ws [',']] ws '}' ws
//   entry   := string ws ':' ws value
//   value   := string | 'True' | 'False' | tuple
//   tuple   := '(' ws ')' | '(' ws int ws ',' ws ')' | '(' ws int (ws ',' ws int)+ ws [','] ws ')'
//   int     := ['-'] digit+ ['L']        ('L': Python 2 longs, as NumPy accepts in 1.0 / 2.0)
//   string  := "'" [^'\\\n]* "'" | '"' [^"\\\n]* '"'
//   ws      := [ \t\r\n\f]*
// Negative integers are parsed so that they can be rejected by name ("shape[0] must be >= 0").
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where, bool allow_long_suffix)
      : text_(text), where_(where), allow_long_suffix_(allow_long_suffix) {}

  Header parse() {
    Header header;
    skip_space();
    expect('{', "'{' opening the dict NumPy writes, {'descr': ..., 'fortran_order': ..., 'shape': ..., }");
    skip_space();
    while (peek() != '}') {
      const size_t key_offset = pos_;
      if (peek() != '\'' && peek() != '"') fail_syntax("a quoted key or '}'");
      const std::string key_text = parse_string();
      const Key key = key_named(key_text);
      if (seen_[static_cast<int>(key)]) {
        throw Error(detail::concat(where_, ": header key '", key_text, "' must appear once (got it again at offset ",
                                   key_offset, ")"));
      }
      seen_[static_cast<int>(key)] = true;
      skip_space();
      expect(':', "':' after the key");
      skip_space();
      parse_value(key, header);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        fail_syntax("',' or '}' after a value");
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail_syntax("the end of the header after the dict");
    return header;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r' || peek() == '\n' || peek() == '\f')) ++pos_;
  }

  std::string excerpt(size_t offset) const {
    return offset >= text_.size() ? std::string("end of header") : quoted(text_.substr(offset));
  }

  [[noreturn]] void fail_syntax(std::string_view expected) const {
    throw Error(detail::concat(where_, ": header at offset ", pos_, " must be ", expected, " (got ", excerpt(pos_), ")"));
  }

  void expect(char c, std::string_view expected) {
    if (peek() != c || at_end()) fail_syntax(expected);
    ++pos_;
  }

  Key key_named(std::string_view name) const {
    for (int key = 0; key < 3; ++key) {
      if (kKeyNames[key] == name) return static_cast<Key>(key);
    }
    throw Error(detail::concat(where_, ": header key must be one of 'descr', 'fortran_order', 'shape' (got ",
                               quoted(name), ")"));
  }

  // A string without escapes: NumPy's keys and descrs never need them.
  std::string parse_string() {
    const size_t open = pos_;
    const char quote = text_[pos_++];
    const size_t begin = pos_;
    while (!at_end() && peek() != quote) {
      if (peek() == '\\' || peek() == '\n') {
        throw Error(detail::concat(where_, ": header string at offset ", open,
                                   " must be plain characters closed by its opening quote on the same line (got ",
                                   excerpt(open), ")"));
      }
      ++pos_;
    }
    if (at_end()) {
      throw Error(detail::concat(where_, ": header string at offset ", open, " must end with a closing ", quote,
                                 " (got ", excerpt(open), ")"));
    }
    ++pos_;
    return std::string(text_.substr(begin, pos_ - 1 - begin));
  }

  [[noreturn]] void fail_value(Key key, size_t value_offset) const {
    const int index = static_cast<int>(key);
    throw Error(detail::concat(where_, ": ", kKeyNames[index], " must be ", kKeyExpectations[index], " (got ",
                               excerpt(value_offset), ")"));
  }

  void parse_value(Key key, Header& header) {
    const size_t value_offset = pos_;
    switch (key) {
      case Key::Descr:
        if (peek() != '\'' && peek() != '"') fail_value(key, value_offset);
        header.descr = parse_string();
        return;
      case Key::FortranOrder:
        if (text_.substr(pos_, 4) == "True") {
          header.fortran_order = true;
          pos_ += 4;
        } else if (text_.substr(pos_, 5) == "False") {
          header.fortran_order = false;
          pos_ += 5;
        } else {
          fail_value(key, value_offset);
        }
        // "Trueish" is a name, not True.
        if (is_name_char(peek())) fail_value(key, value_offset);
        return;
      case Key::Shape:
        header.shape = parse_tuple(key, value_offset);
        return;
    }
  }

  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }

  std::vector<int64_t> parse_tuple(Key key, size_t value_offset) {
    std::vector<int64_t> items;
    if (peek() != '(') fail_value(key, value_offset);
    ++pos_;
    skip_space();
    bool trailing_comma = false;
    while (peek() != ')') {
      items.push_back(parse_int(key, value_offset, items.size()));
      skip_space();
      trailing_comma = false;
      if (peek() == ',') {
        ++pos_;
        skip_space();
        trailing_comma = true;
      } else if (peek() != ')') {
        fail_value(key, value_offset);
      }
    }
    // (5) is the integer 5 in Python, not a tuple.
    if (items.size() == 1 && !trailing_comma) fail_value(key, value_offset);
    ++pos_;
    return items;
  }

  int64_t parse_int(Key key, size_t value_offset, size_t index) {
    const size_t begin = pos_;
    const bool negative = peek() == '-';
    if (negative) ++pos_;
    if (peek() < '0' || peek() > '9') fail_value(key, value_offset);
    // Accumulate as a negative number so that the magnitude check is the same for both signs.
    int64_t value = 0;
    bool overflow = false;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      overflow = overflow || __builtin_mul_overflow(value, 10, &value) || __builtin_sub_overflow(value, digit, &value);
      ++pos_;
    }
    if (!overflow && !negative) overflow = __builtin_mul_overflow(value, -1, &value);
    if (overflow) {
      throw Error(detail::concat(where_, ": shape[", index, "] must fit in int64 (got ",
                                 text_.substr(begin, pos_ - begin), ")"));
    }
    if (allow_long_suffix_ && peek() == 'L') ++pos_;
    if (is_name_char(peek()) || peek() == '.') fail_value(key, value_offset);
    return value;
  }

  std::string_view text_;
  const std::string& where_;
  bool allow_long_suffix_;
  size_t pos_ = 0;
  bool seen_[3] = {false, false, false};
};

// How a descr is stored: the Array's element type, and the file's own element type, which differs
// for integers. NumPy writes one-byte kinds with '|', the others with '<' (or '=', native order).
struct DescrName {
  std::string_view descr;
  ElementType type;
  std::string_view stored;  // as the file holds it, for messages: "float32", "int32", "uint8"
  int64_t stored_size;      // bytes per element in the file
  bool is_unsigned = false;
};
// The descrs np.save writes for our element types ('<V2' and 'bfloat16' are ml_dtypes' bfloat16).
// Integers of every width are read into int64, as NumPy's astype(np.int64) would: positions saved
// from torch.int32 or np.int32 need no conversion first. '<u2' is not among them: it is how NumPy
// stores bfloat16 bit patterns, and a uint16 array of positions cannot be told apart from those.
constexpr DescrName kDescrs[] = {
    {"<f4", ElementType::Float32, "float32", 4},
    {"<f2", ElementType::Float16, "float16", 2},
    {"<f8", ElementType::Float64, "float64", 8},
    {"<u2", ElementType::BFloat16, "bfloat16", 2},
    {"<V2", ElementType::BFloat16, "bfloat16", 2},
    {"bfloat16", ElementType::BFloat16, "bfloat16", 2},
    {"<i8", ElementType::Int64, "int64", 8},
    {"<i4", ElementType::Int64, "int32", 4},
    {"<i2", ElementType::Int64, "int16", 2},
    {"|i1", ElementType::Int64, "int8", 1},
    {"<u8", ElementType::Int64, "uint64", 8, true},
    {"<u4", ElementType::Int64, "uint32", 4, true},
    {"|u1", ElementType::Int64, "uint8", 1, true},
};

const DescrName* lookup_descr(std::string_view descr) {
  for (const DescrName& entry : kDescrs) {
    if (entry.descr == descr) return &entry;
  }
  return nullptr;
}

const DescrName& element_type_of(const std::string& descr, const std::string& where) {
  // '=' is native order, little-endian on every host we build for (static_assert above).
  const std::string normalized = !descr.empty() && descr[0] == '=' ? "<" + descr.substr(1) : descr;
  if (const DescrName* entry = lookup_descr(normalized)) return *entry;
  if (!descr.empty() && descr[0] == '>' && lookup_descr("<" + descr.substr(1))) {
    throw Error(detail::concat(where, ": descr must be little-endian ('<' or '='): rotary does not byte-swap; save with "
                               "a.astype(a.dtype.newbyteorder('<')) (got ", quoted(descr), ")"));
  }
  throw Error(detail::concat(where, ": descr must be one of '<f4', '<f2', '<u2' (bfloat16 bits), '<f8', or integers '|i1', "
                             "'<i2', '<i4', '<i8', '|u1', '<u4', '<u8' (got ", quoted(descr), ")"));
}

std::string missing_key_message(const Header& header, std::string_view key, const std::string& where) {
  std::string present;
  if (header.descr) present += "'descr'";
  if (header.fortran_order) present += present.empty() ? "'fortran_order'" : ", 'fortran_order'";
  if (header.shape) present += present.empty() ? "'shape'" : ", 'shape'";
  return detail::concat(where, ": header must have the key '", key, "' (got ",
                        present.empty() ? std::string("no keys") : "keys " + present, ")");
}

uint32_t read_le(const std::vector<unsigned char>& bytes, size_t offset, size_t num_bytes) {
  uint32_t value = 0;
  for (size_t i = 0; i < num_bytes; ++i) value |= static_cast<uint32_t>(bytes[offset + i]) << (8 * i);
  return value;
}

// Bytes in `shape` of elements of `size` bytes, or nullopt when that does not fit in int64.
std::optional<int64_t> checked_bytes(const std::vector<int64_t>& shape, int64_t size) {
  const std::optional<int64_t> count = checked_count(shape);
  int64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, size, &bytes)) return std::nullopt;
  return bytes;
}
std::optional<int64_t> checked_bytes(const std::vector<int64_t>& shape, ElementType type) {
  return checked_bytes(shape, element_size(type));
}

// The file's integers (`stored`: its width and signedness), little-endian, as int64. A uint64
// above the int64 range is an Error naming it: wrapping it to a negative position would be a
// silent wrong answer.
std::vector<unsigned char> widen_to_int64(const std::vector<unsigned char>& data, const DescrName& stored,
                                          const std::string& where) {
  const size_t count = data.size() / static_cast<size_t>(stored.stored_size);
  std::vector<unsigned char> out(count * sizeof(int64_t));
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* bytes = data.data() + i * static_cast<size_t>(stored.stored_size);
    uint64_t bits = 0;
    for (int64_t b = 0; b < stored.stored_size; ++b) bits |= static_cast<uint64_t>(bytes[b]) << (8 * b);
    int64_t value = 0;
    if (stored.is_unsigned) {
      if (bits > static_cast<uint64_t>(INT64_MAX)) {
        throw Error(detail::concat(where, ": ", stored.stored, " element [", i, "] must be at most ", INT64_MAX,
                                   " to be read as int64 (got ", bits, ")"));
      }
      value = static_cast<int64_t>(bits);
    } else {
      const int shift = static_cast<int>(64 - 8 * stored.stored_size);  // sign-extend from the stored width
      value = static_cast<int64_t>(bits << shift) >> shift;
    }
    std::memcpy(out.data() + i * sizeof(int64_t), &value, sizeof(int64_t));
  }
  return out;
}

// Where the bytes of a .npy file come from, front to back: a buffer (parse) or an open file
// (read). total_bytes is the whole size when it is known before reading (a buffer, a regular
// file); a pipe or a device has none.
class Input {
 public:
  virtual ~Input() = default;
  // Appends up to `count` bytes to `into`; fewer only at the end of the input.
  virtual void read_into(std::vector<unsigned char>& into, size_t count) = 0;
  std::optional<uint64_t> total_bytes;
};

class BufferInput : public Input {
 public:
  explicit BufferInput(const std::vector<unsigned char>& file) : file_(file) { total_bytes = file.size(); }
  void read_into(std::vector<unsigned char>& into, size_t count) override {
    const size_t taken = std::min(count, file_.size() - pos_);
    into.insert(into.end(), file_.begin() + static_cast<std::ptrdiff_t>(pos_),
                file_.begin() + static_cast<std::ptrdiff_t>(pos_ + taken));
    pos_ += taken;
  }

 private:
  const std::vector<unsigned char>& file_;
  size_t pos_ = 0;
};

struct CloseFile {
  void operator()(std::FILE* stream) const { std::fclose(stream); }
};

class FileInput : public Input {
 public:
  explicit FileInput(const std::string& path) : path_(path) {
    errno = 0;
    stream_.reset(std::fopen(path.c_str(), "rb"));
    if (!stream_) throw cannot_read(errno);
    struct stat status {};
    if (::fstat(::fileno(stream_.get()), &status) == 0 && S_ISREG(status.st_mode)) {
      total_bytes = static_cast<uint64_t>(status.st_size);
    }
  }

  void read_into(std::vector<unsigned char>& into, size_t count) override {
    // Of a regular file the callers ask only for bytes it holds (checked against its size), so
    // the buffer is sized at once. Of a stream, 1 MiB at a time: memory follows what arrives.
    const size_t step = total_bytes ? count : std::min<size_t>(count, size_t{1} << 20);
    size_t done = 0;
    while (done < count) {
      const size_t want = std::min(step, count - done);
      const size_t before = into.size();
      into.resize(before + want);
      errno = 0;
      const size_t got = std::fread(into.data() + before, 1, want, stream_.get());
      into.resize(before + got);
      done += got;
      if (got < want) {
        // fread on a directory fails with EISDIR here (fopen itself succeeds on Linux).
        if (std::ferror(stream_.get())) throw cannot_read(errno != 0 ? errno : EIO);
        return;
      }
    }
  }

 private:
  Error cannot_read(int error) const {
    return Error(detail::concat(path_, ": cannot read file: ", std::generic_category().message(error)));
  }

  std::string path_;
  std::unique_ptr<std::FILE, CloseFile> stream_;
};

// The whole format, read from `input` in order: the 8-byte preamble, the length field, the
// header, then exactly the data the header declares. Each length is checked before it is read
// (against the input's size when known, and against options.max_bytes), so neither a lying header
// nor a stream without end can make this read or allocate more than the file holds.
Array read_npy(Input& input, const std::string& where, const ReadOptions& options) {
  std::vector<unsigned char> preamble;
  input.read_into(preamble, kMagic.size() + 2);
  const std::string_view bytes(reinterpret_cast<const char*>(preamble.data()), preamble.size());
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    throw Error(detail::concat(where, ": file must start with the magic string '\\x93NUMPY' (got ",
                               quoted(bytes.substr(0, kMagic.size())), "): not a .npy file (bad magic)"));
  }
  // Fewer bytes than asked for means the input ended: its size is what was read.
  if (preamble.size() < kMagic.size() + 2) {
    throw Error(detail::concat(where, ": file must hold the 2 version bytes after the magic string (got ",
                               preamble.size(), " bytes)"));
  }
  const int major = preamble[6];
  const int minor = preamble[7];
  if (minor != 0 || major < 1 || major > 3) {
    throw Error(detail::concat(where, ": version must be 1.0, 2.0 or 3.0 (got ", major, ".", minor, ")"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_offset = kMagic.size() + 2 + length_bytes;
  input.read_into(preamble, length_bytes);
  if (preamble.size() < header_offset) {
    throw Error(detail::concat(where, ": file must hold the ", length_bytes, "-byte header length of version ", major,
                               ".0 (got ", preamble.size(), " bytes)"));
  }
  const size_t header_length = read_le(preamble, kMagic.size() + 2, length_bytes);
  auto header_too_long = [&](uint64_t left) {
    return Error(detail::concat(where, ": header length must be at most ", left, ", the bytes left in the file (got ",
                                header_length, ")"));
  };
  if (input.total_bytes && header_length > *input.total_bytes - header_offset) {
    throw header_too_long(*input.total_bytes - header_offset);
  }
  const auto max_bytes = static_cast<uint64_t>(std::max<int64_t>(options.max_bytes, 0));
  if (header_offset + header_length > max_bytes) {
    throw Error(detail::concat(where, ": file must be at most ", max_bytes,
                               " bytes (npy::ReadOptions::max_bytes) (got a header of ", header_length, " bytes)"));
  }
  std::vector<unsigned char> header_bytes;
  input.read_into(header_bytes, header_length);
  if (header_bytes.size() < header_length) throw header_too_long(header_bytes.size());

  // Version 3.0 is UTF-8, the others Latin-1; the three keys and every valid descr are ASCII.
  const std::string_view header_text(reinterpret_cast<const char*>(header_bytes.data()), header_bytes.size());
  const Header header = HeaderParser(header_text, where, major < 3).parse();
  if (!header.descr) throw Error(missing_key_message(header, "descr", where));
  if (!header.fortran_order) throw Error(missing_key_message(header, "fortran_order", where));
  if (!header.shape) throw Error(missing_key_message(header, "shape", where));

  Array array;
  const DescrName& stored = element_type_of(*header.descr, where);
  array.type = stored.type;
  if (*header.fortran_order) {
    throw Error(detail::concat(where, ": fortran_order must be False: rotary reads C-order arrays; save with "
                               "np.ascontiguousarray (got True)"));
  }
  array.shape = *header.shape;
  for (size_t axis = 0; axis < array.shape.size(); ++axis) {
    if (array.shape[axis] < 0) {
      throw Error(detail::concat(where, ": shape[", axis, "] must be >= 0 (got ", array.shape[axis], ")"));
    }
  }
  const std::optional<int64_t> data_bytes = checked_bytes(array.shape, stored.stored_size);
  if (!data_bytes) {
    throw Error(detail::concat(where, ": shape must describe fewer than 2^63 bytes of ", stored.stored,
                               " data (got ", shape_text(array.shape), ")"));
  }
  const auto expected = static_cast<uint64_t>(*data_bytes);
  auto wrong_size = [&](const std::string& got) {
    return Error(detail::concat(where, ": data must hold ", expected, " bytes for shape ", shape_text(array.shape), " ",
                                stored.stored, " (got ", got, ")"));
  };
  const size_t data_offset = header_offset + header_length;
  // A file of known size that disagrees with its header is a lying file, whatever its size: said
  // before the cap, unread.
  if (input.total_bytes && *input.total_bytes - data_offset != expected) {
    throw wrong_size(std::to_string(*input.total_bytes - data_offset));
  }
  if (expected > max_bytes - data_offset) {
    throw Error(detail::concat(where, ": file must be at most ", max_bytes, " bytes (npy::ReadOptions::max_bytes) (got ",
                               data_offset, " bytes of header and ", expected, " bytes of data for shape ",
                               shape_text(array.shape), " ", stored.stored, ")"));
  }
  // Integers are held as int64 (widen_to_int64): a narrower file takes up to 8 times its size in
  // memory, which the same cap bounds.
  const std::optional<int64_t> held_bytes = checked_bytes(array.shape, array.type);
  if (!held_bytes || static_cast<uint64_t>(*held_bytes) > max_bytes) {
    throw Error(detail::concat(where, ": data must take at most ", max_bytes,
                               " bytes in memory (npy::ReadOptions::max_bytes) (got shape ", shape_text(array.shape), " ",
                               stored.stored, ", which is read as int64)"));
  }
  input.read_into(array.bytes, static_cast<size_t>(expected));
  // Shorter: a stream that ended, or a regular file that shrank while being read.
  if (array.bytes.size() != expected) throw wrong_size(std::to_string(array.bytes.size()));
  if (!input.total_bytes) {
    // One byte more says whether the stream ends where the header says it does.
    std::vector<unsigned char> more;
    input.read_into(more, 1);
    if (!more.empty()) throw wrong_size(detail::concat("more than ", expected));
  }
  if (stored.stored_size != element_size(array.type) || stored.is_unsigned) {
    array.bytes = widen_to_int64(array.bytes, stored, where);
  }
  return array;
}

}  // namespace

int64_t Array::size() const {
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] < 0) {
      throw Error(detail::concat("npy array: shape[", axis, "] must be >= 0 (got ", shape[axis], ")"));
    }
  }
  const std::optional<int64_t> count = checked_count(shape);
  if (!count) throw Error(detail::concat("npy array: element count must fit in int64 (got shape ", shape_text(shape), ")"));
  return *count;
}

Array parse(const std::vector<unsigned char>& file, const std::string& source, const ReadOptions& options) {
  BufferInput input(file);
  return read_npy(input, "npy " + source, options);
}

Array read(const std::string& path, const ReadOptions& options) {
  FileInput input(path);
  return read_npy(input, "npy " + path, options);
}

std::vector<unsigned char> serialize(const Array& array) {
  array.size();  // rejects negative extents and an overflowing element count, naming them
  const std::optional<int64_t> expected_bytes = checked_bytes(array.shape, array.type);
  if (!expected_bytes || static_cast<uint64_t>(*expected_bytes) != array.bytes.size()) {
    throw Error(detail::concat("npy serialize: bytes must hold ",
                               expected_bytes ? std::to_string(*expected_bytes) : std::string("more than 2^63"),
                               " bytes for shape ", shape_text(array.shape), " ", to_string(array.type), " (got ",
                               array.bytes.size(), ")"));
  }
  std::string descr;
  switch (array.type) {
    case ElementType::Float32: descr = "<f4"; break;
    case ElementType::Float16: descr = "<f2"; break;
    case ElementType::BFloat16: descr = "<u2"; break;  // NumPy has no bfloat16: its bit patterns
    case ElementType::Float64: descr = "<f8"; break;
    case ElementType::Int64: descr = "<i8"; break;
  }
  // format.py _write_array_header: keys sorted, "'key': repr(value), " each, then "}".
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(array.shape) + ", }";
  if (!array.shape.empty()) {
    header.append(kGrowthAxisMaxDigits - std::to_string(array.shape[0]).size(), ' ');
  }
  // format.py _wrap_header: pad with spaces so that magic + version + length + header + '\n' is
  // a multiple of 64, always adding at least one space; version 2.0 only when the padded length
  // does not fit in 1.0's uint16.
  auto padded_length = [&](size_t length_bytes) {
    const size_t unpadded = kMagic.size() + 2 + length_bytes + header.size() + 1;
    return header.size() + 1 + (kArrayAlign - unpadded % kArrayAlign);
  };
  const int major = padded_length(2) <= 0xFFFF ? 1 : 2;
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_length = padded_length(length_bytes);
  header.append(header_length - header.size() - 1, ' ');
  header += '\n';

  // Sized once and filled in place (GCC 12 -O2 warns falsely on insert() after reserve()).
  const size_t data_offset = kMagic.size() + 2 + length_bytes + header.size();
  std::vector<unsigned char> file(data_offset + array.bytes.size());
  auto out = std::copy(kMagic.begin(), kMagic.end(), file.begin());
  *out++ = static_cast<unsigned char>(major);
  *out++ = 0;
  for (size_t i = 0; i < length_bytes; ++i) *out++ = static_cast<unsigned char>(header_length >> (8 * i));
  out = std::copy(header.begin(), header.end(), out);
  std::copy(array.bytes.begin(), array.bytes.end(), out);
  return file;
}

void write(const std::string& path, const Array& array) {
  const std::vector<unsigned char> file = serialize(array);
  detail::write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), "npy");
}

}  // namespace rotary::npy
