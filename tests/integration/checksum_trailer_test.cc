// Proves that the fs tier starts, and still checks every block it wrote, on
// a filesystem without user xattrs (FORMAT.md L130-L137), on the project's
// fault filesystem answering every xattr call with EOPNOTSUPP (as NFSv3/v4.1,
// EFS, Filestore and Azure Files do):
//  * the default config opens, puts checksums in a trailer, and stores files
//    of row + 4096 bytes that load byte-exact; no xattr call reaches the
//    filesystem after the open's probe;
//  * a flipped byte of a block's row, or of its trailer's record, is caught:
//    the key is kCorrupt (EBADMSG), counted, and the file removed; a block
//    cut inside its trailer is never returned and left in place (L66); one
//    cut into its row is short, and removed (L65);
//  * a plain row as vLLM writes it (exact size, no trailer) loads (L68);
//  * checksum_place "xattr" refuses to open there, naming the ways out;
//  * fsck --verify-data finds a trailer block's flipped byte, and fsck takes
//    a damaged trailer record for a corrupt block (removed by --repair); du counts the
//    files' real bytes; gc and fsck take plain rows beside trailer blocks
//    as neither short nor long, whichever is the most common size (L136),
//    and gc's capacity bound, like the tier's max_bytes, counts the files'
//    real bytes.
// And, on a local disk with checksum_place "trailer" (real syscalls, logged):
// the temp file is opened O_DIRECT and each block is one vectored write of
// row + trailer, each load one vectored read (no buffered fallback, no
// extra request); short transfers cut anywhere still give exact rows.
// Seeded random rows; the seed is printed on failure.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fs/fs_tier_internal.h"
#include "kvtier/fs_tier.h"
#include "kvtier/ops.h"
#include "support/fake_backend.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;
constexpr uint64_t kFile = kRow + 4096;

std::vector<OffloadKey> Keys(size_t n, uint8_t salt) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> b(32, salt);
    b[0] = static_cast<uint8_t>(i * 37);
    keys.push_back({BlockHash::FromBytes(b).value(), 0});
  }
  return keys;
}

FsTierOpenOptions Options(const fs::path& root) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns.model_name = "trailer/model";
  o.ns.kv_cache_groups.push_back({16, {"l0"}});
  o.row_bytes = kRow;
  o.tier.n_read_threads = 2;
  o.tier.n_write_threads = 2;
  o.tier.io_timeout_ms = 5000;
  return o;
}

void Poke(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x21));
}

class NoXattrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    auto mounted = testing::FaultFs::Mount((dir_.path() / "backing").string(), (dir_.path() / "mnt").string());
    ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();
    faultfs_ = std::move(mounted).value();
    ASSERT_OK(faultfs_->Fail("xattr", EOPNOTSUPP));
    root_ = dir_.path() / "mnt" / "root";
  }
  void TearDown() override {
    tier_.reset();
    faultfs_.reset();
  }
  FsTier* Open(FsTierOpenOptions o) {
    auto tier = FsTier::Open(o);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = tier.ok() ? std::move(tier).value() : nullptr;
    return tier_.get();
  }
  // Plain rows as vLLM writes them (no trailer) under the tier's names for
  // `keys`; their paths.
  std::vector<std::string> WritePlainRows(const std::vector<OffloadKey>& keys, const void* row) const {
    std::vector<std::string> paths;
    for (const OffloadKey& key : keys) {
      paths.push_back(tier_->BlockPath(key));
      fs::create_directories(fs::path(paths.back()).parent_path());
      std::ofstream(paths.back(), std::ios::binary).write(static_cast<const char*>(row), kRow);
    }
    return paths;
  }
  std::string Backing(const OffloadKey& key) const {
    const std::string path = tier_->BlockPath(key);
    return (dir_.path() / "backing" / fs::relative(path, dir_.path() / "mnt")).string();
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::FaultFs> faultfs_;
  fs::path root_;
  std::unique_ptr<FsTier> tier_;
  uint64_t seed_ = testing::TestSeed();
};

