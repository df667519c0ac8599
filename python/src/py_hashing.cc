// kvtier's vLLM hashing and namespace layout for Python: token lists -> block
// hashes -> chunk keys -> block file paths, the namespace digest and the exact
// config.json bytes. Everything is computed by the C++ library.
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "kvtier/layout.h"
#include "kvtier/sglang_hash.h"
#include "py_common.h"

namespace kvtier::py {
namespace {

std::optional<std::string_view> EnvHashSeed() {
  const char* seed = std::getenv("PYTHONHASHSEED");
  return seed == nullptr ? std::nullopt : std::optional<std::string_view>(seed);
}

// A str argument. pybind11 also converts bytes to std::string, but vLLM
// hashes and names these as str: b"x" and "x" give other hashes in vLLM, so
// bytes are refused rather than silently read as UTF-8 text.
std::string Text(pb::handle value, const std::string& what) {
  Py_ssize_t n = 0;
  const char* data = PyUnicode_Check(value.ptr()) ? PyUnicode_AsUTF8AndSize(value.ptr(), &n) : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument(what + ": expected str (Unicode text), got " +
                                std::string(pb::str(pb::type::handle_of(value).attr("__name__")))));
  }
  return std::string(data, static_cast<size_t>(n));
}

std::optional<std::string> OptionalText(const pb::object& value, const std::string& what) {
  if (value.is_none()) return std::nullopt;
  return Text(value, what);
}

// A Python int (or an object with __index__, not bool) in [min, max].
int64_t IntIn(pb::handle value, const std::string& what, int64_t min, int64_t max) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    ThrowStatus(InvalidArgument(what + ": expected an int, got " +
                                std::string(pb::str(pb::type::handle_of(value).attr("__name__")))));
  }
  int overflow = 0;
  pb::object index = pb::reinterpret_steal<pb::object>(PyNumber_Index(value.ptr()));
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0 || x < min || x > max) {
    ThrowStatus(InvalidArgument(what + ": must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                                "], got " + std::string(pb::str(index))));
  }
  return x;
}

pb::bytes HashBytes(const BlockHash& h) {
  return pb::bytes(reinterpret_cast<const char*>(h.bytes().data()), h.size());
}

BlockHash NoneHashFor(HashAlgo algo, const std::optional<std::string>& seed) {
  if (seed) return ComputeNoneHash(algo, *seed);
  return ComputeNoneHash(algo, ResolveNoneHashSeed(algo, EnvHashSeed()).seed);
}

std::vector<MmFeature> MmFeatures(const std::vector<std::tuple<pb::object, int64_t, int64_t>>& items) {
  std::vector<MmFeature> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [id, offset, length] = items[i];
    out.push_back({Text(id, "mm_features[" + std::to_string(i) + "] identifier"), offset, length});
  }
  return out;
}

pb::list BlockHashes(const std::vector<int64_t>& tokens, const std::string& algo_name, uint32_t block_size,
                     const pb::object& seed, const pb::object& lora_name, const pb::object& cache_salt,
                     const std::vector<std::tuple<pb::object, int64_t, int64_t>>& mm_features) {
  const HashAlgo algo = Unwrap(ParseHashAlgo(algo_name));
  const BlockHasher hasher =
      Unwrap(BlockHasher::Create(algo, NoneHashFor(algo, OptionalText(seed, "seed")), block_size));
  RequestExtras extras;
  extras.lora_name = OptionalText(lora_name, "lora_name");
  extras.cache_salt = OptionalText(cache_salt, "cache_salt");
  extras.mm_features = MmFeatures(mm_features);
  std::vector<BlockHash> hashes;
  ThrowIfError(WithoutGil([&] { return hasher.AppendBlockHashes(tokens, extras, &hashes); }));
  pb::list out;
  for (const BlockHash& h : hashes) out.append(HashBytes(h));
  return out;
}

// Block hashes are bytes, as vLLM's BlockHash. A str is refused: taken as its
// UTF-8 encoding it would be a different hash from any vLLM computes.
BlockHash HashFromObject(pb::handle value, size_t i) {
  char* data = nullptr;
  Py_ssize_t n = 0;
  if (!PyBytes_Check(value.ptr()) || PyBytes_AsStringAndSize(value.ptr(), &data, &n) != 0) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument("block_hashes[" + std::to_string(i) + "]: expected bytes (a block hash), got " +
                                std::string(pb::str(pb::type::handle_of(value).attr("__name__")))));
  }
  return Unwrap(BlockHash::FromBytes({reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(n)}));
}

