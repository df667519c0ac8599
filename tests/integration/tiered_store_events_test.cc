// Proves TieredStore carries a request's block hashes (RequestSpec::
// block_hashes) to the files of its chunks (FORMAT.md L197-L202): with
// blocks_per_chunk 4 (a chunk file holds 4 blocks of tokens_per_hash tokens)
// and kvtier's KV events on, each chunk a store writes through is announced
// as one BlockStored naming the chunk's 4 block hashes in order, block_size
// tokens_per_hash, and its file records them (the attribute, or the trailer
// page), on the staged-CRC path (SubmitStoreWithCrcs, the CRC in the
// attribute or in the trailer) and on the plain one (checksum_blocks off,
// SubmitStore), and so is a chunk appended by AppendChunkKeys with its
// hashes; one appended without, and a request without block hashes, are
// announced by their keys alone (block_size a chunk's tokens). Block
// hashes that did not make the chunk keys (a chunk's last hash not its key,
// a chunk's worth too few or too many, keys of two groups) are refused by
// StartRequest with kInvalidArgument naming the chunk, and the request is
// not started. A chunk file found corrupt by a later load (a fresh
// store, every row from the files) is removed with one BlockRemoved naming
// its 4 block hashes in order, read from its record before the unlink: on
// the staged-CRC paths a flipped row byte fails the check after the copy and
// the tier's corrupt-block removal (RemoveCorruptOp) removes it; on the plain
// one (no CRC to fail) a truncated file is refused by the load that promotes
// it at the lookup (LoadOp), which removes it. Method: the host stand-in
// device, real files in a temp dir, a real ZeroMQ SUB socket bound on
// 127.0.0.1 that the tier connects to, hashes sent as bytes; hashes are
// seeded (the seed is printed).
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "events/kv_event.h"
#include "format/block_hashes.h"
#include "kvtier/tiered_store.h"
#include "staging/host_kv_cache.h"
#include "support/kv_event_sub.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using internal::BlockRemovedEvent;
using internal::BlockStoredEvent;
using internal::HostKvCache;
using internal::KvEvent;
using internal::WireHash;

constexpr uint32_t kBpc = 4;           // blocks per chunk: a chunk file holds 4 blocks
constexpr uint32_t kBlockTokens = 16;  // the GPU block: one tokens_per_hash (16, the default)
constexpr size_t kHpc = 4;             // block hashes per chunk

