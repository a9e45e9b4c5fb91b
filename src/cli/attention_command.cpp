// src/cli/attention_command.cpp: `rotary attention`: seeded random q / k / v through a causal
// prefill and decode steps of rotary's attention with a model's geometry and a position encoding,
// every output compared with the float64 reference over the whole sequence, with the time.
//
// RoPE runs through the KV cache (kv_cache.hpp: keys stored rotated, decode attends over the
// cache); the other encodings (attention.hpp: none, ALiBi, absolute tables) through
// rotary::attention over buffers that grow by one token per step: step t attends query N + t
// (query_offset N + t) over keys [0, N + t], the views are prefixes of buffers of N + M tokens,
// so nothing is copied. The bound every output is held to is docs/attention.md's error analysis
// with the run's largest magnitudes (a bound for every element at once; the tests use the
// per-element form).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "core/json.hpp"
#include "core/system_memory.hpp"
#include "cpu/storage.hpp"
#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "rotary/error.hpp"
#include "rotary/kv_cache.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary::cli {

const char* const kAttentionHelp =
    "usage: rotary attention [--preset NAME | --config FILE] --tokens N [--decode M]\n"
    "                        [--heads H --kv-heads G] [--encoding rope|none|sinusoidal|learned|alibi]\n"
    "                        [--window W] [--layer-type T] [--dtype f32|bf16|f16] [--threads T]\n"
    "                        [--seed S] [--json]\n"
    "\n"
    "Runs seeded random q, k, v (values +-[0.1, 1], never zero) through a causal prefill of N tokens\n"
    "and M decode steps of rotary's attention, compares every output with the float64 reference\n"
    "over the whole sequence, and prints the largest error, the bound it is held to\n"
    "(docs/attention.md), pass or fail, and the time of the prefill and of a decode step.\n"
    "Exit code 0 when every output is within the bound, 1 when one is not, 2 for bad arguments.\n"
    "\n"
    "  --preset NAME     a built-in preset (rotary presets); default llama-3.1-8b\n"
    "  --config FILE     a Hugging Face config.json, or a model folder holding one\n"
    "  --tokens N        prefill length (1 <= N; N + M <= 32768: the reference is O(length^2))\n"
    "  --decode M        decode steps after the prefill, one token each (default 0)\n"
    "  --heads H         q heads (default: the config's num_attention_heads)\n"
    "  --kv-heads G      kv heads, dividing H (default: the config's num_key_value_heads, or H)\n"
    "  --encoding E      rope (default): the config's RoPE, through the KV cache (keys cached\n"
    "                    rotated); none: no positions (NoPE); sinusoidal: Vaswani et al.'s table\n"
    "                    added to q and k; learned: a seeded random table [N + M, head_dim] added\n"
    "                    to q and k; alibi: Press et al.'s slopes for H heads. The last four run\n"
    "                    rotary::attention with a query offset over growing buffers.\n"
    "  --window W        sliding window in tokens, 0 = none (default: the config's sliding_window;\n"
    "                    with --layer-type, that layer type's: sliding_attention the config's\n"
    "                    sliding_window, full_attention none)\n"
    "  --layer-type T    required when the config's layers differ (Gemma 3: full_attention or\n"
    "                    sliding_attention, each with its own RoPE and window): the run is one\n"
    "                    layer type's RoPE with that layer type's window\n"
    "  --dtype D         storage of q, k, v and the output: f32 (default), bf16, f16\n"
    "  --threads T       threads of the fast path (default: rotary's default)\n"
    "  --seed S          seed of the random q, k, v (and the learned table); default 0\n"
    "  --json            a JSON object: model, source, encoding, dtype, q_heads, kv_heads, head_dim,\n"
    "                    window, layer_type (null without layer types), tokens, decode, threads,\n"
    "                    seed, scale, prefill_ms,\n"
    "                    decode_ms_per_step, decode_ms_total, outputs, max_abs_error, error_bound,\n"
    "                    pass\n"
    "The head dim is the config's (rotary) head_dim; the softmax scale is attention_scale(spec,\n"
    "head_dim): 1/sqrt(head_dim), with DeepSeek's mscale_all_dim rule for scaled specs.\n";