TEST_F(NoXattrTest, DefaultsStartStoreTrailersAndLoadByteExact) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->checksum_place(), "trailer");
  EXPECT_FALSE(tier->xattrs_supported());
  const auto keys = Keys(6, 0x31);
  testing::AlignedRows rows(6, kRow, seed_), back(6, kRow, seed_ + 1);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 6u);
  for (const OffloadKey& k : keys) EXPECT_EQ(fs::file_size(tier->BlockPath(k)), kFile);
  ASSERT_OK(faultfs_->Fail("xattr", EIO));  // any xattr call from here on would fail its key
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 6u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 6 * kRow), 0) << "seed " << seed_;
  EXPECT_GT(tier->Metrics().checksum_ns, 0u);
}

TEST_F(NoXattrTest, FlippedRowOrRecordBytesAndCutFilesAreNeverReturned) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(5, 0x32);
  testing::AlignedRows rows(5, kRow, seed_), back(5, kRow, seed_ + 1);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 5u);
  Poke(Backing(keys[1]), kRow / 3);          // the row
  Poke(Backing(keys[2]), kFile - 30);        // the trailer's record
  fs::resize_file(Backing(keys[3]), kRow + 2048);  // cut inside the trailer: a longer file (L66)
  fs::resize_file(Backing(keys[4]), kRow - 4096);  // cut into the row: short (L65)
  const JobResult r = testing::WaitForJob(tier, tier->SubmitLoad(keys, back.Mut()).value());
  ASSERT_EQ(r.keys.size(), 5u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kOk);
  EXPECT_EQ(std::memcmp(back.Row(0).data(), rows.Row(0).data(), kRow), 0) << "seed " << seed_;
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(r.keys[i].outcome, KeyOutcome::kCorrupt) << i << " " << r.keys[i].status.ToString();
  EXPECT_EQ(r.keys[1].status.code(), StatusCode::kCorruption);
  EXPECT_NE(r.keys[1].status.ToString().find("CRC32C mismatch"), std::string::npos) << r.keys[1].status.ToString();
  EXPECT_NE(r.keys[2].status.ToString().find("damaged checksum trailer"), std::string::npos) << r.keys[2].status.ToString();
  EXPECT_FALSE(fs::exists(Backing(keys[1])));
  EXPECT_FALSE(fs::exists(Backing(keys[2])));
  EXPECT_TRUE(fs::exists(Backing(keys[3]))) << "a longer file may be another page size's row: left (L66)";
  EXPECT_FALSE(fs::exists(Backing(keys[4])));
  EXPECT_EQ(tier->Metrics().rows_corrupt, 4u);
}

TEST_F(NoXattrTest, VllmPlainRowsLoadAndXattrPlaceRefusesToOpen) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(2, 0x33);
  testing::AlignedRows rows(2, kRow, seed_), back(2, kRow, seed_ + 1);
  for (size_t i = 0; i < 2; ++i) {  // as vLLM writes: the row alone, no trailer, no xattr
    const std::string path = tier->BlockPath(keys[i]);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(rows.Row(i).data()), kRow);
  }
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 2u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 2 * kRow), 0) << "seed " << seed_;
  tier_.reset();

  FsTierOpenOptions o = Options(root_);
  o.tier.checksum_place = ChecksumPlaceKind::kXattr;
  auto refused = FsTier::Open(o);
  ASSERT_FALSE(refused.ok());
  const std::string text = refused.status().ToString();
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << text;
  EXPECT_NE(text.find(root_.string()), std::string::npos) << text;
  EXPECT_NE(text.find("\"checksum_place\": \"auto\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"checksum_blocks\": false"), std::string::npos) << text;
}

