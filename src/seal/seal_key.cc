// FORMAT.md L161, L173: reading a key into locked, non-dumpable memory,
// deriving its id and K', and wiping the raw key at once.
#include "seal/seal_key.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "seal/key_file_access.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

constexpr size_t kPageBytes = 4096;
// The page: what was read, the key, K'. A valid file is at most 66 bytes
// (64 hex digits and "\r\n"); one byte more to tell a longer file.
constexpr size_t kReadMax = 67, kKeyAt = 256, kKdfAt = 512;
constexpr std::string_view kKeyIdLabel = "kvtier seal key id v1";
constexpr std::string_view kKdfLabel = "kvtier seal kdf v1";

// mmap, not the heap: a page of its own, so mlock and MADV_DONTDUMP cover the
// key and nothing else. Refused locks (RLIMIT_MEMLOCK) are logged once.
uint8_t* NewSecretPage() {
  void* p = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, kPageBytes, MADV_DONTDUMP);
  if (mlock(p, kPageBytes) != 0) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      LogWarning("the seal key's page could not be locked in memory (" + ErrnoToStatus(errno, "mlock").ToString() +
                 "; raise RLIMIT_MEMLOCK): it may be swapped out; it stays out of core dumps and is wiped on close");
    }
  }
  return static_cast<uint8_t*>(p);
}

void FreeSecretPage(uint8_t* page) {
  if (page == nullptr) return;
  OPENSSL_cleanse(page, kPageBytes);
  munlock(page, kPageBytes);
  munmap(page, kPageBytes);
}

int HexNibble(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The content's bytes without one trailing "\n" or "\r\n" when it is the hex form.
size_t HexDigits(const uint8_t* content, size_t n) {
  if (n == 2 * kSealKeyBytes + 1 && content[n - 1] == '\n') return n - 1;
  if (n == 2 * kSealKeyBytes + 2 && content[n - 2] == '\r' && content[n - 1] == '\n') return n - 2;
  return n;
}

Status BadKey(std::string_view what, const std::string& why) {
  return InvalidArgument(std::string(what) + ": " + why +
                         "; a seal key is exactly 32 raw bytes, or 64 hex digits and an optional newline");
}

bool Hmac(const uint8_t* key, std::string_view label, uint8_t* out) {
  unsigned len = 0;
  return HMAC(EVP_sha256(), key, static_cast<int>(kSealKeyBytes), reinterpret_cast<const uint8_t*>(label.data()),
              label.size(), out, &len) != nullptr &&
         len == 32;
}

}  // namespace

SealKey::~SealKey() { FreeSecretPage(page_); }

const uint8_t* SealKey::kdf_key() const { return page_ + kKdfAt; }

