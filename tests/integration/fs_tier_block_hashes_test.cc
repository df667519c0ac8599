// Proves that a file of several blocks is announced block by block
// (docs/kv-events.md; FORMAT.md L197-L202), whichever form the block takes
// (the CRC in the xattr or in the trailer, no checksum, sealed): a store given each
// file's block hashes publishes one BlockStored naming all of them, in
// order, each block tokens_per_hash long, and records them in the file (the
// attribute, or the trailer page's first bytes); a max_bytes eviction and a
// corrupt block's removal read that record before the unlink and name every
// block, so an index kept from the events equals every block the files on
// disk hold; a record copied from another file (its last hash is not the
// file's key), or naming more blocks than a file holds, is not believed,
// and such a file, or one without a record, is named by its key alone (one
// planted of the right count, ending with the key, is believed); a store's
// list that is not the file's blocks is refused naming the key. Method: real
// files in a temp dir, a real ZeroMQ SUB socket the tier connects to; keys,
// hashes and rows are seeded (seed printed).
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "events/kv_event_wire.h"
#include "format/block_hashes.h"
#include "kvtier/fs_tier.h"
#include "support/kv_event_sub.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using internal::BlockRemovedEvent;
using internal::BlockStoredEvent;
using internal::KvEvent;
using internal::WireHash;
constexpr uint64_t kRow = 16384;
constexpr size_t kBlocks = 4;  // blocks_per_file

uint64_t IntOf(const BlockHash& h) {
  return WireHash::FromBlockHash(h.bytes(), internal::BlockHashEncoding::kInt64).int_value;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

enum class Form { kXattr, kTrailer, kNoChecksum, kSealed };
// Where a form keeps the record: the trailer page, or the attribute.
bool InPage(Form f) { return f == Form::kTrailer || f == Form::kSealed; }

class FsTierBlockHashesTest : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
  }
  FsTierOpenOptions Options() const {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns = testing::Spec("hashes/model");
    o.ns.blocks_per_file = kBlocks;
    o.row_bytes = kRow;
    o.tier.checksum_blocks = GetParam() != Form::kNoChecksum;
    o.tier.checksum_place = GetParam() == Form::kTrailer ? ChecksumPlaceKind::kTrailer : ChecksumPlaceKind::kXattr;
    if (GetParam() == Form::kSealed) {
      testing::WriteKeyFileOrDie(keys_.path() / "seal.key", std::string(64, 'a') + "\n");
      o.tier.seal_key_file = (keys_.path() / "seal.key").string();
    }
    o.tier.kv_events_config.enable_kv_cache_events = true;
    o.tier.kv_events_config.endpoint = sub_.endpoint();
    return o;
  }
  // A chunk's blocks: kBlocks random hashes, the last its key.
  std::vector<BlockHash> Chunk() {
    std::vector<BlockHash> out;
    for (const OffloadKey& k : testing::RandomKeys(kBlocks, rng_)) out.push_back(k.hash);
    return out;
  }
  std::vector<OffloadKey> Keys(const std::vector<std::vector<BlockHash>>& chunks) const {
    std::vector<OffloadKey> keys;
    for (const auto& c : chunks) keys.push_back(OffloadKey{c.back(), 0});
    return keys;
  }
  Result<uint64_t> Submit(FsTier* tier, const std::vector<std::vector<BlockHash>>& chunks) {
    rows_.emplace_back(std::make_unique<testing::AlignedRows>(chunks.size(), kRow, rng_()));
    return tier->SubmitStore(Keys(chunks), rows_.back()->Const(), chunks);
  }
  JobResult Store(FsTier* tier, const std::vector<std::vector<BlockHash>>& chunks) {
    return testing::WaitForJob(tier, Submit(tier, chunks).value());
  }
  // What the file holds where its record goes (L199).
  std::string RecordOf(const fs::path& file) const {
    if (InPage(GetParam())) return Slurp(file).substr(kRow);
    std::string value(format::kBlockHashRecordBytesMax, '\0');
    const ssize_t n = getxattr(file.c_str(), format::kBlockHashesXattr, value.data(), value.size());
    return n < 0 ? std::string() : value.substr(0, static_cast<size_t>(n));
  }
  void PlantRecord(const fs::path& file, const std::string& record) const {
    if (!InPage(GetParam())) {
      ASSERT_EQ(setxattr(file.c_str(), format::kBlockHashesXattr, record.data(), record.size(), 0), 0);
      return;
    }
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kRow));
    f.write(record.data(), static_cast<std::streamsize>(record.size()));
  }
  // Corrupts a block so that a load removes it: a row byte flipped (its CRC
  // or its seal's tag fails), or without checksums the file torn (a short read).
  void Corrupt(const fs::path& file) const {
    if (GetParam() == Form::kNoChecksum) return fs::resize_file(file, kRow / 2);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(100);
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(100);
    f.write(&c, 1);
  }
  std::vector<uint64_t> RemovalAfterPlanting(FsTier* tier, const OffloadKey& key, const std::string& record);
  JobResult Load(FsTier* tier, const std::vector<OffloadKey>& keys) {
    testing::AlignedRows rows(keys.size(), kRow, 0);
    return testing::WaitForJob(tier, tier->SubmitLoad(keys, rows.Mut()).value());
  }
  // Every block the files on disk hold, as their records name them (a file
  // without a record: its key).
  std::set<uint64_t> OnDisk() const {
    std::set<uint64_t> out;
    for (const auto& e : fs::recursive_directory_iterator(root_.path())) {
      if (e.path().extension() != ".bin") continue;
      const BlockHash key = BlockHash::FromHex(e.path().stem().string()).value();
      const std::string r = RecordOf(e.path());
      const auto blocks = format::ParseBlockHashRecord({reinterpret_cast<const uint8_t*>(r.data()), r.size()}, key);
      for (const BlockHash& h : blocks.value_or(std::vector<BlockHash>{key})) out.insert(IntOf(h));
    }
    return out;
  }

  uint64_t seed_ = 0;
  testing::TempDir root_, keys_;
  testing::EventSub sub_{"tcp://127.0.0.1:*", /*bind=*/true};
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<testing::AlignedRows>> rows_;
};

