// Proves an fs tier publishes what a router needs to mirror the blocks of its
// volume (docs/kv-events.md): BlockStored for each block a store made
// visible (none for one skipped as already there, unless announce_existing),
// BlockRemoved for each file the tier removed (a corrupt block a load found,
// a max_bytes eviction, a clear), in vLLM's encoding (the int of a hash's
// last 8 bytes, or its bytes; an SGLang page's key as a string), so that an
// index kept from the events equals the files on disk; a publisher no one
// listens to never fails or delays a store (its drops are counted); a bad
// kv_events_config fails the open naming the key before any directory is
// made; tiers naming one endpoint share it; with enable_kv_events (vLLM's own
// channel) the tier keeps its stores and removals, in order, for
// TakeKeyEvents, only for a front end that drains them (keep_key_events),
// and at most its bound (past it: dropped and counted as the channel's,
// not the publisher's). Method: real files in a temp dir,
// a real ZeroMQ SUB socket bound on 127.0.0.1 that the tier connects to;
// keys and rows are seeded (seed printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "events/kv_event_wire.h"
#include "fs/tier_events.h"
#include "kvtier/fs_tier.h"
#include "kvtier/sglang.h"
#include "kvtier/tier_shell.h"
#include "support/kv_event_sub.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using internal::BlockRemovedEvent;
using internal::BlockStoredEvent;
using internal::KvEvent;
using internal::WireHash;
using testing::Key;
using testing::Spec;
constexpr uint64_t kRow = 16384;

// The hash fields of `events` of kind E, in order.
template <class E>
std::vector<WireHash> HashesOf(const std::vector<KvEvent>& events) {
  std::vector<WireHash> out;
  for (const KvEvent& e : events) {
    if (const E* x = std::get_if<E>(&e)) out.insert(out.end(), x->block_hashes.begin(), x->block_hashes.end());
  }
  return out;
}

std::vector<uint64_t> Sorted(const std::vector<WireHash>& hashes) {
  std::vector<uint64_t> out;
  for (const WireHash& h : hashes) out.push_back(h.int_value);
  std::sort(out.begin(), out.end());
  return out;
}

WireHash IntHash(const OffloadKey& k) { return WireHash::FromBlockHash(k.hash.bytes(), internal::BlockHashEncoding::kInt64); }

class FsTierEventsTest : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(testing::TestSeed()); }

  FsTierOpenOptions Options(const KvEventsConfig& events) const {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns = Spec("events/model");
    o.row_bytes = kRow;
    o.tier.n_read_threads = 2;
    o.tier.n_write_threads = 2;
    o.tier.kv_events_config = events;
    return o;
  }
  // Events on, sent to the test's subscriber.
  KvEventsConfig Events() const {
    KvEventsConfig c;
    c.enable_kv_cache_events = true;
    c.endpoint = sub_.endpoint();
    return c;
  }
  JobResult Store(FsTier* tier, const std::vector<OffloadKey>& keys) {
    rows_.emplace_back(std::make_unique<testing::AlignedRows>(keys.size(), kRow, rng_()));
    const std::vector<std::span<const uint8_t>> spans = rows_.back()->Const();
    return testing::WaitForJob(tier, tier->SubmitStore(keys, spans).value());
  }
  JobResult Load(FsTier* tier, const std::vector<OffloadKey>& keys) {
    testing::AlignedRows rows(keys.size(), kRow, 0);
    const std::vector<std::span<uint8_t>> spans = rows.Mut();
    return testing::WaitForJob(tier, tier->SubmitLoad(keys, spans).value());
  }
  std::vector<OffloadKey> RandomKeys(size_t n) { return testing::RandomKeys(n, rng_); }
  // The int hashes of the block files under the root.
  std::set<uint64_t> OnDisk() const {
    std::set<uint64_t> out;
    for (const auto& e : fs::recursive_directory_iterator(root_.path())) {
      if (e.path().extension() != ".bin") continue;
      const Result<BlockHash> h = BlockHash::FromHex(e.path().stem().string());
      if (h.ok()) out.insert(IntHash(OffloadKey{*h, 0}).int_value);
    }
    return out;
  }

  testing::TempDir root_;
  testing::EventSub sub_{"tcp://127.0.0.1:*", /*bind=*/true};
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<testing::AlignedRows>> rows_;
};

