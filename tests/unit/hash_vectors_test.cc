// Proves byte compatibility of the block hasher with vLLM on the golden
// vectors of tests/data/compat/vllm_hash_vectors.json (computed by vLLM's code):
// for every vector set and every block, the serialized input (pickle 5 or
// canonical CBOR) is reproduced byte for byte, and NONE_HASH, the chained
// hash, the offload key and the relative file path match. It also checks the
// three FileMapper examples (canonical JSON, digest, config.json text).
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "kvtier/hashing.h"
#include "kvtier/layout.h"
#include "support/test_json.h"
#include "support/test_support.h"
#include "util/hex.h"

namespace kvtier {
namespace {

using nlohmann::json;

const json& Vectors() {
  static const json doc = testing::ReadJsonOrDie(testing::CompatDir() / "vllm_hash_vectors.json");
  return doc;
}

RequestExtras ExtrasOf(const json& request) {
  RequestExtras extras;
  if (request.contains("lora_name") && !request["lora_name"].is_null()) extras.lora_name = request["lora_name"];
  if (request.contains("cache_salt") && !request["cache_salt"].is_null()) extras.cache_salt = request["cache_salt"];
  if (request.contains("mm_features")) {
    for (const json& f : request["mm_features"]) extras.mm_features.push_back({f[0], f[1], f[2]});
  }
  return extras;
}

// The namespace vLLM's reference script used for file_relpath_g0: Llama-3.1-8B
// bf16, one group of 32 layers, agnostic; blocks_per_file from the chunk size.
NamespaceSpec LlamaNamespace(int64_t blocks_per_file) {
  NamespaceSpec spec;
  spec.model_name = "meta-llama/Llama-3.1-8B-Instruct";
  spec.blocks_per_file = blocks_per_file;
  KvCacheGroupSpec group;
  for (int i = 0; i < 32; ++i) group.layer_names.push_back("model.layers." + std::to_string(i) + ".self_attn.attn");
  spec.kv_cache_groups.push_back(group);
  return spec;
}

// Chunk-mode sets: range(a,b) tokens, 16-token hashes, and one key per
// offload block of hashes_per_chunk hashes (the last hash of the chunk).
void CheckChunkMode(const json& set, HashAlgo algo, const BlockHash& none_hash) {
  const json& req = set["request"];
  int64_t from = 0, to = 0;
  ASSERT_EQ(std::sscanf(req["token_ids"].get<std::string>().c_str(), "range(%ld,%ld)", &from, &to), 2);
  std::vector<int64_t> tokens;
  for (int64_t t = from; t < to; ++t) tokens.push_back(t);
  ASSERT_OK_AND_ASSIGN(BlockHasher hasher, BlockHasher::Create(algo, none_hash, 16));
  std::vector<BlockHash> hashes;
  ASSERT_OK(hasher.AppendBlockHashes(tokens, RequestExtras{}, &hashes));
  ASSERT_EQ(hashes.size(), set["per_16_token_hashes_hex"].size());
  for (size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(hashes[i].Hex(), set["per_16_token_hashes_hex"][i]);
  const uint32_t gpu = req["gpu_block_size"], offload = req["offload_block_size"];
  ASSERT_OK_AND_ASSIGN(uint32_t per_chunk, HashesPerChunk(gpu, offload / gpu, 16));
  EXPECT_EQ(per_chunk, req["hashes_per_chunk"].get<uint32_t>());
  std::vector<OffloadKey> keys = ChunkOffloadKeys(hashes, per_chunk, 0);
  ASSERT_EQ(keys.size(), set["chunks"].size());
  ASSERT_OK_AND_ASSIGN(Namespace ns, Namespace::Create(LlamaNamespace(offload / gpu)));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i].Hex(), set["chunks"][i]["offload_key_hex_g0"].get<std::string>());
    EXPECT_EQ(ns.BlockRelPath(keys[i]), set["chunks"][i]["file_relpath_g0"].get<std::string>());
  }
}

class HashVectors : public ::testing::TestWithParam<size_t> {};

