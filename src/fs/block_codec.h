// How a block is checked or sealed (FORMAT.md L54-L69, L102, L130-L138,
// L160-L173): one BlockCodec per tier, chosen once at its open
// (fs_tier_open.cc) from checksum_blocks, checksum_place, the xattr probe and
// the seal keys, and held by TierShared. A store asks it what to write
// besides the row (a page after it, the CRC attribute, the row sealed into a
// staging row); a load asks it what to read of a file of the size found, and
// whether what it read may be served. The ops keep the protocol (requests,
// retries, cleanup) and never branch on the kind: a new kind is one file.
//
// The kinds: codec_none.cc (checksum_blocks off), codec_crc_xattr.cc and
// codec_crc_trailer.cc (CRC32C in the user xattr, L60, or in a trailer page
// after the row, L131; both load whichever a block carries: PlainCodec) and
// codec_sealed.cc (AES-256-GCM, L160-L173). A CRC given by the GPU staging
// (staged_crc.h) is an input of Encode, not a kind.
//
// Called on the tier's I/O thread only, where the ops run: the sealed
// codec's SealCipher is per engine thread and not thread-safe (seal_cipher.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fs/block_ops.h"

namespace kvtier::internal {

class SealCipher;  // seal/seal_cipher.h

// A row a store is about to write (FORMAT.md L57).
struct StoreRow {
  std::string_view rel_path;  // the block's path relative to root_dir (the seal's AAD, L166)
  // The row's bytes: the caller's pieces, or a staging copy of them.
  const RowPieces* data = nullptr;
  // fills_stage(): data->size() bytes that Encode fills and the store writes
  // instead of `data` (then the caller's pieces).
  uint8_t* stage = nullptr;
  std::optional<uint32_t> crc;  // the row's CRC32C from its copy (staged_crc.h); else computed if needed
};

// What a store writes besides the row's bytes.
struct StoreEncoding {
  TrailerPage page;  // page_bytes() after the row, in the same transfer (L131, L168); null: none
  bool xattr = false;  // the CRC attribute is set to xattr_value after the data (L60)
  uint8_t xattr_value[format::kCrcXattrBytes] = {};
};

// What a load does with a file whose statx gave its size.
struct LoadPlan {
  enum Step { kRead, kXattrThenRead, kReadWithPage, kRefuse } step = kRead;
  Status why;           // kRefuse: the key is kCorrupt, for this reason
  bool unlink = false;  // kRefuse: the file is removed (L65, L67), else left in place (L66)
  static LoadPlan Then(Step step) { return {step, Status(), false}; }
  static LoadPlan Refuse(Status why, bool unlink) { return {kRefuse, std::move(why), unlink}; }
};

// A file a load read whole, to be checked.
struct LoadedRow {
  std::string_view rel_path;  // as StoreRow's, in the namespace of key `key_index` (L171)
  std::string_view shown;     // the path as messages name it
  size_t key_index = 0;
  uint64_t file_bytes = 0;
  const RowPieces* read = nullptr;  // the row's bytes as read
  const uint8_t* bounce = nullptr;  // `read`'s one piece where that is not the caller's row
  const RowPieces* row = nullptr;   // the caller's row
  const uint8_t* page = nullptr;    // the page after the row (kReadWithPage), else nullptr
  std::optional<uint32_t> xattr_crc;  // the CRC attribute the file carries (kXattrThenRead)
  bool verify = true;  // false: an unchecked load (staged_crc.h), whose caller checks the CRC
};

struct LoadVerdict {
  enum Kind { kServe, kMismatch, kRefuse } kind = kServe;
  bool delivered = false;  // kServe: the caller's row holds the bytes already
  Status why;              // kRefuse, as LoadPlan's
  bool unlink = false;
  bool has_crc = false;    // the CRC32C the block carries (checksum_blocks on), for an unchecked load
  uint32_t crc = 0;
  static LoadVerdict Refuse(Status why, bool unlink) {
    LoadVerdict v;
    v.kind = kRefuse;
    v.why = std::move(why);
    v.unlink = unlink;
    return v;
  }
};

class BlockCodec {
 public:
  virtual ~BlockCodec() = default;
  // FsTier::checksum_place(): "off", "xattr", "trailer" or "seal".
  virtual std::string_view name() const = 0;
  // The bytes a block file holds after its row (L131, L168): 0 or one page.
  virtual uint64_t page_bytes() const { return 0; }
  // FsTier::xattrs_supported(): stores set the CRC attribute.
  virtual bool writes_xattr() const { return false; }