std::vector<uint64_t> Ints(const std::vector<WireHash>& hashes) {
  std::vector<uint64_t> out;
  for (const WireHash& h : hashes) out.push_back(h.int_value);
  return out;
}
std::vector<uint64_t> Ints(const std::vector<BlockHash>& hashes) {
  std::vector<uint64_t> out;
  for (const BlockHash& h : hashes) out.push_back(IntOf(h));
  return out;
}

// The index a router keeps from the events: stored adds, removed erases.
void Apply(const std::vector<KvEvent>& events, std::set<uint64_t>* index) {
  for (const KvEvent& e : events) {
    if (const auto* s = std::get_if<BlockStoredEvent>(&e)) {
      for (const WireHash& h : s->block_hashes) index->insert(h.int_value);
    } else if (const auto* r = std::get_if<BlockRemovedEvent>(&e)) {
      for (const WireHash& h : r->block_hashes) index->erase(h.int_value);
    }
  }
}

TEST_P(FsTierBlockHashesTest, AStoreAnnouncesEveryBlockAndTheFileRecordsThem) {
  SCOPED_TRACE("KVTIER_TEST_SEED=" + std::to_string(seed_));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options()));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::vector<std::vector<BlockHash>> chunks = {Chunk(), Chunk(), Chunk()};
  ASSERT_EQ(Store(tier.get(), chunks).OkPrefix(), chunks.size());
  const std::vector<KvEvent> events = sub_.WaitFor(chunks.size());
  ASSERT_EQ(events.size(), chunks.size());
  std::set<std::vector<uint64_t>> announced, want;
  for (const KvEvent& e : events) {
    const auto& stored = std::get<BlockStoredEvent>(e);
    EXPECT_EQ(stored.block_size, 16);  // each block tokens_per_hash long, not the file's 64
    announced.insert(Ints(stored.block_hashes));
  }
  for (const auto& c : chunks) want.insert(Ints(c));
  EXPECT_EQ(announced, want);  // every block of each file, in order
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string r = RecordOf(tier->BlockPath(Keys(chunks)[i]));
    const auto blocks = format::ParseBlockHashRecord({reinterpret_cast<const uint8_t*>(r.data()), r.size()},
                                                     chunks[i].back());
    ASSERT_TRUE(blocks.has_value()) << i;
    EXPECT_EQ(*blocks, chunks[i]);
  }
  // Loads are untouched: the row comes back as stored.
  testing::AlignedRows back(chunks.size(), kRow, 0);
  const JobResult loaded = testing::WaitForJob(tier.get(), tier->SubmitLoad(Keys(chunks), back.Mut()).value());
  EXPECT_EQ(loaded.OkPrefix(), chunks.size());
  EXPECT_EQ(std::memcmp(back.Row(1).data(), rows_.back()->Row(1).data(), kRow), 0);
}

