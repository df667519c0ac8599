"""Shared fixtures of kvtier's Python tests (pytest, run by ctest and scripts/test).

* ``kvtier_bin``: the ``kvtier`` CLI built beside the package ($KVTIER_BIN, else build/bin/kvtier).
* ``vllm_tree``: an importable tree of vLLM's own tiering modules, assembled from
  ``../shared/vllm`` (vLLM's code, verbatim from vllm-project/vllm ``vllm/v1/kv_offload/`` at
  commit 7cfb97e33791, for conformance tests; never part of kvtier) once
  per content of it, in a cache the test processes share (shared_trees.py).
  Tests that need it skip, with one line saying why, where ``../shared/vllm`` is absent.
  $KVTIER_SHARED_DIR overrides where ``shared/`` is looked for.
* ``event_sub``: a ZeroMQ SUB socket (python3-zmq) bound on a free loopback port, subscribed to
  everything, and its endpoint, for a tier to connect its KV events to (skips without python3-zmq).
"""

import os
import socket
import sys
from pathlib import Path

import pytest

import shared_trees

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    return Path(os.environ.get("KVTIER_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def kvtier_bin() -> str:
    path = Path(os.environ.get("KVTIER_BIN", REPO / "build" / "bin" / "kvtier"))
    if not path.is_file():
        pytest.skip(f"the kvtier CLI is not built at {path} (set KVTIER_BIN)")
    return str(path)


@pytest.fixture
def event_sub():
    zmq = pytest.importorskip("zmq", reason="python3-zmq is needed to subscribe to kvtier's KV events")
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s.bind(f"tcp://127.0.0.1:{port}")
    yield s, f"tcp://127.0.0.1:{port}"
    s.close(0)
    ctx.term()


@pytest.fixture(scope="session")
def vllm_tree(tmp_path_factory) -> Path:
    """../shared/vllm assembled (shared_trees: once per content, cached across processes), first on sys.path."""
    assemble = shared_dir() / "vllm" / "assemble.sh"
    if not assemble.is_file():
        pytest.skip(f"vLLM conformance tests need {assemble.parent} (vLLM's tiering modules); absent here")
    try:
        dest = shared_trees.assembled(assemble.parent, tmp_path_factory)
    except RuntimeError as e:
        pytest.fail(str(e))
    sys.path.insert(0, str(dest))
    return dest