  // Whether a store writes from a staging row that Encode fills (L168: the
  // caller's row is neither changed nor written as is).
  virtual bool fills_stage() const { return false; }
  // L54: whether a regular file of `size` at a block's path counts as the
  // block (a store skips it, a lookup finds it); else it was planted and a
  // store replaces it (L170).
  virtual bool IsBlockSize(uint64_t /*size*/, uint64_t /*row_bytes*/) const { return true; }
  // What the store of `row` writes besides it; an error fails the store.
  [[nodiscard]] virtual Status Encode(const StoreRow& row, StoreEncoding* out) = 0;

  // What a load reads of a file of `size` bytes (`shown` names it).
  virtual LoadPlan Plan(uint64_t size, uint64_t row_bytes, const std::string& shown) = 0;
  virtual LoadVerdict Check(const LoadedRow& loaded) = 0;
  // L171: the block directory of key `key_index` + 1, where a load or lookup
  // looks when key `key_index`'s namespace has no file; nullptr: none left.
  virtual const std::string* NamespaceAfter(size_t /*key_index*/) const { return nullptr; }
  // L169: whether a load that fails after reading into the caller's row zeroes it.
  virtual bool WipesFailedRows() const { return false; }
};

// The unsealed kinds' loads (block_codec.cc): "loads check whichever a block
// carries" (L130), its trailer's CRC (L134) or its attribute's (L67),
// whatever this tier's stores write; a file with neither is accepted on its
// size (L68).
class PlainCodec : public BlockCodec {
 public:
  LoadPlan Plan(uint64_t size, uint64_t row_bytes, const std::string& shown) override;
  LoadVerdict Check(const LoadedRow& loaded) override;

 protected:
  // `checksum`: checksum_blocks (L102): CRCs are made and checked; off, a
  // trailer's record is still checked (only a valid one says that the extra
  // page is no part of a longer row, L66). `asks_xattr`: loads ask for the
  // attribute of a block without a trailer (user xattrs work here).
  // `crc_ns`: where the time spent on CRCs adds up (TierShared::checksum_ns).
  PlainCodec(bool checksum, bool asks_xattr, std::atomic<uint64_t>* crc_ns)
      : checksum_(checksum), asks_xattr_(asks_xattr), crc_ns_(crc_ns) {}
  // The CRC32C a store of `row` writes: the one given, else computed here.
  uint32_t RowCrc(const StoreRow& row) const;

  const bool checksum_, asks_xattr_;
  std::atomic<uint64_t>* const crc_ns_;
};

// checksum_blocks off (L102): no CRC is made, asked for or checked.
std::unique_ptr<BlockCodec> MakeNoChecksumCodec();
// The CRC32C in the user xattr (L60), where user xattrs work.
std::unique_ptr<BlockCodec> MakeXattrCrcCodec(std::atomic<uint64_t>* crc_ns);
// The CRC32C in a trailer page after the row (L131); `asks_xattr` as PlainCodec's.
std::unique_ptr<BlockCodec> MakeTrailerCrcCodec(bool asks_xattr, std::atomic<uint64_t>* crc_ns);
// A sealed tier (L160-L173): `cipher` is this tier's (its I/O thread's),
// its ring the primary key first, then the read keys; `block_dirs[i]` is key
// i's "<model>_<digest>_r<rank>"; `auth_failures` counts the blocks refused
// for their seal (L169).
std::unique_ptr<BlockCodec> MakeSealedCodec(std::unique_ptr<SealCipher> cipher, std::vector<std::string> block_dirs,
                                            std::atomic<uint64_t>* auth_failures);

}  // namespace kvtier::internal