std::string Config(const std::string& root, const std::string& endpoint, const std::string& fs_extra) {
  return R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1048576, "blocks_per_chunk": 4,
             "secondary_tiers": [{"type": "fs", "root_dir": ")" + root +
         R"(", "kv_events_config": {"enable_kv_cache_events": true, "block_hash_encoding": "bytes", "endpoint": ")" +
         endpoint + "\"}" + fs_extra + "}]}";
}

std::vector<WireHash> Wire(std::span<const BlockHash> hashes) {
  std::vector<WireHash> out;
  for (const BlockHash& h : hashes) out.push_back(WireHash::Bytes(h.bytes()));
  return out;
}

// The block-hash record of the file at `path` (L199): its attribute, else
// the first bytes of the trailer page after the row.
std::optional<std::vector<BlockHash>> RecordOf(const std::string& path, const BlockHash& key, uint64_t row_bytes) {
  std::string bytes(format::kBlockHashRecordBytesMax, '\0');
  const ssize_t n = ::getxattr(path.c_str(), format::kBlockHashesXattr, bytes.data(), bytes.size());
  if (n >= 0) {
    bytes.resize(static_cast<size_t>(n));
  } else {
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(row_bytes));
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<size_t>(in.gcount()));
  }
  return format::ParseBlockHashRecord({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, key);
}

// The BlockStored events of `events`, by their last hash.
std::map<std::string, BlockStoredEvent> StoredByLast(const std::vector<KvEvent>& events) {
  std::map<std::string, BlockStoredEvent> out;
  for (const KvEvent& e : events) {
    const auto* stored = std::get_if<BlockStoredEvent>(&e);
    EXPECT_NE(stored, nullptr) << "an event that is not BlockStored";
    if (stored != nullptr && !stored->block_hashes.empty()) out[stored->block_hashes.back().text] = *stored;
  }
  return out;
}

std::string Text(const BlockHash& h) { return std::string(h.bytes().begin(), h.bytes().end()); }

class TieredStoreEventsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { rng_.seed(testing::TestSeed()); }

  std::unique_ptr<TieredStore> Open() {
    TieredStoreOptions options;
    options.config_json = Config(dir_.path().string(), sub_.endpoint(), GetParam());
    options.engine.gpu_block_size_tokens = kBlockTokens;
    options.ns.model_name = "test/block-hashes";
    options.devices = {gpu_.Registration()};
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return nullptr;
    EXPECT_TRUE(sub_.WaitConnected(++publishers_));  // each store's tier connects anew
    sub_.ExpectNewPublisher();
    return std::move(store).value();
  }
  // The next `n` events, and any that follow within 200 ms (none should).
  std::vector<KvEvent> Events(size_t n) {
    std::vector<KvEvent> events = sub_.WaitFor(n);
    for (KvEvent& e : sub_.Drain(std::chrono::milliseconds(200))) events.push_back(std::move(e));
    EXPECT_EQ(events.size(), n);
    return events;
  }
  // n random block hashes.
  std::vector<BlockHash> Hashes(size_t n) {
    std::vector<BlockHash> out;
    for (const OffloadKey& k : testing::RandomKeys(n, rng_)) out.push_back(k.hash);
    return out;
  }
  // Stores chunks [first, first + n) of request `id` from GPU blocks and
  // waits until they are written through; true when every chunk was kOk.
  bool Store(TieredStore* store, uint64_t id, size_t first, size_t n) {
    std::vector<uint32_t> blocks;
    for (uint32_t b = 0; b < n * kBpc; ++b) blocks.push_back(b);
    for (uint32_t b : blocks) gpu_.Fill(b, rng_());
    Result<uint64_t> job = store->Store(id, first, blocks);
    if (!job.ok()) return false;
    const std::optional<TransferResult> done = Wait(store, *job);
    return done.has_value() && done->OkPrefix() == n;
  }
  // Stores `keys`, chunks of `hashes`, through a store of their own, closed after.
  void StoreAndClose(const std::vector<OffloadKey>& keys, const std::vector<BlockHash>& hashes) {
    std::unique_ptr<TieredStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->StartRequest(1, RequestSpec{keys, 0, std::nullopt, 0, hashes}));
    ASSERT_TRUE(Store(store.get(), 1, 0, keys.size()));
    ASSERT_OK(store->FinishRequest(1));
    ASSERT_EQ(StoredByLast(Events(keys.size())).size(), keys.size());
  }
  // Loads `n` chunks of request `id` from chunk 0 into GPU blocks 32 on.
  std::optional<TransferResult> Load(TieredStore* store, uint64_t id, size_t n) {
    std::vector<uint32_t> blocks;
    for (uint32_t b = 0; b < n * kBpc; ++b) blocks.push_back(32 + b);
    Result<uint64_t> job = store->Load(id, 0, blocks);
    EXPECT_OK(job.status());
    return job.ok() ? Wait(store, *job) : std::nullopt;
  }
  // Job `job`'s result once the store is idle; none if it was not the only
  // job to finish, or did not within 30 s.
  static std::optional<TransferResult> Wait(TieredStore* store, uint64_t job) {
    std::vector<TransferResult> done;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (done.empty() && std::chrono::steady_clock::now() < deadline) {
      store->PollFinished(&done);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_OK(store->WaitIdle(30000));
    if (done.size() != 1 || done[0].job_id != job) return std::nullopt;
    return done[0];
  }

  HostKvCache gpu_{{{2048, 2560}, {1024, 0}}, 64};
  testing::TempDir dir_;
  testing::EventSub sub_{"tcp://127.0.0.1:*", /*bind=*/true};
  std::mt19937_64 rng_;
  int publishers_ = 0;  // the tiers that connected to sub_ so far
};

TEST_P(TieredStoreEventsTest, ChunkFilesAnnounceAndRecordEveryBlock) {
  std::unique_ptr<TieredStore> store = Open();
  ASSERT_NE(store, nullptr);
  // Three chunks and two hashes of a fourth, incomplete one (as vLLM's request has them).
  const std::vector<BlockHash> hashes = Hashes(3 * kHpc + 2);
  std::vector<OffloadKey> keys = ChunkOffloadKeys(hashes, kHpc, 0);
  ASSERT_EQ(keys.size(), 3u);
  RequestSpec spec{keys, 0, std::nullopt, 0, hashes};
  ASSERT_OK(store->StartRequest(1, spec));
  ASSERT_TRUE(Store(store.get(), 1, 0, 3));
  std::map<std::string, BlockStoredEvent> stored = StoredByLast(Events(3));
  ASSERT_EQ(stored.size(), 3u);
  const FsTier& tier = store->secondary_tier(0);
  EXPECT_EQ(tier.Metrics().checksum_ns, 0u) << "the fs tier computed CRCs: not the staged path";
  for (size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE("chunk " + std::to_string(i));
    const std::span<const BlockHash> blocks = std::span(hashes).subspan(i * kHpc, kHpc);
    const BlockStoredEvent& e = stored[Text(keys[i].hash)];
    EXPECT_EQ(e.block_hashes, Wire(blocks));  // every block, in order
    EXPECT_EQ(e.block_size, kBlockTokens);     // a block's tokens, not the chunk's
    const std::string path = tier.BlockPath(keys[i]);
    const std::optional<std::vector<BlockHash>> record = RecordOf(path, keys[i].hash, store->row_bytes());
    if (tier.checksum_place() != "trailer" && !tier.xattrs_supported()) continue;  // nowhere to record it
    ASSERT_TRUE(record.has_value()) << path << " records no block hashes";
    EXPECT_EQ(*record, std::vector<BlockHash>(blocks.begin(), blocks.end()));
  }
  EXPECT_OK(store->FinishRequest(1));
}

TEST_P(TieredStoreEventsTest, ChunksAppendedWithTheirHashesAnnounceEveryBlock) {
  std::unique_ptr<TieredStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<BlockHash> hashes = Hashes(kHpc + 2);  // a chunk, and half of the next
  const std::vector<OffloadKey> keys = ChunkOffloadKeys(hashes, kHpc, 0);
  ASSERT_OK(store->StartRequest(1, RequestSpec{keys, 0, std::nullopt, 0, hashes}));
  ASSERT_TRUE(Store(store.get(), 1, 0, 1));
  ASSERT_EQ(StoredByLast(Events(1)).size(), 1u);

  // Decoding completes the second chunk: appended with its hashes (the two
  // given at the start and two more), it is announced by its 4 blocks.
  std::vector<BlockHash> second(hashes.end() - 2, hashes.end());
  for (const BlockHash& h : Hashes(2)) second.push_back(h);
  const std::vector<OffloadKey> grown = ChunkOffloadKeys(second, kHpc, 0);
  ASSERT_OK(store->AppendChunkKeys(1, grown, second));
  ASSERT_TRUE(Store(store.get(), 1, 1, 1));
  std::map<std::string, BlockStoredEvent> stored = StoredByLast(Events(1));
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[Text(grown[0].hash)].block_hashes, Wire(second));
  EXPECT_EQ(stored[Text(grown[0].hash)].block_size, kBlockTokens);
  const FsTier& tier = store->secondary_tier(0);
  if (tier.checksum_place() == "trailer" || tier.xattrs_supported()) {
    EXPECT_EQ(RecordOf(tier.BlockPath(grown[0]), grown[0].hash, store->row_bytes()), second);
  }

  // A chunk added without hashes: its key alone, a chunk's tokens.
  const std::vector<OffloadKey> more = testing::RandomKeys(1, rng_);
  ASSERT_OK(store->AppendChunkKeys(1, more));
  ASSERT_TRUE(Store(store.get(), 1, 2, 1));
  stored = StoredByLast(Events(1));
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored.begin()->second.block_hashes, Wire(std::span(&more[0].hash, 1)));
  EXPECT_EQ(stored.begin()->second.block_size, kBpc * kBlockTokens);
  EXPECT_OK(store->FinishRequest(1));
}

