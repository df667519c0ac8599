// `kvtier hash --engine sglang` over the library's SglangPageKeys.
#include "cli/sglang_hash.h"

#include "format/layout_names.h"
#include "kvtier/sglang_hash.h"
#include "util/hex.h"

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

}  // namespace

Result<nlohmann::json> RunSglangHashQuery(const SglangHashQuery& q) {
  if (q.page_size == 0) return InvalidArgument("--page-size: give SGLang's page size in tokens (>= 1)");
  KVTIER_ASSIGN_OR_RETURN(std::vector<int64_t> ids, U32Tokens(q.token_ids));
  nlohmann::json report = {{"engine", "sglang"}, {"page_size", q.page_size}, {"num_tokens", ids.size()}};
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> head, ChainHead(q, &report));
  Result<std::vector<std::string>> keys = SglangPageKeys(ids, q.page_size, head);
  if (!keys.ok()) return keys.status();
  report["prior_hash_hex"] = head ? nlohmann::json(*head) : nlohmann::json();
  report["page_keys"] = *keys;
  nlohmann::json& pages = report["pages"] = nlohmann::json::array();
  for (size_t i = 0; i < keys->size(); ++i) {
    const size_t first = i * q.page_size, last = std::min(ids.size(), first + q.page_size) - 1;
    pages.push_back({{"key", (*keys)[i]},
                     {"first_token", first},
                     {"last_token", last},
                     {"block_dir_relpath", format::BlockRelPath((*keys)[i], 0)}});  // sglang-format §4: group 0
  }
  return report;
}

std::string FormatSglangHashReport(const nlohmann::json& report) {
  std::string out;
  for (const nlohmann::json& key : report["page_keys"]) out += key.get<std::string>() + "\n";
  return out;
}

}  // namespace kvtier::internal
