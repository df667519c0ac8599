// Extra-key generation, a line-by-line port of vLLM's rules (see header).
#include "hash/extra_keys.h"

#include "hash/digest.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace kvtier::internal {

Status ValidateExtras(const RequestExtras& extras) {
  for (size_t i = 0; i < extras.mm_features.size(); ++i) {
    const MmFeature& f = extras.mm_features[i];
    const std::string where = "mm_features[" + std::to_string(i) + "]";
    if (f.offset < 0 || f.length < 0 || f.length > INT64_MAX - f.offset) {
      return InvalidArgument(where + ": offset and length must be >= 0 and their sum fit 64 bits");
    }
    if (!IsValidUtf8(f.identifier)) return InvalidArgument(where + ": identifier is not valid UTF-8");
  }
  for (const auto* text : {&extras.lora_name, &extras.cache_salt}) {
    if (*text && !IsValidUtf8(**text)) {
      return InvalidArgument(std::string(text == &extras.lora_name ? "lora_name" : "cache_salt") +
                             " is not valid UTF-8");
    }
  }
  if (extras.has_prompt_embeds) {
    size_t per_token = extras.prompt_embeds_bytes_per_token;
    if (per_token == 0 || extras.prompt_embeds.size() % per_token != 0) {
      return InvalidArgument(
          "prompt_embeds: bytes_per_token must be > 0 and divide the embeddings' size");
    }
  }
  return Status::Ok();
}

// vLLM's _gen_mm_extra_hash_keys.
static void GenerateMmKeys(const std::vector<MmFeature>& mm, int64_t start, int64_t end,
                           int64_t* mm_idx, std::vector<ExtraKey>* keys) {
  if (mm.empty()) return;
  const MmFeature& last = mm.back();
  if (last.offset + last.length <= start) return;
  int64_t idx = *mm_idx < 0 ? static_cast<int64_t>(mm.size()) + *mm_idx : *mm_idx;
  if (idx < 0) idx = 0;  // vLLM asserts here; clamping keeps us memory-safe
  while (idx < static_cast<int64_t>(mm.size())) {
    const MmFeature& f = mm[static_cast<size_t>(idx)];
    if (end <= f.offset) break;  // the block has not reached this item
    if (start >= f.offset + f.length) {  // the block is past this item
      ++idx;
      continue;
    }
    ExtraKey key;
    key.kind = ExtraKey::Kind::kMm;
    key.text = f.identifier;
    key.offset = f.offset - start;
    keys->push_back(key);
    if (end >= f.offset + f.length) {
      ++idx;  // the item ends in this block; the next one may start here too
    } else {
      break;
    }
  }
  *mm_idx = idx;
}

static ExtraKey PromptEmbedsKey(const RequestExtras& extras, int64_t start, int64_t end) {
  // Like a tensor slice, the range is clamped to the embeddings' length.
  size_t per_token = extras.prompt_embeds_bytes_per_token;
  size_t total = extras.prompt_embeds.size();
  size_t from = std::min(total, static_cast<size_t>(start) * per_token);
  size_t to = std::min(total, static_cast<size_t>(end) * per_token);
  ExtraKey key;
  key.kind = ExtraKey::Kind::kBytes32;
  Sha256(extras.prompt_embeds.subspan(from, to - from), key.digest.data());
  return key;
}

void GenerateExtraKeys(const RequestExtras& extras, int64_t start, int64_t end, int64_t* mm_idx,
                       std::vector<ExtraKey>* keys) {
  keys->clear();
  if (extras.lora_name) keys->push_back(ExtraKey{ExtraKey::Kind::kStr, *extras.lora_name, 0, {}});
  GenerateMmKeys(extras.mm_features, start, end, mm_idx, keys);
  if (start == 0 && extras.cache_salt && !extras.cache_salt->empty()) {
    keys->push_back(ExtraKey{ExtraKey::Kind::kStr, *extras.cache_salt, 0, {}});
  }
  if (extras.has_prompt_embeds) keys->push_back(PromptEmbedsKey(extras, start, end));
}

// Python's repr of a str (for traces only): single quotes unless the text
// has ' and no "; control characters escaped.
static std::string PyStrRepr(std::string_view s) {
  bool single = s.find('\'') == std::string_view::npos || s.find('"') != std::string_view::npos;
  char quote = single ? '\'' : '"';
  std::string out(1, quote);
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;  // printable ASCII and UTF-8 bytes, as Python prints them
    }
  }
  out += quote;
  return out;
}

std::string ExtraKeysRepr(const std::vector<ExtraKey>& keys) {
  if (keys.empty()) return "None";
  std::string out = "(";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += ", ";
    const ExtraKey& k = keys[i];
    if (k.kind == ExtraKey::Kind::kStr) out += PyStrRepr(k.text);
    if (k.kind == ExtraKey::Kind::kMm) {
      // Appended piece by piece: GCC 12 at -O2 misreports `"(" + std::string&&`
      // as an overlapping memcpy (-Wrestrict, a GCC 12 false positive).
      out += '(';
      out += PyStrRepr(k.text);
      out += ", ";
      out += std::to_string(k.offset);
      out += ')';
    }
    if (k.kind == ExtraKey::Kind::kBytes32) out += "bytes.fromhex('" + HexEncode(k.digest) + "')";
  }
  if (keys.size() == 1) out += ",";
  return out + ")";
}

}  // namespace kvtier::internal
