// The key tables of the config parser (config.cc), seen from the cross-key
// rules (config_rules.cc). Each function rejects keys missing from its table
// (the message lists the valid ones), reports missing required keys, and
// parses every present key that has a table parser into `out`. Keys whose
// row has no parser (secondary_tiers, backpressure, an fs tier's type) are
// left to the caller.
#pragma once

#include <string>

#include "config/config_json.h"
#include "kvtier/config.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// The top level of kv_connector_extra_config.
Status ApplyTopLevelKeys(const Json& root, OffloadConfig& out);

// One fs tier object at `path` ("secondary_tiers[2]"); its type is already checked.
// `type_consumed`: vLLM's factory took `type` (ParseFsTierConfig), so the
// unknown-key message does not offer it.
Status ApplyFsTierKeys(const Json& tier, const std::string& path, FsTierOptions& out, bool type_consumed = false);

// One backpressure object at `path`; `out` arrives holding the locality defaults.
Status ApplyBackpressureKeys(const Json& obj, const std::string& path, BackpressureOptions& out);

// The seal keys of an fs tier (config_seal.cc, FORMAT.md L160): they say
// where the keys are, never hold one, and are printed only when set.
Status ParseSealKeyFile(const Json& value, const std::string& path, FsTierOptions& out);
Status ParseSealKeyFd(const Json& value, const std::string& path, FsTierOptions& out);
Status ParseSealReadKeyFiles(const Json& value, const std::string& path, FsTierOptions& out);
void EmitSealKeyFile(const FsTierOptions& out, std::string_view name, Json& obj);
void EmitSealKeyFd(const FsTierOptions& out, std::string_view name, Json& obj);
void EmitSealReadKeyFiles(const FsTierOptions& out, std::string_view name, Json& obj);
// seal_key_group_read (FORMAT.md L174): printed only when true, as the keys are only when set.
Status ParseSealKeyGroupRead(const Json& value, const std::string& path, FsTierOptions& out);
void EmitSealKeyGroupRead(const FsTierOptions& out, std::string_view name, Json& obj);
// Rows of the fs tier table with their own parsers (config_fields.cc).
Status ParseRootDir(const Json& value, const std::string& path, FsTierOptions& out);
Status ParsePathSharding(const Json& value, const std::string& path, FsTierOptions& out);
void EmitPathSharding(const FsTierOptions& out, std::string_view name, Json& obj);
Status ParseMaxBytes(const Json& value, const std::string& path, FsTierOptions& out);
void EmitMaxBytes(const FsTierOptions& out, std::string_view name, Json& obj);
Status ParseTierKvEvents(const Json& value, const std::string& path, FsTierOptions& out);
void EmitTierKvEvents(const FsTierOptions& out, std::string_view name, Json& obj);
// A kv_events_config object at `path` (config_kv_events.cc): its keys are
// read into `out`, the others keep their defaults; printed with only the
// keys that differ from the defaults.
Status ParseKvEventsConfig(const Json& value, const std::string& path, KvEventsConfig& out);
Json EmitKvEventsConfig(const KvEventsConfig& config);
// Across the seal keys: one primary key (file or fd, not both); read keys
// only with a primary key. `path`: the tier's key path ("" for vLLM's factory).
Status CheckSealKeys(const FsTierOptions& tier, const std::string& path);

}  // namespace kvtier::internal
