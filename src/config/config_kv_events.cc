// The `kv_events_config` object (kvtier/kv_events.h, docs/kv-events.md): an
// fs tier's own, or the top level's that every tier without one takes.
// vLLM's KVEventsConfig keys with its defaults, then kvtier's four. Unknown
// keys are refused with the valid list, as everywhere in the config.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "config/config_json.h"
#include "config/config_keys.h"

namespace kvtier::internal {
namespace {

struct EventKey {
  std::string_view name;
  bool kvtier;
  Status (*parse)(const Json& value, const std::string& path, KvEventsConfig& out);
  void (*emit)(const KvEventsConfig& out, std::string_view name, Json& obj);  // only when not the default
};

Status OneOf(const Json& value, const std::string& path, std::initializer_list<std::string_view> names,
             std::string* out) {
  if (value.is_string()) {
    for (std::string_view n : names) {
      if (value.get_ref<const std::string&>() == n) {
        *out = std::string(n);
        return Status::Ok();
      }
    }
  }
  std::string list;
  for (std::string_view n : names) list += (list.empty() ? "\"" : ", \"") + std::string(n) + "\"";
  return KeyError(path, "expected one of " + list + ", got " + DescribeValue(value));
}

// A string member; `nullable`: null reads as "" (vLLM's None).
template <std::string KvEventsConfig::*Field, bool Nullable, bool NonEmpty>
Status ParseText(const Json& value, const std::string& path, KvEventsConfig& out) {
  if (Nullable && value.is_null()) {
    (out.*Field).clear();
    return Status::Ok();
  }
  KVTIER_RETURN_IF_ERROR(ReadString(value, path, &(out.*Field)));
  if (NonEmpty && (out.*Field).empty()) return KeyError(path, "must not be empty");
  if ((out.*Field).find('\0') != std::string::npos) return KeyError(path, "must not contain a NUL character");
  return Status::Ok();
}

template <bool KvEventsConfig::*Field>
Status ParseFlag(const Json& value, const std::string& path, KvEventsConfig& out) {
  return ReadBool(value, path, &(out.*Field));
}

template <int64_t KvEventsConfig::*Field, IntRule Rule>
Status ParseCount(const Json& value, const std::string& path, KvEventsConfig& out) {
  return ReadInteger(value, path, Rule, &(out.*Field));
}

Status ParsePublisher(const Json& value, const std::string& path, KvEventsConfig& out) {
  if (value.is_null()) {
    out.publisher.clear();
    return Status::Ok();
  }
  return OneOf(value, path, {"zmq", "null"}, &out.publisher);
}

Status ParseMedium(const Json& value, const std::string& path, KvEventsConfig& out) {
  return OneOf(value, path, {"STORAGE", "FS", "SHARED_STORAGE"}, &out.medium);
}

constexpr std::string_view kEncodingNames[] = {"auto", "int", "bytes"};

Status ParseEncoding(const Json& value, const std::string& path, KvEventsConfig& out) {
  std::string name;
  KVTIER_RETURN_IF_ERROR(OneOf(value, path, {"auto", "int", "bytes"}, &name));
  const auto at = std::find(std::begin(kEncodingNames), std::end(kEncodingNames), name);
  out.block_hash_encoding = static_cast<KvEventHashEncoding>(at - std::begin(kEncodingNames));
  return Status::Ok();
}

template <auto Field>
void EmitIfSet(const KvEventsConfig& out, std::string_view name, Json& obj) {
  if (!(out.*Field == KvEventsConfig{}.*Field)) obj[std::string(name)] = out.*Field;
}

void EmitEncoding(const KvEventsConfig& out, std::string_view name, Json& obj) {
  if (out.block_hash_encoding != KvEventHashEncoding::kAuto) {
    obj[std::string(name)] = kEncodingNames[static_cast<size_t>(out.block_hash_encoding)];
  }
}

using C = KvEventsConfig;
constexpr EventKey kEventKeys[] = {
    {"enable_kv_cache_events", false, &ParseFlag<&C::enable_kv_cache_events>, &EmitIfSet<&C::enable_kv_cache_events>},
    {"publisher", false, &ParsePublisher, &EmitIfSet<&C::publisher>},
    {"endpoint", false, &ParseText<&C::endpoint, false, true>, &EmitIfSet<&C::endpoint>},
    {"replay_endpoint", false, &ParseText<&C::replay_endpoint, true, false>, &EmitIfSet<&C::replay_endpoint>},
    {"buffer_steps", false, &ParseCount<&C::buffer_steps, IntRule::kPositive>, &EmitIfSet<&C::buffer_steps>},
    {"hwm", false, &ParseCount<&C::hwm, IntRule::kNonNegative>, &EmitIfSet<&C::hwm>},
    {"max_queue_size", false, &ParseCount<&C::max_queue_size, IntRule::kPositive>, &EmitIfSet<&C::max_queue_size>},
    {"topic", false, &ParseText<&C::topic, false, false>, &EmitIfSet<&C::topic>},
    {"medium", true, &ParseMedium, &EmitIfSet<&C::medium>},
    {"volume_id", true, &ParseText<&C::volume_id, false, false>, &EmitIfSet<&C::volume_id>},
    {"block_hash_encoding", true, &ParseEncoding, &EmitEncoding},
    {"announce_existing", true, &ParseFlag<&C::announce_existing>, &EmitIfSet<&C::announce_existing>},
};

// Alphabetical, kvtier's own marked, as the other tables list theirs.
std::string ValidEventKeys() {
  std::vector<std::string> names;
  for (const EventKey& k : kEventKeys) names.push_back(std::string(k.name) + (k.kvtier ? " (kvtier)" : ""));
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

Status ParseKvEventsConfig(const Json& value, const std::string& path, KvEventsConfig& out) {
  if (!value.is_object()) return KeyError(path, "expected an object, got " + DescribeValue(value));
  for (auto it = value.begin(); it != value.end(); ++it) {
    const auto key = std::find_if(std::begin(kEventKeys), std::end(kEventKeys),
                                  [&](const EventKey& k) { return k.name == it.key(); });
    if (key == std::end(kEventKeys)) {
      return KeyError(JoinKeyPath(path, it.key()),
                      "unknown key in kv_events_config; valid keys are: " + ValidEventKeys());
    }
    KVTIER_RETURN_IF_ERROR(key->parse(*it, JoinKeyPath(path, key->name), out));
  }
  return Status::Ok();
}

Json EmitKvEventsConfig(const KvEventsConfig& config) {
  Json obj = Json::object();
  for (const EventKey& k : kEventKeys) k.emit(config, k.name, obj);
  return obj;
}

}  // namespace kvtier::internal
