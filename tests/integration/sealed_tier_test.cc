// Proves the fs tier's sealed mode end to end on real files (FORMAT.md
// L160-L173), on io_uring and on the syscall backend:
//  * a sealed store writes `ciphertext ‖ seal trailer` (row + 4096 bytes, no
//    CRC xattr, no plaintext of the row in the file) into the key's own
//    namespace, whose config.json names the key id and never the key; the
//    caller's source row is unchanged; loads return the row byte-exact;
//  * every failing block (a plain row planted at the path, a flipped
//    ciphertext bit, a flipped tag, a block sealed under another key, a
//    valid block copied to another name or from another namespace, a
//    truncated and an extended file) is never returned: the key is corrupt
//    (EBADMSG), a row read and refused is left all zeros and one refused
//    unread for its size untouched, auth_failures counts each, and the file
//    is removed (the extended one left in place, L66);
//  * a tier closed while the mount still holds one of its requests wipes
//    its keys all the same (their locked pages leave VmLck);
//  * a load that fails after a short read put file bytes in the caller's
//    row (a read error, a read finding the file cut, the file replaced past
//    the reopens) leaves that row all zeros on io_uring's in-place reads
//    (and untouched from bounce rows), whatever the outcome;
//    lookups count only files of row + 4096 bytes;
//  * rotation: a tier whose read key is the old primary serves the old
//    blocks and stores new ones under its new key's namespace only; a
//    failing block in the new namespace is a corrupt load, not served from
//    the old key, and once removed the old key's block serves that key;
//  * an unsealed tier on the same root never sees sealed blocks, nor a
//    sealed tier unsealed ones;
//  * key errors fail the open naming the path, without the key's content;
//  * two roots (path_sharding) store and load sealed blocks (their keys
//    read once: sealed_roots_test.cc);
//  * the C++ TieredStore takes the keys through vLLM's config JSON.
// Loads open rows in place on io_uring and from bounce rows on the syscall
// backend (bounce_loads), so both decryption paths are covered.
// Seeded random rows; the seed is printed on failure.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "fs/fs_tier_internal.h"
#include "kvtier/fs_tier.h"
#include "kvtier/tiered_store.h"
#include "support/fake_backend.h"
#include "support/test_json.h"
#include "support/test_support.h"
#include "staging/host_kv_cache.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;
constexpr uint64_t kFile = kRow + 4096;
const std::string kKeyA = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0\n";
const std::string kKeyB = "RAW-KEY-B-0123456789-abcdefghijk";  // 32 raw bytes

class SealedTierTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  std::string KeyFile(const std::string& name, const std::string& content) {
    testing::WriteKeyFileOrDie(dir_.path() / name, content);
    return (dir_.path() / name).string();
  }
  FsTierOpenOptions Options(const std::string& key_file, const std::string& model = "sealed/model") {
    FsTierOpenOptions o;
    o.tier.root_dir = (dir_.path() / "root").string();
    o.tier.io_backend = GetParam();
    // Both ways of opening a row: in place in the caller's row, and from a bounce row into it.
    o.tier.bounce_loads = GetParam() == IoBackendKind::kSyscall ? BounceLoads::kOn : BounceLoads::kOff;
    o.tier.seal_key_file = key_file;
    o.ns = testing::Spec(model);
    o.row_bytes = kRow;
    o.tier.n_read_threads = 2;
    o.tier.n_write_threads = 2;
    return o;
  }
  std::unique_ptr<FsTier> Open(const FsTierOpenOptions& o) {
    auto tier = FsTier::Open(o);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }
  std::vector<OffloadKey> Keys(size_t n, uint8_t fill) {
    std::vector<OffloadKey> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(testing::Key(i + 1, testing::KeyShape::Fill(fill)));
    return keys;
  }
  // Stores keys[first, first + n) (all by default) from the same rows.
  static size_t Stored(FsTier* tier, std::span<const OffloadKey> keys, const testing::AlignedRows& rows,
                       size_t first = 0, size_t n = SIZE_MAX) {
    n = std::min(n, keys.size() - first);
    const auto all = rows.Const();
    const std::vector<std::span<const uint8_t>> some(all.begin() + first, all.begin() + first + n);
    return testing::WaitForJob(tier, tier->SubmitStore(keys.subspan(first, n), some).value()).OkPrefix();
  }
  static size_t Loaded(FsTier* tier, std::span<const OffloadKey> keys, const testing::AlignedRows& rows,
                       size_t first, size_t n) {
    const auto all = rows.Mut();
    const std::vector<std::span<uint8_t>> some(all.begin() + first, all.begin() + first + n);
    return testing::WaitForJob(tier, tier->SubmitLoad(keys.subspan(first, n), some).value()).OkPrefix();
  }

  testing::TempDir dir_;
  uint64_t seed_ = testing::TestSeed();
};