namespace {

constexpr int64_t kMaxLength = 32768;
constexpr double kU = 0x1p-24;

enum class Encoding { Rope, None, Sinusoidal, Learned, Alibi };
const std::vector<std::string> kEncodingNames{"rope", "none", "sinusoidal", "learned", "alibi"};

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return DType::F32;
  if (text == "bf16" || text == "bfloat16") return DType::BF16;
  if (text == "f16" || text == "float16") return DType::F16;
  const std::optional<std::string> near = nearest(text, {"f32", "bf16", "f16"});
  throw UsageError(detail::concat("attention: --dtype must be f32, bf16 or f16 (got \"", text, "\")",
                                  near ? "; did you mean " + *near + "?" : std::string()));
}

Encoding parse_encoding(const std::string& text) {
  for (size_t i = 0; i < kEncodingNames.size(); ++i) {
    if (text == kEncodingNames[i]) return static_cast<Encoding>(i);
  }
  // NoPE (no positional encoding) is spelt "none" here; by edit distance "nope" is nearer "rope".
  const bool nope = text.size() == 4 && std::equal(text.begin(), text.end(), "nope", [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == b;
  });
  const std::optional<std::string> near = nope ? std::optional<std::string>("none") : nearest(text, kEncodingNames);
  throw UsageError(detail::concat("attention: --encoding must be rope, none, sinusoidal, learned or alibi (got \"", text, "\")",
                                  near ? "; did you mean " + *near + "?" : std::string()));
}

// The run holds q and out [tokens, heads, dim], k and v [tokens, kv_heads, dim] and, with RoPE, a
// KV cache of k and v again, in `dtype`, plus float64 copies of one query's rows for the reference
// (small). Refused before allocating when that is more than this process could ever hold (the
// allocation would fail with a bare std::bad_alloc, or succeed under overcommit and meet the OOM
// killer on first touch): the message names the sizes and the bytes, as KvCache's does.
void check_run_fits_in_memory(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim, DType dtype) {
  const double elements = static_cast<double>(tokens) * static_cast<double>(dim) * (2.0 * static_cast<double>(heads) + 4.0 * static_cast<double>(kv_heads));
  const double bytes = elements * static_cast<double>(dtype_size(dtype));
  const detail::MemoryCeiling ceiling = detail::memory_ceiling();
  const double limit = ceiling.bytes > 0 ? static_cast<double>(ceiling.bytes) : static_cast<double>(std::numeric_limits<int64_t>::max());
  if (bytes > limit) {
    throw Error(detail::concat("attention: --tokens + --decode ", tokens, " with ", heads, " q heads, ", kv_heads, " kv heads and head_dim ",
                               dim, " need about ", static_cast<int64_t>(std::min(bytes, 9e18)), " bytes for q, k, v, out and the KV cache, more than ",
                               ceiling.bytes > 0 ? ceiling.what + " (" + std::to_string(ceiling.bytes) + " bytes)" : std::string("int64 bytes")));
  }
}

// A contiguous BSHD buffer [1, tokens, heads, dim] of `dtype`, and views of token ranges.
struct Buffer {
  std::vector<double> storage;  // 8-byte aligned bytes for any dtype
  DType dtype;
  int64_t tokens, heads, dim;
  Buffer(DType dtype_, int64_t tokens_, int64_t heads_, int64_t dim_)
      : storage(static_cast<size_t>((tokens_ * heads_ * dim_ * dtype_size(dtype_) + 7) / 8 + 1)),
        dtype(dtype_), tokens(tokens_), heads(heads_), dim(dim_) {}
  // Tokens [first, first + count).
  TensorView view(int64_t first, int64_t count) {
    char* base = reinterpret_cast<char*>(storage.data()) + first * heads * dim * dtype_size(dtype);
    return contiguous_view(base, dtype, Layout::BSHD, {1, count, heads, dim});
  }
  TensorView all() { return view(0, tokens); }
  int64_t size() const { return tokens * heads * dim; }
  // Element loads and stores of rotary_cpu (src/cpu/storage.hpp): exact widening, one rounding.
  double at(int64_t index) const { return cpu::load_element(storage.data(), dtype, index); }
  void set(int64_t index, double value) { cpu::store_element(storage.data(), dtype, index, value); }
  // Seeded values +-[0.1, 1] (never zero), rounded once to the storage type.
  void fill(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> magnitude(0.1, 1.0);
    for (int64_t i = 0; i < size(); ++i) {
      const double m = magnitude(rng);
      set(i, (rng() & 1) ? m : -m);
    }
  }
  // The same values in float64 (exact).
  Buffer widened() const {
    Buffer copy(DType::F64, tokens, heads, dim);
    for (int64_t i = 0; i < size(); ++i) copy.set(i, at(i));
    return copy;
  }
};

