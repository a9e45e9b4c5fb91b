// src/cli/apply_command.cpp: `rotary apply`: rotate q and k from .npy files.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "core/atomic_file.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "core/json.hpp"
#include "cli/npy.hpp"
#include "core/shape_text.hpp"

namespace rotary::cli {

const char* const kApplyHelp =
    "usage: rotary apply [--preset NAME | --config FILE] --q Q.npy [--k K.npy] --layout L\n"
    "                    --out-q OUT_Q.npy [--out-k OUT_K.npy]\n"
    "                    [--positions POS.npy | --offsets OFFSETS.npy] [--cu-seqlens CU.npy]\n"
    "                    [--precision exact|hf|ggml|vllm] [--direction forward|backward]\n"
    "                    [--rotary-offset N] [--style neox|gptj] [--layer-type T]\n"
    "                    [--reference] [--threads N] [--json]\n"
    "\n"
    "Rotates q (and k) with the model's RoPE and writes the results, same shape and dtype.\n"
    "Inputs: float32, float16, float64, or bfloat16 stored as uint16 ('<u2'). The computation\n"
    "is the SIMD kernel (float32 math, one rounding on store); --reference uses the float64\n"
    "reference instead (src/cpu/reference.cpp), rounded once on store.\n"
    "\n"
    "  --layout L        bshd (batch, seq, heads, dim), bhsd, sbhd, or thd (tokens, heads, dim)\n"
    "  --positions F     integer positions of shape [batch, seq] ([1, seq] or [seq]: the same\n"
    "                    for every sequence; thd: [tokens]); M-RoPE: [3, batch, seq] as Hugging\n"
    "                    Face's position_ids ([3, 1, seq], [3, seq]; thd: [3, tokens]); 2-D\n"
    "                    vision: [2, batch, seq] (row, column) likewise. Other shapes are\n"
    "                    errors, even with the right element count (a [seq, batch] array)\n"
    "  --offsets F       integer [batch] (thd: [sequences]): position = offset + index in the\n"
    "                    sequence (neither: position = index in the sequence)\n"
    "  --cu-seqlens F    integer [sequences + 1] token offsets, required for thd. The integer\n"
    "                    files may be any NumPy integer type whose values fit int64 (int32 too)\n"
    "  --precision       exact (default), hf (Hugging Face's float32 table numerics), ggml\n"
    "                    (llama.cpp's CPU rope) or vllm (vLLM's float32 cache; docs/interop.md)\n"
    "  --direction       forward (default) or backward (the inverse rotation = the gradient)\n"
    "  --rotary-offset   first rotated element of each head (DeepSeek's [nope | rope]: 128)\n"
    "  --style           override the spec's pairing (neox: half-split, gptj: interleaved)\n"
    "  --layer-type T    required for configs with per-layer-type RoPE (Gemma 3: full_attention\n"
    "                    or sliding_attention), whose layer types rotate differently\n"
    "  --threads N       worker threads for the SIMD kernel (default: $ROTARY_NUM_THREADS, else\n"
    "                    every hardware thread)\n"
    "  --json            print {\"outputs\": [paths], \"direction\", \"precision\", \"model\",\n"
    "                    \"layer_type\" (null without layer types), \"computation\"} on stdout instead\n"
    "                    of the line on stderr (not with a - output)\n"
    "The table follows Hugging Face's forward-time rules for dynamic NTK and LongRoPE, with\n"
    "seq_len = the largest position + 1.\n"
    "\n"
    "Outputs are written all or nothing: each to a temporary file beside it, renamed into place\n"
    "only when every output is complete, so a failure (full disk, missing directory) leaves\n"
    "every existing file as it was. --out-q and --out-k must be different files, and neither may\n"
    "be one of the inputs (--q, --k, --positions, --offsets, --cu-seqlens, --config): to\n"
    "rotate a file in place, write elsewhere and rename. --out-q - (or --out-k -) writes that\n"
    ".npy to stdout instead, for one of the two.\n";

namespace {

DType dtype_of(const npy::Array& array, const std::string& flag) {
  switch (array.type) {
    case npy::ElementType::Float32: return DType::F32;
    case npy::ElementType::Float16: return DType::F16;
    case npy::ElementType::BFloat16: return DType::BF16;
    case npy::ElementType::Float64: return DType::F64;
    case npy::ElementType::Int64: break;
  }
  throw Error(detail::concat("apply: ", flag, " must hold float32, float16, bfloat16 (as uint16) or float64 (got ",
                             npy::to_string(array.type), ")"));
}

TensorView view_of(npy::Array& array, Layout layout, const std::string& flag) {
  const int rank = layout_rank(layout);
  if (static_cast<int>(array.shape.size()) != rank) {
    std::string shape;
    for (int64_t d : array.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw Error(detail::concat("apply: ", flag, " must have ", rank, " dimensions for layout ", to_string(layout),
                               " (got shape (", shape, "))"));
  }
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  for (int i = 0; i < rank; ++i) shape[i] = array.shape[i];
  return contiguous_view(array.bytes.data(), dtype_of(array, flag), layout, shape);
}

std::vector<int64_t> int64_values(const npy::Array& array, const std::string& flag) {
  if (array.type != npy::ElementType::Int64) {
    throw Error(detail::concat("apply: ", flag, " must hold int64 (got ", npy::to_string(array.type), ")"));
  }
  std::vector<int64_t> values(static_cast<size_t>(array.size()));
  std::memcpy(values.data(), array.bytes.data(), values.size() * sizeof(int64_t));
  return values;
}

// --positions as Positions::per_token wants them: stream-major, then (batch, seq) order (thd:
// token order). Accepted shapes, for q's batch B and seq L (thd: T tokens) and the spec's S
// position streams:
//   S = 1:                (B, L); (1, L) or (L,), the same positions for every sequence;  thd (T,)
//   S = 3 (M-RoPE), 2 (vision):  (S, B, L) as Hugging Face's position_ids; (S, 1, L) or (S, L)
//                         shared likewise;  thd (S, T)
// Only the shape tells a transposed array from the right one: (L, B) for (B, L), or M-RoPE's
// (T, 3) for (3, T), hold the right number of positions, in the wrong order. So any other shape
// is an error naming the shape expected and the one got. Sharing is expanded here, one copy per
// sequence; it is offered only while q holds at least one element per token, so that the
// expansion stays within a small multiple of q's size (a q of shape (2^40, 8, 0, 128) holds no
// bytes, and 2^43 shared positions would not fit in memory).
std::vector<int64_t> per_token_positions(const npy::Array& array, const TensorView& q, int streams) {
  std::vector<int64_t> values = int64_values(array, "--positions");
  const NamedAxes axes = named_axes(q);
  const bool thd = q.layout == Layout::THD;
  std::vector<int64_t> prefix;
  if (streams > 1) prefix.push_back(streams);
  auto with_prefix = [&](std::initializer_list<int64_t> dims) {
    std::vector<int64_t> shape = prefix;
    shape.insert(shape.end(), dims);
    return shape;
  };
  const std::vector<int64_t> full = thd ? with_prefix({axes.seq}) : with_prefix({axes.batch, axes.seq});
  if (array.shape == full) return values;

  int64_t tokens = 0;
  const bool can_share = !thd && !__builtin_mul_overflow(axes.batch, axes.seq, &tokens) &&
                         (axes.batch == 1 || element_count(q, "q") >= tokens);
  const std::vector<int64_t> shared[] = {with_prefix({1, axes.seq}), with_prefix({axes.seq})};
  if (can_share && (array.shape == shared[0] || array.shape == shared[1])) {
    std::vector<int64_t> expanded;
    expanded.reserve(static_cast<size_t>(streams * tokens));
    for (int64_t stream = 0; stream < streams; ++stream) {
      const auto first = values.begin() + static_cast<std::ptrdiff_t>(stream * axes.seq);
      for (int64_t b = 0; b < axes.batch; ++b) expanded.insert(expanded.end(), first, first + axes.seq);
    }
    return expanded;
  }

  std::string shared_text;
  if (can_share) {
    shared_text = axes.batch == 1 ? ", or " + shape_text(shared[1])
                                  : ", or " + shape_text(shared[0]) + " or " + shape_text(shared[1]) +
                                        " for the same positions in every sequence";
  }
  const char* const axis_names = thd ? (streams > 1 ? "(streams, tokens)" : "(tokens,)")
                                     : (streams > 1 ? "(streams, batch, seq)" : "(batch, seq)");
  throw Error(detail::concat("apply: --positions must have shape ", shape_text(full), " = ", axis_names, " for q of shape ",
                             shape_text({q.shape.begin(), q.shape.begin() + layout_rank(q.layout)}), " (layout ",
                             to_string(q.layout), streams > 1 ? detail::concat(", ", streams, " position streams") : "",
                             ")", shared_text, " (got shape ", shape_text(array.shape), ")"));
}

// --cu-seqlens: one dimension, sequences + 1 >= 2 entries.
std::vector<int64_t> cu_seqlens_values(const npy::Array& array) {
  std::vector<int64_t> values = int64_values(array, "--cu-seqlens");
  if (array.shape.size() != 1 || array.shape[0] < 2) {
    throw Error(detail::concat("apply: --cu-seqlens must have shape (sequences + 1,): one dimension, at least 2 "
                               "entries (got shape ", shape_text(array.shape), ")"));
  }
  return values;
}

// --offsets: one per sequence, (batch,) (thd: (sequences,), from --cu-seqlens, which run_apply
// requires with thd).
std::vector<int64_t> offset_values(const npy::Array& array, const TensorView& q, const std::vector<int64_t>& cu_seqlens) {
  std::vector<int64_t> values = int64_values(array, "--offsets");
  const bool thd = q.layout == Layout::THD;
  const int64_t sequences = thd ? static_cast<int64_t>(cu_seqlens.size()) - 1 : named_axes(q).batch;
  if (array.shape.size() != 1 || (!(thd && cu_seqlens.empty()) && array.shape[0] != sequences)) {
    throw Error(detail::concat("apply: --offsets must have shape ",
                               thd && cu_seqlens.empty() ? std::string("(sequences,)") : shape_text({sequences}),
                               thd ? " = (sequences,), one per --cu-seqlens segment" : " = (batch,), one per sequence",
                               " (got shape ", shape_text(array.shape), ")"));
  }
  return values;
}

// Refuses an output that is the same file as another output or an input: the second write would
// replace the first (q lost), and writing over an input destroys the data the command was given.
void check_outputs_are_new_files(const std::vector<std::pair<std::string, std::optional<std::string>>>& outputs,
                                 const std::vector<std::pair<std::string, std::optional<std::string>>>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (!path) continue;
    for (size_t j = 0; j < i; ++j) {
      const auto& [other_flag, other_path] = outputs[j];
      if (other_path && detail::same_file(*path, *other_path)) {
        throw UsageError(detail::concat("apply: ", flag, " must differ from ", other_flag, " (got ",
                                        *path == *other_path ? *path + " for both" : *other_path + " and " + *path,
                                        ", the same file)"));
      }
    }
    for (const auto& [input_flag, input_path] : inputs) {
      if (input_path && detail::same_file(*path, *input_path)) {
        throw UsageError(detail::concat("apply: ", flag, " must not be the input ", input_flag,
                                        ": it would be replaced by the result (got ",
                                        *path == *input_path ? *path + " for both" : *input_path + " and " + *path,
                                        ", the same file)"));
      }
    }
  }
}

// The largest position of the call picks the table, as Hugging Face's forward does. The
// argument check validates every position; this only needs an upper bound.
int64_t largest_position(int64_t seq, const std::vector<int64_t>& per_token, const std::vector<int64_t>& offsets) {
  int64_t max_position = std::max<int64_t>(0, seq - 1);
  for (int64_t p : per_token) max_position = std::max(max_position, p);
  for (int64_t o : offsets) {
    if (o > 0 && o <= kMaxPosition) max_position = std::max(max_position, std::min(kMaxPosition, o + seq - 1));
  }
  return std::clamp<int64_t>(max_position, 0, kMaxPosition);
}

// All or nothing: both outputs are staged in temporary files before either replaces a target;
// a - output goes to stdout once the files are in place.
void write_outputs(Args& args, const std::string& out_q_path, const std::optional<std::string>& out_k_path,
                   npy::Array& q_out, npy::Array& k_out) {
  detail::AtomicFileSet outputs("apply");
  std::vector<unsigned char> to_stdout;
  auto add_output = [&](const std::string& flag, const std::string& path, npy::Array& array) {
    std::vector<unsigned char> file = npy::serialize(array);
    array.bytes = {};  // the serialized copy is what is written; one copy in memory is enough
    if (path == "-") {
      to_stdout = std::move(file);
    } else {
      outputs.add(path, std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), flag);
    }
  };
  add_output("--out-q", out_q_path, q_out);
  if (out_k_path) add_output("--out-k", *out_k_path, k_out);
  outputs.commit();
  if (!to_stdout.empty()) {
    args.out().write(reinterpret_cast<const char*>(to_stdout.data()), static_cast<std::streamsize>(to_stdout.size()));
    args.out().flush();
  }
}

// What was written and how, for the summary line (stderr) or the --json object (stdout).
struct ApplySummary {
  std::optional<std::string> out_q_path;
  std::optional<std::string> out_k_path;
  Direction direction = Direction::Forward;
  Precision precision = Precision::Exact;
  std::string model;
  std::string layer_type;  // empty when the config has no layer types
  std::string computation;
};

void report_apply(Args& args, const ApplySummary& summary, bool as_json) {
  if (as_json) {
    json::Writer out;
    out.begin_object();
    out.key("outputs").begin_array();
    out.value(*summary.out_q_path);
    if (summary.out_k_path) out.value(*summary.out_k_path);
    out.end_array();
    out.key("direction").value(to_string(summary.direction));
    out.key("precision").value(to_string(summary.precision));
    out.key("model").value(summary.model);
    if (summary.layer_type.empty()) {
      out.key("layer_type").null();
    } else {
      out.key("layer_type").value(summary.layer_type);
    }
    out.key("computation").value(summary.computation);
    out.end_object();
    args.out() << out.str() << "\n";
    return;
  }
  args.err() << "rotary: wrote " << (is_stdout(summary.out_q_path) ? "q to stdout" : *summary.out_q_path)
             << (summary.out_k_path
                     ? " and " + (is_stdout(summary.out_k_path) ? std::string("k to stdout") : *summary.out_k_path)
                     : std::string())
             << " (" << to_string(summary.direction) << ", " << to_string(summary.precision) << " table, "
             << summary.model << (summary.layer_type.empty() ? "" : ", layer type " + summary.layer_type) << ", "
             << summary.computation << ")\n";
}

}  // namespace

