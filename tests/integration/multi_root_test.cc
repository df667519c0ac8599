// Proves the fs tier over several roots (path_sharding "by_block_hash",
// FORMAT.md L99-L100) on real files: every block of a 3-root round trip lands
// on root int.from_bytes(hash, "big") % 3 (computed here independently, by
// long division on the hex digits) and nowhere else, loads come back byte
// exact with one result per key in submission order (a miss on one root cuts
// the load prefix across roots), each root holds its own config.json and
// marker; a fresh set opens (creating absent roots); a reordered list, a
// changed count, a missing root and an empty root fail the open with errors
// that name the root and its position; a tree without markers (as vLLM
// writes) is checked by sampling its blocks. Seeded random keys and rows;
// the seed is printed on failure.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "kvtier/fs_tier.h"
#include "kvtier/layout.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 8192;

// int.from_bytes(hash, "big") % n from the hex digits, independent of src/format.
size_t ExpectedRoot(const std::string& hex, size_t n) {
  size_t r = 0;
  for (char c : hex) r = (r * 16 + static_cast<size_t>(std::stoi(std::string(1, c), nullptr, 16))) % n;
  return r;
}

class MultiRootTest : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(testing::TestSeed()); }

  fs::path Root(const std::string& name) const { return dir_.path() / name; }

  FsTierOpenOptions Options(const std::vector<std::string>& names) const {
    FsTierOpenOptions o;
    for (size_t i = 0; i < names.size(); ++i) o.tier.root_dir += (i ? " , " : " ") + Root(names[i]).string();
    o.tier.path_sharding = PathSharding::kByBlockHash;
    o.ns.model_name = "test/multi-root";
    o.ns.kv_cache_groups.push_back({16, {"l0"}});
    o.row_bytes = kRow;
    o.tier.n_read_threads = 4;
    o.tier.n_write_threads = 4;
    o.tier.io_backend = IoBackendKind::kSyscall;  // works everywhere; the I/O loop per root is the same code
    return o;
  }

  std::vector<OffloadKey> Keys(size_t n) {
    std::vector<OffloadKey> keys;
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint8_t> bytes(32);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng_());
      keys.push_back({BlockHash::FromBytes(bytes).value(), static_cast<uint32_t>(i % 2)});
    }
    return keys;
  }

  std::vector<std::vector<uint8_t>> Rows(size_t n) {
    std::vector<std::vector<uint8_t>> rows(n, std::vector<uint8_t>(kRow));
    for (auto& r : rows) for (auto& b : r) b = static_cast<uint8_t>(rng_());
    return rows;
  }

  JobResult Store(FsTier* t, const std::vector<OffloadKey>& keys, std::vector<std::vector<uint8_t>>& rows) {
    std::vector<std::span<const uint8_t>> spans(rows.begin(), rows.end());
    return testing::WaitForJob(t, t->SubmitStore(keys, spans).value());
  }
  JobResult Load(FsTier* t, const std::vector<OffloadKey>& keys, std::vector<std::vector<uint8_t>>& rows) {
    std::vector<std::span<uint8_t>> spans(rows.begin(), rows.end());
    return testing::WaitForJob(t, t->SubmitLoad(keys, spans).value());
  }

  // Fills the roots with a few blocks and closes the tier.
  void Populate(const std::vector<std::string>& names, size_t n = 24) {
    auto tier = FsTier::Open(Options(names));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    auto keys = Keys(n);
    auto rows = Rows(n);
    ASSERT_EQ(Store(tier->get(), keys, rows).OkPrefix(), n);
  }

  static std::string OpenError(const FsTierOpenOptions& o) {
    auto tier = FsTier::Open(o);
    return tier.ok() ? std::string("opened") : tier.status().ToString();
  }

  testing::TempDir dir_;
  std::mt19937_64 rng_;
};

TEST_F(MultiRootTest, EachBlockLivesOnTheFormulasRootAndLoadsBack) {
  const std::vector<std::string> names = {"a", "b", "c"};
  auto opened = FsTier::Open(Options(names));  // none of the roots exists yet
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FsTier* tier = opened->get();
  auto keys = Keys(48);
  auto rows = Rows(48);
  ASSERT_EQ(Store(tier, keys, rows).OkPrefix(), 48u);
  size_t per_root[3] = {};
  for (const OffloadKey& k : keys) {
    const size_t want = ExpectedRoot(k.hash.Hex(), 3);
    ++per_root[want];
    const std::string rel = tier->ns().BlockRelPath(k);
    EXPECT_EQ(tier->BlockPath(k), Root(names[want]).string() + "/" + rel);
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(fs::exists(Root(names[r]) / rel), r == want) << rel << " on root " << r;
  }
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_GT(per_root[r], 0u) << "root " << r << " got no block (seeded keys)";
    EXPECT_EQ(testing::ReadFileOrDie(Root(names[r]) / tier->ns().ConfigRelPath()), tier->ns().config_json());
    EXPECT_EQ(testing::ReadFileOrDie(Root(names[r]) / tier->ns().dir_name() / ".kvtier/root_slot.json"),
              "{\"path_sharding\": \"by_block_hash\", \"root_count\": 3, \"root_index\": " + std::to_string(r) + "}\n");
  }
  auto back = Rows(48);
  JobResult loaded = Load(tier, keys, back);
  ASSERT_EQ(loaded.OkPrefix(), 48u);
  for (size_t i = 0; i < 48; ++i) EXPECT_EQ(back[i], rows[i]) << i;
  EXPECT_EQ(tier->Metrics().rows_stored, 48u);
  EXPECT_EQ(tier->Metrics().rows_loaded, 48u);
  // A miss on one root cuts the prefix for the keys on every root after it.
  fs::remove(tier->BlockPath(keys[20]));
  JobResult partial = Load(tier, keys, back);
  EXPECT_EQ(partial.OkPrefix(), 20u);
  EXPECT_EQ(partial.keys[20].outcome, KeyOutcome::kMiss);
  for (size_t i = 21; i < 48; ++i) EXPECT_EQ(partial.keys[i].outcome, KeyOutcome::kOk) << i;
  JobResult looked = testing::WaitForJob(tier, tier->SubmitLookup(keys).value());
  EXPECT_EQ(looked.OkPrefix(), 20u);
  EXPECT_EQ(looked.keys.size(), 48u);
  EXPECT_TRUE(testing::WaitForJob(tier, tier->SubmitLookup({}).value()).keys.empty());
}