pb::list ChunkKeys(const pb::iterable& block_hashes, uint32_t tokens_per_block, uint32_t blocks_per_chunk,
                   uint32_t tokens_per_hash, uint32_t group_idx) {
  const uint32_t per_chunk = Unwrap(HashesPerChunk(tokens_per_block, blocks_per_chunk, tokens_per_hash));
  std::vector<BlockHash> hashes;
  for (pb::handle b : block_hashes) hashes.push_back(HashFromObject(b, hashes.size()));
  pb::list out;
  for (const OffloadKey& k : ChunkOffloadKeys(hashes, per_chunk, group_idx)) out.append(KeyToBytes(k));
  return out;
}

bool IsSequence(pb::handle value) {
  return PyList_Check(value.ptr()) || PyTuple_Check(value.ptr());
}

// {"tokens_per_block": int, "layer_names": [str, ...]} at `what`, nothing else.
KvCacheGroupSpec Group(pb::handle g, const std::string& what) {
  if (!PyDict_Check(g.ptr())) {
    ThrowStatus(InvalidArgument(what + ": expected a dict with tokens_per_block and layer_names"));
  }
  const pb::dict d = pb::reinterpret_borrow<pb::dict>(g);
  for (auto [key, value] : d) {
    const bool known = PyUnicode_Check(key.ptr()) &&
                       (pb::str(key).cast<std::string>() == "tokens_per_block" ||
                        pb::str(key).cast<std::string>() == "layer_names");
    if (!known) ThrowStatus(InvalidArgument(what + ": unknown key " + std::string(pb::str(pb::repr(key))).substr(0, 64)));
  }
  for (const char* key : {"tokens_per_block", "layer_names"}) {
    if (!d.contains(key)) ThrowStatus(InvalidArgument(what + "." + key + ": missing"));
  }
  KvCacheGroupSpec spec;
  spec.tokens_per_block = IntIn(d["tokens_per_block"], what + ".tokens_per_block", 1, INT64_MAX);
  const pb::handle names = d["layer_names"];
  if (!IsSequence(names)) ThrowStatus(InvalidArgument(what + ".layer_names: expected a list of str"));
  for (pb::handle name : names) {
    spec.layer_names.push_back(Text(name, what + ".layer_names[" + std::to_string(spec.layer_names.size()) + "]"));
  }
  return spec;
}

// vLLM's kv_cache_groups as a list (or tuple) of group dicts; None: none.
std::vector<KvCacheGroupSpec> Groups(const pb::object& groups) {
  std::vector<KvCacheGroupSpec> out;
  if (groups.is_none()) return out;
  if (!IsSequence(groups)) ThrowStatus(InvalidArgument("kv_cache_groups: expected a list of group dicts"));
  for (pb::handle g : groups) out.push_back(Group(g, "kv_cache_groups[" + std::to_string(out.size()) + "]"));
  return out;
}

