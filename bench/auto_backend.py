#!/usr/bin/env python3
"""Which backend io_backend "auto" should run on a FUSE mount: store, lookup and load times of one fs tier.

Mounts kvtier_faultfs over a backing directory, adds --delay-ms to every call (0 and 2 by
default: a passthrough FUSE daemon at network latency, with no kernel caching), and for each of
the backends io_uring ("uring"), the syscall pool ("syscall") and "auto" opens a kvtier.FsTier
(default config otherwise: 16 + 16 I/O slots, checksums on) and times, for --blocks rows of
--row-bytes: storing every row (jobs of --keys-per-job keys, all submitted at once, the shard
directories already present), deciding every key's lookup, and loading every row (checked
byte-exact), and the process's CPU seconds over the three. Medians over --rounds; each round a fresh set of keys. No vLLM here: the full
comparison against vLLM's tier is the full benchmark (vLLM and kvtier under vLLM's manager).

    /usr/bin/python3 bench/auto_backend.py [--build build] [--blocks 256] [--row-bytes 262144]
        [--delays 0,2] [--engines uring,syscall,auto] [--rounds 3]
"""

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build directory (python/ and bin/kvtier_faultfs)")
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--row-bytes", type=int, default=256 * 1024)
    ap.add_argument("--keys-per-job", type=int, default=4)
    ap.add_argument("--delays", default="0,2", help="comma-separated ms added to every call")
    ap.add_argument("--engines", default="uring,syscall,auto")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    return ap.parse_args()


def wait_all(tier, jobs, timeout_s=300):
    """Waits for every job id in ``jobs``; returns {job_id: JobResult}."""
    done, deadline = {}, time.monotonic() + timeout_s
    while len(done) < len(jobs):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out with {len(done)} of {len(jobs)} jobs done")
        for r in tier.wait(1000):
            done[r.job_id] = r
    return done


def cpu_s():
    """CPU seconds of this process (its threads and io_uring's workers, which belong to it)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_round(kvtier, root, engine, args, salt):
    ns = kvtier.Namespace("bench/auto-backend", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
    n, k, row = args.blocks, args.keys_per_job, args.row_bytes
    keys = kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * n)), seed=salt))
    rows = [os.urandom(16) * (row // 16) for _ in range(n)]
    groups = [list(range(i, min(i + k, n))) for i in range(0, n, k)]
    tier = kvtier.FsTier(ns, row, {"root_dir": str(root), "io_backend": engine})
    backend = tier.backend
    # Warm the shard directories (the "already present"), then drop the files.
    wait_all(tier, [tier.submit_store([keys[i] for i in g], [rows[i] for i in g]) for g in groups])
    for i in range(n):
        os.unlink(tier.block_path(keys[i]))
    cpu0 = cpu_s()
    t0 = time.monotonic()
    res = wait_all(tier, [tier.submit_store([keys[i] for i in g], [rows[i] for i in g]) for g in groups])
    t_store = time.monotonic() - t0
    assert all(r.ok_prefix == len(r.outcomes) for r in res.values()), "a store failed"
    t0 = time.monotonic()
    res = wait_all(tier, [tier.submit_lookup([keys[i] for i in g]) for g in groups])
    t_lookup = time.monotonic() - t0
    assert all(r.ok_prefix == len(r.outcomes) for r in res.values()), "a lookup missed"
    back = [bytearray(row) for _ in range(n)]
    t0 = time.monotonic()
    res = wait_all(tier, [tier.submit_load([keys[i] for i in g], [back[i] for i in g]) for g in groups])
    t_load = time.monotonic() - t0
    assert all(r.ok_prefix == len(r.outcomes) for r in res.values()), "a load failed"
    cpu = cpu_s() - cpu0
    assert all(bytes(back[i]) == rows[i] for i in range(n)), "a loaded row differs"
    tier.close()
    return backend, t_store, t_lookup, t_load, cpu


def main():
    args = parse()
    build = Path(args.build).resolve()
    sys.path.insert(0, str(build / "python"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
    os.environ.setdefault("KVTIER_FAULTFS_BIN", str(build / "bin" / "kvtier_faultfs"))
    import faultfs
    import kvtier

    why = faultfs.FaultFs.unavailable()
    if why:
        raise SystemExit(why)
    work = Path(args.dir or tempfile.mkdtemp(prefix="kvtier-auto-backend-"))
    print(f"{args.blocks} blocks of {args.row_bytes} bytes, jobs of {args.keys_per_job} keys, "
          f"median of {args.rounds} rounds; {os.cpu_count()} CPUs")
    print("| added latency | io_backend | engine run | store s | lookup s | load s | CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    try:
        for delay in [int(d) for d in args.delays.split(",")]:
            for engine in args.engines.split(","):
                backing, mnt = work / f"b-{engine}-{delay}", work / f"m-{engine}-{delay}"
                with faultfs.FaultFs(str(backing), str(mnt)) as fs:
                    if delay:
                        fs.delay("all", delay)
                    runs = [run_round(kvtier, mnt, engine, args, f"{engine}-{delay}-{r}") for r in range(args.rounds)]
                backend = runs[0][0]
                med = [statistics.median(r[i] for r in runs) for i in (1, 2, 3, 4)]
                print(f"| {delay} ms | {engine} | {backend} | {med[0]:.2f} | {med[1]:.3f} | {med[2]:.2f} | {med[3]:.2f} |",
                      flush=True)
                shutil.rmtree(backing, ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
