"""Type stubs of kvtier's extension module (python/src/*.cc)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from typing_extensions import Buffer

class KvtierError(Exception):
    """An error from kvtier: ``code`` is kvtier's status name (``invalid_argument``, ``not_found``,
    ``corruption``, ``io_error``, ``no_space``, ``busy``, ``rejected``, ``unavailable``,
    ``permission_denied``, ``timed_out``, ``internal``), ``errno`` the OS error (0 when none)."""

    code: str
    errno: int
    message: str

# ---- hashing and layout ------------------------------------------------------------------------

def block_hashes(
    tokens: Sequence[int],
    *,
    algo: str = "sha256",
    block_size: int = 16,
    seed: str | None = None,
    lora_name: str | None = None,
    cache_salt: str | None = None,
    mm_features: Sequence[tuple[str, int, int]] = (),
) -> list[bytes]:
    """vLLM's chained block hashes of every full block of ``tokens`` (``algo``: sha256,
    sha256_cbor, xxhash, xxhash_cbor). ``seed`` is NONE_HASH's seed; None resolves it as vLLM
    does ($PYTHONHASHSEED, else "vllm-none-hash" for sha256, else random with a warning).
    ``mm_features``: (identifier, offset, length) per multimodal item, sorted by offset.
    ``seed``, ``lora_name``, ``cache_salt`` and the identifiers must be str (vLLM hashes bytes
    differently): bytes raise KvtierError(invalid_argument) naming the argument."""

def none_hash(algo: str = "sha256", seed: str | None = None) -> bytes:
    """NONE_HASH, the chain's seed hash, resolved as in :func:`block_hashes`."""

def chunk_keys(
    block_hashes: Sequence[bytes],
    *,
    tokens_per_block: int = 16,
    blocks_per_chunk: int = 1,
    tokens_per_hash: int = 16,
    group_idx: int = 0,
) -> list[bytes]:
    """vLLM's offload keys, one per complete chunk: the chunk's last block hash followed by
    ``group_idx`` as 4 big-endian bytes. Each hash must be bytes (1-32 of them); anything else,
    a str included, raises KvtierError(invalid_argument) naming ``block_hashes[i]``."""

def make_key(block_hash: bytes, group_idx: int = 0) -> bytes:
    """vLLM's OffloadKey: ``block_hash`` (1-32 bytes) followed by ``group_idx`` (4 bytes, big-endian)."""

def sglang_page_keys(
    tokens: Sequence[int] | Sequence[tuple[int, int]],
    page_size: int,
    prior_hash: str | None = None,
    extra_key: str | None = None,
    cache_salt: str | None = None,
) -> list[str]:
    """SGLang's HiCache page keys (64 lowercase hex characters each): chained SHA-256 over
    4-byte little-endian token ids (each in [0, 2**32-1]; (a, b) pairs in EAGLE bigram mode),
    a trailing partial page too. ``prior_hash`` (hex) continues a chain exactly.
    ``extra_key`` / ``cache_salt`` seed a fresh chain as sgl-project/sglang#38577 describes, in
    kvtier's reading of it, NOT verified against SGLang's code (see docs/ops.md); give
    ``prior_hash`` with a seed SGLang prints for an exact chain. Both at once is an error."""

