// Status formatting and the single errno -> Status mapping of the library.
#include "kvtier/status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kNoSpace: return "no_space";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kRejected: return "rejected";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kTimedOut: return "timed_out";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  if (errno_ != 0) {
    out += " (errno ";
    out += std::to_string(errno_);
    out += ": ";
    out += std::strerror(errno_);
    out += ")";
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message), errno_);
}

static StatusCode CodeForErrno(int sys_errno) {
  switch (sys_errno) {
    case 0: return StatusCode::kInternal;  // a caller bug: errno 0 is not an error
    case ENOENT: return StatusCode::kNotFound;
    case ENOSPC:
    case EDQUOT: return StatusCode::kNoSpace;
    case EACCES:
    case EPERM:
    case EROFS: return StatusCode::kPermissionDenied;
    case EAGAIN: return StatusCode::kBusy;
    case ETIMEDOUT:
    case ECANCELED: return StatusCode::kTimedOut;
    case EINVAL: return StatusCode::kInvalidArgument;
    case ENOSYS:
    case EOPNOTSUPP: return StatusCode::kUnavailable;
    case EBADMSG: return StatusCode::kCorruption;  // also ext4's and XFS's EFSBADCRC
    default: return StatusCode::kIoError;
  }
}

Status ErrnoToStatus(int sys_errno, std::string_view what) {
  std::string message(what);
  if (sys_errno == 0) message += ": errno 0 reported as an error";
  return Status(CodeForErrno(sys_errno), std::move(message), sys_errno);
}

}  // namespace kvtier
