// See seal_check.h.
#include "ops/seal_check.h"

#include <unistd.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "format/block_trailer.h"
#include "format/seal_record.h"
#include "ops/trailer_sizes.h"
#include "seal/seal_cipher.h"
#include "seal/seal_key.h"

namespace kvtier::internal {
namespace {

// One pread of `n` bytes at `at`; false on an error or a short read.
bool ReadAt(int fd, uint8_t* out, size_t n, uint64_t at) {
  ssize_t got;
  do {
    got = pread(fd, out, n, static_cast<off_t>(at));
  } while (got < 0 && errno == EINTR);
  return got == static_cast<ssize_t>(n);
}

// What an unsealed file at a sealed block's name is, for the finding.
std::string NotSealed(int fd, uint64_t size) {
  format::TrailerRecord record;
  if (ReadTrailerRecord(fd, size, &record) != format::TrailerState::kAbsent) {
    return "a checksum-trailer block (L131), not a sealed block (L163)";
  }
  return "no seal record (L164): not a sealed block";
}

// The bytes fsck's threads hold for tag checks (kSealVerifyBytesMax), so
// that jobs x row bytes never has to fit in memory: a thread waits until
// its row fits beside the others, or runs alone when it never would.
class VerifyBudget {
 public:
  void Take(uint64_t n) {
    std::unique_lock lock(mu_);
    freed_.wait(lock, [&] { return held_ == 0 || held_ + n <= kSealVerifyBytesMax; });
    held_ += n;
  }
  void Give(uint64_t n) {
    {
      std::lock_guard lock(mu_);
      held_ -= n;
    }
    freed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable freed_;
  uint64_t held_ = 0;
};

VerifyBudget& Budget() {
  static VerifyBudget* budget = new VerifyBudget;  // never destroyed: abandoned threads may still use it
  return *budget;
}

// Reads [0, size) into `buf`, a chunk per call (each a step of the watch).
bool ReadWhole(int fd, uint8_t* buf, uint64_t size, IoScope* io, uint64_t* read_bytes) {
  constexpr uint64_t kChunkBytes = 1 << 20;
  for (uint64_t at = 0; at < size;) {
    const uint64_t n = std::min(kChunkBytes, size - at);
    if (!ReadAt(fd, buf + at, n, at)) return false;
    at += n;
    *read_bytes += n;
    io->Step();
  }
  return true;
}

}  // namespace

Result<SealKeys> SealKeys::Load(const std::vector<std::string>& files) {
  auto ring = std::make_shared<SealKeyring>();
  for (const std::string& file : files) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealKey> key, SealKey::FromFile(file));
    ring->keys.push_back(std::move(key));
  }
  SealKeys keys;
  keys.ring_ = std::move(ring);
  return keys;
}

int SealKeys::Find(const std::string& key_id_hex) const {
  for (size_t i = 0; i < ring_->keys.size(); ++i) {
    if (ring_->keys[i]->key_id_hex() == key_id_hex) return static_cast<int>(i);
  }
  return -1;
}

SealVerdict SealTag(int fd, uint64_t size, const std::string& rel, const SealKeys& keys, int key_index, IoScope* io,
                    std::string* detail, uint64_t* read_bytes) {
  Result<std::unique_ptr<SealCipher>> cipher = SealCipher::Create(keys.ring());
  if (!cipher.ok()) return SealVerdict::kUnjudged;
  Budget().Take(size);
  std::vector<uint8_t> buf(size);
  const uint64_t row = size - format::kSealTrailerBytes;
  SealVerdict verdict = SealVerdict::kUnjudged;
  if (ReadWhole(fd, buf.data(), size, io, read_bytes)) {
    const SealPiece piece{buf.data(), buf.data(), row};
    const std::string_view why = (*cipher)->Open(static_cast<size_t>(key_index), rel, buf.data() + row, size, {&piece, 1});
    verdict = why.empty() ? SealVerdict::kSound : SealVerdict::kBroken;
    if (!why.empty()) *detail = std::string(why) + " (L183)";
  }
  OPENSSL_cleanse(buf.data(), buf.size());  // the plaintext, decrypted in place
  Budget().Give(size);
  return verdict;
}


SealVerdict SealStructure(int fd, uint64_t size, const std::string& key_id_hex, std::string* detail) {
  uint8_t tail[format::kSealTailBytes];
  if (size < format::kSealTrailerBytes) {
    *detail = "smaller than a seal trailer (L163)";
    return SealVerdict::kBroken;
  }
  if (!ReadAt(fd, tail, sizeof tail, size - sizeof tail)) return SealVerdict::kUnjudged;
  format::SealRecord record;
  switch (format::ParseSealTail(tail, size, &record)) {
    case format::SealState::kAbsent:
      *detail = NotSealed(fd, size);
      return SealVerdict::kBroken;
    case format::SealState::kNewer:
      *detail = "seal record of version " + std::to_string(record.version) + " (L165): not understood";
      return SealVerdict::kUnknown;
    case format::SealState::kDamaged:
      *detail = "seal record naming a row of " + std::to_string(record.row_bytes) +
                " bytes, not the file's size less 4096 (L165): cut or grown";
      return SealVerdict::kBroken;
    case format::SealState::kValid:
      break;
  }
  const std::string id = format::SealKeyIdHex(record.key_id);
  if (!key_id_hex.empty() && id != key_id_hex) {
    *detail = "sealed under key id " + id + ", not the namespace's " + key_id_hex + " (L182): no key of it passes";
    return SealVerdict::kBroken;
  }
  return SealVerdict::kSound;
}

}  // namespace kvtier::internal