TEST_P(FsTierBlockHashesTest, EvictionsAndCorruptRemovalsNameEveryBlockSoTheIndexEqualsTheDisk) {
  SCOPED_TRACE("KVTIER_TEST_SEED=" + std::to_string(seed_));
  FsTierOpenOptions o = Options();
  o.tier.capacity_bytes_max = 2 * (kRow + 4096) + 1024;  // two files, in either form
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(o));
  ASSERT_TRUE(sub_.WaitConnected(1));
  std::set<uint64_t> index;
  for (int round = 0; round < 4; ++round) {
    ASSERT_EQ(Store(tier.get(), {Chunk(), Chunk()}).OkPrefix(), 2u) << "round " << round;
  }
  EXPECT_EQ(tier->Metrics().capacity_evicted_blocks, 6u);
  const std::vector<KvEvent> events = sub_.WaitFor(8 + 6);
  size_t removed_blocks = 0;
  for (const KvEvent& e : events) {
    if (const auto* r = std::get_if<BlockRemovedEvent>(&e)) removed_blocks += r->block_hashes.size();
  }
  EXPECT_EQ(removed_blocks, 6 * kBlocks);  // each eviction named all of its file's blocks
  Apply(events, &index);
  EXPECT_EQ(index.size(), 2 * kBlocks);
  EXPECT_EQ(index, OnDisk());

  // A corrupt block a load removes: named block by block too.
  const std::vector<std::vector<BlockHash>> more = {Chunk(), Chunk()};
  ASSERT_EQ(Store(tier.get(), more).OkPrefix(), 2u);
  Corrupt(tier->BlockPath(Keys(more)[0]));
  EXPECT_EQ(Load(tier.get(), Keys(more)).keys[0].outcome, KeyOutcome::kCorrupt);
  const std::vector<KvEvent> after = sub_.WaitFor(2 + 2 + 1);  // 2 stores, 2 evictions, the removal
  Apply(after, &index);
  const auto* removal = std::get_if<BlockRemovedEvent>(&after.back());
  ASSERT_NE(removal, nullptr);
  EXPECT_EQ(Ints(removal->block_hashes), Ints(more[0]));
  EXPECT_FALSE(fs::exists(tier->BlockPath(Keys(more)[0])));
  EXPECT_EQ(index, OnDisk());
}

// What a corrupt removal of a file whose record was replaced by `record` names.
std::vector<uint64_t> FsTierBlockHashesTest::RemovalAfterPlanting(FsTier* tier, const OffloadKey& key,
                                                                  const std::string& record) {
  PlantRecord(tier->BlockPath(key), record);
  Corrupt(tier->BlockPath(key));
  EXPECT_EQ(Load(tier, {key}).keys[0].outcome, KeyOutcome::kCorrupt);
  const std::vector<KvEvent> events = sub_.WaitFor(1);
  if (events.size() != 1 || !std::holds_alternative<BlockRemovedEvent>(events[0])) return {};
  return Ints(std::get<BlockRemovedEvent>(events[0]).block_hashes);
}