// One unit of the storage format at |value| (bf16: 7 fraction bits, f16: 10), at least the
// smallest subnormal: the allowance for the output's rounding (docs/attention.md, item 4).
double format_unit(DType dtype, double value) {
  const int p = dtype == DType::BF16 ? 7 : 10;
  const double min_ulp = dtype == DType::BF16 ? 0x1p-133 : 0x1p-24;
  if (value == 0) return min_ulp;
  return std::max(std::ldexp(1.0, std::ilogb(value) - p), min_ulp);
}

// The layer type the run is: --layer-type, required when the config's layers differ. Those are
// the per-layer-type RoPE of Gemma 3, or a layer_types list of sliding and full layers with one
// RoPE (gpt-oss): either way the layers differ in their window, so no one default is right.
LayerTypeSpec attention_layer_type(const LoadedConfig& loaded, const std::optional<std::string>& layer_type) {
  if (!loaded.config.layer_type_specs.empty()) return one_layer_type("attention", loaded, layer_type);
  std::vector<std::string> names;
  for (const std::string& name : loaded.config.layer_types) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string choices;
  for (const std::string& name : names) choices += (choices.empty() ? "" : " or ") + name;
  if (names.size() > 1 && !layer_type) {
    throw UsageError(detail::concat("attention: ", loaded.source, "'s layers differ (layer_types ", choices,
                                    "): choose one with --layer-type ", choices, " (got none)"));
  }
  if (layer_type && std::find(names.begin(), names.end(), *layer_type) == names.end()) {
    throw UsageError(detail::concat("attention: --layer-type must be one of the config's layer types (",
                                    names.empty() ? std::string("it has none") : choices, ") (got \"", *layer_type,
                                    "\")"));
  }
  return {layer_type.value_or(""), &loaded.config.spec};
}

