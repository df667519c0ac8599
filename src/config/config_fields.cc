// Rows of the fs tier key table (config.cc) that need more than a generic
// parser: root_dir, path_sharding, max_bytes and kv_events_config.
#include <string>
#include <utility>

#include "config/config_json.h"
#include "config/config_keys.h"

namespace kvtier::internal {

// PATH_MAX on Linux, including the terminating NUL.
constexpr size_t kRootDirBytesMax = 4096;

Status ParseRootDir(const Json& value, const std::string& path, FsTierOptions& out) {
  std::string dir;
  KVTIER_RETURN_IF_ERROR(ReadString(value, path, &dir));
  if (dir.empty()) return KeyError(path, "expected a non-empty directory path, got \"\"");
  if (dir.find('\0') != std::string::npos) return KeyError(path, "must not contain a NUL character");
  if (dir.size() >= kRootDirBytesMax) {
    return KeyError(path, "must be shorter than " + std::to_string(kRootDirBytesMax) +
                              " bytes (PATH_MAX), got " + std::to_string(dir.size()));
  }
  out.root_dir = std::move(dir);
  return Status::Ok();
}

// null means one root, as vLLM's path_sharding=None (PR #53133).
Status ParsePathSharding(const Json& value, const std::string& path, FsTierOptions& out) {
  if (value.is_null()) {
    out.path_sharding = PathSharding::kNone;
    return Status::Ok();
  }
  if (value.is_string() && value.get_ref<const std::string&>() == "by_block_hash") {
    out.path_sharding = PathSharding::kByBlockHash;
    return Status::Ok();
  }
  return KeyError(path, "expected \"by_block_hash\" or null, got " + DescribeValue(value));
}

void EmitPathSharding(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (out.path_sharding == PathSharding::kByBlockHash) obj[std::string(name)] = "by_block_hash";
}

// vLLM PR #54327: null (or absent) is no budget; 0 is refused rather than
// read as "store nothing" or "unbounded".
Status ParseMaxBytes(const Json& value, const std::string& path, FsTierOptions& out) {
  if (value.is_null()) {
    out.capacity_bytes_max.reset();
    return Status::Ok();
  }
  uint64_t bytes = 0;
  Status s = ReadInteger(value, path, IntRule::kPositive, &bytes);
  if (!s.ok()) return Status(s.code(), s.message() + " (bytes; null or absent: unbounded)");
  out.capacity_bytes_max = bytes;
  return Status::Ok();
}

void EmitMaxBytes(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (out.capacity_bytes_max.has_value()) obj[std::string(name)] = *out.capacity_bytes_max;
}

Status ParseTierKvEvents(const Json& value, const std::string& path, FsTierOptions& out) {
  return ParseKvEventsConfig(value, path, out.kv_events_config);
}

void EmitTierKvEvents(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (!(out.kv_events_config == KvEventsConfig{})) obj[std::string(name)] = EmitKvEventsConfig(out.kv_events_config);
}

}  // namespace kvtier::internal
