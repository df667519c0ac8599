// Proves that du, fsck and gc handle an SGLang namespace (FORMAT.md
// L103-L104: vLLM's tree grammar, SGLang's fields in
// config.json with "inference_engine": "sglang") beside a vLLM namespace
// written by the real fs tier. Method: the SGLang tree is built by hand from
// the format's rules (canonical compact JSON -> digest12, indent-2 sorted
// config.json, pages at <NS>_r<rank>/<hhh>/<hh>_g0/<key>.bin of exactly
// page_bytes, CRC32C in user.vllm.kv_crc32c), independently of any SGLang
// writer, and checked against the library's SglangNamespace (same directory,
// config.json bytes and page paths). On a good tree: fsck --verify-data (with its digest check) has no
// finding, and du reports the engine of each namespace with SGLang's
// page_size, mem_layout, dtype and tp_size (library and CLI). A torn page
// (short) and a corrupt one (same size, flipped byte) are found and
// repaired; a config.json whose fields no longer hash to the directory is a
// digest mismatch. gc --older-than keeps an idle SGLang namespace while a
// lease is live and reclaims both its directories once none is; gc
// --max-bytes removes the least recently used pages across engines. Pages
// written by the real SglangTier (K and V as two pieces) are as clean, and
// its lease keeps gc off the namespace while it is open.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "format/layout_names.h"
#include "kvtier/fs_tier.h"
#include "kvtier/ops.h"
#include "kvtier/sglang.h"
#include "kvtier/sglang_hash.h"
#include "layout/py_json.h"
#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kVllmRow = 8192;
constexpr int64_t kPageSize = 4, kLayers = 2, kKBytes = 8, kVBytes = 8;
constexpr uint64_t kPageBytes = kPageSize * kLayers * (kKBytes + kVBytes);  // 128

// The SGLang fields of FORMAT.md L104 (MHA, TP 2).
nlohmann::json SglangFields(const std::string& model) {
  return {{"inference_engine", "sglang"}, {"format", "sglang-page/1"}, {"model_name", model},
          {"page_size", kPageSize},       {"mem_layout", "page_first"}, {"dtype", "bfloat16"},
          {"k_bytes_per_token", kKBytes}, {"v_bytes_per_token", kVBytes}, {"layer_num", kLayers},
          {"is_mla", false},              {"tp_size", 2},               {"pp_size", 1},
          {"cp_size", 1},                 {"page_bytes", kPageBytes}};
}

// The same namespace as SglangFields, as SGLang's backend describes it (TP rank 0 of 2).
constexpr testing::SglangShape kShape{kPageSize, kLayers, kKBytes, kVBytes, 2};
using testing::SglangSpec;

class OpsSglangTest : public ::testing::Test {
 protected:
  fs::path P(const std::string& rel) const { return root_.path() / rel; }

  // Writes the namespace directory and config.json by the rules (L2-L4,
  // L20-L28) and returns "<safe_model>_<digest12>".
  std::string MakeNamespace(const std::string& model) {
    model_ = model;
    const nlohmann::json fields = SglangFields(model);
    const std::string canonical = internal::PyJsonDumpsCompact(fields).value();
    std::string safe = model;
    for (char& c : safe) c = c == '/' ? '_' : c;
    const std::string dir = safe + "_" + format::NamespaceDigestOf(canonical);
    fs::create_directories(P(dir));
    const std::string config = internal::PyJsonDumpsIndent2(fields).value();
    testing::WriteFileOrDie(P(dir + "/config.json"), config);
    const SglangNamespace ns = SglangNamespace::Create(SglangSpec(model, kShape)).value();  // the writer's view agrees
    EXPECT_EQ(ns.dir_name(), dir);
    EXPECT_EQ(ns.config_json(), config);
    EXPECT_EQ(ns.page_bytes(), kPageBytes);
    return dir;
  }

