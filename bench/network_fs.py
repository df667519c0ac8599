#!/usr/bin/env python3
"""kvtier's and vLLM's fs tiers on a network-like filesystem: a kvtier_faultfs mount that adds a
fixed latency to every call (0, 0.5 and 2 ms by default), as an NFS round trip would.

Both tiers are made by vLLM's own SecondaryTierFactory (../shared/vllm) over one primary view and
driven with the calls vLLM's tiering manager makes (bench/vllm_tier.py's Driver: submit_store /
submit_load of TransferJobs, get_finished_jobs and on_schedule_end once per engine step, at most
--qd jobs in flight). The jobs are shaped as the manager batches them, one job per request and
step (vllm/v1/kv_offload/tiering/manager.py): by default the blocks are stored by 8 requests of 32
blocks at once (--store-keys-per-job 32) and loaded by one request that hits all of them
(--load-keys-per-job 256, one job). vLLM's tier runs each job on one thread of its pool, key after
key; kvtier runs a job's keys at once. Per tier and latency, on a fresh root under the mount:
  store fresh   --blocks blocks of --row-bytes into an empty tree (shard directories created)
  store warm    --blocks more whose shard directories already exist (the steady state)
  lookup        every fresh key looked up until decided (RETRY answered by stepping)
  load          every fresh block loaded into other rows and checked byte-exact
Then the floor of "store fresh" at that latency: its distinct <hhh> directories made in one new
parent by 16 threads and nothing else (no client overlaps these: the kernel makes the entries of
one directory one at a time), printed with the most any tier's fresh store could gain against it.
For each: wall seconds, CPU seconds of this process (the tier's threads included; the FUSE
daemon's own CPU is not), and filesystem calls per block as the daemon counted them (every kernel
request: LOOKUP/GETATTR, OPEN/CREATE, READ, WRITE, xattr, RENAME, ...; FLUSH and RELEASE count as
"flush"). Then the start cost: calls and seconds of creating the tier (vLLM: the "attach") on a
root that already holds --start-sizes blocks (sparse files of --row-bytes made on the backing
directory directly), plus what it does in the background until its calls stop for --quiet-s (at most
--settle-s; "+" marks a tier still busy then), at --start-delay-ms.

Then, at 0 ms (calls do not depend on the latency), filesystem calls per block with each tier
under vLLM's real tiering manager (tests/python/vllm_harness.py: the manager's own lookups and its
promotions into the CPU tier included), for --manager-prompts prompts of 4 blocks, keys made so
that pairs share a shard directory ("<hhh>/<hh>_g0"); each phase divided by the blocks it concerns:
  lookup miss (no shard)   the lookups that settle new prompts whose shards do not exist
  store (fresh shard)      storing those prompts (shard directories made)
  lookup miss (shard)      lookups of new keys whose shard directories exist
  store (present shard)    storing them, right after (kvtier: its shard directory fds still held)
  hit: lookup + load (fresh engine)
                           a second engine (fresh manager and tier: no directory held) fetches the
                           first keys: the manager's lookup finds each in the fs tier and reads it
                           into its CPU tier, from which the request loads.
(tests/integration/fs_tier_dirfd_test.cc prints kvtier's counts per tier call.)

Prints markdown tables, kvtier/vLLM ratios included (below 1: kvtier takes less). kvtier
runs with its defaults (checksums on, io_backend auto); vLLM's tier as vLLM configures it.

    bench/network_fs.sh [--delays-ms 0,0.5,2] [--blocks 256] [--row-bytes 256KiB]
        [--start-sizes 256,16384] [--manager-prompts 8] [--json out.json] [--smoke]

--smoke: 8 blocks at 0 ms, start sizes 8 and 64, 1 prompt under the manager (what ctest runs, so
the script cannot rot).
Needs root (or fusermount3) and /dev/fuse, the kvtier package and kvtier_faultfs built in
--build, and ../shared/vllm ($KVTIER_SHARED_DIR/vllm; or --vllm-tree DIR, a tree made by its
assemble.sh). Exits 77 (ctest: skipped) where FUSE or vLLM's code is missing.
"""

