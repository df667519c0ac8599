// The collector lease's protocol steps (collector_lease.h, FORMAT.md L120-L123).
#include "ops/collector_lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <ctime>
#include <random>

#include "format/layout_names.h"
#include "fs/tier_dirs.h"
#include "io/io_watch.h"
#include "util/name_escape.h"

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

// What is at dir/name: its lstat and, for a regular file it may read, its
// body (st then from the open file, fresh on NFS). Nothing else is opened:
// a FIFO's open can block, a device's have effects, a symlink leads
// elsewhere. 0 (body empty when not read) or the errno of the lstat.
int Look(int dir, const std::string& name, struct stat* st, std::string* body) {
  body->clear();
  if (fstatat(dir, name.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  if (!S_ISREG(st->st_mode)) return 0;
  struct stat opened {};
  const int err = ReadLease(dir, name, body, &opened);
  if (err == ENOENT) return ENOENT;
  if (err == 0) *st = opened;  // else unreadable or swapped meanwhile: judged by the lstat (a swap shows next tick)
  return 0;
}

std::string KindOf(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
  return "a regular file";
}

// Writes `body` into a new file dir/name (O_EXCL): 0 or the errno. Readable
// by all whatever the umask: an observer that cannot read a lease judges it
// by its attributes alone, which an NFS client may serve from its cache.
int WriteNew(int dir, const std::string& name, const std::string& body) {
  UniqueFd fd(openat(dir, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno;
  (void)fchmod(fd.get(), 0644);
  if (write(fd.get(), body.data(), body.size()) != static_cast<ssize_t>(body.size())) return errno == 0 ? EIO : errno;
  return 0;
}

// Informational (L121): only the bytes matter, compared whole.
std::string LeaseBody(const std::string& token, uint64_t ttl_ms) {
  return "{\"token\": \"" + token + "\", \"pid\": " + std::to_string(getpid()) +
         ", \"started\": " + std::to_string(std::time(nullptr)) + ", \"ttl_ms\": " + std::to_string(ttl_ms) + "}\n";
}

// The value of `"key": ` in a lease body (L121): a string's characters or a
// number's digits; "" when absent. For the log only: no decision reads it.
// The characters are as written (OwnerOf quotes them for the log).
std::string Member(const std::string& body, const std::string& key) {
  const std::string at = "\"" + key + "\": ";
  const size_t start = body.find(at);
  if (start == std::string::npos) return "";
  size_t i = start + at.size();
  if (i < body.size() && body[i] == '"') {
    const size_t end = body.find('"', ++i);
    return end == std::string::npos ? "" : body.substr(i, std::min<size_t>(end - i, 256));
  }
  const size_t end = body.find_first_not_of("0123456789", i);
  return body.substr(i, std::min<size_t>((end == std::string::npos ? body.size() : end) - i, 20));
}

// "collector <token> (pid <pid>) since <UTC>" from an owner record, or what
// stands in for it (a lease not written by kvtier, or unreadable).
std::string OwnerOf(const std::string& body) {
  if (body.empty()) return "a collector whose lease cannot be read here";
  const std::string token = Member(body, "token"), pid = Member(body, "pid"), started = Member(body, "started");
  if (token.empty()) return "an unknown owner (its " + std::to_string(body.size()) + " bytes are no kvtier owner record)";
  std::string since = "an unknown time";
  if (!started.empty()) {
    const time_t t = static_cast<time_t>(std::strtoll(started.c_str(), nullptr, 10));
    struct tm utc {};
    char text[32];
    if (gmtime_r(&t, &utc) != nullptr && std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc) != 0) since = text;
  }
  // Any writer of the root can plant the token: quoted where it holds a
  // newline, a control byte or a quote, so it cannot forge or split a log line.
  return "collector " + QuoteName(token) + " (pid " + (pid.empty() ? "?" : pid) + ") since " + since;
}

}  // namespace

std::string CollectorLease::OtherHolder() const {
  const bool watching = state_ == State::kObserving && !root_replaced_ && seen_since_ns_ != 0;
  if (!watching || !S_ISREG(seen_mode_) || seen_ == body_) return "";
  return OwnerOf(seen_);
}

Result<std::unique_ptr<CollectorLease>> CollectorLease::Open(const std::string& root, uint64_t ttl_ms) {
  UniqueFd root_fd;
  if (const int err = OpenDirAt(AT_FDCWD, root, &root_fd)) return ErrnoToStatus(err, "open " + root);
  struct stat root_st {};
  if (fstat(root_fd.get(), &root_st) != 0) return ErrnoToStatus(errno, "stat " + root);
  const std::string meta(format::kMetaDirName), display = root + "/" + meta;
  KVTIER_ASSIGN_OR_RETURN(UniqueFd dir, MakeTierDir(root_fd.get(), meta, display, /*durable=*/false));
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string token = format::CollectorToken(host, getpid(), std::random_device{}() * uint64_t{0x100000001} ^ NowNs());
  auto lease = std::unique_ptr<CollectorLease>(new CollectorLease(std::move(dir), display, token, std::max<uint64_t>(ttl_ms, 1)));
  lease->body_ = LeaseBody(token, lease->ttl_ms_);
  lease->root_ = root;
  lease->root_dev_ = root_st.st_dev;
  lease->root_ino_ = root_st.st_ino;
  return lease;
}

CollectorLease::CollectorLease(UniqueFd dir, std::string display, std::string token, uint64_t ttl_ms)
    : dir_(std::move(dir)), display_(std::move(display)), lease_path_(display_ + "/" + std::string(format::kCollectorLeaseName)),
      token_(std::move(token)), ttl_ms_(ttl_ms),
      refresh_ms_(RefreshMsFor(ttl_ms)), validity_ms_(3 * refresh_ms_) {}

uint64_t CollectorLease::RefreshMsFor(uint64_t ttl_ms) { return std::clamp<uint64_t>(ttl_ms / 15, 20, 2000); }

bool CollectorLease::MayCollect() const { return MayCollectAt(NowNs()); }
bool CollectorLease::MayCollectAt(int64_t now) const {
  return !root_replaced_ && state_ == State::kHolding && now < valid_until_ns_;
}

// Follows a symlinked root path as Open did: what matters is the directory
// the collectors' walks open by that path.
bool CollectorLease::RootStill() const {
  IoScope io("");  // the root itself: a watched caller (gc's walkers) times a hung mount out
  struct stat st {};
  return !io.cancelled() && stat(root_.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == root_dev_ && st.st_ino == root_ino_;
}

std::string CollectorLease::problem() const {
  std::lock_guard lock(problem_mu_);
  return problem_;
}

// Says `what` for the caller to log; the same statement again only after a
// TTL (its seq grows then too), so that every collector repeats it once per TTL.
void CollectorLease::Problem(int64_t now, std::string what, bool blocking) {
  blocked_ = blocking;
  std::lock_guard lock(problem_mu_);
  if (what == problem_ && now - problem_ns_ < static_cast<int64_t>(ttl_ms_) * 1000000) return;
  problem_ = std::move(what);
  problem_ns_ = now;
  ++problem_seq_;
}

CollectorLease::State CollectorLease::Tick() { return TickAt(NowNs()); }

CollectorLease::State CollectorLease::TickAt(int64_t now) {
  if (!root_replaced_ && !RootStill()) {
    root_replaced_ = true;  // before the release: MayCollect answers false from here on
    Release();              // in the directory it was taken in, if that still exists
  }
  if (root_replaced_) return state_;
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

// L121, L123: an absent lease is created; one seen unchanged for ttl_ms taken
// over. L153: whatever sits at the name is judged by its lstat (and body when
// it is a regular file it can read), so a non-lease is taken over too.
void CollectorLease::TickObserver(int64_t now) {
  std::string body;
  struct stat st {};
  const int err = Look(dir_.get(), std::string(format::kCollectorLeaseName), &st, &body);
  if (err == ENOENT) {
    if (seen_since_ns_ != 0) ++changes_seen_;  // one we saw is gone: its holder gave it up, or another took it
    seen_since_ns_ = 0;
    TryCreate(now);
    return;
  }
  if (err != 0) return Problem(now, lease_path_ + " cannot be looked at: " + std::strerror(err), true);
  if (!SameAsSeen(st, body)) {
    if (seen_since_ns_ != 0) ++changes_seen_;
    seen_ = body;
    seen_ino_ = st.st_ino;
    seen_mode_ = st.st_mode;
    seen_mtime_ns_ = MtimeNs(st);
    seen_since_ns_ = now;
    if (!S_ISREG(st.st_mode) && !blocked_) {  // blocked: it said already why it could not move it
      Problem(now, lease_path_ + " is " + KindOf(st.st_mode) + ", not a lease: no collector holds it; it is moved aside once unchanged for the TTL", true);
    } else if (S_ISREG(st.st_mode)) {
      blocked_ = false;  // a lease: another collector's (live or not, L123 judges)
    }
    return;
  }
  if (now - seen_since_ns_ >= static_cast<int64_t>(ttl_ms_) * 1000000) TryTakeover(now);
}

bool CollectorLease::SameAsSeen(const struct stat& st, const std::string& body) const {
  return seen_since_ns_ != 0 && st.st_ino == seen_ino_ && st.st_mode == seen_mode_ && MtimeNs(st) == seen_mtime_ns_ &&
         body == seen_;
}

// L121: the lease is linked into place from a temp file of ours, so it never
// appears half-written and link(2) fails on an existing name. Whether we hold
// it is decided by reading it back (a retried NFS LINK can say EEXIST after it
// succeeded, or succeed after another's).
bool CollectorLease::TryCreate(int64_t now) {
  const std::string tmp = format::CollectorLeaseTmpName(token_), name(format::kCollectorLeaseName);
  unlinkat(dir_.get(), tmp.c_str(), 0);
  if (const int err = WriteNew(dir_.get(), tmp, body_)) {
    unlinkat(dir_.get(), tmp.c_str(), 0);
    Problem(now, "cannot create the collector lease " + lease_path_ + ": " + std::strerror(err), true);
    return false;
  }
  if (linkat(dir_.get(), tmp.c_str(), dir_.get(), name.c_str(), 0) != 0 && (errno == EPERM || errno == EOPNOTSUPP)) {
    (void)WriteNew(dir_.get(), name, body_);  // no hard links here: O_EXCL creation is as exclusive
  }
  unlinkat(dir_.get(), tmp.c_str(), 0);
  std::string body;
  struct stat st {};
  if (ReadLease(dir_.get(), name, &body, &st) != 0 || body != body_) return false;
  blocked_ = false;
  state_ = State::kSettling;  // L122: no removal before any earlier holder's validity has run out
  acquired_ns_ = last_ok_ns_ = now;
  ++acquisitions_;
  return true;
}

// L123: the stale file is renamed aside (only one taker's rename finds it)
// and judged there: the very inode, type, mtime and body seen stale is
// removed and the lease created anew; anything else (another taker's fresh
// lease) is put back. L153: a non-lease goes the same way, never opened.
void CollectorLease::TryTakeover(int64_t now) {
  const std::string aside = format::CollectorLeaseAsideName(token_), name(format::kCollectorLeaseName);
  const mode_t mode = seen_mode_;
  if (before_takeover_) before_takeover_();
  if (renameat(dir_.get(), name.c_str(), dir_.get(), aside.c_str()) != 0) {
    const int err = errno;
    seen_since_ns_ = 0;  // judged afresh: once more after another TTL
    if (err != ENOENT) Problem(now, lease_path_ + " (" + KindOf(mode) + ") cannot be moved aside: " + std::strerror(err), true);
    return;
  }
  std::string body;
  struct stat st {};
  const bool stale = Look(dir_.get(), aside, &st, &body) == 0 && SameAsSeen(st, body);  // a reused inode number has another body
  seen_since_ns_ = 0;
  if (!stale) return PutBack(aside, st.st_mode);
  Discard(aside, st.st_mode, now);
  TryCreate(now);
}

// Removes what was judged stale at its aside name: a file or symlink by
// unlink (a symlink's target is never touched), a directory by rmdir; a
// directory with entries (not ours to empty) goes out of the aside name's
// way, to a name of its own, and is reported.
void CollectorLease::Discard(const std::string& aside, mode_t mode, int64_t now) {
  if (!S_ISDIR(mode)) return (void)unlinkat(dir_.get(), aside.c_str(), 0);
  if (unlinkat(dir_.get(), aside.c_str(), AT_REMOVEDIR) == 0) return;
  const std::string junk = format::CollectorLeaseJunkName(token_, ++junk_n_);
  if (renameat(dir_.get(), aside.c_str(), dir_.get(), junk.c_str()) == 0) {
    Problem(now, lease_path_ + " was a directory with entries, not a lease: moved to " + display_ + "/" + junk +
                     " (remove it by hand)", false);
  } else {
    Problem(now, lease_path_ + " was a directory with entries, not a lease: left at " + display_ + "/" + aside + ": " +
                     std::strerror(errno), false);
  }
}

// What was moved aside but is not to be removed goes back, and the aside
// name is left free: a file or symlink by link (EEXIST: a lease created
// meanwhile stays, and the moved one's holder sees its lease lost), a
// directory by rename, or, where that fails, on to a name of its own.
void CollectorLease::PutBack(const std::string& aside, mode_t mode) {
  const std::string name(format::kCollectorLeaseName);
  if (!S_ISDIR(mode)) {
    (void)linkat(dir_.get(), aside.c_str(), dir_.get(), name.c_str(), 0);
    unlinkat(dir_.get(), aside.c_str(), 0);
  } else if (renameat(dir_.get(), aside.c_str(), dir_.get(), name.c_str()) != 0) {
    const std::string junk = format::CollectorLeaseJunkName(token_, ++junk_n_);
    (void)renameat(dir_.get(), aside.c_str(), dir_.get(), junk.c_str());
  }
}

void CollectorLease::Release() {
  if (state_ == State::kObserving) return;
  Lose("released");
  const std::string aside = format::CollectorLeaseAsideName(token_), name(format::kCollectorLeaseName);
  std::string body;
  struct stat st {};
  // Not ours (replaced, or not a lease at all): nothing to give up, nothing moved.
  if (Look(dir_.get(), name, &st, &body) != 0 || body != body_) return;
  if (renameat(dir_.get(), name.c_str(), dir_.get(), aside.c_str()) != 0) return;
  if (Look(dir_.get(), aside, &st, &body) != 0 || !S_ISREG(st.st_mode) || body != body_) return PutBack(aside, st.st_mode);
  unlinkat(dir_.get(), aside.c_str(), 0);
}

}  // namespace kvtier::internal
