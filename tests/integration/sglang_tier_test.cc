// Proves kvtier's SGLang store (include/kvtier/sglang.h) on real files, per
// backend (io_uring, syscall pool) and with bounce rows on and off:
//  * a page moved as 1, 2 (K, V) or 2*L pieces, page-aligned or not, reads
//    back byte-exact, its file holds the pieces' concatenation and its CRC32C
//    attribute is the concatenation's; a page written as pieces reads back
//    as one piece; a flipped byte makes the load false (with bounce rows the
//    caller's pieces are not even touched); unaligned pages keep O_DIRECT
//    through staging rows (staged_ios), aligned ones are never staged;
//  * ExistsPrefix counts the consecutive prefix only; pages of the wrong size
//    and calls after Close are false without raising;
//  * the namespace: each field that changes a page's bytes changes the
//    digest (ranks only the block directory), config.json and the hashed
//    JSON are Python's bytes (digest computed with Python's hashlib), MLA
//    ranks share TP rank 0's directory, keys that are not 64 lowercase hex
//    are named by their SHA-256, bad specs are refused naming the field;
//  * a store reopened on a populated root serves what it stored; several
//    roots (path_sharding) spread and serve pages; Clear removes only this
//    namespace's pages and temp files; three threads at once; on a hung FUSE
//    mount every call returns false within the deadline and Close returns.
// Seeded random bytes; the seed is printed on failure (KVTIER_TEST_SEED).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "kvtier/sglang.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// 4 tokens x 2 layers x (512 + 512) bytes: 8192 bytes a page, K 4096, V 4096.
constexpr int64_t kPageSize = 4, kLayers = 2, kKBytes = 512, kVBytes = 512;
constexpr uint64_t kPage = kPageSize * kLayers * (kKBytes + kVBytes);

constexpr char kModel[] = "org/model";
constexpr testing::SglangShape kShape{kPageSize, kLayers, kKBytes, kVBytes, 1};
using testing::SglangSpec;

// 64-hex page keys, as SGLang's.
std::string PageKey(uint64_t i) {
  char buf[65];
  std::snprintf(buf, sizeof buf, "%016llx%016llx%016llx%016llx", static_cast<unsigned long long>(i), 0x5eedULL,
                static_cast<unsigned long long>(i * 7919),
                static_cast<unsigned long long>(i * 0x9e3779b97f4a7c15ULL));  // the last bytes pick the root (L99)
  return buf;
}

// One page's pieces, each in its own 4096-aligned allocation, at offset 0
// (aligned) or 1 (unaligned address).
struct PagePieces {
  PagePieces(const std::vector<uint64_t>& lengths, bool unaligned) {
    for (uint64_t len : lengths) {
      auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, (len + 4096) / 4096 * 4096 + 4096));
      allocs.push_back(p);
      pieces.emplace_back(p + (unaligned ? 1 : 0), len);
    }
  }
  ~PagePieces() {
    for (uint8_t* p : allocs) std::free(p);
  }
  PagePieces(PagePieces&& o) noexcept : allocs(std::move(o.allocs)), pieces(std::move(o.pieces)) { o.allocs.clear(); }
  PagePieces(const PagePieces&) = delete;

  void Fill(std::mt19937_64& rng) {
    for (auto p : pieces) for (auto& b : p) b = static_cast<uint8_t>(rng());
  }
  void Set(uint8_t v) {
    for (auto p : pieces) std::memset(p.data(), v, p.size());
  }
  std::string Concat() const {
    std::string out;
    for (auto p : pieces) out.append(reinterpret_cast<const char*>(p.data()), p.size());
    return out;
  }
  SglangConstPagePieces Const() const { return {pieces.begin(), pieces.end()}; }

  std::vector<uint8_t*> allocs;
  SglangPagePieces pieces;
};

// The piece shapes of SGLang's host pools: one flat piece; [K, V]
// (page_first*); [K_0, V_0, K_1, V_1] (MHA layer_first, 2*L pieces).
std::vector<uint64_t> Shape(int pieces) {
  if (pieces == 1) return {kPage};
  if (pieces == 2) return {kPage / 2, kPage / 2};
  return std::vector<uint64_t>(2 * kLayers, kPage / (2 * kLayers));
}

std::vector<PagePieces> MakePages(size_t n, int pieces, bool unaligned) {
  std::vector<PagePieces> pages;
  for (size_t i = 0; i < n; ++i) pages.emplace_back(Shape(pieces), unaligned);
  return pages;
}

std::vector<SglangConstPagePieces> ConstOf(const std::vector<PagePieces>& pages) {
  std::vector<SglangConstPagePieces> out;
  for (const auto& p : pages) out.push_back(p.Const());
  return out;
}
std::vector<SglangPagePieces> MutOf(const std::vector<PagePieces>& pages) {
  std::vector<SglangPagePieces> out;
  for (const auto& p : pages) out.push_back(p.pieces);
  return out;
}

struct KeySet {
  explicit KeySet(std::vector<std::string> k) : keys(std::move(k)) {
    for (const auto& s : keys) views.push_back(s);
  }
  static KeySet Range(uint64_t first, size_t n) {
    std::vector<std::string> k;
    for (size_t i = 0; i < n; ++i) k.push_back(PageKey(first + i));
    return KeySet(std::move(k));
  }
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
};

