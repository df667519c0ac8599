// The chained block hasher: serialize (parent, tokens, extra_keys), digest,
// repeat. One ByteSink is reused for every block of a call.
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

template <class Token>
void PickleBlock(std::span<const uint8_t> parent, std::span<const Token> tokens,
                 const std::vector<ExtraKey>& extras, ByteSink* sink) {
  internal::PickleWriter w(sink);
  w.Begin();
  w.TupleBegin(3);
  w.Bytes(parent);
  w.TupleBegin(tokens.size());
  for (const Token& t : tokens) w.Int(t);
  w.TupleEnd(tokens.size());
  if (extras.empty()) {
    w.None();
  } else {
    w.TupleBegin(extras.size());
    for (const ExtraKey& k : extras) {
      switch (k.kind) {
        case ExtraKey::Kind::kStr: w.Str(k.text); break;
        case ExtraKey::Kind::kBytes32: w.Bytes(k.digest); break;
        case ExtraKey::Kind::kMm:
          w.TupleBegin(2);
          w.Str(k.text);
          w.Int(k.offset);
          w.TupleEnd(2);
          break;
      }
    }
    w.TupleEnd(extras.size());
  }
  w.TupleEnd(3);
  w.Finish();
}

template <class Token>
void CborBlock(std::span<const uint8_t> parent, std::span<const Token> tokens,
               const std::vector<ExtraKey>& extras, ByteSink* sink) {
  internal::CborWriter w(sink);
  w.Begin();
  w.ArrayHeader(3);
  w.Bytes(parent);
  w.ArrayHeader(tokens.size());
  for (const Token& t : tokens) w.Int(t);
  if (extras.empty()) {
    w.Null();
    return;
  }
  w.ArrayHeader(extras.size());
  for (const ExtraKey& k : extras) {
    switch (k.kind) {
      case ExtraKey::Kind::kStr: w.Text(k.text); break;
      case ExtraKey::Kind::kBytes32: w.Bytes(k.digest); break;
      case ExtraKey::Kind::kMm:
        w.ArrayHeader(2);
        w.Text(k.text);
        w.Int(k.offset);
        break;
    }
  }
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
  ByteSink sink;
  std::vector<ExtraKey> extra_keys;
  block_hashes->reserve(tokens.size() / bs);
  for (; start + bs <= tokens.size(); start += bs) {
    internal::GenerateExtraKeys(extras, static_cast<int64_t>(start),
                                static_cast<int64_t>(start + bs), &mm_idx, &extra_keys);
    auto block = tokens.subspan(start, bs);
    if (pickle) {
      PickleBlock<Token>(parent.bytes(), block, extra_keys, &sink);
    } else {
      CborBlock<Token>(parent.bytes(), block, extra_keys, &sink);
    }
    BlockHash next;
    next.size_ = static_cast<uint8_t>(digest_bytes);
    if (digest_bytes == 32) {
      internal::Sha256(sink.view(), next.bytes_.data());
    } else {
      internal::Xxh3_128(sink.view(), next.bytes_.data());
    }
    if (trace) {
      trace->serialized_inputs.emplace_back(sink.view().begin(), sink.view().end());
      trace->extra_keys_repr.push_back(internal::ExtraKeysRepr(extra_keys));
    }
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