Namespace MakeNamespace(const pb::object& model_name, int64_t tokens_per_hash, int64_t blocks_per_file,
                        int64_t tp_size, int64_t pp_size, int64_t pcp_size, int64_t dcp_size, int64_t rank,
                        const pb::object& dtype, const pb::object& kv_cache_groups,
                        const pb::object& inference_engine, bool parallel_agnostic, bool replicated_layout,
                        const pb::object& canonical_format, const pb::object& storage_format) {
  NamespaceSpec s;
  s.model_name = Text(model_name, "model_name");
  s.tokens_per_hash = tokens_per_hash;
  s.blocks_per_file = blocks_per_file;
  s.tp_size = tp_size;
  s.pp_size = pp_size;
  s.pcp_size = pcp_size;
  s.dcp_size = dcp_size;
  s.rank = rank;
  s.dtype = Text(dtype, "dtype");
  s.kv_cache_groups = Groups(kv_cache_groups);
  s.inference_engine = Text(inference_engine, "inference_engine");
  s.parallel_agnostic = parallel_agnostic;
  s.replicated_layout = replicated_layout;
  s.canonical_format = OptionalText(canonical_format, "canonical_format");
  s.storage_format = OptionalText(storage_format, "storage_format");
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

// SGLang's token list as flat ids: ints, or (a, b) pairs throughout (EAGLE
// bigram mode), each id in [0, 2^32-1] as SGLang's hash requires.
std::pair<std::vector<int64_t>, uint32_t> SglangIds(const pb::iterable& tokens) {
  std::vector<int64_t> ids;
  std::optional<bool> pairs;
  size_t i = 0;
  for (pb::handle t : tokens) {
    const std::string what = "tokens[" + std::to_string(i++) + "]";
    const bool is_pair = PyTuple_Check(t.ptr()) || PyList_Check(t.ptr());
    if (pairs && *pairs != is_pair) ThrowStatus(InvalidArgument(what + ": mixes ints and (a, b) pairs"));
    pairs = is_pair;
    if (!is_pair) {
      ids.push_back(IntIn(t, what, 0, kSglangTokenIdMax));
      continue;
    }
    const pb::sequence pair = pb::reinterpret_borrow<pb::sequence>(t);
    if (pair.size() != 2) ThrowStatus(InvalidArgument(what + ": a bigram pair holds 2 ids"));
    for (size_t k = 0; k < 2; ++k) {
      ids.push_back(IntIn(pair[k], what + "[" + std::to_string(k) + "]", 0, kSglangTokenIdMax));
    }
  }
  return {std::move(ids), pairs.value_or(false) ? 2u : 1u};
}

pb::list SglangPageKeysPy(const pb::iterable& tokens, const pb::object& page_size,
                          const pb::object& prior_hash, const pb::object& extra_key,
                          const pb::object& cache_salt) {
  const auto [ids, ids_per_token] = SglangIds(tokens);
  const uint32_t size = static_cast<uint32_t>(IntIn(page_size, "page_size", 1, UINT32_MAX));
  std::optional<std::string> head = OptionalText(prior_hash, "prior_hash");
  const std::optional<std::string> key = OptionalText(extra_key, "extra_key");
  const std::optional<std::string> salt = OptionalText(cache_salt, "cache_salt");
  if (head && (key || salt)) {
    ThrowStatus(InvalidArgument(
        "prior_hash continues a chain, extra_key/cache_salt seed a fresh one: give one or the other"));
  }
  if (!head) head = Unwrap(SglangNamespaceSeed(key, salt));
  const std::vector<std::string> keys =
      Unwrap(WithoutGil([&] { return SglangPageKeys(ids, size, head, ids_per_token); }));
  pb::list out;
  for (const std::string& k : keys) out.append(pb::str(k));
  return out;
}

}  // namespace

void BindHashing(pb::module_& m) {
  m.def("sglang_page_keys", &SglangPageKeysPy, pb::arg("tokens"), pb::arg("page_size"),
        pb::arg("prior_hash") = pb::none(), pb::arg("extra_key") = pb::none(),
        pb::arg("cache_salt") = pb::none(),
        "SGLang's HiCache page keys (64 hex characters each) of `tokens` (ints, or (a, b) EAGLE bigram pairs): "
        "chained SHA-256 over 4-byte little-endian ids, a trailing partial page too. extra_key / cache_salt seed "
        "a fresh chain as sglang#38577 describes, in kvtier's reading of it (NOT verified against SGLang's code); "
        "prior_hash (hex) continues a chain exactly, e.g. from a seed SGLang printed.");
  m.def("block_hashes", &BlockHashes, pb::arg("tokens"), pb::kw_only(), pb::arg("algo") = "sha256",
        pb::arg("block_size") = 16, pb::arg("seed") = pb::none(), pb::arg("lora_name") = pb::none(),
        pb::arg("cache_salt") = pb::none(),
        pb::arg("mm_features") = std::vector<std::tuple<pb::object, int64_t, int64_t>>{},
        "vLLM's chained block hashes (bytes) of every full block of `tokens`.");
  m.def("none_hash",
        [](const std::string& algo, const pb::object& seed) {
          return HashBytes(NoneHashFor(Unwrap(ParseHashAlgo(algo)), OptionalText(seed, "seed")));
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
