// SglangNamespace: SGLang's fields (FORMAT.md L103-L104), its rank rule
// (L105), page names (L106) and page size (L107), over the same digest,
// directory names and config.json writer as vLLM's namespaces (L2-L4,
// L20-L28), so every tool that walks vLLM's tree walks SGLang's.
#include <array>
#include <type_traits>
#include <string>

#include "format/layout_names.h"
#include "kvtier/sglang.h"
#include "layout/py_json.h"

namespace kvtier {
namespace {

constexpr std::array<std::string_view, 4> kMemLayouts = {"layer_first", "page_first", "page_first_direct",
                                                          "page_head"};
// A page above 1 TiB is a caller's mistake (a byte count passed as tokens),
// and keeps page_bytes far from overflowing.
constexpr uint64_t kPageBytesMax = uint64_t{1} << 40;

Status CheckText(std::string_view what, std::string_view text, bool required) {
  if (required && text.empty()) return InvalidArgument(std::string(what) + " must not be empty");
  if (text.find('\0') != std::string_view::npos) {
    return InvalidArgument(std::string(what) + " must not contain NUL characters");
  }
  std::string scratch;
  Status s = internal::PyJsonEscape(text, &scratch);
  return s.ok() ? s : s.WithContext(what);
}

Status CheckSizeRank(const char* size_name, int64_t size, const char* rank_name, int64_t rank) {
  if (size < 1) return InvalidArgument(std::string(size_name) + " must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    return InvalidArgument(std::string(rank_name) + " must be in [0, " + size_name + "), got " +
                           std::to_string(rank) + " with " + size_name + " " + std::to_string(size));
  }
  return Status::Ok();
}

Status CheckPositive(const char* name, int64_t value) {
  if (value >= 1) return Status::Ok();
  return InvalidArgument(std::string(name) + " must be >= 1, got " + std::to_string(value));
}

Status CheckLayout(const SglangPageSpec& s) {
  if (!SglangMemLayoutKnown(s.mem_layout)) {
    return InvalidArgument("mem_layout must be one of layer_first, page_first, page_first_direct, page_head, got \"" +
                           s.mem_layout + "\"");
  }
  if (s.is_mla && s.mem_layout == "page_head") {
    return InvalidArgument("mem_layout page_head is not an MLA layout (is_mla is true)");
  }
  if (s.is_mla && s.v_bytes_per_token != 0) {
    return InvalidArgument("v_bytes_per_token must be 0 when is_mla (MLA has no separate V), got " +
                           std::to_string(s.v_bytes_per_token));
  }
  if (!s.is_mla) return CheckPositive("v_bytes_per_token", s.v_bytes_per_token);
  return Status::Ok();
}

Status Validate(const SglangPageSpec& s) {
  KVTIER_RETURN_IF_ERROR(CheckText("model_name", s.model_name, true));
  if (s.model_path) KVTIER_RETURN_IF_ERROR(CheckText("model_path", *s.model_path, false));
  if (s.model_revision) KVTIER_RETURN_IF_ERROR(CheckText("model_revision", *s.model_revision, false));
  KVTIER_RETURN_IF_ERROR(CheckText("dtype", s.dtype, true));
  KVTIER_RETURN_IF_ERROR(CheckPositive("page_size", s.page_size));
  KVTIER_RETURN_IF_ERROR(CheckPositive("layer_num", s.layer_num));
  KVTIER_RETURN_IF_ERROR(CheckPositive("k_bytes_per_token", s.k_bytes_per_token));
  KVTIER_RETURN_IF_ERROR(CheckLayout(s));
  KVTIER_RETURN_IF_ERROR(CheckSizeRank("tp_size", s.tp_size, "tp_rank", s.tp_rank));
  KVTIER_RETURN_IF_ERROR(CheckSizeRank("pp_size", s.pp_size, "pp_rank", s.pp_rank));
  return CheckSizeRank("cp_size", s.cp_size, "cp_rank", s.cp_rank);
}

// L107, in 128 bits so that no product of int64 fields wraps.
Result<uint64_t> PageBytes(const SglangPageSpec& s) {
  using U128 = unsigned __int128;
  const U128 per_token = static_cast<U128>(s.k_bytes_per_token) + static_cast<U128>(s.v_bytes_per_token);
  const U128 tokens = static_cast<U128>(s.page_size) * static_cast<U128>(s.layer_num);
  // Each factor is below 2^64, so checking them first keeps the product exact.
  const U128 bytes = per_token > kPageBytesMax || tokens > kPageBytesMax ? U128{kPageBytesMax} + 1 : per_token * tokens;
  if (bytes > kPageBytesMax) {
    return InvalidArgument("page_size * layer_num * (k_bytes_per_token + v_bytes_per_token) must be at most 2^40 bytes");
  }
  return static_cast<uint64_t>(bytes);
}

// L104: the fields, exactly; tp_size collapses to 1 for MLA (L105).
nlohmann::json Fields(const SglangPageSpec& s, uint64_t page_bytes) {
  nlohmann::json fields = {
      {"inference_engine", format::kSglangEngine}, {"format", format::kSglangFormat},
      {"model_name", s.model_name}, {"page_size", s.page_size},
      {"mem_layout", s.mem_layout}, {"dtype", s.dtype},
      {"k_bytes_per_token", s.k_bytes_per_token}, {"v_bytes_per_token", s.v_bytes_per_token},
      {"layer_num", s.layer_num}, {"is_mla", s.is_mla},
      {"tp_size", s.is_mla ? int64_t{1} : s.tp_size}, {"pp_size", s.pp_size},
      {"cp_size", s.cp_size}, {"page_bytes", page_bytes}};
  if (s.model_path) fields["model_path"] = *s.model_path;
  if (s.model_revision) fields["model_revision"] = *s.model_revision;
  return fields;
}

// L105.
int64_t RankOf(const SglangPageSpec& s) {
  const int64_t tp_size = s.is_mla ? 1 : s.tp_size;
  const int64_t tp_rank = s.is_mla ? 0 : s.tp_rank;
  return (s.pp_rank * s.cp_size + s.cp_rank) * tp_size + tp_rank;
}

template <class T>
Status Field(const nlohmann::json& j, const char* key, T* out) {
  const auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(std::string("SGLang fields: \"") + key + "\" is missing");
  const bool ok = std::is_same_v<T, bool>          ? it->is_boolean()
                  : std::is_same_v<T, std::string> ? it->is_string()
                                                   : it->is_number_integer();
  if (!ok) return InvalidArgument(std::string("SGLang fields: \"") + key + "\" has the wrong type");
  *out = it->template get<T>();
  return Status::Ok();
}

Status OptionalField(const nlohmann::json& j, const char* key, std::optional<std::string>* out) {
  if (!j.contains(key)) return Status::Ok();
  std::string value;
  KVTIER_RETURN_IF_ERROR(Field(j, key, &value));
  *out = std::move(value);
  return Status::Ok();
}

Status ParseInto(const nlohmann::json& j, SglangPageSpec* s) {
  std::string engine, format;
  KVTIER_RETURN_IF_ERROR(Field(j, "inference_engine", &engine));
  if (engine != format::kSglangEngine) return InvalidArgument("SGLang fields: \"inference_engine\" is not \"sglang\"");
  KVTIER_RETURN_IF_ERROR(Field(j, "format", &format));
  if (format != format::kSglangFormat) return InvalidArgument("SGLang fields: unknown \"format\" \"" + format + "\"");
  KVTIER_RETURN_IF_ERROR(Field(j, "model_name", &s->model_name));
  KVTIER_RETURN_IF_ERROR(OptionalField(j, "model_path", &s->model_path));
  KVTIER_RETURN_IF_ERROR(OptionalField(j, "model_revision", &s->model_revision));
  KVTIER_RETURN_IF_ERROR(Field(j, "page_size", &s->page_size));
  KVTIER_RETURN_IF_ERROR(Field(j, "mem_layout", &s->mem_layout));
  KVTIER_RETURN_IF_ERROR(Field(j, "dtype", &s->dtype));
  KVTIER_RETURN_IF_ERROR(Field(j, "k_bytes_per_token", &s->k_bytes_per_token));
  KVTIER_RETURN_IF_ERROR(Field(j, "v_bytes_per_token", &s->v_bytes_per_token));
  KVTIER_RETURN_IF_ERROR(Field(j, "layer_num", &s->layer_num));
  KVTIER_RETURN_IF_ERROR(Field(j, "is_mla", &s->is_mla));
  KVTIER_RETURN_IF_ERROR(Field(j, "tp_size", &s->tp_size));
  KVTIER_RETURN_IF_ERROR(Field(j, "pp_size", &s->pp_size));
  return Field(j, "cp_size", &s->cp_size);
}

}  // namespace

Result<SglangPageSpec> ParseSglangFields(std::string_view config_json) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("SGLang fields: not a JSON object");
  SglangPageSpec spec;
  KVTIER_RETURN_IF_ERROR(ParseInto(j, &spec));
  int64_t recorded = 0;
  KVTIER_RETURN_IF_ERROR(Field(j, "page_bytes", &recorded));
  KVTIER_RETURN_IF_ERROR(Validate(spec));
  KVTIER_ASSIGN_OR_RETURN(uint64_t page_bytes, PageBytes(spec));
  if (recorded < 0 || static_cast<uint64_t>(recorded) != page_bytes) {
    return InvalidArgument("SGLang fields: \"page_bytes\" " + std::to_string(recorded) + " disagrees with the other fields (" +
                           std::to_string(page_bytes) + ")");
  }
  return spec;
}

bool SglangMemLayoutKnown(std::string_view mem_layout) {
  for (std::string_view known : kMemLayouts) {
    if (mem_layout == known) return true;
  }
  return false;
}

std::string SglangPageName(std::string_view key) { return format::SglangPageName(key); }

Result<SglangNamespace> SglangNamespace::Create(SglangPageSpec spec) {
  KVTIER_RETURN_IF_ERROR(Validate(spec));
  KVTIER_ASSIGN_OR_RETURN(uint64_t page_bytes, PageBytes(spec));
  const nlohmann::json fields = Fields(spec, page_bytes);
  Namespace ns;
  KVTIER_ASSIGN_OR_RETURN(ns.canonical_json_, internal::PyJsonDumpsCompact(fields));
  KVTIER_ASSIGN_OR_RETURN(ns.config_json_, internal::PyJsonDumpsIndent2(fields));
  ns.digest_ = format::NamespaceDigestOf(ns.canonical_json_);  // L22
  ns.dir_name_ = format::SafeModelName(spec.model_name) + "_" + ns.digest_;  // L2, L3
  ns.spec_.model_name = spec.model_name;
  ns.spec_.dtype = spec.dtype;
  ns.spec_.inference_engine = std::string(format::kSglangEngine);
  ns.spec_.tokens_per_hash = spec.page_size;  // a page's tokens: the block_size of its KV events
  ns.spec_.rank = RankOf(spec);
  ns.spec_.parallel_agnostic = false;
  return SglangNamespace(std::move(spec), std::move(ns), page_bytes);
}

OffloadKey SglangNamespace::PageKey(std::string_view key) {
  OffloadKey out;
  out.hash = BlockHash::FromHex(format::SglangPageName(key)).value();  // 64 hex: always valid
  out.group_idx = 0;
  return out;
}

std::string SglangNamespace::PageRelPath(std::string_view key) const {
  return fs_ns_.BlockRelPath(PageKey(key));  // L106, L8 with group 0
}

}  // namespace kvtier
