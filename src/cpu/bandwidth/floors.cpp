// src/cpu/bandwidth/floors.cpp: Streams, the floor of a kernel call (floors.hpp).
#include "cpu/bandwidth/floors.hpp"

namespace rotary::bandwidth {

Streams::Streams(size_t max_bytes) : src_(max_bytes), dst_(max_bytes), data_(max_bytes) {
  copy_inplace_init(src_.data(), max_bytes);  // a non-zero source: no zero-page shortcuts
  copy_inplace_init(data_.data(), max_bytes);
}

void Streams::copy(size_t bytes, int threads, Pattern pattern) {
  copy_stream(dst_.data(), src_.data(), checked(bytes), threads, pattern);
}

void Streams::memcpy(size_t bytes, int threads) { memcpy_stream(dst_.data(), src_.data(), checked(bytes), threads); }

void Streams::copy_inplace(size_t bytes, int threads, Pattern pattern) {
  copy_inplace_stream(data_.data(), checked(bytes), threads, pattern);
}

void Streams::stream(bool in_place, size_t bytes, int threads, Pattern pattern) {
  if (in_place) {
    copy_inplace(bytes, threads, pattern);
  } else {
    copy(bytes, threads, pattern);
  }
}

void Streams::choose_floor(bool in_place, int threads, Pattern pattern) { floors_[key(in_place, threads)] = pattern; }

Pattern Streams::floor(bool in_place, int threads) const {
  const auto found = floors_.find(key(in_place, threads));
  if (found != floors_.end()) return found->second;
  return in_place ? Pattern::Sequential : Pattern::FourPages;
}

void Streams::run_cached(bool in_place, size_t bytes) {
  if (in_place) {
    copy_inplace(bytes, 1, Pattern::Sequential);
  } else {
    memcpy(bytes, 1);
  }
}

}  // namespace rotary::bandwidth