TEST_F(NoXattrTest, FsckVerifyDataCatchesATrailerBlockAndToolsSizeItRight) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(4, 0x34);
  testing::AlignedRows rows(4, kRow, seed_);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 4u);
  // Plain rows beside the trailer blocks (vLLM wrote them), the most common
  // size: the trailer blocks are neither long (fsck reads their records) nor
  // the plain rows short.
  std::vector<std::string> plain_paths = WritePlainRows(Keys(5, 0x35), rows.Row(1).data());
  const std::string bad = tier->BlockPath(keys[2]);
  tier_.reset();
  Poke((dir_.path() / "backing" / fs::relative(bad, dir_.path() / "mnt")).string(), 100);

  ScanOptions scan;
  scan.root = root_.string();
  ASSERT_OK_AND_ASSIGN(DuReport du, Du(scan));
  EXPECT_EQ(du.total_blocks, 9u);
  EXPECT_EQ(du.total_bytes, 4 * kFile + 5 * kRow) << "du counts what the files hold, trailers included";

  FsckOptions check;
  check.root = root_.string();
  ASSERT_OK_AND_ASSIGN(FsckReport clean, Fsck(check));
  EXPECT_TRUE(clean.findings.empty()) << FindingKindName(clean.findings[0].kind) << " " << clean.findings[0].path;
  check.verify_data = true;
  check.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport verified, Fsck(check));
  ASSERT_EQ(verified.findings.size(), 1u);
  EXPECT_EQ(verified.findings[0].kind, FindingKind::kCrcMismatch);
  EXPECT_EQ(root_ / verified.findings[0].path, fs::path(bad));
  EXPECT_EQ(verified.findings[0].action, RepairAction::kRemoved);
  EXPECT_EQ(verified.blocks_verified, 9u);
  EXPECT_FALSE(fs::exists(bad));

  GcOptions gc;
  gc.root = root_.string();
  ASSERT_OK_AND_ASSIGN(GcReport collected, Gc(gc));
  for (const auto& r : collected.reclaimed) ADD_FAILURE() << "gc removed " << r.path << " (" << r.reason << ")";
  for (const std::string& p : plain_paths) EXPECT_TRUE(fs::exists(p));
}

// L67: a trailer block whose trailer magic is there but whose record fails
// its own CRC is corrupt, not a longer row: fsck reports it as a CRC mismatch
// (with or without --verify-data, the record is read either way) and --repair
// removes it; the intact trailer blocks and the plain rows beside it stay.
TEST_F(NoXattrTest, FsckTakesADamagedTrailerForACorruptBlockAndRepairRemovesIt) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(3, 0x3a);
  testing::AlignedRows rows(3, kRow, seed_);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 3u);
  // vLLM's plain rows, the most common size.
  std::vector<std::string> kept = WritePlainRows(Keys(5, 0x3b), rows.Row(0).data());
  const std::string bad = tier->BlockPath(keys[1]);
  kept.push_back(tier->BlockPath(keys[0]));
  kept.push_back(tier->BlockPath(keys[2]));
  const std::string bad_backing = Backing(keys[1]);
  tier_.reset();
  Poke(bad_backing, kFile - 20);  // inside the 64-byte record at the file's end

  for (const bool verify : {false, true}) {
    SCOPED_TRACE(verify ? "--verify-data" : "structure only");
    FsckOptions check;
    check.root = root_.string();
    check.verify_data = verify;
    check.repair = verify;
    ASSERT_OK_AND_ASSIGN(FsckReport report, Fsck(check));
    ASSERT_EQ(report.findings.size(), 1u) << FindingKindName(report.findings[0].kind);
    EXPECT_EQ(report.findings[0].kind, FindingKind::kCrcMismatch) << FindingKindName(report.findings[0].kind);
    EXPECT_EQ(root_ / report.findings[0].path, fs::path(bad));
    EXPECT_EQ(report.findings[0].action, verify ? RepairAction::kRemoved : RepairAction::kNone);
  }
  EXPECT_FALSE(fs::exists(bad));
  for (const std::string& p : kept) EXPECT_TRUE(fs::exists(p)) << p;
}

