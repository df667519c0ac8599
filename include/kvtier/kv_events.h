// KV cache events (docs/kv-events.md): the `kv_events_config` object that
// turns on kvtier's own publisher of vLLM's BlockStored / BlockRemoved events
// for the blocks a storage tier holds, so that routers (llm-d's indexer,
// Dynamo, any ZMQ subscriber of vLLM's events) keep an exact index of a
// shared volume. The first eight keys are vLLM's KVEventsConfig, with its
// defaults; the last four are kvtier's. The config parser fills it from an
// fs tier's (or the top level's) `kv_events_config`; the CLI from
// --events-endpoint and its companions.
#pragma once

#include <cstdint>
#include <string>

namespace kvtier {

// `block_hash_encoding`: how a vLLM block hash goes on the wire (vLLM's
// maybe_convert_block_hash). SGLang page keys always go as strings.
enum class KvEventHashEncoding {
  kAuto,   // "auto": as VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES says in this process ("0": bytes; else int)
  kInt,    // "int": the hash's big-endian integer masked to 64 bits (vLLM's default)
  kBytes,  // "bytes": the hash's raw bytes
};

struct KvEventsConfig {
  // vLLM's keys. `enable_kv_cache_events`: publish at all; default false.
  bool enable_kv_cache_events = false;
  // `publisher`: "zmq" or "null" (events on, sent nowhere); "" (absent):
  // "zmq" when enabled, as vLLM resolves it.
  std::string publisher;
  // `endpoint`: the PUB address; bound when it holds "*" or "::" or is
  // ipc:// or inproc://, else connected. Default "tcp://*:5557".
  std::string endpoint = "tcp://*:5557";
  // `replay_endpoint`: the ROUTER address answering replay requests; "" or
  // null: no replay.
  std::string replay_endpoint;
  int64_t buffer_steps = 10000;     // `buffer_steps`: batches kept for replay, >= 1
  int64_t hwm = 100000;             // `hwm`: PUB high-water mark in messages (0: unlimited)
  int64_t max_queue_size = 100000;  // `max_queue_size`: events queued before drops, >= 1
  // `topic`: first frame of every message; each "{volume}" in it is replaced
  // by volume_id (llm-d's indexer reads "kv@<pod>@<model>": give it
  // "kv@{volume}@<model>"). Default "".
  std::string topic;

  // kvtier's keys. `medium`: the medium every event names: "STORAGE"
  // (vLLM's fs tier, the default), "FS" or "SHARED_STORAGE" (llm-d's).
  std::string medium = "STORAGE";
  // `volume_id`: what "{volume}" in topic stands for; "": the tier's
  // root_dir as given (the CLI's --root).
  std::string volume_id;
  // `block_hash_encoding`: "auto" (default), "int" or "bytes".
  KvEventHashEncoding block_hash_encoding = KvEventHashEncoding::kAuto;
  // `announce_existing`: a store skipped because its block was already on
  // the volume (written by another instance) publishes BlockStored too;
  // default false (only blocks this instance made visible).
  bool announce_existing = false;

  // Whether events are published to a socket: enabled, publisher not "null".
  bool publishes() const { return enable_kv_cache_events && publisher != "null"; }
  bool operator==(const KvEventsConfig&) const = default;
};

}  // namespace kvtier
