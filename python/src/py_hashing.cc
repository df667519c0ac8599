// kvtier's vLLM hashing and namespace layout for Python: token lists -> block
// hashes -> chunk keys -> block file paths, the namespace digest and the exact
// config.json bytes. Everything is computed by the C++ library.
#include <pybind11/stl.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "kvtier/layout.h"
#include "py_common.h"

namespace kvtier::py {
namespace {

std::optional<std::string_view> EnvHashSeed() {
  const char* seed = std::getenv("PYTHONHASHSEED");
  return seed == nullptr ? std::nullopt : std::optional<std::string_view>(seed);
}

pb::bytes HashBytes(const BlockHash& h) {
  return pb::bytes(reinterpret_cast<const char*>(h.bytes().data()), h.size());
}

BlockHash NoneHashFor(HashAlgo algo, const std::optional<std::string>& seed) {
  if (seed) return ComputeNoneHash(algo, *seed);
  return ComputeNoneHash(algo, ResolveNoneHashSeed(algo, EnvHashSeed()).seed);
}

std::vector<MmFeature> MmFeatures(const std::vector<std::tuple<std::string, int64_t, int64_t>>& items) {
  std::vector<MmFeature> out;
  for (const auto& [id, offset, length] : items) out.push_back({id, offset, length});
  return out;
}

pb::list BlockHashes(const std::vector<int64_t>& tokens, const std::string& algo_name, uint32_t block_size,
                     const std::optional<std::string>& seed, const std::optional<std::string>& lora_name,
                     const std::optional<std::string>& cache_salt,
                     const std::vector<std::tuple<std::string, int64_t, int64_t>>& mm_features) {
  const HashAlgo algo = Unwrap(ParseHashAlgo(algo_name));
  const BlockHasher hasher = Unwrap(BlockHasher::Create(algo, NoneHashFor(algo, seed), block_size));
  RequestExtras extras;
  extras.lora_name = lora_name;
  extras.cache_salt = cache_salt;
  extras.mm_features = MmFeatures(mm_features);
  std::vector<BlockHash> hashes;
  ThrowIfError(WithoutGil([&] { return hasher.AppendBlockHashes(tokens, extras, &hashes); }));
  pb::list out;
  for (const BlockHash& h : hashes) out.append(HashBytes(h));
  return out;
}

pb::list ChunkKeys(const std::vector<std::string>& block_hashes, uint32_t tokens_per_block,
                   uint32_t blocks_per_chunk, uint32_t tokens_per_hash, uint32_t group_idx) {
  const uint32_t per_chunk = Unwrap(HashesPerChunk(tokens_per_block, blocks_per_chunk, tokens_per_hash));
  std::vector<BlockHash> hashes;
  for (const std::string& b : block_hashes) {
    hashes.push_back(Unwrap(BlockHash::FromBytes({reinterpret_cast<const uint8_t*>(b.data()), b.size()})));
  }
  pb::list out;
  for (const OffloadKey& k : ChunkOffloadKeys(hashes, per_chunk, group_idx)) out.append(KeyToBytes(k));
  return out;
}

std::vector<KvCacheGroupSpec> Groups(const pb::object& groups) {
  std::vector<KvCacheGroupSpec> out;
  if (groups.is_none()) return out;
  for (pb::handle g : groups) {
    KvCacheGroupSpec spec;
    spec.tokens_per_block = g["tokens_per_block"].cast<int64_t>();
    spec.layer_names = g["layer_names"].cast<std::vector<std::string>>();
    out.push_back(std::move(spec));
  }
  return out;
}

Namespace MakeNamespace(const std::string& model_name, int64_t tokens_per_hash, int64_t blocks_per_file,
                        int64_t tp_size, int64_t pp_size, int64_t pcp_size, int64_t dcp_size, int64_t rank,
                        const std::string& dtype, const pb::object& kv_cache_groups,
                        const std::string& inference_engine, bool parallel_agnostic, bool replicated_layout,
                        const std::optional<std::string>& canonical_format,
                        const std::optional<std::string>& storage_format) {
  NamespaceSpec s;
  s.model_name = model_name;
  s.tokens_per_hash = tokens_per_hash;
  s.blocks_per_file = blocks_per_file;
  s.tp_size = tp_size;
  s.pp_size = pp_size;
  s.pcp_size = pcp_size;
  s.dcp_size = dcp_size;
  s.rank = rank;
  s.dtype = dtype;
  s.kv_cache_groups = Groups(kv_cache_groups);
  s.inference_engine = inference_engine;
  s.parallel_agnostic = parallel_agnostic;
  s.replicated_layout = replicated_layout;
  s.canonical_format = canonical_format;
  s.storage_format = storage_format;
  return Unwrap(Namespace::Create(std::move(s)));
}

void BindNamespace(pb::module_& m) {
  pb::class_<Namespace>(m, "Namespace", "A vLLM fs-tier namespace: directory, digest, config.json, block paths.")
      .def(pb::init(&MakeNamespace), pb::arg("model_name"), pb::kw_only(), pb::arg("tokens_per_hash") = 16,
           pb::arg("blocks_per_file") = 1, pb::arg("tp_size") = 1, pb::arg("pp_size") = 1,
           pb::arg("pcp_size") = 1, pb::arg("dcp_size") = 1, pb::arg("rank") = 0,
           pb::arg("dtype") = "bfloat16", pb::arg("kv_cache_groups") = pb::none(),
           pb::arg("inference_engine") = "vllm", pb::arg("parallel_agnostic") = true,
           pb::arg("replicated_layout") = false, pb::arg("canonical_format") = pb::none(),
           pb::arg("storage_format") = pb::none())
      .def_property_readonly("digest", &Namespace::digest)
      .def_property_readonly("dir_name", &Namespace::dir_name)
      .def_property_readonly("block_dir_name", &Namespace::block_dir_name)
      .def_property_readonly("canonical_json", &Namespace::canonical_json)
      .def_property_readonly("config_json", &Namespace::config_json)
      .def_property_readonly("config_path", &Namespace::ConfigRelPath)
      .def_property_readonly("rank", [](const Namespace& ns) { return ns.spec().rank; })
      .def_property_readonly("blocks_per_file", [](const Namespace& ns) { return ns.spec().blocks_per_file; })
      .def_property_readonly("tokens_per_hash", [](const Namespace& ns) { return ns.spec().tokens_per_hash; })
      .def("block_path", [](const Namespace& ns, pb::bytes key) { return ns.BlockRelPath(KeyFromBytes(key)); },
           pb::arg("key"), "The block file of `key`, relative to the root.")
      .def("__repr__", [](const Namespace& ns) { return "<kvtier.Namespace " + ns.dir_name() + ">"; });
}

}  // namespace

void BindHashing(pb::module_& m) {
  m.def("block_hashes", &BlockHashes, pb::arg("tokens"), pb::kw_only(), pb::arg("algo") = "sha256",
        pb::arg("block_size") = 16, pb::arg("seed") = pb::none(), pb::arg("lora_name") = pb::none(),
        pb::arg("cache_salt") = pb::none(),
        pb::arg("mm_features") = std::vector<std::tuple<std::string, int64_t, int64_t>>{},
        "vLLM's chained block hashes (bytes) of every full block of `tokens`.");
  m.def("none_hash",
        [](const std::string& algo, const std::optional<std::string>& seed) {
          return HashBytes(NoneHashFor(Unwrap(ParseHashAlgo(algo)), seed));
        },
        pb::arg("algo") = "sha256", pb::arg("seed") = pb::none(),
        "NONE_HASH: the hash of the seed ($PYTHONHASHSEED or vLLM's default when seed is None).");
  m.def("chunk_keys", &ChunkKeys, pb::arg("block_hashes"), pb::kw_only(), pb::arg("tokens_per_block") = 16,
        pb::arg("blocks_per_chunk") = 1, pb::arg("tokens_per_hash") = 16, pb::arg("group_idx") = 0,
        "vLLM's offload keys, one per complete chunk (its last block hash + group index).");
  m.def("make_key", [](pb::bytes block_hash, uint32_t group_idx) {
        std::string h = block_hash;
        return KeyToBytes({Unwrap(BlockHash::FromBytes({reinterpret_cast<const uint8_t*>(h.data()), h.size()})),
                           group_idx});
      }, pb::arg("block_hash"), pb::arg("group_idx") = 0, "vLLM's OffloadKey: block hash + 4-byte big-endian group index.");
  BindNamespace(m);
}

}  // namespace kvtier::py
