"""kvtier.sglang passes SGLang's conformance selftest (issue 23 item 5), on both I/O paths.

Runs ../shared/sglang/selftest_backend.py (SGLang's real StorageBackendFactory, a mock host pool
that is SGLang's statement for statement, the controller's call pattern) against
``kvtier.sglang.KvtierHiCacheStorage`` loaded by the ``dynamic`` backend, once with the zero-copy
path (``--path v1``: batch_get_v1/batch_set_v1) and once with the generic tensor path
(``--path generic``), each in a fresh interpreter. Every counted check (c01-c16) must PASS, none
may FAIL or be SKIPped (a layout refused at attach would be a SKIP), and the summary must say all
of them pass; on failure the whole output is shown. Skips with one line where ../shared/sglang or
torch is absent.
"""

import json
import os
import re
import subprocess
import sys

import pytest

import sglang_support as sg

if sg.skip_reason():
    pytest.skip(sg.skip_reason(), allow_module_level=True)

CHECKS = [f"c{i:02d}" for i in range(1, 17)]


@pytest.mark.parametrize("path", ["v1", "generic"])
def test_selftest_passes_every_check(path, tmp_path_factory, tmp_path):
    tree = sg.harness_tree(tmp_path_factory)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), sg.kvtier_python_dir()]))
    argv = [sys.executable, str(sg.shared_sglang() / "selftest_backend.py"), "--backend", "dynamic",
            "--module-path", "kvtier.sglang", "--class-name", "KvtierHiCacheStorage",
            "--extra-config", json.dumps({"interface_v1": 1, "root_dir": "{root}"}),
            "--path", path, "--root", str(tmp_path / "selftest")]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    status = {m.group(2): m.group(1) for m in re.finditer(r"^(PASS|FAIL|SKIP|XFAIL) (c\d\d)", out, re.M)}
    summary = re.search(r"^selftest: (\d+)/(\d+) checks pass", out, re.M)
    not_passed = {c: status.get(c, "missing") for c in CHECKS if status.get(c) != "PASS"}
    assert not not_passed and summary and summary.group(1) == summary.group(2) == str(len(CHECKS)) \
        and proc.returncode == 0, f"--path {path}: checks not passing {not_passed}, exit {proc.returncode}\n{out}"
