"""Helpers of the kvtier.sglang tests: SGLang's own storage code (sgl-project/sglang
``python/sglang/srt/mem_cache/`` at commit d315eb725044, verbatim in ../shared/sglang) and the
kit's harness, assembled into a temporary tree, never part of kvtier, and backends built the way SGLang's
controller builds them.

``skip_reason()`` is the one line a test module skips with where ../shared/sglang or torch is
absent (``skip_module_unless_ready()`` skips the calling module with it);
``harness_tree()`` assembles the tree (once per content of ../shared/sglang, in a cache the test
processes share: shared_trees.py) and puts it first on sys.path, and the autouse fixture
``sglang_tree`` does so for every test of a module that imports it.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import shared_trees

REPO = Path(__file__).resolve().parents[2]
_TREE = None


def shared_sglang() -> Path:
    return Path(os.environ.get("KVTIER_SHARED_DIR", REPO.parent / "shared")) / "sglang"


def skip_reason():
    """Why the SGLang tests cannot run here (one line), or None."""
    if not (shared_sglang() / "assemble.sh").is_file():
        return f"kvtier.sglang tests need {shared_sglang()} (SGLang's storage code); absent here"
    if importlib.util.find_spec("torch") is None:
        return "kvtier.sglang tests need torch (Debian: apt-get install python3-torch; scripts/bootstrap does)"
    return None


def skip_module_unless_ready():
    """Skips the calling test module, in one line, where the SGLang tests cannot run."""
    if skip_reason():
        pytest.skip(skip_reason(), allow_module_level=True)


def harness_tree(tmp_path_factory=None) -> Path:
    """../shared/sglang/assemble.sh's tree (shared_trees: once per content, cached across
    processes), first on sys.path."""
    global _TREE
    if _TREE is None:
        _TREE = shared_trees.assembled(shared_sglang(), tmp_path_factory)
        sys.path.insert(0, str(_TREE))
    return _TREE


@pytest.fixture(autouse=True)
def sglang_tree(tmp_path_factory):
    """The assembled tree, first on sys.path, for each test of a module that imports this fixture."""
    return harness_tree(tmp_path_factory)


def kvtier_python_dir() -> str:
    """Where `import kvtier` comes from in this interpreter (build/python under ctest)."""
    import kvtier

    return str(Path(kvtier.__file__).resolve().parent.parent)


def storage_config(extra, *, model="kvtier-test/model", layout="page_first", is_mla=False, tp_rank=0, tp_size=1,
                   metrics=False):
    """HiCacheStorageConfig as SGLang's controller makes it (the harness's own function)."""
    from hicache_harness.controller import make_storage_config

    return make_storage_config(model_name=model, layout=layout, is_mla=is_mla, extra_config=extra,
                               tp_rank=tp_rank, tp_size=tp_size, enable_storage_metrics=metrics)


def pool(kind="mha", layout="page_first", pages=16, page_size=16, seed=0, **geometry):
    import torch
    from hicache_harness.mock_host_pool import make_pool

    dtype = geometry.pop("dtype", torch.bfloat16)
    g = dict(layers=4, heads=2, head_dim=64) if kind == "mha" else dict(layers=4, kv_cache_dim=576)
    g.update(geometry)
    return make_pool(kind, layout, page_size, pages, dtype=dtype, seed=seed, **g)


def extra_config(root, **more):
    """kvtier's extra_config as SGLang's flags give it (docs/sglang.md), with `more` keys."""
    return {"backend_name": "kvtier", "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
            "interface_v1": 1, "root_dir": str(root), **more}


def backend(extra, p, **cfg):
    """A KvtierHiCacheStorage attached as SGLang attaches one (constructor, then the pool)."""
    from kvtier.sglang import KvtierHiCacheStorage

    b = KvtierHiCacheStorage(storage_config(dict(extra), layout=p.layout, **cfg), {})
    b.register_mem_pool_host(p)
    return b


def keys(n, tag):
    """n SGLang page keys (64 hex) unique to tag."""
    import hashlib

    return [hashlib.sha256(f"{tag}/{i}".encode()).hexdigest() for i in range(n)]


def fill(p, ks, idx, salt=0):
    """Distinct bytes per key (and salt) into the pages at idx."""
    import torch

    for i, k in enumerate(ks):
        g = torch.Generator().manual_seed(int(k[:12], 16) ^ salt)
        p.write_page_u8(idx[i * p.page_size], torch.randint(0, 256, (p.page_bytes,), dtype=torch.uint8, generator=g))


def expected(p, k, salt=0):
    import torch

    g = torch.Generator().manual_seed(int(k[:12], 16) ^ salt)
    return torch.randint(0, 256, (p.page_bytes,), dtype=torch.uint8, generator=g)


SELFTEST_CHECKS = [f"c{i:02d}" for i in range(1, 17)]


def run_selftest(path, tmp_path_factory, tmp_path):
    """selftest_backend.py on kvtier.sglang with --path `path` in a fresh interpreter; asserts that
    every counted check (c01-c16) PASSes (none FAIL, SKIP or missing) and the summary agrees."""
    import json
    import re

    tree = harness_tree(tmp_path_factory)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), kvtier_python_dir()]))
    argv = [sys.executable, str(shared_sglang() / "selftest_backend.py"), "--backend", "dynamic",
            "--module-path", "kvtier.sglang", "--class-name", "KvtierHiCacheStorage",
            "--extra-config", json.dumps({"interface_v1": 1, "root_dir": "{root}"}),
            "--path", path, "--root", str(tmp_path / "selftest")]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    status = {m.group(2): m.group(1) for m in re.finditer(r"^(PASS|FAIL|SKIP|XFAIL) (c\d\d)", out, re.M)}
    summary = re.search(r"^selftest: (\d+)/(\d+) checks pass", out, re.M)
    not_passed = {c: status.get(c, "missing") for c in SELFTEST_CHECKS if status.get(c) != "PASS"}
    assert not not_passed and summary and summary.group(1) == summary.group(2) == str(len(SELFTEST_CHECKS)) \
        and proc.returncode == 0, f"--path {path}: checks not passing {not_passed}, exit {proc.returncode}\n{out}"


# Every operation group of kvtier_faultfs a hang rule can name (tests/support/faultfs.py).
HANG_OPS = ("lookup", "open", "read", "write", "xattr", "rename", "unlink", "mkdir", "readdir", "statfs",
            "utimens", "truncate", "chmod", "symlink", "readlink")


def faultfs_mount(tmp_path, tmp_path_factory):
    """A pytest fixture body: the SGLang harness tree, then a kvtier_faultfs mount over
    tmp_path/backing at tmp_path/mnt (skips where FUSE is unavailable). Use as
    ``mount = pytest.fixture(name="mount")(sg.faultfs_mount)``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
    import pytest
    from faultfs import FaultFs

    harness_tree(tmp_path_factory)
    why = FaultFs.unavailable()
    if why:
        pytest.skip(why)
    with FaultFs(tmp_path / "backing", tmp_path / "mnt") as fs:
        yield fs