// Whether the filesystem under `dir` takes O_DIRECT (as the tier's probe
// asks): only there are unaligned pages staged.
bool ODirectWorks(const std::filesystem::path& dir) {
  const std::string path = (dir / "o_direct_check").string();
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd), ::unlink(path.c_str());
  return fd >= 0;
}

size_t CountTrue(const std::vector<bool>& v) { return static_cast<size_t>(std::count(v.begin(), v.end(), true)); }

struct Param {
  IoBackendKind backend;
  bool bounce;
};

class SglangTierTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { rng_.seed(testing::TestSeed()); }

  SglangTierOptions Options(std::string root_dir, SglangPageSpec spec = SglangSpec(kModel, kShape)) const {
    SglangTierOptions o;
    o.tier.root_dir = std::move(root_dir);
    o.tier.n_read_threads = 4;
    o.tier.n_write_threads = 4;
    o.tier.io_backend = GetParam().backend;
    o.tier.bounce_loads = GetParam().bounce ? BounceLoads::kOn : BounceLoads::kOff;
    o.spec = std::move(spec);
    return o;
  }
  std::unique_ptr<SglangTier> Open(const SglangTierOptions& o) {
    auto store = SglangTier::Open(o);
    if (!store.ok() && store.status().code() == StatusCode::kUnavailable) {
      skipped_ = true;
      return nullptr;
    }
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::unique_ptr<SglangTier> Open() { return Open(Options(root_.path().string())); }

  std::string FileBytes(const std::string& path) const { return testing::ReadFileOrDie(path); }

  testing::TempDir root_;
  std::mt19937_64 rng_;
  bool skipped_ = false;
};

#define OPEN_OR_SKIP(var, ...)                       \
  auto var = Open(__VA_ARGS__);                      \
  if (skipped_) GTEST_SKIP() << "backend unavailable"; \
  ASSERT_NE(var, nullptr)

TEST_P(SglangTierTest, PiecesRoundTripAndTheFileIsTheirConcatenation) {
  OPEN_OR_SKIP(store);
  uint64_t first = 0;
  for (int pieces : {1, 2, 2 * static_cast<int>(kLayers)}) {
    for (bool unaligned : {false, true}) {
      SCOPED_TRACE("pieces " + std::to_string(pieces) + (unaligned ? " unaligned" : " aligned"));
      const KeySet keys = KeySet::Range(first, 6);
      first += 6;
      std::vector<PagePieces> pages = MakePages(6, pieces, unaligned);
      for (auto& p : pages) p.Fill(rng_);
      const std::vector<bool> stored = store->Store(keys.views, ConstOf(pages));
      ASSERT_EQ(CountTrue(stored), 6u);
      std::vector<PagePieces> back = MakePages(6, pieces, unaligned);
      for (auto& p : back) p.Set(0xee);
      ASSERT_EQ(CountTrue(store->Load(keys.views, MutOf(back))), 6u);
      for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(back[i].Concat(), pages[i].Concat()) << "page " << i;
        const std::string path = store->PagePath(keys.keys[i]);
        EXPECT_EQ(FileBytes(path), pages[i].Concat()) << path;
        uint8_t crc_be[4];
        ASSERT_EQ(getxattr(path.c_str(), "user.vllm.kv_crc32c", crc_be, 4), 4) << path;
        const std::string flat = pages[i].Concat();
        const uint32_t want = internal::Crc32c({reinterpret_cast<const uint8_t*>(flat.data()), flat.size()});
        EXPECT_EQ(uint32_t{crc_be[0]} << 24 | uint32_t{crc_be[1]} << 16 | uint32_t{crc_be[2]} << 8 | crc_be[3], want);
      }
      // Written as pieces, read as one flat piece (the generic path's view).
      std::vector<PagePieces> flat = MakePages(6, 1, false);
      ASSERT_EQ(CountTrue(store->Load(keys.views, MutOf(flat))), 6u);
      for (size_t i = 0; i < 6; ++i) EXPECT_EQ(flat[i].Concat(), pages[i].Concat());
      // Storing again: already present, still true.
      EXPECT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 6u);
    }
  }
  const FsTierMetrics m = store->Metrics();
  EXPECT_EQ(m.rows_stored, 36u);
  EXPECT_EQ(m.rows_skipped_exists, 36u);
}

