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

// L197: what a namespace's config says of its files, where it says it all
// (sizes known and positive); nullopt otherwise.
std::optional<NamespaceSpec> FilesOf(const ConfigInfo& c) {
  if (c.engine == "sglang" || !c.parses || c.tokens_per_hash <= 0 || c.blocks_per_file <= 0) return std::nullopt;
  NamespaceSpec spec;
  spec.inference_engine = c.engine.empty() ? "vllm" : c.engine;
  spec.tokens_per_hash = c.tokens_per_hash;
  spec.blocks_per_file = c.blocks_per_file;
  for (int64_t tokens : c.group_tokens) {
    if (tokens <= 0) return std::nullopt;
    spec.kv_cache_groups.push_back(KvCacheGroupSpec{tokens, {}});
  }
  return spec;
}

// L197: a namespace's files hold one block each only where its config says
// so; SGLang's hold one page. A config that cannot be read says nothing:
// records are read.
bool MayHoldSeveral(const ConfigInfo& c, const std::optional<NamespaceSpec>& files) {
  if (c.engine == "sglang") return false;
  return !files || format::MayHoldSeveralBlocks(*files);
}

// L201: the attribute, else the start of the last page; "" when neither can be read.
// Each call a step of `io` (the watch's deadline is per call).
std::string RecordOfFd(int fd, const ScannedFile& f, IoScope* io) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != f.ino || st.st_dev != f.dev) return "";
  io->Step();
  std::string buf(format::kTrailerBytes, '\0');
  const ssize_t n = fgetxattr(fd, format::kBlockHashesXattr, buf.data(), format::kBlockHashRecordBytesMax);
  if (n > 0) return buf.substr(0, static_cast<size_t>(n));
  io->Step();
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
    std::optional<NamespaceSpec> files = FilesOf(config);
    const bool several = MayHoldSeveral(config, files);
    namespaces_.emplace(name, NsInfo{config.engine, several, std::move(files)});
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
  if (!record.empty()) block.block_hashes = BlocksOf(block, *ns, record);
  callback_(block);
  return err;
}

// L200: a believed record, of exactly the blocks its config says a file of
// its group holds (a planted one cannot name more); any number where the
// config does not say.
std::vector<BlockHash> RemovedBlocks::BlocksOf(const RemovedBlock& block, const NsInfo& ns, const std::string& record) {
  const Result<BlockHash> key = BlockHash::FromHex(block.stem);
  const std::optional<format::Shard2> group = format::ParseShard2Name(block.group_dir);
  if (!key.ok() || !group || group->group < 0 || group->group > UINT32_MAX) return {};
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(record.data()), record.size());
  std::optional<std::vector<BlockHash>> hashes = format::ParseBlockHashRecord(bytes, *key);
  const auto g = static_cast<uint32_t>(group->group);
  if (!hashes || (ns.spec && hashes->size() != format::HashesPerFile(*ns.spec, g))) return {};
  return std::move(*hashes);
}

std::string RemovedBlocks::ReadRecord(const TreeEditor& editor, const ScannedFile& f, int dir_fd) const {
  const auto [dir, name] = SplitRel(f.rel);
  IoScope io(f.rel);
  if (io.cancelled()) return "";
  UniqueFd held;
  if (dir_fd < 0) {
    if (editor.OpenDir(dir, &held) != 0) return "";
    dir_fd = held.get();
    io.Step();
  }
  UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return "";
  io.Step();
  return RecordOfFd(fd.get(), f, &io);
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