TEST_F(FsTierEventsTest, StoresPublishOnceVisibleAndNotWhenSkipped) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options(Events())));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::vector<OffloadKey> keys = RandomKeys(5);
  ASSERT_EQ(Store(tier.get(), keys).OkPrefix(), keys.size());
  const std::vector<KvEvent> events = sub_.WaitFor(keys.size());
  ASSERT_EQ(events.size(), keys.size());
  std::vector<WireHash> want;
  for (const OffloadKey& k : keys) want.push_back(IntHash(k));
  EXPECT_EQ(Sorted(HashesOf<BlockStoredEvent>(events)), Sorted(want));  // in the order the files appeared
  const auto& first = std::get<BlockStoredEvent>(events[0]);
  EXPECT_EQ(first.medium, "STORAGE");
  EXPECT_EQ(first.block_size, 16);  // tokens_per_hash * blocks_per_file
  EXPECT_FALSE(first.group_idx.has_value());
  EXPECT_FALSE(first.parent_block_hash.has_value());

  // Stored again: skipped as existing, so nothing new is on the volume.
  for (const KeyResult& r : Store(tier.get(), keys).keys) EXPECT_EQ(r.outcome, KeyOutcome::kSkippedExists);
  EXPECT_TRUE(sub_.Drain().empty());
  tier.reset();
  KvEventsConfig announce = Events();
  announce.announce_existing = true;
  sub_.ExpectNewPublisher();
  ASSERT_OK_AND_ASSIGN(tier, FsTier::Open(Options(announce)));
  ASSERT_TRUE(sub_.WaitConnected(2));
  Store(tier.get(), keys);
  EXPECT_EQ(Sorted(HashesOf<BlockStoredEvent>(sub_.WaitFor(keys.size()))), Sorted(want));
}

TEST_F(FsTierEventsTest, BytesEncodingMediumAndGroup) {
  KvEventsConfig c = Events();
  c.block_hash_encoding = KvEventHashEncoding::kBytes;
  c.medium = "SHARED_STORAGE";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options(c)));
  ASSERT_TRUE(sub_.WaitConnected(1));
  OffloadKey key = RandomKeys(1)[0];
  key.group_idx = 3;
  Store(tier.get(), {key});
  const std::vector<KvEvent> events = sub_.WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  const auto& e = std::get<BlockStoredEvent>(events[0]);
  EXPECT_EQ(e.block_hashes, std::vector<WireHash>{WireHash::Bytes(key.hash.bytes())});
  EXPECT_EQ(e.medium, "SHARED_STORAGE");
  EXPECT_EQ(e.group_idx, 3);
}

TEST_F(FsTierEventsTest, CorruptBlockRemovedByALoadIsPublished) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options(Events())));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::vector<OffloadKey> keys = RandomKeys(3);
  Store(tier.get(), keys);
  ASSERT_EQ(sub_.WaitFor(keys.size()).size(), keys.size());
  fs::resize_file(tier->BlockPath(keys[1]), kRow / 2);  // torn
  const JobResult loaded = Load(tier.get(), keys);
  EXPECT_EQ(loaded.keys[1].outcome, KeyOutcome::kCorrupt);
  EXPECT_FALSE(fs::exists(tier->BlockPath(keys[1])));
  const std::vector<KvEvent> events = sub_.WaitFor(1);
  EXPECT_EQ(HashesOf<BlockRemovedEvent>(events), std::vector<WireHash>{IntHash(keys[1])});
  EXPECT_TRUE(HashesOf<BlockStoredEvent>(events).empty());
}

// The index a router keeps from the events: stored adds, removed erases.
void Apply(const std::vector<KvEvent>& events, std::set<uint64_t>* index) {
  for (const WireHash& h : HashesOf<BlockStoredEvent>(events)) index->insert(h.int_value);
  for (const KvEvent& e : events) {
    if (const auto* r = std::get_if<BlockRemovedEvent>(&e)) {
      for (const WireHash& h : r->block_hashes) index->erase(h.int_value);
    }
  }
}

TEST_F(FsTierEventsTest, EvictionsKeepARoutersIndexEqualToTheFiles) {
  FsTierOpenOptions o = Options(Events());
  o.tier.capacity_bytes_max = 4 * kRow;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(o));
  ASSERT_TRUE(sub_.WaitConnected(1));
  std::set<uint64_t> index;
  for (int round = 0; round < 6; ++round) {
    ASSERT_EQ(Store(tier.get(), RandomKeys(2)).OkPrefix(), 2u) << "round " << round;
  }
  Apply(sub_.Drain(), &index);
  EXPECT_EQ(tier->Metrics().capacity_evicted_blocks, 8u);
  EXPECT_EQ(index.size(), 4u);
  EXPECT_EQ(index, OnDisk());
}

