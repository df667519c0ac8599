"""Parts of kvtier.sglang that need neither SGLang nor a store: the extra_config keys and their
split, the refusal kvtier.sglang raises at attach, dtype names, failure counts, and the checks of
what SGLang's threads hand the backend (key lists, host memory ranges)."""

from __future__ import annotations

import logging
import operator
import threading
from typing import Any, List, Optional

import torch

import kvtier

logger = logging.getLogger("kvtier.sglang")

# kvtier's fs-tier keys (docs/config.md; the C++ parser's table, less `type` and `module_path`,
# which are vLLM's). They go to the fs config, whose parser checks them and names a bad one.
FS_KEYS = frozenset({
    "root_dir", "path_sharding", "n_read_threads", "n_write_threads", "enable_kv_events", "locality",
    "backpressure", "io_timeout_ms", "stores_while_loading_max", "durability", "store_queue_bytes_max",
    "io_backend", "o_direct", "inline_metadata", "bounce_loads", "checksum_blocks", "checksum_place",
    "startup_scan", "seal_key_file", "seal_key_fd", "seal_read_key_files", "seal_key_group_read",
    "kv_events_config",
})
# Keys that name the namespace (FORMAT.md's SGLang fields), beside what SGLang's config gives.
SPEC_KEYS = frozenset({"model_path", "model_revision"})
# Keys SGLang itself reads from --hicache-storage-backend-extra-config (the factory, the
# controller, HiRadixCache; some are removed before a backend sees them, some are not, and that
# changes between SGLang versions).
SGLANG_KEYS = frozenset({
    "backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold",
    "prefetch_timeout_base", "prefetch_timeout_per_ki_token", "prefetch_timeout_max",
    "hicache_storage_pass_prefix_keys", "tp_lcm_size", "use_shared_cp_storage",
})
MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
# dtypes of SGLang's host pools whose bytes kvtier stores as they are (fp8 caches are often uint8
# in host memory). Names absent from this torch (fp8 on torch 1.13) are skipped.
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
          "float8_e5m2fnuz", "uint8", "int8")


def _refuse(key: str, rule: str) -> None:
    """Raises kvtier.KvtierError(invalid_argument) naming `key`, as kvtier's C++ parser does."""
    message = f"config key '{key}': {rule}"
    err = kvtier.KvtierError(f"invalid_argument: {message}")
    err.code, err.errno, err.message = "invalid_argument", 0, message
    raise err


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    if name not in DTYPES or getattr(torch, name, None) is None:
        _refuse("dtype", f"the host pool's dtype {dtype} is not one kvtier stores (one of: "
                + ", ".join(d for d in DTYPES if getattr(torch, d, None) is not None) + ")")
    return name


def _element_size(dtype: torch.dtype) -> int:
    # torch.dtype.itemsize exists only from torch 2.1 (Debian 12 ships 1.13).
    return torch.empty((), dtype=dtype).element_size()


def _split_extra_config(extra: Any) -> tuple[dict, dict]:
    """extra_config -> (fs config, namespace keys). SGLang's README asks a backend to accept keys
    it does not know (SGLang adds keys between versions, and some reach every backend), so an
    unknown key is one warning naming it, not an error."""
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        _refuse("extra_config", f"expected a dict (SGLang's parsed JSON), got {type(extra).__name__}")
    fs, spec = {}, {}
    for key, value in extra.items():
        if not isinstance(key, str):
            _refuse("extra_config", f"keys must be strings, got a key of type {type(key).__name__}")
        if key in FS_KEYS:
            fs[key] = value
        elif key in SPEC_KEYS:
            if value is not None and (not isinstance(value, str) or not value):
                _refuse(key, f"expected a non-empty string, got {value!r}")
            if value is not None:
                spec[key] = value
        elif key not in SGLANG_KEYS:
            logger.warning("kvtier.sglang: extra_config key '%s' is unknown to kvtier and ignored", key)
    if "root_dir" not in fs:
        _refuse("root_dir", "required: the directory (or mount) pages are stored under")
    return fs, spec


class _Failures:
    """Failure counts by kind, each kind logged once (SGLang calls per batch; a sick volume would
    otherwise log per page)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def note(self, kind: str, exc: BaseException | None = None, detail: str = "") -> None:
        with self._lock:
            n = self.counts.get(kind, 0) + 1
            self.counts[kind] = n
        if n == 1:
            what = f"{type(exc).__name__}: {exc}" if exc is not None else detail
            logger.warning("kvtier.sglang: %s failed (%s); answered as a miss, counted, logged only once", kind, what)


def _key_list(keys: Any) -> Optional[list]:
    """The keys of a batch call as a list, or None for an object that is not a list of keys (None,
    a str, anything without a length or whose iteration disagrees with it)."""
    if isinstance(keys, (str, bytes)):
        return None
    try:
        n = len(keys)
        out = list(keys)
    except Exception:  # noqa: BLE001 - hostile objects raise anything
        return None
    return out if len(out) == n else None


def _memory_spans(pool: Any) -> List[tuple]:
    """(start, end) of every host buffer of the pool that pages may come from: ``kv_buffer`` (one
    tensor, or a (K, V) pair as SGLang's asymmetric pool has), ``k_buffer``, ``v_buffer``; only
    contiguous CPU tensors, whose bytes are exactly [data_ptr, data_ptr + nbytes)."""
    found = []
    kv = getattr(pool, "kv_buffer", None)
    found.extend(kv if isinstance(kv, (tuple, list)) else [kv])
    found.extend([getattr(pool, "k_buffer", None), getattr(pool, "v_buffer", None)])
    spans = []
    for t in found:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_contiguous() and t.numel() > 0:
            span = (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
            if span not in spans:
                spans.append(span)
    return spans


def _piece_inside(piece: Any, spans: List[tuple]) -> Optional[tuple]:
    """(address, bytes) as two ints when the piece lies wholly inside one of the spans, else None
    (bools, floats and non-positive sizes are no piece; numpy integers are)."""
    try:
        addr, n = piece
        if isinstance(addr, bool) or isinstance(n, bool):
            return None
        addr, n = operator.index(addr), operator.index(n)
    except (TypeError, ValueError):
        return None
    if n <= 0 or not any(lo <= addr and addr + n <= hi for lo, hi in spans):
        return None
    return addr, n
