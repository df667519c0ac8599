// A power-loss rig for machines without device-mapper (power_loss_test, C8-C10
// of CRASH_INVARIANTS.md). Everything lives in a mount namespace private to
// the test process:
//
//   tmpfs (bounded)   holds outer.img
//   outer.img  -> loop device -> XFS with reflink     ("outer")
//   outer/inner<i>.img -> loop device -> ext4 or XFS  ("inner" i: the workload runs here)
//
// CutPower(i) clones inner<i>.img with FICLONE (what `cp --reflink=always`
// does). XFS takes the image's I/O lock for the clone, so it is atomic with
// respect to the loop device's writes: the clone holds exactly what the inner
// filesystem had handed to its device at that instant. Its page cache, and
// whatever was never written back, is not in the clone, as after a power cut.
// MountCrash() then attaches the clone to another loop device and mounts it,
// which replays the journal, as the next boot would.
//
// What it does not model: a device that loses or reorders writes it had
// already completed (a volatile disk cache that ignores flushes).
//
// Loop devices are attached with LO_FLAGS_AUTOCLEAR and every mount is in the
// private namespace, so the kernel detaches and unmounts all of it when the
// test process dies, even by SIGKILL; the destructor does the same in order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::powerloss {

enum class InnerFs { kExt4, kXfs };
const char* InnerFsName(InnerFs type);

class Rig {
 public:
  // Builds the namespace, the tmpfs and the outer XFS under `dir` (an empty
  // directory). kUnavailable, with one line saying why, where this machine
  // cannot (not root, no loop devices, no mkfs.xfs, no reflink); any other
  // error means the rig itself is broken.
  static Result<std::unique_ptr<Rig>> Create(const std::filesystem::path& dir);
  ~Rig();  // unmounts everything; the loop devices detach themselves
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  // Makes an inner filesystem of `bytes` (a sparse image) and mounts it;
  // returns its index. Its mount point is InnerMount(index).
  Result<size_t> AddInner(InnerFs type, uint64_t bytes);
  const std::filesystem::path& InnerMount(size_t index) const { return inners_[index].mount; }
  InnerFs InnerType(size_t index) const { return inners_[index].type; }

  // Freezes and thaws inner `index`: everything written so far reaches its
  // image and the journal is checkpointed, as a long-running system's would
  // be. Without it the XFS log only grows, and so does the replay of every
  // later crash image (0.5 s after some 50 rounds).
  Status Checkpoint(size_t index);

  // The power cut: clones inner `index`'s image as it is at this instant.
  Status CutPower(size_t index);
  // Mounts the last clone (journal replay); returns the mount point.
  Result<std::filesystem::path> MountCrash();
  // Unmounts the clone and deletes it.
  Status DropCrash();

 private:
  struct Inner {
    InnerFs type;
    std::filesystem::path image, mount;
  };
  enum class Make { kNothing, kFs, kFsWithReflink };
  explicit Rig(std::filesystem::path dir) : dir_(std::move(dir)) {}
  Status Build();
  Status MountImage(const std::filesystem::path& image, const std::filesystem::path& at,
                    const char* fs_type, Make make, const std::string& options);
  Status Unmount(const std::filesystem::path& at);

  std::filesystem::path dir_;
  std::vector<std::filesystem::path> mounted_;  // in mount order
  std::vector<Inner> inners_;
  InnerFs crash_type_ = InnerFs::kExt4;
  bool crash_cloned_ = false;
};

}  // namespace kvtier::powerloss