// Decodes the content at page_[0, n) into the key, derives the id and K',
// and wipes the content and the key: only K' stays secret in the page.
Status SealKey::Finish(size_t n, std::string_view what) {
  uint8_t* key = page_ + kKeyAt;
  const size_t digits = HexDigits(page_, n);
  if (n == kSealKeyBytes) {
    std::memcpy(key, page_, kSealKeyBytes);
  } else if (digits == 2 * kSealKeyBytes) {
    for (size_t i = 0; i < kSealKeyBytes; ++i) {
      const int hi = HexNibble(page_[2 * i]), lo = HexNibble(page_[2 * i + 1]);
      if (hi < 0 || lo < 0) return BadKey(what, "64 bytes that are not all hex digits");
      key[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
  } else {
    return BadKey(what, n >= kReadMax ? "is longer than 66 bytes" : "is " + std::to_string(n) + " bytes");
  }
  uint8_t id[32];
  const bool ok = Hmac(key, kKeyIdLabel, id) && Hmac(key, kKdfLabel, page_ + kKdfAt);
  OPENSSL_cleanse(page_, kKdfAt);  // the content and the key: K' is all that stays
  if (!ok) return Status(StatusCode::kInternal, std::string(what) + ": HMAC-SHA256 failed (OpenSSL)");
  std::memcpy(key_id_, id, sizeof key_id_);
  key_id_hex_ = format::SealKeyIdHex(key_id_);
  return Status::Ok();
}

Result<std::unique_ptr<SealKey>> SealKey::FromSource(int fd, bool seekable, std::string_view what) {
  std::unique_ptr<SealKey> key(new SealKey());
  key->page_ = NewSecretPage();
  if (key->page_ == nullptr) return ErrnoToStatus(errno, std::string(what) + ": mmap of the key's page");
  size_t n = 0;
  while (n < kReadMax) {
    const ssize_t got = seekable ? pread(fd, key->page_ + n, kReadMax - n, static_cast<off_t>(n))
                                 : read(fd, key->page_ + n, kReadMax - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoToStatus(errno, std::string(what) + ": read");  // the page is wiped by ~SealKey
    if (got == 0) break;
    n += static_cast<size_t>(got);
  }
  KVTIER_RETURN_IF_ERROR(key->Finish(n, what));
  return key;
}

Result<std::unique_ptr<SealKey>> SealKey::FromFile(const std::string& path, bool group_read) {
  const std::string what = "seal key file " + path;
  // Symlinks are followed: a Kubernetes Secret's files are links into ..data/.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoToStatus(errno, "open " + what);
  struct stat st;
  Result<std::unique_ptr<SealKey>> key = ErrnoToStatus(EIO, what);
  if (fstat(fd, &st) != 0) {
    key = ErrnoToStatus(errno, "fstat " + what);
  } else if (S_ISDIR(st.st_mode)) {
    key = BadKey(what, "is a directory");
  } else if (!S_ISREG(st.st_mode)) {
    key = BadKey(what, "is not a regular file");
  } else if (Status access = CheckKeyFileAccess(st, path, group_read, what); !access.ok()) {
    key = std::move(access);  // L174: read nothing from a file a co-tenant may have chosen
  } else {
    key = FromSource(fd, /*seekable=*/true, what);
  }
  close(fd);
  return key;
}

Result<std::unique_ptr<SealKey>> SealKey::FromFd(int fd) {
  const std::string what = "seal key fd " + std::to_string(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoToStatus(errno, "fstat " + what);
  if (S_ISDIR(st.st_mode)) return BadKey(what, "is a directory");
  const bool seekable = lseek(fd, 0, SEEK_CUR) >= 0;
  return FromSource(fd, seekable, what);
}

Result<std::unique_ptr<SealKey>> SealKey::FromContent(std::span<const uint8_t> content, std::string_view what) {
  std::unique_ptr<SealKey> key(new SealKey());
  key->page_ = NewSecretPage();
  if (key->page_ == nullptr) return ErrnoToStatus(errno, std::string(what) + ": mmap of the key's page");
  const size_t n = std::min(content.size(), kReadMax);
  std::memcpy(key->page_, content.data(), n);
  KVTIER_RETURN_IF_ERROR(key->Finish(n, what));
  return key;
}

Result<std::shared_ptr<const SealKeyring>> LoadSealKeyring(const FsTierOptions& tier) {
  if (!tier.sealed()) return std::shared_ptr<const SealKeyring>();
  if (!tier.seal_key_file.empty() && tier.seal_key_fd >= 0) {
    return InvalidArgument("fs tier: give the seal key by seal_key_file or by seal_key_fd, not both");
  }
  auto ring = std::make_shared<SealKeyring>();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealKey> primary, tier.seal_key_fd >= 0
                                                                ? SealKey::FromFd(tier.seal_key_fd)
                                                                : SealKey::FromFile(tier.seal_key_file, tier.seal_key_group_read));
  ring->keys.push_back(std::move(primary));
  for (const std::string& path : tier.seal_read_key_files) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealKey> old, SealKey::FromFile(path, tier.seal_key_group_read));
    ring->keys.push_back(std::move(old));
  }
  return std::shared_ptr<const SealKeyring>(std::move(ring));
}

}  // namespace kvtier::internal
