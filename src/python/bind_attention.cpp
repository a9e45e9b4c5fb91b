// src/python/bind_attention.cpp: rotary.attention and rotary.torch.attention (attention.hpp),
// and the other position encodings' one definition (encodings.hpp).
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "python/tensor_arg.hpp"

namespace rotary::python {
namespace {

// Tensors cross as descriptors (no copy); the int64 arrays (offsets, lengths, cu_seqlens,
// positions) as (address, count) buffers the caller keeps alive. table None = no fused RoPE.
// implementation: "kernels" (rotary::attention), "reference" (the float64 definition) or
// "checks" (check_attention_arguments only). Every value is checked in C++.
void attention_call(const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& out,
                    std::optional<double> scale, bool causal, int64_t query_offset, const py::handle& query_offsets,
                    int64_t window, const py::handle& kv_lengths, const py::handle& cu_seqlens_q,
                    const py::handle& cu_seqlens_k, const CosSinTable* table, const py::handle& q_positions,
                    const py::handle& k_positions, int64_t rotary_offset, int64_t seq_len,
                    const std::string& implementation, const py::handle& alibi_slopes, const py::handle& absolute,
                    const py::handle& kv_starts) {
  check_implementation(implementation);
  const TensorView vq = tensor_arg(q, "q"), vk = tensor_arg(k, "k"), vv = tensor_arg(v, "v"), vout = tensor_arg(out, "out");
  AttentionOptions options;
  options.scale = scale;
  options.mask = causal ? Mask::Causal : Mask::None;
  options.query_offset = query_offset;
  options.query_offsets = int64s_arg(query_offsets);
  options.window = window;
  options.kv_lengths = int64s_arg(kv_lengths);
  options.kv_starts = int64s_arg(kv_starts);
  options.cu_seqlens_q = int64s_arg(cu_seqlens_q);
  options.cu_seqlens_k = int64s_arg(cu_seqlens_k);
  AttentionRope rope;
  rope.table = table;
  rope.q_positions = int64s_arg(q_positions);
  rope.k_positions = int64s_arg(k_positions);
  rope.rotary_offset = rotary_offset;
  rope.seq_len = seq_len;
  // ALiBi: (address, count) of float32 slopes. Absolute: (address, count, rows, dim) of a
  // float32 table; it reads the same per-token positions as fused RoPE (the C++ check
  // refuses the two together, and ALiBi with either).
  if (!alibi_slopes.is_none()) options.alibi_slopes = float32s_arg(alibi_slopes);
  AttentionAbsolute absolute_table;
  if (!absolute.is_none()) {
    const auto items = absolute.cast<py::tuple>();
    absolute_table.table = float32s_arg(absolute);
    absolute_table.rows = items[2].cast<int64_t>();
    absolute_table.dim = items[3].cast<int64_t>();
    absolute_table.q_positions = rope.q_positions;
    absolute_table.k_positions = rope.k_positions;
    options.absolute = &absolute_table;
  }
  const bool fused = table != nullptr;
  py::gil_scoped_release release;
  if (implementation == "checks") {
    check_attention_arguments(vq, vk, vv, vout, options, fused ? &rope : nullptr);
  } else if (implementation == "reference") {
    if (fused) {
      reference::attention(vq, vk, vv, vout, rope, options);
    } else {
      reference::attention(vq, vk, vv, vout, options);
    }
  } else if (fused) {
    rotary::attention(vq, vk, vv, vout, rope, options);
  } else {
    rotary::attention(vq, vk, vv, vout, options);
  }
}

}  // namespace

void bind_attention(py::module_& m) {
  m.def("attention", &attention_call, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
        py::arg("scale").none(true), py::arg("causal"), py::arg("query_offset"), py::arg("query_offsets").none(true),
        py::arg("window"), py::arg("kv_lengths").none(true), py::arg("cu_seqlens_q").none(true),
        py::arg("cu_seqlens_k").none(true), py::arg("table").none(true), py::arg("q_positions").none(true),
        py::arg("k_positions").none(true), py::arg("rotary_offset"), py::arg("seq_len"), py::arg("implementation"),
        py::arg("alibi_slopes") = py::none(), py::arg("absolute") = py::none(), py::arg("kv_starts") = py::none());
  // encodings.hpp, the one definition: ALiBi's slopes (float64 bytes) and the sinusoidal table
  // (float32 bytes, row-major [rows][d_model]).
  m.def("alibi_slopes", [](int64_t num_heads) { return floats_bytes(alibi_slopes(num_heads)); }, py::arg("num_heads"));
  m.def(
      "sinusoidal_table",
      [](int64_t rows, int64_t d_model, double base) {
        const std::vector<float> values = sinusoidal_table(rows, d_model, base);
        return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
      },
      py::arg("rows"), py::arg("d_model"), py::arg("base") = 10000.0);
  m.def("attention_scale", [](const RopeSpec& spec, int64_t qk_head_dim) { return attention_scale(spec, qk_head_dim); },
        py::arg("spec"), py::arg("qk_head_dim"));
}

}  // namespace rotary::python
