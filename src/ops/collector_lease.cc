// The collector lease's protocol steps (collector_lease.h, FORMAT.md L120-L123).
#include "ops/collector_lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <random>

#include "format/layout_names.h"
#include "fs/tier_dirs.h"

namespace kvtier::internal {
namespace {

constexpr size_t kLeaseBodyBytesMax = 4096;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t MtimeNs(const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec; }

// Opens dir/name (a regular file, never through a symlink) and reads its body.
// The open is what makes an NFS client revalidate the attributes
// (close-to-open), so each check sees the server's mtime. 0 or the errno.
int ReadLease(int dir, const std::string& name, std::string* body, struct stat* st, UniqueFd* keep = nullptr) {
  UniqueFd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return errno;
  if (fstat(fd.get(), st) != 0) return errno;
  if (!S_ISREG(st->st_mode)) return EINVAL;
  char buf[kLeaseBodyBytesMax];
  const ssize_t n = pread(fd.get(), buf, sizeof buf, 0);
  if (n < 0) return errno;
  body->assign(buf, static_cast<size_t>(n));
  if (keep != nullptr) *keep = std::move(fd);
  return 0;
}

// Writes `body` into a new file dir/name (O_EXCL): 0 or the errno.
int WriteNew(int dir, const std::string& name, const std::string& body) {
  UniqueFd fd(openat(dir, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno;
  if (write(fd.get(), body.data(), body.size()) != static_cast<ssize_t>(body.size())) return errno == 0 ? EIO : errno;
  return 0;
}

// Informational (L121): only the bytes matter, compared whole.
std::string LeaseBody(const std::string& token, uint64_t ttl_ms) {
  return "{\"token\": \"" + token + "\", \"pid\": " + std::to_string(getpid()) +
         ", \"started\": " + std::to_string(std::time(nullptr)) + ", \"ttl_ms\": " + std::to_string(ttl_ms) + "}\n";
}

}  // namespace

Result<std::unique_ptr<CollectorLease>> CollectorLease::Open(const std::string& root, uint64_t ttl_ms) {
  UniqueFd root_fd;
  if (const int err = OpenDirAt(AT_FDCWD, root, &root_fd)) return ErrnoToStatus(err, "open " + root);
  const std::string meta(format::kMetaDirName), display = root + "/" + meta;
  KVTIER_ASSIGN_OR_RETURN(UniqueFd dir, MakeTierDir(root_fd.get(), meta, display, /*durable=*/false));
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string token = format::CollectorToken(host, getpid(), std::random_device{}() * uint64_t{0x100000001} ^ NowNs());
  auto lease = std::unique_ptr<CollectorLease>(new CollectorLease(std::move(dir), display, token, std::max<uint64_t>(ttl_ms, 1)));
  lease->body_ = LeaseBody(token, lease->ttl_ms_);
  return lease;
}

CollectorLease::CollectorLease(UniqueFd dir, std::string display, std::string token, uint64_t ttl_ms)
    : dir_(std::move(dir)), display_(std::move(display)), token_(std::move(token)), ttl_ms_(ttl_ms),
      refresh_ms_(RefreshMsFor(ttl_ms)), validity_ms_(3 * refresh_ms_) {}

uint64_t CollectorLease::RefreshMsFor(uint64_t ttl_ms) { return std::clamp<uint64_t>(ttl_ms / 15, 20, 2000); }

bool CollectorLease::MayCollect() const { return MayCollectAt(NowNs()); }
bool CollectorLease::MayCollectAt(int64_t now) const { return state_ == State::kHolding && now < valid_until_ns_; }

CollectorLease::State CollectorLease::Tick() { return TickAt(NowNs()); }

CollectorLease::State CollectorLease::TickAt(int64_t now) {
  if (state_ == State::kObserving) {
    TickObserver(now);
  } else {
    TickHolder(now);
  }
  return state_;
}

// L122: still our body at the name, and its mtime set to now on the very inode
// read; a holder that cannot check for ttl_ms gives up (an observer takes over).
void CollectorLease::TickHolder(int64_t now) {
  std::string body;
  struct stat st {};
  UniqueFd fd;
  const int err = ReadLease(dir_.get(), std::string(format::kCollectorLeaseName), &body, &st, &fd);
  if (err == ENOENT || (err == 0 && body != body_)) return Lose("replaced");
  if (err == 0 && futimens(fd.get(), nullptr) == 0) last_ok_ns_ = now;
  if (now - last_ok_ns_ > static_cast<int64_t>(ttl_ms_) * 1000000) return Lose("not refreshed within the TTL");
  const int64_t settle_ns = static_cast<int64_t>(validity_ms_ + refresh_ms_) * 1000000;
  if (state_ == State::kSettling && last_ok_ns_ == now && now - acquired_ns_ >= settle_ns) state_ = State::kHolding;
  if (last_ok_ns_ == now) valid_until_ns_ = now + static_cast<int64_t>(validity_ms_) * 1000000;
}

void CollectorLease::Lose(const char*) {
  state_ = State::kObserving;
  valid_until_ns_ = 0;
  seen_.clear();
  seen_ino_ = 0;
}

// L121, L123: an absent lease is created; one seen unchanged for ttl_ms taken over.
void CollectorLease::TickObserver(int64_t now) {
  std::string body;
  struct stat st {};
  const int err = ReadLease(dir_.get(), std::string(format::kCollectorLeaseName), &body, &st);
  if (err == ENOENT) {
    if (seen_since_ns_ != 0) ++changes_seen_;  // one we saw is gone: its holder gave it up, or another took it
    TryCreate(now);
    return;
  }
  if (err != 0) return;  // unreadable: judge nothing
  if (st.st_ino != seen_ino_ || MtimeNs(st) != seen_mtime_ns_ || body != seen_ || seen_since_ns_ == 0) {
    if (seen_since_ns_ != 0) ++changes_seen_;
    seen_ = body;
    seen_ino_ = st.st_ino;
    seen_mtime_ns_ = MtimeNs(st);
    seen_since_ns_ = now;
    return;
  }
  if (now - seen_since_ns_ >= static_cast<int64_t>(ttl_ms_) * 1000000) TryTakeover(now);
}

// L121: the lease is linked into place from a temp file of ours, so it never
// appears half-written and link(2) fails on an existing name. Whether we hold
// it is decided by reading it back (a retried NFS LINK can say EEXIST after it
// succeeded, or succeed after another's).
bool CollectorLease::TryCreate(int64_t now) {
  const std::string tmp = format::CollectorLeaseTmpName(token_), name(format::kCollectorLeaseName);
  unlinkat(dir_.get(), tmp.c_str(), 0);
  if (WriteNew(dir_.get(), tmp, body_) != 0) return unlinkat(dir_.get(), tmp.c_str(), 0), false;
  if (linkat(dir_.get(), tmp.c_str(), dir_.get(), name.c_str(), 0) != 0 && (errno == EPERM || errno == EOPNOTSUPP)) {
    (void)WriteNew(dir_.get(), name, body_);  // no hard links here: O_EXCL creation is as exclusive
  }
  unlinkat(dir_.get(), tmp.c_str(), 0);
  std::string body;
  struct stat st {};
  if (ReadLease(dir_.get(), name, &body, &st) != 0 || body != body_) return false;
  state_ = State::kSettling;  // L122: no removal before any earlier holder's validity has run out
  acquired_ns_ = last_ok_ns_ = now;
  ++acquisitions_;
  return true;
}

// L123: the stale file is renamed aside (only one taker's rename finds it)
// and judged there: the very inode, mtime and body seen stale is removed and the
// lease created anew; anything else (another taker's fresh lease) is put back.
void CollectorLease::TryTakeover(int64_t now) {
  const std::string aside = format::CollectorLeaseAsideName(token_), name(format::kCollectorLeaseName);
  seen_since_ns_ = 0;
  if (before_takeover_) before_takeover_();
  if (renameat(dir_.get(), name.c_str(), dir_.get(), aside.c_str()) != 0) return;
  std::string body;
  struct stat st {};
  const bool stale = ReadLease(dir_.get(), aside, &body, &st) == 0 && st.st_ino == seen_ino_ &&
                     MtimeNs(st) == seen_mtime_ns_ && body == seen_;  // a reused inode number has another body
  if (!stale) (void)linkat(dir_.get(), aside.c_str(), dir_.get(), name.c_str(), 0);  // EEXIST: its holder sees it lost
  unlinkat(dir_.get(), aside.c_str(), 0);
  if (stale) TryCreate(now);
}

void CollectorLease::Release() {
  if (state_ == State::kObserving) return;
  Lose("released");
  const std::string aside = format::CollectorLeaseAsideName(token_), name(format::kCollectorLeaseName);
  if (renameat(dir_.get(), name.c_str(), dir_.get(), aside.c_str()) != 0) return;
  std::string body;
  struct stat st {};
  if (ReadLease(dir_.get(), aside, &body, &st) != 0 || body != body_) {
    (void)linkat(dir_.get(), aside.c_str(), dir_.get(), name.c_str(), 0);  // not ours: put it back
  }
  unlinkat(dir_.get(), aside.c_str(), 0);
}

}  // namespace kvtier::internal