TEST_P(HashVectors, EveryBlockMatchesVllm) {
  const json& set = Vectors()["vectors"][GetParam()];
  SCOPED_TRACE(set["case"].get<std::string>() + " " + set["algo"].get<std::string>());
  ASSERT_OK_AND_ASSIGN(HashAlgo algo, ParseHashAlgo(set["algo"].get<std::string>()));
  std::optional<std::string> seed;
  if (!set["pythonhashseed"].is_null()) seed = set["pythonhashseed"].get<std::string>();
  NoneHashSeed resolved = ResolveNoneHashSeed(algo, seed);
  EXPECT_EQ(resolved.seed, set["none_hash_seed_string"].get<std::string>());
  BlockHash none_hash = ComputeNoneHash(algo, resolved.seed);
  ASSERT_EQ(none_hash.Hex(), set["none_hash_hex"].get<std::string>());

  if (!set.contains("blocks")) {
    CheckChunkMode(set, algo, none_hash);
    return;
  }
  std::vector<int64_t> tokens;
  for (const json& b : set["blocks"]) {
    for (const json& t : b["token_ids"]) tokens.push_back(t.get<int64_t>());
  }
  ASSERT_OK_AND_ASSIGN(BlockHasher hasher, BlockHasher::Create(algo, none_hash, 16));
  std::vector<BlockHash> hashes;
  BlockHashTrace trace;
  ASSERT_OK(hasher.AppendBlockHashes(tokens, ExtrasOf(set["request"]), &hashes, &trace));
  ASSERT_EQ(hashes.size(), set["blocks"].size());
  ASSERT_OK_AND_ASSIGN(Namespace ns, Namespace::Create(LlamaNamespace(1)));
  for (size_t i = 0; i < hashes.size(); ++i) {
    const json& b = set["blocks"][i];
    SCOPED_TRACE("block " + std::to_string(i));
    EXPECT_EQ(internal::HexEncode(trace.serialized_inputs[i]), b["serialized_input_hex"].get<std::string>());
    EXPECT_EQ(hashes[i].Hex(), b["hash_hex"].get<std::string>());
    EXPECT_EQ(trace.extra_keys_repr[i],
              b["extra_keys_repr"].is_null() ? "None" : b["extra_keys_repr"].get<std::string>());
    OffloadKey key{hashes[i], 0};
    EXPECT_EQ(key.Hex(), b["offload_key_hex_g0"].get<std::string>());
    EXPECT_EQ(ns.BlockRelPath(key), b["file_relpath_g0"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Vllm, HashVectors, ::testing::Range<size_t>(0, Vectors()["vectors"].size()));

TEST(HashVectors, AllFiftySetsArePresent) { EXPECT_GE(Vectors()["vectors"].size(), 50u); }

TEST(FileMapperExamples, CanonicalJsonDigestAndConfigMatchVllm) {
  ASSERT_FALSE(Vectors()["file_mapper_examples"].empty());
  for (const json& ex : Vectors()["file_mapper_examples"]) {
    SCOPED_TRACE(ex["label"].get<std::string>());
    const json& f = ex["fields"];
    NamespaceSpec spec;
    spec.model_name = f["model_name"];
    spec.tokens_per_hash = f["tokens_per_hash"];
    spec.blocks_per_file = f["blocks_per_file"];
    spec.tp_size = f["tp_size"];
    spec.pp_size = f["pp_size"];
    spec.pcp_size = f["pcp_size"];
    spec.dcp_size = f["dcp_size"];
    spec.dtype = f["dtype"];
    spec.parallel_agnostic = !f.contains("parallel_agnostic");
    for (const json& g : f["kv_cache_groups"]) {
      spec.kv_cache_groups.push_back({g["tokens_per_block"], g["layer_names"]});
    }
    ASSERT_OK_AND_ASSIGN(Namespace ns, Namespace::Create(spec));
    EXPECT_EQ(ns.canonical_json(), ex["canonical_json"].get<std::string>());
    EXPECT_EQ(ns.digest(), ex["digest12"].get<std::string>());
    EXPECT_EQ(ns.config_json(), ex["config_json"].get<std::string>());
    EXPECT_EQ(ns.dir_name(), ex["base_dir"].get<std::string>().substr(ex["base_dir"].get<std::string>().rfind('/') + 1));
  }
}

}  // namespace
}  // namespace kvtier