class Namespace:
    """A vLLM fs-tier namespace (vLLM's FileMapper fields): the directory ``<model>_<digest>``,
    the exact bytes of its ``config.json`` and the path of each block file."""

    def __init__(
        self,
        model_name: str,
        *,
        tokens_per_hash: int = 16,
        blocks_per_file: int = 1,
        tp_size: int = 1,
        pp_size: int = 1,
        pcp_size: int = 1,
        dcp_size: int = 1,
        rank: int = 0,
        dtype: str = "bfloat16",
        kv_cache_groups: Iterable[Mapping[str, Any]] | None = None,
        inference_engine: str = "vllm",
        parallel_agnostic: bool = True,
        replicated_layout: bool = False,
        canonical_format: str | None = None,
        storage_format: str | None = None,
    ) -> None:
        """``kv_cache_groups``: a list (or tuple) of {"tokens_per_block": int >= 1,
        "layer_names": [str, ...]}, with exactly those two keys. Raises KvtierError(invalid_argument)
        for an empty model name, a size out of range, bytes where a str is expected, or a badly
        shaped group (naming ``kv_cache_groups[i].<key>``)."""
    @property
    def digest(self) -> str: """12 lowercase hex characters."""
    @property
    def dir_name(self) -> str: """``<model with '/' -> '_'>_<digest>``."""
    @property
    def block_dir_name(self) -> str: """``<dir_name>_r<rank>``."""
    @property
    def canonical_json(self) -> str: """The bytes that are hashed into the digest."""
    @property
    def config_json(self) -> str: """The exact bytes of ``config.json``."""
    @property
    def config_path(self) -> str: """``<dir_name>/config.json``, relative to the root."""
    @property
    def rank(self) -> int: ...
    @property
    def blocks_per_file(self) -> int: ...
    @property
    def tokens_per_hash(self) -> int: ...
    def block_path(self, key: bytes) -> str:
        """``<dir>_r<rank>/<hhh>/<hh>_g<group>/<hash hex>.bin``, relative to the root."""

# ---- tiers -------------------------------------------------------------------------------------

class JobResult:
    """One finished :class:`FsTier` job."""

    job_id: int
    kind: str  # "store", "load" or "lookup"
    outcomes: list[str]  # per key: ok, skipped_exists, miss, corrupt, dropped, error
    errors: list[str]  # per key: the error text, "" when none
    ok_prefix: int  # leading keys that are "ok" (for loads: the prefix that can be used)

class FsTier:
    """A filesystem tier of vLLM-compatible block files driven by kvtier's io_uring I/O loop.

    ``config`` is one fs tier's keys as a dict or JSON text (``root_dir`` required; vLLM's keys
    and kvtier's own, docs/config.md; ``n_read_threads + n_write_threads`` at most 8192). Dict
    values are JSON types, os.PathLike (as its path), numpy integers, floats and bools;
    ``root_dir`` may be str, bytes or os.PathLike, and is used as ``os.fsencode`` gives it (a
    path that is not UTF-8 works). NaN, infinity, non-str keys and other types raise
    KvtierError(invalid_argument) naming the key, as every broken rule does.

    Jobs return at once; buffers (memoryview, bytearray, numpy arrays, CPU torch tensors;
    C-contiguous, ``row_bytes`` each) are used in place and
    held until the job is returned by :meth:`poll` / :meth:`wait`. Stores write a temp file,
    set the CRC32C xattr (or, where the volume has no user xattrs, append it in a 4096-byte
    trailer: :attr:`checksum_place`, docs/checksums.md) and rename; loads return a block only if
    its size and CRC32C match.

    A buffer that a load not yet polled writes is used by no other job, and one that a store not
    yet polled reads is not loaded into; a load names each buffer once (overlapping views of one
    buffer count as one): KvtierError(invalid_argument) otherwise. Every method may be called from
    any thread; calls racing :meth:`close` complete or raise KvtierError(unavailable). Argument
    errors name the argument and its type, never quote its value.
    """

    def __init__(self, namespace: Namespace, row_bytes: int, config: Mapping[str, Any] | str) -> None: ...
    def submit_store(
        self, keys: Iterable[bytes], rows: Sequence[Buffer], *, block_hashes: Sequence[Sequence[bytes]] | None = None
    ) -> int:
        """``block_hashes``: None, or one list per key of the raw block hashes (bytes, without the
        key's 4-byte group index) of the blocks its file holds, in order, where the namespace puts
        several in a file (``blocks_per_file`` > 1): the file records them (FORMAT.md L197-L202)
        and the KV events (docs/kv-events.md) announce every one, its store and its removal. An
        empty list: the key alone. A list must be exactly the file's blocks (tokens_per_block x
        blocks_per_file / tokens_per_hash of them), each as long as the key's hash, the last one
        the key's, at most 2048 bytes in all; else KvtierError(invalid_argument) naming the key,
        and nothing is stored."""
    def submit_load(self, keys: Iterable[bytes], rows: Sequence[Buffer]) -> int: ...
    def submit_lookup(self, keys: Iterable[bytes]) -> int: ...
    def poll(self) -> list[JobResult]:
        """Jobs finished since the last call (after :meth:`close`: those it collected); never blocks."""
    def wait(self, timeout_ms: int = 1000) -> list[JobResult]:
        """Waits (GIL released) until a job finishes or ``timeout_ms`` passes, then polls."""
    def wait_idle(self, timeout_ms: int = 30000) -> None:
        """Waits (GIL released) until no job runs; KvtierError(timed_out) after ``timeout_ms``."""
    def close(self) -> None:
        """Stops admitting jobs (later submits raise KvtierError(unavailable)), waits for running
        ones, stops the I/O thread and releases every held buffer. Results not yet polled stay
        pollable."""
    def metrics(self) -> dict[str, int | float]:
        """The tier's counters; after :meth:`close`, their last values."""
    def prometheus_text(self, tier_name: str = "fs0") -> str: ...
    def block_path(self, key: bytes) -> str: """The absolute path of a key's block file."""
    @property
    def backend(self) -> str: """"io_uring" or "syscall-threads" (the syscall backend)."""
    @property
    def o_direct(self) -> bool: ...
    @property
    def xattrs_supported(self) -> bool: ...
    @property
    def checksum_place(self) -> str:
        """Where stores put a block's CRC32C: "xattr", "trailer", "off" (FORMAT.md L130), or "seal" for a
        sealed tier (each block's GCM tag in its seal trailer, L163)."""
    def __enter__(self) -> FsTier: ...
    def __exit__(self, *exc: object) -> None: ...

