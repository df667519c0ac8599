// kvtier's SGLang HiCache L3 store: SGLang pages as files of an fs tier, in
// a namespace of their own beside vLLM's on the same volume.
//
// SglangNamespace names the directory from a digest of everything that
// changes a page's bytes (layout-spec/FORMAT.md L103-L107): the served model
// name (and optional model_path / model_revision), page size, host memory
// layout, dtype, K and V bytes per token, layer count, MLA or not, TP (MHA
// only), PP and CP sizes, and the page's byte count. The tree grammar is
// vLLM's (L1-L10): "<model>_<digest12>/config.json", pages in
// "<model>_<digest12>_r<rank>/<hhh>/<hh>_g0/<name>.bin", where <name> is the
// page key when it is 64 lowercase hex characters (SGLang's SHA-256 page
// keys) and hex(SHA-256(key)) otherwise (L106).
//
// SglangTier is the synchronous batch API an engine's threads call: each
// call submits one job to an FsTier (the io_uring I/O loop) and waits for it.
// A page is moved as several pieces (SGLang's host pool keeps a page's K and
// V at different addresses), straight between the file and the pieces, with
// the CRC32C of their concatenation (L60, L102). Every failure is a per-key
// false: the I/O calls never throw and never return an error. It is the
// SGLang counterpart of VllmTier, the vLLM adapter (include/kvtier/vllm_tier.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/fs_tier.h"
#include "kvtier/fs_tier_options.h"
#include "kvtier/layout.h"
#include "kvtier/result.h"

namespace kvtier {

// What changes a page's bytes, as SGLang's HiCacheStorageConfig and host
// pool describe it (the binding fills it at register_mem_pool_host).
struct SglangPageSpec {
  // storage_config.model_name, else extra_config "model_path": required,
  // UTF-8, no NUL.
  std::string model_name;
  // Written into the fields only when set (extra_config keys).
  std::optional<std::string> model_path;
  std::optional<std::string> model_revision;
  int64_t page_size = 0;  // tokens per page, >= 1
  // "layer_first", "page_first", "page_first_direct" or "page_head" (MLA:
  // not "page_head"; SGLang's MLA pool has none).
  std::string mem_layout;
  std::string dtype;              // torch dtype name without "torch.", e.g. "bfloat16"
  int64_t k_bytes_per_token = 0;  // per layer, on this rank; >= 1
  int64_t v_bytes_per_token = 0;  // per layer, on this rank; >= 1 (MHA), 0 (MLA)
  int64_t layer_num = 0;          // layers held by this rank, >= 1
  bool is_mla = false;
  // Sizes >= 1; 0 <= rank < size.
  int64_t tp_size = 1, tp_rank = 0;
  int64_t pp_size = 1, pp_rank = 0;
  int64_t cp_size = 1, cp_rank = 0;  // attention context parallel (attn_cp_*)

  bool operator==(const SglangPageSpec&) const = default;
};

// The four host-pool layouts SGLang has (mem_layout values).
KVTIER_API bool SglangMemLayoutKnown(std::string_view mem_layout);

// What kvtier does with a key of SGLang's --hicache-storage-backend-extra-config
// (docs/sglang.md): the one place that decides it, so kvtier.sglang keeps no
// list of its own.
enum class SglangConfigKey {
  kFsTier,     // one of FsTierConfigKeys() (config.h): into the tier's config
  kNamespace,  // "model_path", "model_revision": into SglangPageSpec
  kSglang,     // read by SGLang itself (backend_name, interface_v1, prefetch_*, ...): ignored
  kUnknown,    // anything else: ignored with one warning naming it, since SGLang
               // adds keys between versions and asks backends to accept them
};
KVTIER_API SglangConfigKey SglangConfigKeyKind(std::string_view key);

// A page key's file stem (FORMAT.md L106): the key itself when it is 64
// lowercase hex characters, else the lowercase hex SHA-256 of its bytes.
// Always 64 lowercase hex characters.
KVTIER_API std::string SglangPageName(std::string_view key);

// The spec recorded in an SGLang namespace's config.json (or its canonical
// JSON), for tools: every field of L104, with ranks 0 (ranks are not
// fields). SglangNamespace::Create of the result has the same digest.
// kInvalidArgument naming the key: not a JSON object, "inference_engine" not
// "sglang", an unknown "format", a field missing or of the wrong type, or
// a "page_bytes" that disagrees with the other fields.
KVTIER_API Result<SglangPageSpec> ParseSglangFields(std::string_view config_json);

// An SGLang namespace: a value type, immutable, safe to share across threads.
class KVTIER_API SglangNamespace {
 public:
  // Validates `spec` and computes the fields (FORMAT.md L103-L104), digest,
  // names and config.json. kInvalidArgument naming the field: an empty or
  // non-UTF-8 model_name (or model_path, model_revision, dtype), page_size,
  // layer_num or k_bytes_per_token < 1, an unknown mem_layout, MHA with
  // v_bytes_per_token < 1, MLA with v_bytes_per_token != 0 or with
  // mem_layout "page_head", a size < 1, a rank outside [0, size), a page
  // above 2^40 bytes.
  static Result<SglangNamespace> Create(SglangPageSpec spec);