TEST_P(SglangTierTest, PageAlignedPerLayerPiecesRoundTrip) {
  // 8 tokens x 4 layers: each K_l and V_l piece is 4096 bytes, so aligned
  // pieces take O_DIRECT's vectored path (2*L pieces, one request).
  SglangPageSpec spec = SglangSpec(kModel, kShape);
  spec.page_size = 8;
  spec.layer_num = 4;
  spec.mem_layout = "layer_first";
  OPEN_OR_SKIP(store, Options(root_.path().string(), spec));
  const uint64_t piece = 8 * 512;
  for (bool unaligned : {false, true}) {
    const KeySet keys = KeySet::Range(unaligned ? 50 : 40, 5);
    std::vector<PagePieces> pages, back;
    for (int i = 0; i < 5; ++i) {
      pages.emplace_back(std::vector<uint64_t>(8, piece), unaligned);
      back.emplace_back(std::vector<uint64_t>(8, piece), unaligned);
      pages.back().Fill(rng_);
    }
    ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 5u);
    ASSERT_EQ(CountTrue(store->Load(keys.views, MutOf(back))), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(back[i].Concat(), pages[i].Concat());
      EXPECT_EQ(FileBytes(store->PagePath(keys.keys[i])), pages[i].Concat());
    }
    // Unaligned pages keep O_DIRECT through staging rows; aligned ones are
    // never staged.
    if (ODirectWorks(root_.path())) {
      EXPECT_EQ(store->Metrics().staged_ios, unaligned ? 10u : 0u);
    }
  }
}

