"""kvtier on a real CephFS (issue 42 items 1-2): a one-node Ceph cluster from Debian's packages
(tests/ceph/ceph-cluster.sh: mon, mgr, one OSD, one MDS, a CephFS) started once for this module,
with three ceph-fuse clients of it: mount a and mount b are two instances' nodes, mount op the
operator's. Where Ceph cannot start here the module skips with the script's one line.

Proves, each through its own ceph-fuse client (so through the MDS's capabilities, never one
client's cache):
* vLLM's front end (kvtier.vllm under vLLM's own tiering manager) stores on a and an instance on b
  loads every block byte-exactly while the first still runs; a warm restart on b serves the
  prefix again;
* SGLang's front end (kvtier.sglang's backend) stores pages on a that a backend on b reads;
* concurrent overlapping stores of the same blocks from a and b (different bytes per writer) while
  op loads them: every load that hits returns one writer's whole row, never a mix or a torn one;
* sealed blocks and checksummed ones (the xattr, and the trailer) written on a load on b, and the
  CRC xattr is visible to op;
* du, fsck --verify-data and gc from op see the volume (gc --max-bytes trims to the bound), and a
  `gc --watch` on op holds the collector lease and keeps the volume under its cap while a and b store;
* `kvtier doctor` on op names CephFS (through ceph-fuse) and what its "auto" settings pick.
Seeded rows (KVTIER_TEST_SEED); the seed is in the assertion messages.
"""

import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import kvtier
import seal_support
from seal_support import run_job

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "ceph" / "ceph-cluster.sh"
ROW = 16384
SEED = int(os.environ.get("KVTIER_TEST_SEED", "4242"))


@pytest.fixture(scope="module")
def ceph(tmp_path_factory):
    """The cluster's directory (mnt/a, mnt/b, mnt/op), started once for the module."""
    d = Path(tmp_path_factory.mktemp("ceph")) / "c"  # short: admin sockets are unix paths
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(d)], capture_output=True, text=True, timeout=300)
    if proc.returncode == 77:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    print(proc.stdout.strip().splitlines()[-1])  # "ceph cluster up in N s: HEALTH_OK; ..."
    yield d
    subprocess.run(["bash", str(SCRIPT), "stop", str(d)], capture_output=True, timeout=120)


def roots(ceph, name):
    """The same root_dir as each of the three clients sees it (made through a)."""
    (ceph / "mnt" / "a" / name).mkdir()
    return {m: ceph / "mnt" / m / name for m in ("a", "b", "op")}


def cli(kvtier_bin, *args, ok=(0,), timeout=120):
    proc = subprocess.run([kvtier_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode in ok, (args, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def tier(root, **keys):
    return kvtier.FsTier(seal_support.namespace("kvtier-test/ceph"), ROW, {"root_dir": str(root), **keys})


def block_keys(n, tag):
    return kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * n)), seed=tag))