// L136: when none of the sampled blocks of the most common size (trailer
// blocks here) can be read, fsck --repair cannot tell whether the blocks one
// trailer smaller are plain rows, and removes none of them (a read that
// fails proves nothing about trailers).
TEST_F(NoXattrTest, FsckRemovesNoPlainRowWhenNoSampledBlockCouldBeRead) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(5, 0x36);
  testing::AlignedRows rows(5, kRow, seed_);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 5u);
  std::vector<std::string> plain_paths = WritePlainRows(Keys(2, 0x37), rows.Row(0).data());
  for (const OffloadKey& key : keys) {
    ASSERT_OK(faultfs_->Fail("read", EIO, fs::path(tier->BlockPath(key)).filename().string()));
  }
  tier_.reset();

  FsckOptions check;
  check.root = root_.string();
  check.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport report, Fsck(check));
  for (const std::string& p : plain_paths) EXPECT_TRUE(fs::exists(p)) << p << " removed on unread samples";
  size_t reported = 0;
  for (const auto& f : report.findings) {
    if (f.kind != FindingKind::kSizeMismatch) continue;
    ++reported;
    EXPECT_EQ(f.action, RepairAction::kNone) << f.path;
  }
  EXPECT_EQ(reported, plain_paths.size());
}

// A budget that fits a row but not a row and its trailer would refuse every
// store: the open fails instead, naming the trailer.
TEST_F(NoXattrTest, MaxBytesUnderOneTrailerBlockFailsTheOpen) {
  FsTierOpenOptions o = Options(root_);
  o.tier.capacity_bytes_max = kRow + 100;
  auto tier = FsTier::Open(o);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tier.status().ToString().find("trailer"), std::string::npos) << tier.status().ToString();
}

// max_bytes (vLLM PR #54327) bounds what the files hold: a budget that four
// rows fit but four trailer blocks do not keeps three.
TEST_F(NoXattrTest, MaxBytesCountsTheTrailers) {
  FsTierOpenOptions o = Options(root_);
  o.tier.capacity_bytes_max = 4 * kRow + 100;
  FsTier* tier = Open(o);
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(4, 0x3a);
  testing::AlignedRows rows(4, kRow, seed_);
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<OffloadKey> one{keys[i]};
    const std::vector<std::span<const uint8_t>> row{rows.Row(i)};
    ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(one, row).value()).OkPrefix(), 1u) << i;
  }
  const FsTierMetrics m = tier->Metrics();
  EXPECT_EQ(m.capacity_evicted_blocks, 1u);
  EXPECT_EQ(m.namespace_bytes, 3 * kFile);
  uint64_t on_disk = 0;
  for (const OffloadKey& k : keys) on_disk += fs::exists(tier->BlockPath(k)) ? fs::file_size(tier->BlockPath(k)) : 0;
  EXPECT_EQ(on_disk, 3 * kFile);
  EXPECT_LE(on_disk, *o.tier.capacity_bytes_max);
}

TEST_F(NoXattrTest, GcKeepsPlainRowsBesideTrailerBlocksAndCountsFileBytes) {
  FsTier* tier = Open(Options(root_));
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(4, 0x38);
  testing::AlignedRows rows(4, kRow, seed_);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 4u);
  const std::string plain = tier->BlockPath(Keys(1, 0x39)[0]);  // vLLM's, one trailer smaller than the rest
  fs::create_directories(fs::path(plain).parent_path());
  std::ofstream(plain, std::ios::binary).write(reinterpret_cast<const char*>(rows.Row(0).data()), kRow);
  tier_.reset();

  GcOptions gc;
  gc.root = root_.string();
  ASSERT_OK_AND_ASSIGN(GcReport unbounded, Gc(gc));
  for (const auto& r : unbounded.reclaimed) ADD_FAILURE() << "gc removed " << r.path << " (" << r.reason << ")";
  EXPECT_TRUE(fs::exists(plain)) << "a plain row beside trailer blocks is not short (L136)";

  gc.max_bytes = 4 * kFile + kRow - 1;  // one block too many, counted as the files' bytes
  ASSERT_OK_AND_ASSIGN(GcReport bounded, Gc(gc));
  ASSERT_EQ(bounded.reclaimed.size(), 1u);
  EXPECT_EQ(bounded.reclaimed[0].reason, "capacity");
  EXPECT_EQ(bounded.bytes_reclaimed, bounded.reclaimed[0].path.ends_with(fs::path(plain).filename().string()) ? kRow : kFile);
}