// Flips one random bit of the file at `path` in place (its CRC attribute
// stays, so a load must find the mismatch).
void FlipOneByteInPlace(const std::string& path, std::mt19937_64& rng) {
  std::string bytes = testing::ReadFileOrDie(path);
  const size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

TEST_P(SglangTierTest, AFlippedByteIsNeverLoaded) {
  OPEN_OR_SKIP(store);
  const KeySet keys = KeySet::Range(100, 3);
  std::vector<PagePieces> pages = MakePages(3, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 3u);
  const std::string path = store->PagePath(keys.keys[1]);
  ASSERT_NO_FATAL_FAILURE(FlipOneByteInPlace(path, rng_));
  std::vector<PagePieces> back = MakePages(3, 2, false);
  for (auto& p : back) p.Set(0x77);
  const std::vector<bool> ok = store->Load(keys.views, MutOf(back));
  EXPECT_EQ(ok, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(back[0].Concat(), pages[0].Concat());
  EXPECT_EQ(back[2].Concat(), pages[2].Concat());
  if (GetParam().bounce) {
    EXPECT_EQ(back[1].Concat(), std::string(kPage, '\x77')) << "a bad page touched the pieces";
  }
  EXPECT_EQ(store->Metrics().rows_corrupt, 1u);
  EXPECT_FALSE(fs::exists(path)) << "a bad-CRC page is removed (L67)";
  EXPECT_EQ(store->ExistsPrefix(keys.views), 1u);
}

// Unaligned [K, V] pages with O_DIRECT are read into a staging row (or a
// bounce row) and verified there: a bad page is false and its pieces are
// never written, with bounce rows on or off.
TEST_P(SglangTierTest, AFlippedByteInAStagedPageNeverReachesThePieces) {
  OPEN_OR_SKIP(store);
  if (!ODirectWorks(root_.path())) GTEST_SKIP() << "no O_DIRECT here: pages are not staged";
  const KeySet keys = KeySet::Range(150, 2);
  std::vector<PagePieces> pages = MakePages(2, 2, /*unaligned=*/true);
  for (auto& p : pages) p.Fill(rng_);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 2u);
  const std::string path = store->PagePath(keys.keys[0]);
  ASSERT_NO_FATAL_FAILURE(FlipOneByteInPlace(path, rng_));
  std::vector<PagePieces> back = MakePages(2, 2, /*unaligned=*/true);
  for (auto& p : back) p.Set(0x77);
  EXPECT_EQ(store->Load(keys.views, MutOf(back)), (std::vector<bool>{false, true}));
  EXPECT_EQ(back[0].Concat(), std::string(kPage, '\x77')) << "a bad page touched the pieces";
  EXPECT_EQ(back[1].Concat(), pages[1].Concat());
  EXPECT_EQ(store->Metrics().rows_corrupt, 1u);
  EXPECT_EQ(store->Metrics().staged_ios, 5u) << "two stores, three loads (the bad one O_DIRECT too, twice: L67)";
}

TEST_P(SglangTierTest, ExistsPrefixCountsOnlyTheConsecutivePrefix) {
  OPEN_OR_SKIP(store);
  const KeySet keys = KeySet::Range(200, 10);
  std::vector<PagePieces> pages = MakePages(10, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  std::vector<std::string_view> some;
  std::vector<SglangConstPagePieces> some_pages;
  for (size_t i = 0; i < 10; ++i) {
    if (i == 5) continue;  // the hole
    some.push_back(keys.views[i]);
    some_pages.push_back(pages[i].Const());
  }
  ASSERT_EQ(CountTrue(store->Store(some, some_pages)), 9u);
  EXPECT_EQ(store->ExistsPrefix(keys.views), 5u);
  EXPECT_EQ(store->ExistsPrefix(std::span(keys.views).subspan(6)), 4u);
  EXPECT_EQ(store->ExistsPrefix(std::span(keys.views).subspan(5)), 0u);
  EXPECT_EQ(store->ExistsPrefix({}), 0u);
  const KeySet fresh = KeySet::Range(900, 3);
  EXPECT_EQ(store->ExistsPrefix(fresh.views), 0u);
  // A load of the hole is false; the others load.
  std::vector<PagePieces> back = MakePages(10, 2, false);
  const std::vector<bool> ok = store->Load(keys.views, MutOf(back));
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(ok[i], i != 5) << i;
}

TEST_P(SglangTierTest, WrongSizedPagesAndClosedStoresAnswerFalse) {
  OPEN_OR_SKIP(store);
  const KeySet keys = KeySet::Range(300, 2);
  std::vector<PagePieces> pages;
  pages.emplace_back(std::vector<uint64_t>{kPage}, false);
  pages.emplace_back(std::vector<uint64_t>{kPage / 2, kPage / 2 - 1}, false);  // one byte short
  for (auto& p : pages) p.Fill(rng_);
  EXPECT_EQ(store->Store(keys.views, ConstOf(pages)), (std::vector<bool>{true, false}));
  EXPECT_EQ(store->Load(keys.views, MutOf(pages)), (std::vector<bool>{true, false}));
  EXPECT_EQ(CountTrue(store->Load(keys.views, {})), 0u) << "pages.size() != keys.size()";
  store->Close();
  store->Close();  // idempotent
  EXPECT_EQ(store->ExistsPrefix(keys.views), 0u);
  EXPECT_EQ(CountTrue(store->Load(keys.views, MutOf(pages))), 0u);
  EXPECT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 0u);
  EXPECT_EQ(store->Clear().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->Metrics().rows_stored, 0u);
}

TEST_P(SglangTierTest, KeysThatAreNot64LowerHexAreNamedByTheirSha256) {
  OPEN_OR_SKIP(store);
  const std::string upper(64, 'A');
  const KeySet keys(std::vector<std::string>{"abc", "", upper, "tokens:1,2,3 \xc3\xa9"});
  EXPECT_EQ(SglangPageName("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(SglangPageName(PageKey(1)), PageKey(1));
  EXPECT_NE(SglangPageName(upper), upper);
  EXPECT_EQ(store->ns().PageRelPath("abc"),
            store->ns().block_dir_name() + "/ba7/81_g0/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.bin");
  std::vector<PagePieces> pages = MakePages(4, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 4u);
  std::vector<PagePieces> back = MakePages(4, 1, false);
  ASSERT_EQ(CountTrue(store->Load(keys.views, MutOf(back))), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(back[i].Concat(), pages[i].Concat());
  EXPECT_TRUE(fs::exists(store->PagePath("abc")));
}

TEST_P(SglangTierTest, AReopenedStoreServesWhatItStored) {
  const KeySet keys = KeySet::Range(400, 8);
  std::vector<PagePieces> pages = MakePages(8, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  std::string config;
  {
    OPEN_OR_SKIP(store);
    ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 8u);
    config = FileBytes(root_.path() / store->ns().dir_name() / "config.json");
  }
  OPEN_OR_SKIP(again);
  EXPECT_EQ(again->ExistsPrefix(keys.views), 8u);
  std::vector<PagePieces> back = MakePages(8, 2, true);
  ASSERT_EQ(CountTrue(again->Load(keys.views, MutOf(back))), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(back[i].Concat(), pages[i].Concat());
  EXPECT_EQ(FileBytes(root_.path() / again->ns().dir_name() / "config.json"), config);
  EXPECT_EQ(config, again->ns().config_json());
}

TEST_P(SglangTierTest, SeveralRootsSpreadServeAndClearPages) {
  const std::string a = (root_.path() / "a").string(), b = (root_.path() / "b").string();
  SglangTierOptions o = Options(a + "," + b);
  o.tier.path_sharding = PathSharding::kByBlockHash;
  OPEN_OR_SKIP(store, o);
  const KeySet keys = KeySet::Range(500, 32);
  std::vector<PagePieces> pages = MakePages(32, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 32u);
  size_t on_a = 0, on_b = 0;
  for (const auto& k : keys.keys) {
    const std::string path = store->PagePath(k);
    ASSERT_TRUE(fs::exists(path)) << path;
    (path.starts_with(a + "/") ? on_a : on_b) += 1;
  }
  EXPECT_GT(on_a, 0u);
  EXPECT_GT(on_b, 0u);
  std::vector<PagePieces> back = MakePages(32, 2, false);
  ASSERT_EQ(CountTrue(store->Load(keys.views, MutOf(back))), 32u);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(back[i].Concat(), pages[i].Concat());
  ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Clear());
  EXPECT_EQ(removed, 32u);
  EXPECT_EQ(store->ExistsPrefix(keys.views), 0u);
}

TEST_P(SglangTierTest, ClearRemovesOnlyThisNamespacesPagesAndTempFiles) {
  OPEN_OR_SKIP(store);
  OPEN_OR_SKIP(other, Options(root_.path().string(), SglangSpec("another/model", kShape)));
  const KeySet keys = KeySet::Range(600, 5);
  std::vector<PagePieces> pages = MakePages(5, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 5u);
  ASSERT_EQ(CountTrue(other->Store(keys.views, ConstOf(pages))), 5u);
  // A leftover temp file of a page (L55), and foreign things beside the pages.
  const fs::path page0 = store->PagePath(keys.keys[0]);
  const fs::path shard = page0.parent_path();
  const fs::path block_dir = root_.path() / store->ns().block_dir_name();
  testing::WriteFileOrDie(page0.string() + "_12345.tmp", "partial");
  const std::vector<fs::path> foreign = {shard / "notes.txt", shard / (std::string(64, 'f') + ".bin.bak"),
                                         block_dir / "README", block_dir / "abc" / "x.bin",
                                         root_.path() / store->ns().dir_name() / "mine.txt",
                                         root_.path() / "loose.bin"};
  for (const auto& f : foreign) {
    fs::create_directories(f.parent_path());
    testing::WriteFileOrDie(f, "foreign");
  }
  fs::create_directory(shard / (std::string(64, '0') + ".bin"));  // a directory named like a page
  ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Clear());
  EXPECT_EQ(removed, 6u) << "5 pages and 1 temp file";
  for (const auto& k : keys.keys) EXPECT_FALSE(fs::exists(store->PagePath(k)));
  for (const auto& f : foreign) EXPECT_TRUE(fs::exists(f)) << f;
  EXPECT_TRUE(fs::is_directory(shard / (std::string(64, '0') + ".bin")));
  EXPECT_TRUE(fs::exists(root_.path() / store->ns().dir_name() / "config.json"));
  EXPECT_EQ(other->ExistsPrefix(keys.views), 5u) << "another namespace's pages stay";
  // The store still works after a clear.
  EXPECT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 5u);
  EXPECT_EQ(store->ExistsPrefix(keys.views), 5u);
}

// The operators' tools walk an SGLang namespace as they walk vLLM's (L103):
// fsck finds nothing wrong in a populated root (digest, names, sizes,
// CRC32C), and flags a corrupted page.
TEST_P(SglangTierTest, FsckChecksAnSglangNamespaceUnchanged) {
  // The TSan build of scripts/test builds no CLI (tests/CMakeLists.txt); every other build does.
  if (!fs::exists(testing::CliPath())) GTEST_SKIP() << "no kvtier binary in this build: " << testing::CliPath();
  OPEN_OR_SKIP(store);
  const KeySet keys = KeySet::Range(700, 6);
  std::vector<PagePieces> pages = MakePages(6, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 6u);
  store->Close();
  const std::string root = root_.path().string();
  testing::CommandResult clean = testing::RunCommand({testing::CliPath(), "fsck", "--verify-data", root});
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  const std::string path = store->PagePath(keys.keys[2]);
  std::string bytes = FileBytes(path);
  bytes[100] = static_cast<char>(bytes[100] ^ 0x40);
  testing::WriteFileOrDie(path, bytes);  // in place: the inode and its CRC attribute stay
  testing::CommandResult bad = testing::RunCommand({testing::CliPath(), "fsck", "--verify-data", "--json", root});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("crc_mismatch"), std::string::npos) << bad.out << bad.err;
}

TEST_P(SglangTierTest, ThreeThreadsAtOnce) {
  OPEN_OR_SKIP(store);
  constexpr size_t kPages = 256, kBatch = 16;
  const KeySet keys = KeySet::Range(1000, kPages);
  std::vector<PagePieces> pages = MakePages(kPages, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  std::atomic<size_t> stored_upto{0};
  std::atomic<bool> bad{false};
  std::thread backup([&] {
    for (size_t at = 0; at < kPages; at += kBatch) {
      std::vector<SglangConstPagePieces> batch;
      for (size_t i = at; i < at + kBatch; ++i) batch.push_back(pages[i].Const());
      if (CountTrue(store->Store(std::span(keys.views).subspan(at, kBatch), batch)) != kBatch) bad = true;
      stored_upto = at + kBatch;
    }
  });
  std::thread prefix([&] {
    while (stored_upto < kPages) {
      const size_t upto = stored_upto;
      if (store->ExistsPrefix(std::span(keys.views).first(upto)) != upto) bad = true;
    }
  });
  std::thread prefetch([&] {
    std::vector<PagePieces> back = MakePages(kBatch, 2, false);
    while (stored_upto < kPages) {
      const size_t upto = stored_upto;
      if (upto < kBatch) continue;
      const size_t at = upto - kBatch;
      const std::vector<bool> ok = store->Load(std::span(keys.views).subspan(at, kBatch), MutOf(back));
      for (size_t i = 0; i < kBatch; ++i) {
        if (!ok[i] || back[i].Concat() != pages[at + i].Concat()) bad = true;
      }
    }
  });
  backup.join();
  prefix.join();
  prefetch.join();
  EXPECT_FALSE(bad) << "a call gave a wrong answer while three threads ran";
  EXPECT_EQ(store->ExistsPrefix(keys.views), kPages);
}

TEST_P(SglangTierTest, CloseWhileThreadsCallWaitsForThemAndLaterCallsAreFalse) {
  OPEN_OR_SKIP(store);
  const KeySet keys = KeySet::Range(2000, 16);
  std::vector<PagePieces> pages = MakePages(16, 2, false);
  for (auto& p : pages) p.Fill(rng_);
  std::atomic<int> calls{0};
  std::atomic<bool> wrong{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<PagePieces> back = MakePages(16, 2, false);
      for (int i = 0; i < 200; ++i, ++calls) {
        if (t == 0) store->Store(keys.views, ConstOf(pages));
        if (t == 1) store->ExistsPrefix(keys.views);
        if (t != 2) continue;
        const std::vector<bool> ok = store->Load(keys.views, MutOf(back));
        for (size_t k = 0; k < ok.size(); ++k) {
          if (ok[k] && back[k].Concat() != pages[k].Concat()) wrong = true;
        }
      }
    });
  }
  while (calls < 30) std::this_thread::yield();
  store->Close();
  EXPECT_EQ(store->ExistsPrefix(keys.views), 0u);
  for (auto& t : threads) t.join();
  EXPECT_FALSE(wrong) << "a load reported true with other bytes";
  EXPECT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, SglangTierTest,
                         ::testing::Values(Param{IoBackendKind::kUring, false}, Param{IoBackendKind::kUring, true},
                                           Param{IoBackendKind::kSyscall, false},
                                           Param{IoBackendKind::kSyscall, true}),
                         [](const auto& p) {
                           return std::string(p.param.backend == IoBackendKind::kUring ? "uring" : "syscall") +
                                  (p.param.bounce ? "_bounce" : "_direct");
                         });

