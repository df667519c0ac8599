// Parser and printer of vLLM's kv_connector_extra_config (docs/config.md).
//
// Every key lives in one of the three key tables below (top level, fs tier,
// backpressure object). A row names the key, says whether vLLM or kvtier
// defines it and whether it is required, and says how the value is parsed and
// printed. The generic rows (IntegerKey, BoolKey, EnumKey) bind a member of the
// options struct, so a new key is one member in include/kvtier/config.h plus
// one row here. Rules that involve several keys (block_size against
// blocks_per_chunk, the spec-dependent rules, distinct root_dirs, the
// inherited backpressure default) run after the table pass, in the functions
// below the tables.
#include "kvtier/config.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "config/config_json.h"
#include "config/config_keys.h"

namespace kvtier {
namespace {

using internal::DescribeValue;
using internal::IntRule;
using internal::JoinKeyPath;
using internal::Json;
using internal::KeyError;

// Who defines a key: vLLM (kept compatible) or kvtier (its own extension).
enum class KeyOrigin { kVllm, kKvtier };
enum class Presence { kOptional, kRequired };

template <class Out>
struct KeySpec {
  std::string_view name;
  KeyOrigin origin;
  Presence presence;
  // Reads the value into `out`. nullptr: a cross-key rule below reads it.
  Status (*parse)(const Json& value, const std::string& path, Out& out);
  // Adds the key to `obj`. nullptr: never printed.
  void (*emit)(const Out& out, std::string_view name, Json& obj);
  // A vLLM key whose kvtier default differs: vLLM's default, as JSON text
  // (`config check` says which value is kvtier's own). nullptr: the same.
  const char* vllm_default = nullptr;
};

// ---- Enum spellings ---------------------------------------------------------

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

constexpr EnumName<SpecName> kSpecNames[] = {
    {SpecName::kCpuOffloading, "CPUOffloadingSpec"},
    {SpecName::kTieringOffloading, "TieringOffloadingSpec"},
};
constexpr EnumName<EvictionPolicy> kEvictionPolicyNames[] = {
    {EvictionPolicy::kLru, "lru"},
    {EvictionPolicy::kArc, "arc"},
};
constexpr EnumName<GpuCopy> kGpuCopyNames[] = {
    {GpuCopy::kAuto, "auto"},
    {GpuCopy::kDma, "dma"},
    {GpuCopy::kKernel, "kernel"},
    {GpuCopy::kStaged, "staged"},
};
constexpr EnumName<Locality> kLocalityNames[] = {
    {Locality::kLocal, "LOCAL"},
    {Locality::kRemote, "REMOTE"},
};
constexpr EnumName<TierType> kTierTypeNames[] = {{TierType::kFs, "fs"}};
constexpr EnumName<Durability> kDurabilityNames[] = {
    {Durability::kNone, "none"},
    {Durability::kFile, "file"},
    {Durability::kFull, "full"},
};
constexpr EnumName<IoBackendKind> kIoBackendNames[] = {
    {IoBackendKind::kAuto, "auto"},
    {IoBackendKind::kUring, "uring"},
    {IoBackendKind::kSyscall, "syscall"},
};
constexpr EnumName<ChecksumPlaceKind> kChecksumPlaceNames[] = {
    {ChecksumPlaceKind::kAuto, "auto"},
    {ChecksumPlaceKind::kXattr, "xattr"},
    {ChecksumPlaceKind::kTrailer, "trailer"},
};
constexpr EnumName<InlineMetadata> kInlineMetadataNames[] = {
    {InlineMetadata::kAuto, "auto"},
    {InlineMetadata::kOn, "on"},
    {InlineMetadata::kOff, "off"},
};
constexpr EnumName<StartupScan> kStartupScanNames[] = {
    {StartupScan::kAuto, "auto"},
    {StartupScan::kOn, "on"},
    {StartupScan::kOff, "off"},
};
constexpr EnumName<BounceLoads> kBounceLoadsNames[] = {
    {BounceLoads::kAuto, "auto"},
    {BounceLoads::kOn, "on"},
    {BounceLoads::kOff, "off"},
};
constexpr EnumName<BackpressureDetector> kDetectorNames[] = {{BackpressureDetector::kEma, "EMABackpressureDetector"}};
constexpr EnumName<BackpressurePolicy> kPolicyNames[] = {{BackpressurePolicy::kDropStore, "DropStorePolicy"}};

template <class E, size_t N>
std::string_view NameOf(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return "";
}

template <class E, size_t N>
std::string QuotedNames(const EnumName<E> (&names)[N]) {
  std::string out;
  for (const EnumName<E>& entry : names) {
    if (!out.empty()) out += ", ";
    out += '"';
    out += entry.name;
    out += '"';
  }
  return out;
}

// ---- Generic rows -----------------------------------------------------------

template <class C, class M>
C ClassOfMember(M C::*);
// The struct that a pointer to member `Field` points into.
template <auto Field>
using ClassOf = decltype(ClassOfMember(Field));

template <auto Field, IntRule Rule>
Status ParseIntegerField(const Json& value, const std::string& path, ClassOf<Field>& out) {
  return internal::ReadInteger(value, path, Rule, &(out.*Field));
}

template <auto Field>
Status ParseBoolField(const Json& value, const std::string& path, ClassOf<Field>& out) {
  return internal::ReadBool(value, path, &(out.*Field));
}

template <auto Field, const auto& Names>
Status ParseEnumField(const Json& value, const std::string& path, ClassOf<Field>& out) {
  if (value.is_string()) {
    for (const auto& entry : Names) {
      if (entry.name == value.get_ref<const std::string&>()) {
        out.*Field = entry.value;
        return Status::Ok();
      }
    }
  }
  std::string rule = std::size(Names) == 1 ? "expected " : "expected one of ";
  return KeyError(path, rule + QuotedNames(Names) + ", got " + DescribeValue(value));
}

template <auto Field>
Status ParsePositiveNumberField(const Json& value, const std::string& path, ClassOf<Field>& out) {
  return internal::ReadNumber(value, path, 0.0, HUGE_VAL, &(out.*Field));
}

template <auto Field>
void EmitField(const ClassOf<Field>& out, std::string_view name, Json& obj) {
  obj[std::string(name)] = out.*Field;
}

template <auto Field, const auto& Names>
void EmitEnumField(const ClassOf<Field>& out, std::string_view name, Json& obj) {
  obj[std::string(name)] = NameOf(Names, out.*Field);
}

template <auto Field, IntRule Rule>
constexpr KeySpec<ClassOf<Field>> IntegerKey(std::string_view name, KeyOrigin origin,
                                            Presence presence = Presence::kOptional) {
  return {name, origin, presence, &ParseIntegerField<Field, Rule>, &EmitField<Field>};
}

template <auto Field>
constexpr KeySpec<ClassOf<Field>> BoolKey(std::string_view name, KeyOrigin origin,
                                         const char* vllm_default = nullptr) {
  return {name, origin, Presence::kOptional, &ParseBoolField<Field>, &EmitField<Field>, vllm_default};
}

template <auto Field, const auto& Names>
constexpr KeySpec<ClassOf<Field>> EnumKey(std::string_view name, KeyOrigin origin,
                                         Presence presence = Presence::kOptional) {
  return {name, origin, presence, &ParseEnumField<Field, Names>, &EmitEnumField<Field, Names>};
}

template <auto Field>
constexpr KeySpec<ClassOf<Field>> PositiveNumberKey(std::string_view name, KeyOrigin origin) {
  return {name, origin, Presence::kOptional, &ParsePositiveNumberField<Field>, &EmitField<Field>};
}

template <class Out>
Status RejectPythonClass(const Json&, const std::string& path, Out&) {
  return KeyError(path,
                  "loading out-of-tree Python classes is not supported by kvtier; remove the key");
}

// ---- Special rows -----------------------------------------------------------

Status ParseBlockSize(const Json& value, const std::string& path, OffloadConfig& out) {
  uint32_t tokens = 0;
  KVTIER_RETURN_IF_ERROR(internal::ReadInteger(value, path, IntRule::kPositive, &tokens));
  out.block_size_tokens = tokens;
  return Status::Ok();
}

void EmitBlockSize(const OffloadConfig& out, std::string_view name, Json& obj) {
  if (out.block_size_tokens.has_value()) obj[std::string(name)] = *out.block_size_tokens;
}

// Printed only when block_size was not given: the two keys exclude each other.
void EmitBlocksPerChunk(const OffloadConfig& out, std::string_view name, Json& obj) {
  if (!out.block_size_tokens.has_value()) obj[std::string(name)] = out.blocks_per_chunk;
}

// null means "unspecified", as vLLM's locality=None.
Status ParseLocality(const Json& value, const std::string& path, FsTierOptions& out) {
  if (value.is_null()) {
    out.locality = Locality::kUnspecified;
    return Status::Ok();
  }
  return ParseEnumField<&FsTierOptions::locality, kLocalityNames>(value, path, out);
}

void EmitLocality(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (out.locality != Locality::kUnspecified) obj[std::string(name)] = LocalityToString(out.locality);
}

// CheckTierType() has accepted only "fs" before the table pass.
void EmitTierType(const FsTierOptions&, std::string_view name, Json& obj) {
  obj[std::string(name)] = TierTypeToString(TierType::kFs);
}

Status ParseAlpha(const Json& value, const std::string& path, BackpressureOptions& out) {
  return internal::ReadNumber(value, path, 0.0, 1.0, &out.ema_alpha);
}

void EmitTierBackpressure(const FsTierOptions& out, std::string_view name, Json& obj);
void EmitSecondaryTiers(const OffloadConfig& out, std::string_view name, Json& obj);

// ---- The key tables (docs/config.md documents the same rows) ----------------
// Rows are checked in order, so a key that makes the others moot (an
// out-of-tree class) comes first. A row with a null parser is read by the
// cross-key functions further down.

using enum KeyOrigin;
using enum Presence;
using enum IntRule;

constexpr KeySpec<BackpressureOptions> kBackpressureKeys[] = {
    EnumKey<&BackpressureOptions::detector, kDetectorNames>("backpressure_cls", kVllm, kRequired),
    EnumKey<&BackpressureOptions::policy, kPolicyNames>("policy_cls", kVllm),
    PositiveNumberKey<&BackpressureOptions::high_water_s_per_mib>("high_water_s", kVllm),
    PositiveNumberKey<&BackpressureOptions::low_water_s_per_mib>("low_water_s", kVllm),
    {"alpha", kVllm, kOptional, &ParseAlpha, &EmitField<&BackpressureOptions::ema_alpha>},
    IntegerKey<&BackpressureOptions::warmup_completions, kNonNegative>("warmup", kVllm),
};

constexpr KeySpec<FsTierOptions> kFsTierKeys[] = {
    {"module_path", kVllm, kOptional, &RejectPythonClass<FsTierOptions>, nullptr},
    {"type", kVllm, kRequired, nullptr, &EmitTierType},
    {"root_dir", kVllm, kRequired, &internal::ParseRootDir, &EmitField<&FsTierOptions::root_dir>},
    {"path_sharding", kVllm, kOptional, &internal::ParsePathSharding, &internal::EmitPathSharding},
    IntegerKey<&FsTierOptions::n_read_threads, kPositive>("n_read_threads", kVllm),
    IntegerKey<&FsTierOptions::n_write_threads, kPositive>("n_write_threads", kVllm),
    BoolKey<&FsTierOptions::enable_kv_events>("enable_kv_events", kVllm),
    {"locality", kVllm, kOptional, &ParseLocality, &EmitLocality},
    {"backpressure", kVllm, kOptional, nullptr, &EmitTierBackpressure},
    {"max_bytes", kVllm, kOptional, &internal::ParseMaxBytes, &internal::EmitMaxBytes},  // vLLM PR #54327
    EnumKey<&FsTierOptions::startup_scan, kStartupScanNames>("startup_scan", kKvtier),
    IntegerKey<&FsTierOptions::io_timeout_ms, kNonNegative>("io_timeout_ms", kKvtier),
    IntegerKey<&FsTierOptions::stores_while_loading_max, kNonNegative>("stores_while_loading_max", kKvtier),
    EnumKey<&FsTierOptions::durability, kDurabilityNames>("durability", kKvtier),
    IntegerKey<&FsTierOptions::store_queue_bytes_max, kPositive>("store_queue_bytes_max", kKvtier),
    EnumKey<&FsTierOptions::io_backend, kIoBackendNames>("io_backend", kKvtier),
    BoolKey<&FsTierOptions::o_direct>("o_direct", kKvtier),
    EnumKey<&FsTierOptions::inline_metadata, kInlineMetadataNames>("inline_metadata", kKvtier),
    EnumKey<&FsTierOptions::bounce_loads, kBounceLoadsNames>("bounce_loads", kKvtier),
    BoolKey<&FsTierOptions::checksum_blocks>("checksum_blocks", kVllm, /*vllm_default=*/"false"),  // PR #57912
    EnumKey<&FsTierOptions::checksum_place, kChecksumPlaceNames>("checksum_place", kKvtier),
    {"seal_key_file", kKvtier, kOptional, &internal::ParseSealKeyFile, &internal::EmitSealKeyFile},
    {"seal_key_fd", kKvtier, kOptional, &internal::ParseSealKeyFd, &internal::EmitSealKeyFd},
    {"seal_read_key_files", kKvtier, kOptional, &internal::ParseSealReadKeyFiles, &internal::EmitSealReadKeyFiles},
    {"seal_key_group_read", kKvtier, kOptional, &internal::ParseSealKeyGroupRead, &internal::EmitSealKeyGroupRead},
    {"kv_events_config", kKvtier, kOptional, &internal::ParseTierKvEvents, &internal::EmitTierKvEvents},
};

constexpr KeySpec<OffloadConfig> kTopLevelKeys[] = {
    {"spec_module_path", kVllm, kOptional, &RejectPythonClass<OffloadConfig>, nullptr},
    EnumKey<&OffloadConfig::spec_name, kSpecNames>("spec_name", kVllm),
    IntegerKey<&OffloadConfig::cpu_bytes_to_use, kPositive>("cpu_bytes_to_use", kVllm, kRequired),
    {"block_size", kVllm, kOptional, &ParseBlockSize, &EmitBlockSize},
    {"blocks_per_chunk", kVllm, kOptional,
     &ParseIntegerField<&OffloadConfig::blocks_per_chunk, kPositive>, &EmitBlocksPerChunk},
    {"cache_policy_module_path", kVllm, kOptional, &RejectPythonClass<OffloadConfig>, nullptr},
    EnumKey<&OffloadConfig::eviction_policy, kEvictionPolicyNames>("eviction_policy", kVllm),
    IntegerKey<&OffloadConfig::store_threshold, kNonNegative>("store_threshold", kVllm),
    IntegerKey<&OffloadConfig::max_tracker_size, kNonNegative>("max_tracker_size", kVllm),
    BoolKey<&OffloadConfig::offload_prompt_only>("offload_prompt_only", kVllm),
    BoolKey<&OffloadConfig::self_describing_kv_events>("self_describing_kv_events", kVllm),
    BoolKey<&OffloadConfig::canonical_layout>("canonical_layout", kVllm),
    EnumKey<&OffloadConfig::gpu_copy, kGpuCopyNames>("gpu_copy", kKvtier),
    // Folded into every tier without its own (ParseSecondaryTiers), so never printed.
    {"backpressure", kVllm, kOptional, nullptr, nullptr},
    {"kv_events_config", kKvtier, kOptional, nullptr, nullptr},  // folded as backpressure is
    {"secondary_tiers", kVllm, kOptional, nullptr, &EmitSecondaryTiers},
};

// ---- Table driver -----------------------------------------------------------

// Alphabetical, so a reader can scan it; kvtier's own keys are marked. A key
// that is always an error (an out-of-tree class) is not "valid", and neither
// is one the caller says never reaches this table (`hidden`: an fs tier's
// `type` under vLLM's factory, which consumes it).
template <class Out, size_t N>
std::string ValidKeyList(const KeySpec<Out> (&keys)[N], std::string_view hidden) {
  std::vector<std::string> names;
  for (const KeySpec<Out>& key : keys) {
    if (key.parse == &RejectPythonClass<Out> || key.name == hidden) continue;
    names.push_back(std::string(key.name) + (key.origin == KeyOrigin::kKvtier ? " (kvtier)" : ""));
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

template <class Out, size_t N>
Status CheckKnownKeys(const Json& obj, std::string_view prefix, const KeySpec<Out> (&keys)[N],
                      std::string_view where, std::string_view hidden = {}) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const KeySpec<Out>& key : keys) known = known || key.name == it.key();
    if (!known) {
      return KeyError(JoinKeyPath(prefix, it.key()), std::string("unknown key ") + std::string(where) +
                                                         "; valid keys are: " + ValidKeyList(keys, hidden));
    }
  }
  return Status::Ok();
}

template <class Out, size_t N>
Status ApplyKeyTable(const Json& obj, std::string_view prefix, const KeySpec<Out> (&keys)[N],
                     Out& out) {
  for (const KeySpec<Out>& key : keys) {
    const auto it = obj.find(std::string(key.name));
    if (it == obj.end()) {
      if (key.presence == Presence::kRequired) {
        return KeyError(JoinKeyPath(prefix, key.name), "missing required key");
      }
      continue;
    }
    if (key.parse != nullptr) KVTIER_RETURN_IF_ERROR(key.parse(*it, JoinKeyPath(prefix, key.name), out));
  }
  return Status::Ok();
}

template <class Out, size_t N>
Json EmitKeyTable(const Out& out, const KeySpec<Out> (&keys)[N]) {
  Json obj = Json::object();
  for (const KeySpec<Out>& key : keys) {
    if (key.emit != nullptr) key.emit(out, key.name, obj);
  }
  return obj;
}

void EmitTierBackpressure(const FsTierOptions& out, std::string_view name, Json& obj) {
  if (out.backpressure.has_value()) obj[std::string(name)] = EmitKeyTable(*out.backpressure, kBackpressureKeys);
}

void EmitSecondaryTiers(const OffloadConfig& out, std::string_view name, Json& obj) {
  Json tiers = Json::array();
  for (const SecondaryTierOptions& tier : out.secondary_tiers) {
    tiers.push_back(EmitKeyTable(tier.fs, kFsTierKeys));
  }
  obj[std::string(name)] = std::move(tiers);
}

// "<prefix>.<key>: <value> (kvtier's default; vLLM's default is <v>)" for each
// row of `keys` with a vllm_default whose value in `out` is kvtier's default.
template <class Out, size_t N>
void AddKvtierDefaultNotes(const Out& out, std::string_view prefix, const KeySpec<Out> (&keys)[N],
                           std::vector<std::string>* notes) {
  const Out defaults{};
  for (const KeySpec<Out>& key : keys) {
    if (key.vllm_default == nullptr || key.emit == nullptr) continue;
    Json value = Json::object(), kvtier_default = Json::object();
    key.emit(out, key.name, value);
    key.emit(defaults, key.name, kvtier_default);
    if (value != kvtier_default) continue;
    const std::string shown = value.empty() ? "unset" : value.begin()->dump();
    notes->push_back(JoinKeyPath(prefix, key.name) + ": " + shown + " (kvtier's default; vLLM's default is " +
                     key.vllm_default + ")");
  }
}

}  // namespace

