// `kvtier doctor ROOT`: what a volume can do, and what kvtier's "auto"
// settings will do there, found in seconds by trying it.
//
// Every probe runs inside a private scratch directory, <root>/.kvtier/
// doctor.<token>/ (FORMAT.md L150), which is removed before Doctor returns;
// nothing else on the volume is created, changed or read. Each file-system
// call is watched (io/io_watch.h): one that takes longer than io_timeout_ms
// ends the run with kTimedOut naming the path, so a hung mount never hangs
// the caller.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fs/volume_kind.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct DoctorOptions {
  std::string root;                      // an existing directory: the root_dir to judge
  uint64_t io_timeout_ms = 10000;        // per call; 0: wait forever
  uint64_t io_bytes = uint64_t{4} << 20; // written, synced and read back for the throughput figures
  int samples = 8;                       // calls timed per latency figure
};

// One capability: yes, no, unknown (the probe failed for a reason that
// says nothing either way; `detail` names it), or not probed (an earlier
// probe failed first).
enum class Verdict { kYes, kNo, kUnknown, kNotProbed };
const char* VerdictName(Verdict v);  // "yes", "no", "unknown", "not_probed"

struct Probe {
  Verdict verdict = Verdict::kNotProbed;
  std::string detail;  // the errno or what was seen; "" when plain yes
};

// Wall time of `samples` calls of one kind, in microseconds.
struct CallLatency {
  int samples = 0;
  double median_us = 0;
  double max_us = 0;
};

struct DoctorReport {
  std::string root;
  std::string scratch;          // the private directory the probes ran in
  bool scratch_removed = false; // and it (with everything in it) is gone again
  VolumeKind volume;

  Probe writable;     // the scratch directory and a file in it could be created and written
  Probe user_xattrs;  // user.vllm.kv_crc32c set on a file reads back the same bytes
  Probe o_direct;     // an O_DIRECT open and a page written through it
  // Smallest alignment O_DIRECT accepted for buffer address and file offset
  // (512 or 4096 tried; 0: unknown), and what statx(STATX_DIOALIGN) says
  // (0: the filesystem does not report it).
  uint32_t o_direct_align = 0;
  uint32_t statx_dio_mem_align = 0, statx_dio_offset_align = 0;
  Probe rename;  // rename(2) over an existing name replaces it (the store's commit)
  Probe link;    // link(2) (the collector lease, L121)
  Probe atime;   // an explicit atime update (kvtier's touch on load) reads back

  CallLatency stat, create, rename_call;
  uint64_t io_bytes = 0;     // moved each way for the throughput figures
  bool io_direct = false;    // with O_DIRECT
  double write_mib_s = 0;    // write + fdatasync
  double read_mib_s = 0;

  // What "auto" picks here (fs/volume_kind.h, fs/fs_tier_internal.h).
  ChecksumPlace checksum_place = ChecksumPlace::kXattr;
  IoBackendKind io_backend = IoBackendKind::kUring;
  bool bounce_loads = false;
  bool inline_metadata = false;
  bool use_o_direct = false;

  std::vector<std::string> warnings;  // what matters for sharing this root
  std::vector<std::string> problems;  // why kvtier cannot run here (empty: it can)

  // 0: kvtier can run here; 1: it cannot (problems says why).
  int ExitCode() const { return problems.empty() ? 0 : 1; }
};

// Errors: kInvalidArgument (root empty or holding a NUL byte, io_bytes 0 or
// above 1 GiB, samples outside 1..1000); root missing or not a directory
// (ErrnoToStatus); kTimedOut naming the path where one call ran past
// io_timeout_ms (the scratch directory may then be left behind: the message
// says where). Everything the volume refuses is a finding, not an error.
Result<DoctorReport> Doctor(const DoctorOptions& options);

// The warnings and problems that follow from the filesystem's kind and the
// probes' verdicts (doctor_advice.cc); Doctor fills them through this.
void AddAdvice(DoctorReport* report);

}  // namespace kvtier::internal
