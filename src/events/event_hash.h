// What a block of the volume is called in a KV event (docs/kv-events.md):
// its engine's own block-hash encoding. A vLLM namespace's block is its hash
// bytes, sent as vLLM's maybe_convert_block_hash does (an int of the last 8
// bytes, or the bytes); an SGLang namespace's page is its page key, the
// file's 64-hex stem (FORMAT.md L106), sent as a string. Names read from the
// volume are untrusted: only a name that is exactly what the layout writes
// (lowercase hex of 1 to 32 bytes; 64 hex for a page) yields a hash, so a
// hostile name can never put bytes outside the encoding on the wire.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "events/kv_event.h"
#include "kvtier/hashing.h"
#include "kvtier/kv_events.h"

namespace kvtier::internal {

// Which engine's encoding a namespace's blocks take.
enum class EventHashKind : uint8_t {
  kVllmBlock,   // hash bytes -> int or bin (BlockHashEncoding)
  kSglangPage,  // page key -> str
};

// The namespace's kind from its spec's inference_engine ("sglang" or other).
EventHashKind EventHashKindOf(std::string_view inference_engine);

// kAuto resolved: VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES "0" (or "false") in
// this process's environment gives kBytes, anything else kInt.
BlockHashEncoding ResolveHashEncoding(KvEventHashEncoding encoding);

// The wire form of a block addressed by its hash bytes (an OffloadKey
// without its group): a page's bytes are the 32 bytes of its name.
WireHash EventHashOfBytes(EventHashKind kind, std::span<const uint8_t> hash, BlockHashEncoding encoding);

// The wire form of a block file's stem read from the volume ("<hex>" of
// "<hex>.bin"): nullopt unless it is lowercase hex of 1 to 32 bytes (a
// page: exactly 32).
std::optional<WireHash> EventHashOfName(EventHashKind kind, std::string_view stem, BlockHashEncoding encoding);

// The group of a block directory name "<hh>_g<group>" (L6): nullopt unless
// it is two lowercase hex digits, "_g", and a decimal without a leading zero
// that fits 32 bits.
std::optional<uint32_t> EventGroupOfDirName(std::string_view dir_name);

// The key of a block file named on the volume by its stem and group
// directory: nullopt unless both are as EventHashOfName and
// EventGroupOfDirName require.
std::optional<OffloadKey> OffloadKeyOfName(std::string_view stem, std::string_view group_dir);

}  // namespace kvtier::internal