TEST_P(SealedTierTest, StoresCiphertextAndATrailerInTheKeysNamespaceAndLoadsByteExact) {
  auto tier = Open(Options(KeyFile("a.key", kKeyA)));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->checksum_place(), "seal");
  EXPECT_FALSE(tier->xattrs_supported());
  const auto keys = Keys(4, 0x11);
  testing::AlignedRows rows(4, kRow, seed_), copy(4, kRow, seed_), back(4, kRow, seed_ + 1);
  ASSERT_EQ(Stored(tier.get(), keys, rows), 4u);
  EXPECT_EQ(std::memcmp(rows.data, copy.data, 4 * kRow), 0) << "the caller's row was changed";
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string path = tier->BlockPath(keys[i]);
    ASSERT_EQ(fs::file_size(path), kFile) << path;
    EXPECT_LT(getxattr(path.c_str(), "user.vllm.kv_crc32c", nullptr, 0), 0);
    const std::string bytes = testing::ReadFileOrDie(path);
    EXPECT_EQ(bytes.find(std::string(reinterpret_cast<const char*>(rows.Row(i).data()) + 100, 32)), std::string::npos);
    EXPECT_EQ(bytes.substr(kFile - 64, 8), "KVTSEAL1");
  }
  const auto config = testing::ReadJsonOrDie(dir_.path() / "root" / tier->ns().dir_name() / "config.json");
  ASSERT_TRUE(config.contains("kvtier_seal")) << config.dump();
  EXPECT_EQ(config["kvtier_seal"]["cipher"], "aes-256-gcm");
  EXPECT_EQ(config["kvtier_seal"]["key_id"].get<std::string>().size(), 32u);
  EXPECT_EQ(config.dump().find("a1a2a3a4"), std::string::npos);
  ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 4u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 4 * kRow), 0) << "seed " << seed_;
  EXPECT_EQ(tier->Metrics().auth_failures, 0u);
}

void Flip(const std::string& path, uint64_t at) {
  std::string bytes = testing::ReadFileOrDie(path);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  testing::WriteFileOrDie(path, bytes);
}

TEST_P(SealedTierTest, EveryFailingBlockIsCountedZeroedRemovedAndNeverReturned) {
  auto tier = Open(Options(KeyFile("a.key", kKeyA)));
  auto other_key = Open(Options(KeyFile("b.key", kKeyB)));
  auto other_ns = Open(Options(KeyFile("a.key", kKeyA), "another/model"));
  ASSERT_TRUE(tier && other_key && other_ns);
  const auto keys = Keys(9, 0x22);
  testing::AlignedRows rows(9, kRow, seed_), back(9, kRow, seed_ + 1);
  ASSERT_EQ(Stored(tier.get(), keys, rows), 9u);
  ASSERT_EQ(Stored(other_key.get(), keys, rows), 9u);
  ASSERT_EQ(Stored(other_ns.get(), keys, rows), 9u);
  auto path = [&](size_t i) { return tier->BlockPath(keys[i]); };
  testing::WriteFileOrDie(path(1), std::string(reinterpret_cast<const char*>(rows.Row(1).data()), kRow));  // plain row
  Flip(path(2), 1234);                                                           // ciphertext
  Flip(path(3), kFile - 5);                                                      // tag
  fs::copy_file(other_key->BlockPath(keys[4]), path(4), fs::copy_options::overwrite_existing);  // another key
  fs::copy_file(path(0), path(5), fs::copy_options::overwrite_existing);         // another name
  fs::copy_file(other_ns->BlockPath(keys[6]), path(6), fs::copy_options::overwrite_existing);  // another namespace
  fs::resize_file(path(7), kFile - 4096);                                        // truncated
  fs::resize_file(path(8), kFile + 4096);                                        // extended
  std::memset(back.data, 0x5A, 9 * kRow);
  const JobResult r = testing::WaitForJob(tier.get(), tier->SubmitLoad(keys, back.Mut()).value());
  ASSERT_EQ(r.keys.size(), 9u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kOk);
  EXPECT_EQ(std::memcmp(back.Row(0).data(), rows.Row(0).data(), kRow), 0) << "seed " << seed_;
  for (size_t i = 1; i < 9; ++i) {
    EXPECT_EQ(r.keys[i].outcome, KeyOutcome::kCorrupt) << i << " " << r.keys[i].status.ToString();
    EXPECT_EQ(r.keys[i].status.code(), StatusCode::kCorruption) << i;
    const std::span<uint8_t> row = back.Row(i);
    const uint8_t left = i == 1 || i == 7 || i == 8 ? 0x5A : 0;  // refused unread for its size, or read and wiped
    EXPECT_TRUE(std::all_of(row.begin(), row.end(), [&](uint8_t b) { return b == left; })) << i;
    EXPECT_NE(std::memcmp(row.data(), rows.Row(i).data(), kRow), 0) << i;
    EXPECT_EQ(fs::exists(path(i)), i == 8) << i;
  }
  EXPECT_EQ(tier->Metrics().auth_failures, 8u);
  EXPECT_EQ(tier->Metrics().rows_corrupt, 8u);
  EXPECT_NE(tier->PrometheusText("fs0").find("kvtier_fs_auth_failures_total{tier=\"fs0\"} 8"), std::string::npos);
}