// The namespace alone: no files.

TEST(SglangNamespace, ConfigJsonAndCanonicalJsonArePythonsBytes) {
  SglangPageSpec s = SglangSpec(kModel, kShape);
  s.page_size = 64;
  s.k_bytes_per_token = s.v_bytes_per_token = 256;
  s.tp_size = 2;
  s.tp_rank = 1;
  s.model_revision = "r\xc3\xa9v";
  ASSERT_OK_AND_ASSIGN(SglangNamespace ns, SglangNamespace::Create(s));
  // Python: json.dumps(fields, sort_keys=True, separators=(",", ":")) and hashlib.sha256.
  EXPECT_EQ(ns.canonical_json(),
            R"({"cp_size":1,"dtype":"bfloat16","format":"sglang-page/1","inference_engine":"sglang","is_mla":false,)"
            R"("k_bytes_per_token":256,"layer_num":2,"mem_layout":"page_first","model_name":"org/model",)"
            R"("model_revision":"r\u00e9v","page_bytes":65536,"page_size":64,"pp_size":1,"tp_size":2,)"
            R"("v_bytes_per_token":256})");
  EXPECT_EQ(ns.digest(), "d33f3f77a66c");
  EXPECT_EQ(ns.dir_name(), "org_model_d33f3f77a66c");
  EXPECT_EQ(ns.block_dir_name(), "org_model_d33f3f77a66c_r1");
  EXPECT_EQ(ns.page_bytes(), 65536u);
  EXPECT_EQ(ns.config_json(),
            "{\n  \"cp_size\": 1,\n  \"dtype\": \"bfloat16\",\n  \"format\": \"sglang-page/1\",\n"
            "  \"inference_engine\": \"sglang\",\n  \"is_mla\": false,\n  \"k_bytes_per_token\": 256,\n"
            "  \"layer_num\": 2,\n  \"mem_layout\": \"page_first\",\n  \"model_name\": \"org/model\",\n"
            "  \"model_revision\": \"r\\u00e9v\",\n  \"page_bytes\": 65536,\n  \"page_size\": 64,\n"
            "  \"pp_size\": 1,\n  \"tp_size\": 2,\n  \"v_bytes_per_token\": 256\n}");
}