class VllmTier:
    """An :class:`FsTier` driven by an engine's per-step secondary-tier contract over one region
    of rows (``rows``: a writable C-contiguous buffer of whole ``row_bytes`` rows, held until
    :meth:`shutdown`). Lookups answer from a verdict cache (0 miss, 1 hit, 2 retry) and are
    checked in one batch per :meth:`flush_lookups`; jobs carry the engine's ids and name rows
    by slot; every job yields exactly one result from :meth:`poll_finished`. ``config`` is taken
    as :class:`FsTier`'s.

    Refused with KvtierError(invalid_argument), nothing submitted: ``slots`` that are not a 1-D
    sequence or array of integers (no floats, strings, scalars or nested lists), keys and slots of
    different lengths, a slot outside the region, a load naming one slot twice, a slot that a job
    not yet polled loads into (or, for a load, stores from), and a ``job_id`` whose result was not
    polled yet. Every method may be called from any thread; calls racing :meth:`shutdown`
    complete or raise KvtierError(unavailable)."""

    def __init__(self, namespace: Namespace, rows: Buffer, row_bytes: int,
                 config: Mapping[str, Any] | str) -> None: ...
    def lookup(self, key: bytes, request_id: str) -> int: ...
    def flush_lookups(self) -> None: ...
    def finish_request(self, request_id: str) -> None: ...
    def submit_store(self, job_id: int, keys: Iterable[bytes], slots: Sequence[int] | Any) -> None:
        """``slots``: a 1-D sequence of ints or 1-D integer numpy array (or CPU torch tensor)."""
    def submit_load(self, job_id: int, keys: Iterable[bytes], slots: Sequence[int] | Any) -> None: ...
    def poll_finished(self) -> list[tuple[int, bool, bool, list[int], int, float]]:
        """(job_id, is_load, success, indices of the keys that loaded when a load failed in
        part, bytes moved, seconds from submission to completion) per finished job; after
        :meth:`shutdown` too, until every result was taken."""
    def has_pending_work(self) -> bool:
        """True while a job or lookup batch has no result, or results wait to be polled."""
    def drain(self, timeout_ms: int | None = None) -> None:
        """Waits (GIL released) until every job has a result; KvtierError(timed_out) after
        ``timeout_ms`` (0 only checks; None: no limit)."""
    def shutdown(self) -> None:
        """Stops admitting jobs and lookups, drains, stops all I/O into the rows, and releases
        the rows' buffer. Afterwards submits and :meth:`flush_lookups` raise
        KvtierError(unavailable), :meth:`lookup` answers 0, and :meth:`poll_finished`,
        :meth:`has_pending_work`, :meth:`stats` and :meth:`metrics` still answer."""
    def stats(self) -> dict[str, int]: ...
    def take_key_events(self) -> list[tuple[bytes, bool]]:
        """With enable_kv_events: ``(key, removed)`` for each block file the tier stored or removed
        since the last call, in the order the files changed."""
    def metrics(self) -> dict[str, int | float]:
        """The fs tier's counters; after :meth:`shutdown`, their last values."""
    def prometheus_text(self, tier_name: str = "fs0") -> str:
        """KvtierError(unavailable) after :meth:`shutdown`."""
    def block_path(self, key: bytes) -> str:
        """KvtierError(unavailable) after :meth:`shutdown`."""
    @property
    def backend(self) -> str: ...
    @property
    def o_direct(self) -> bool: ...
    @property
    def checksum_place(self) -> str:
        """Where stores put a block's CRC32C: "xattr", "trailer", "off" (FORMAT.md L130), or "seal" for a
        sealed tier (each block's GCM tag in its seal trailer, L163)."""

