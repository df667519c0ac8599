"""Shared fixtures of kvtier's Python tests (pytest, run by ctest and scripts/test).

* ``kvtier_bin``: the ``kvtier`` CLI built beside the package ($KVTIER_BIN, else build/bin/kvtier).
* ``vllm_tree``: an importable tree of vLLM's own tiering modules, assembled once per session
  from ``../shared/vllm`` (vLLM's code, verbatim, for conformance tests; never part of kvtier).
  Tests that need it skip, with one line saying why, where ``../shared/vllm`` is absent.
  $KVTIER_SHARED_DIR overrides where ``shared/`` is looked for.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    return Path(os.environ.get("KVTIER_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def kvtier_bin() -> str:
    path = Path(os.environ.get("KVTIER_BIN", REPO / "build" / "bin" / "kvtier"))
    if not path.is_file():
        pytest.skip(f"the kvtier CLI is not built at {path} (set KVTIER_BIN)")
    return str(path)


@pytest.fixture(scope="session")
def vllm_tree(tmp_path_factory) -> Path:
    """Assembles ../shared/vllm into a temporary tree and puts it first on sys.path."""
    assemble = shared_dir() / "vllm" / "assemble.sh"
    if not assemble.is_file():
        pytest.skip(f"vLLM conformance tests need {assemble.parent} (vLLM's tiering modules); absent here")
    dest = tmp_path_factory.mktemp("vllm")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(assemble), str(dest)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{assemble} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    sys.path.insert(0, str(dest))
    return dest