import argparse
import atexit
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests" / "support"), str(REPO / "tests" / "python")]
import vllm_tier as vt  # noqa: E402
from faultfs import FaultFs  # noqa: E402

TIERS = {"vllm": {"type": "fs"}, "kvtier": {"type": "KvtierFsTier", "module_path": "kvtier.vllm"}}
SKIP = 77  # ctest's SKIP_RETURN_CODE


def args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(REPO / "build"), help="build directory (python/ and bin/kvtier_faultfs)")
    ap.add_argument("--delays-ms", default="0,0.5,2", help="latency added to every call, comma-separated")
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--row-bytes", default="256KiB")
    ap.add_argument("--start-sizes", default="256,16384", help="blocks on the volume when the tier starts")
    ap.add_argument("--start-delay-ms", type=float, default=0.0, help="latency during the start-cost runs")
    ap.add_argument("--settle-s", type=float, default=20.0, help="longest wait for a new tier's calls to stop")
    ap.add_argument("--quiet-s", type=float, default=1.0, help="a tier whose calls stopped this long is settled")
    ap.add_argument("--qd", type=int, default=1024, help="jobs in flight (default: all)")
    ap.add_argument("--store-keys-per-job", type=int, default=32, help="blocks per store job (one request's)")
    ap.add_argument("--load-keys-per-job", type=int, default=256, help="blocks per load job (one request's)")
    ap.add_argument("--step-ms", type=float, default=2.0, help="engine step period")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--vllm-tree", help="a tree made by ../shared/vllm/assemble.sh (default: assemble one)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--manager-prompts", type=int, default=8, help="prompts of 4 blocks under vLLM's manager (0: none)")
    ap.add_argument("--smoke", action="store_true", help="8 blocks at 0 ms, start sizes 8 and 64, 1 manager prompt")
    opts = ap.parse_args()
    if opts.smoke:
        opts.delays_ms, opts.blocks, opts.start_sizes, opts.settle_s, opts.quiet_s = "0", 8, "8,64", 5.0, 0.3
        opts.manager_prompts = 1
    return opts


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Meter:
    """Wall seconds, this process's CPU seconds and the daemon's call counts over a block."""

    def __init__(self, fs):
        self.fs = fs

    def __enter__(self):
        self.c0, self.t0, self.cpu0 = self.fs.counters(), time.perf_counter(), cpu_seconds()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.cpu = cpu_seconds() - self.cpu0
        c1 = self.fs.counters()
        self.calls = {op: c1[op] - self.c0[op] for op in c1 if c1[op] != self.c0[op]}
        return False

    def figures(self, blocks):
        total = sum(self.calls.values())
        return {"seconds": self.seconds, "cpu_s": self.cpu, "blocks": blocks, "calls": total,
                "calls_per_block": total / max(blocks, 1),
                "calls_by_op": self.calls}


def keys_for(vllm, tag, n, prefixes=None):
    """n keys (32-byte hashes, group 0); with prefixes, each shares its first 3 bytes (so its two
    shard directories, hex[:3] and hex[3:5]) with the key of the same index."""
    out = []
    for i in range(n):
        h = hashlib.sha256(f"{tag}/{i}".encode()).digest()
        if prefixes is not None:
            h = prefixes[i][:3] + h[3:]
        out.append(vllm["make_key"](h, 0))
    return out


