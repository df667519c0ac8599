"""SGLang's front end publishes its pages' KV events by their page keys (issue 41, docs/kv-events.md):
a store announces each page as BlockStored with the page key as a msgpack str (a key that is not
64 lowercase hex characters by the SHA-256 hex its file is named after, FORMAT.md L106) and
block_size = the page's tokens; a page already there is not announced again; clear() (SGLang's
HiCache clear) announces every page it removed as BlockRemoved, so a router drops the namespace.
Method: kvtier's SglangTier (the binding kvtier.sglang drives) on a temp root, a real SUB socket
(python3-zmq) bound by the test, payloads decoded with python3-msgpack in vLLM's layout.
"""

import ctypes
import hashlib
import time

import pytest

zmq = pytest.importorskip("zmq", reason="python3-zmq is needed to subscribe to kvtier's KV events")
msgpack = pytest.importorskip("msgpack", reason="python3-msgpack is needed to decode kvtier's KV events")

from kvtier import _kvtier  # noqa: E402

PAGE_TOKENS, LAYERS, KV_BYTES = 4, 2, 1024
PAGE = PAGE_TOKENS * LAYERS * 2 * KV_BYTES
SPEC = {"model_name": "kvtier-test/sglang-events", "page_size": PAGE_TOKENS, "mem_layout": "page_first",
        "dtype": "bfloat16", "k_bytes_per_token": KV_BYTES, "v_bytes_per_token": KV_BYTES, "layer_num": LAYERS,
        "is_mla": False, "tp_size": 1, "tp_rank": 0}


@pytest.fixture
def sub(event_sub):
    return event_sub


def receive(s, n, timeout_s=20):
    """Events (tag, hashes, block_size or None) until n hashes arrived or the time is up."""
    got, deadline = [], time.monotonic() + timeout_s
    while sum(len(h) for _, h, _ in got) < n and time.monotonic() < deadline:
        if s.poll(100):
            _, _, payload = s.recv_multipart()
            for e in msgpack.unpackb(payload, raw=False)[1]:
                got.append((e[0], e[1], e[4] if e[0] == "BlockStored" else None))
    return got


def test_pages_are_announced_by_key_and_clear_removes_them(tmp_path, sub):
    s, endpoint = sub
    config = {"root_dir": str(tmp_path), "kv_events_config": {"enable_kv_cache_events": True, "endpoint": endpoint}}
    store = _kvtier.SglangTier(config, SPEC)
    keys = [hashlib.sha256(f"page{i}".encode()).hexdigest() for i in range(4)] + ["not-a-hex-key"]
    names = keys[:4] + [hashlib.sha256(b"not-a-hex-key").hexdigest()]
    buf = ctypes.create_string_buffer(PAGE * len(keys))
    pieces = [[(ctypes.addressof(buf) + i * PAGE, PAGE)] for i in range(len(keys))]
    s.poll(50)  # hands the tier's publisher this socket's subscription once it connects
    assert store.store(keys, pieces) == [True] * len(keys)
    stored = receive(s, len(keys))
    assert all(tag == "BlockStored" and size == PAGE_TOKENS for tag, _, size in stored), stored
    assert sorted(h for _, hs, _ in stored for h in hs) == sorted(names)
    assert store.store(keys[:2], pieces[:2]) == [True, True]  # already there: not announced again
    assert receive(s, 1, timeout_s=0.5) == []
    assert store.clear() == len(keys)
    removed = receive(s, len(keys))
    assert all(tag == "BlockRemoved" for tag, _, _ in removed), removed
    assert sorted(h for _, hs, _ in removed for h in hs) == sorted(names)
    store.close()
