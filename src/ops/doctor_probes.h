// The probes of `kvtier doctor` (ops/doctor.h), each on the private scratch
// directory. Every call goes through Call(), so the watch of RunWatched sees
// it and an abandoned run makes no further call.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "ops/doctor.h"

namespace kvtier::internal {

// The scratch directory: fds, its path relative to the root (what the watch
// names), and every name made in it, so the clean-up removes just those.
struct Scratch {
  int root_fd = -1;
  int meta_fd = -1;
  int dir_fd = -1;
  std::string rel;         // ".kvtier/doctor.<token>"
  bool made_meta = false;  // .kvtier was created by this run
  std::set<std::string> names;
  std::string Rel(const std::string& name) const { return rel + "/" + name; }
};

// Runs `call` as one watched file-system call on `rel` (relative to the
// root); -1 with errno ECANCELED once the run was abandoned.
int Call(const std::string& rel, const std::function<int()>& call);
// strerrorname_np, or the number.
std::string ErrnoName(int err);

// Creates .kvtier (if absent) and the scratch directory in it; a volume that
// refuses is a finding (report->writable), not an error.
void OpenScratch(const std::string& scratch_name, Scratch* s, DoctorReport* report);
// Removes what OpenScratch and the probes made; sets scratch_removed, and a
// warning naming what could not be removed.
void RemoveScratch(Scratch* s, DoctorReport* report);

// create / stat / rename latencies; false (report->writable or rename set to
// no) where the volume refuses the call.
bool CheckLatencies(int samples, Scratch* s, DoctorReport* report);
void CheckRenameReplaces(Scratch* s, DoctorReport* report);
void CheckLink(Scratch* s, DoctorReport* report);
void CheckUserXattrs(Scratch* s, DoctorReport* report);
void CheckDirectIo(Scratch* s, DoctorReport* report);
void CheckAtime(Scratch* s, DoctorReport* report);
void CheckThroughput(uint64_t bytes, Scratch* s, DoctorReport* report);

}  // namespace kvtier::internal
