// kvtier error model: a [[nodiscard]] Status (code, errno, message) and a
// Result<T> that holds either a value or a non-OK Status.
//
// The library never throws across its public API. Every fallible function
// returns Status or Result<T>; dropping one is a compile error under -Werror
// (use IgnoreError() to make a deliberate drop greppable).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "kvtier/export.h"

namespace kvtier {

enum class StatusCode : int {
  kOk = 0,
  kNotFound,         // a key, file or namespace that does not exist
  kCorruption,       // bytes on disk that break the format (torn, wrong size, bad CRC)
  kIoError,          // an I/O syscall failed for a reason not covered below
  kNoSpace,          // ENOSPC / EDQUOT
  kBusy,             // a bounded queue is full; try again later
  kRejected,         // admission control refused the work
  kInvalidArgument,  // bad input: config, flags, arguments
  kUnavailable,      // a facility is missing (no io_uring, shut down)
  kPermissionDenied, // EACCES / EPERM / EROFS
  kTimedOut,         // an I/O deadline expired
  kInternal,         // a broken invariant inside kvtier
};

// Stable lower-case name of a code ("ok", "not_found", ...), for logs and JSON.
KVTIER_API std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] KVTIER_API Status {
 public:
  // The OK status. Cheap: no allocation.
  Status() = default;
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The errno that caused this status, or 0 when none did.
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: <message>" (plus " (errno N: strerror)" when set).
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(std::string_view context) const;

  // Marks a deliberate drop of a status, so such places can be grepped.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  int errno_ = 0;
  std::string message_;
};

inline Status InvalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status Corruption(std::string message) {
  return Status(StatusCode::kCorruption, std::move(message));
}
inline Status NotFound(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
inline Status Internal(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

// Maps an errno value to a Status. This is the one place where errno values
// become status codes: ENOENT -> kNotFound, ENOSPC/EDQUOT -> kNoSpace,
// EACCES/EPERM/EROFS -> kPermissionDenied, EAGAIN -> kBusy,
// ETIMEDOUT/ECANCELED -> kTimedOut, EINVAL -> kInvalidArgument,
// ENOSYS/EOPNOTSUPP -> kUnavailable, EBADMSG (a bad checksum) -> kCorruption,
// anything else -> kIoError.
// `what` names the operation and path, e.g. "open /x/y.bin".
KVTIER_API Status ErrnoToStatus(int sys_errno, std::string_view what);

}  // namespace kvtier

#define KVTIER_STATUS_CONCAT_INNER_(a, b) a##b
#define KVTIER_STATUS_CONCAT_(a, b) KVTIER_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status); returns it from the enclosing function if not OK.
#define KVTIER_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::kvtier::Status kvtier_status_ = (expr);         \
    if (!kvtier_status_.ok()) return kvtier_status_;  \
  } while (0)

// Evaluates `rexpr` (a Result<T>); on error returns its Status, else moves the
// value into `lhs` (which may be a declaration such as `auto x`).
#define KVTIER_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_STATUS_CONCAT_(kvtier_result_, __LINE__), lhs, rexpr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