def jobs_for(vllm, keys, first_row, promotion, base_id, k):
    import numpy as np

    ctx = vllm["ReqContext"](req_id=f"nfs-{base_id}")
    return [vllm["TransferJob"](base_id + j, keys[j * k:(j + 1) * k],
                                np.arange(first_row + j * k, first_row + min(len(keys), (j + 1) * k)), promotion, ctx)
            for j in range((len(keys) + k - 1) // k)]


def run_tier(name, root, fs, region, opts, vllm):
    """One tier on a fresh root: store fresh, store warm, lookup, load; figures per phase."""
    n, ks, kl = region.rows, opts.store_keys_per_job, opts.load_keys_per_job
    fresh = keys_for(vllm, f"{name}/{root.name}/fresh", n)
    warm = keys_for(vllm, f"{name}/{root.name}/warm", n, prefixes=[bytes(key[:-4]) for key in fresh])
    tier = vllm["factory"].create_secondary_tier(dict(TIERS[name], root_dir=str(root)), region.view, vllm["spec"])
    d, out = vt.Driver(tier, opts), {}
    try:
        for phase, keys, base in (("store fresh", fresh, 0), ("store warm", warm, 10**6)):
            d.done = {}
            with Meter(fs) as m:
                d.run_jobs(jobs_for(vllm, keys, 0, False, base, ks), vllm["end"])
            out[phase] = m.figures(n)
        with Meter(fs) as m:
            vt.lookup_phase(d, fresh, vllm)
        out["lookup"] = m.figures(n)
        region.array[n:] = 0
        d.done = {}
        with Meter(fs) as m:
            d.run_jobs(jobs_for(vllm, fresh, n, True, 2 * 10**6, kl), vllm["end"])
        out["load"] = m.figures(n)
        if not (region.array[:n] == region.array[n:]).all():
            raise RuntimeError(f"{name}: loaded rows differ from the stored ones")
    finally:
        tier.shutdown()
    return out


def mkdir_floor(parent, names, threads=16):
    """Seconds to make `names` in one new directory `parent` from `threads` threads and nothing
    else: the part of a fresh-tree store no client can overlap, since the kernel makes entries of
    one parent one at a time (the parent's lock, held across a LOOKUP and the MKDIR)."""
    parent.mkdir()
    fd, todo, lock = os.open(parent, os.O_PATH | os.O_DIRECTORY), list(names), threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                name = todo.pop()
            os.mkdir(name, dir_fd=fd)

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    os.close(fd)
    return time.perf_counter() - started


def fresh_floor(root, fs, opts):
    """The mkdir floor of a fresh store: its distinct <hhh> directories (the first 3 hex digits of
    the fresh keys' hashes, as keys_for makes them) made in one parent; figures as Meter's."""
    parents = {hashlib.sha256(f"kvtier/{root.name}/fresh/{i}".encode()).hexdigest()[:3] for i in range(opts.blocks)}
    with Meter(fs) as m:
        mkdir_floor(root.parent / f"floor-{root.name}", sorted(parents))
    out = m.figures(len(parents))
    out["dirs"] = len(parents)
    return out


def populate(backing_root, block_dir, count, row_bytes):
    """`count` blocks (sparse files of row_bytes) in vLLM's layout, made on the backing directly."""
    base = Path(backing_root) / block_dir
    for i in range(count):
        h = hashlib.sha256(f"populate/{i}".encode()).hexdigest()
        shard = base / h[:3] / f"{h[3:5]}_g0"
        shard.mkdir(parents=True, exist_ok=True)
        with open(shard / f"{h}.bin", "wb") as f:
            f.truncate(row_bytes)


def settle(fs, limit_s, quiet_s):
    """Waits until the daemon sees no call for quiet_s (at most limit_s); True when it did."""
    deadline, last, since = time.monotonic() + limit_s, None, time.monotonic()
    while time.monotonic() < deadline:
        total = sum(fs.counters().values())
        if total != last:
            last, since = total, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return True
        time.sleep(0.1)
    return False


def start_cost(name, root, fs, region, opts, vllm):
    """Creating the tier over a populated root, and its background calls until quiet."""
    with Meter(fs) as m:
        tier = vllm["factory"].create_secondary_tier(dict(TIERS[name], root_dir=str(root)), region.view, vllm["spec"])
    opened = m.figures(1)
    with Meter(fs) as bg:
        quiet = settle(fs, opts.settle_s, opts.quiet_s)
    tier.shutdown()
    background = bg.figures(1)
    # The quiet time that ended the wait is not part of the cost.
    background["seconds"] = max(0.0, background["seconds"] - (opts.quiet_s if quiet else 0.0))
    return {"open": opened, "background": background, "quiet": quiet}


def start_phase(fs, tree_backing, opts, vllm, region, sizes):
    """Per size: one root populated once, each tier started over it in turn."""
    fs.clear()
    if opts.start_delay_ms:
        fs.delay("all", opts.start_delay_ms)
    results = {}
    for size in sizes:
        root_name = f"start-{size}"
        probe = vllm["factory"].create_secondary_tier(dict(TIERS["vllm"], root_dir=f"{fs.mountpoint}/{root_name}"),
                                                      region.view, vllm["spec"])
        probe.shutdown()
        # vLLM makes <NS>/config.json at start and <NS>_r0 (rank 0's blocks) at its first store.
        block_dirs = [p.name + "_r0" for p in (Path(tree_backing) / root_name).iterdir() if (p / "config.json").is_file()]
        if len(block_dirs) != 1:
            raise RuntimeError(f"expected one namespace directory under {root_name}, found {block_dirs}")
        populate(Path(tree_backing) / root_name, block_dirs[0], size, region.row_bytes)
        results[size] = {name: start_cost(name, Path(fs.mountpoint) / root_name, fs, region, opts, vllm)
                         for name in TIERS}
    fs.clear()
    return results


def manager_keys(vllm, prompts, salt):
    """`prompts` lists of 4 keys; salt 0 and 1 give keys pairwise in the same shard directory."""
    out = []
    for p in range(prompts):
        keys = []
        for c in range(4):
            n = p * 4 + c
            prefix = ((n * 2654435761) & 0xFFFFF).to_bytes(3, "big")  # 2.5 bytes name the shard
            keys.append(vllm["make_key"](prefix + bytes([salt]) + os.urandom(28), 0))
        out.append(keys)
    return out


def manager_tier(name, root, fs, opts, vllm):
    """One tier under vLLM's tiering manager on a fresh root: calls per block of each phase."""
    import vllm_harness as h

    cfg = h.vllm_tier(root) if name == "vllm" else h.kvtier_tier(root)
    first, second = manager_keys(vllm, opts.manager_prompts, 0), manager_keys(vllm, opts.manager_prompts, 1)
    blocks, out = 4 * opts.manager_prompts, {}
    eng = h.Engine([cfg], cpu_rows=8)
    settle(fs, opts.settle_s, opts.quiet_s)  # a tier's start-up is not a per-block cost

    def store(prompts, miss_phase, store_phase):
        with Meter(fs) as m:
            ctxs = [(eng.request(), keys) for keys in prompts]
            for ctx, keys in ctxs:
                assert eng.settle(keys, ctx) == 0
        out[miss_phase] = m.figures(blocks)
        with Meter(fs) as m:
            for ctx, keys in ctxs:  # one prompt at a time: the CPU tier holds 8 rows
                eng.step(stores=[(ctx, keys)], finished=[ctx])
                eng.idle()
        out[store_phase] = m.figures(blocks)

    store(first, "lookup miss (no shard)", "store (fresh shard)")
    store(second, "lookup miss (shard)", "store (present shard)")
    eng2 = h.Engine([cfg], cpu_rows=8)
    settle(fs, opts.settle_s, opts.quiet_s)
    with Meter(fs) as m:
        for keys in first:  # promoted into the CPU tier while the lookup settles, loaded from there
            n, data = eng2.fetch(keys)
            assert n == len(keys) and data == [h.content(k) for k in keys], (name, n)
        eng2.idle()
    out["hit: lookup + load (fresh engine)"] = m.figures(blocks)
    eng2.shutdown()
    eng.shutdown()
    return out


def manager_lines(manager_results, opts):
    """Calls per block under vLLM's manager, per phase, and by kind."""
    lines = [f"\ncalls per block under vLLM's tiering manager, at 0 ms ({4 * opts.manager_prompts} blocks per phase):\n",
             "| phase | vLLM calls/block | kvtier calls/block | kvtier/vLLM calls |", "|---|---|---|---|"]
    for phase, v in manager_results["vllm"].items():
        kv = manager_results["kvtier"][phase]
        lines.append(f"| {phase} | {v['calls_per_block']:.1f} | {kv['calls_per_block']:.1f} | "
                     f"{ratio(kv['calls_per_block'], v['calls_per_block'])} |")
    lines.append("")
    for phase in manager_results["vllm"]:
        for name in TIERS:
            r = manager_results[name][phase]
            kinds = " ".join(f"{op}={n / r['blocks']:.2f}" for op, n in sorted(r["calls_by_op"].items()))
            lines.append(f"  {phase:33} {name:7} {kinds}")
    return "\n".join(lines)


def ratio(kv, v):
    return f"{kv / v:.2f}" if v else "-"


def table(ops_results, start_results, opts):
    head = ("| latency | operation | vLLM s | kvtier s | kvtier/vLLM s | vLLM CPU s | kvtier CPU s | "
            "vLLM calls/block | kvtier calls/block | kvtier/vLLM calls |")
    lines = [head, "|" + "---|" * 10]
    for delay, res in ops_results.items():
        for phase in ("store fresh", "store warm", "lookup", "load"):
            v, kv = res["vllm"][phase], res["kvtier"][phase]
            lines.append(f"| {delay} ms | {phase} | {v['seconds']:.2f} | {kv['seconds']:.2f} | "
                         f"{ratio(kv['seconds'], v['seconds'])} | {v['cpu_s']:.2f} | {kv['cpu_s']:.2f} | "
                         f"{v['calls_per_block']:.1f} | {kv['calls_per_block']:.1f} | "
                         f"{ratio(kv['calls_per_block'], v['calls_per_block'])} |")
    for size, res in start_results.items():
        cells = {}
        for name in ("vllm", "kvtier"):
            r = res[name]
            cells[name] = (r["open"]["seconds"] + r["background"]["seconds"], r["open"]["cpu_s"] + r["background"]["cpu_s"],
                           r["open"]["calls"] + r["background"]["calls"], "" if r["quiet"] else "+")
        v, kv = cells["vllm"], cells["kvtier"]
        lines.append(f"| {opts.start_delay_ms:g} ms | start, {size} blocks (calls: total) | {v[0]:.2f}{v[3]} | "
                     f"{kv[0]:.2f}{kv[3]} | {ratio(kv[0], v[0])} | {v[1]:.2f} | {kv[1]:.2f} | {v[2]}{v[3]} | "
                     f"{kv[2]}{kv[3]} | {ratio(kv[2], v[2])} |")
    return "\n".join(lines)


def by_op(ops_results):
    """Calls per block by kind at the highest latency, for both tiers (the table sums them)."""
    delay = max(ops_results, key=float)
    lines = [f"\ncalls per block by kind at {delay} ms (faultfs counters; flush = FLUSH + RELEASE):"]
    for phase in ("store warm", "lookup", "load"):
        for name in TIERS:
            calls, blocks = ops_results[delay][name][phase]["calls_by_op"], ops_results[delay][name][phase]["blocks"]
            kinds = ", ".join(f"{op} {n / blocks:.1f}" for op, n in sorted(calls.items()) if n / blocks >= 0.05)
            lines.append(f"  {phase:11} {name:7} {kinds}")
    return "\n".join(lines)


def floor_lines(ops_results):
    """The fresh-store floor per latency, and the most a store fresh ratio can be against it."""
    lines = ["\nstore fresh floor (its distinct <hhh> made in one parent by 16 threads, nothing else):"]
    for delay, res in ops_results.items():
        f, v, kv = res["floor"], res["vllm"]["store fresh"]["seconds"], res["kvtier"]["store fresh"]["seconds"]
        lines.append(f"  {delay:>4} ms  {f['dirs']} dirs {f['seconds']:.2f} s ({f['calls_per_block']:.1f} calls each); "
                     f"vLLM/floor {v / f['seconds']:.1f}x, vLLM/kvtier {v / kv:.1f}x")
    return "\n".join(lines)


def main():
    opts = args()
    faultfs_bin = str(Path(opts.build).resolve() / "bin" / "kvtier_faultfs")
    why = FaultFs.unavailable(faultfs_bin)
    if why:
        print(f"network_fs.py: skipped: {why}")
        return SKIP
    if opts.vllm_tree is None:
        assemble = Path(os.environ.get("KVTIER_SHARED_DIR", REPO.parent / "shared")) / "vllm" / "assemble.sh"
        if not assemble.is_file():
            print(f"network_fs.py: skipped: {assemble} not found (set KVTIER_SHARED_DIR or pass --vllm-tree)")
            return SKIP
        opts.vllm_tree = tempfile.mkdtemp(prefix="kvtier-vllm-")
        atexit.register(shutil.rmtree, opts.vllm_tree, True)  # the assembled copy is this run's own
        subprocess.run(["bash", str(assemble), opts.vllm_tree], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHON=sys.executable))
    vt.import_vllm(opts.vllm_tree)
    import vllm_harness as h
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.base import TransferJob
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    vllm = {"factory": SecondaryTierFactory, "spec": OffloadingSpecFactory.create_spec(h.offloading_config([], cpu_rows=8)),
            "ReqContext": ReqContext, "TransferJob": TransferJob, "LookupResult": LookupResult,
            "make_key": make_offload_key, "end": ScheduleEndContext(new_req_ids=(), preempted_req_ids=())}
    work = Path(opts.dir or tempfile.mkdtemp(prefix="kvtier-netfs-")).resolve()
    region = vt.Region(opts.blocks, vt.parse_size(opts.row_bytes))
    started = time.monotonic()
    ops_results, start_results, manager_results = {}, {}, {}
    try:
        with FaultFs(work / "backing", work / "mnt", binary=faultfs_bin) as fs:
            for delay in (float(x) for x in opts.delays_ms.split(",")):
                fs.clear()
                if delay:
                    fs.delay("all", delay)
                ops_results[f"{delay:g}"] = {name: run_tier(name, Path(fs.mountpoint) / f"{name}-{delay:g}ms", fs, region,
                                                            opts, vllm) for name in TIERS}
                ops_results[f"{delay:g}"]["floor"] = fresh_floor(Path(fs.mountpoint) / f"kvtier-{delay:g}ms", fs, opts)
                print(f"# {delay:g} ms done at {time.monotonic() - started:.0f} s", flush=True)
            sizes = [int(x) for x in opts.start_sizes.split(",")]
            start_results = start_phase(fs, work / "backing", opts, vllm, region, sizes)
            if opts.manager_prompts:
                fs.clear()
                manager_results = {name: manager_tier(name, Path(fs.mountpoint) / f"manager-{name}", fs, opts, vllm)
                                   for name in TIERS}
    finally:
        region.close()
        if not opts.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{opts.blocks} blocks of {opts.row_bytes} per operation; stores in jobs of {opts.store_keys_per_job} blocks, "
          f"loads in jobs of {opts.load_keys_per_job}, at most {opts.qd} jobs in flight; {os.cpu_count()} cores; "
          f"{time.monotonic() - started:.0f} s in all\n")
    print(table(ops_results, start_results, opts))
    print(by_op(ops_results))
    print(floor_lines(ops_results))
    if manager_results:
        print(manager_lines(manager_results, opts))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"options": vars(opts), "operations": ops_results,
                                               "start": start_results, "manager": manager_results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
