// Result<T>: a value or a non-OK Status, with the absl::StatusOr surface
// (ok(), status(), value(), operator*, operator->).
//
// Constructing a Result from an OK Status is a programming error; it is turned
// into an kInternal status rather than an empty value, so it cannot be
// mistaken for success.
#pragma once

#include <cstdlib>
#include <type_traits>
#include <utility>
#include <variant>

#include "kvtier/status.h"

namespace kvtier {

template <class T>
class [[nodiscard]] Result {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): implicit, as absl::StatusOr.
  Result(T value) : rep_(std::in_place_index<1>, std::move(value)) {}
  // NOLINTNEXTLINE(google-explicit-constructor)
  Result(Status status) : rep_(std::in_place_index<0>, std::move(status)) {
    if (std::get<0>(rep_).ok()) {
      rep_.template emplace<0>(StatusCode::kInternal, "Result built from an OK Status");
    }
  }

  bool ok() const { return rep_.index() == 1; }

  // The error, or an OK Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<0>(rep_); }

  // The value. Calling these on an error Result aborts (a programming error).
  const T& value() const& { return *Checked(); }
  T& value() & { return *Checked(); }
  T&& value() && { return std::move(*Checked()); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*Checked()); }
  const T* operator->() const { return Checked(); }
  T* operator->() { return Checked(); }

  // The value if present, else `fallback`.
  T value_or(T fallback) const& { return ok() ? std::get<1>(rep_) : std::move(fallback); }

 private:
  const T* Checked() const {
    if (!ok()) std::abort();
    return &std::get<1>(rep_);
  }
  T* Checked() {
    if (!ok()) std::abort();
    return &std::get<1>(rep_);
  }

  std::variant<Status, T> rep_;
};

}  // namespace kvtier
