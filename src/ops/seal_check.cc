// See seal_check.h.
#include "ops/seal_check.h"

#include <unistd.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <memory>
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

}  // namespace

// One thread's tag check at a time: a cipher (its EVP contexts keyed once
// per salt, L167) and a buffer of at most one chunk.
struct SealTagChecker {
  std::unique_ptr<SealCipher> cipher;
  std::vector<uint8_t> chunk;
};

// The checkers of fsck's threads: a thread takes one for a block and gives
// it back, so there are never more than threads checking at once.
class SealTagCheckers {
 public:
  explicit SealTagCheckers(std::shared_ptr<const SealKeyring> ring) : ring_(std::move(ring)) {}
  std::unique_ptr<SealTagChecker> Take() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<SealTagChecker> c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    }
    Result<std::unique_ptr<SealCipher>> cipher = SealCipher::Create(ring_);
    if (!cipher.ok()) return nullptr;
    auto c = std::make_unique<SealTagChecker>();
    c->cipher = std::move(cipher).value();
    std::lock_guard lock(mu_);
    ++made_;
    return c;
  }
  void Give(std::unique_ptr<SealTagChecker> c) {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(c));
  }
  size_t made() const {
    std::lock_guard lock(mu_);
    return made_;
  }
  uint64_t buffer_bytes() const {
    std::lock_guard lock(mu_);
    uint64_t n = 0;
    for (const auto& c : idle_) n += c->chunk.capacity();
    return n;
  }

 private:
  const std::shared_ptr<const SealKeyring> ring_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<SealTagChecker>> idle_;
  size_t made_ = 0;
};

namespace {

// Streams the row [0, row) of `fd` through the cipher, a chunk per read
// (each a step of the watch); the plaintext stays in c->chunk, wiped after.
// kUnjudged when a read fails or comes up short.
SealVerdict StreamRow(int fd, uint64_t row, SealTagChecker* c, IoScope* io, std::string_view* why,
                      uint64_t* read_bytes) {
  c->chunk.resize(static_cast<size_t>(std::min(kSealVerifyChunkBytes, row)));
  SealVerdict verdict = SealVerdict::kSound;
  for (uint64_t at = 0; at < row && why->empty();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(c->chunk.size(), row - at));
    if (!ReadAt(fd, c->chunk.data(), n, at)) {
      verdict = SealVerdict::kUnjudged;
      break;
    }
    at += n;
    *read_bytes += n;
    io->Step();
    *why = c->cipher->OpenPart(c->chunk.data(), c->chunk.data(), n);
  }
  OPENSSL_cleanse(c->chunk.data(), c->chunk.size());  // the plaintext, decrypted in place
  return verdict;
}

}  // namespace

Result<SealKeys> SealKeys::Load(const std::vector<std::string>& files, bool group_read) {
  auto ring = std::make_shared<SealKeyring>();
  for (const std::string& file : files) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealKey> key, SealKey::FromFile(file, group_read));
    ring->keys.push_back(std::move(key));
  }
  SealKeys keys;
  keys.ring_ = std::move(ring);
  keys.checkers_ = std::make_shared<SealTagCheckers>(keys.ring_);
  return keys;
}

int SealKeys::Find(const std::string& key_id_hex) const {
  for (size_t i = 0; i < ring_->keys.size(); ++i) {
    if (ring_->keys[i]->key_id_hex() == key_id_hex) return static_cast<int>(i);
  }
  return -1;
}

size_t SealKeys::checkers() const { return checkers_->made(); }
uint64_t SealKeys::buffer_bytes() const { return checkers_->buffer_bytes(); }

SealVerdict SealTag(int fd, uint64_t size, const std::string& rel, const SealKeys& keys, int key_index, IoScope* io,
                    std::string* detail, uint64_t* read_bytes) {
  uint8_t trailer[format::kSealTrailerBytes];
  const uint64_t row = size - format::kSealTrailerBytes;
  if (!ReadAt(fd, trailer, sizeof trailer, row)) return SealVerdict::kUnjudged;
  *read_bytes += sizeof trailer;
  std::unique_ptr<SealTagChecker> c = keys.tag_checkers().Take();
  if (!c) return SealVerdict::kUnjudged;
  std::string_view why = c->cipher->OpenStart(static_cast<size_t>(key_index), rel, trailer, size);
  SealVerdict verdict = StreamRow(fd, row, c.get(), io, &why, read_bytes);
  if (verdict == SealVerdict::kSound && why.empty()) why = c->cipher->OpenEnd();
  keys.tag_checkers().Give(std::move(c));
  if (verdict == SealVerdict::kUnjudged) return verdict;
  if (why.empty()) return SealVerdict::kSound;
  *detail = std::string(why) + " (L183)";
  return SealVerdict::kBroken;
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
