// src/core/shape_text.hpp: how rotary's messages write a shape, in one place.
//   shape_text({2, 3})       "(2, 3)"   NumPy's repr of a shape: (), (5,), (2, 3)
//   shape_text(view)         "bshd (2, 16, 8, 64)"   a tensor view's axes in its layout's order
//   json_shape_text({2, 3})  "[2, 3]"   a safetensors header's "shape" entry, as the file writes it
#pragma once

#include <cstdint>
#include <vector>
#include <string>

#include "rotary/tensor.hpp"

namespace rotary {

std::string shape_text(const std::vector<int64_t>& shape);
std::string shape_text(const TensorView& view);
std::string json_shape_text(const std::vector<int64_t>& shape);

}  // namespace rotary