// The bound of the vLLM-channel logs tiers opened meanwhile make.
struct LogBound {
  explicit LogBound(size_t n) { internal::KeyEventLogBoundForTest() = n; }
  ~LogBound() { internal::KeyEventLogBoundForTest() = 0; }
};

// vLLM's own channel (enable_kv_events, kvtier.vllm's take_events): no
// publisher; the tier keeps its stores and removals in file order.
FsTierOpenOptions VllmChannel(FsTierOpenOptions o) {
  o.tier.enable_kv_events = true;
  o.keep_key_events = true;  // as VllmTier opens it
  return o;
}

std::vector<TierKeyEvent> SortedEvents(std::vector<TierKeyEvent> v) {
  std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.key.Hex() < y.key.Hex(); });
  return v;
}

std::vector<TierKeyEvent> StoredEvents(const std::vector<OffloadKey>& keys) {
  std::vector<TierKeyEvent> out;
  for (const OffloadKey& k : keys) out.push_back({k, false});
  return SortedEvents(out);
}

TEST_F(FsTierEventsTest, VllmChannelKeepsStoresAndRemovals) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(VllmChannel(Options(KvEventsConfig{}))));
  const std::vector<OffloadKey> a = RandomKeys(3);
  Store(tier.get(), a);
  EXPECT_EQ(SortedEvents(tier->TakeKeyEvents()), StoredEvents(a));
  EXPECT_TRUE(tier->TakeKeyEvents().empty()) << "taken once";
  Store(tier.get(), a);  // already there: announced, as vLLM's tier announces a store that succeeded
  EXPECT_EQ(SortedEvents(tier->TakeKeyEvents()), StoredEvents(a));
  fs::resize_file(tier->BlockPath(a[1]), kRow / 2);  // torn
  EXPECT_EQ(Load(tier.get(), a).keys[1].outcome, KeyOutcome::kCorrupt);
  EXPECT_EQ(tier->TakeKeyEvents(), (std::vector<TierKeyEvent>{{a[1], true}}));

  FsTierOpenOptions off = Options(KvEventsConfig{});
  off.tier.root_dir = (root_.path() / "off").string();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> quiet, FsTier::Open(off));
  Store(quiet.get(), RandomKeys(2));
  EXPECT_TRUE(quiet->TakeKeyEvents().empty()) << "kept only with enable_kv_events";
  // enable_kv_events in a config of a front end that never drains the log
  // (TieredStore, SGLang): nothing kept, so nothing dropped past a bound of 1.
  const LogBound bound(1);
  FsTierOpenOptions undrained = off;
  undrained.tier.root_dir = (root_.path() / "undrained").string();
  undrained.tier.enable_kv_events = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> other, FsTier::Open(undrained));
  Store(other.get(), RandomKeys(2));
  EXPECT_TRUE(other->TakeKeyEvents().empty()) << "kept only with keep_key_events";
  EXPECT_EQ(other->Metrics().kv_events_channel_dropped, 0u);
}

// What a full log drops (take_events not called) is the channel's count,
// not the publisher's: the stores past the bound, and none of the kept.
TEST_F(FsTierEventsTest, VllmChannelPastItsBoundDropsAndCountsThem) {
  const LogBound bound(3);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(VllmChannel(Options(KvEventsConfig{}))));
  const std::vector<OffloadKey> keys = RandomKeys(5);
  ASSERT_EQ(Store(tier.get(), keys).OkPrefix(), 5u);
  EXPECT_EQ(tier->TakeKeyEvents().size(), 3u);
  const FsTierMetrics m = tier->Metrics();
  EXPECT_EQ(m.kv_events_channel_dropped, 2u);
  EXPECT_EQ(m.kv_events_dropped, 0u);
  Store(tier.get(), RandomKeys(1));  // room again once taken
  EXPECT_EQ(tier->TakeKeyEvents().size(), 1u);
  EXPECT_EQ(tier->Metrics().kv_events_channel_dropped, 2u);
}

TEST_F(FsTierEventsTest, VllmChannelEvictionsKeepAnIndexEqualToTheFiles) {
  FsTierOpenOptions o = VllmChannel(Options(KvEventsConfig{}));
  o.tier.capacity_bytes_max = 4 * kRow;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(o));
  for (int round = 0; round < 6; ++round) {
    ASSERT_EQ(Store(tier.get(), RandomKeys(2)).OkPrefix(), 2u) << "round " << round;
  }
  std::set<std::string> index;  // a router's, fed in order once: a block stored, then evicted, is gone
  size_t removals = 0;
  for (const TierKeyEvent& e : tier->TakeKeyEvents()) {
    removals += e.removed ? 1 : 0;
    if (e.removed) {
      index.erase(e.key.Hex());
    } else {
      index.insert(e.key.Hex());
    }
  }
  EXPECT_EQ(removals, 8u);
  std::set<std::string> files;  // a key's hex is its file's stem and its group (0) in 4 bytes
  for (const auto& e : fs::recursive_directory_iterator(root_.path())) {
    if (e.path().extension() == ".bin") files.insert(e.path().stem().string() + "00000000");
  }
  EXPECT_EQ(files.size(), 4u);
  EXPECT_EQ(index, files);
}

