#!/usr/bin/env python3
"""SGLang HiCache L3 backends on one disk: SGLang's HiCacheFile against kvtier.sglang, and fio.

    bench/sglang_backends.py DIR [--pages 1024] [--rounds 3] [--checksums on|off] [--json FILE]

Runs ../shared/sglang/bench_backends.py (SGLang's factory and controller call
pattern, a mock host pool with SGLang's layout; MHA page_first, page size 64, 32 layers, 2 KV
heads x 128, bf16: 2 MiB pages) for ``--backend file`` (HiCacheFile) and for kvtier (``dynamic``,
``kvtier.sglang.KvtierHiCacheStorage``) on the zero-copy path (interface_v1) and on the generic
path, one subprocess per backend and round, the backends interleaved round by round, all under
DIR. Each run stores --pages pages, syncs, drops the page cache (root), and loads them back.

bench_backends.py prints GB/s and process CPU seconds per GB (GB = 10^9 bytes); this wrapper also
times each 128-page read batch (the controller's batch_get / batch_get_v1 call, wrapped in the
child process; SGLang's code is run, not copied) and reports the p99 over all rounds. fio then
writes and reads the same number of files of the same size on DIR (io_uring, direct=1, iodepth
16 = kvtier's default n_read_threads / n_write_threads), page cache dropped in between.

Prints one table of medians with the ratios kvtier/HiCacheFile and kvtier/fio beside the issue's
targets (>= 3x HiCacheFile's GB/s both ways, <= 0.3x its CPU per GB, >= 0.9x fio).
Needs: /usr/bin/python3 with torch, ../shared/sglang, kvtier built (build/python), fio (optional).
"""

import argparse
import json
import os
import re
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("KVTIER_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
KIT = os.path.join(SHARED, "sglang")
CONFIGS = {  # name -> bench_backends.py arguments
    "HiCacheFile": ["--backend", "file"],
    "kvtier v1": ["--backend", "dynamic", "--module-path", "kvtier.sglang", "--class-name", "KvtierHiCacheStorage",
                  "--extra-config", json.dumps({"interface_v1": 1, "root_dir": "{root}"}), "--path", "v1"],
    "kvtier generic": ["--backend", "dynamic", "--module-path", "kvtier.sglang", "--class-name",
                       "KvtierHiCacheStorage", "--extra-config", json.dumps({"root_dir": "{root}"}),
                       "--path", "generic"],
}


def align_pools():
    """Makes the mock host pools' kv_buffer start on a 4 KiB boundary, as SGLang's pinned host
    pools on CUDA do (cudaHostAlloc gives whole pages); the mock uses torch.zeros, 64-byte
    aligned. Same shape, dtype and pointer math: only the base address moves."""
    import torch
    from hicache_harness import mock_host_pool

    for cls in (mock_host_pool.MockMHAHostPool, mock_host_pool.MockMLAHostPool):
        def init(self, _orig=cls.init_kv_buffer):
            t = _orig(self)
            nbytes = t.numel() * t.element_size()
            raw = torch.zeros(nbytes + 4096, dtype=torch.uint8)
            off = (-raw.data_ptr()) % 4096
            return raw[off:off + nbytes].view(t.dtype).view(t.shape)

        cls.init_kv_buffer = init


def child(argv):
    """Runs bench_backends.py in this process with the controller's load calls timed."""
    from hicache_harness import controller

    if os.environ.get("KVTIER_BENCH_ALIGNED_POOL") == "1":
        align_pools()

    samples = []
    for name in ("_page_get_zero_copy", "_generic_page_get"):
        orig = getattr(controller.Controller, name)

        def timed(self, keys, *a, _orig=orig, **kw):
            t0 = time.perf_counter()
            out = _orig(self, keys, *a, **kw)
            if len(keys) == 128:
                samples.append(time.perf_counter() - t0)
            return out

        setattr(controller.Controller, name, timed)
    sys.argv = [os.path.join(KIT, "bench_backends.py")] + argv
    rc = 0
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        rc = e.code or 0
    print("BATCH_SECONDS " + json.dumps(samples), flush=True)
    return rc


def backend_args(name, checksums):
    """CONFIGS[name], with kvtier's checksum_blocks off when asked (HiCacheFile has none)."""
    argv = list(CONFIGS[name])
    if name.startswith("kvtier") and checksums == "off":
        i = argv.index("--extra-config") + 1
        argv[i] = json.dumps(dict(json.loads(argv[i]), checksum_blocks=False))
    return argv


def run_one(tree, name, args, root):
    # The caller's PYTHONPATH last: a kvtier package built elsewhere (a carried one) is found
    # when build/python has none.
    path = [tree, os.path.join(REPO, "build", "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--"] + backend_args(name, args.checksums) + [
        "--pages", str(args.pages), "--rounds", "1", "--root", root]
    out = subprocess.run(argv, env=env, capture_output=True, text=True).stdout
    med = re.search(r"^\s*median\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    lat = re.search(r"^BATCH_SECONDS (.*)$", out, re.M)
    if not med or "FAILED" in out:
        sys.exit(f"{name}: bench_backends.py failed:\n{out}")
    set_gbs, set_cpu, _sync, _exists, get_gbs, get_cpu = map(float, med.groups())
    return {"set_gbs": set_gbs, "set_cpu": set_cpu, "get_gbs": get_gbs, "get_cpu": get_cpu,
            "batches": json.loads(lat.group(1)) if lat else [], "dropped": "yes" in out.split("cache dropped")[-1]}


def drop_caches():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def fio(directory, pages, page_bytes):
    if shutil.which("fio") is None:
        return None
    os.makedirs(directory, exist_ok=True)
    common = [f"--directory={directory}", f"--bs={page_bytes}", f"--filesize={page_bytes}", f"--nrfiles={pages}",
              "--ioengine=io_uring", "--direct=1", "--iodepth=16", "--openfiles=32", "--output-format=json",
              "--name=sglang-pages"]
    out = {}
    for rw, extra in (("write", ["--create_on_open=1"]), ("read", [])):
        os.sync()
        drop_caches()
        p = subprocess.run(["fio", f"--rw={rw}"] + extra + common, capture_output=True, text=True)
        job = json.loads(p.stdout)["jobs"][0][rw]
        out[rw] = job["bw_bytes"] / 1e9
    shutil.rmtree(directory, ignore_errors=True)
    return out


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))] if xs else float("nan")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory on the disk to measure (work files are removed afterwards)")
    ap.add_argument("--pages", type=int, default=1024, help="pages per run (2 MiB each; default 1024)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default=",".join(CONFIGS), help="comma-separated, of: " + ", ".join(CONFIGS))
    ap.add_argument("--aligned-pool", action="store_true", help="host pools start on a 4 KiB boundary (as SGLang's "
                    "pinned CUDA host pools do) for every backend; default: the mock's torch.zeros, 64-byte aligned")
    ap.add_argument("--checksums", choices=("on", "off"), default="on",
                    help="kvtier's CRC32C per page (checksum_blocks; default on, as shipped)")
    ap.add_argument("--json", help="also write the medians (and fio's GB/s) here")
    args = ap.parse_args()
    os.environ["KVTIER_BENCH_ALIGNED_POOL"] = "1" if args.aligned_pool else "0"
    names = args.backends.split(",")
    work = tempfile.mkdtemp(prefix="kvtier-sglang-bench-", dir=os.path.abspath(args.dir))
    tree = os.path.join(work, "tree")
    subprocess.run(["bash", os.path.join(KIT, "assemble.sh"), tree], check=True, capture_output=True)
    rows = {n: [] for n in names}
    try:
        for r in range(args.rounds):
            for n in names:
                root = os.path.join(work, f"{n.replace(' ', '-')}-r{r}")
                rows[n].append(run_one(tree, n, args, root))
                shutil.rmtree(root, ignore_errors=True)
                x = rows[n][-1]
                print(f"round {r + 1} {n:>15}: set {x['set_gbs']:.3f} GB/s {x['set_cpu']:.3f} CPU s/GB, get "
                      f"{x['get_gbs']:.3f} GB/s {x['get_cpu']:.3f} CPU s/GB, 128-page read batch max "
                      f"{max(x['batches'] or [float('nan')]) * 1e3:.0f} ms", file=sys.stderr, flush=True)
        f = fio(os.path.join(work, "fio"), args.pages, 2 << 20)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = report(rows, f, args)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"pages": args.pages, "rounds": args.rounds, "checksums": args.checksums,
                       "aligned_pool": args.aligned_pool, "medians": med, "fio": f}, out, indent=1)
    return 0


