// src/python/bind_apply.cpp: apply (apply.hpp: the table's rotation, forward or backward) and
// apply_cos_sin (apply_cos_sin.hpp: x * cos + rotate(x) * sin with the caller's cos and sin).
#include <pybind11/stl.h>

#include <cstdint>
#include <span>
#include <string>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/table.hpp"
#include "python/tensor_arg.hpp"

#include "python/fresh_outputs.hpp"

namespace rotary::python {
namespace {

// The bytes of a C-contiguous view (the extent a fresh output covers), or 0 for any other view.
int64_t contiguous_bytes(const TensorView& view) {
  const TensorView dense = contiguous_view(view.data, view.dtype, view.layout, view.shape);
  for (int axis = 0; axis < layout_rank(view.layout); ++axis) {
    if (view.shape[axis] > 1 && view.stride_elems[axis] != dense.stride_elems[axis]) return 0;
  }
  return element_count(view, "out") * dtype_size(view.dtype);
}

// Faults in a fresh output (rotary.apply without out= or inplace, python/rotary/_apply.py) before
// the kernel writes it (fresh_outputs.hpp). Called after the argument checks; a view that is not
// C-contiguous is left alone, so that the stores stay inside the output.
void prefault_output(const TensorView& out) {
  if (out.data == nullptr) return;
  const int64_t bytes = contiguous_bytes(out);
  prefault_fresh_output(out.data, bytes, bytes / dtype_size(out.dtype));
}

void apply_call(const py::handle& q, const py::handle& k, const py::handle& q_out, const py::handle& k_out,
                const py::handle& per_token, const py::handle& offsets, const py::handle& cu_seqlens,
                const CosSinTable& table, const std::string& direction, int64_t rotary_offset, int64_t xpos_length,
                int64_t seq_len, const std::string& implementation, bool prefault_outputs) {
  check_implementation(implementation);
  const TensorView vq = tensor_arg(q, "q"), vk = tensor_arg(k, "k");
  const TensorView vq_out = tensor_arg(q_out, "q_out"), vk_out = tensor_arg(k_out, "k_out");
  // Python takes positions and offsets as two keywords; C++ takes one source, so giving
  // both is this binding's error (in the contract's words).
  const std::span<const int64_t> cu = int64s_arg(cu_seqlens);
  const std::span<const int64_t> per_token_positions = int64s_arg(per_token);
  const std::span<const int64_t> sequence_offsets = int64s_arg(offsets);
  if (!per_token.is_none() && !offsets.is_none()) {
    fail("apply: positions must come from one source, per-token positions or sequence offsets (got both: " +
         std::to_string(per_token_positions.size()) + " positions, " + std::to_string(sequence_offsets.size()) +
         " offsets)");
  }
  Positions positions = Positions::arange(cu);
  if (!per_token.is_none()) {
    positions = Positions::per_token(per_token_positions, cu);
  } else if (!offsets.is_none()) {
    positions = Positions::sequence_offsets(sequence_offsets, cu);
  }
  ApplyOptions options;
  options.direction = parse_direction(direction);
  options.rotary_offset = rotary_offset;
  options.xpos_length = xpos_length;
  options.seq_len = seq_len;
  py::gil_scoped_release release;
  if (implementation == "checks") {
    check_apply_arguments(vq, vk, vq_out, vk_out, positions, table, options);
  } else if (implementation == "reference") {
    reference::apply(vq, vk, vq_out, vk_out, positions, table, options);
  } else {
    if (prefault_outputs) {
      check_apply_arguments(vq, vk, vq_out, vk_out, positions, table, options);
      prefault_output(vq_out);
      prefault_output(vk_out);
    }
    rotary::apply(vq, vk, vq_out, vk_out, positions, table, options);
  }
}

void apply_cos_sin_call(const py::handle& x, const py::handle& out, const py::handle& cos, const py::handle& sin,
                        const std::string& style, const std::string& direction, const std::string& rounding,
                        const std::string& name) {
  const TensorView vx = tensor_arg(x, name.c_str()), vout = tensor_arg(out, (name + "_out").c_str());
  const TensorView vcos = tensor_arg(cos, "cos"), vsin = tensor_arg(sin, "sin");
  Rounding mode = Rounding::Once;
  if (rounding == "like_torch") {
    mode = Rounding::LikeTorch;
  } else if (rounding != "once") {
    fail("rounding must be 'once' or 'like_torch' (got '" + rounding + "')");
  }
  const Style parsed_style = parse_style_or_fail(style);
  const Direction parsed_direction = parse_direction(direction);
  py::gil_scoped_release release;
  apply_cos_sin(vx, vout, vcos, vsin,
                {.style = parsed_style, .direction = parsed_direction, .rounding = mode, .name = name.c_str()});
}

}  // namespace

void bind_apply(py::module_& m) {
  m.def("apply", &apply_call, py::arg("q"), py::arg("k"), py::arg("q_out"), py::arg("k_out"), py::arg("per_token"),
        py::arg("offsets"), py::arg("cu_seqlens"), py::arg("table"), py::arg("direction"), py::arg("rotary_offset"),
        py::arg("xpos_length"), py::arg("seq_len"), py::arg("implementation"), py::arg("prefault_outputs") = false);
  m.def("apply_cos_sin", &apply_cos_sin_call, py::arg("x"), py::arg("out"), py::arg("cos"), py::arg("sin"),
        py::arg("style"), py::arg("direction"), py::arg("rounding"), py::arg("name"));
}

}  // namespace rotary::python