TEST_F(FsTierEventsTest, ClearPublishesEachRemovedBlock) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TierShell> shell, TierShell::Open(Options(Events()), "events shell"));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::vector<OffloadKey> keys = RandomKeys(4);
  Store(shell->tier_for_tests(), keys);
  std::set<uint64_t> index;
  Apply(sub_.WaitFor(keys.size()), &index);
  ASSERT_EQ(index.size(), 4u);
  ASSERT_OK_AND_ASSIGN(uint64_t removed, shell->ClearNamespace());
  EXPECT_EQ(removed, 4u);
  Apply(sub_.WaitFor(4), &index);
  EXPECT_TRUE(index.empty());
  EXPECT_TRUE(OnDisk().empty());
}

TEST_F(FsTierEventsTest, SglangPagesAreNamedByTheirKeys) {
  const SglangPageSpec spec = testing::SglangSpec("events/sglang", {.page_size = 4, .layers = 2,
                                                                    .k_bytes_per_token = 1024, .v_bytes_per_token = 1024});
  ASSERT_OK_AND_ASSIGN(SglangNamespace ns, SglangNamespace::Create(spec));
  ASSERT_EQ(ns.page_bytes(), kRow);
  FsTierOpenOptions o = Options(Events());
  o.prebuilt_ns = ns.fs_namespace();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(o));
  ASSERT_TRUE(sub_.WaitConnected(1));
  const std::string page_key(64, 'a');
  Store(tier.get(), {SglangNamespace::PageKey(page_key)});
  const std::vector<KvEvent> events = sub_.WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  const auto& e = std::get<BlockStoredEvent>(events[0]);
  EXPECT_EQ(e.block_hashes, std::vector<WireHash>{WireHash::PageKey(page_key)});
  EXPECT_EQ(e.block_size, 4);
}

TEST_F(FsTierEventsTest, NoSubscriberNeverFailsAStoreAndDropsAreCounted) {
  KvEventsConfig c = Events();
  c.endpoint = "tcp://127.0.0.1:1";  // connected, never answered
  c.max_queue_size = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options(c)));
  size_t stored = 0;
  for (int i = 0; i < 16; ++i) stored += Store(tier.get(), RandomKeys(4)).OkPrefix();
  EXPECT_EQ(stored, 64u);
  const FsTierMetrics m = tier->Metrics();
  EXPECT_LE(m.kv_events_published + m.kv_events_dropped + m.kv_events_queue_depth, 64u);
  EXPECT_GE(m.kv_events_published + m.kv_events_dropped, 64u - 2u);
}

TEST_F(FsTierEventsTest, BadConfigFailsTheOpenNamingTheKeyBeforeAnyDirectory) {
  KvEventsConfig bad = Events();
  bad.endpoint = "bogus://nowhere";
  Result<std::unique_ptr<FsTier>> opened = FsTier::Open(Options(bad));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find("kv_events_config.endpoint"), std::string::npos) << opened.status().ToString();
  bad = Events();
  bad.medium = "DISK";
  opened = FsTier::Open(Options(bad));
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("kv_events_config.medium"), std::string::npos) << opened.status().ToString();
  EXPECT_TRUE(fs::is_empty(root_.path()));
}

TEST_F(FsTierEventsTest, TiersNamingOneEndpointShareItAndMustAgree) {
  testing::TempDir other;
  FsTierOpenOptions second = Options(Events());
  second.tier.root_dir = other.path().string();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> a, FsTier::Open(Options(Events())));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> b, FsTier::Open(second));
  ASSERT_TRUE(sub_.WaitConnected(1));  // one publisher for both
  Store(a.get(), RandomKeys(1));
  Store(b.get(), RandomKeys(1));
  EXPECT_EQ(sub_.WaitFor(2).size(), 2u);
  second.tier.kv_events_config.hwm = 7;
  testing::TempDir third;
  second.tier.root_dir = third.path().string();
  const Result<std::unique_ptr<FsTier>> clash = FsTier::Open(second);
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("kv_events_config.endpoint"), std::string::npos) << clash.status().ToString();
}

}  // namespace
}  // namespace kvtier