TEST_P(TieredStoreEventsTest, RequestsWithoutBlockHashesAnnounceTheirKeys) {
  std::unique_ptr<TieredStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<OffloadKey> keys = testing::RandomKeys(2, rng_);
  ASSERT_OK(store->StartRequest(1, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_TRUE(Store(store.get(), 1, 0, 2));
  std::map<std::string, BlockStoredEvent> stored = StoredByLast(Events(2));
  ASSERT_EQ(stored.size(), 2u);
  for (const OffloadKey& key : keys) {
    EXPECT_EQ(stored[Text(key.hash)].block_hashes, Wire(std::span(&key.hash, 1)));
    EXPECT_EQ(stored[Text(key.hash)].block_size, kBpc * kBlockTokens);
    EXPECT_FALSE(RecordOf(store->secondary_tier(0).BlockPath(key), key.hash, store->row_bytes()).has_value());
  }
}

// StartRequest's verdict on `hashes` for `keys`: ok, or the message of its
// kInvalidArgument (anything else fails the test).
std::string Refusal(TieredStore* store, uint64_t id, std::vector<OffloadKey> keys, std::vector<BlockHash> hashes) {
  const Status s = store->StartRequest(id, RequestSpec{std::move(keys), 0, std::nullopt, 0, std::move(hashes)});
  if (s.ok()) return "ok";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(store->FinishRequest(id).code(), StatusCode::kNotFound) << "a refused request was started";
  return s.message();
}

TEST_P(TieredStoreEventsTest, BlockHashesThatDidNotMakeTheKeysAreRefused) {
  std::unique_ptr<TieredStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<BlockHash> hashes = Hashes(3 * kHpc);
  const std::vector<OffloadKey> keys = ChunkOffloadKeys(hashes, kHpc, 0);
  std::vector<BlockHash> wrong = hashes;
  wrong[2 * kHpc - 1] = Hashes(1)[0];  // chunk 1's last hash is not its key
  const std::string last = Refusal(store.get(), 2, keys, wrong);
  EXPECT_NE(last.find("chunk 1 (key " + keys[1].Hex() + ")"), std::string::npos) << last;
  EXPECT_NE(last.find("the last hash is not the key"), std::string::npos) << last;
  // A chunk's worth too few, or too many.
  const std::string few = Refusal(store.get(), 3, keys, {hashes.begin(), hashes.end() - 1});
  EXPECT_NE(few.find("make 2 chunks of 4"), std::string::npos) << few;
  std::vector<BlockHash> many = hashes;
  for (const BlockHash& h : Hashes(kHpc)) many.push_back(h);
  EXPECT_NE(Refusal(store.get(), 4, keys, many).find("make 4 chunks of 4"), std::string::npos);
  // Keys of two groups are not what one list of hashes makes.
  std::vector<OffloadKey> groups = keys;
  groups[2].group_idx = 1;
  EXPECT_NE(Refusal(store.get(), 5, groups, hashes).find("of group 1"), std::string::npos);
  // Hashes shorter than the keys.
  std::vector<BlockHash> shorter = hashes;
  shorter[0] = BlockHash::FromBytes(std::vector<uint8_t>(16, 7)).value();
  EXPECT_NE(Refusal(store.get(), 6, keys, shorter).find("chunk 0"), std::string::npos);
  EXPECT_EQ(Refusal(store.get(), 7, keys, hashes), "ok");
  EXPECT_OK(store->FinishRequest(7));
}

// Spoils the block file at `path`: a flipped byte of its row where the tier
// has a CRC to fail (checksum_place not "off"), else the file cut short (a
// short file is corrupt without any checksum, FORMAT.md L65).
void Spoil(const std::string& path, std::string_view checksum_place, uint64_t row_bytes, uint64_t at) {
  if (checksum_place == "off") return std::filesystem::resize_file(path, row_bytes / 2);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at % row_bytes));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(at % row_bytes));
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST_P(TieredStoreEventsTest, ACorruptChunksRemovalNamesEveryBlock) {
  const std::vector<BlockHash> hashes = Hashes(3 * kHpc);
  const std::vector<OffloadKey> keys = ChunkOffloadKeys(hashes, kHpc, 0);
  ASSERT_NO_FATAL_FAILURE(StoreAndClose(keys, hashes));
  std::unique_ptr<TieredStore> store = Open();  // a fresh CPU tier: every row comes from the files
  ASSERT_NE(store, nullptr);
  const FsTier& tier = store->secondary_tier(0);
  const std::string bad = tier.BlockPath(keys[1]);
  const bool recorded = RecordOf(bad, keys[1].hash, store->row_bytes()).has_value();
  ASSERT_TRUE(recorded || (tier.checksum_place() != "trailer" && !tier.xattrs_supported())) << bad << ": no record";
  Spoil(bad, tier.checksum_place(), store->row_bytes(), rng_());
  const bool staged = tier.checksum_place() != "off";
  ASSERT_OK(store->StartRequest(2, RequestSpec{keys, 0, std::nullopt, 0, hashes}));
  ASSERT_OK_AND_ASSIGN(const PrefixLookup lookup, store->LookupWait(2, 0, 20000));
  if (staged) {  // promoted unchecked; the check after the copy fails: RemoveCorruptOp
    ASSERT_EQ(lookup.hit_chunks, keys.size());
    const std::optional<TransferResult> r = Load(store.get(), 2, keys.size());
    ASSERT_TRUE(r.has_value() && r->chunks.size() == keys.size());
    EXPECT_EQ(r->chunks[0].outcome, ChunkOutcome::kOk);
    EXPECT_EQ(r->chunks[1].status.code(), StatusCode::kCorruption) << r->chunks[1].status.ToString();
  } else {  // the promotion's own load refuses the short file: LoadOp
    EXPECT_EQ(lookup.hit_chunks, 1u);
  }
  ASSERT_OK(store->WaitIdle(30000));
  EXPECT_FALSE(std::filesystem::exists(bad)) << "the corrupt chunk's file was not removed";
  EXPECT_EQ(tier.Metrics().rows_corrupt, 1u);
  EXPECT_EQ(store->Metrics().crc_staged_mismatches, staged ? 1u : 0u);
  EXPECT_OK(store->FinishRequest(2));
  const std::vector<KvEvent> events = Events(1);
  ASSERT_EQ(events.size(), 1u);
  const auto* removed = std::get_if<BlockRemovedEvent>(&events[0]);
  ASSERT_NE(removed, nullptr) << "not a BlockRemoved";
  EXPECT_EQ(removed->block_hashes, recorded ? Wire(std::span(hashes).subspan(kHpc, kHpc))  // every block, in order
                                            : Wire(std::span(&keys[1].hash, 1)));
}

// "": checksums staged by the copies, the CRC where the tier puts it (the
// attribute on this filesystem); the trailer; checksums off (plain SubmitStore).
INSTANTIATE_TEST_SUITE_P(Paths, TieredStoreEventsTest,
                         ::testing::Values("", R"(, "checksum_place": "trailer")", R"(, "checksum_blocks": false)"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.index == 0 ? std::string("staged") : p.index == 1 ? "trailer" : "plain";
                         });

}  // namespace
}  // namespace kvtier
