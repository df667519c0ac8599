// Proves that kvtier's KV events are byte for byte what vLLM's msgspec
// encoder writes (array_like, omit_defaults, tag: vllm/distributed/
// kv_events.py at b4e69e0 plus the trailing fields newer vLLM added), so a
// router decoding vLLM's events decodes kvtier's. Method: golden bytes
// written by hand from the msgpack spec, one commented field per line,
// covering every integer width an event uses (positive fixint, uint8/16/32/
// 64, negative fixint, int16), nil, empty and non-empty arrays, str, bin,
// float64, and the optional trailing fields present and absent; plus vLLM's
// int conversion of a block hash (the last 8 bytes, big-endian).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "events/kv_event.h"
#include "events/kv_event_wire.h"
#include "util/hex.h"

namespace kvtier::internal {
namespace {

// "98 ab 42" -> "98ab42": the goldens are spaced for reading.
std::string Hex(std::string spaced) {
  std::erase(spaced, ' ');
  return spaced;
}

std::string HexOf(const std::string& bytes) {
  return HexEncode({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

constexpr const char* kBlockStoredTag = "ab 42 6c 6f 63 6b 53 74 6f 72 65 64 ";     // fixstr 11
constexpr const char* kBlockRemovedTag = "ac 42 6c 6f 63 6b 52 65 6d 6f 76 65 64 ";  // fixstr 12
constexpr const char* kStorage = "a7 53 54 4f 52 41 47 45 ";                         // "STORAGE"

TEST(KvEventWire, BlockStoredWithIntHashesNilParentAndNoTokens) {
  BlockStoredEvent e;
  e.block_hashes = {WireHash::Int(0xfedcba9876543210ULL), WireHash::Int(7)};
  e.block_size = 16;
  e.medium = std::string(kMediumStorage);
  const std::string want = Hex(std::string("98 ") +  // fixarray 8: no group_idx, so 8 fields
                               kBlockStoredTag +
                               "92 cf fe dc ba 98 76 54 32 10 07 "  // [uint64 >= 2^63, fixint 7]
                               "c0 "                                // parent_block_hash nil
                               "90 "                                // token_ids []
                               "10 "                                // block_size 16
                               "c0 " +                              // lora_id nil
                               kStorage +                           // medium
                               "c0");                               // lora_name nil
  EXPECT_EQ(HexOf(EncodeKvEvent(e)), want);
}

TEST(KvEventWire, BlockStoredWithGroupIdxSendsNilExtraKeysThenGroupIdx) {
  BlockStoredEvent e;
  e.block_hashes = {WireHash::Int(1)};
  e.token_ids = {1, 200, 70000, 300, -1, -200};
  e.block_size = 4;
  e.lora_id = 3;
  e.lora_name = "adapter";
  e.group_idx = 2;
  const std::string want = Hex(std::string("9a ") +  // fixarray 10
                               kBlockStoredTag +
                               "91 01 "  // block_hashes [1]
                               "c0 "     // parent nil
                               // fixint, uint8, uint32, uint16, negative fixint, int16
                               "96 01 cc c8 ce 00 01 11 70 cd 01 2c ff d1 ff 38 "
                               "04 "                          // block_size
                               "03 "                          // lora_id
                               "c0 "                          // medium nil
                               "a7 61 64 61 70 74 65 72 "     // lora_name "adapter"
                               "c0 "                          // extra_keys nil
                               "02");                         // group_idx
  EXPECT_EQ(HexOf(EncodeKvEvent(e)), want);
}

TEST(KvEventWire, BlockStoredWithAParentHash) {
  BlockStoredEvent e;
  e.block_hashes = {WireHash::Int(0x1234)};
  e.parent_block_hash = WireHash::Int(0xffffffffULL);
  e.block_size = 256;
  const std::string want = Hex(std::string("98 ") + kBlockStoredTag +
                               "91 cd 12 34 "     // uint16
                               "ce ff ff ff ff "  // parent: uint32
                               "90 cd 01 00 c0 c0 c0");
  EXPECT_EQ(HexOf(EncodeKvEvent(e)), want);
}

TEST(KvEventWire, BlockRemovedWithBytesHashes) {
  const std::array<uint8_t, 3> raw = {1, 2, 3};
  BlockRemovedEvent e;
  e.block_hashes = {WireHash::Bytes(raw)};
  e.medium = std::string(kMediumStorage);
  const std::string want = Hex(std::string("93 ") + kBlockRemovedTag +
                               "91 c4 03 01 02 03 " +  // [bin8 of 3 bytes]
                               kStorage);
  EXPECT_EQ(HexOf(EncodeKvEvent(e)), want);
}

TEST(KvEventWire, BlockRemovedWithPageKeyAndGroupIdx) {
  BlockRemovedEvent e;
  e.block_hashes = {WireHash::PageKey("ab")};
  e.group_idx = 0;  // set, even if 0: it is sent
  const std::string want = Hex(std::string("94 ") + kBlockRemovedTag +
                               "91 a2 61 62 "  // [str "ab"]
                               "c0 "           // medium nil
                               "00");          // group_idx 0
  EXPECT_EQ(HexOf(EncodeKvEvent(e)), want);
}

TEST(KvEventWire, BatchIsTsAsFloat64ThenTheEvents) {
  const std::vector<KvEvent> events = {AllBlocksClearedEvent{}};
  const std::string want = Hex(
      "92 "                           // [ts, events]: data_parallel_rank omitted
      "cb 3f f8 00 00 00 00 00 00 "   // float64 1.5
      "91 "                           // one event
      "91 b0 41 6c 6c 42 6c 6f 63 6b 73 43 6c 65 61 72 65 64");  // ["AllBlocksCleared"]
  EXPECT_EQ(HexOf(EncodeKvEventBatch(1.5, events)), want);
}

// msgpack-cxx's pack_double would write 1700000000.0 as uint32 and 0.0 as
// fixint 0; msgspec writes every float as float64.
TEST(KvEventWire, IntegralTsIsStillFloat64) {
  EXPECT_EQ(HexOf(EncodeKvEventBatch(1700000000.0, {})), Hex("92 cb 41 d9 54 fc 40 00 00 00 90"));
  EXPECT_EQ(HexOf(EncodeKvEventBatch(-0.0, {})), Hex("92 cb 80 00 00 00 00 00 00 00 90"));
}

TEST(KvEventWire, BatchOfSeveralEventsKeepsTheirOrder) {
  std::vector<KvEvent> events;
  events.push_back(AllBlocksClearedEvent{});
  BlockRemovedEvent removed;
  removed.block_hashes = {WireHash::Int(9)};
  events.push_back(removed);
  const std::string want = HexOf(EncodeKvEventBatch(0.0, std::span<const KvEvent>(events).first(0)));
  EXPECT_EQ(want, Hex("92 cb 00 00 00 00 00 00 00 00 90"));  // an empty batch, ts 0.0
  EXPECT_EQ(HexOf(EncodeKvEventBatch(0.0, events)),
            Hex("92 cb 00 00 00 00 00 00 00 00 92") + HexOf(EncodeKvEvent(events[0])) +
                HexOf(EncodeKvEvent(events[1])));
}

TEST(KvEventWire, IntHashIsTheLastEightBytesBigEndian) {
  std::array<uint8_t, 32> sha{};
  for (size_t i = 0; i < sha.size(); ++i) sha[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(BlockHashToInt64(sha), 0x18191a1b1c1d1e1fULL);
  const std::array<uint8_t, 3> short_hash = {0xab, 0xcd, 0xef};
  EXPECT_EQ(BlockHashToInt64(short_hash), 0xabcdefULL);
  EXPECT_EQ(BlockHashToInt64({}), 0u);

  EXPECT_EQ(WireHash::FromBlockHash(sha, BlockHashEncoding::kInt64),
            WireHash::Int(0x18191a1b1c1d1e1fULL));
  const WireHash bytes = WireHash::FromBlockHash(sha, BlockHashEncoding::kBytes);
  EXPECT_EQ(bytes.kind, WireHash::Kind::kBytes);
  EXPECT_EQ(bytes.text, std::string(sha.begin(), sha.end()));
}

TEST(KvEventWire, ThirtyTwoByteBytesHashIsBin8) {
  std::array<uint8_t, 32> sha{};
  sha.fill(0xee);
  BlockRemovedEvent e;
  e.block_hashes = {WireHash::FromBlockHash(sha, BlockHashEncoding::kBytes)};
  const std::string hex = HexOf(EncodeKvEvent(e));
  const std::string head = Hex(std::string("93 ") + kBlockRemovedTag + "91 c4 20");  // bin8, 32
  EXPECT_EQ(hex, head + std::string(64, 'e') + "c0");
}

}  // namespace
}  // namespace kvtier::internal
