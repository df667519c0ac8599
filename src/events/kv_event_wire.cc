// msgpack-cxx writes every integer in its smallest form (positive values in
// the uint family, negative in the int family), exactly as msgspec does.
// Its pack_double does not do what msgspec does: it packs a double with an
// integral value (a ts of 1700000000.0) as an integer. msgspec always writes
// a float as float64 (0xcb), so the one float here is packed by hand.
#include "events/kv_event_wire.h"

#include <msgpack.hpp>

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvtier::internal {
namespace {

// msgpack::packer's Stream: appends to a std::string.
struct StringStream {
  std::string* out;
  void write(const char* data, size_t size) { out->append(data, size); }
};
using Packer = msgpack::packer<StringStream>;

// 0xcb and the IEEE 754 bits, big-endian.
void PackFloat64(std::string* out, double d) {
  const uint64_t bits = std::bit_cast<uint64_t>(d);
  out->push_back(static_cast<char>(0xcb));
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(bits >> shift));
}

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackHash(Packer& pk, const WireHash& hash) {
  switch (hash.kind) {
    case WireHash::Kind::kInt:
      pk.pack_uint64(hash.int_value);
      return;
    case WireHash::Kind::kBytes:
      pk.pack_bin(static_cast<uint32_t>(hash.text.size()));
      pk.pack_bin_body(hash.text.data(), static_cast<uint32_t>(hash.text.size()));
      return;
    case WireHash::Kind::kPageKey:
      PackStr(pk, hash.text);
      return;
  }
}

void PackHashes(Packer& pk, const std::vector<WireHash>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (const WireHash& h : hashes) PackHash(pk, h);
}

void PackOptionalInt(Packer& pk, const std::optional<int64_t>& v) {
  if (v) {
    pk.pack_int64(*v);
  } else {
    pk.pack_nil();
  }
}

void PackOptionalStr(Packer& pk, const std::optional<std::string>& s) {
  if (s) {
    PackStr(pk, *s);
  } else {
    pk.pack_nil();
  }
}

// medium and lora_name have no default in vLLM, so they are always sent;
// extra_keys and group_idx default to None and go only with a group_idx
// (extra_keys as nil: kvtier does not publish them).
void PackBlockStored(Packer& pk, const BlockStoredEvent& e) {
  pk.pack_array(e.group_idx ? 10 : 8);
  PackStr(pk, "BlockStored");
  PackHashes(pk, e.block_hashes);
  if (e.parent_block_hash) {
    PackHash(pk, *e.parent_block_hash);
  } else {
    pk.pack_nil();
  }
  pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (int64_t t : e.token_ids) pk.pack_int64(t);
  pk.pack_int64(e.block_size);
  PackOptionalInt(pk, e.lora_id);
  PackOptionalStr(pk, e.medium);
  PackOptionalStr(pk, e.lora_name);
  if (e.group_idx) {
    pk.pack_nil();
    pk.pack_int64(*e.group_idx);
  }
}

void PackBlockRemoved(Packer& pk, const BlockRemovedEvent& e) {
  pk.pack_array(e.group_idx ? 4 : 3);
  PackStr(pk, "BlockRemoved");
  PackHashes(pk, e.block_hashes);
  PackOptionalStr(pk, e.medium);
  if (e.group_idx) pk.pack_int64(*e.group_idx);
}

void PackEvent(Packer& pk, const KvEvent& event) {
  std::visit(
      [&pk](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, BlockStoredEvent>) {
          PackBlockStored(pk, e);
        } else if constexpr (std::is_same_v<T, BlockRemovedEvent>) {
          PackBlockRemoved(pk, e);
        } else {
          pk.pack_array(1);
          PackStr(pk, "AllBlocksCleared");
        }
      },
      event);
}

}  // namespace

uint64_t BlockHashToInt64(std::span<const uint8_t> bytes) {
  // Shifting every byte through a uint64 keeps the last 8: the mask for free.
  uint64_t v = 0;
  for (uint8_t b : bytes) v = (v << 8) | b;
  return v;
}

WireHash WireHash::FromBlockHash(std::span<const uint8_t> bytes, BlockHashEncoding encoding) {
  if (encoding == BlockHashEncoding::kInt64) return Int(BlockHashToInt64(bytes));
  return Bytes(bytes);
}

std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events) {
  std::string out;
  StringStream stream{&out};
  Packer pk(stream);
  pk.pack_array(2);
  PackFloat64(&out, ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) PackEvent(pk, e);
  return out;
}

std::string EncodeKvEvent(const KvEvent& event) {
  std::string out;
  StringStream stream{&out};
  Packer pk(stream);
  PackEvent(pk, event);
  return out;
}

}  // namespace kvtier::internal
