// src/core/shape_text.cpp: the shape formats of rotary's messages (shape_text.hpp).
#include "core/shape_text.hpp"

#include <span>

namespace rotary {
namespace {

std::string joined(std::span<const int64_t> values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text;
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  return "(" + joined(shape) + (shape.size() == 1 ? ",)" : ")");
}

std::string shape_text(const TensorView& view) {
  const int rank = layout_rank(view.layout);
  const size_t count = rank < 0 ? 0 : rank > 4 ? 4 : static_cast<size_t>(rank);
  return std::string(to_string(view.layout)) + " (" + joined({view.shape.data(), count}) + ")";
}

std::string json_shape_text(const std::vector<int64_t>& shape) { return "[" + joined(shape) + "]"; }

}  // namespace rotary