std::string DigestOf(const SglangPageSpec& s) {
  auto ns = SglangNamespace::Create(s);
  EXPECT_TRUE(ns.ok()) << ns.status().ToString();
  return ns.ok() ? ns->digest() : "";
}

TEST(SglangNamespace, EachFieldThatChangesAPageChangesTheDigest) {
  const SglangPageSpec base = SglangSpec(kModel, kShape);
  std::vector<std::pair<std::string, SglangPageSpec>> variants;
  auto vary = [&](std::string name, auto change) {
    SglangPageSpec s = base;
    change(s);
    variants.emplace_back(std::move(name), s);
  };
  vary("model_name", [](auto& s) { s.model_name = "org/model2"; });
  vary("model_path", [](auto& s) { s.model_path = "/models/x"; });
  vary("model_revision", [](auto& s) { s.model_revision = "main"; });
  vary("page_size", [](auto& s) { s.page_size = 8; });
  vary("mem_layout", [](auto& s) { s.mem_layout = "layer_first"; });
  vary("dtype", [](auto& s) { s.dtype = "float16"; });
  vary("k_bytes_per_token", [](auto& s) { s.k_bytes_per_token = 256; });
  vary("v_bytes_per_token", [](auto& s) { s.v_bytes_per_token = 256; });
  vary("layer_num", [](auto& s) { s.layer_num = 3; });
  vary("is_mla", [](auto& s) { s.is_mla = true, s.v_bytes_per_token = 0, s.k_bytes_per_token = 1024; });
  vary("tp_size", [](auto& s) { s.tp_size = 2; });
  vary("pp_size", [](auto& s) { s.pp_size = 2; });
  vary("cp_size", [](auto& s) { s.cp_size = 2; });
  std::set<std::string> digests{DigestOf(base)};
  for (const auto& [name, s] : variants) EXPECT_TRUE(digests.insert(DigestOf(s)).second) << name;
  // Ranks choose the block directory, not the namespace.
  SglangPageSpec ranked = base;
  ranked.pp_size = ranked.cp_size = ranked.tp_size = 2;
  const std::string d = DigestOf(ranked);
  ranked.pp_rank = ranked.cp_rank = ranked.tp_rank = 1;
  EXPECT_EQ(DigestOf(ranked), d);
}

