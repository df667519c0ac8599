// vLLM's KV event wire format: msgspec's msgpack encoding of
// vllm/distributed/kv_events.py's structs with array_like=True,
// omit_defaults=True and tag=True (as of vLLM b4e69e0 and the array-encoded
// releases after it). docs/kv-events.md has the layout.
//
//   EventBatch       = [ts (float64), [event, ...]]
//   BlockStored      = ["BlockStored", block_hashes, parent_block_hash|nil,
//                       token_ids, block_size, lora_id|nil, medium|nil,
//                       lora_name|nil (, nil extra_keys, group_idx)]
//   BlockRemoved     = ["BlockRemoved", block_hashes, medium|nil (, group_idx)]
//   AllBlocksCleared = ["AllBlocksCleared"]
//
// omit_defaults drops trailing fields equal to their default, so
// EventBatch's data_parallel_rank (default None) is never sent, and
// extra_keys and group_idx only when group_idx is set. Integers take
// msgpack's smallest form and floats are float64, as msgspec writes them.
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <string>

#include "events/kv_event.h"

namespace kvtier::internal {

// The msgpack bytes of one EventBatch holding `events` in order, stamped
// `ts` (seconds since the epoch). Never fails (allocation aside).
std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events);

// The msgpack bytes of one event (an element of EventBatch's events).
std::string EncodeKvEvent(const KvEvent& event);

}  // namespace kvtier::internal