// Loads keys[0] with every read held: the first runs short (some file bytes
// reach the row), every later one completes with `res` until the load ends.
JobResult LoadAfterAShortRead(FsTier* tier, testing::FakeBackend* fake, const OffloadKey& key,
                              std::span<uint8_t> row, int64_t res) {
  fake->HoldWhere([](const internal::IoRequest& r) { return r.op == internal::IoOp::kReadv; });
  const uint64_t id = tier->SubmitLoad(std::span(&key, 1), std::vector<std::span<uint8_t>>{row}).value();
  bool first = true;
  for (int waited = 0; waited < 20000; ++waited) {
    std::vector<JobResult> done;
    tier->PollFinished(&done);
    if (!done.empty()) return std::move(done.front());
    if (fake->Release({}, first ? std::nullopt : std::optional<int64_t>(res)) != 0) first = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "job " << id << " did not finish";
  return {};
}

TEST_P(SealedTierTest, ALoadFailingAfterAShortReadLeavesNoFileBytesInTheRow) {
  FsTierOpenOptions o = Options(KeyFile("a.key", kKeyA));
  auto owned = std::make_unique<testing::FakeBackend>(seed_, testing::FaultPlan{.short_transfer_one_in = 1});
  testing::FakeBackend* fake = owned.get();
  auto tier = internal::OpenFsTierWithBackend(o, std::move(owned)).value();
  auto writer = Open(o);  // stores on the real backend
  ASSERT_NE(writer, nullptr);
  const auto keys = Keys(1, 0x24);
  testing::AlignedRows rows(1, kRow, seed_), back(1, kRow, seed_ + 1);
  const std::pair<int64_t, KeyOutcome> cases[] = {
      {-EIO, KeyOutcome::kError}, {0, KeyOutcome::kCorrupt}, {-ESTALE, KeyOutcome::kMiss}};
  for (const auto& [res, outcome] : cases) {
    if (!fs::exists(writer->BlockPath(keys[0]))) {
      ASSERT_EQ(Stored(writer.get(), keys, rows), 1u) << res;
    }
    std::memset(back.data, 0x5A, kRow);
    const JobResult r = LoadAfterAShortRead(tier.get(), fake, keys[0], back.Row(0), res);
    ASSERT_EQ(r.keys.size(), 1u) << res;
    EXPECT_EQ(r.keys[0].outcome, outcome) << res << " " << r.keys[0].status.ToString();
    const uint8_t left = o.tier.bounce_loads == BounceLoads::kOff ? 0 : 0x5A;  // in place: wiped; bounce: untouched
    const std::span<uint8_t> row = back.Row(0);
    EXPECT_TRUE(std::all_of(row.begin(), row.end(), [&](uint8_t b) { return b == left; }))
        << res << " seed " << seed_;
  }
}

// This process's locked memory (VmLck, kB): a sealed tier's keys live in
// locked pages of their own (seal_key.cc).
uint64_t LockedKb() {
  const std::string status = testing::ReadFileOrDie("/proc/self/status");
  const size_t at = status.find("VmLck:");
  return at == std::string::npos ? 0 : std::stoull(status.substr(at + 6));
}

TEST_P(SealedTierTest, ClosingWithARequestStuckOnTheMountWipesTheKeys) {
  const uint64_t before = LockedKb();
  FsTierOpenOptions o = Options(KeyFile("a.key", kKeyA));
  o.tier.io_timeout_ms = 100;  // the held request counts as stuck soon after
  auto owned = std::make_unique<testing::FakeBackend>(seed_, testing::FaultPlan{});
  testing::FakeBackend* fake = owned.get();  // left to the process exit by the close, as a hung ring is
  fake->HoldWhere([](const internal::IoRequest&) { return true; });  // a hung mount
  auto tier = internal::OpenFsTierWithBackend(o, std::move(owned)).value();
  if (LockedKb() <= before) GTEST_SKIP() << "the key's page could not be locked (RLIMIT_MEMLOCK): nothing to see";
  const auto keys = Keys(1, 0x25);
  ASSERT_TRUE(tier->SubmitLookup(keys).ok());
  for (int i = 0; i < 20000 && fake->held().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(fake->held().size(), 1u);
  tier.reset();  // returns once the request counts as stuck, leaving it to the kernel
  EXPECT_EQ(fake->held().size(), 1u);
  EXPECT_EQ(LockedKb(), before) << "the keys' locked page outlived the close";
}

TEST_P(SealedTierTest, LookupsCountOnlyFilesOfARowAndItsTrailer) {
  auto tier = Open(Options(KeyFile("a.key", kKeyA)));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(3, 0x23);
  testing::AlignedRows rows(3, kRow, seed_);
  ASSERT_EQ(Stored(tier.get(), keys, rows), 3u);
  testing::WriteFileOrDie(tier->BlockPath(keys[1]), std::string(kRow, 'p'));  // a plain row
  fs::resize_file(tier->BlockPath(keys[2]), kFile + 4096);                     // a longer file
  const JobResult look = testing::WaitForJob(tier.get(), tier->SubmitLookup(keys).value());
  EXPECT_EQ(look.keys[0].outcome, KeyOutcome::kOk);
  EXPECT_EQ(look.keys[1].outcome, KeyOutcome::kMiss);
  EXPECT_EQ(look.keys[2].outcome, KeyOutcome::kMiss);
}

// A co-tenant's file at a sealed block's path that is not of a sealed
// block's size (a plain row, a cut block) would, if a store skipped it as
// present (L54), keep the prefix uncached for as long as it sits there.
TEST_P(SealedTierTest, AStoreReplacesAPlantedFileThatIsNotASealedBlocksSize) {
  auto tier = Open(Options(KeyFile("a.key", kKeyA)));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(2, 0x26);
  testing::AlignedRows rows(2, kRow, seed_), back(2, kRow, seed_ + 1);
  fs::create_directories(fs::path(tier->BlockPath(keys[0])).parent_path());
  fs::create_directories(fs::path(tier->BlockPath(keys[1])).parent_path());
  testing::WriteFileOrDie(tier->BlockPath(keys[0]), std::string(kRow, 'p'));            // a plain row
  testing::WriteFileOrDie(tier->BlockPath(keys[1]), std::string(kFile, 'q'));           // a sealed block's size
  const JobResult r = testing::WaitForJob(tier.get(), tier->SubmitStore(keys, rows.Const()).value());
  ASSERT_EQ(r.keys.size(), 2u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kOk) << "a plant of another size is replaced, seed " << seed_;
  EXPECT_EQ(r.keys[1].outcome, KeyOutcome::kSkippedExists) << "a file of a block's size is left to the load's check";
  EXPECT_EQ(fs::file_size(tier->BlockPath(keys[0])), kFile);
  ASSERT_EQ(Loaded(tier.get(), keys, back, 0, 1), 1u);
  EXPECT_EQ(std::memcmp(back.Row(0).data(), rows.Row(0).data(), kRow), 0);
}

TEST_P(SealedTierTest, ARotatedTierServesOldBlocksByItsReadKeyAndStoresUnderTheNewKey) {
  const std::string old_key = KeyFile("old.key", kKeyA), new_key = KeyFile("new.key", kKeyB);
  const auto keys = Keys(3, 0x33);
  testing::AlignedRows rows(3, kRow, seed_), back(3, kRow, seed_ + 1);
  std::string old_path;
  {
    auto before = Open(Options(old_key));
    ASSERT_NE(before, nullptr);
    ASSERT_EQ(Stored(before.get(), keys, rows, 0, 2), 2u);
    old_path = before->BlockPath(keys[0]);
  }
  FsTierOpenOptions o = Options(new_key);
  o.tier.seal_read_key_files = {old_key};
  auto after = Open(o);
  ASSERT_NE(after, nullptr);
  EXPECT_NE(after->BlockPath(keys[0]), old_path);
  const JobResult look = testing::WaitForJob(after.get(), after->SubmitLookup(keys).value());
  EXPECT_EQ(look.keys[0].outcome, KeyOutcome::kOk);
  EXPECT_EQ(look.keys[2].outcome, KeyOutcome::kMiss);
  ASSERT_EQ(Loaded(after.get(), keys, back, 0, 2), 2u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 2 * kRow), 0) << "seed " << seed_;
  ASSERT_EQ(Stored(after.get(), keys, rows, 2, 1), 1u);
  EXPECT_TRUE(fs::exists(after->BlockPath(keys[2])));
  // The new block is in the new key's namespace only, not the old one's.
  const std::string old_dir = fs::path(old_path).parent_path().parent_path().parent_path().string();
  const std::string new_dir = fs::path(after->BlockPath(keys[0])).parent_path().parent_path().parent_path().string();
  EXPECT_FALSE(fs::exists(old_dir + after->BlockPath(keys[2]).substr(new_dir.size())));
  EXPECT_EQ(after->Metrics().auth_failures, 0u);
}

// L171: only a primary namespace with no file falls back to the read keys; a
// failing block there is a corrupt load (not served from the old key), and
// once it is removed the next load of that key is served by the read key.
TEST_P(SealedTierTest, ARotatedTierServesTheReadKeysBlockOnceAFailingNewBlockIsRemoved) {
  const std::string old_key = KeyFile("old.key", kKeyA), new_key = KeyFile("new.key", kKeyB);
  const auto keys = Keys(2, 0x44);
  testing::AlignedRows rows(2, kRow, seed_), back(2, kRow, seed_ + 1);
  std::vector<std::string> old_paths;
  {
    auto before = Open(Options(old_key));
    ASSERT_NE(before, nullptr);
    ASSERT_EQ(Stored(before.get(), keys, rows), 2u);
    for (const OffloadKey& k : keys) old_paths.push_back(before->BlockPath(k));
  }
  FsTierOpenOptions o = Options(new_key);
  o.tier.seal_read_key_files = {old_key};
  auto after = Open(o);
  ASSERT_NE(after, nullptr);
  // At the new namespace's paths: the old key's valid block (another key and
  // namespace there), and a plain row with a zero trailer (no seal record).
  for (const OffloadKey& k : keys) fs::create_directories(fs::path(after->BlockPath(k)).parent_path());
  fs::copy_file(old_paths[0], after->BlockPath(keys[0]));
  testing::WriteFileOrDie(after->BlockPath(keys[1]), std::string(reinterpret_cast<const char*>(rows.Row(1).data()), kRow) +
                                                         std::string(4096, '\0'));
  JobResult r = testing::WaitForJob(after.get(), after->SubmitLoad(keys, back.Mut()).value());
  ASSERT_EQ(r.keys.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.keys[i].outcome, KeyOutcome::kCorrupt) << i << " " << r.keys[i].status.ToString();
    EXPECT_FALSE(fs::exists(after->BlockPath(keys[i]))) << i;
    EXPECT_TRUE(fs::exists(old_paths[i])) << i;
  }
  EXPECT_EQ(after->Metrics().auth_failures, 2u);
  const JobResult look = testing::WaitForJob(after.get(), after->SubmitLookup(keys).value());
  EXPECT_EQ(look.OkPrefix(), 2u);
  r = testing::WaitForJob(after.get(), after->SubmitLoad(keys, back.Mut()).value());
  EXPECT_EQ(r.OkPrefix(), 2u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 2 * kRow), 0) << "seed " << seed_;
  EXPECT_EQ(after->Metrics().auth_failures, 2u);
}