class SglangTier:
    """kvtier's SGLang HiCache L3 store (include/kvtier/sglang.h), used by :mod:`kvtier.sglang`.

    ``fs_config``: one fs tier's keys, as :class:`FsTier`'s ``config`` (``root_dir`` required).
    ``spec``: the SglangPageSpec fields (``model_name``, ``page_size``, ``mem_layout``, ``dtype``,
    ``k_bytes_per_token``, ``v_bytes_per_token``, ``layer_num``, ``is_mla``, ``tp_size``/``tp_rank``,
    ``pp_size``/``pp_rank``, ``cp_size``/``cp_rank``, optional ``model_path``/``model_revision``).
    ``registered_memory``: (address, nbytes) regions pages will come from (the host pool), for
    io_uring fixed-buffer I/O. A bad key or field raises KvtierError(invalid_argument) naming it.

    A page is a list of (address, nbytes) pieces whose concatenation is the page (``page_bytes``
    in all); the memory must stay valid for the call. The I/O calls release the GIL and may run
    from several threads at once. An I/O failure is that key's False (0 for
    :meth:`exists_prefix`), counted and logged once per kind; arguments that cannot be converted
    raise KvtierError(invalid_argument) (kvtier.sglang catches it: SGLang's threads never see it).
    A store call larger than half of ``store_queue_bytes_max`` is stored as several jobs in turn
    (include/kvtier/sglang.h); one below a page is refused at construction."""

    def __init__(
        self,
        fs_config: Mapping[str, Any] | str,
        spec: Mapping[str, Any],
        registered_memory: Sequence[tuple[int, int]] | None = None,
    ) -> None: ...
    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many keys from the start have a page file (one batched lookup)."""
    def load(self, keys: Sequence[str], pieces: Sequence[Sequence[tuple[int, int]]]) -> list[bool]:
        """Reads each page into its pieces; True only when every byte is there, size and CRC32C checked."""
    def store(self, keys: Sequence[str], pieces: Sequence[Sequence[tuple[int, int]]]) -> list[bool]:
        """Writes each page (temp file, CRC32C xattr, rename); True if stored now or already present."""
    def clear(self) -> int:
        """Removes this namespace's page files on this rank (every root); returns how many."""
    def metrics(self) -> dict[str, int | float]:
        """The fs tier's counters, as :meth:`FsTier.metrics`."""
    def close(self) -> None:
        """Drains, releases the registered memory; later I/O calls answer False / 0."""
    def page_path(self, key: str) -> str:
        """The absolute path of ``key``'s page file (it need not exist)."""
    @property
    def namespace_dir(self) -> str:
        """``<model>_<digest12>``, relative to the root (a sealed store's: its key's, FORMAT.md L162)."""
    @property
    def block_dir(self) -> str:
        """``<namespace_dir>_r<rank>``, relative to the root."""
    @property
    def page_bytes(self) -> int: ...
    @property
    def digest(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def config_json(self) -> str: ...

def sglang_extra_config(extra_config: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """SGLang's extra_config sorted by the library (include/kvtier/sglang.h, SglangConfigKeyKind):
    (the fs tier's keys, every key of the fs config table; the namespace keys ``model_path`` and
    ``model_revision``, None left out). SGLang's own keys are dropped, an unknown key is dropped
    with one warning naming it (``logging.getLogger("kvtier.sglang")``). KvtierError
    (invalid_argument) for a non-dict, a non-str key, a namespace key that is not a non-empty str,
    and a missing ``root_dir``."""

# ---- operators' tools --------------------------------------------------------------------------

# Names on the volume may be any bytes: path-like strings of the ops reports
# are decoded as os.fsdecode does (undecodable bytes as surrogates), so
# os.fsencode(path) gives back the exact bytes.
class ScanProblem:
    path: str  # relative to the root
    detail: str

class NamespaceUsage:
    dir: str
    model: str
    digest: str
    has_config: bool
    engine: str  # config.json's inference_engine: "vllm", "sglang", or "" (unknown)
    tokens_per_hash: int  # vLLM (-1 when unknown or absent, as the other ints)
    blocks_per_file: int  # vLLM
    tp_size: int
    groups: int  # vLLM
    dtype: str
    page_size: int  # SGLang
    mem_layout: str  # SGLang ("" when unknown)
    ranks: list[int]
    blocks: int
    bytes: int
    tmp_files: int
    newest_activity: int
    oldest_activity: int
    newest_counted_activity: int  # newest_activity as gc counts it (FORMAT.md L155): far-future times as 0
    far_future_blocks: int  # blocks dated more than 300 s after this host's clock (FORMAT.md L155)
    live_leases: int
    sealed: bool  # a sealed namespace (docs/sealed.md): config.json holds "kvtier_seal"
    seal_key_id: str  # its key id, 32 hex digits naming the key (never the key); "" when not given

class DuReport:
    namespaces: list[NamespaceUsage]
    total_bytes: int
    total_blocks: int
    files_scanned: int
    unreadable: list[ScanProblem]  # parts left out of the totals
    unreadable_unlisted: int  # more such parts, past 10**4 of a namespace: counted, not listed
    exit_code: int  # 0 complete, 8 parts could not be read

class Finding:
    kind: str
    path: str
    rule: str
    action: str
    detail: str

class FsckReport:
    findings: list[Finding]
    files_scanned: int
    blocks_checked: int
    blocks_verified: int
    verified_without_noatime: int  # blocks read where O_NOATIME was refused
    verify_read_bytes: int  # bytes verify_data read (holes are checked as zeros, unread)
    sealed_checked: int  # blocks of sealed namespaces whose seal record was checked (FORMAT.md L182)
    sealed_verified: int  # of them, those whose tag was checked under a key (L183)
    # Findings past the lists' cap (10^4 of a kind per namespace), by kind:
    # counted, not in findings, not repaired (a later run lists them).
    findings_unlisted: dict[str, int]
    findings_total: int  # len(findings) + sum(findings_unlisted.values())
    exit_code: int  # 0 clean, 1 repaired, 4 problems left (e2fsck's convention)

class Reclaimed:
    path: str
    bytes: int
    reason: str

class GcReport:
    dry_run: bool
    reclaimed: list[Reclaimed]
    bytes_reclaimed: int
    files_scanned: int
    unreadable: list[ScanProblem]
    unreadable_unlisted: int  # more such parts, past 10**4 of a namespace: counted, not listed
    kept: list[ScanProblem]  # namespaces kept because their leases or parts could not be read
    failed: list[FailedRemoval]  # selected but not removed: the bound was not enforced
    files_reclaimed: int  # all of them: the lists above stop at list_max (10000) entries each
    files_failed: int
    dirs_removed: int  # empty shard directories removed (FORMAT.md L108)
    capacity_cutoff: int  # with max_bytes: blocks used at or before this (unix s) were eligible; 0: bound not over
    capacity_tolerance_s: int  # the width of the cut-off's histogram bucket: LRU order is exact beyond it
    far_future_blocks: int  # blocks dated more than 300 s after this host's clock, taken first (FORMAT.md L155)
    capacity_skipped: str  # why the capacity bound was not enforced ("" when it was): the collector lease
    capacity_lease_failed: bool  # the lease could not be taken (not held by another): nobody enforced the bound
    exit_code: int  # 0 complete, 4 removals failed (or capacity_lease_failed), 8 parts could not be read, 12 both

class FailedRemoval:
    path: str
    bytes: int
    reason: str  # why it was selected, as Reclaimed.reason
    errno: int  # why the removal failed (EACCES, EPERM, EROFS, ...)
    detail: str  # os.strerror(errno)

# The three tools below (docs/ops.md): ``jobs`` is 1..256, ``root`` must hold no NUL, durations
# of 2**63 s and more mean "never", negative numbers are refused; each raises KvtierError
# ``invalid_argument`` naming the argument. ``io_timeout_s`` is the deadline of each
# file-system call (None: none): past it the call raises KvtierError ``timed_out`` naming the
# path (a hung mount); its stuck thread stays in the kernel until the mount answers, then stops.

def du(root: str, *, jobs: int = 4, force: bool = False, tmp_grace_s: int = 3600,
       io_timeout_s: float | None = 30.0) -> DuReport:
    """Usage per namespace (``kvtier du``); never follows symlinks."""

def fsck(root: str, *, repair: bool = False, verify_data: bool = False, row_bytes: int = 0, jobs: int = 4,
         force: bool = False, tmp_grace_s: int = 3600, io_timeout_s: float | None = 30.0,
         seal_key_files: Sequence[str] = (), seal_key_group_read: bool = False) -> FsckReport:
    """Findings that cite layout-spec/FORMAT.md rules (``kvtier fsck``); changes nothing without ``repair``.
    With ``verify_data``, the blocks of sealed namespaces whose keys ``seal_key_files`` names (paths of
    key files, docs/sealed.md) are checked tag by tag; other sealed blocks for structure only. A key
    file must be this user's or root's and readable by nobody else (FORMAT.md L174);
    ``seal_key_group_read`` also accepts a group-readable one (a Kubernetes secret with fsGroup)."""

def gc(root: str, *, older_than_s: int | None = None, max_bytes: int | None = None,
       low_water_bytes: int | None = None, keep: Sequence[str] = (), dry_run: bool = False,
       lease_ttl_s: int = 60, jobs: int = 4, force: bool = False, tmp_grace_s: int = 3600,
       io_timeout_s: float | None = 30.0, collector_ttl_s: float = 30.0,
       ignore_lease: bool = False) -> GcReport:
    """Reclaims idle namespaces, capacity, stale temp and corrupt files (``kvtier gc``). With
    ``max_bytes`` (not a dry run, not ``ignore_lease``) it is one of the volume's collectors, as
    ``kvtier gc --max-bytes`` is (FORMAT.md L124): it takes ``<root>/.kvtier/gc.lease`` for its run
    (``collector_ttl_s``: the TTL every collector of the volume uses) and gives it up before
    returning. Beside a live collector (``kvtier gc --watch``, another gc) it removes nothing for
    capacity and ``capacity_skipped`` says why; when it cannot take the lease at all,
    ``capacity_lease_failed`` is set too and ``exit_code`` has 4."""

class Collector:
    """The volume's watch collector (``kvtier gc --watch``, docs/ops.md) on threads of its own, as
    a context manager (``start()`` on enter, ``stop()`` on exit). Every ``interval_s``, and sooner
    when a root's free space falls below ``min_free`` (bytes as an int, or a share such as
    ``"10%"``; freed up to ``min_free_target``, default ``min_free`` + a quarter), the holder of the
    volume's collector lease runs one gc pass with these bounds; other collectors of the volume only
    watch the lease (FORMAT.md L120-L124). Its lines go to kvtier's log (:func:`set_log_sink`).
    KvtierError(invalid_argument) for a bad argument or a directory that does not look like a root
    (without ``force``)."""

    def __init__(self, root: str, *, max_bytes: int | None = None, low_water_bytes: int | None = None,
                 older_than_s: int | None = None, keep: Sequence[str] = (), min_free: int | str | None = None,
                 min_free_target: int | str | None = None, interval_s: float = 60.0,
                 check_interval_s: float = 2.0, collector_ttl_s: float = 30.0, metrics_file: str = "",
                 jobs: int = 4, force: bool = False, tmp_grace_s: int = 3600,
                 io_timeout_s: float | None = 30.0) -> None: ...
    def start(self) -> None:
        """Starts the loop (once; KvtierError(invalid_argument) again)."""
    def stop(self) -> None:
        """Stops the loop and gives the lease up; KvtierError(timed_out) when the loop had ended on a
        hung mount, KvtierError(unavailable) when something other than a live collector kept it
        from collecting (a non-lease it cannot move, FORMAT.md L153)."""
    def status(self) -> dict[str, bool | int | float]:
        """``running``, ``holding`` (the lease), ``passes``, ``passes_min_free``, ``pass_errors``,
        ``passes_stopped``, ``files_reclaimed``, ``bytes_reclaimed``, ``failed_removals``,
        ``lease_acquisitions``, ``last_pass_s``, ``last_pass_end_unix``."""
    def metrics_text(self) -> str:
        """The Prometheus text of ``kvtier gc --watch --metrics-file`` (docs/metrics.md)."""
    def __enter__(self) -> Collector: ...
    def __exit__(self, *args: object) -> None: ...

def fs_metric_fields() -> tuple[dict[str, str | float | None], ...]:
    """The fields of :meth:`FsTier.metrics` in declaration order, one dict each: ``name`` (the
    metrics() key), ``kind`` ("counter" or "gauge"), ``merge`` over several roots ("sum", "max"
    or "min"), ``unit``, ``prometheus`` (its family in :meth:`FsTier.prometheus_text`, None when
    not exported), ``scale`` (exported value = field x scale), ``vllm`` (its name in vLLM's stats,
    None when not reported) and ``help``. From the library's table
    (``include/kvtier/fs_tier_metrics.h``)."""

def config_check(config_json: str, *, gpu_block_size: int = 16) -> str:
    """Validates a ``kv_connector_extra_config`` JSON and returns the effective config (defaults
    filled in); KvtierError(invalid_argument) naming the key otherwise."""

# ---- log ---------------------------------------------------------------------------------------

def set_log_sink(sink: Callable[[str, str], object] | None) -> None:
    """Sends kvtier's log messages (a degraded mode such as buffered I/O or no CRC xattrs, a
    retried failure) to ``sink(level, message)`` instead of stderr; ``level`` is "info",
    "warning" or "error". ``sink`` is called from whichever thread logs, kvtier's own I/O and
    progress threads included, with the GIL taken for it; an exception it raises goes to
    ``sys.unraisablehook``. None restores stderr. Once this returns the previous sink is never
    called again. At interpreter exit stderr is restored."""

def set_min_log_level(level: str) -> None:
    """Drops kvtier log messages below ``level`` ("info", "warning" or "error"; default "info")."""
