// Namespace: vLLM FileMapper's fields, digest, directory names and paths.
#include <string>

#include "format/layout_names.h"
#include "format/seal_record.h"
#include "kvtier/layout.h"
#include "layout/py_json.h"

namespace kvtier {
namespace {

Status CheckText(std::string_view what, std::string_view text) {
  if (text.find('\0') != std::string_view::npos) {
    return InvalidArgument(std::string(what) + " must not contain NUL characters");
  }
  std::string scratch;
  Status s = internal::PyJsonEscape(text, &scratch);
  return s.ok() ? s : s.WithContext(what);
}

Status Validate(const NamespaceSpec& spec) {
  if (spec.model_name.empty()) return InvalidArgument("model_name must not be empty");
  KVTIER_RETURN_IF_ERROR(CheckText("model_name", spec.model_name));
  KVTIER_RETURN_IF_ERROR(CheckText("dtype", spec.dtype));
  KVTIER_RETURN_IF_ERROR(CheckText("inference_engine", spec.inference_engine));
  const std::pair<const char*, int64_t> sizes[] = {
      {"tokens_per_hash", spec.tokens_per_hash}, {"blocks_per_file", spec.blocks_per_file},
      {"tp_size", spec.tp_size}, {"pp_size", spec.pp_size},
      {"pcp_size", spec.pcp_size}, {"dcp_size", spec.dcp_size}};
  for (const auto& [name, value] : sizes) {
    if (value < 1) return InvalidArgument(std::string(name) + " must be >= 1, got " + std::to_string(value));
  }
  if (spec.rank < 0) return InvalidArgument("rank must be >= 0, got " + std::to_string(spec.rank));
  for (size_t g = 0; g < spec.kv_cache_groups.size(); ++g) {
    const auto& group = spec.kv_cache_groups[g];
    std::string where = "kv_cache_groups[" + std::to_string(g) + "]";
    if (group.tokens_per_block < 1) return InvalidArgument(where + ".tokens_per_block must be >= 1");
    for (const auto& layer : group.layer_names) KVTIER_RETURN_IF_ERROR(CheckText(where, layer));
  }
  if (spec.canonical_format) KVTIER_RETURN_IF_ERROR(CheckText("canonical_format", *spec.canonical_format));
  if (spec.storage_format) KVTIER_RETURN_IF_ERROR(CheckText("storage_format", *spec.storage_format));
  return Status::Ok();
}

// The fields dict exactly as FileMapper.__init__ builds it (FORMAT.md L11-L18).
nlohmann::json Fields(const NamespaceSpec& spec) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : spec.kv_cache_groups) {
    groups.push_back({{"tokens_per_block", g.tokens_per_block}, {"layer_names", g.layer_names}});
  }
  nlohmann::json fields = {
      {"model_name", spec.model_name}, {"tokens_per_hash", spec.tokens_per_hash},
      {"blocks_per_file", spec.blocks_per_file}, {"tp_size", spec.tp_size},
      {"pp_size", spec.pp_size}, {"pcp_size", spec.pcp_size},
      {"dcp_size", spec.dcp_size}, {"dtype", spec.dtype},
      {"kv_cache_groups", groups}, {"inference_engine", spec.inference_engine}};
  if (!spec.parallel_agnostic) fields["parallel_agnostic"] = false;
  if (spec.replicated_layout) fields["replicated_layout"] = true;
  if (spec.canonical_format) fields["canonical_format"] = *spec.canonical_format;
  if (spec.storage_format) fields["storage_format"] = *spec.storage_format;
  return fields;
}

}  // namespace

Result<Namespace> Namespace::Create(NamespaceSpec spec) {
  KVTIER_RETURN_IF_ERROR(Validate(spec));
  if (spec.parallel_agnostic) {
    spec.tp_size = spec.pp_size = spec.pcp_size = spec.dcp_size = 1;
    spec.rank = 0;
  }
  Namespace ns;
  nlohmann::json fields = Fields(spec);
  KVTIER_ASSIGN_OR_RETURN(ns.canonical_json_, internal::PyJsonDumpsCompact(fields));
  KVTIER_ASSIGN_OR_RETURN(ns.config_json_, internal::PyJsonDumpsIndent2(fields));
  ns.digest_ = format::NamespaceDigestOf(ns.canonical_json_);  // L22
  ns.dir_name_ = format::SafeModelName(spec.model_name) + "_" + ns.digest_;
  ns.spec_ = std::move(spec);
  return ns;
}

Result<Namespace> Namespace::Sealed(std::string_view key_id_hex) const {
  uint8_t id[format::kSealKeyIdBytes];
  if (!format::ParseSealKeyIdHex(key_id_hex, id) || format::SealKeyIdHex(id) != key_id_hex) {
    return InvalidArgument("a seal key id is 32 lowercase hex digits");
  }
  nlohmann::json fields = nlohmann::json::parse(canonical_json_, nullptr, /*allow_exceptions=*/false);
  const std::string seal_key(format::kSealConfigKey);
  if (!fields.is_object() || fields.contains(seal_key)) return InvalidArgument("the namespace is sealed already");
  fields[seal_key] = {{"cipher", std::string(format::kSealCipherName)},
                      {"key_id", std::string(key_id_hex)},
                      {"version", format::kSealVersion}};
  Namespace ns = *this;
  KVTIER_ASSIGN_OR_RETURN(ns.canonical_json_, internal::PyJsonDumpsCompact(fields));
  KVTIER_ASSIGN_OR_RETURN(ns.config_json_, internal::PyJsonDumpsIndent2(fields));
  ns.digest_ = format::NamespaceDigestOf(ns.canonical_json_);  // L22 over L162's fields
  ns.dir_name_ = dir_name_.substr(0, dir_name_.size() - digest_.size()) + ns.digest_;
  return ns;
}

std::string Namespace::block_dir_name() const {
  return format::BlockDirName(dir_name_, spec_.rank);
}

// FORMAT.md L6-L8: <dir>_r<rank>/<hex[0:3]>/<hex[3:5]>_g<group>/<hex>.bin.
std::string Namespace::BlockRelPath(const OffloadKey& key) const {
  return block_dir_name() + "/" + format::BlockRelPath(key.hash.Hex(), key.group_idx);
}

std::string JoinRoot(std::string_view root_dir, std::string_view relpath) {
  std::string out(root_dir);
  out += '/';
  out += relpath;
  return out;
}

}  // namespace kvtier
