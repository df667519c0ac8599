// Proves Namespace::Sealed (FORMAT.md L162): a sealed namespace's fields are
// the plain ones plus "kvtier_seal" {cipher, key_id, version} in canonical
// order, its digest is L22's over those fields (so config.json, which holds
// them, hashes to its directory's digest), its directory keeps the model
// prefix and rank, two keys give two namespaces, and a key id that is not
// 32 lowercase hex digits, or sealing twice, is refused.
#include <gtest/gtest.h>

#include <string>

#include "format/layout_names.h"
#include "kvtier/layout.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

const std::string kIdA = "00112233445566778899aabbccddeeff";
const std::string kIdB = "ffeeddccbbaa99887766554433221100";

TEST(SealedNamespace, AddsTheSealFieldAndHashesIt) {
  NamespaceSpec spec = testing::Spec("org/model");
  spec.rank = 0;
  const Namespace plain = Namespace::Create(spec).value();
  const Namespace sealed = plain.Sealed(kIdA).value();
  EXPECT_NE(sealed.digest(), plain.digest());
  EXPECT_EQ(sealed.dir_name(), "org_model_" + sealed.digest());
  EXPECT_EQ(sealed.block_dir_name(), sealed.dir_name() + "_r0");
  const std::string want = R"(,"kvtier_seal":{"cipher":"aes-256-gcm","key_id":")" + kIdA + R"(","version":1},)";
  EXPECT_NE(sealed.canonical_json().find(want), std::string::npos) << sealed.canonical_json();
  EXPECT_EQ(sealed.digest(), format::NamespaceDigestOf(sealed.canonical_json()));
  EXPECT_NE(sealed.config_json().find("\"kvtier_seal\": {"), std::string::npos) << sealed.config_json();
  EXPECT_NE(plain.Sealed(kIdB).value().digest(), sealed.digest());
  EXPECT_EQ(plain.Sealed(kIdA).value().digest(), sealed.digest());
}

TEST(SealedNamespace, RefusesBadKeyIdsAndSealingTwice) {
  const Namespace plain = Namespace::Create(testing::Spec("m")).value();
  for (const std::string& bad : {std::string(), kIdA.substr(1), kIdA + "0", std::string(32, 'A'), std::string(32, 'g')}) {
    EXPECT_FALSE(plain.Sealed(bad).ok()) << bad;
  }
  EXPECT_FALSE(plain.Sealed(kIdA).value().Sealed(kIdB).ok());
}

}  // namespace
}  // namespace kvtier
