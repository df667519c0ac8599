// RemovedBlocks (ops/removed_blocks.h).
#include "ops/removed_blocks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <utility>

#include "format/block_hashes.h"
#include "format/block_trailer.h"
#include "format/layout_names.h"
#include "io/io_watch.h"

namespace kvtier::internal {
namespace {

// L197: a namespace's files hold one block each only where its config says
// so (blocks_per_file 1, no group block longer than a hash); SGLang's hold
// one page. A config that cannot be read says nothing: records are read.
bool MayHoldSeveral(const ConfigInfo& c) {
  if (c.engine == "sglang") return false;
  if (!c.parses || c.tokens_per_hash <= 0) return true;
  const int64_t block = c.tokens_per_block_max < 0 ? c.tokens_per_hash : c.tokens_per_block_max;
  return c.blocks_per_file != 1 || block > c.tokens_per_hash;
}

// L201: the attribute, else the start of the last page; "" when neither can be read.
std::string RecordOfFd(int fd, const ScannedFile& f) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != f.ino || st.st_dev != f.dev) return "";
  std::string buf(format::kTrailerBytes, '\0');
  const ssize_t n = fgetxattr(fd, format::kBlockHashesXattr, buf.data(), format::kBlockHashRecordBytesMax);
  if (n > 0) return buf.substr(0, static_cast<size_t>(n));
  const auto page = static_cast<off_t>(buf.size());
  if (st.st_size <= page || pread(fd, buf.data(), buf.size(), st.st_size - page) != page) return "";
  return buf;
}

}  // namespace

RemovedBlocks::RemovedBlocks(const OnBlockRemoved& callback, std::string root, const TreeScan& scan)
    : callback_(callback), root_(std::move(root)) {
  if (!callback_) return;
  for (const auto& [name, ns] : scan.namespaces) {
    const ConfigInfo config = ParseConfig(ns);
    namespaces_.emplace(name, NsInfo{config.engine, MayHoldSeveral(config)});
  }
}

int RemovedBlocks::Remove(const TreeEditor& editor, const ScannedFile& f, std::string_view reason, int dir_fd) const {
  RemovedBlock block;
  const bool told = callback_ && Describe(f, reason, &block);
  const NsInfo* ns = told ? InfoOf(f) : nullptr;
  const std::string record = ns == nullptr || !ns->several ? std::string() : ReadRecord(editor, f, dir_fd);
  bool unlinked = false;
  const int err = dir_fd >= 0 ? editor.RemoveAt(dir_fd, f, &unlinked) : editor.Remove(f, &unlinked);
  if (!unlinked || !told) return err;
  const Result<BlockHash> key = BlockHash::FromHex(block.stem);
  if (!record.empty() && key.ok()) {
    const auto bytes = std::span(reinterpret_cast<const uint8_t*>(record.data()), record.size());
    if (auto hashes = format::ParseBlockHashRecord(bytes, *key)) block.block_hashes = std::move(*hashes);
  }
  callback_(block);
  return err;
}

std::string RemovedBlocks::ReadRecord(const TreeEditor& editor, const ScannedFile& f, int dir_fd) const {
  const auto [dir, name] = SplitRel(f.rel);
  IoScope io(f.rel);
  if (io.cancelled()) return "";
  UniqueFd held;
  if (dir_fd < 0) {
    if (editor.OpenDir(dir, &held) != 0) return "";
    dir_fd = held.get();
  }
  UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  return fd.get() < 0 ? "" : RecordOfFd(fd.get(), f);
}

const RemovedBlocks::NsInfo* RemovedBlocks::InfoOf(const ScannedFile& f) const {
  const std::string_view block_dir = std::string_view(f.rel).substr(0, f.rel.find('/'));
  const std::optional<format::BlockDir> bd = format::ParseBlockDirName(block_dir);
  if (!bd) return nullptr;
  const auto it = namespaces_.find(bd->ns);
  return it == namespaces_.end() ? nullptr : &it->second;
}

bool RemovedBlocks::Describe(const ScannedFile& f, std::string_view reason, RemovedBlock* out) const {
  if (!S_ISREG(f.mode)) return false;
  // L8: <NS>_r<rank>/<hhh>/<hh>_g<g>/<h>.bin, each part by its rule.
  const auto [dir2, file] = SplitRel(f.rel);
  const auto [dir1, group_dir] = SplitRel(dir2);
  const auto [block_dir, shard1] = SplitRel(dir1);
  const std::optional<format::BlockDir> bd = format::ParseBlockDirName(block_dir);
  const std::optional<std::string_view> hex = format::BlockFileHex(file);
  if (!bd || !hex || block_dir.find('/') != std::string::npos || !format::IsShard1Name(shard1) ||
      !format::ParseShard2Name(group_dir)) {
    return false;
  }
  const auto ns = namespaces_.find(bd->ns);
  *out = RemovedBlock{.root = root_,
                      .path = f.rel,
                      .block_dir = block_dir,
                      .group_dir = group_dir,
                      .stem = std::string(*hex),
                      .engine = ns == namespaces_.end() ? std::string() : ns->second.engine,
                      .bytes = f.bytes,
                      .reason = std::string(reason),
                      .block_hashes = {}};
  return true;
}

}  // namespace kvtier::internal
