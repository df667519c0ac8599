// Proves the `kv_events_config` object (kvtier/kv_events.h, docs/kv-events.md)
// parses as vLLM's KVEventsConfig keys plus kvtier's four, in an fs tier and
// at the top level (every tier without its own takes the top level's; a
// tier's own replaces it whole); defaults are vLLM's; each bad value, type
// or unknown key is refused naming its full key path (an unknown key with
// the valid list, kvtier's marked); a top-level object no tier takes is still
// checked; the printed config parses back to the same options, and a tier
// without events prints no kv_events_config at all.
#include <gtest/gtest.h>

#include <string>

#include "kvtier/config.h"

namespace kvtier {
namespace {

std::string Config(const std::string& top_keys, const std::string& tier_keys, const std::string& tier2_keys = "") {
  return R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1048576)" + top_keys +
         R"(, "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/a")" + tier_keys +
         R"(}, {"type": "fs", "root_dir": "/mnt/b")" + tier2_keys + "}]}";
}
Result<OffloadConfig> Parse(const std::string& text) { return ParseOffloadConfig(text, EngineContext{}); }
std::string Error(const std::string& text) {
  const auto r = Parse(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(ConfigKvEvents, DefaultsAreVllmsAndOff) {
  const KvEventsConfig c;
  EXPECT_FALSE(c.publishes());
  EXPECT_EQ(c.endpoint, "tcp://*:5557");
  EXPECT_EQ(c.buffer_steps, 10000);
  EXPECT_EQ(c.hwm, 100000);
  EXPECT_EQ(c.max_queue_size, 100000);
  EXPECT_EQ(c.topic, "");
  EXPECT_EQ(c.medium, "STORAGE");
  const auto r = Parse(Config("", ""));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->secondary_tiers[0].fs.kv_events_config, KvEventsConfig{});
  EXPECT_EQ(OffloadConfigToJson(*r).find("kv_events_config"), std::string::npos);
}

TEST(ConfigKvEvents, EveryKeyParsesAndPrintsBack) {
  const auto r = Parse(Config("", R"(, "kv_events_config": {"enable_kv_cache_events": true, "publisher": "zmq",)"
                                  R"( "endpoint": "tcp://10.0.0.5:5557", "replay_endpoint": "tcp://*:5558",)"
                                  R"( "buffer_steps": 7, "hwm": 0, "max_queue_size": 9, "topic": "kv@{volume}@m",)"
                                  R"( "medium": "FS", "volume_id": "pvc-1", "block_hash_encoding": "bytes",)"
                                  R"( "announce_existing": true})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const KvEventsConfig& c = r->secondary_tiers[0].fs.kv_events_config;
  EXPECT_TRUE(c.publishes());
  EXPECT_EQ(c.endpoint, "tcp://10.0.0.5:5557");
  EXPECT_EQ(c.replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(c.buffer_steps, 7);
  EXPECT_EQ(c.hwm, 0);
  EXPECT_EQ(c.max_queue_size, 9);
  EXPECT_EQ(c.topic, "kv@{volume}@m");
  EXPECT_EQ(c.medium, "FS");
  EXPECT_EQ(c.volume_id, "pvc-1");
  EXPECT_EQ(c.block_hash_encoding, KvEventHashEncoding::kBytes);
  EXPECT_TRUE(c.announce_existing);
  EXPECT_EQ(r->secondary_tiers[1].fs.kv_events_config, KvEventsConfig{});
  const std::string printed = OffloadConfigToJson(*r);
  const auto again = Parse(printed);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << printed;
  EXPECT_EQ(*again, *r);
}

TEST(ConfigKvEvents, TopLevelIsTakenByTiersWithoutTheirOwn) {
  const auto r = Parse(Config(R"(, "kv_events_config": {"enable_kv_cache_events": true, "topic": "top"})",
                              R"(, "kv_events_config": {"enable_kv_cache_events": true, "medium": "SHARED_STORAGE"})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const KvEventsConfig& own = r->secondary_tiers[0].fs.kv_events_config;
  EXPECT_EQ(own.medium, "SHARED_STORAGE");
  EXPECT_EQ(own.topic, "") << "a tier's own object replaces the top level's whole";
  EXPECT_EQ(r->secondary_tiers[1].fs.kv_events_config.topic, "top");
  EXPECT_TRUE(r->secondary_tiers[1].fs.kv_events_config.publishes());
  const auto tier = ParseFsTierConfig(R"({"root_dir": "/x", "kv_events_config": {"publisher": "null"}})");
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(tier->kv_events_config.publisher, "null");
}

TEST(ConfigKvEvents, BadValuesAreRefusedNamingTheKey) {
  const auto bad = [](const std::string& obj) { return Error(Config("", R"(, "kv_events_config": )" + obj)); };
  EXPECT_NE(bad("true").find("'secondary_tiers[0].kv_events_config': expected an object"), std::string::npos);
  EXPECT_NE(bad(R"({"medium": "DISK"})").find("'secondary_tiers[0].kv_events_config.medium': expected one of "
                                              "\"STORAGE\", \"FS\", \"SHARED_STORAGE\""),
            std::string::npos)
      << bad(R"({"medium": "DISK"})");
  EXPECT_NE(bad(R"({"publisher": "kafka"})").find("kv_events_config.publisher"), std::string::npos);
  EXPECT_NE(bad(R"({"buffer_steps": 0})").find("kv_events_config.buffer_steps"), std::string::npos);
  EXPECT_NE(bad(R"({"hwm": -1})").find("kv_events_config.hwm"), std::string::npos);
  EXPECT_NE(bad(R"({"endpoint": ""})").find("kv_events_config.endpoint': must not be empty"), std::string::npos);
  EXPECT_NE(bad(R"({"enable_kv_cache_events": "yes"})").find("kv_events_config.enable_kv_cache_events"),
            std::string::npos);
  EXPECT_NE(bad(R"({"block_hash_encoding": "hex"})").find("kv_events_config.block_hash_encoding"), std::string::npos);
  const std::string unknown = bad(R"({"enable": true})");
  EXPECT_NE(unknown.find("'secondary_tiers[0].kv_events_config.enable': unknown key"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("announce_existing (kvtier), block_hash_encoding (kvtier), buffer_steps, "
                         "enable_kv_cache_events, endpoint, hwm"),
            std::string::npos)
      << unknown;
  // A top-level object is checked even where every tier has its own.
  const std::string top = Error(Config(R"(, "kv_events_config": {"medum": "FS"})", R"(, "kv_events_config": {})",
                                       R"(, "kv_events_config": {})"));
  EXPECT_NE(top.find("'kv_events_config.medum': unknown key"), std::string::npos) << top;
}

}  // namespace
}  // namespace kvtier
