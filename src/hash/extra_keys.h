// The extra keys of one block, generated exactly as vLLM's
// generate_block_hash_extra_keys: LoRA name, then multimodal items
// (identifier, offset relative to the block start), then the cache salt (block
// at token 0 only), then the prompt-embeds SHA-256.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/hashing.h"

namespace kvtier::internal {

struct ExtraKey {
  enum class Kind { kStr, kMm, kBytes32 };
  Kind kind = Kind::kStr;
  std::string_view text;       // kStr, kMm: the string (points into RequestExtras)
  int64_t offset = 0;          // kMm: item offset minus block start (may be negative)
  std::array<uint8_t, 32> digest{};  // kBytes32
};

// Validates the extras once per request (offsets, lengths, embeds sizing).
Status ValidateExtras(const RequestExtras& extras);

// Fills `keys` for the block [start, end) and advances `*mm_idx` (vLLM's
// curr_mm_idx; -1 means "the last item").
void GenerateExtraKeys(const RequestExtras& extras, int64_t start, int64_t end, int64_t* mm_idx,
                       std::vector<ExtraKey>* keys);

// Python repr of the extra_keys value ("None" or a tuple), for traces.
std::string ExtraKeysRepr(const std::vector<ExtraKey>& keys);

}  // namespace kvtier::internal
