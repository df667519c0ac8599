// A sealed tier (FORMAT.md L160-L173; checksum_blocks is then off, the tag
// checks the block): a store encrypts the row into a staging row (the
// caller's row is never changed) and writes the seal trailer after it, in
// one transfer (L163, L168); a load takes only files of row_size + 4096 bytes
// (L169, L170), checks the tag with the key of the namespace the file is in
// and decrypts into the caller's row; a block that fails leaves that row
// zeroed. A namespace without the file sends the load to the next key's
// (L171).
#include <cerrno>
#include <string>
#include <utility>

#include "fs/block_codec.h"
#include "seal/seal_cipher.h"

namespace kvtier::internal {
namespace {

class SealedCodec final : public BlockCodec {
 public:
  SealedCodec(std::unique_ptr<SealCipher> cipher, std::vector<std::string> block_dirs,
              std::atomic<uint64_t>* auth_failures)
      : cipher_(std::move(cipher)), block_dirs_(std::move(block_dirs)), auth_failures_(auth_failures) {}
  std::string_view name() const override { return "seal"; }
  uint64_t page_bytes() const override { return format::kSealTrailerBytes; }
  bool fills_stage() const override { return true; }
  bool IsBlockSize(uint64_t size, uint64_t row_bytes) const override {
    return size == row_bytes + format::kSealTrailerBytes;  // L170: any other was planted
  }
  const std::string* NamespaceAfter(size_t key_index) const override {
    return key_index + 1 < block_dirs_.size() ? &block_dirs_[key_index + 1] : nullptr;
  }
  bool WipesFailedRows() const override { return true; }

  // L163, L168: the ciphertext into the staging row, the trailer (tag included) on its page.
  Status Encode(const StoreRow& row, StoreEncoding* out) override {
    const RowPieces& data = *row.data;
    std::vector<SealPiece> pieces(data.count());
    for (size_t i = 0, at = 0; i < data.count(); at += data.piece(i).size(), ++i) {
      pieces[i] = {data.piece(i).data(), row.stage + at, data.piece(i).size()};
    }
    out->page = NewTrailerPage();
    return cipher_->Seal(row.rel_path, pieces, data.size(), out->page.get());
  }

  // L169: a sealed namespace holds files of row_size + 4096 bytes only; any
  // other size is refused unread (a longer one is left in place, L66).
  LoadPlan Plan(uint64_t size, uint64_t row_bytes, const std::string& shown) override {
    const uint64_t want = row_bytes + format::kSealTrailerBytes;
    if (size == want) return LoadPlan::Then(LoadPlan::kReadWithPage);
    const std::string why = "is " + std::to_string(size) + " bytes, a sealed block " + std::to_string(want);
    return LoadPlan::Refuse(AuthFailed(shown, why), /*unlink=*/size < want);
  }

  // L169: the tag checked with the key of the namespace the file is in, and
  // the row decrypted into the caller's (from the bounce row, or in place).
  // A failing block leaves the caller's row zeroed (SealCipher::Open).
  LoadVerdict Check(const LoadedRow& in) override {
    const RowPieces& row = *in.row;
    std::vector<SealPiece> pieces(row.count());
    for (size_t i = 0, at = 0; i < row.count(); at += row.piece(i).size(), ++i) {
      uint8_t* out = row.piece(i).data();
      pieces[i] = {in.bounce != nullptr ? in.bounce + at : out, out, row.piece(i).size()};
    }
    const std::string_view why = cipher_->Open(in.key_index, in.rel_path, in.page, in.file_bytes, pieces);
    if (!why.empty()) return LoadVerdict::Refuse(AuthFailed(in.shown, std::string(why)), /*unlink=*/true);
    LoadVerdict v;
    v.delivered = true;
    return v;
  }

 private:
  Status AuthFailed(std::string_view shown, const std::string& why) {
    auth_failures_->fetch_add(1, std::memory_order_relaxed);
    return ErrnoToStatus(EBADMSG, std::string(shown) + ": not a valid sealed block (" + why + ")");
  }

  std::unique_ptr<SealCipher> cipher_;  // this tier's I/O thread's (not thread-safe)
  const std::vector<std::string> block_dirs_;
  std::atomic<uint64_t>* const auth_failures_;
};

}  // namespace

std::unique_ptr<BlockCodec> MakeSealedCodec(std::unique_ptr<SealCipher> cipher, std::vector<std::string> block_dirs,
                                            std::atomic<uint64_t>* auth_failures) {
  return std::make_unique<SealedCodec>(std::move(cipher), std::move(block_dirs), auth_failures);
}

}  // namespace kvtier::internal