// Real syscalls through a logging backend, on the local disk.
class TrailerDirectTest : public ::testing::Test {
 protected:
  FsTier* Open(testing::FaultPlan plan) {
    FsTierOpenOptions o = Options(root_.path());
    o.tier.checksum_place = ChecksumPlaceKind::kTrailer;
    auto fake = std::make_unique<testing::FakeBackend>(seed_, plan);
    fake_ = fake.get();
    auto tier = internal::OpenFsTierWithBackend(o, std::move(fake));
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = tier.ok() ? std::move(tier).value() : nullptr;
    return tier_.get();
  }
  size_t Count(internal::IoOp op) const {
    size_t n = 0;
    for (const internal::IoRequest& r : fake_->log()) n += r.op == op;
    return n;
  }

  testing::TempDir root_;
  uint64_t seed_ = testing::TestSeed();
  testing::FakeBackend* fake_ = nullptr;
  std::unique_ptr<FsTier> tier_;
};

TEST_F(TrailerDirectTest, RowAndTrailerGoInOneODirectRequestEachWay) {
  FsTier* tier = Open({});
  ASSERT_NE(tier, nullptr);
  if (!tier->o_direct()) {
    GTEST_SKIP() << "this filesystem refuses O_DIRECT";
  }
  EXPECT_EQ(tier->checksum_place(), "trailer");
  const auto keys = Keys(4, 0x36);
  testing::AlignedRows rows(4, kRow, seed_), back(4, kRow, seed_ + 1);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 4u);
  size_t creates = 0, direct_creates = 0;  // a temp file's open, again after its shard directory was made
  for (const internal::IoRequest& r : fake_->log()) {
    if (r.op == internal::IoOp::kOpen && (r.flags & O_CREAT) != 0) {
      ++creates;
      direct_creates += (r.flags & O_DIRECT) != 0;
    }
    if (r.op == internal::IoOp::kWritev) {
      EXPECT_EQ(r.len, 2u) << "one iovec for the row, one for its trailer";
    }
  }
  EXPECT_GE(creates, 4u);
  EXPECT_EQ(direct_creates, creates);
  EXPECT_EQ(Count(internal::IoOp::kWritev), 4u) << "one write per block: O_DIRECT took row and trailer at once";
  EXPECT_EQ(Count(internal::IoOp::kWrite), 0u);
  EXPECT_EQ(Count(internal::IoOp::kFsetxattr), 0u);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 4u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 4 * kRow), 0) << "seed " << seed_;
  EXPECT_EQ(Count(internal::IoOp::kReadv), 4u) << "one read per block";
  EXPECT_EQ(Count(internal::IoOp::kFgetxattr), 0u) << "a trailer block needs no xattr call";
  size_t direct_reads = 0;
  for (const internal::IoRequest& r : fake_->log()) {
    if (r.op == internal::IoOp::kOpen && (r.flags & O_ACCMODE) == O_RDONLY && (r.flags & (O_DIRECTORY | O_PATH)) == 0) {
      direct_reads += (r.flags & O_DIRECT) != 0;
    }
  }
  EXPECT_EQ(direct_reads, 4u);
}

TEST_F(TrailerDirectTest, ShortTransfersAcrossRowAndTrailerStillGiveExactRows) {
  testing::FaultPlan plan;
  plan.short_transfer_one_in = 2;
  plan.eagain_one_in = 5;
  FsTier* tier = Open(plan);
  ASSERT_NE(tier, nullptr);
  const auto keys = Keys(8, 0x37);
  testing::AlignedRows rows(8, kRow, seed_), back(8, kRow, seed_ + 1);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 8u);
  for (const OffloadKey& k : keys) EXPECT_EQ(fs::file_size(tier->BlockPath(k)), kFile);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 8u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 8 * kRow), 0) << "seed " << seed_;
  EXPECT_GT(fake_->faults_injected(), 0);
}

}  // namespace
}  // namespace kvtier
