// ByteSink: an append-only byte buffer tuned for the hashing hot path. It
// keeps its capacity across Clear() so one sink serializes every block of a
// prompt without allocating.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace kvtier::internal {

class ByteSink {
 public:
  void Clear() { size_ = 0; }
  size_t size() const { return size_; }
  uint8_t* data() { return buf_.data(); }
  std::span<const uint8_t> view() const { return {buf_.data(), size_}; }

  // Room for n more bytes; returns where they go. Commit with Advance(n).
  uint8_t* Reserve(size_t n) {
    if (size_ + n > buf_.size()) buf_.resize(std::max(buf_.size() * 2, size_ + n + 256));
    return buf_.data() + size_;
  }
  void Advance(size_t n) { size_ += n; }

  void Put(uint8_t b) {
    *Reserve(1) = b;
    ++size_;
  }
  void Append(const void* src, size_t n) {
    if (n == 0) return;
    std::memcpy(Reserve(n), src, n);
    size_ += n;
  }
  // Removes n bytes at `at` (a frame header that turned out not to be needed).
  void Erase(size_t at, size_t n) {
    std::memmove(buf_.data() + at, buf_.data() + at + n, size_ - at - n);
    size_ -= n;
  }
  uint8_t& operator[](size_t i) { return buf_[i]; }

 private:
  std::vector<uint8_t> buf_;
  size_t size_ = 0;
};

inline void PutLe(uint8_t* out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutBe(uint8_t* out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(v >> (8 * (n - 1 - i)));
}

}  // namespace kvtier::internal