TEST_P(SealedTierTest, UnsealedAndSealedTiersOnOneRootNeverSeeEachOthersBlocks) {
  auto sealed = Open(Options(KeyFile("a.key", kKeyA)));
  FsTierOpenOptions plain_options = Options("");
  auto plain = Open(plain_options);
  ASSERT_TRUE(sealed && plain);
  const auto keys = Keys(2, 0x44);
  testing::AlignedRows rows(2, kRow, seed_), back(2, kRow, seed_ + 1);
  ASSERT_EQ(Stored(sealed.get(), keys, rows, 0, 1), 1u);
  ASSERT_EQ(Stored(plain.get(), keys, rows, 1, 1), 1u);
  const JobResult a = testing::WaitForJob(plain.get(), plain->SubmitLookup(keys).value());
  EXPECT_EQ(a.keys[0].outcome, KeyOutcome::kMiss);
  const JobResult b = testing::WaitForJob(sealed.get(), sealed->SubmitLookup(keys).value());
  EXPECT_EQ(b.keys[1].outcome, KeyOutcome::kMiss);
  EXPECT_EQ(Loaded(plain.get(), keys, back, 0, 1), 0u);
  EXPECT_EQ(plain->Metrics().rows_missed, 1u);
}

TEST_P(SealedTierTest, KeyErrorsFailTheOpenNamingThePathNotTheKey) {
  for (const std::string& bad : {kKeyB.substr(0, 31), kKeyA.substr(0, 40) + "zz"}) {
    const std::string path = KeyFile("bad.key", bad);
    const auto tier = FsTier::Open(Options(path));
    ASSERT_FALSE(tier.ok());
    const std::string text = tier.status().ToString();
    EXPECT_NE(text.find(path), std::string::npos) << text;
    EXPECT_EQ(text.find("RAW-KEY"), std::string::npos) << text;
    EXPECT_EQ(text.find("a1a2a3"), std::string::npos) << text;
  }
  const auto missing = FsTier::Open(Options((dir_.path() / "nope.key").string()));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("nope.key"), std::string::npos);
  FsTierOpenOptions bad_read = Options(KeyFile("a.key", kKeyA));
  bad_read.tier.seal_read_key_files = {KeyFile("short.key", "abc")};
  const auto rotated = FsTier::Open(bad_read);
  ASSERT_FALSE(rotated.ok());
  EXPECT_NE(rotated.status().ToString().find("short.key"), std::string::npos);
}