int run_apply(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<std::string> q_path = args.value("--q", "a file path");
  const std::optional<std::string> k_path = args.value("--k", "a file path");
  const std::optional<std::string> out_q_path = args.value("--out-q", "a file path");
  const std::optional<std::string> out_k_path = args.value("--out-k", "a file path");
  const std::optional<std::string> layout_text = args.value("--layout");
  const std::optional<std::string> positions_path = args.value("--positions", "a file path");
  const std::optional<std::string> offsets_path = args.value("--offsets", "a file path");
  const std::optional<std::string> cu_path = args.value("--cu-seqlens", "a file path");
  const std::optional<std::string> precision_text = args.value("--precision");
  const std::optional<std::string> direction_text = args.value("--direction");
  const std::optional<int64_t> rotary_offset = args.integer("--rotary-offset", 0, int64_t{1} << 20);
  const std::optional<std::string> style_text = args.value("--style");
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool use_reference = args.has_switch("--reference");
  const std::optional<int64_t> threads = args.integer("--threads", 1, 256);
  const bool as_json = args.has_switch("--json");
  args.finish();

  if (!q_path) throw UsageError("apply: --q is required (a .npy file)");
  if (!out_q_path) throw UsageError("apply: --out-q is required (where to write the rotated q)");
  if (k_path.has_value() != out_k_path.has_value()) {
    throw UsageError("apply: --k and --out-k go together (got only one of them)");
  }
  if (!layout_text) throw UsageError("apply: --layout is required (bshd, bhsd, sbhd or thd)");
  const std::optional<Layout> layout = parse_layout(*layout_text);
  if (!layout) throw UsageError(detail::concat("apply: --layout must be bshd, bhsd, sbhd or thd (got \"", *layout_text, "\")"));
  if (positions_path && offsets_path) throw UsageError("apply: give --positions or --offsets, not both");
  if (is_stdout(out_q_path) && is_stdout(out_k_path)) {
    throw UsageError("apply: --out-q and --out-k cannot both be - (stdout holds one .npy) (got - for both)");
  }
  if (as_json && (is_stdout(out_q_path) || is_stdout(out_k_path))) {
    throw UsageError(detail::concat("apply: --json prints to stdout, so ", is_stdout(out_q_path) ? "--out-q" : "--out-k",
                                    " must be a file (got -)"));
  }
  Precision precision = Precision::Exact;
  if (precision_text) {
    const std::optional<Precision> parsed = parse_precision(*precision_text);
    if (!parsed) throw UsageError(detail::concat("apply: --precision must be exact, hf, ggml or vllm (got \"", *precision_text, "\")"));
    precision = *parsed;
  }
  ApplyOptions options;
  if (direction_text) {
    if (*direction_text == "forward") {
      options.direction = Direction::Forward;
    } else if (*direction_text == "backward") {
      options.direction = Direction::Backward;
    } else {
      throw UsageError(detail::concat("apply: --direction must be forward or backward (got \"", *direction_text, "\")"));
    }
  }
  options.rotary_offset = rotary_offset.value_or(0);
  // One rotation: a per-layer-type config needs --layer-type (its types rotate differently).
  const LayerTypeSpec chosen = one_layer_type("apply", loaded, layer_type);
  RopeSpec spec = *chosen.spec;
  if (style_text) {
    const std::optional<Style> style = parse_style(*style_text);
    if (!style) throw UsageError(detail::concat("apply: --style must be neox or gptj (got \"", *style_text, "\")"));
    spec.style = *style;
  }
  // Before any .npy is read: the checks look at the files' identities (stat), not their contents.
  check_outputs_are_new_files({{"--out-q", is_stdout(out_q_path) ? std::nullopt : out_q_path},
                               {"--out-k", is_stdout(out_k_path) ? std::nullopt : out_k_path}},
                              {{"--q", q_path},
                               {"--k", k_path},
                               {"--positions", positions_path},
                               {"--offsets", offsets_path},
                               {"--cu-seqlens", cu_path},
                               {"--config", loaded.config_path}});
  if (args.parse_only()) return 0;
  if (threads) set_num_threads(static_cast<int>(*threads));

  npy::Array q = npy::read(*q_path);
  npy::Array k;
  if (k_path) k = npy::read(*k_path);
  TensorView q_view = view_of(q, *layout, "--q");
  TensorView k_view = k_path ? view_of(k, *layout, "--k") : TensorView{};
  // Said in the CLI's words (after q's shape, which names the layout's rank first): the library's
  // own check would name its argument, positions.cu_seqlens, not the flag.
  if (*layout == Layout::THD && !cu_path) {
    throw UsageError("apply: --cu-seqlens is required with --layout thd (an integer .npy of the sequences' token offsets, "
                     "0, len0, len0 + len1, ..., tokens)");
  }

  // Each position array's shape is checked against q's before its values are used (the argument
  // checks below see only a pointer and a count).
  std::vector<int64_t> per_token, offsets, cu_seqlens;
  if (cu_path) cu_seqlens = cu_seqlens_values(npy::read(*cu_path));
  Positions positions = Positions::arange(cu_seqlens);
  if (positions_path) {
    per_token = per_token_positions(npy::read(*positions_path), q_view, position_streams(spec));
    positions = Positions::per_token(per_token, cu_seqlens);
  }
  if (offsets_path) {
    offsets = offset_values(npy::read(*offsets_path), q_view, cu_seqlens);
    positions = Positions::sequence_offsets(offsets, cu_seqlens);
  }

  const int64_t max_position = largest_position(named_axes(q_view).seq, per_token, offsets);
  RopeCache cache(spec, {.precision = precision, .storage = Storage::OnTheFly});
  const std::shared_ptr<const CosSinTable> table = cache.table_for(max_position);

  npy::Array q_out{q.type, q.shape, std::vector<unsigned char>(q.bytes.size())};
  npy::Array k_out{k.type, k.shape, std::vector<unsigned char>(k.bytes.size())};
  TensorView q_out_view = view_of(q_out, *layout, "--q");
  TensorView k_out_view = k_path ? view_of(k_out, *layout, "--k") : TensorView{};
  if (use_reference) {
    reference::apply(q_view, k_view, q_out_view, k_out_view, positions, *table, options);
  } else {
    rotary::apply(q_view, k_view, q_out_view, k_out_view, positions, *table, options);
  }

  write_outputs(args, *out_q_path, out_k_path, q_out, k_out);
  const std::string computation = use_reference ? std::string("float64 reference") : "SIMD " + current_cpu_target();
  report_apply(args, {out_q_path, out_k_path, options.direction, precision, spec.name, chosen.name, computation},
               as_json);
  return 0;
}

}  // namespace rotary::cli