// L200: whoever can write the volume can write a record; it is believed
// only whole, ending with the file's own key, and of the file's block count.
TEST_P(FsTierBlockHashesTest, APlantedRecordIsBelievedOnlyForItsOwnFileAndBlockCount) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options()));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::vector<std::vector<BlockHash>> chunks = {Chunk(), Chunk(), Chunk(), Chunk()};
  ASSERT_EQ(Store(tier.get(), chunks).OkPrefix(), chunks.size());
  sub_.WaitFor(chunks.size());
  const std::vector<OffloadKey> keys = Keys(chunks);
  const std::string others = RecordOf(tier->BlockPath(keys[0]));  // whole, but ending with another key
  EXPECT_EQ(RemovalAfterPlanting(tier.get(), keys[1], others), Ints(std::vector<BlockHash>{keys[1].hash}));
  std::vector<BlockHash> eight = Chunk();  // more blocks than a file holds, ending with the key
  for (const BlockHash& h : Chunk()) eight.push_back(h);
  eight.back() = keys[2].hash;
  EXPECT_EQ(RemovalAfterPlanting(tier.get(), keys[2], format::EncodeBlockHashRecord(eight)),
            Ints(std::vector<BlockHash>{keys[2].hash}));
  std::vector<BlockHash> mine = Chunk();  // another list of the file's count, ending with its key: believed
  mine.back() = keys[3].hash;
  EXPECT_EQ(RemovalAfterPlanting(tier.get(), keys[3], format::EncodeBlockHashRecord(mine)), Ints(mine));
}

TEST_P(FsTierBlockHashesTest, AStoreWithoutHashesNamesTheFileByItsKey) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options()));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::vector<OffloadKey> keys = testing::RandomKeys(1, rng_);
  testing::AlignedRows rows(1, kRow, 1);
  ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 1u);
  const std::vector<KvEvent> events = sub_.WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  const auto& stored = std::get<BlockStoredEvent>(events[0]);
  EXPECT_EQ(Ints(stored.block_hashes), Ints(std::vector<BlockHash>{keys[0].hash}));
  EXPECT_EQ(stored.block_size, 16 * static_cast<int64_t>(kBlocks));  // the file's tokens
  EXPECT_EQ(RecordOf(tier->BlockPath(keys[0])).substr(0, 8) == "KVTBLKH1", false);
}

TEST_P(FsTierBlockHashesTest, AListThatIsNotTheFilesBlocksIsRefusedNamingTheKey) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options()));
  const std::vector<BlockHash> chunk = Chunk();
  const std::vector<OffloadKey> key = {OffloadKey{chunk.back(), 0}};
  testing::AlignedRows rows(1, kRow, 2);
  std::vector<uint8_t> short_bytes(16, 7);
  const std::vector<std::vector<BlockHash>> wrong = {
      {chunk[0], chunk[3]},                                          // two blocks of four
      {chunk[3], chunk[1], chunk[2], chunk[0]},                      // the key is not the last
      {chunk[0], BlockHash::FromBytes(short_bytes).value(), chunk[2], chunk[3]},  // a hash of another length
  };
  for (const auto& w : wrong) {
    const std::vector<std::vector<BlockHash>> lists = {w};
    const Result<uint64_t> r = tier->SubmitStore(key, rows.Const(), lists);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("block_hashes of key " + key[0].Hex()), std::string::npos) << r.status().ToString();
  }
  const std::vector<std::vector<BlockHash>> two_lists = {chunk, chunk};
  EXPECT_FALSE(tier->SubmitStore(key, rows.Const(), two_lists).ok());  // one list per key
  EXPECT_FALSE(fs::exists(tier->BlockPath(key[0])));  // nothing was submitted
  const std::vector<std::vector<BlockHash>> right = {chunk};
  EXPECT_EQ(testing::WaitForJob(tier.get(), tier->SubmitStore(key, rows.Const(), right).value()).OkPrefix(), 1u);
}

std::string FormName(const ::testing::TestParamInfo<Form>& info) {
  constexpr const char* kNames[] = {"Xattr", "Trailer", "NoChecksum", "Sealed"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Forms, FsTierBlockHashesTest,
                         ::testing::Values(Form::kXattr, Form::kTrailer, Form::kNoChecksum, Form::kSealed), FormName);

}  // namespace
}  // namespace kvtier
