// The per-block state machines of the fs tier: store (FORMAT.md L54-L61),
// load (L64-L69) and lookup (L70). Each issues one IoRequest at a time to
// the scheduler and ends with a KeyResult.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "io/scheduler.h"
#include "kvtier/fs_tier.h"

namespace kvtier::internal {

// Engine-wide settings and probes the ops share.
struct TierShared {
  uint64_t row_bytes = 0;
  bool o_direct = false;
  Durability durability = Durability::kNone;
  uint32_t io_timeout_ms = 0;
  std::atomic<bool> xattrs_ok{true};  // cleared (and logged once) on EOPNOTSUPP
  std::atomic<uint64_t> tmp_counter{0};
  uint64_t tmp_base = 0;  // random; temp names are <dest>_<(base + n) mod 2^63>.tmp
  std::atomic<uint64_t> checksum_ns{0};  // time spent computing CRC32C (both directions)
};

// Crc32c(row), its time added to shared->checksum_ns: integrity costs one
// pass over the row, and operators (and the benchmark) see how much of the
// tier's CPU that is.
uint32_t TimedCrc32c(TierShared* shared, std::span<const uint8_t> row);

class FsBlockOp : public BlockOp {
 public:
  KeyResult result;
  uint64_t start_ns = 0;
  uint64_t bytes = 0;   // bytes moved when kOk
  void* owner = nullptr;  // the job
  size_t index = 0;       // key index in the job
};

// The block directory path pieces of a key: "<root>/<ns>_r<rank>", then
// "<hhh>" and "<hh>_g<g>" below it, and the file name.
struct BlockPathParts {
  std::string block_dir, shard1, shard2, file;
};

std::unique_ptr<FsBlockOp> MakeStoreOp(TierShared* shared, BlockPathParts path,
                                       std::span<const uint8_t> row);
std::unique_ptr<FsBlockOp> MakeLoadOp(TierShared* shared, std::string path, std::span<uint8_t> row);
std::unique_ptr<FsBlockOp> MakeLookupOp(TierShared* shared, std::string path);

// True when O_DIRECT may be used for this buffer (page-aligned address and length).
bool DirectIoAligned(const void* buf, uint64_t len);

}  // namespace kvtier::internal
