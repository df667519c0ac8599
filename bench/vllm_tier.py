#!/usr/bin/env python3
"""vLLM's own fs tier against kvtier.vllm.KvtierFsTier, same machine, same rows, same calls.

Both tiers are created by vLLM's SecondaryTierFactory over one primary view (an mmap of a
/dev/shm file, as vLLM's SharedOffloadRegion is) and driven with the calls vLLM's tiering manager
makes, in engine steps of --step-ms: submit_store / submit_load (TransferJobs of --keys-per-job
chunks, at most --qd jobs in flight), get_finished_jobs and on_schedule_end once per step, and
lookup until every key is decided. Per round and tier: store every row, drop the page cache,
look every key up, load every row into the other half of the view and check it byte-exact.
Rounds alternate the tiers and keep their trees until the end (a large delete slows the next
creates on ext4); the figures are medians over --rounds. Needs free space for rounds x 2 x
rows x row bytes.

Printed per row size, for each tier: store and load GB/s, CPU seconds per GB (the whole
process, tier threads included), scheduler-thread time per step (time spent inside the tier's
calls, i.e. what the engine's thread pays), p99 load-job latency, and kvtier/vLLM ratios against
the targets set for this comparison (throughput >= 1.0x, scheduler time <= 0.5x, CPU/GB <= 1.0x).
kvtier runs with its CRC32C checksums on (its default; --checksums off turns them off); vLLM's
tier at 7cfb97e has none.

    /usr/bin/python3 bench/vllm_tier.py --dir /path/on/the/disk [--rows 4000] [--row-bytes 1MiB,64KiB]
        [--rounds 3] [--qd 32] [--keys-per-job 4] [--step-ms 2] [--checksums on|off] [--json out.json]

Needs the kvtier package (PYTHONPATH=build/python or installed) and ../shared/vllm (or
--vllm-tree DIR, a tree made by ../shared/vllm/assemble.sh).
"""

import argparse
import hashlib
import json
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_size(text):
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    for suffix, mult in units.items():
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="work directory on the disk under test")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--row-bytes", default="1MiB,64KiB", help="comma-separated row sizes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--qd", type=int, default=32, help="jobs in flight")
    ap.add_argument("--keys-per-job", type=int, default=4)
    ap.add_argument("--step-ms", type=float, default=2.0, help="engine step period")
    ap.add_argument("--vllm-tree", help="a tree made by ../shared/vllm/assemble.sh (default: assemble one)")
    ap.add_argument("--checksums", choices=("on", "off"), default="on",
                    help="kvtier's CRC32C per block (checksum_blocks; default on, as shipped)")
    ap.add_argument("--json", help="write the figures here")
    return ap.parse_args()


def import_vllm(tree):
    if tree is None:
        assemble = REPO.parent / "shared" / "vllm" / "assemble.sh"
        if not assemble.is_file():
            sys.exit(f"vllm_tier.py: {assemble} not found; pass --vllm-tree")
        tree = tempfile.mkdtemp(prefix="kvtier-vllm-")
        subprocess.run(["bash", str(assemble), tree], check=True, env=dict(os.environ, PYTHON=sys.executable),
                       stdout=subprocess.DEVNULL)
    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(REPO / "tests" / "python"))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Region:
    """2 x rows rows in an mmap of a /dev/shm file: sources, then load targets."""

    def __init__(self, rows, row_bytes):
        import numpy as np

        self.path = f"/dev/shm/kvtier_bench_{os.getpid()}_{row_bytes}.mmap"
        size = 2 * rows * row_bytes
        with open(self.path, "w+b") as f:
            f.truncate(size)
            self.mm = mmap.mmap(f.fileno(), size)
        self.rows, self.row_bytes = rows, row_bytes
        self.array = np.frombuffer(self.mm, dtype=np.uint8).reshape(2 * rows, row_bytes)
        rng = np.random.default_rng(row_bytes)
        self.array[:rows] = rng.integers(0, 256, (rows, row_bytes), dtype=np.uint8)
        self.view = memoryview(self.mm).cast("B", [2 * rows, row_bytes])

    def close(self):
        self.view.release()
        del self.array
        self.mm.close()
        os.unlink(self.path)


