// The fs tier's seal keys (FORMAT.md L160, docs/config.md): paths and an fd
// number. No key is ever inline in the config, so nothing here can print one.
#include <string>
#include <vector>

#include "config/config_json.h"
#include "config/config_keys.h"

namespace kvtier::internal {
namespace {

Status ReadKeyPath(const Json& value, const std::string& path, std::string* out) {
  KVTIER_RETURN_IF_ERROR(ReadString(value, path, out));
  if (out->empty()) return KeyError(path, "expected the path of a key file, got \"\"");
  if (out->find('\0') != std::string::npos) return KeyError(path, "must not contain a NUL character");
  return Status::Ok();
}

}  // namespace

Status ParseSealKeyFile(const Json& value, const std::string& path, FsTierOptions& out) {
  return ReadKeyPath(value, path, &out.seal_key_file);
}

Status ParseSealKeyFd(const Json& value, const std::string& path, FsTierOptions& out) {
  return ReadInteger(value, path, IntRule::kNonNegative, &out.seal_key_fd);
}

Status ParseSealReadKeyFiles(const Json& value, const std::string& path, FsTierOptions& out) {
  if (!value.is_array()) return KeyError(path, "expected a list of key file paths, got " + DescribeValue(value));
  std::vector<std::string> files;
  for (size_t i = 0; i < value.size(); ++i) {
    std::string file;
    KVTIER_RETURN_IF_ERROR(ReadKeyPath(value[i], path + "[" + std::to_string(i) + "]", &file));
    files.push_back(std::move(file));
  }
  out.seal_read_key_files = std::move(files);
  return Status::Ok();
}

void EmitSealKeyFile(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (!out.seal_key_file.empty()) obj[std::string(name)] = out.seal_key_file;
}
void EmitSealKeyFd(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (out.seal_key_fd >= 0) obj[std::string(name)] = out.seal_key_fd;
}
void EmitSealReadKeyFiles(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (!out.seal_read_key_files.empty()) obj[std::string(name)] = out.seal_read_key_files;
}

Status ParseSealKeyGroupRead(const Json& value, const std::string& path, FsTierOptions& out) {
  return ReadBool(value, path, &out.seal_key_group_read);
}
void EmitSealKeyGroupRead(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (out.seal_key_group_read) obj[std::string(name)] = true;
}

Status CheckSealKeys(const FsTierOptions& tier, const std::string& path) {
  if (!tier.seal_key_file.empty() && tier.seal_key_fd >= 0) {
    return KeyError(JoinKeyPath(path, "seal_key_fd"), "give the key by seal_key_file or by seal_key_fd, not both");
  }
  if (!tier.seal_read_key_files.empty() && !tier.sealed()) {
    return KeyError(JoinKeyPath(path, "seal_read_key_files"),
                    "read keys (rotation) need a primary key: seal_key_file or seal_key_fd");
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