TEST(SglangNamespace, RanksAndMlaShareTpRankZeroDirectory) {
  SglangPageSpec s = SglangSpec(kModel, kShape);
  s.tp_size = 4, s.tp_rank = 3, s.pp_size = 2, s.pp_rank = 1, s.cp_size = 2, s.cp_rank = 1;
  ASSERT_OK_AND_ASSIGN(SglangNamespace mha, SglangNamespace::Create(s));
  EXPECT_EQ(mha.rank(), (1 * 2 + 1) * 4 + 3);
  s.is_mla = true;
  s.v_bytes_per_token = 0;
  ASSERT_OK_AND_ASSIGN(SglangNamespace mla3, SglangNamespace::Create(s));
  EXPECT_EQ(mla3.rank(), (1 * 2 + 1) * 1 + 0);
  EXPECT_FALSE(mla3.writer());
  s.tp_rank = 0;
  ASSERT_OK_AND_ASSIGN(SglangNamespace mla0, SglangNamespace::Create(s));
  EXPECT_TRUE(mla0.writer());
  EXPECT_EQ(mla0.block_dir_name(), mla3.block_dir_name());
  s.tp_size = 8;  // MLA pages do not depend on TP
  EXPECT_EQ(DigestOf(s), mla0.digest());
  EXPECT_NE(mla0.canonical_json().find("\"tp_size\":1"), std::string::npos);
}

TEST(SglangNamespace, ConfigJsonParsesBackToASpecOfTheSameDigest) {
  SglangPageSpec s = SglangSpec(kModel, kShape);
  s.model_path = "/models/x";
  s.tp_size = 2;
  ASSERT_OK_AND_ASSIGN(SglangNamespace ns, SglangNamespace::Create(s));
  for (const std::string& text : {ns.config_json(), ns.canonical_json()}) {
    ASSERT_OK_AND_ASSIGN(SglangPageSpec parsed, ParseSglangFields(text));
    EXPECT_EQ(parsed, s);
    EXPECT_EQ(DigestOf(parsed), ns.digest());
  }
  auto refused = [](std::string text, std::string key) {
    auto parsed = ParseSglangFields(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find(key), std::string::npos) << parsed.status().ToString();
  };
  std::string vllm = ns.canonical_json();
  vllm.replace(vllm.find("\"sglang\""), 8, "\"vllm\"");
  refused(vllm, "inference_engine");
  std::string missing = ns.canonical_json();
  missing.replace(missing.find("\"layer_num\""), 11, "\"layer_nom\"");
  refused(missing, "layer_num");
  std::string bytes = ns.canonical_json();
  bytes.replace(bytes.find("\"page_bytes\":8192"), 17, "\"page_bytes\":8191");
  refused(bytes, "page_bytes");
  refused("[1]", "JSON object");
}

TEST(SglangNamespace, BadSpecsAreRefusedNamingTheField) {
  auto refused = [](std::string field, auto change) {
    SglangPageSpec s = SglangSpec(kModel, kShape);
    change(s);
    auto ns = SglangNamespace::Create(s);
    ASSERT_FALSE(ns.ok()) << field;
    EXPECT_EQ(ns.status().code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(ns.status().message().find(field), std::string::npos) << ns.status().ToString();
  };
  refused("model_name", [](auto& s) { s.model_name = ""; });
  refused("model_name", [](auto& s) { s.model_name = "bad\xff"; });
  refused("dtype", [](auto& s) { s.dtype = ""; });
  refused("page_size", [](auto& s) { s.page_size = 0; });
  refused("layer_num", [](auto& s) { s.layer_num = -1; });
  refused("k_bytes_per_token", [](auto& s) { s.k_bytes_per_token = 0; });
  refused("v_bytes_per_token", [](auto& s) { s.v_bytes_per_token = 0; });
  refused("v_bytes_per_token", [](auto& s) { s.is_mla = true; });
  refused("mem_layout", [](auto& s) { s.mem_layout = "page_last"; });
  refused("mem_layout", [](auto& s) { s.is_mla = true, s.v_bytes_per_token = 0, s.mem_layout = "page_head"; });
  refused("tp_rank", [](auto& s) { s.tp_rank = 1; });
  refused("pp_size", [](auto& s) { s.pp_size = 0; });
  refused("cp_rank", [](auto& s) { s.cp_size = 2, s.cp_rank = -1; });
  refused("page_size", [](auto& s) { s.page_size = int64_t{1} << 40; });
  SglangTierOptions o;
  o.tier.root_dir = "/nonexistent-kvtier-test";
  o.spec = SglangSpec(kModel, kShape);
  o.spec.page_size = 0;
  auto store = SglangTier::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("page_size"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.tier.root_dir)) << "a bad spec creates nothing";
}