class Driver:
    """Plays vLLM's tiering manager around one secondary tier."""

    def __init__(self, tier, opts):
        self.tier, self.opts = tier, opts
        self.call_s = 0.0  # time inside the tier's calls (the scheduler thread's cost)
        self.steps = 0
        self.done = {}

    def timed(self, fn, *a):
        t0 = time.perf_counter()
        out = fn(*a)
        self.call_s += time.perf_counter() - t0
        return out

    def step(self, end_ctx):
        for r in self.timed(lambda: list(self.tier.get_finished_jobs())):
            self.done[r.job_id] = (r.success, time.perf_counter())
        self.timed(self.tier.on_schedule_end, end_ctx)
        self.steps += 1
        time.sleep(self.opts.step_ms / 1000)

    def run_jobs(self, jobs, end_ctx):
        """Submits jobs, at most qd in flight, stepping; returns (seconds, per-job latencies)."""
        submitted, start, i = {}, time.perf_counter(), 0
        while len(self.done) < len(jobs):
            while i < len(jobs) and i - len(self.done) < self.opts.qd:
                job = jobs[i]
                submitted[job.job_id] = time.perf_counter()
                self.timed(self.tier.submit_load if job.is_promotion else self.tier.submit_store, job)
                i += 1
            self.step(end_ctx)
        failed = [j for j, (ok, _) in self.done.items() if not ok]
        if failed:
            raise RuntimeError(f"{len(failed)} jobs failed, e.g. {failed[:3]}")
        lat = [self.done[j][1] - submitted[j] for j in submitted]
        return max(t for _, t in self.done.values()) - start, lat


def phase(driver, jobs, end_ctx, nbytes):
    driver.call_s, driver.steps, driver.done = 0.0, 0, {}
    cpu0 = cpu_seconds()
    secs, lat = driver.run_jobs(jobs, end_ctx)
    cpu = cpu_seconds() - cpu0
    return {"gbps": nbytes / secs / 1e9, "cpu_s_per_gb": cpu / (nbytes / 1e9),
            "sched_ms_per_step": 1e3 * driver.call_s / max(driver.steps, 1), "steps": driver.steps,
            "sched_us_per_job": 1e6 * driver.call_s / len(jobs),
            "p99_ms": 1e3 * statistics.quantiles(lat, n=100)[98] if len(lat) > 1 else 1e3 * lat[0]}