// The window of a layer type's layers, as transformers builds them (Gemma 3, gpt-oss:
// sliding_attention layers use config.sliding_window, full_attention layers none); without layer
// types, the config's sliding_window (Mistral: every layer). Another type's window is not known:
// an error asking for --window.
int64_t layer_type_window(const LoadedConfig& loaded, const std::string& layer_type) {
  if (layer_type.empty()) return loaded.config.sliding_window.value_or(0);
  if (layer_type == "full_attention") return 0;
  if (layer_type == "sliding_attention" && loaded.config.sliding_window) return *loaded.config.sliding_window;
  throw UsageError(detail::concat("attention: the window of layer type ", layer_type, " is not known (",
                                  layer_type == "sliding_attention" ? "the config gives no sliding_window"
                                                                    : "rotary knows sliding_attention and full_attention",
                                  "): give --window W (got --layer-type ", layer_type, ")"));
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// What the encoding adds to q and k: the RoPE table, ALiBi's slopes, or an absolute table's rows.
struct EncodingData {
  std::vector<int64_t> positions;      // 0, 1, ..., length - 1
  std::vector<float> slopes;           // ALiBi: one per q head
  std::vector<float> table_values;     // sinusoidal or learned: [length, dim]
  bool absolute = false;               // table_values is added to q and k
  std::unique_ptr<CosSinTable> table;  // RoPE
};

// Draws from `rng` after q, k and v (the learned table), so a seed gives the same run as before.
EncodingData make_encoding_data(Encoding encoding, const RopeSpec& spec, int64_t length, int64_t heads, int64_t dim,
                                std::mt19937_64& rng) {
  EncodingData data;
  data.positions.resize(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) data.positions[static_cast<size_t>(i)] = i;
  if (encoding == Encoding::Alibi) {
    for (const double slope : alibi_slopes(heads)) data.slopes.push_back(static_cast<float>(slope));
  } else if (encoding == Encoding::Sinusoidal) {
    data.table_values = sinusoidal_table(length, dim);
  } else if (encoding == Encoding::Learned) {
    std::uniform_real_distribution<double> magnitude(0.1, 1.0);
    data.table_values.resize(static_cast<size_t>(length * dim));
    for (float& value : data.table_values) value = static_cast<float>((rng() & 1) ? magnitude(rng) : -magnitude(rng));
  }
  data.absolute = encoding == Encoding::Sinusoidal || encoding == Encoding::Learned;
  if (encoding == Encoding::Rope) data.table = std::make_unique<CosSinTable>(spec);
  return data;
}

struct Timings {
  double prefill_ms = 0;
  double decode_ms = 0;  // all decode steps together
};

// The fast path: the prefill, then one decode step per token after it, each timed.
Timings time_fast_path(Encoding encoding, const EncodingData& data, Buffer& q, Buffer& k, Buffer& v, Buffer& out,
                       int64_t prefill, double scale, int64_t window) {
  const int64_t length = q.tokens, kv_heads = k.heads, dim = q.dim;
  Timings timings;
  if (encoding == Encoding::Rope) {
    KvCache cache(*data.table, {.batch = 1, .kv_heads = kv_heads, .head_dim = dim, .capacity = length, .dtype = q.dtype});
    const KvAttendOptions options{.scale = scale, .mask = Mask::Causal, .window = window};
    auto start = std::chrono::steady_clock::now();
    cache.append(k.view(0, prefill), v.view(0, prefill));
    cache.attend(q.view(0, prefill), out.view(0, prefill), options);
    timings.prefill_ms = elapsed_ms(start);
    for (int64_t t = prefill; t < length; ++t) {
      start = std::chrono::steady_clock::now();
      cache.append(k.view(t, 1), v.view(t, 1));
      cache.attend(q.view(t, 1), out.view(t, 1), options);
      timings.decode_ms += elapsed_ms(start);
    }
    return timings;
  }
  const auto step = [&](int64_t first, int64_t count) {
    const std::span<const int64_t> q_positions(data.positions.data() + first, static_cast<size_t>(count));
    const std::span<const int64_t> k_positions(data.positions.data(), static_cast<size_t>(first + count));
    const AttentionAbsolute table_call{.table = data.table_values, .rows = length, .dim = dim, .q_positions = q_positions, .k_positions = k_positions};
    const AttentionOptions options{.scale = scale, .mask = Mask::Causal, .query_offset = first, .window = window,
                                   .alibi_slopes = data.slopes, .absolute = data.absolute ? &table_call : nullptr};
    attention(q.view(first, count), k.view(0, first + count), v.view(0, first + count), out.view(first, count), options);
  };
  auto start = std::chrono::steady_clock::now();
  step(0, prefill);
  timings.prefill_ms = elapsed_ms(start);
  for (int64_t t = prefill; t < length; ++t) {
    start = std::chrono::steady_clock::now();
    step(t, 1);
    timings.decode_ms += elapsed_ms(start);
  }
  return timings;
}

// The largest norm over x's rows of the magnitudes the score products see: |a||C| + |c||S| on
// rotated pairs, |q + P| with an absolute table (docs/attention.md, "Error analysis": the A of
// the bound is scale * max_i |q~_i| * max_j |k~_j| >= scale * sum_e |q~_e| |k~_e| by Cauchy-Schwarz).
double largest_seen_norm(const Buffer& x, const EncodingData& data, Style style) {
  const int64_t dim = x.dim;
  const CosSinTable* table = data.table.get();
  std::vector<float> cos_row, sin_row;
  double largest = 0;
  std::vector<double> m(static_cast<size_t>(dim));
  for (int64_t t = 0; t < x.tokens; ++t) {
    for (int64_t h = 0; h < x.heads; ++h) {
      const int64_t base = (t * x.heads + h) * dim;
      for (int64_t e = 0; e < dim; ++e) {
        double value = x.at(base + e);
        if (data.absolute) value += data.table_values[static_cast<size_t>(t * dim + e)];
        m[static_cast<size_t>(e)] = std::abs(value);
      }
      if (table) {
        const int64_t pairs = table->num_pairs();
        cos_row.resize(static_cast<size_t>(pairs)), sin_row.resize(static_cast<size_t>(pairs));
        table->row(t, cos_row.data(), sin_row.data());
        const bool neox = style == Style::NeoX;
        std::vector<double> r = m;
        for (int64_t i = 0; i < pairs; ++i) {
          const auto first = static_cast<size_t>(neox ? i : 2 * i), second = static_cast<size_t>(neox ? i + pairs : 2 * i + 1);
          const double C = std::abs(cos_row[static_cast<size_t>(i)]), S = std::abs(sin_row[static_cast<size_t>(i)]);
          r[first] = m[first] * C + m[second] * S;
          r[second] = m[second] * C + m[first] * S;
        }
        m = r;
      }
      double sum = 0;
      for (const double value : m) sum += value * value;
      largest = std::max(largest, std::sqrt(sum));
    }
  }
  return largest;
}

// What the run was and what it found, for the --json object or the text lines.
struct AttentionReport {
  std::string model;
  std::string source;
  std::string layer_type;  // empty when the config has no layer types
  Encoding encoding = Encoding::Rope;
  DType dtype = DType::F32;
  int64_t heads = 0, kv_heads = 0, dim = 0, window = 0, prefill = 0, decode = 0, seed = 0;
  double scale = 0;
  Timings timings;
  int64_t outputs = 0;
  double max_error = 0, bound = 0;
};

int report_attention(Args& args, const AttentionReport& r, bool as_json) {
  const bool pass = r.max_error <= r.bound;
  const double per_step = r.decode > 0 ? r.timings.decode_ms / static_cast<double>(r.decode) : 0.0;
  const std::string encoding_name = kEncodingNames[static_cast<size_t>(r.encoding)];
  if (as_json) {
    json::Writer w;
    w.begin_object();
    w.key("model").value(r.model);
    w.key("source").value(r.source);
    w.key("encoding").value(encoding_name);
    w.key("dtype").value(to_string(r.dtype));
    w.key("q_heads").value(r.heads);
    w.key("kv_heads").value(r.kv_heads);
    w.key("head_dim").value(r.dim);
    w.key("window").value(r.window);
    if (r.layer_type.empty()) {
      w.key("layer_type").null();
    } else {
      w.key("layer_type").value(r.layer_type);
    }
    w.key("tokens").value(r.prefill);
    w.key("decode").value(r.decode);
    w.key("threads").value(num_threads());
    w.key("seed").value(r.seed);
    w.key("scale").value(r.scale);
    w.key("prefill_ms").value(r.timings.prefill_ms);
    w.key("decode_ms_per_step").value(per_step);
    w.key("decode_ms_total").value(r.timings.decode_ms);
    w.key("outputs").value(r.outputs);
    w.key("max_abs_error").value(r.max_error);
    w.key("error_bound").value(r.bound);
    w.key("pass").value(pass);
    w.end_object();
    args.out() << w.str() << "\n";
    return pass ? 0 : 1;
  }
  args.out() << "attention: " << r.model << " (" << r.source << "), "
             << (r.layer_type.empty() ? "" : "layer type " + r.layer_type + ", ") << encoding_name << ", " << r.heads << " q heads / "
             << r.kv_heads << " kv heads, head_dim " << r.dim << ", " << to_string(r.dtype) << ", window "
             << (r.window > 0 ? std::to_string(r.window) : std::string("none")) << ", " << num_threads() << " thread"
             << (num_threads() == 1 ? "" : "s") << ", seed " << r.seed << "\n";
  args.out() << format_line("prefill %lld tokens%s: %.3f ms\n", static_cast<long long>(r.prefill),
                            r.encoding == Encoding::Rope ? " (KvCache append + attend)" : " (attention, causal)", r.timings.prefill_ms);
  if (r.decode > 0) {
    args.out() << format_line("decode %lld steps: %.3f ms per step, %.3f ms in all\n", static_cast<long long>(r.decode), per_step, r.timings.decode_ms);
  }
  args.out() << "max |fast - float64 reference| " << format_number(r.max_error, 3) << " over " << r.outputs << " outputs; bound "
             << format_number(r.bound, 3) << ": " << (pass ? "pass" : "FAIL") << "\n";
  return pass ? 0 : 1;
}

}  // namespace

