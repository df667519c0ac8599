// See block_verify.h.
#include "ops/block_verify.h"

#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "format/layout_names.h"
#include "ops/trailer_sizes.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

constexpr size_t kVerifyChunkBytes = 1 << 20;  // memory per verifying thread, whatever a file's size

// A block's bytes into a CRC32C: its data read in fixed-size chunks, its
// holes counted as zeros without being read (FORMAT.md L109).
struct CrcWalk {
  int fd;
  IoScope* io;
  std::vector<uint8_t> chunk = std::vector<uint8_t>(kVerifyChunkBytes);
  uint32_t crc = 0;
  uint64_t pos = 0;         // the bytes before it are in crc
  uint64_t read_bytes = 0;  // of them, those read (not holes)
};

// Reads [w->pos, end) into the CRC. False on a short read or an error.
bool ReadData(CrcWalk* w, uint64_t end) {
  while (w->pos < end) {
    const ssize_t n = pread(w->fd, w->chunk.data(), std::min<uint64_t>(w->chunk.size(), end - w->pos),
                            static_cast<off_t>(w->pos));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    w->crc = Crc32cExtend(w->crc, {w->chunk.data(), static_cast<size_t>(n)});
    w->pos += static_cast<uint64_t>(n);
    w->read_bytes += static_cast<uint64_t>(n);
    w->io->Step();  // the deadline is per read, not per (possibly large) file
  }
  return true;
}

// The next data extent at or after pos, [*from, *to) clipped to size
// (*from == size: only holes remain). False where the file system cannot
// say (EINVAL, EOPNOTSUPP...): the caller then reads everything. ENXIO means
// no data past pos; a file that shrank meanwhile says so too, hence the
// caller's final size check.
bool NextData(int fd, uint64_t pos, uint64_t size, uint64_t* from, uint64_t* to) {
  const off_t data = lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
  if (data < 0) {
    if (errno != ENXIO) return false;
    *from = *to = size;
    return true;
  }
  *from = std::clamp<uint64_t>(static_cast<uint64_t>(data), pos, size);
  const off_t hole = lseek(fd, data, SEEK_HOLE);
  *to = hole < 0 ? size : std::clamp<uint64_t>(static_cast<uint64_t>(hole), *from, size);
  if (*to == *from && *from < size) *to = size;  // changing under us: read the rest rather than loop
  return true;
}

// Covers the first `size` bytes: whether all of them were, the file no
// shorter at the end (one that shrank or failed meanwhile is not judged).
bool CrcOfBytes(CrcWalk* w, uint64_t size) {
  bool seekable = true;
  while (w->pos < size) {
    uint64_t from = w->pos, to = size;
    if (seekable) seekable = NextData(w->fd, w->pos, size, &from, &to);
    if (!seekable) from = w->pos, to = size;
    w->io->Step();
    w->crc = Crc32cExtendZeros(w->crc, from - w->pos);  // a hole: O(log n), never read
    w->pos = from;
    if (!ReadData(w, to)) return false;
  }
  struct stat st;
  return fstat(w->fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= size;
}

// A file system may report data not yet written back as a hole (OpenZFS
// #15526): a mismatch found through holes condemns a block only once its
// last write is older than this, when its data is surely on disk. Reading
// such a block in full instead would give a hostile volume of truncated
// blocks its unbounded time back (L109).
constexpr int64_t kHoleTrustAgeS = 60;

bool RecentlyWritten(int fd) {
  struct stat st;
  return fstat(fd, &st) != 0 || st.st_mtim.tv_sec > std::time(nullptr) - kHoleTrustAgeS;
}

// The CRC32C a block carries: in its trailer (L133; *data_bytes: the row
// before it) or its attribute (L60). kMatches: it carries none (written by
// vLLM, L68), nothing to check; kMismatch: one that cannot be read whole.
Verdict StoredCrc(int fd, uint64_t size, uint32_t* stored, uint64_t* data_bytes, std::string* detail) {
  format::TrailerRecord record;
  const format::TrailerState trailer = ReadTrailerRecord(fd, size, &record);
  *data_bytes = size;
  if (trailer == format::TrailerState::kDamaged) {
    *detail = "damaged checksum trailer (L133)";
    return Verdict::kMismatch;
  }
  if (trailer == format::TrailerState::kValid) {
    *stored = record.data_crc;
    *data_bytes = record.data_bytes;
    return Verdict::kUnjudged;
  }
  uint8_t want[format::kCrcXattrBytes];
  const ssize_t got = fgetxattr(fd, format::kCrcXattr, want, sizeof want);
  if (got < 0 && errno != ERANGE) return Verdict::kMatches;  // no attribute (ENODATA) or none readable
  if (got != static_cast<ssize_t>(sizeof want)) {
    *detail = "CRC32C attribute is not 4 bytes";
    return Verdict::kMismatch;
  }
  *stored = uint32_t{want[0]} << 24 | uint32_t{want[1]} << 16 | uint32_t{want[2]} << 8 | want[3];
  return Verdict::kUnjudged;
}

}  // namespace

// FORMAT.md L67, L137: the CRC32C of the trailer or the attribute against
// the row's bytes (L109: holes as zeros, unread). Files without either
// (written by vLLM, L68) pass. *read_bytes: what was read.
Verdict CrcVerdict(int fd, uint64_t size, IoScope* io, std::string* detail, uint64_t* read_bytes) {
  uint32_t stored = 0;
  uint64_t data = size;
  const Verdict carried = StoredCrc(fd, size, &stored, &data, detail);
  if (carried != Verdict::kUnjudged) return carried;
  CrcWalk walk{fd, io};
  const bool whole = CrcOfBytes(&walk, data);
  *read_bytes = walk.read_bytes;
  if (!whole) return Verdict::kUnjudged;  // shrank or failed meanwhile: the size check judges it next time
  if (stored == walk.crc) return Verdict::kMatches;
  if (walk.read_bytes < data && RecentlyWritten(fd)) return Verdict::kUnjudged;
  *detail = data != size ? "CRC32C in its trailer does not match the row (L137)" : "CRC32C attribute does not match the bytes";
  return Verdict::kMismatch;
}

}  // namespace kvtier::internal
