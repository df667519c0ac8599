// The KV cache events kvtier publishes, as values: vLLM's BlockStored,
// BlockRemoved and AllBlocksCleared (vllm/distributed/kv_events.py), which
// routers (llm-d's indexer, Dynamo) consume to learn where blocks live.
//
// These are plain value types; the wire form is kv_event_wire.h's business
// and the transport kv_event_publisher.h's. Thread safety: none needed (values).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvtier::internal {

// How a block hash's bytes go on the wire, as vLLM's maybe_convert_block_hash
// decides with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES.
enum class BlockHashEncoding {
  kInt64,  // "1" (vLLM's default): the bytes' big-endian int masked to 64 bits
  kBytes,  // "0": the raw bytes, as msgpack bin
};

// One block hash in its wire form: a msgpack unsigned int, bin or str.
struct WireHash {
  enum class Kind : uint8_t {
    kInt,      // vLLM int hash (msgpack uint family, smallest form)
    kBytes,    // vLLM bytes hash (msgpack bin)
    kPageKey,  // SGLang page key (msgpack str)
  };
  Kind kind = Kind::kInt;
  uint64_t int_value = 0;  // kInt
  std::string text;        // kBytes: the raw bytes; kPageKey: the key

  static WireHash Int(uint64_t value) { return {Kind::kInt, value, {}}; }
  static WireHash Bytes(std::span<const uint8_t> bytes) {
    return {Kind::kBytes, 0, std::string(bytes.begin(), bytes.end())};
  }
  static WireHash PageKey(std::string_view key) { return {Kind::kPageKey, 0, std::string(key)}; }
  // A kvtier/vLLM block hash (its digest bytes) in the form `encoding` asks.
  static WireHash FromBlockHash(std::span<const uint8_t> bytes, BlockHashEncoding encoding);

  bool operator==(const WireHash&) const = default;
};

// int.from_bytes(bytes, "big") & (2**64 - 1): the last 8 bytes as a
// big-endian uint64 (all of them when there are fewer).
uint64_t BlockHashToInt64(std::span<const uint8_t> bytes);

// vLLM's medium for blocks kvtier's storage tiers hold.
inline constexpr std::string_view kMediumStorage = "STORAGE";

// Blocks that became available in `medium`, oldest first: block_hashes[0]'s
// parent is parent_block_hash (nullopt: the chain starts at the root).
struct BlockStoredEvent {
  std::vector<WireHash> block_hashes;
  std::optional<WireHash> parent_block_hash;
  std::vector<int64_t> token_ids;   // the tokens of all the blocks; may be empty
  int64_t block_size = 0;           // tokens per block
  std::optional<int64_t> lora_id;   // deprecated in vLLM, kept on the wire
  std::optional<std::string> medium;
  std::optional<std::string> lora_name;
  std::optional<int64_t> group_idx;  // KV cache group; nullopt: not sent

  bool operator==(const BlockStoredEvent&) const = default;
};

// Blocks that are gone from `medium`.
struct BlockRemovedEvent {
  std::vector<WireHash> block_hashes;
  std::optional<std::string> medium;
  std::optional<int64_t> group_idx;  // nullopt: not sent

  bool operator==(const BlockRemovedEvent&) const = default;
};

// Every block of the publisher's medium is gone.
struct AllBlocksClearedEvent {
  bool operator==(const AllBlocksClearedEvent&) const = default;
};

using KvEvent = std::variant<BlockStoredEvent, BlockRemovedEvent, AllBlocksClearedEvent>;

}  // namespace kvtier::internal