TEST_P(SealedTierTest, TwoRootsStoreAndLoadSealedBlocks) {
  FsTierOpenOptions o = Options(KeyFile("a.key", kKeyA));
  o.tier.root_dir = (dir_.path() / "r0").string() + "," + (dir_.path() / "r1").string();
  o.tier.path_sharding = PathSharding::kByBlockHash;
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  std::vector<OffloadKey> keys;
  for (uint8_t i = 0; i < 4; ++i) keys.push_back(testing::Key(i + 1, testing::KeyShape::Last(i)));
  testing::AlignedRows rows(4, kRow, seed_), back(4, kRow, seed_ + 1);
  ASSERT_EQ(Stored(tier.get(), keys, rows), 4u);
  for (const OffloadKey& k : keys) EXPECT_EQ(fs::file_size(tier->BlockPath(k)), kFile);
  ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 4u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 4 * kRow), 0) << "seed " << seed_;
}

// The C++ TieredStore takes the seal keys through vLLM's config JSON: its
// fs tier opens the key's namespace (config.json names the key id), and a
// bad key file fails the open naming the path, not the content.
TEST(SealedTieredStore, TheConfigsSealKeysReachTheFsTier) {
  testing::TempDir dir;
  internal::HostKvCache gpu({{4096, 0}}, 8);
  auto open = [&](const std::string& key_file) {
    TieredStoreOptions options;
    options.config_json = R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 65536, "secondary_tiers": )"
                          R"([{"type": "fs", "root_dir": ")" + (dir.path() / "root").string() +
                          R"(", "seal_key_file": ")" + key_file + R"("}]})";
    options.engine.gpu_block_size_tokens = 16;
    options.ns.model_name = "sealed/store";
    options.devices = {gpu.Registration()};
    return TieredStore::Open(options);
  };
  testing::WriteKeyFileOrDie(dir.path() / "good.key", kKeyA);
  auto store = open((dir.path() / "good.key").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  store->reset();
  size_t sealed_configs = 0;
  for (const auto& entry : fs::directory_iterator(dir.path() / "root")) {
    if (!fs::exists(entry.path() / "config.json")) continue;
    sealed_configs += testing::ReadJsonOrDie(entry.path() / "config.json").contains("kvtier_seal");
  }
  EXPECT_EQ(sealed_configs, 1u);
  testing::WriteKeyFileOrDie(dir.path() / "bad.key", kKeyB + "!");
  const auto bad = open((dir.path() / "bad.key").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("bad.key"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(bad.status().ToString().find("RAW-KEY"), std::string::npos) << bad.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, SealedTierTest, ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const auto& p) { return p.param == IoBackendKind::kUring ? "uring" : "syscall"; });

}  // namespace
}  // namespace kvtier