  // n pages of page n's key in rank directory `rank`, each with its CRC32C.
  std::vector<std::string> WritePages(const std::string& ns, int64_t rank, int n, int64_t first_token = 0) {
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < n * kPageSize; ++t) tokens.push_back(first_token + t);
    std::vector<std::string> rels;
    const std::vector<std::string> keys = SglangPageKeys(tokens, kPageSize).value();
    for (const std::string& key : keys) {
      const std::string rel = format::BlockDirName(ns, rank) + "/" + format::BlockRelPath(key, 0);
      if (rank == 0) {
        EXPECT_EQ(rel, SglangNamespace::Create(SglangSpec(model_, kShape)).value().PageRelPath(key));
      }
      std::string bytes(kPageBytes, static_cast<char>(key[0]));
      fs::create_directories(P(rel).parent_path());
      testing::WriteFileOrDie(P(rel), bytes);
      const uint32_t crc = internal::Crc32c({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
      const uint8_t be[4] = {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)};
      EXPECT_EQ(setxattr(P(rel).c_str(), format::kCrcXattr, be, sizeof be, 0), 0) << std::strerror(errno);
      rels.push_back(rel);
    }
    return rels;
  }

  // A vLLM namespace with n blocks, written by the fs tier (its lease is gone after).
  std::string WriteVllm(size_t n) {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns.model_name = "org/vllm-model";
    o.ns.kv_cache_groups.push_back({16, {"l0"}});
    o.row_bytes = kVllmRow;
    auto tier = FsTier::Open(o).value();
    std::vector<OffloadKey> keys;
    std::vector<uint8_t> row(kVllmRow, 0x5a);
    std::vector<std::span<const uint8_t>> rows(n, row);
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint8_t> b(32, 0x77);
      b[0] = static_cast<uint8_t>(i);
      keys.push_back({BlockHash::FromBytes(b).value(), 0});
    }
    EXPECT_TRUE(tier->SubmitStore(keys, rows).ok());
    EXPECT_OK(tier->WaitIdle(10000));
    return Namespace::Create(o.ns).value().dir_name();
  }

  void Age(const std::string& rel, int64_t seconds) {
    const timespec ts{time(nullptr) - seconds, 0};
    const timespec times[2] = {ts, ts};
    ASSERT_EQ(utimensat(AT_FDCWD, P(rel).c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << rel;
  }
  void AgeTree(const std::string& top, int64_t seconds) {
    for (const auto& e : fs::recursive_directory_iterator(P(top))) {
      if (e.is_regular_file()) Age(fs::relative(e.path(), root_.path()).string(), seconds);
    }
  }
  // A lease as the fs tier leaves one (L74): only its name and mtime count.
  std::string PlantLease(const std::string& ns) {
    const std::string rel = ns + "/" + std::string(format::kMetaDirName) + "/" + std::string(format::kLeaseDirName) +
                            "/" + format::LeaseName("node-a", 4242, 1);
    fs::create_directories(P(rel).parent_path());
    testing::WriteFileOrDie(P(rel), "");
    return rel;
  }

  template <class Options>
  Options Opts() {
    Options o;
    o.root = root_.path().string();
    return o;
  }
  const NamespaceUsage* Find(const DuReport& r, const std::string& dir) {
    for (const NamespaceUsage& u : r.namespaces) {
      if (u.dir == dir) return &u;
    }
    ADD_FAILURE() << "no namespace " << dir;
    return nullptr;
  }

  testing::TempDir root_;
  std::string model_;  // of the last MakeNamespace
};

TEST_F(OpsSglangTest, GoodTreeIsCleanAndDuNamesTheEngines) {
  const std::string sg = MakeNamespace("Qwen/Qwen3-8B");
  WritePages(sg, 0, 6);
  WritePages(sg, 1, 5, 1000);
  const std::string vllm = WriteVllm(3);
  FsckOptions fo = Opts<FsckOptions>();
  fo.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport fsck, Fsck(fo));
  for (const Finding& f : fsck.findings) ADD_FAILURE() << FindingKindName(f.kind) << " " << f.path << " " << f.detail;
  EXPECT_EQ(fsck.blocks_checked, 14u);
  EXPECT_EQ(fsck.blocks_verified, 14u);

  ASSERT_OK_AND_ASSIGN(DuReport du, Du(Opts<ScanOptions>()));
  ASSERT_EQ(du.namespaces.size(), 2u);
  const NamespaceUsage* s = Find(du, sg);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->engine, "sglang");
  EXPECT_EQ(s->model, "Qwen/Qwen3-8B");
  EXPECT_EQ(s->page_size, kPageSize);
  EXPECT_EQ(s->mem_layout, "page_first");
  EXPECT_EQ(s->dtype, "bfloat16");
  EXPECT_EQ(s->tp_size, 2);
  EXPECT_EQ(s->tokens_per_hash, -1);
  EXPECT_EQ(s->ranks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s->blocks, 11u);
  EXPECT_EQ(s->bytes, 11 * kPageBytes);
  const NamespaceUsage* v = Find(du, vllm);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->engine, "vllm");
  EXPECT_EQ(v->tokens_per_hash, 16);
  EXPECT_EQ(v->page_size, -1);
  EXPECT_EQ(v->mem_layout, "");

  const testing::CommandResult json = testing::RunCommand({testing::CliPath().string(), "du", "--json", P("").string()});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  std::set<std::string> engines;
  for (const nlohmann::json& n : j["namespaces"]) {
    engines.insert(n["engine"].get<std::string>());
    if (n["dir"] == sg) {
      EXPECT_EQ(n["config"]["page_size"], kPageSize);
      EXPECT_EQ(n["config"]["mem_layout"], "page_first");
    }
  }
  EXPECT_EQ(engines, (std::set<std::string>{"sglang", "vllm"}));
  const testing::CommandResult text = testing::RunCommand({testing::CliPath().string(), "du", P("").string()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("sglang"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("page 4 page_first tp2"), std::string::npos) << text.out;
}

TEST_F(OpsSglangTest, TornAndCorruptPagesAreFoundAndRepaired) {
  const std::string sg = MakeNamespace("m");
  const std::vector<std::string> pages = WritePages(sg, 0, 8);
  fs::resize_file(P(pages[2]), kPageBytes / 2);  // torn: a short page
  {
    std::string bytes = testing::ReadFileOrDie(P(pages[5]));
    bytes[17] ^= 0x01;  // same size, one bit off: only the CRC shows it
    std::FILE* f = std::fopen(P(pages[5]).c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  FsckOptions fo = Opts<FsckOptions>();
  fo.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport found, Fsck(fo));
  std::set<std::string> got;
  for (const Finding& f : found.findings) got.insert(std::string(FindingKindName(f.kind)) + "@" + f.rule + " " + f.path);
  EXPECT_EQ(got, (std::set<std::string>{"size_mismatch@L80 " + pages[2], "crc_mismatch@L67 " + pages[5]}));
  EXPECT_EQ(found.ExitCode(), 4);

  fo.repair = true;
  fo.dir_grace_s = 0;  // the shard directories just emptied go too (the grace: ops_test)
  ASSERT_OK_AND_ASSIGN(FsckReport repaired, Fsck(fo));
  EXPECT_EQ(repaired.ExitCode(), 1);
  EXPECT_FALSE(fs::exists(P(pages[2])));
  EXPECT_FALSE(fs::exists(P(pages[5])));
  EXPECT_TRUE(fs::exists(P(pages[0])));
  fo.repair = false;
  ASSERT_OK_AND_ASSIGN(FsckReport after, Fsck(fo));
  EXPECT_TRUE(after.findings.empty());
}

// L196: the page an SGLang namespace declares (page_bytes, under a digest
// no co-tenant can change) is what sizes are judged by, not a majority:
// 30 planted longer files never make the 10 real pages short, and 30 planted
// short ones are removed as short although they are the most common size.
TEST_F(OpsSglangTest, APlantedMajorityCannotOutvoteTheDeclaredPage) {
  const std::string sg = MakeNamespace("m");
  const std::vector<std::string> pages = WritePages(sg, 0, 10);
  const std::vector<std::string> longer = WritePages(sg, 0, 30, /*first_token=*/1000);
  const std::vector<std::string> shorter = WritePages(sg, 0, 30, /*first_token=*/5000);
  for (const std::string& rel : longer) fs::resize_file(P(rel), kPageBytes * 2);
  for (const std::string& rel : shorter) fs::resize_file(P(rel), kPageBytes / 2);
  FsckOptions fo = Opts<FsckOptions>();
  fo.repair = true;
  fo.dir_grace_s = 0;
  ASSERT_OK_AND_ASSIGN(FsckReport repaired, Fsck(fo));
  size_t removed = 0, reported = 0;
  for (const Finding& f : repaired.findings) {
    EXPECT_NE(f.kind, FindingKind::kSuspectSizes) << f.detail;  // a declared page settles every size
    if (f.kind != FindingKind::kSizeMismatch) continue;
    EXPECT_NE(f.detail.find("declared page size 128"), std::string::npos) << f.detail;
    (f.action == RepairAction::kRemoved ? removed : reported) += 1;
  }
  EXPECT_EQ(removed, shorter.size());
  EXPECT_EQ(reported, longer.size());  // L66: longer ones are only reported
  for (const std::string& rel : pages) EXPECT_TRUE(fs::exists(P(rel))) << rel;
  for (const std::string& rel : shorter) EXPECT_FALSE(fs::exists(P(rel))) << rel;
  ASSERT_OK_AND_ASSIGN(GcReport gc, Gc(Opts<GcOptions>()));
  EXPECT_TRUE(gc.reclaimed.empty());
  for (const std::string& rel : pages) EXPECT_TRUE(fs::exists(P(rel))) << "gc removed a real page: " << rel;
}

TEST_F(OpsSglangTest, ConfigWhoseFieldsChangedIsADigestMismatch) {
  const std::string sg = MakeNamespace("m");
  WritePages(sg, 0, 2);
  nlohmann::json fields = SglangFields("m");
  fields["mem_layout"] = "layer_first";  // other page bytes: must not pass as this namespace
  testing::WriteFileOrDie(P(sg + "/config.json"), internal::PyJsonDumpsIndent2(fields).value());
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(Opts<FsckOptions>()));
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kConfigDigestMismatch);
  EXPECT_EQ(r.findings[0].path, sg + "/config.json");
}

