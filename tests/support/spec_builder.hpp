// tests/support/spec_builder.hpp: the one RopeSpec builder of the tests, the fuzz targets and
// their seed corpus.
//
// Header-only and below everything it serves: it includes only rotary/spec.hpp, so the fuzz
// targets (built without tests/) reach it through the project root, as the tests do:
//   #include "tests/support/spec_builder.hpp"
// A test names only the fields it cares about; everything else is a plain default-scheme spec:
//   RopeSpec spec = test::rope_spec({.name = "args", .head_dim = 16});
#pragma once

#include <cstdint>
#include <string>

#include "rotary/spec.hpp"

namespace rotary::test {

struct SpecFields {
  std::string name = "test";
  int64_t head_dim = 128;
  int64_t rotary_dim = 0;  // 0: head_dim (the whole head rotates)
  double theta_base = 10000.0;
  int64_t max_position_embeddings = 4096;  // 0 = unknown, as a config may leave it
  Style style = Style::NeoX;
};

// A default-scheme (no scaling), single-stream spec. partial_rotary_factor is
// rotary_dim / head_dim, as a config stating that rotary_dim would give (1 for a whole head).
inline RopeSpec rope_spec(const SpecFields& fields = {}) {
  RopeSpec spec;
  spec.name = fields.name;
  spec.head_dim = fields.head_dim;
  spec.rotary_dim = fields.rotary_dim == 0 ? fields.head_dim : fields.rotary_dim;
  if (spec.rotary_dim != spec.head_dim && spec.head_dim != 0) {
    spec.partial_rotary_factor = static_cast<double>(spec.rotary_dim) / static_cast<double>(spec.head_dim);
  }
  spec.theta_base = fields.theta_base;
  spec.max_position_embeddings = fields.max_position_embeddings;
  spec.style = fields.style;
  return spec;
}

}  // namespace rotary::test
