// src/cli/apply_command.cpp: `rotary apply`: rotate q and k from .npy files.
#include <algorithm>
#include <cstring>
#include <iostream>

#include "commands.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/npy.hpp"

namespace rotary::cli {

const char* const kApplyHelp =
    "usage: rotary apply [--preset NAME | --config FILE] --q Q.npy [--k K.npy] --layout L\n"
    "                    --out-q OUT_Q.npy [--out-k OUT_K.npy]\n"
    "                    [--positions POS.npy | --offsets OFFSETS.npy] [--cu-seqlens CU.npy]\n"
    "                    [--precision exact|hf] [--direction forward|backward]\n"
    "                    [--rotary-offset N] [--style neox|gptj] [--layer-type T]\n"
    "                    [--reference] [--threads N]\n"
    "\n"
    "Rotates q (and k) with the model's RoPE and writes the results, same shape and dtype.\n"
    "Inputs: float32, float16, float64, or bfloat16 stored as uint16 ('<u2'). The computation\n"
    "is the SIMD kernel (float32 math, one rounding on store); --reference uses the float64\n"
    "reference instead (src/cpu/reference.cpp), rounded once on store.\n"
    "\n"
    "  --layout L        bshd (batch, seq, heads, dim), bhsd, sbhd, or thd (tokens, heads, dim)\n"
    "  --positions F     int64 positions, one per token in (batch, seq) order (THD: token\n"
    "                    order); M-RoPE: 3 streams, stream-major [3, tokens] as Hugging Face's\n"
    "                    position_ids [3, batch, seq]; 2-D vision: [2, tokens] (row, column)\n"
    "  --offsets F       int64, one per sequence: position = offset + index in the sequence\n"
    "                    (neither: position = index in the sequence)\n"
    "  --cu-seqlens F    int64 [sequences + 1] token offsets, required for thd\n"
    "  --precision       exact (default) or hf (Hugging Face's float32 table numerics)\n"
    "  --direction       forward (default) or backward (the inverse rotation = the gradient)\n"
    "  --rotary-offset   first rotated element of each head (DeepSeek's [nope | rope]: 128)\n"
    "  --style           override the spec's pairing (neox: half-split, gptj: interleaved)\n"
    "  --threads N       worker threads for the SIMD kernel (default: $ROTARY_NUM_THREADS, else\n"
    "                    every hardware thread)\n"
    "The table follows Hugging Face's forward-time rules for dynamic NTK and LongRoPE, with\n"
    "seq_len = the largest position + 1.\n";

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

}  // namespace

int run_apply(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<std::string> q_path = args.value("--q");
  const std::optional<std::string> k_path = args.value("--k");
  const std::optional<std::string> out_q_path = args.value("--out-q");
  const std::optional<std::string> out_k_path = args.value("--out-k");
  const std::optional<std::string> layout_text = args.value("--layout");
  const std::optional<std::string> positions_path = args.value("--positions");
  const std::optional<std::string> offsets_path = args.value("--offsets");
  const std::optional<std::string> cu_path = args.value("--cu-seqlens");
  const std::optional<std::string> precision_text = args.value("--precision");
  const std::optional<std::string> direction_text = args.value("--direction");
  const std::optional<int64_t> rotary_offset = args.integer("--rotary-offset", 0, int64_t{1} << 20);
  const std::optional<std::string> style_text = args.value("--style");
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool use_reference = args.has_switch("--reference");
  const std::optional<int64_t> threads = args.integer("--threads", 1, 256);
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
  Precision precision = Precision::Exact;
  if (precision_text) {
    const std::optional<Precision> parsed = parse_precision(*precision_text);
    if (!parsed) throw UsageError(detail::concat("apply: --precision must be exact or hf (got \"", *precision_text, "\")"));
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
  RopeSpec spec = select_spec(loaded, layer_type);
  if (style_text) {
    const std::optional<Style> style = parse_style(*style_text);
    if (!style) throw UsageError(detail::concat("apply: --style must be neox or gptj (got \"", *style_text, "\")"));
    spec.style = *style;
  }
  if (args.parse_only()) return 0;
  if (threads) set_num_threads(static_cast<int>(*threads));

  npy::Array q = npy::read(*q_path);
  npy::Array k;
  if (k_path) k = npy::read(*k_path);
  TensorView q_view = view_of(q, *layout, "--q");
  TensorView k_view = k_path ? view_of(k, *layout, "--k") : TensorView{};

  std::vector<int64_t> per_token, offsets, cu_seqlens;
  Positions positions;
  if (positions_path) {
    per_token = int64_values(npy::read(*positions_path), "--positions");
    positions.per_token = per_token.data();
    positions.per_token_count = static_cast<int64_t>(per_token.size());
  }
  if (offsets_path) {
    offsets = int64_values(npy::read(*offsets_path), "--offsets");
    positions.sequence_offsets = offsets.data();
    positions.num_offsets = static_cast<int64_t>(offsets.size());
  }
  if (cu_path) {
    cu_seqlens = int64_values(npy::read(*cu_path), "--cu-seqlens");
    positions.cu_seqlens = cu_seqlens.data();
    positions.num_sequences = static_cast<int64_t>(cu_seqlens.size()) - 1;
  }

  // The largest position of the call picks the table, as Hugging Face's forward does. The
  // argument check below validates every position; this only needs an upper bound.
  const NamedAxes axes = named_axes(q_view);
  int64_t max_position = std::max<int64_t>(0, axes.seq - 1);
  for (int64_t p : per_token) max_position = std::max(max_position, p);
  for (int64_t o : offsets) {
    if (o > 0 && o <= kMaxPosition) max_position = std::max(max_position, std::min(kMaxPosition, o + axes.seq - 1));
  }
  max_position = std::clamp<int64_t>(max_position, 0, kMaxPosition);
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

  npy::write(*out_q_path, q_out);
  if (out_k_path) npy::write(*out_k_path, k_out);
  args.err() << "rotary: wrote " << *out_q_path << (out_k_path ? " and " + *out_k_path : std::string()) << " ("
             << to_string(options.direction) << ", " << to_string(precision) << " table, " << spec.name << ", "
             << (use_reference ? std::string("float64 reference") : "SIMD " + current_cpu_target()) << ")\n";
  return 0;
}

}  // namespace rotary::cli
