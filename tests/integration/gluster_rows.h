// The rows and tiers of gluster_shared_test and gluster_overlap_test: rows
// that say whose they are (so a torn mix of two writers' rows is told apart),
// an FsTier on a mount of the shared volume, and waiting for its jobs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier::gluster {

constexpr uint64_t kRow = 64 * 1024;  // 16 pages: a tear between pages is visible
constexpr uint64_t kPage = 4096;

// ---------------------------------------------------------------------------
// Rows that say whose they are. Every 4 KiB page starts with (magic, writer,
// key, page) and continues with bytes drawn from (seed, writer, key, page),
// so a row is checkable on its own and a page from another row shows.

constexpr uint64_t kMagic = 0x4b56544753484152;  // "KVTGSHAR"

struct AlignedRows {
  explicit AlignedRows(size_t n) : data(static_cast<uint8_t*>(std::aligned_alloc(4096, n * kRow))), count(n) {
    std::memset(data, 0, n * kRow);
  }
  ~AlignedRows() { std::free(data); }
  AlignedRows(const AlignedRows&) = delete;
  AlignedRows& operator=(const AlignedRows&) = delete;
  uint8_t* row(size_t i) const { return data + i * kRow; }
  std::vector<std::span<const uint8_t>> Const() const {
    std::vector<std::span<const uint8_t>> out;
    for (size_t i = 0; i < count; ++i) out.emplace_back(row(i), kRow);
    return out;
  }
  std::vector<std::span<uint8_t>> Mut() const {
    std::vector<std::span<uint8_t>> out;
    for (size_t i = 0; i < count; ++i) out.emplace_back(row(i), kRow);
    return out;
  }
  uint8_t* data;
  size_t count;
};

inline uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

inline void FillRow(uint8_t* row, uint64_t seed, uint64_t writer, uint64_t key) {
  for (uint64_t p = 0; p < kRow / kPage; ++p) {
    uint64_t* words = reinterpret_cast<uint64_t*>(row + p * kPage);
    words[0] = kMagic;
    words[1] = writer;
    words[2] = key;
    words[3] = p;
    uint64_t state = seed ^ (writer << 56) ^ (key << 16) ^ p;
    for (uint64_t w = 4; w < kPage / 8; ++w) words[w] = SplitMix(&state);
  }
}

// "" when `row` is writer 1's or writer 2's complete row for `key`; else
// what it is made of, page by page.
inline std::string CheckRow(const uint8_t* row, uint64_t seed, uint64_t key, uint64_t* writer_out) {
  const uint64_t* head = reinterpret_cast<const uint64_t*>(row);
  const uint64_t writer = head[1];
  if (head[0] == kMagic && head[2] == key && (writer == 1 || writer == 2)) {
    std::vector<uint8_t> want(kRow);
    FillRow(want.data(), seed, writer, key);
    if (std::memcmp(want.data(), row, kRow) == 0) {
      *writer_out = writer;
      return "";
    }
  }
  std::ostringstream what;
  what << "key " << key << " is not one writer's row; pages (writer/key/page):";
  for (uint64_t p = 0; p < kRow / kPage; ++p) {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(row + p * kPage);
    if (w[0] != kMagic) {
      what << " [" << p << ": no header]";
      continue;
    }
    std::vector<uint8_t> page(kRow);
    FillRow(page.data(), seed, w[1], w[2]);
    const bool body_ok = w[3] < kRow / kPage && std::memcmp(page.data() + w[3] * kPage, row + p * kPage, kPage) == 0;
    what << " [" << p << ": " << w[1] << "/" << w[2] << "/" << w[3] << (body_ok ? "" : " bad body") << "]";
  }
  return what.str();
}

constexpr char kModel[] = "shared/gluster-model";
using testing::Key;
using testing::Spec;
// The key bytes these files' tests use.
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Fill(0x5a);

inline std::unique_ptr<FsTier> OpenTier(const std::filesystem::path& root, std::string* error, int threads = 4) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns = Spec(kModel, {"l0", "l1"});
  o.row_bytes = kRow;
  o.tier.n_read_threads = threads;
  o.tier.n_write_threads = threads;
  auto tier = FsTier::Open(o);
  if (!tier.ok()) {
    *error = tier.status().ToString();
    return nullptr;
  }
  return std::move(tier).value();
}

// The results of `ids`, in that order; a job missing at the deadline fails the test.
inline std::vector<JobResult> WaitJobs(FsTier* tier, const std::vector<uint64_t>& ids, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  std::vector<JobResult> out(ids.size());
  size_t got = 0;
  std::vector<JobResult> done;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got < ids.size()) {
    done.clear();
    tier->PollFinished(&done);
    for (auto& r : done) {
      const auto it = std::find(ids.begin(), ids.end(), r.job_id);
      if (it == ids.end()) continue;
      out[static_cast<size_t>(it - ids.begin())] = std::move(r);
      ++got;
    }
    if (got == ids.size()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      ADD_FAILURE() << ids.size() - got << " jobs did not finish within " << timeout.count() << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

inline std::string Describe(const FsTier& tier) {
  return std::string(tier.backend_name()) + ", O_DIRECT " + (tier.o_direct() ? "on" : "off") + ", CRC xattrs " +
         (tier.xattrs_supported() ? "on" : "off");
}

}  // namespace kvtier::gluster