def report(rows, f, args):
    med = {n: {k: statistics.median(x[k] for x in xs) for k in ("set_gbs", "set_cpu", "get_gbs", "get_cpu")}
           for n, xs in rows.items()}
    for n, xs in rows.items():
        med[n]["p99_ms"] = p99([s for x in xs for s in x["batches"]]) * 1e3
        med[n]["n_batches"] = sum(len(x["batches"]) for x in xs)
    dropped = all(x["dropped"] for xs in rows.values() for x in xs)
    print(f"kvtier checksums {args.checksums}; "
          f"host pool {'4 KiB-aligned' if args.aligned_pool else 'as the mock allocates it (64-byte aligned)'}; "
          f"{args.pages} pages x 2 MiB per run, {args.rounds} interleaved rounds, medians; page cache dropped "
          f"before reads: {'yes' if dropped else 'NO (not root?)'}; GB = 10^9 bytes")
    cols = list(med)
    print("| | " + " | ".join(cols) + (" | fio |" if f else " |"))
    print("|---" * (len(cols) + 1 + bool(f)) + "|")
    for key, label in (("set_gbs", "set GB/s"), ("set_cpu", "set CPU s/GB"), ("get_gbs", "get GB/s"),
                       ("get_cpu", "get CPU s/GB"), ("p99_ms", "p99 of a 128-page read batch, ms")):
        fio_cell = ""
        if f:
            fio_cell = f" {f['write']:.3f} |" if key == "set_gbs" else f" {f['read']:.3f} |" if key == "get_gbs" else " |"
        print(f"| {label} | " + " | ".join(f"{med[c][key]:.3f}" if "ms" not in key else f"{med[c][key]:.0f} "
                                          f"(n={med[c]['n_batches']})" for c in cols) + " |" + fio_cell)
    base = med.get("HiCacheFile")
    for n in cols:
        if not n.startswith("kvtier") or base is None:
            continue
        m = med[n]
        line = (f"{n}/HiCacheFile: set {m['set_gbs'] / base['set_gbs']:.2f}x, get {m['get_gbs'] / base['get_gbs']:.2f}x "
                f"(target >= 3x); CPU/GB set {m['set_cpu'] / base['set_cpu']:.2f}x, get "
                f"{m['get_cpu'] / base['get_cpu']:.2f}x (target <= 0.3x); p99 {m['p99_ms'] / base['p99_ms']:.2f}x")
        if f:
            line += f"; {n}/fio: set {m['set_gbs'] / f['write']:.2f}x, get {m['get_gbs'] / f['read']:.2f}x (target >= 0.9x)"
        print(line)
    return med


if __name__ == "__main__":
    sys.exit(main())