def rows_of(n, tag):
    rng = random.Random(f"{SEED}-{tag}")
    return [bytes(rng.getrandbits(8) for _ in range(64)) * (ROW // 64) for _ in range(n)]


def load(t, keys):
    out = [bytearray(ROW) for _ in keys]
    outcomes = run_job(t, t.submit_load(keys, out), timeout_s=60).outcomes
    return outcomes, [bytes(o) for o in out]


def test_vllm_instances_on_two_mounts_share_blocks_and_a_restart_serves_the_prefix(ceph, vllm_tree):
    import vllm_harness as h

    r = roots(ceph, "vllm")
    prompts = [h.chunk_keys(i, f"ceph-{SEED}") for i in range(3)]
    a = h.Engine([h.kvtier_tier(r["a"])])
    try:
        a.store_prompts(prompts)  # 12 chunks through 8 CPU rows: prompt 0 is on CephFS only
        b = h.Engine([h.kvtier_tier(r["b"])], cpu_rows=8)
        try:
            n, data = b.fetch(prompts[0])
            assert n == 4 and data == [h.content(k) for k in prompts[0]], f"seed {SEED}"
        finally:
            b.shutdown()
    finally:
        a.shutdown()
    restarted = h.Engine([h.kvtier_tier(r["b"])])  # a warm restart, on the other node
    try:
        for p in prompts:
            n, data = restarted.fetch(p)
            assert n == 4 and data == [h.content(k) for k in p], f"seed {SEED}"
    finally:
        restarted.shutdown()


def test_sglang_pages_stored_on_one_mount_load_on_the_other(ceph, tmp_path_factory):
    import sglang_support as sg

    if sg.skip_reason():
        pytest.skip(sg.skip_reason())
    sg.harness_tree(tmp_path_factory)
    r = roots(ceph, "sglang")
    extra = {"backend_name": "kvtier", "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
             "interface_v1": 1}
    pa, pb = sg.pool(pages=40), sg.pool(pages=40)
    ks = sg.keys(8, f"ceph-{SEED}")
    wa = sg.backend({**extra, "root_dir": str(r["a"])}, pa)
    w = pa.alloc(8 * pa.page_size)
    sg.fill(pa, ks, w)
    assert sum(wa.batch_set_v1(ks, w)) == 8
    rb = sg.backend({**extra, "root_dir": str(r["b"])}, pb)
    got = pb.alloc(8 * pb.page_size)
    assert all(rb.batch_get_v1(ks, got)), "every page stored on a is read on b"
    for i, k in enumerate(ks):
        assert bool((pb.page_u8(got[i * pb.page_size]) == sg.expected(pb, k)).all()), f"page {i}"
    wa.close()
    rb.close()


def test_overlapping_stores_from_two_mounts_never_tear_or_mix_a_load(ceph):
    r = roots(ceph, "overlap")
    keys = block_keys(24, f"overlap-{SEED}")
    by_writer = {m: rows_of(len(keys), f"{m}-{SEED}") for m in ("a", "b")}
    stop = threading.Event()
    bad, hits, errors = [], [0], []

    def reader():
        with tier(r["op"]) as t:
            while not stop.is_set():
                outcomes, data = load(t, keys)
                for i, (o, row) in enumerate(zip(outcomes, data)):
                    if o == "ok":
                        hits[0] += 1
                        if row not in (by_writer["a"][i], by_writer["b"][i]):
                            bad.append(i)
                    elif o not in ("miss",):
                        errors.append(("load", o))

    def writer(m):
        with tier(r[m]) as t:
            for _ in range(3):
                rows = [bytearray(x) for x in by_writer[m]]
                outcomes = run_job(t, t.submit_store(keys, rows), timeout_s=60).outcomes
                errors.extend(("store", m, o) for o in outcomes if o not in ("ok", "skipped_exists"))

    threads = [threading.Thread(target=reader)] + [threading.Thread(target=writer, args=(m,)) for m in "ab"]
    for th in threads:
        th.start()
    for th in threads[1:]:
        th.join(timeout=120)
    stop.set()
    threads[0].join(timeout=120)
    assert not bad, f"seed {SEED}: loads of blocks {sorted(set(bad))} were neither writer's row"
    assert not errors and hits[0] > 0, (errors[:10], hits)
    with tier(r["op"]) as t:
        outcomes, data = load(t, keys)
    assert outcomes == ["ok"] * len(keys), outcomes
    assert all(row in (by_writer["a"][i], by_writer["b"][i]) for i, row in enumerate(data)), f"seed {SEED}"


@pytest.mark.parametrize("mode", ["sealed", "xattr", "trailer"])
def test_sealed_and_checksummed_blocks_cross_mounts(ceph, tmp_path, mode):
    r = roots(ceph, f"mode-{mode}")
    keys_cfg = {"checksum_place": mode} if mode != "sealed" else {}
    if mode == "sealed":
        key = tmp_path / "seal.key"
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        keys_cfg = {"seal_key_file": str(key)}
    keys, rows = block_keys(6, f"{mode}-{SEED}"), rows_of(6, f"{mode}-{SEED}")
    with tier(r["a"], **keys_cfg) as t:
        assert run_job(t, t.submit_store(keys, [bytearray(x) for x in rows])).outcomes == ["ok"] * 6
        paths = [t.block_path(k) for k in keys]
    with tier(r["b"], **keys_cfg) as t:
        outcomes, data = load(t, keys)
    assert outcomes == ["ok"] * 6 and data == rows, (mode, outcomes)
    on_op = [str(p).replace(str(r["a"]), str(r["op"])) for p in paths]
    want = ROW if mode == "xattr" else ROW + 4096
    assert all(os.path.getsize(p) == want for p in on_op), mode
    if mode == "xattr":
        assert all(len(os.getxattr(p, "user.vllm.kv_crc32c")) == 4 for p in on_op)


def test_the_tools_from_the_operators_mount(ceph, kvtier_bin):
    r = roots(ceph, "tools")
    keys, rows = block_keys(20, f"tools-{SEED}"), rows_of(20, f"tools-{SEED}")
    with tier(r["a"]) as t:
        assert run_job(t, t.submit_store(keys, [bytearray(x) for x in rows])).outcomes == ["ok"] * 20
    du = json.loads(cli(kvtier_bin, "du", "--json", r["op"]).stdout)
    assert du["total_blocks"] == 20, du
    fsck = json.loads(cli(kvtier_bin, "fsck", "--json", "--verify-data", r["op"]).stdout)
    assert fsck["findings"] == [] and fsck["summary"]["blocks_verified"] == 20, fsck
    gc = json.loads(cli(kvtier_bin, "gc", "--json", "--ignore-lease", "--max-bytes", 12 * ROW, r["op"]).stdout)
    assert len([x for x in gc["reclaimed"] if x["reason"] == "capacity"]) == 8, gc
    assert json.loads(cli(kvtier_bin, "du", "--json", r["op"]).stdout)["total_blocks"] == 12


def test_gc_watch_holds_the_cap_while_both_instances_store(ceph, kvtier_bin, tmp_path):
    r = roots(ceph, "watch")
    metrics = tmp_path / "gc.prom"
    cap = 30 * ROW
    watch = subprocess.Popen([kvtier_bin, "gc", str(r["op"]), "--watch", "--max-bytes", str(cap),
                              "--interval", "500ms", "--check-interval", "100ms", "--collector-ttl", "2s",
                              "--metrics-file", str(metrics)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        stored = []

        def store(m):
            with tier(r[m]) as t:
                for batch in range(4):
                    keys = block_keys(20, f"watch-{m}-{batch}-{SEED}")
                    job = run_job(t, t.submit_store(keys, [bytearray(x) for x in rows_of(20, m)]), timeout_s=60)
                    stored.extend(o for o in job.outcomes if o == "ok")
        threads = [threading.Thread(target=store, args=(m,)) for m in "ab"]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=180)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            du = json.loads(cli(kvtier_bin, "du", "--json", r["op"]).stdout)
            if sum(n["bytes"] for n in du["namespaces"]) <= cap:
                break
            time.sleep(0.5)
        assert len(stored) == 160, len(stored)  # both stored all, the collector trimming meanwhile
        assert sum(n["bytes"] for n in du["namespaces"]) <= cap, du
        text = metrics.read_text()
        assert "kvtier_gc_lease_held 1" in text, text
        assert (r["op"] / ".kvtier" / "gc.lease").is_file()
    finally:
        watch.send_signal(signal.SIGTERM)
        rc = watch.wait(timeout=60)
    assert rc == 0, watch.stderr.read().decode()[-2000:]


def test_doctor_names_cephfs_through_ceph_fuse(ceph, kvtier_bin):
    report = json.loads(cli(kvtier_bin, "doctor", "--json", ceph / "mnt" / "op").stdout)
    fs = report["filesystem"]
    assert fs["name"] == "ceph" and fs["mount_type"] == "fuse.ceph-fuse" and fs["network_or_fuse"], fs
    text = cli(kvtier_bin, "doctor", ceph / "mnt" / "op").stdout
    assert "CephFS through ceph-fuse" in text and "io_backend       syscall" in text, text
