// The vLLM fs-tier namespace: which directory a model configuration's blocks
// live in, the exact bytes of its config.json, and each block file's path.
//
// Rules (layout-spec/FORMAT.md): the namespace fields are serialized as
// Python's json.dumps(fields, sort_keys=True, separators=(",", ":")) with
// ASCII escaping, hashed with SHA-256, and the first 12 hex characters form
// the digest. The namespace directory is "<model with '/' -> '_'>_<digest>",
// blocks live in its sibling "<dir>_r<rank>", and a block's path is
// "<hhh>/<hh>_g<group>/<hash hex>.bin" below that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/hashing.h"
#include "kvtier/result.h"

namespace kvtier {

struct KvCacheGroupSpec {
  int64_t tokens_per_block = 16;         // block_size x dcp for attention groups
  std::vector<std::string> layer_names;  // in group order
};

// The arguments of vLLM's FileMapper. Defaults describe a dense single-group
// model on one GPU.
struct NamespaceSpec {
  std::string model_name;      // model_config.model, verbatim (required, UTF-8)
  int64_t tokens_per_hash = 16;
  int64_t blocks_per_file = 1;  // blocks_per_chunk
  int64_t tp_size = 1;
  int64_t pp_size = 1;
  int64_t pcp_size = 1;
  int64_t dcp_size = 1;
  int64_t rank = 0;
  std::string dtype = "bfloat16";  // KV cache dtype, without a "torch." prefix
  std::vector<KvCacheGroupSpec> kv_cache_groups;
  std::string inference_engine = "vllm";
  // The *effective* parallel-agnostic flag. When true, tp/pp/pcp/dcp are
  // written as 1 and rank is 0; when false the key "parallel_agnostic": false
  // is part of the fields.
  bool parallel_agnostic = true;
  bool replicated_layout = false;              // written only when true
  std::optional<std::string> canonical_format;  // written only when set
  std::optional<std::string> storage_format;    // written only when set (newer vLLM)
};

class KVTIER_API Namespace {
 public:
  // kInvalidArgument for an empty model name, a string that is not UTF-8 or
  // holds NUL, or a size/rank out of range (sizes >= 1, rank >= 0).
  static Result<Namespace> Create(NamespaceSpec spec);

  // The spec after the parallel-agnostic collapse.
  const NamespaceSpec& spec() const { return spec_; }
  const std::string& digest() const { return digest_; }      // 12 lowercase hex chars
  const std::string& dir_name() const { return dir_name_; }  // "<model>_<digest>"
  std::string block_dir_name() const;                         // "<dir>_r<rank>"
  // The exact bytes that are hashed, and the exact bytes of config.json.
  const std::string& canonical_json() const { return canonical_json_; }
  const std::string& config_json() const { return config_json_; }

  // "<dir>_r<rank>/<hhh>/<hh>_g<group>/<hex>.bin", relative to root_dir.
  std::string BlockRelPath(const OffloadKey& key) const;
  // "<dir>/config.json", relative to root_dir.
  std::string ConfigRelPath() const { return dir_name_ + "/config.json"; }
  // The namespace of the blocks sealed with the key whose id (32 lowercase
  // hex digits) is `key_id_hex`: these fields plus "kvtier_seal" (FORMAT.md
  // L162), so its own digest, directories and config.json.
  // kInvalidArgument for another id, or a namespace that is sealed already.
  Result<Namespace> Sealed(std::string_view key_id_hex) const;

 private:
  friend class SglangNamespace;  // builds one from SGLang's fields (sglang.h)
  Namespace() = default;
  NamespaceSpec spec_;
  std::string digest_;
  std::string dir_name_;
  std::string canonical_json_;
  std::string config_json_;
};

// root_dir + "/" + relpath, with root_dir used verbatim as vLLM does (a
// trailing '/' gives "//", which POSIX treats as one separator).
KVTIER_API std::string JoinRoot(std::string_view root_dir, std::string_view relpath);

}  // namespace kvtier