int run_attention(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<int64_t> tokens_flag = args.integer("--tokens", 1, kMaxLength);
  const int64_t decode = args.integer("--decode", 0, kMaxLength).value_or(0);
  const std::optional<int64_t> heads_flag = args.integer("--heads", 1, 65536);
  const std::optional<int64_t> kv_heads_flag = args.integer("--kv-heads", 1, 65536);
  const std::optional<std::string> encoding_text = args.value("--encoding", "an encoding: rope, none, sinusoidal, learned or alibi");
  const std::optional<int64_t> window_flag = args.integer("--window", 0, int64_t{1} << 40);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const std::optional<std::string> dtype_text = args.value("--dtype", "a storage type: f32, bf16 or f16");
  const std::optional<int64_t> threads = args.integer("--threads", 1, 256);
  const int64_t seed = args.integer("--seed", 0, std::numeric_limits<int64_t>::max()).value_or(0);
  const bool as_json = args.has_switch("--json");
  args.finish();

  if (!tokens_flag) throw UsageError("attention: --tokens N is required (got none)");
  const int64_t prefill = *tokens_flag;
  if (prefill + decode > kMaxLength) {
    throw UsageError(detail::concat("attention: --tokens + --decode must be <= ", kMaxLength, " (got ", prefill, " + ", decode, ")"));
  }
  const Encoding encoding = encoding_text ? parse_encoding(*encoding_text) : Encoding::Rope;
  const DType dtype = dtype_text ? parse_dtype(*dtype_text) : DType::F32;
  const LayerTypeSpec chosen = attention_layer_type(loaded, layer_type);
  RopeSpec spec = *chosen.spec;
  const int64_t heads = heads_flag.value_or(spec.num_attention_heads);
  if (heads < 1) {
    throw UsageError(detail::concat("attention: --heads is required: ", loaded.source, " gives no num_attention_heads (got none)"));
  }
  int64_t kv_heads = heads;
  if (kv_heads_flag) {
    kv_heads = *kv_heads_flag;
  } else if (spec.num_key_value_heads > 0 && heads % spec.num_key_value_heads == 0) {
    kv_heads = spec.num_key_value_heads;
  }
  if (heads % kv_heads != 0) {
    throw UsageError(detail::concat("attention: --kv-heads must divide the q heads ", heads, " (got ", kv_heads, ")"));
  }
  // The geometry the run uses (informative in a spec; apply() checks q heads against it).
  spec.num_attention_heads = heads;
  spec.num_key_value_heads = kv_heads;
  const int64_t dim = spec.head_dim;
  if (encoding == Encoding::Sinusoidal && dim % 2 != 0) {
    throw UsageError(detail::concat("attention: --encoding sinusoidal needs an even head_dim (got ", dim, ")"));
  }
  const int64_t window = window_flag ? *window_flag : layer_type_window(loaded, chosen.name);
  if (args.parse_only()) return 0;
  if (threads) set_num_threads(static_cast<int>(*threads));

  const int64_t length = prefill + decode;
  const double scale = attention_scale(spec, dim);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  check_run_fits_in_memory(length, heads, kv_heads, dim, dtype);
  Buffer q(dtype, length, heads, dim), k(dtype, length, kv_heads, dim), v(dtype, length, kv_heads, dim);
  q.fill(rng), k.fill(rng), v.fill(rng);
  Buffer out(dtype, length, heads, dim);

  const EncodingData data = make_encoding_data(encoding, spec, length, heads, dim, rng);
  const std::vector<int64_t>& positions = data.positions;
  const std::vector<float>& slopes = data.slopes;
  const std::vector<float>& table_values = data.table_values;
  const bool absolute = data.absolute;
  const CosSinTable* table = data.table.get();

  const Timings timings = time_fast_path(encoding, data, q, k, v, out, prefill, scale, window);

  // ---- the float64 reference over the whole sequence ----
  Buffer q64 = q.widened(), k64 = k.widened(), v64 = v.widened();
  Buffer ref(DType::F64, length, heads, dim);
  const AttentionAbsolute whole{.table = table_values, .rows = length, .dim = dim, .q_positions = positions, .k_positions = positions};
  const AttentionOptions reference_options{.scale = scale, .mask = Mask::Causal, .window = window,
                                           .alibi_slopes = slopes, .absolute = absolute ? &whole : nullptr};
  if (encoding == Encoding::Rope) {
    reference::attention(q64.all(), k64.all(), v64.all(), ref.all(), {.table = table, .q_positions = positions, .k_positions = positions},
                         reference_options);
  } else {
    reference::attention(q64.all(), k64.all(), v64.all(), ref.all(), reference_options);
  }

  // ---- the bound (docs/attention.md, "Error analysis", with the run's largest magnitudes) ----
  const double max_a = scale * largest_seen_norm(q, data, spec.style) * largest_seen_norm(k, data, spec.style);
  const int64_t visible = window > 0 ? std::min(window, length) : length;
  double max_bias = 0;
  for (const float slope : slopes) max_bias = std::max(max_bias, std::abs(static_cast<double>(slope)) * static_cast<double>(visible - 1));
  const double u_fmt = dtype == DType::BF16 ? 0x1p-8 : dtype == DType::F16 ? 0x1p-11 : 0.0;
  // RoPE through the cache: the rotated q and k are rounded to storage (2.01 u_fmt); the others:
  // ALiBi's bias (u A + 3 u |b|), or the table's addition (inside the (d + 6) u).
  const double score_error = encoding == Encoding::Rope
                                 ? (static_cast<double>(dim + 6) * kU + 2.01 * u_fmt) * max_a
                                 : static_cast<double>(dim + 7) * kU * max_a + 3 * kU * max_bias;
  const double eta = score_error + 110 * kU;
  const double accumulation = static_cast<double>(visible + 2 * (visible / 64 + 2) + 4) * kU;
  double v_bar = 0, largest_output = 0, max_error = 0;
  for (int64_t i = 0; i < v.size(); ++i) v_bar = std::max(v_bar, std::abs(v.at(i)));
  for (int64_t i = 0; i < out.size(); ++i) {
    const double fast = out.at(i), want = ref.at(i);
    largest_output = std::max({largest_output, std::abs(fast), std::abs(want)});
    const double error = std::abs(fast - want);
    max_error = std::isnan(error) ? INFINITY : std::max(max_error, error);
  }
  const double storage = dtype == DType::F32 ? kU * largest_output : format_unit(dtype, largest_output);
  const double bound = v_bar * (2 * eta * (1 + 2 * eta) + 2 * accumulation) + storage;
  return report_attention(args,
                          {.model = spec.name, .source = loaded.source, .layer_type = chosen.name, .encoding = encoding,
                           .dtype = dtype, .heads = heads, .kv_heads = kv_heads, .dim = dim, .window = window,
                           .prefill = prefill, .decode = decode, .seed = seed, .scale = scale, .timings = timings,
                           .outputs = out.size(), .max_error = max_error, .bound = bound},
                          as_json);
}

}  // namespace rotary::cli