namespace internal {

Status ApplyTopLevelKeys(const Json& root, OffloadConfig& out) {
  KVTIER_RETURN_IF_ERROR(CheckKnownKeys(root, "", kTopLevelKeys, "at the top level"));
  return ApplyKeyTable(root, "", kTopLevelKeys, out);
}

Status ApplyFsTierKeys(const Json& tier, const std::string& path, FsTierOptions& out, bool type_consumed) {
  KVTIER_RETURN_IF_ERROR(CheckKnownKeys(tier, path, kFsTierKeys, "in an fs tier", type_consumed ? "type" : ""));
  return ApplyKeyTable(tier, path, kFsTierKeys, out);
}

Status ApplyBackpressureKeys(const Json& obj, const std::string& path, BackpressureOptions& out) {
  KVTIER_RETURN_IF_ERROR(CheckKnownKeys(obj, path, kBackpressureKeys, "in a backpressure object"));
  return ApplyKeyTable(obj, path, kBackpressureKeys, out);
}

}  // namespace internal

std::string OffloadConfigToJson(const OffloadConfig& config) {
  return EmitKeyTable(config, kTopLevelKeys).dump(2, ' ', false, Json::error_handler_t::replace);
}

std::vector<std::string> KvtierDefaultNotes(const OffloadConfig& config) {
  std::vector<std::string> notes;
  for (size_t i = 0; i < config.secondary_tiers.size(); ++i) {
    AddKvtierDefaultNotes(config.secondary_tiers[i].fs, "secondary_tiers[" + std::to_string(i) + "]", kFsTierKeys,
                          &notes);
  }
  return notes;
}

std::vector<std::string_view> FsTierConfigKeys() {
  std::vector<std::string_view> names;
  for (const KeySpec<FsTierOptions>& key : kFsTierKeys) {
    if (key.name != "type" && key.name != "module_path") names.push_back(key.name);  // vLLM's factory's
  }
  return names;
}

std::string_view SpecNameToString(SpecName spec_name) { return NameOf(kSpecNames, spec_name); }
std::string_view EvictionPolicyToString(EvictionPolicy policy) { return NameOf(kEvictionPolicyNames, policy); }
std::string_view LocalityToString(Locality locality) { return NameOf(kLocalityNames, locality); }
std::string_view TierTypeToString(TierType type) { return NameOf(kTierTypeNames, type); }

BackpressureOptions DefaultBackpressureOptions(Locality locality) {
  BackpressureOptions out;
  if (locality == Locality::kRemote) {
    out.high_water_s_per_mib = 0.020;
    out.low_water_s_per_mib = 0.005;
  }
  return out;
}

}  // namespace kvtier
