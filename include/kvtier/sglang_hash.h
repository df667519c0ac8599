// SGLang's HiCache page keys: the strings SGLang asks an L3 storage backend
// to store, computed byte-exact with SGLang's get_hash_str (d315eb725044).
//
// A page of page_size tokens is named by a chained SHA-256 over its token
// ids, each as 4 little-endian bytes:
//   key[n] = hex(SHA-256(P || u32le(t) for each token t of page n))
// where P is the bytes of key[n-1] for n > 0, of the prior hash for n = 0
// when one is given, and empty otherwise. A trailing partial page is hashed
// too (SGLang's loop does; HiCache itself only passes whole pages). In EAGLE
// bigram mode a token is a pair (a, b) and contributes u32le(a) || u32le(b).
//
// Namespace seeding (sgl-project/sglang#38577): a fresh chain of a request
// with an extra_key (e.g. its LoRA id) or a cache_salt is headed by a seed
// derived from them. kvtier's encoding of that seed is its reading of the
// PR's description, NOT verified against SGLang's code:
//   seed = SHA-256("sglang-storage-namespace-v1\0" || part(extra_key) || part(cache_salt))
//   part(absent) = 0x00;  part(x) = 0x01 || u32le(len(utf8(x))) || utf8(x)
// used as the prior hash of page 0; neither given: no seed (the unseeded
// chain of SGLang's default namespace). A seed SGLang itself prints can be
// given as the prior hash instead, which is exact whatever the encoding.
//
// Thread safety: pure functions; call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/result.h"

namespace kvtier {

// The largest token id SGLang can hash (4 bytes, unsigned).
inline constexpr int64_t kSglangTokenIdMax = 0xFFFFFFFFll;

// The page keys (64 lowercase hex characters each) of `token_ids`.
// ids_per_token is 1, or 2 for EAGLE bigram pairs laid out flat (a0, b0,
// a1, b1, ...). prior_hash_hex: hex of the chain's head (any even length,
// either case; "" or nullopt: none), as SGLang's bytes.fromhex reads it.
// Errors (kInvalidArgument, naming the argument): page_size 0, ids_per_token
// not 1 or 2, token_ids.size() not a multiple of ids_per_token, an id outside
// [0, kSglangTokenIdMax] ("token_ids[i]"), a prior hash that is not hex.
KVTIER_API Result<std::vector<std::string>> SglangPageKeys(std::span<const int64_t> token_ids, uint32_t page_size,
                                                           std::optional<std::string_view> prior_hash_hex = {},
                                                           uint32_t ids_per_token = 1);

// The namespace seed (64 lowercase hex characters) of a request's extra_key
// and cache_salt as described at the top of this file; nullopt when both are
// absent (an empty string is present: it gives another seed than absent).
// kInvalidArgument naming the argument when one is not valid UTF-8 (SGLang's
// are Python str) or is longer than 2^32-1 bytes.
KVTIER_API Result<std::optional<std::string>> SglangNamespaceSeed(std::optional<std::string_view> extra_key,
                                                                  std::optional<std::string_view> cache_salt);

}  // namespace kvtier
