#include "ops/trailer_sizes.h"

#include <unistd.h>

#include <cerrno>

namespace kvtier::internal {

format::TrailerState ReadTrailerRecord(int fd, uint64_t size, format::TrailerRecord* out, bool* read_failed) {
  if (read_failed != nullptr) *read_failed = false;
  if (size < format::kTrailerBytes) return format::TrailerState::kAbsent;
  uint8_t record[format::kTrailerRecordBytes];
  ssize_t n;
  do {
    n = pread(fd, record, sizeof record, static_cast<off_t>(size - sizeof record));
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof record)) {
    if (read_failed != nullptr) *read_failed = true;
    return format::TrailerState::kAbsent;
  }
  return format::ParseTrailerRecord(record, size, out);
}

}  // namespace kvtier::internal
