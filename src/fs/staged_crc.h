// Checksums computed and checked outside the fs tier: where a store's rows
// are staged from a GPU, the copy already computes each row's CRC32C on the
// device (staging/stager.h, CopyChecksums), and a load is checked on the
// device after its host-to-device copy. The fs tier then neither computes
// nor checks a CRC on the CPU, yet the files are the same bytes: the CRC
// given to a store goes into the xattr or the trailer exactly as its own
// would (FORMAT.md L60, L130, L131), and a load hands back, unchecked, the
// CRC the block carries, with the identity of the file it read, so the
// caller can remove the file if the check after the copy fails (L67, L69).
//
// Internal to kvtier (TieredStore's fs tiers): the public FsTier is
// unchanged. A single-root, unsealed tier implements it; sealed namespaces
// keep their own check (the GCM tag, L169), and a tier that does not
// implement it is driven through the public API (its CPU checks).
#pragma once

#include <cstdint>
#include <span>

#include "kvtier/fs_tier.h"

namespace kvtier::internal {

// What an unchecked load read: the block's CRC32C (when it carries one and
// checksum_blocks is on) and the identity of the file, to remove it only if
// the path still names that file when the caller's check fails (L69).
struct LoadedBlock {
  bool has_crc = false;
  uint32_t crc = 0;
  uint64_t ino = 0, size = 0;
  uint32_t dev_major = 0, dev_minor = 0;
  int64_t mtime_s = 0;
  uint32_t mtime_ns = 0;
  bool SameFile(const LoadedBlock& o) const {
    return ino == o.ino && dev_major == o.dev_major && dev_minor == o.dev_minor && size == o.size &&
           mtime_s == o.mtime_s && mtime_ns == o.mtime_ns;
  }
};

class StagedCrcTier {
 public:
  // SubmitStore, with crcs[i] the CRC32C of rows[i] (computed by its copy):
  // written where the tier's own would go, none computed here.
  // kInvalidArgument as SubmitStore, or when crcs.size() != keys.size().
  Result<uint64_t> SubmitStoreWithCrcs(std::span<const OffloadKey> keys, std::span<const std::span<const uint8_t>> rows,
                                       std::span<const uint32_t> crcs,
                                       std::span<const std::vector<BlockHash>> block_hashes = {}) {
    if (crcs.size() != keys.size()) return InvalidArgument("fs tier: one CRC per key is required");
    return StoreWithCrcs(keys, rows, crcs, block_hashes);
  }
  // SubmitLoad without the CRC check: a kOk key's row holds the file's row
  // bytes and out[i] the CRC the block carries (has_crc false: none, or
  // checksum_blocks off) and the file's identity. Everything else (size,
  // trailer record, L65, L66, L134) is checked as SubmitLoad does. `out`
  // must stay valid until the job is polled.
  // kInvalidArgument as SubmitLoad, or when out.size() != keys.size().
  Result<uint64_t> SubmitLoadUnchecked(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows,
                                       std::span<LoadedBlock> out) {
    if (out.size() != keys.size()) return InvalidArgument("fs tier: one LoadedBlock per key is required");
    return LoadUnchecked(keys, rows, out);
  }
  // The blocks of `keys`, whose rows failed the caller's check, read as
  // read[i] says: each file is removed if its path still names that file
  // (L69), and each key's outcome is kCorrupt, counted as a corrupt load
  // (FsTierMetrics::rows_corrupt). kInvalidArgument: read.size() != keys.size().
  Result<uint64_t> SubmitRemoveCorrupt(std::span<const OffloadKey> keys, std::span<const LoadedBlock> read) {
    if (read.size() != keys.size()) return InvalidArgument("fs tier: one LoadedBlock per key is required");
    return RemoveCorrupt(keys, read);
  }

 protected:
  ~StagedCrcTier() = default;
  // The same, the counts checked.
  virtual Result<uint64_t> StoreWithCrcs(std::span<const OffloadKey> keys,
                                         std::span<const std::span<const uint8_t>> rows,
                                         std::span<const uint32_t> crcs,
                                         std::span<const std::vector<BlockHash>> block_hashes) = 0;
  virtual Result<uint64_t> LoadUnchecked(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows,
                                         std::span<LoadedBlock> out) = 0;
  virtual Result<uint64_t> RemoveCorrupt(std::span<const OffloadKey> keys, std::span<const LoadedBlock> read) = 0;
};

}  // namespace kvtier::internal
