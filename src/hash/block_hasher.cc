// The chained block hasher: serialize (parent, tokens, extra_keys), digest,
// repeat. One ByteSink is reused for every block of a call.
#include <cstring>
#include <type_traits>

#include "hash/byte_sink.h"
#include "hash/cbor_writer.h"
#include "hash/digest.h"
#include "hash/extra_keys.h"
#include "hash/pickle_writer.h"
#include "kvtier/hashing.h"

namespace kvtier {
namespace {

using internal::ByteSink;
using internal::ExtraKey;

// BININT1 / BININT2 / BININT without data-dependent branches: token ids are
// random, so branching on each one's width mispredicts about half the time.
inline uint8_t* PutPickleInt32(uint8_t* p, int64_t v) {
  static constexpr uint8_t kOp[3] = {0x4b, 0x4d, 0x4a};
  // As unsigned, a negative value is above both bounds: width 2 (BININT).
  const uint64_t u = static_cast<uint64_t>(v);
  const unsigned width = (u > 0xff) + (u > 0xffff);
  const uint32_t le = static_cast<uint32_t>(v);  // x86 is little-endian, as pickle
  p[0] = kOp[width];
  std::memcpy(p + 1, &le, 4);  // the buffer has room for all 4 bytes
  return p + 2 + width + (width >> 1);  // 2, 3 or 5 bytes
}

// A CBOR integer head, branch-free for the same reason (major type 0 or 1).
inline uint8_t* PutCborInt(uint8_t* p, int64_t v) {
  const uint64_t major = static_cast<uint64_t>(v) >> 63;                 // 1 if negative
  const uint64_t arg = static_cast<uint64_t>(v) ^ (0 - major);           // -1 - v when negative
  const int extra = (arg >= 24) + (arg > 0xff) + (arg > 0xffff) + (arg > 0xffffffffu);
  static constexpr uint8_t kBytes[5] = {0, 1, 2, 4, 8};
  const int n = kBytes[extra];
  p[0] = static_cast<uint8_t>(major << 5 | (extra == 0 ? arg : 23 + extra));
  const uint64_t be = __builtin_bswap64(n == 0 ? 0 : arg << (64 - 8 * n));
  std::memcpy(p + 1, &be, 8);  // the buffer has room for all 8 bytes
  return p + 1 + n;
}

// The common case written straight into the buffer: no extra keys, int32
// token ids and a block small enough for one frame. Same bytes as the
// general writer (the golden tests cover both); false when it does not apply.
bool PickleBlockFast(std::span<const uint8_t> parent, std::span<const int64_t> tokens,
                     ByteSink* sink) {
  constexpr size_t kMaxIntBytes = 5;  // BININT
  if (parent.size() > 0xff || tokens.size() * kMaxIntBytes + 64 >= 64 * 1024) return false;
  sink->Clear();
  uint8_t* const begin = sink->Reserve(16 + parent.size() + tokens.size() * kMaxIntBytes + 16);
  uint8_t* p = begin;
  *p++ = 0x80;  // PROTO 5
  *p++ = 5;
  *p++ = 0x95;  // FRAME, length patched below
  p += 8;
  *p++ = 0x43;  // SHORT_BINBYTES parent, MEMOIZE
  *p++ = static_cast<uint8_t>(parent.size());
  std::memcpy(p, parent.data(), parent.size());
  p += parent.size();
  *p++ = 0x94;
  const size_t n = tokens.size();
  if (n > 3) *p++ = 0x28;  // MARK
  // Outside int32 a token is LONG1, the general writer's job. One pass of
  // compares the compiler can vectorize, so the emit loop below needs no check.
  bool all_int32 = true;
  for (int64_t v : tokens) all_int32 &= ((static_cast<uint64_t>(v) + 0x80000000u) >> 32) == 0;
  if (!all_int32) return false;
  for (int64_t v : tokens) p = PutPickleInt32(p, v);
  if (n == 0) {
    *p++ = 0x29;  // EMPTY_TUPLE, not memoized
  } else {
    *p++ = n > 3 ? 0x74 : static_cast<uint8_t>(0x85 + n - 1);  // TUPLE / TUPLEn
    *p++ = 0x94;
  }
  *p++ = 0x4e;  // None: no extra keys
  *p++ = 0x87;  // TUPLE3, MEMOIZE, STOP
  *p++ = 0x94;
  *p++ = 0x2e;
  internal::PutLe(begin + 3, static_cast<uint64_t>(p - begin - 11), 8);
  sink->Advance(static_cast<size_t>(p - begin));
  return true;
}

template <class Token>
bool PickleBlockFastIfApplicable(std::span<const uint8_t> parent, std::span<const Token> tokens,
                                 const std::vector<ExtraKey>& extras, ByteSink* sink) {
  if constexpr (std::is_same_v<Token, int64_t>) {
    return extras.empty() && PickleBlockFast(parent, tokens, sink);
  }
  return false;
}

// Pickle and CBOR write the same Python values, (parent, tokens,
// extra_keys or None); they differ in how a tuple opens and closes (CBOR: a
// counted array header, nothing at the end), in the names of the str and
// None calls, in the stream's end, and in the fast path for int64 tokens.
struct PickleForm {
  internal::PickleWriter& w;
  void Open(size_t n) { w.TupleBegin(n); }
  void Close(size_t n) { w.TupleEnd(n); }
  void Str(std::string_view s) { w.Str(s); }
  void None() { w.None(); }
  void End() { w.Finish(); }
  template <class Token>
  void Tokens(std::span<const Token> tokens) {
    for (const Token& t : tokens) w.Int(t);
  }
};
struct CborForm {
  internal::CborWriter& w;
  ByteSink* sink;
  void Open(size_t n) { w.ArrayHeader(n); }
  void Close(size_t) {}
  void Str(std::string_view s) { w.Text(s); }
  void None() { w.Null(); }
  void End() {}
  template <class Token>
  void Tokens(std::span<const Token> tokens) {
    if constexpr (std::is_same_v<Token, int64_t>) {
      uint8_t* const begin = sink->Reserve(tokens.size() * 9 + 8);
      uint8_t* p = begin;
      for (int64_t t : tokens) p = PutCborInt(p, t);
      sink->Advance(static_cast<size_t>(p - begin));
    } else {
      for (const Token& t : tokens) w.Int(t);
    }
  }
};

// vLLM's extra_keys tuple: per key a str (LoRA name, cache salt), 32 bytes
// (prompt embeddings digest) or an (identifier, offset) pair (multimodal).
template <class Form>
void WriteExtraKeys(Form f, const std::vector<ExtraKey>& extras) {
  f.Open(extras.size());
  for (const ExtraKey& k : extras) {
    if (k.kind == ExtraKey::Kind::kStr) {
      f.Str(k.text);
    } else if (k.kind == ExtraKey::Kind::kBytes32) {
      f.w.Bytes(k.digest);
    } else {  // kMm
      f.Open(2);
      f.Str(k.text);
      f.w.Int(k.offset);
      f.Close(2);
    }
  }
  f.Close(extras.size());
}

// The general writer of one block's hash input (any extras, any tokens).
template <class Form, class Token>
void WriteBlock(Form f, std::span<const uint8_t> parent, std::span<const Token> tokens,
                const std::vector<ExtraKey>& extras) {
  f.w.Begin();
  f.Open(3);
  f.w.Bytes(parent);
  f.Open(tokens.size());
  f.Tokens(tokens);
  f.Close(tokens.size());
  if (extras.empty()) {
    f.None();
  } else {
    WriteExtraKeys(f, extras);
  }
  f.Close(3);
  f.End();
}

// One block's serialized input in `sink`: pickle for sha256 and xxhash (the
// int32 fast path where it applies), CBOR for the *_cbor algorithms.
template <class Token>
void SerializeBlock(bool pickle, std::span<const uint8_t> parent, std::span<const Token> block,
                    const std::vector<ExtraKey>& extras, ByteSink* sink) {
  if (!pickle) {
    internal::CborWriter w(sink);
    return WriteBlock(CborForm{w, sink}, parent, block, extras);
  }
  if (PickleBlockFastIfApplicable<Token>(parent, block, extras, sink)) return;
  internal::PickleWriter w(sink);
  WriteBlock(PickleForm{w}, parent, block, extras);
}

void RecordTrace(const ByteSink& sink, const std::vector<ExtraKey>& extras, BlockHashTrace* trace) {
  trace->serialized_inputs.emplace_back(sink.view().begin(), sink.view().end());
  trace->extra_keys_repr.push_back(internal::ExtraKeysRepr(extras));
}

}  // namespace

Result<BlockHasher> BlockHasher::Create(HashAlgo algo, const BlockHash& none_hash,
                                        uint32_t hash_block_size) {
  if (hash_block_size == 0) return InvalidArgument("hash_block_size must be > 0");
  if (none_hash.size() != HashAlgoDigestBytes(algo)) {
    return InvalidArgument("NONE_HASH has " + std::to_string(none_hash.size()) +
                           " bytes; " + std::string(HashAlgoName(algo)) + " needs " +
                           std::to_string(HashAlgoDigestBytes(algo)));
  }
  return BlockHasher(algo, none_hash, hash_block_size);
}

template <class Token>
Status BlockHasher::AppendImpl(std::span<const Token> tokens, const RequestExtras& extras,
                               std::vector<BlockHash>* block_hashes, BlockHashTrace* trace) const {
  KVTIER_RETURN_IF_ERROR(internal::ValidateExtras(extras));
  const size_t bs = hash_block_size_;
  size_t start = block_hashes->size() * bs;
  if (start + bs > tokens.size()) return Status::Ok();
  // vLLM scans multimodal items from the first on the prompt pass and from the
  // last one for blocks completed later (decode).
  int64_t mm_idx = start > 0 ? -1 : 0;
  BlockHash parent = block_hashes->empty() ? none_hash_ : block_hashes->back();
  const bool pickle = algo_ == HashAlgo::kSha256 || algo_ == HashAlgo::kXxhash;
  const size_t digest_bytes = HashAlgoDigestBytes(algo_);
  const bool no_extras = !extras.lora_name && !extras.cache_salt && extras.mm_features.empty() &&
                         !extras.has_prompt_embeds;
  ByteSink sink;
  std::vector<ExtraKey> extra_keys;
  block_hashes->reserve(tokens.size() / bs);
  for (; start + bs <= tokens.size(); start += bs) {
    if (!no_extras) {
      internal::GenerateExtraKeys(extras, static_cast<int64_t>(start),
                                  static_cast<int64_t>(start + bs), &mm_idx, &extra_keys);
    }
    SerializeBlock<Token>(pickle, parent.bytes(), tokens.subspan(start, bs), extra_keys, &sink);
    BlockHash next;
    next.size_ = static_cast<uint8_t>(digest_bytes);
    if (digest_bytes == 32) {
      internal::Sha256(sink.view(), next.bytes_.data());
    } else {
      internal::Xxh3_128(sink.view(), next.bytes_.data());
    }
    if (trace) RecordTrace(sink, extra_keys, trace);
    block_hashes->push_back(next);
    parent = next;
  }
  return Status::Ok();
}

Status BlockHasher::AppendBlockHashes(std::span<const int64_t> all_token_ids,
                                      const RequestExtras& extras,
                                      std::vector<BlockHash>* block_hashes,
                                      BlockHashTrace* trace) const {
  return AppendImpl<int64_t>(all_token_ids, extras, block_hashes, trace);
}

Status BlockHasher::AppendBlockHashes(std::span<const BigInt> all_token_ids,
                                      const RequestExtras& extras,
                                      std::vector<BlockHash>* block_hashes,
                                      BlockHashTrace* trace) const {
  return AppendImpl<BigInt>(all_token_ids, extras, block_hashes, trace);
}

}  // namespace kvtier
