// RunHashQuery: the shared core of `kvtier hash` in both modes.
#include <sys/stat.h>

#include "cli/hash_command.h"
#include "io/io_watch.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace kvtier::internal {
namespace {

Result<uint32_t> TokensPerBlock(const HashQuery& q) {
  if (q.tokens_per_block != 0) return q.tokens_per_block;
  if (!q.ns || q.ns->kv_cache_groups.empty()) return q.hash_block_size;
  if (q.group_idx >= q.ns->kv_cache_groups.size()) {
    return InvalidArgument("group_idx " + std::to_string(q.group_idx) + " but the namespace has " +
                           std::to_string(q.ns->kv_cache_groups.size()) + " KV-cache groups");
  }
  int64_t tpb = q.ns->kv_cache_groups[q.group_idx].tokens_per_block;
  if (tpb < 1 || tpb > UINT32_MAX) return InvalidArgument("tokens_per_block out of range");
  return static_cast<uint32_t>(tpb);
}

nlohmann::json ChunkJson(const OffloadKey& key, const Namespace* ns, const HashQuery& q) {
  nlohmann::json chunk = {{"offload_key_hex", key.Hex()}};
  if (!ns) return chunk;
  std::string rel = ns->BlockRelPath(key);
  chunk["relpath"] = rel;
  if (q.root_dir) {
    std::string path = JoinRoot(*q.root_dir, rel);
    struct stat st;
    chunk["path"] = path;
    IoScope io(path);  // under RunWatched (kvtier hash --root): a hung mount times out naming it
    chunk["exists"] = !io.cancelled() && ::stat(path.c_str(), &st) == 0;
  }
  return chunk;
}

// The namespace of the query's paths: its spec's, or with a seal key id
// that key's sealed namespace (FORMAT.md L162, L184).
Result<std::optional<Namespace>> QueryNamespace(const HashQuery& q) {
  if (!q.ns) return std::optional<Namespace>();
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, Namespace::Create(*q.ns));
  if (!q.seal_key_id) return std::optional<Namespace>(std::move(ns));
  KVTIER_ASSIGN_OR_RETURN(Namespace sealed, ns.Sealed(*q.seal_key_id));
  return std::optional<Namespace>(std::move(sealed));
}

}  // namespace

Result<nlohmann::json> RunHashQuery(const HashQuery& q) {
  if (q.pythonhashseed && !IsValidUtf8(*q.pythonhashseed)) {
    // Python would see surrogate escapes, not these bytes: no hash could match.
    return InvalidArgument("the PYTHONHASHSEED / --seed value is not valid UTF-8");
  }
  NoneHashSeed seed = ResolveNoneHashSeed(q.algo, q.pythonhashseed);
  BlockHash none_hash = ComputeNoneHash(q.algo, seed.seed);
  KVTIER_ASSIGN_OR_RETURN(BlockHasher hasher, BlockHasher::Create(q.algo, none_hash, q.hash_block_size));
  std::vector<BlockHash> hashes;
  BlockHashTrace trace;
  KVTIER_RETURN_IF_ERROR(hasher.AppendBlockHashes(std::span<const BigInt>(q.token_ids), q.extras,
                                                  &hashes, q.explain ? &trace : nullptr));
  nlohmann::json report = {{"algo", HashAlgoName(q.algo)},
                           {"none_hash_seed", seed.random ? nlohmann::json() : nlohmann::json(seed.seed)},
                           {"none_hash_random", seed.random},
                           {"none_hash_hex", none_hash.Hex()},
                           {"hash_block_size", q.hash_block_size},
                           {"num_tokens", q.token_ids.size()}};
  nlohmann::json& block_hex = report["block_hashes_hex"] = nlohmann::json::array();
  for (const BlockHash& h : hashes) block_hex.push_back(h.Hex());
  if (q.explain) {
    nlohmann::json& blocks = report["explain"] = nlohmann::json::array();
    for (size_t i = 0; i < hashes.size(); ++i) {
      blocks.push_back({{"extra_keys", trace.extra_keys_repr[i]},
                        {"serialized_input_hex", HexEncode(trace.serialized_inputs[i])}});
    }
  }
  KVTIER_ASSIGN_OR_RETURN(const std::optional<Namespace> ns, QueryNamespace(q));
  if (ns) {
    report["namespace_dir"] = ns->dir_name();
    report["config_json"] = ns->config_json();
  }
  KVTIER_ASSIGN_OR_RETURN(uint32_t tokens_per_block, TokensPerBlock(q));
  KVTIER_ASSIGN_OR_RETURN(uint32_t per_chunk, HashesPerChunk(tokens_per_block, q.blocks_per_chunk,
                                                             q.hash_block_size));
  report["hashes_per_chunk"] = per_chunk;
  nlohmann::json& chunks = report["chunks"] = nlohmann::json::array();
  for (const OffloadKey& key : ChunkOffloadKeys(hashes, per_chunk, q.group_idx)) {
    chunks.push_back(ChunkJson(key, ns ? &*ns : nullptr, q));
  }
  return report;
}

nlohmann::json CaseOutput(const nlohmann::json& report) {
  nlohmann::json out;
  for (const char* key : {"none_hash_hex", "block_hashes_hex", "chunks", "namespace_dir", "config_json"}) {
    if (report.contains(key)) out[key] = report[key];
  }
  return out;
}

}  // namespace kvtier::internal