TEST_F(OpsSglangTest, GcReclaimsAnIdleSglangNamespaceOnlyWithoutALiveLease) {
  const std::string sg = MakeNamespace("m");
  WritePages(sg, 0, 4);
  const std::string vllm = WriteVllm(2);
  AgeTree(sg + "_r0", 3 * 86400);
  const std::string lease = PlantLease(sg);  // fresh: an instance is attached
  GcOptions go = Opts<GcOptions>();
  go.older_than_s = 86400;
  ASSERT_OK_AND_ASSIGN(GcReport kept, Gc(go));
  EXPECT_TRUE(kept.reclaimed.empty());
  EXPECT_TRUE(fs::exists(P(sg + "/config.json")));

  Age(lease, 2 * 86400);  // the instance died two days ago
  ASSERT_OK_AND_ASSIGN(GcReport gone, Gc(go));
  std::set<std::string> reasons;
  for (const Reclaimed& r : gone.reclaimed) {
    EXPECT_TRUE(r.path.starts_with(sg + "/") || r.path.starts_with(sg + "_r0/")) << r.path;
    reasons.insert(r.reason);
  }
  EXPECT_EQ(reasons, std::set<std::string>{"orphaned_namespace"});
  EXPECT_EQ(gone.reclaimed.size(), 4u + 2u);  // pages, lease, config.json
  EXPECT_FALSE(fs::exists(P(sg + "_r0")));
  EXPECT_TRUE(fs::exists(P(vllm + "/config.json")));  // the active vLLM namespace stays
}