TEST_F(MultiRootTest, ReopeningInOrderFindsEveryBlockOnItsRoot) {
  const std::vector<std::string> names = {"a", "b"};
  auto keys = Keys(16);
  auto rows = Rows(16);
  {
    auto first = FsTier::Open(Options(names));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_EQ(Store(first->get(), keys, rows).OkPrefix(), 16u);
  }
  auto again = FsTier::Open(Options(names));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto back = Rows(16);
  ASSERT_EQ(Load(again->get(), keys, back).OkPrefix(), 16u);
  EXPECT_EQ(back, rows);
  for (const OffloadKey& k : keys) {
    EXPECT_EQ((*again)->BlockPath(k), Root(names[ExpectedRoot(k.hash.Hex(), 2)]).string() + "/" + (*again)->ns().BlockRelPath(k));
  }
}

TEST_F(MultiRootTest, ReorderedRootsFailWithTheirPositions) {
  Populate({"a", "b", "c"});
  const std::string err = OpenError(Options({"b", "a", "c"}));
  EXPECT_NE(err.find("invalid_argument"), std::string::npos) << err;
  EXPECT_NE(err.find("root_dir[0] \"" + Root("b").string() + "\" holds root 1 of 3"), std::string::npos) << err;
  EXPECT_NE(err.find("reordered"), std::string::npos) << err;
}

TEST_F(MultiRootTest, ChangingTheNumberOfRootsFails) {
  Populate({"a", "b"});
  const std::string more = OpenError(Options({"a", "b", "c"}));
  EXPECT_NE(more.find("holds root 0 of 2"), std::string::npos) << more;
  EXPECT_NE(more.find("now lists 3 roots"), std::string::npos) << more;
  const std::string fewer = OpenError(Options({"a"}));
  EXPECT_NE(fewer.find("now lists 1 roots"), std::string::npos) << fewer;
}

TEST_F(MultiRootTest, AMissingOrEmptyRootFailsAndAnIntendedFreshRootIsAccepted) {
  Populate({"a", "b", "c"});
  fs::remove_all(Root("b"));
  const std::string missing = OpenError(Options({"a", "b", "c"}));
  EXPECT_NE(missing.find("not_found"), std::string::npos) << missing;
  EXPECT_NE(missing.find("root_dir[1] \"" + Root("b").string() + "\" does not exist"), std::string::npos) << missing;
  EXPECT_FALSE(fs::exists(Root("b")));  // nothing was created on the parent filesystem
  fs::create_directory(Root("b"));     // an unmounted mount point
  const std::string empty = OpenError(Options({"a", "b", "c"}));
  EXPECT_NE(empty.find("root_dir[1] \"" + Root("b").string() + "\" is an empty directory"), std::string::npos) << empty;
  // The documented way to start a replaced drive empty: create its namespace directory.
  const std::string ns_dir = Namespace::Create(Options({"a"}).ns).value().dir_name();
  fs::create_directory(Root("b") / ns_dir);
  auto fresh = FsTier::Open(Options({"a", "b", "c"}));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE(fs::exists(Root("b") / ns_dir / ".kvtier/root_slot.json"));
}

TEST_F(MultiRootTest, TreesWithoutMarkersAreCheckedBySampling) {
  Populate({"a", "b"}, 40);
  for (const char* r : {"a", "b"}) {
    for (auto& e : fs::recursive_directory_iterator(Root(r))) {
      if (e.path().filename() == "root_slot.json") fs::remove(e.path());
    }
  }
  const std::string swapped = OpenError(Options({"b", "a"}));
  EXPECT_NE(swapped.find("blocks sampled on root_dir[0] \"" + Root("b").string() + "\" belong on another root"),
            std::string::npos) << swapped;
  EXPECT_NE(swapped.find("all on root_dir[1]"), std::string::npos) << swapped;
  auto in_order = FsTier::Open(Options({"a", "b"}));
  ASSERT_TRUE(in_order.ok()) << in_order.status().ToString();
}

TEST_F(MultiRootTest, ACommaWithoutPathShardingIsRefused) {
  FsTierOpenOptions o = Options({"a", "b"});
  o.tier.path_sharding = PathSharding::kNone;
  const std::string err = OpenError(o);
  EXPECT_NE(err.find("path_sharding"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(Root("a")));
}

TEST_F(MultiRootTest, OneRootWithPathShardingIsStrippedAndMarked) {
  auto tier = FsTier::Open(Options({"only"}));
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  auto keys = Keys(4);
  auto rows = Rows(4);
  ASSERT_EQ(Store(tier->get(), keys, rows).OkPrefix(), 4u);
  EXPECT_EQ((*tier)->BlockPath(keys[0]), Root("only").string() + "/" + (*tier)->ns().BlockRelPath(keys[0]));
}

}  // namespace
}  // namespace kvtier
