"""Proves that kvtier.du / fsck / gc refuse or survive a careless caller's arguments.

Method: each test builds a small root with a real FsTier, then calls the operators' tools with the
argument a careless caller might pass: ``jobs`` out of the CLI's range, durations of 2**63 and
more (which must mean "never", not wrap negative and invert gc's decisions), a root or ``keep``
name with an embedded NUL (which must be refused, not cut short to act on another directory), and
blocks gc selects but cannot delete (made immutable with ``chattr +i``, so even root gets EPERM),
which must be reported with a failing exit code, not dropped from the report. Refusals must be KvtierError(invalid_argument) naming the
argument; nothing may be deleted that the caller did not ask for.
"""

import errno
import json
import os
import shutil
import subprocess
import time

import pytest

import kvtier

ROW = 8192


def keys_for(n, salt="misuse"):
    return kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * n)), seed=salt))


@pytest.fixture
def tier(tmp_path):
    ns = kvtier.Namespace("kvtier-test/misuse", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
    t = kvtier.FsTier(ns, ROW, {"root_dir": str(tmp_path)})
    yield t
    t.close()


def store(tier, n):
    keys = keys_for(n)
    job = tier.submit_store(keys, [bytes(ROW)] * n)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for r in tier.wait(1000):
            if r.job_id == job:
                assert r.outcomes == ["ok"] * n
                return [tier.block_path(k) for k in keys]
    raise AssertionError("store did not finish")


def blocks_left(root):
    return kvtier.du(str(root)).total_blocks


def refused(call, name):
    with pytest.raises(kvtier.KvtierError) as e:
        call()
    assert e.value.code == "invalid_argument", e.value
    assert name in e.value.message, e.value.message


# ---- jobs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("jobs", [0, -1, 257, 100000, 2**40])
@pytest.mark.parametrize("tool", ["du", "fsck", "gc"])
def test_jobs_out_of_range_is_refused(tmp_path, tier, tool, jobs):
    store(tier, 1)
    refused(lambda: getattr(kvtier, tool)(str(tmp_path), jobs=jobs), "jobs")
    assert blocks_left(tmp_path) == 1


def test_jobs_at_the_cli_cap_is_accepted(tmp_path, tier):
    store(tier, 2)
    assert kvtier.du(str(tmp_path), jobs=256).total_blocks == 2
    assert kvtier.fsck(str(tmp_path), jobs=1, verify_data=True).exit_code == 0


# ---- durations of 2**63 and more mean "never" ------------------------------------------------

def test_huge_lease_ttl_keeps_an_open_namespace(tmp_path, tier):
    paths = store(tier, 2)
    old = time.time() - 30 * 86400
    for p in paths:
        os.utime(p, (old, old))
    for ttl in (2**63, 2**64 - 1, 2**64, 10**30):
        gc = kvtier.gc(str(tmp_path), older_than_s=0, lease_ttl_s=ttl)
        assert gc.reclaimed == [], f"lease_ttl_s={ttl} deleted a namespace whose tier is open"
    assert blocks_left(tmp_path) == 2


def test_huge_older_than_reclaims_nothing(tmp_path, tier):
    paths = store(tier, 2)
    tier.close()  # no live lease: only the age decides
    old = time.time() - 30 * 86400
    ns_dir = tmp_path / kvtier.du(str(tmp_path)).namespaces[0].dir
    for p in paths + [str(x) for x in (ns_dir / ".kvtier" / "leases").iterdir()]:
        os.utime(p, (old, old))
    for older in (2**63, 2**64 - 1, 2**70):
        assert kvtier.gc(str(tmp_path), older_than_s=older).reclaimed == [], older
    assert blocks_left(tmp_path) == 2
    assert len(kvtier.gc(str(tmp_path), older_than_s=86400).reclaimed) >= 2, "an ordinary bound still reclaims"


def test_huge_tmp_grace_keeps_temp_files(tmp_path, tier):
    store(tier, 1)
    ns_dir = tmp_path / kvtier.du(str(tmp_path)).namespaces[0].dir
    tmp = ns_dir / "config.json_7.tmp"
    tmp.write_text("{}")
    for grace in (2**63, 2**64 - 1, 2**80):
        assert kvtier.gc(str(tmp_path), tmp_grace_s=grace).reclaimed == [], grace
        assert [f.kind for f in kvtier.fsck(str(tmp_path), repair=True, tmp_grace_s=grace).findings] == []
    assert tmp.exists()


@pytest.mark.parametrize("arg", ["older_than_s", "lease_ttl_s", "tmp_grace_s", "max_bytes", "low_water_bytes"])
def test_negative_gc_numbers_are_refused(tmp_path, tier, arg):
    store(tier, 1)
    extra = {"max_bytes": 1 << 40} if arg == "low_water_bytes" else {}
    refused(lambda: kvtier.gc(str(tmp_path), **{arg: -1}, **extra), arg)
    assert blocks_left(tmp_path) == 1


def test_negative_fsck_numbers_are_refused(tmp_path, tier):
    store(tier, 1)
    refused(lambda: kvtier.fsck(str(tmp_path), row_bytes=-1), "row_bytes")
    refused(lambda: kvtier.fsck(str(tmp_path), tmp_grace_s=-5), "tmp_grace_s")
    refused(lambda: kvtier.du(str(tmp_path), tmp_grace_s=-5), "tmp_grace_s")


# ---- NUL in a root or a keep name ------------------------------------------------------------

@pytest.mark.parametrize("tool", ["du", "fsck", "gc"])
def test_root_with_nul_is_refused(tmp_path, tier, tool):
    store(tier, 2)
    other = str(tmp_path) + "\0/some/other/root"
    kwargs = {"max_bytes": 0} if tool == "gc" else {"repair": True} if tool == "fsck" else {}
    refused(lambda: getattr(kvtier, tool)(other, **kwargs), "root")
    refused(lambda: getattr(kvtier, tool)(str(tmp_path) + "," + other, **kwargs), "root")
    assert blocks_left(tmp_path) == 2, "nothing acted on the root before the NUL"


def test_keep_names_that_cannot_match_are_refused(tmp_path, tier):
    store(tier, 2)
    ns_name = kvtier.du(str(tmp_path)).namespaces[0].dir
    for bad in (ns_name + "\0x", str(tmp_path / ns_name), "", ".."):
        refused(lambda: kvtier.gc(str(tmp_path), max_bytes=0, keep=[bad]), "keep")
    assert blocks_left(tmp_path) == 2
    # A capacity bound takes the collector lease: a short TTL keeps its settle short.
    assert kvtier.gc(str(tmp_path), max_bytes=0, keep=[ns_name], collector_ttl_s=0.3).reclaimed == []


# ---- removals that fail are reported, and the exit code says so -------------------------------

def set_immutable(path, on):
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


@pytest.fixture
def immutable_block(tmp_path, tier):
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("needs chattr and root to make a block undeletable")
    paths = store(tier, 3)
    if not set_immutable(paths[0], True):
        pytest.skip(f"chattr +i is not supported on {tmp_path}")
    yield paths[0]
    set_immutable(paths[0], False)


def test_gc_lists_failed_removals_and_exits_4(tmp_path, immutable_block):
    gc = kvtier.gc(str(tmp_path), max_bytes=0, collector_ttl_s=0.3)  # the lease's settle kept short
    assert os.path.exists(immutable_block)
    assert [os.path.join(str(tmp_path), f.path) for f in gc.failed] == [immutable_block]
    assert gc.failed[0].errno == errno.EPERM and gc.failed[0].reason == "capacity"
    assert "Operation not permitted" in gc.failed[0].detail
    assert len(gc.reclaimed) == 2 and gc.exit_code == 4


def test_gc_cli_exits_nonzero_on_failed_removals(tmp_path, immutable_block, kvtier_bin):
    proc = subprocess.run([kvtier_bin, "gc", str(tmp_path), "--max-bytes", "0"], capture_output=True, text=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert os.path.basename(immutable_block) in proc.stdout and "not enforced" in proc.stdout
    proc = subprocess.run([kvtier_bin, "gc", str(tmp_path), "--max-bytes", "0", "--json"], capture_output=True,
                          text=True)
    report = json.loads(proc.stdout)
    assert proc.returncode == 4 and report["exit_code"] == 4
    assert [f["errno"] for f in report["failed"]] == [errno.EPERM]
