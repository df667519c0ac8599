// Proves the namespace rules of FileMapper: vLLM's own golden path
// (test-model_de3bba26cf36_r3/000/10_g2/0001020304050607.bin), the
// parallel-agnostic collapse of tp/pp/pcp/dcp and rank, the optional keys
// (parallel_agnostic: false, replicated_layout, canonical_format), '/' in
// model names, non-ASCII model names escaped as Python does, root_dir used
// verbatim, and clear errors for invalid specs.
#include <gtest/gtest.h>

#include "kvtier/layout.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

NamespaceSpec TestModel() {
  NamespaceSpec spec;
  spec.model_name = "test-model";
  spec.dtype = "float16";
  spec.parallel_agnostic = false;
  spec.rank = 3;
  return spec;
}

TEST(Namespace, VllmUnitTestGoldenPath) {
  ASSERT_OK_AND_ASSIGN(Namespace ns, Namespace::Create(TestModel()));
  ASSERT_OK_AND_ASSIGN(BlockHash key, BlockHash::FromHex("0001020304050607"));
  EXPECT_EQ(JoinRoot("/tmp/cache", ns.BlockRelPath({key, 2})),
            "/tmp/cache/test-model_de3bba26cf36_r3/000/10_g2/0001020304050607.bin");
  EXPECT_EQ(ns.ConfigRelPath(), "test-model_de3bba26cf36/config.json");
  EXPECT_NE(ns.config_json().find("\"parallel_agnostic\": false"), std::string::npos);
  EXPECT_NE(ns.config_json().back(), '\n');
}

TEST(Namespace, ParallelAgnosticCollapsesSizesAndRank) {
  NamespaceSpec a = TestModel(), b = TestModel();
  a.parallel_agnostic = b.parallel_agnostic = true;
  a.tp_size = 2;
  a.rank = 1;
  b.tp_size = 8;
  b.pp_size = 2;
  b.rank = 5;
  ASSERT_OK_AND_ASSIGN(Namespace na, Namespace::Create(a));
  ASSERT_OK_AND_ASSIGN(Namespace nb, Namespace::Create(b));
  EXPECT_EQ(na.dir_name(), nb.dir_name());
  EXPECT_EQ(na.block_dir_name(), na.dir_name() + "_r0");
  EXPECT_EQ(na.spec().tp_size, 1);
  EXPECT_EQ(na.canonical_json().find("parallel_agnostic"), std::string::npos);
}

TEST(Namespace, OptionalKeysChangeTheDigest) {
  NamespaceSpec base = TestModel();
  ASSERT_OK_AND_ASSIGN(Namespace plain, Namespace::Create(base));
  NamespaceSpec replicated = base, canonical = base, engine = base;
  replicated.replicated_layout = true;
  canonical.canonical_format = "v1-hnd";
  engine.inference_engine = "kvtier";
  for (const NamespaceSpec& s : {replicated, canonical, engine}) {
    ASSERT_OK_AND_ASSIGN(Namespace ns, Namespace::Create(s));
    EXPECT_NE(ns.digest(), plain.digest());
  }
  ASSERT_OK_AND_ASSIGN(Namespace r, Namespace::Create(replicated));
  EXPECT_NE(r.canonical_json().find("\"replicated_layout\":true"), std::string::npos);
}

TEST(Namespace, ModelNamesSlashesAndUnicode) {
  NamespaceSpec spec = TestModel();
  spec.model_name = "/models/Qwen/Qwen3-8B";
  ASSERT_OK_AND_ASSIGN(Namespace ns, Namespace::Create(spec));
  EXPECT_EQ(ns.dir_name().substr(0, ns.dir_name().size() - 13), "_models_Qwen_Qwen3-8B");
  spec.model_name = "org/modèle";
  ASSERT_OK_AND_ASSIGN(Namespace uni, Namespace::Create(spec));
  EXPECT_NE(uni.canonical_json().find("\"org/mod\\u00e8le\""), std::string::npos);
  EXPECT_EQ(uni.dir_name().substr(0, 12), "org_modèle_");  // the directory keeps the UTF-8 name
}

TEST(Namespace, RootDirIsUsedVerbatim) {
  EXPECT_EQ(JoinRoot("/mnt/pvc/", "a/b.bin"), "/mnt/pvc//a/b.bin");
  EXPECT_EQ(JoinRoot("rel", "a"), "rel/a");
}

TEST(Namespace, InvalidSpecsAreRejectedWithTheFieldNamed) {
  auto expect_error = [](NamespaceSpec spec, const std::string& field) {
    auto ns = Namespace::Create(spec);
    ASSERT_FALSE(ns.ok()) << field;
    EXPECT_EQ(ns.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ns.status().message().find(field), std::string::npos) << ns.status().ToString();
  };
  NamespaceSpec s = TestModel();
  s.model_name = "";
  expect_error(s, "model_name");
  s = TestModel();
  s.model_name = std::string("a\0b", 3);
  expect_error(s, "model_name");
  s = TestModel();
  s.dtype = "\xff";
  expect_error(s, "dtype");
  s = TestModel();
  s.tp_size = 0;
  expect_error(s, "tp_size");
  s = TestModel();
  s.rank = -1;
  expect_error(s, "rank");
  s = TestModel();
  s.kv_cache_groups.push_back({0, {"l0"}});
  expect_error(s, "kv_cache_groups[0]");
}

}  // namespace
}  // namespace kvtier