// A hung mount (FUSE, every call held): calls answer false within the
// deadline and Close returns.
class SglangHungMountTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  static constexpr uint32_t kTimeoutMs = 400;
  static constexpr int kLivenessMs = static_cast<int>(kTimeoutMs) + 5000;  // generous: a hang is what it catches

  void SetUp() override {
    if (const std::string why = testing::FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_OK_AND_ASSIGN(mount_, testing::FaultFs::Mount((dir_.path() / "backing").string(),
                                                         (dir_.path() / "mnt").string()));
    o_.tier.root_dir = mount_->mountpoint();
    o_.tier.io_timeout_ms = kTimeoutMs;
    o_.tier.n_read_threads = o_.tier.n_write_threads = 2;
    o_.tier.io_backend = GetParam();
    o_.spec = SglangSpec(kModel, kShape);  // bounce_loads auto: on for FUSE, so loads are abandoned at their deadline
    auto opened = SglangTier::Open(o_);
    if (!opened.ok() && opened.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << opened.status().ToString();
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(opened).value();
  }
  void TearDown() override {
    store_.reset();
    mount_.reset();
  }
  // Close returns within the liveness bound even with the mount hung.
  void ExpectCloseReturns() {
    const auto t0 = Clock::now();
    store_->Close();
    EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), kLivenessMs);
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::FaultFs> mount_;
  SglangTierOptions o_;
  std::unique_ptr<SglangTier> store_;
};

TEST_P(SglangHungMountTest, CallsReturnFalseWithinTheDeadlineAndCloseReturns) {
  SglangTier* store = store_.get();
  testing::FaultFs* mount = mount_.get();
  const KeySet keys = KeySet::Range(0, 4);
  std::vector<PagePieces> pages = MakePages(4, 2, false);
  std::mt19937_64 rng(testing::TestSeed());
  for (auto& p : pages) p.Fill(rng);
  ASSERT_EQ(CountTrue(store->Store(keys.views, ConstOf(pages))), 4u);
  ASSERT_OK(mount->Hang("all"));
  std::vector<PagePieces> back = MakePages(4, 2, false);
  for (auto& p : back) p.Set(0x33);
  const KeySet fresh = KeySet::Range(100, 2);
  std::vector<SglangConstPagePieces> two = ConstOf(pages);
  two.resize(2);
  auto calls = std::async(std::launch::async, [&] {
    const std::vector<bool> loaded = store->Load(keys.views, MutOf(back));
    const size_t prefix = store->ExistsPrefix(keys.views);
    const std::vector<bool> stored = store->Store(fresh.views, two);
    return std::make_tuple(loaded, prefix, stored);
  });
  ASSERT_EQ(calls.wait_for(std::chrono::milliseconds(3 * kLivenessMs)), std::future_status::ready)
      << "calls on a hung mount did not return";
  const auto [loaded, prefix, stored] = calls.get();
  EXPECT_EQ(CountTrue(loaded), 0u);
  EXPECT_EQ(prefix, 0u);
  EXPECT_EQ(CountTrue(stored), 0u);
  for (const auto& p : back) EXPECT_EQ(p.Concat(), std::string(kPage, '\x33')) << "a late read landed in the pieces";
  ExpectCloseReturns();
}

// Clear walks the namespace and Open makes directories, config.json and a
// lease with plain syscalls: on a hung mount both answer kTimedOut within
// the deadline (each on a thread of its own, abandoned), and Close is not
// held by the abandoned walk.
TEST_P(SglangHungMountTest, ClearAndOpenAnswerTimedOutAndCloseReturns) {
  SglangTier* store = store_.get();
  std::vector<PagePieces> pages = MakePages(2, 2, false);
  ASSERT_EQ(CountTrue(store->Store(KeySet::Range(0, 2).views, ConstOf(pages))), 2u);
  ASSERT_OK(mount_->Hang("all"));
  auto cleared = std::async(std::launch::async, [&] { return store->Clear(); });
  ASSERT_EQ(cleared.wait_for(std::chrono::milliseconds(3 * kLivenessMs)), std::future_status::ready)
      << "Clear on a hung mount did not return";
  const Result<uint64_t> n = cleared.get();
  EXPECT_EQ(n.status().code(), StatusCode::kTimedOut) << n.status().ToString();
  SglangTierOptions other = o_;
  other.spec.model_name = "kvtier-test/other";
  auto second = std::async(std::launch::async, [&] { return SglangTier::Open(other).status(); });
  ASSERT_EQ(second.wait_for(std::chrono::milliseconds(3 * kLivenessMs)), std::future_status::ready)
      << "Open on a hung mount did not return";
  const Status s = second.get();
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
  ExpectCloseReturns();
}

INSTANTIATE_TEST_SUITE_P(Backends, SglangHungMountTest, ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const auto& p) { return p.param == IoBackendKind::kUring ? "uring" : "syscall"; });

}  // namespace
}  // namespace kvtier