def lookup_phase(driver, keys, vllm):
    """Every key looked up by one request per job's worth of keys, until all are decided."""
    ctx_cls, result = vllm["ReqContext"], vllm["LookupResult"]
    driver.call_s, driver.steps = 0.0, 0
    ctxs = [ctx_cls(req_id=f"lk-{i}") for i in range(0, len(keys), 16)]
    pending = list(range(len(keys)))
    while pending:
        still = []
        for i in pending:
            r = driver.timed(driver.tier.lookup, keys[i], ctxs[i // 16])
            if r is result.RETRY:
                still.append(i)
            elif r is not result.HIT:
                raise RuntimeError(f"key {i} stored but looked up as {r}")
        pending = still
        driver.step(vllm["end"])
    for c in ctxs:
        driver.timed(driver.tier.on_request_finished, c)
    return {"sched_ms_per_step": 1e3 * driver.call_s / max(driver.steps, 1), "steps": driver.steps,
            "sched_us_per_key": 1e6 * driver.call_s / len(keys)}


def run_tier(name, cfg, region, opts, rnd, vllm):
    import numpy as np

    factory, spec = vllm["factory"], vllm["spec"]
    tier = factory.create_secondary_tier(cfg, region.view, spec)
    n, k, rb = region.rows, opts.keys_per_job, region.row_bytes
    keys = [vllm["make_key"](hashlib.sha256(f"{rnd}/{name}/{rb}/{i}".encode()).digest(), 0) for i in range(n)]
    ctx, job = vllm["ReqContext"](req_id=f"bench-{name}"), vllm["TransferJob"]
    stores = [job(j, keys[j * k:(j + 1) * k], np.arange(j * k, min(n, (j + 1) * k)), False, ctx)
              for j in range((n + k - 1) // k)]
    loads = [job(10**6 + j, keys[j * k:(j + 1) * k], np.arange(n + j * k, n + min(n, (j + 1) * k)), True, ctx)
             for j in range((n + k - 1) // k)]
    d = Driver(tier, opts)
    out = {"store": phase(d, stores, vllm["end"], n * rb)}
    out["cache_dropped"] = drop_caches()
    out["lookup"] = lookup_phase(d, keys, vllm)
    region.array[n:] = 0
    out["load"] = phase(d, loads, vllm["end"], n * rb)
    out["verified"] = bool(np.array_equal(region.array[:n], region.array[n:]))
    tier.shutdown()
    return out


def median_of(runs, path):
    vals = []
    for r in runs:
        v = r
        for p in path:
            v = v[p]
        vals.append(v)
    return statistics.median(vals)


def report(rb, results):
    rows = [("store GB/s", ("store", "gbps"), "hi", 1.0), ("load GB/s", ("load", "gbps"), "hi", 1.0),
            ("store CPU s/GB", ("store", "cpu_s_per_gb"), "lo", 1.0),
            ("load CPU s/GB", ("load", "cpu_s_per_gb"), "lo", 1.0),
            ("store sched ms/step", ("store", "sched_ms_per_step"), "lo", 0.5),
            ("load sched ms/step", ("load", "sched_ms_per_step"), "lo", 0.5),
            ("store sched us/job", ("store", "sched_us_per_job"), "lo", 0.5),
            ("load sched us/job", ("load", "sched_us_per_job"), "lo", 0.5),
            ("lookup sched us/key", ("lookup", "sched_us_per_key"), "lo", 0.5),
            ("load p99 ms", ("load", "p99_ms"), "lo", None)]
    print(f"\n== rows of {rb} bytes, median of {len(results['vllm'])} rounds")
    print(f"{'':22} {'vLLM fs':>10} {'kvtier':>10} {'kvtier/vLLM':>12}  target")
    summary = {}
    for label, path, better, target in rows:
        v, kv = median_of(results["vllm"], path), median_of(results["kvtier"], path)
        ratio = kv / v if v else float("nan")
        if target is None:
            verdict = ""
        else:
            met = ratio >= target if better == "hi" else ratio <= target
            verdict = f"{'>=' if better == 'hi' else '<='} {target:.1f}x {'met' if met else 'NOT met'}"
        print(f"{label:22} {v:10.3f} {kv:10.3f} {ratio:12.2f}  {verdict}")
        summary[label] = {"vllm": v, "kvtier": kv, "ratio": ratio}
    ok = all(r["verified"] for t in results.values() for r in t)
    print(f"every load verified byte-exact: {ok}; page cache dropped before loads: "
          f"{all(r['cache_dropped'] for t in results.values() for r in t)}")
    return summary


def main():
    opts = args()
    import_vllm(opts.vllm_tree)
    import vllm_harness as h
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.base import TransferJob
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    spec = OffloadingSpecFactory.create_spec(h.offloading_config([], cpu_rows=8))
    vllm = {"factory": SecondaryTierFactory, "spec": spec, "ReqContext": ReqContext, "TransferJob": TransferJob,
            "LookupResult": LookupResult, "make_key": make_offload_key,
            "end": ScheduleEndContext(new_req_ids=(), preempted_req_ids=())}
    work = Path(opts.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    tiers = {"vllm": {"type": "fs"}, "kvtier": {"type": "KvtierFsTier", "module_path": "kvtier.vllm",
                                                 "checksum_blocks": opts.checksums == "on"}}
    out = {"machine": os.uname().nodename, "cores": os.cpu_count(), "options": vars(opts), "sizes": {}}
    for rb in (parse_size(s) for s in opts.row_bytes.split(",")):
        region = Region(opts.rows, rb)
        results = {name: [] for name in tiers}
        roots = []
        try:
            for rnd in range(opts.rounds):
                order = list(tiers) if rnd % 2 == 0 else list(reversed(tiers))
                for name in order:
                    roots.append(work / f"{name}-{rb}-{rnd}")
                    cfg = dict(tiers[name], root_dir=str(roots[-1]))
                    results[name].append(run_tier(name, cfg, region, opts, rnd, vllm))
        finally:
            region.close()
            # Trees are removed only after every round: on ext4, creating files
            # right after a large delete is slower (recently_deleted scans), which
            # would penalize whichever tier runs next.
            for root in roots:
                shutil.rmtree(root, ignore_errors=True)
        out["sizes"][rb] = {"runs": results, "summary": report(rb, results)}
    if opts.json:
        Path(opts.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