TEST_F(OpsSglangTest, GcMaxBytesRemovesTheLeastRecentlyUsedPagesAcrossEngines) {
  const std::string sg = MakeNamespace("m");
  const std::vector<std::string> pages = WritePages(sg, 0, 10);
  for (size_t i = 0; i < pages.size(); ++i) Age(pages[i], 10 * 86400 - static_cast<int64_t>(i) * 3600);
  WriteVllm(4);  // fresh
  GcOptions go = Opts<GcOptions>();
  go.max_bytes = 4 * kVllmRow + 5 * kPageBytes;  // half the pages must go
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(go));
  uint64_t removed = 0;
  for (const Reclaimed& c : r.reclaimed) {
    EXPECT_EQ(c.reason, "capacity");
    EXPECT_TRUE(c.path.starts_with(sg + "_r0/")) << c.path << " is not one of the old SGLang pages";
    removed += c.bytes;
  }
  EXPECT_GE(removed, 5 * kPageBytes);
  EXPECT_FALSE(fs::exists(P(pages[0])));  // the oldest goes first
  ASSERT_OK_AND_ASSIGN(DuReport du, Du(Opts<ScanOptions>()));
  EXPECT_LE(du.total_bytes, *go.max_bytes);
}

TEST_F(OpsSglangTest, PagesWrittenBySglangTierAreCleanAndItsLeaseHoldsGcOff) {
  SglangTierOptions o;
  o.tier.root_dir = root_.path().string();
  o.spec = SglangSpec("org/served", kShape);
  auto store = SglangTier::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<int64_t> tokens;
  for (int64_t t = 0; t < 6 * kPageSize; ++t) tokens.push_back(t * 7);
  const std::vector<std::string> keys = SglangPageKeys(tokens, kPageSize).value();
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<uint8_t> k(kPageBytes / 2, 0x4b), v(kPageBytes / 2, 0x56);
  const std::vector<SglangConstPagePieces> pages(keys.size(), SglangConstPagePieces{k, v});
  ASSERT_EQ((*store)->Store(views, pages), std::vector<bool>(keys.size(), true));

  FsckOptions fo = Opts<FsckOptions>();
  fo.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport fsck, Fsck(fo));
  for (const Finding& f : fsck.findings) ADD_FAILURE() << FindingKindName(f.kind) << " " << f.path << " " << f.detail;
  EXPECT_EQ(fsck.blocks_verified, keys.size());
  ASSERT_OK_AND_ASSIGN(DuReport du, Du(Opts<ScanOptions>()));
  ASSERT_EQ(du.namespaces.size(), 1u);
  EXPECT_EQ(du.namespaces[0].engine, "sglang");
  EXPECT_EQ(du.namespaces[0].live_leases, 1u);

  const std::string block_dir = (*store)->ns().block_dir_name();
  AgeTree(block_dir, 3 * 86400);
  GcOptions go = Opts<GcOptions>();
  go.older_than_s = 86400;
  ASSERT_OK_AND_ASSIGN(GcReport held, Gc(go));
  EXPECT_TRUE(held.reclaimed.empty()) << held.reclaimed.front().path;
  (*store)->Close();  // the lease goes with it
  ASSERT_OK_AND_ASSIGN(GcReport gone, Gc(go));
  EXPECT_EQ(gone.reclaimed.size(), keys.size() + 1);  // the pages and config.json
  EXPECT_FALSE(fs::exists(P(block_dir)));
}

}  // namespace
}  // namespace kvtier
