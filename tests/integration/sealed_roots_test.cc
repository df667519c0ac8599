// Proves that a sealed tier over several roots (path_sharding, FORMAT.md
// L99, L160) reads its keys once per open and hands the same keys to every
// root:
//  * each key file (the primary and a read key) is opened exactly once by
//    the open of a three-root tier (counted by inotify on the real files),
//    and every root's namespace is the primary key's (its config.json names
//    that key id), so a Secret rotated while the roots open cannot leave
//    them under different keys;
//  * a key given by an fd that can be read only once (a pipe) serves every
//    root, which then stores and loads sealed blocks byte-exact.
// Seeded random rows; the seed is printed on failure.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "kvtier/fs_tier.h"
#include "seal/seal_key.h"
#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;
const std::string kKeyA = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0\n";
const std::string kKeyB = "RAW-KEY-B-0123456789-abcdefghijk";  // 32 raw bytes
constexpr int kRoots = 3;

std::string KeyId(const std::string& content) {
  auto key = internal::SealKey::FromContent(std::span(reinterpret_cast<const uint8_t*>(content.data()), content.size()),
                                            "test key");
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return key.ok() ? (*key)->key_id_hex() : "";
}

FsTierOpenOptions RootsOptions(const fs::path& dir, const std::string& model) {
  FsTierOpenOptions o;
  for (int i = 0; i < kRoots; ++i) o.tier.root_dir += (i ? "," : "") + (dir / ("r" + std::to_string(i))).string();
  o.tier.path_sharding = PathSharding::kByBlockHash;
  o.ns = testing::Spec(model);
  o.row_bytes = kRow;
  return o;
}

// The key id each root's sealed namespaces name (config.json), by root.
std::vector<std::vector<std::string>> RootKeyIds(const fs::path& dir) {
  std::vector<std::vector<std::string>> ids(kRoots);
  for (int i = 0; i < kRoots; ++i) {
    for (const auto& entry : fs::directory_iterator(dir / ("r" + std::to_string(i)))) {
      if (!fs::exists(entry.path() / "config.json")) continue;
      const auto config = testing::ReadJsonOrDie(entry.path() / "config.json");
      if (config.contains("kvtier_seal")) ids[i].push_back(config["kvtier_seal"]["key_id"].get<std::string>());
    }
  }
  return ids;
}

// The IN_OPEN events queued on `fd` (non-blocking), by watch descriptor.
std::map<int, int> Opens(int fd) {
  std::map<int, int> opens;
  alignas(inotify_event) char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) {
    for (char* p = buf; p < buf + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      if (e->mask & IN_OPEN) ++opens[e->wd];
      p += sizeof(inotify_event) + e->len;
    }
  }
  return opens;
}

TEST(SealedRoots, EachKeyFileIsReadOnceAndEveryRootGetsThePrimaryKey) {
  testing::TempDir dir;
  testing::WriteKeyFileOrDie(dir.path() / "primary.key", kKeyA);
  testing::WriteKeyFileOrDie(dir.path() / "old.key", kKeyB);
  FsTierOpenOptions o = RootsOptions(dir.path(), "sealed/roots");
  o.tier.seal_key_file = (dir.path() / "primary.key").string();
  o.tier.seal_read_key_files = {(dir.path() / "old.key").string()};
  const int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(in, 0);
  const int primary = inotify_add_watch(in, o.tier.seal_key_file.c_str(), IN_OPEN);
  const int old = inotify_add_watch(in, o.tier.seal_read_key_files[0].c_str(), IN_OPEN);
  ASSERT_GE(primary, 0);
  ASSERT_GE(old, 0);
  auto tier = FsTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::map<int, int> opens = Opens(in);
  close(in);
  EXPECT_EQ(opens[primary], 1) << "opens of the primary key file by a " << kRoots << "-root open";
  EXPECT_EQ(opens[old], 1) << "opens of the read key file by a " << kRoots << "-root open";
  const std::string id = KeyId(kKeyA);
  for (const auto& ids : RootKeyIds(dir.path())) EXPECT_EQ(ids, std::vector<std::string>{id});
}

TEST(SealedRoots, AKeyFdReadableOnceServesEveryRoot) {
  testing::TempDir dir;
  FsTierOpenOptions o = RootsOptions(dir.path(), "sealed/pipe");
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], kKeyA.data(), kKeyA.size()), static_cast<ssize_t>(kKeyA.size()));
  close(p[1]);  // the pipe yields the key once, then its end
  o.tier.seal_key_fd = p[0];
  auto opened = FsTier::Open(o);
  close(p[0]);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<FsTier> tier = std::move(opened).value();
  for (const auto& ids : RootKeyIds(dir.path())) EXPECT_EQ(ids, std::vector<std::string>{KeyId(kKeyA)});
  const uint64_t seed = testing::TestSeed();
  std::vector<OffloadKey> keys;
  for (uint8_t i = 0; i < 6; ++i) keys.push_back(testing::Key(i + 1, testing::KeyShape::Last(i)));
  testing::AlignedRows rows(keys.size(), kRow, seed), back(keys.size(), kRow, seed + 1);
  ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), keys.size());
  for (const OffloadKey& k : keys) EXPECT_EQ(fs::file_size(tier->BlockPath(k)), kRow + 4096);
  ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), keys.size());
  EXPECT_EQ(std::memcmp(back.data, rows.data, keys.size() * kRow), 0) << "seed " << seed;
}

}  // namespace
}  // namespace kvtier