  const SglangPageSpec& spec() const { return spec_; }
  // L105: (pp_rank * cp_size + cp_rank) * tp_size_eff + tp_rank_eff, where
  // MLA has tp_size_eff 1, tp_rank_eff 0.
  int64_t rank() const { return fs_ns_.spec().rank; }
  // page_size * layer_num * (k_bytes_per_token + v_bytes_per_token): the
  // size of every page file (L107).
  uint64_t page_bytes() const { return page_bytes_; }
  // Whether this rank writes pages: false for MLA on tp_rank > 0 (SGLang's
  // controller does not back up there; a store from it is still allowed).
  bool writer() const { return !spec_.is_mla || spec_.tp_rank == 0; }

  const std::string& digest() const { return fs_ns_.digest(); }      // 12 lowercase hex
  const std::string& dir_name() const { return fs_ns_.dir_name(); }  // "<model>_<digest>"
  std::string block_dir_name() const { return fs_ns_.block_dir_name(); }  // "<dir>_r<rank>"
  // The exact bytes hashed (compact, sorted, ASCII) and of config.json
  // (indent=2, sorted, ASCII): Python's json.dumps, as vLLM's.
  const std::string& canonical_json() const { return fs_ns_.canonical_json(); }
  const std::string& config_json() const { return fs_ns_.config_json(); }

  // "<dir>_r<rank>/<hhh>/<hh>_g0/<SglangPageName(key)>.bin", relative to
  // the root.
  std::string PageRelPath(std::string_view key) const;
  // The key as the fs tier addresses it: the 32 bytes of SglangPageName,
  // group 0.
  static OffloadKey PageKey(std::string_view key);

  // The underlying fs-tier namespace (its spec() carries model_name, dtype,
  // inference_engine "sglang" and rank; the other vLLM fields are unused).
  const Namespace& fs_namespace() const { return fs_ns_; }

