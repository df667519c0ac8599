// Shared helpers for kvtier tests: Status matchers, a scoped temporary
// directory, the seeded-randomness convention, a subprocess runner, and the
// keys and namespaces tests store under (Key, Spec, SglangSpec).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>


#include "kvtier/fs_tier.h"
#include "kvtier/layout.h"
#include "kvtier/result.h"
#include "kvtier/sglang.h"
#include "kvtier/status.h"

#define EXPECT_OK(expr)                                  \
  do {                                                   \
    const ::kvtier::Status kvtier_s_ = (expr);           \
    EXPECT_TRUE(kvtier_s_.ok()) << kvtier_s_.ToString(); \
  } while (0)
#define ASSERT_OK(expr)                                  \
  do {                                                   \
    const ::kvtier::Status kvtier_s_ = (expr);           \
    ASSERT_TRUE(kvtier_s_.ok()) << kvtier_s_.ToString(); \
  } while (0)

#define KVTIER_TEST_CONCAT_INNER_(a, b) a##b
#define KVTIER_TEST_CONCAT_(a, b) KVTIER_TEST_CONCAT_INNER_(a, b)
// ASSERT_OK_AND_ASSIGN(auto x, MakeX()): fails the test on an error Result.
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(KVTIER_TEST_CONCAT_(kvtier_r_, __LINE__), lhs, rexpr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, rexpr)                 \
  auto tmp = (rexpr);                                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();                 \
  lhs = std::move(tmp).value()

namespace kvtier::testing {

// The directory with vllm_cases.json and vllm_hash_vectors.json.
std::filesystem::path CompatDir();
// The built `kvtier` CLI binary.
std::filesystem::path CliPath();
// The repository root.
std::filesystem::path SourceDir();
// getaddrinfo answers that `host` does not exist (EAI_NONAME), as a resolver
// that is reachable does; a machine without one answers "try again".
bool ResolverSaysNoSuchHost(const std::string& host);

// The seed for a test's randomness: $KVTIER_TEST_SEED when set, else a fresh
// one. It is recorded as a test property and printed, so a failure can be
// replayed with KVTIER_TEST_SEED=<seed>.
uint64_t TestSeed();

std::string ReadFileOrDie(const std::filesystem::path& path);
void WriteFileOrDie(const std::filesystem::path& path, const std::string& bytes);
// A seal key file as FORMAT.md L174 wants it: mode 0600, this user's.
void WriteKeyFileOrDie(const std::filesystem::path& path, const std::string& bytes);

// Polls `tier` until job `id` is finished and returns its result; fails the
// test (and returns an empty result) after timeout_ms. Other finished jobs
// polled meanwhile are dropped.
// n rows of row_bytes each in one 4096-aligned buffer (O_DIRECT-able), filled
// with bytes drawn from `seed`: what the fs tier tests store and load.
struct AlignedRows {
  AlignedRows(size_t n, uint64_t row_bytes, uint64_t seed);
  ~AlignedRows();
  AlignedRows(const AlignedRows&) = delete;
  AlignedRows& operator=(const AlignedRows&) = delete;
  std::span<uint8_t> Row(size_t i) const { return {data + i * row_bytes, row_bytes}; }
  std::vector<std::span<const uint8_t>> Const() const;
  std::vector<std::span<uint8_t>> Mut() const;

  uint8_t* data;
  size_t count;
  uint64_t row_bytes;
};

JobResult WaitForJob(FsTier* tier, uint64_t id, int timeout_ms = 20000);


// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;  // the exit status, or 128+signal
  std::string out;     // standard output
  std::string err;     // standard error
};

// Runs argv (argv[0] is a path) with no shell, capturing stdout and stderr.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& stdin_data = "");

// Empty when `text` is safe to print on a terminal: valid UTF-8 and no
// control byte but the newlines that end lines; else what is wrong, where.
std::string UnsafeToPrint(const std::string& text);

// ---- Keys and namespaces the tests share ----

// What Key(i) puts in a block hash besides i itself.
struct KeyShape {
  // Bytes 8-31 all `fill`.
  static constexpr KeyShape Fill(uint8_t fill) {
    KeyShape s;
    s.fill = fill;
    return s;
  }
  // Bytes 8-30 zero, byte 31 `last` (plus i, mod 256, with `plus_i`).
  static constexpr KeyShape Last(uint8_t last, bool plus_i = false) {
    KeyShape s;
    s.last = last;
    s.last_plus_i = plus_i;
    return s;
  }

  uint8_t fill = 0;             // bytes 8-31
  std::optional<uint8_t> last;  // byte 31, when not `fill`
  bool last_plus_i = false;     // byte 31 is last + i (mod 256)
};
// A 32-byte block hash, group 0, whose bytes 0-7 hold i, little-endian, so
// consecutive keys differ in the bytes that name their shard directories.
// Byte 31 is the low byte of the big-endian value that picks a block's root
// among several (FORMAT.md L99): tests of several roots set it per key.
OffloadKey Key(uint64_t i, const KeyShape& shape = {});
// n keys of 32 random bytes each (group 0), drawn from `rng` (the test's seed).
std::vector<OffloadKey> RandomKeys(size_t n, std::mt19937_64& rng);

// A vLLM namespace of `model`: one full-attention group of 16-token blocks
// over `layers`, every other field NamespaceSpec's default.
NamespaceSpec Spec(const std::string& model, std::vector<std::string> layers = {"l0"});

// An SGLang MHA namespace of `model` (page_first, bfloat16, TP rank 0) with
// these per-rank sizes.
struct SglangShape {
  int64_t page_size = 0;  // tokens per page
  int64_t layers = 0;
  int64_t k_bytes_per_token = 0;
  int64_t v_bytes_per_token = 0;
  int64_t tp_size = 1;
};
SglangPageSpec SglangSpec(const std::string& model, const SglangShape& shape);

}  // namespace kvtier::testing
