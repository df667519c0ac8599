"""Importable trees of vLLM's and SGLang's own code, assembled from ../shared/<kind> by its
assemble.sh (never part of kvtier), for the conformance fixtures (conftest.vllm_tree,
sglang_support.harness_tree).

Each pytest process (one per test module under ctest) used to assemble its own tree, which costs
seconds (vLLM's compiles an extension, both import torch to probe for it). A tree is therefore
assembled once per content of ../shared/<kind> and interpreter, into a cache directory that the
processes share ($KVTIER_TEST_CACHE, else kvtier-tests-<uid> in the temporary directory, owned by
this user and closed to others, else no cache): a new tree is built aside and renamed into place
whole, so concurrent processes never see half a tree, and a change to any file of
../shared/<kind>, or another interpreter, names another tree.
"""

import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path


def _digest(src: Path) -> str:
    """What the tree depends on: every file of `src` (path and bytes), the interpreter, torch."""
    h = hashlib.sha256()
    for part in (sys.executable, sys.version, str(importlib.util.find_spec("torch") is not None)):
        h.update(part.encode() + b"\0")
    for f in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(src)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:24]


def _cache_dir():
    """The shared cache directory, or None where it is not this user's alone."""
    path = Path(os.environ.get("KVTIER_TEST_CACHE") or Path(tempfile.gettempdir()) / f"kvtier-tests-{os.getuid()}")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
    return path if mine else None


def _assemble(script: Path, dest: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(script), str(dest)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def assembled(src: Path, tmp_path_factory=None) -> Path:
    """The tree `src`/assemble.sh builds (src: ../shared/vllm or ../shared/sglang), from the cache;
    without one, built afresh in a directory of `tmp_path_factory` (pytest's) where given."""
    cache = _cache_dir()
    if cache is None:
        if tmp_path_factory is not None:
            dest = tmp_path_factory.mktemp(src.name)
        else:
            dest = Path(tempfile.mkdtemp(prefix=f"kvtier-{src.name}-"))
        _assemble(src / "assemble.sh", dest)
        return dest
    dest = cache / f"{src.name}-{_digest(src)}"
    if dest.is_dir():
        return dest
    work = Path(tempfile.mkdtemp(prefix=f".{src.name}-", dir=cache))
    try:
        _assemble(src / "assemble.sh", work / "tree")
        try:
            os.rename(work / "tree", dest)
        except OSError:
            if not dest.is_dir():  # not another process's tree, published first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
