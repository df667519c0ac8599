// `kvtier doctor`: the run of the probes under the hung-mount watch, and
// the settings "auto" picks from what they found (ops/doctor.h).
#include "ops/doctor.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "format/layout_names.h"
#include "fs/fs_tier_internal.h"
#include "io/io_watch.h"
#include "kvtier/layout.h"
#include "ops/doctor_probes.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kIoBytesMax = uint64_t{1} << 30;
constexpr int kSamplesMax = 1000;

Status Validate(const DoctorOptions& o) {
  if (o.root.empty() || o.root.find('\0') != std::string::npos) {
    return InvalidArgument("doctor: root must be a non-empty path without NUL bytes");
  }
  if (o.io_bytes == 0 || o.io_bytes > kIoBytesMax) return InvalidArgument("doctor: io_bytes must be 1 B..1 GiB");
  if (o.samples < 1 || o.samples > kSamplesMax) return InvalidArgument("doctor: samples must be 1..1000");
  return Status::Ok();
}

// L150: "doctor.<token>", the token as a collector's (L121): host, pid and
// 64 random bits, so no two runs share a directory.
std::string ScratchName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const uint64_t now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t random = (uint64_t{std::random_device{}()} << 32 | std::random_device{}()) ^ now;
  return format::DoctorScratchName(format::CollectorToken(host, getpid(), random));
}

// What "auto" resolves to here: the same functions the tier's open calls.
void Pick(DoctorReport* r) {
  r->checksum_place = PickChecksumPlace(r->user_xattrs.verdict != Verdict::kNo);
  r->io_backend = PickBackend(r->volume);
  FsTierOptions tier;
  tier.root_dir = r->root;
  Call("", [&] {
    const bool local = LocalFilesystem(tier.root_dir);
    r->bounce_loads = BounceLoadsFor(tier, local);
    r->inline_metadata = InlineMetadataFor(tier, local);
    return 0;
  });
  r->use_o_direct = r->o_direct.verdict != Verdict::kNo;  // as the tier: only a refusal turns it off
}

// The probes in order; each later one needs what the earlier made (a file
// named "block" for link and atime).
void RunProbes(const DoctorOptions& o, Scratch* s, DoctorReport* r) {
  if (!CheckLatencies(o.samples, s, r)) return;
  CheckRenameReplaces(s, r);
  if (r->rename.verdict != Verdict::kYes || r->writable.verdict != Verdict::kYes) return;
  CheckLink(s, r);
  CheckUserXattrs(s, r);
  CheckDirectIo(s, r);
  CheckAtime(s, r);
  CheckThroughput(o.io_bytes, s, r);
}

Result<DoctorReport> RunDoctor(const DoctorOptions& o, const std::string& scratch_name) {
  DoctorReport r;
  r.root = o.root;
  Scratch s;
  s.root_fd = Call("", [&] { return open(o.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (s.root_fd < 0) return ErrnoToStatus(errno, "doctor: open " + o.root);
  Result<VolumeKind> kind = ErrnoToStatus(ECANCELED, "statfs " + o.root);
  Call("", [&] {
    kind = ClassifyVolume(o.root);
    return 0;
  });
  if (!kind.ok()) {
    close(s.root_fd);
    return kind.status();
  }
  r.volume = *kind;
  OpenScratch(scratch_name, &s, &r);
  r.scratch = JoinRoot(o.root, s.rel);
  if (r.writable.verdict == Verdict::kYes) RunProbes(o, &s, &r);
  RemoveScratch(&s, &r);
  Call("", [&] { return close(s.root_fd); });
  Pick(&r);
  AddAdvice(&r);
  return r;
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kYes: return "yes";
    case Verdict::kNo: return "no";
    case Verdict::kUnknown: return "unknown";
    case Verdict::kNotProbed: return "not_probed";
  }
  return "?";
}

Result<DoctorReport> Doctor(const DoctorOptions& options) {
  KVTIER_RETURN_IF_ERROR(Validate(options));
  const std::string scratch_name = ScratchName();
  Result<DoctorReport> r = RunWatchedFor<DoctorReport>(options.io_timeout_ms, options.root,
                                                       [options, scratch_name] { return RunDoctor(options, scratch_name); });
  if (!r.ok() && r.status().code() == StatusCode::kTimedOut) {
    const std::string scratch = JoinRoot(options.root, std::string(format::kMetaDirName) + "/" + scratch_name);
    return Status(StatusCode::kTimedOut, r.status().message() + "; doctor's scratch directory " + scratch +
                                             " may be left behind: remove it once the mount answers");
  }
  return r;
}

}  // namespace kvtier::internal