 private:
  SglangNamespace(SglangPageSpec spec, Namespace fs_ns, uint64_t page_bytes)
      : spec_(std::move(spec)), fs_ns_(std::move(fs_ns)), page_bytes_(page_bytes) {}
  SglangPageSpec spec_;
  Namespace fs_ns_;
  uint64_t page_bytes_ = 0;
};

struct SglangTierOptions {
  // The fs keys (root_dir required; path_sharding with a root list,
  // io_timeout_ms, checksum_blocks, durability, bounce_loads, ... all apply).
  FsTierOptions tier;
  SglangPageSpec spec;
  // Host memory pages will come from (the pool's K and V buffers), for
  // io_uring fixed-buffer I/O; optional. Not owned; must outlive the store.
  std::vector<std::span<uint8_t>> registered_memory;
};

// The pieces whose concatenation is one page (e.g. its K then its V bytes).
using SglangPagePieces = std::vector<std::span<uint8_t>>;
using SglangConstPagePieces = std::vector<std::span<const uint8_t>>;

// Synchronous batch calls for an engine's threads. Thread safety: every
// method may be called from several threads at once (SGLang's prefetch,
// prefetch I/O and backup threads), Close included; the destructor must not
// race with other calls. No I/O call throws or returns an error: a failure
// (missing, short, corrupt or unreadable page, full disk, deadline, a call
// after Close, a page of the wrong size, a page whose memory another page
// of the same load or a call in flight writes, or a load's page whose
// memory a store in flight reads) is that key's false, logged once per
// kind, and counted in Metrics() (by the fs tier's outcome; a page refused
// before the tier, or a call after Close, is not counted).
//
// Deadlines: each call waits for its one job, at most io_timeout_ms (+ about
// 100 ms) on a hung mount when io_timeout_ms > 0. With bounce rows on
// (bounce_loads), a read abandoned at its deadline never writes the
// caller's pieces afterwards; with bounce rows off a read into the caller's
// memory is waited for (the fs tier never abandons it).
class KVTIER_API SglangTier {
 public:
  // Creates the namespace (FsTier::Open: directories, config.json, lease,
  // probes). Errors: kInvalidArgument naming the field of a bad spec
  // (SglangNamespace::Create) or option, or naming store_queue_bytes_max
  // when it cannot hold one page (a store job larger than it is dropped);
  // FsTier::Open's errors (kTimedOut on a hung mount, within about
  // io_timeout_ms).
  static Result<std::unique_ptr<SglangTier>> Open(const SglangTierOptions& options);
  // Close(), then frees.
  ~SglangTier();
  SglangTier(const SglangTier&) = delete;
  SglangTier& operator=(const SglangTier&) = delete;

  // How many keys from the start are present (a regular page file each):
  // one batched lookup job. 0 after Close or on any failure.
  size_t ExistsPrefix(std::span<const std::string_view> keys);

  // Reads page i into pages[i] (its pieces in order; their lengths must sum
  // to page_bytes()). Returns one bool per key: true only when every byte of
  // the page is in the pieces, with size and (checksum_blocks) CRC32C
  // verified. A false key's pieces hold unspecified bytes. One job per call;
  // keys.size() != pages.size(): all false.
  std::vector<bool> Load(std::span<const std::string_view> keys,
                         std::span<const SglangPagePieces> pages);
  // Writes page i from pages[i] (temp file, CRC32C xattr, rename). true for
  // a page stored now or already present (another writer had it). The
  // pieces must stay unmodified until the call returns. The fs tier drops a
  // job over store_queue_bytes_max whole and SGLang backs up 128 pages a
  // call (2.7 GB of a 70B model's pages), so a call is stored as jobs of at
  // most half of it, one after the other; after a job with a failure the
  // later pages are false, not tried (SGLang stops a backup at the first
  // failed page, so they would never be found).
  std::vector<bool> Store(std::span<const std::string_view> keys,
                          std::span<const SglangConstPagePieces> pages);

  // Removes this store's pages and temp files: regular files named as L8 or
  // L55 in this namespace's "<dir>_r<rank>" (on every root), nothing else;
  // empty shard directories are pruned best effort. Returns files removed.
  // Errors (from walking or unlinking): ErrnoToStatus naming the path;
  // kTimedOut naming it when one file-system call of the walk took longer
  // than io_timeout_ms (a hung mount: the walk runs on a thread of its own
  // and is abandoned, making no further change once the call returns);
  // kUnavailable after Close.
  Result<uint64_t> Clear();

  // The fs tier's counters (zeros after Close).
  FsTierMetrics Metrics() const;
  const SglangNamespace& ns() const;
  // The namespace whose directories hold the pages: ns().fs_namespace(),
  // or, for a sealed store (seal_key_file, FORMAT.md L162), its key's.
  const Namespace& stored_namespace() const;
  // The absolute path of a key's page file on its root; it need not exist.
  std::string PagePath(std::string_view key) const;

  // Waits for calls in flight, drains the tier's queued I/O, removes the
  // lease and stops the I/O thread. Idempotent; later calls return false / 0 /
  // kUnavailable.
  void Close();

 private:
  struct Rep;
  explicit SglangTier(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace kvtier
