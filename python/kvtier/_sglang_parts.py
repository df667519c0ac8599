"""Parts of kvtier.sglang that need neither SGLang nor a store: the refusal kvtier.sglang raises
at attach, host layouts and dtype names, failure counts, and the checks of what SGLang's threads
hand the backend (key lists, host memory ranges). Which extra_config key goes where is the
library's (``_kvtier.sglang_extra_config``, from the fs tier's one key table)."""

from __future__ import annotations

import logging
import operator
import threading
from typing import Any, List, Optional

import torch

import kvtier

logger = logging.getLogger("kvtier.sglang")

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
