// Proves the seal keys of an fs tier in the config (FORMAT.md L160,
// docs/config.md): seal_key_file, seal_key_fd and seal_read_key_files parse
// into FsTierOptions (vLLM's top-level config and one tier's keys alike),
// are printed back as the paths and fd they are (never a key: the config
// holds none) and only when set; both primary forms at once, read keys
// without a primary key, empty paths and wrong types are refused naming the
// key; an inline key has no key to go in (an unknown key, refused);
// seal_key_group_read (L174) parses, is printed only when true, and a
// non-boolean is refused naming it.
#include <gtest/gtest.h>

#include <string>

#include "kvtier/config.h"

namespace kvtier {
namespace {

std::string Top(const std::string& tier_keys) {
  return R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1048576, "secondary_tiers": [)"
         R"({"type": "fs", "root_dir": "/mnt/kv")" + tier_keys + "}]}";
}
Result<OffloadConfig> Parse(const std::string& tier_keys) {
  EngineContext engine;
  engine.gpu_block_size_tokens = 16;
  return ParseOffloadConfig(Top(tier_keys), engine);
}
std::string Error(const std::string& tier_keys) {
  const auto r = Parse(tier_keys);
  EXPECT_FALSE(r.ok()) << tier_keys;
  return r.ok() ? "" : r.status().message();
}

TEST(ConfigSeal, KeysParseAndPrintAsPathsOnlyWhenSet) {
  const auto r = Parse(R"(, "seal_key_file": "/var/run/secrets/kv/seal.key",)"
                       R"( "seal_read_key_files": ["/var/run/secrets/kv/old.key"])");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const FsTierOptions& t = r->secondary_tiers[0].fs;
  EXPECT_TRUE(t.sealed());
  EXPECT_EQ(t.seal_key_file, "/var/run/secrets/kv/seal.key");
  EXPECT_EQ(t.seal_key_fd, -1);
  ASSERT_EQ(t.seal_read_key_files.size(), 1u);
  const std::string printed = OffloadConfigToJson(*r);
  EXPECT_NE(printed.find("\"seal_key_file\": \"/var/run/secrets/kv/seal.key\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("old.key"), std::string::npos);
  EXPECT_EQ(printed.find("seal_key_fd"), std::string::npos);
  const auto plain = Parse("");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->secondary_tiers[0].fs.sealed());
  EXPECT_EQ(OffloadConfigToJson(*plain).find("seal"), std::string::npos);
  const auto by_fd = ParseFsTierConfig(R"({"root_dir": "/mnt/kv", "seal_key_fd": 7})");
  ASSERT_TRUE(by_fd.ok()) << by_fd.status().ToString();
  EXPECT_EQ(by_fd->seal_key_fd, 7);
  EXPECT_TRUE(by_fd->sealed());
}

TEST(ConfigSeal, BrokenRulesAreRefusedNamingTheKey) {
  EXPECT_NE(Error(R"(, "seal_key_file": "/k", "seal_key_fd": 3)").find("'secondary_tiers[0].seal_key_fd': give the key"),
            std::string::npos);
  EXPECT_NE(Error(R"(, "seal_read_key_files": ["/old"])").find("need a primary key"), std::string::npos);
  EXPECT_NE(Error(R"(, "seal_key_file": "")").find("'secondary_tiers[0].seal_key_file'"), std::string::npos);
  EXPECT_NE(Error(R"(, "seal_key_file": 5)").find("seal_key_file"), std::string::npos);
  EXPECT_NE(Error(R"(, "seal_key_fd": -2)").find("seal_key_fd"), std::string::npos);
  EXPECT_NE(Error(R"(, "seal_key_file": "/k", "seal_read_key_files": "/old")").find("a list of key file paths"),
            std::string::npos);
  EXPECT_NE(Error(R"(, "seal_key_file": "/k", "seal_read_key_files": [""])").find("seal_read_key_files[0]"),
            std::string::npos);
  const std::string inline_key = Error(R"(, "seal_key": "00112233")");
  EXPECT_NE(inline_key.find("unknown key"), std::string::npos) << inline_key;
  EXPECT_EQ(inline_key.find("00112233"), std::string::npos) << inline_key;
  const auto both = ParseFsTierConfig(R"({"root_dir": "/mnt/kv", "seal_key_file": "/k", "seal_key_fd": 3})");
  EXPECT_FALSE(both.ok());
}

TEST(ConfigSeal, GroupReadParsesAndPrintsOnlyWhenTrue) {
  const auto r = Parse(R"(, "seal_key_file": "/k", "seal_key_group_read": true)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->secondary_tiers[0].fs.seal_key_group_read);
  EXPECT_NE(OffloadConfigToJson(*r).find("\"seal_key_group_read\": true"), std::string::npos);
  const auto off = Parse(R"(, "seal_key_file": "/k", "seal_key_group_read": false)");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->secondary_tiers[0].fs.seal_key_group_read);
  EXPECT_EQ(OffloadConfigToJson(*off).find("group_read"), std::string::npos);
  EXPECT_NE(Error(R"(, "seal_key_file": "/k", "seal_key_group_read": "yes")").find("seal_key_group_read"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier
