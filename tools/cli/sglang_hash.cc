// `kvtier hash --engine sglang` over the library's SglangPageKeys.
#include "cli/sglang_hash.h"

#include <sys/stat.h>

#include "format/layout_names.h"
#include "io/io_watch.h"
#include "kvtier/sglang_hash.h"
#include "util/hex.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

// The CLI's token ids as SGLang's u32 ids, naming the first one out of range
// by its place on the command line ("tokens[i]").
Result<std::vector<int64_t>> U32Tokens(const std::vector<BigInt>& tokens) {
  std::vector<int64_t> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::optional<int64_t> t = tokens[i].ToInt64();
    if (!t || *t < 0 || *t > kSglangTokenIdMax) {
      return InvalidArgument("tokens[" + std::to_string(i) + "]: " + tokens[i].ToDecimal() +
                             " is outside SGLang's 4-byte token id range [0, 4294967295]");
    }
    out.push_back(*t);
  }
  return out;
}

// The chain's head: --prior-hash, else the seed of --extra-key/--cache-salt.
Result<std::optional<std::string>> ChainHead(const SglangHashQuery& q, nlohmann::json* report) {
  (*report)["namespace_seed"] = nullptr;
  if (q.prior_hash) {
    if (!HexDecode(*q.prior_hash)) return InvalidArgument("--prior-hash: expected hex digits (an even number of them)");
    if (q.extra_key || q.cache_salt) {
      return InvalidArgument("--prior-hash continues a chain, --extra-key/--cache-salt seed a fresh one: give one or "
                             "the other");
    }
    return q.prior_hash;
  }
  Result<std::optional<std::string>> seed = SglangNamespaceSeed(q.extra_key, q.cache_salt);
  if (!seed.ok()) return seed.status();  // it names extra_key or cache_salt
  if (*seed) {
    (*report)["namespace_seed"] = {{"extra_key", q.extra_key ? nlohmann::json(*q.extra_key) : nlohmann::json()},
                                   {"cache_salt", q.cache_salt ? nlohmann::json(*q.cache_salt) : nlohmann::json()},
                                   {"seed_hex", **seed},
                                   {"verified", false}};  // kvtier's reading of #38577, see sglang_hash.h
  }
  return *seed;
}

// The page size the keys are cut by: --page-size, the namespace's, or both
// when they agree.
Result<uint32_t> PageSize(const SglangHashQuery& q) {
  const int64_t ns_size = q.ns ? q.ns->page_size : 0;
  if (q.page_size != 0 && ns_size != 0 && q.page_size != ns_size) {
    return InvalidArgument("--page-size " + std::to_string(q.page_size) + " contradicts the namespace's page_size " +
                           std::to_string(ns_size) + " (drop the flag: the namespace decides)");
  }
  const int64_t size = q.page_size != 0 ? q.page_size : ns_size;
  if (size < 1 || size > UINT32_MAX) return InvalidArgument("--page-size: give SGLang's page size in tokens (>= 1)");
  return static_cast<uint32_t>(size);
}

// A page's paths in the namespace; with a root its absolute path, stat'ed
// under an IoScope (kvtier hash --root runs watched: a hung mount times out).
void AddPaths(const SglangNamespace& ns, const std::optional<std::string>& root, nlohmann::json* page) {
  const std::string rel = ns.PageRelPath((*page)["key"].get<std::string>());
  (*page)["relpath"] = rel;
  if (!root) return;
  const std::string path = JoinRoot(*root, rel);
  (*page)["path"] = path;
  IoScope io(path);
  struct stat st;
  (*page)["exists"] = !io.cancelled() && ::stat(path.c_str(), &st) == 0;
}

Result<std::optional<SglangNamespace>> MakeNamespace(const SglangHashQuery& q, uint32_t page_size,
                                                      nlohmann::json* report) {
  if (!q.ns) {
    if (q.root_dir) return InvalidArgument("--root needs the namespace: --model and its flags, or --namespace-config");
    return std::optional<SglangNamespace>();
  }
  SglangPageSpec spec = *q.ns;
  spec.page_size = page_size;
  Result<SglangNamespace> ns = SglangNamespace::Create(std::move(spec));
  if (!ns.ok()) return ns.status().WithContext("the SGLang namespace");
  (*report)["namespace_dir"] = ns->dir_name();
  (*report)["block_dir"] = ns->block_dir_name();
  (*report)["config_json"] = ns->config_json();
  (*report)["page_bytes"] = ns->page_bytes();
  return std::optional<SglangNamespace>(std::move(*ns));
}

}  // namespace

Result<nlohmann::json> RunSglangHashQuery(const SglangHashQuery& q) {
  KVTIER_ASSIGN_OR_RETURN(const uint32_t page_size, PageSize(q));
  KVTIER_ASSIGN_OR_RETURN(std::vector<int64_t> ids, U32Tokens(q.token_ids));
  nlohmann::json report = {{"engine", "sglang"}, {"page_size", page_size}, {"num_tokens", ids.size()}};
  KVTIER_ASSIGN_OR_RETURN(std::optional<SglangNamespace> ns, MakeNamespace(q, page_size, &report));
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> head, ChainHead(q, &report));
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> keys, SglangPageKeys(ids, page_size, head));
  report["prior_hash_hex"] = head ? nlohmann::json(*head) : nlohmann::json();
  report["page_keys"] = keys;
  nlohmann::json& pages = report["pages"] = nlohmann::json::array();
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t first = i * page_size, last = std::min(ids.size(), first + page_size) - 1;
    nlohmann::json page = {{"key", keys[i]},
                           {"first_token", first},
                           {"last_token", last},
                           {"block_dir_relpath", format::BlockRelPath(keys[i], 0)}};  // L106: group 0
    if (ns) AddPaths(*ns, q.root_dir, &page);
    pages.push_back(std::move(page));
  }
  return report;
}

namespace {

// With --model, the flags SglangNamespace needs and has no default for.
Status RequireGeometry(const SglangNamespaceFlags& f) {
  const std::pair<const char*, bool> required[] = {
      {"--mem-layout", f.mem_layout.has_value()},
      {"--k-bytes-per-token", f.k_bytes_per_token.has_value()},
      {"--v-bytes-per-token (0 with --mla)", f.v_bytes_per_token.has_value() || f.mla},
      {"--layer-num", f.layer_num.has_value()}};
  for (const auto& [flag, given] : required) {
    if (!given) return InvalidArgument("--model with --engine sglang needs " + std::string(flag));
  }
  return Status::Ok();
}

// Ranks are no fields (L104): they only place the block directory (L105).
std::optional<SglangPageSpec> WithRanks(const SglangNamespaceFlags& f, int64_t tp_rank, SglangPageSpec spec) {
  spec.tp_rank = tp_rank, spec.pp_rank = f.pp_rank, spec.cp_rank = f.cp_rank;
  return spec;
}

}  // namespace

Result<std::optional<SglangPageSpec>> SglangSpecFromFlags(const SglangNamespaceFlags& f) {
  SglangPageSpec spec;
  if (f.config_text) {
    if (!f.first_geometry_flag.empty()) {
      return InvalidArgument(f.first_geometry_flag + " contradicts --namespace-config (the file defines the namespace)");
    }
    Result<SglangPageSpec> parsed = ParseSglangFields(*f.config_text);
    if (!parsed.ok()) return parsed.status().WithContext("--namespace-config " + f.config_file);
    spec = std::move(*parsed);
    if (spec.is_mla) return WithRanks(f, 0, std::move(spec));  // L105: every TP rank reads TP rank 0's pages
  } else if (f.model) {
    KVTIER_RETURN_IF_ERROR(RequireGeometry(f));
    spec.model_name = *f.model;
    spec.model_path = f.model_path;
    spec.model_revision = f.model_revision;
    spec.mem_layout = *f.mem_layout;
    spec.dtype = f.dtype;
    spec.k_bytes_per_token = *f.k_bytes_per_token;
    spec.v_bytes_per_token = f.v_bytes_per_token.value_or(0);
    spec.layer_num = *f.layer_num;
    spec.is_mla = f.mla;
    spec.tp_size = f.tp_size, spec.pp_size = f.pp_size, spec.cp_size = f.cp_size;
  } else {
    if (!f.first_geometry_flag.empty()) return InvalidArgument(f.first_geometry_flag + " needs --model");
    return std::optional<SglangPageSpec>();
  }
  return WithRanks(f, f.tp_rank, std::move(spec));
}

std::string FormatSglangHashReport(const nlohmann::json& report) {
  std::string out;
  for (const nlohmann::json& page : report["pages"]) {
    out += page["key"].get<std::string>();
    if (page.contains("path")) {
      // The model name and the root are the user's bytes: quoted as the
      // operators' reports quote names (util/name_escape.h).
      out += "  " + QuoteName(page["path"].get<std::string>()) +
             (page["exists"].get<bool>() ? "  [present]" : "  [absent]");
    } else if (page.contains("relpath")) {
      out += "  " + QuoteName(page["relpath"].get<std::string>());
    }
    out += "\n";
  }
  return out;
}

}  // namespace kvtier::internal
