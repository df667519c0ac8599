#!/usr/bin/python3
"""How fast `kvtier gc --watch --min-free` reacts to a burst of writes.

A tmpfs of --size MiB is mounted (root needed); one `kvtier gc --watch` guards a floor of half of
it (--min-free 50%, target 60%), sampling free space every --check-ms. A writer then stores 1 MiB
blocks (temp file + rename, as the tier does) at each rate given, writing 1.5x the volume in all,
and records free space after every block. Printed per rate: whether the writer ever got ENOSPC,
the lowest free space seen, how far below the floor that was (the overshoot), and the overshoot
as a multiple of what the writer writes in one check interval: the watch keeps up when it stays
at or under about 1. Rate 0 means as fast as the writer can.

Usage: sudo bench/gc_watch_reaction.py [--kvtier build/bin/kvtier] [--rates 8,32,128,0]
"""

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NS = "m_0123456789ab"
MIB = 1 << 20


def free_bytes(path):
    v = os.statvfs(path)
    return v.f_bavail * v.f_frsize


def write_block(root, i):
    h = hashlib.sha256(f"w{i}".encode()).hexdigest()
    d = root / f"{NS}_r0" / h[:3] / f"{h[3:5]}_g0"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f"{h}.bin_{i}.tmp"
    tmp.write_bytes(b"\1" * MIB)
    os.rename(tmp, d / f"{h}.bin")


def run_rate(kvtier, mnt, size_mib, rate_mib, check_ms):
    root = mnt / f"root{rate_mib}"
    (root / NS).mkdir(parents=True)
    floor = size_mib * MIB // 2
    w = subprocess.Popen([kvtier, "gc", str(root), "--watch", "--min-free", "50%", "--min-free-target", "60%",
                          "--interval", "1h", "--check-interval", f"{check_ms}ms", "--collector-ttl", "1s"],
                         stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # the lease (settling: a fraction of the TTL)
    lowest, enospc, start = free_bytes(mnt), False, time.monotonic()
    n = size_mib * 3 // 2
    for i in range(n):
        if rate_mib:
            time.sleep(max(0.0, start + i / rate_mib - time.monotonic()))
        try:
            write_block(root, i)
        except OSError:
            enospc = True
            time.sleep(0.01)
        lowest = min(lowest, free_bytes(mnt))
    elapsed = time.monotonic() - start
    w.send_signal(signal.SIGTERM)
    w.wait(timeout=30)
    subprocess.run(["rm", "-rf", str(root)], check=True)
    achieved = n / elapsed
    per_check = achieved * MIB * check_ms / 1000
    over = max(0, floor - lowest)
    return achieved, enospc, lowest, over, over / per_check


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvtier", default="build/bin/kvtier")
    ap.add_argument("--size", type=int, default=64, help="tmpfs size, MiB")
    ap.add_argument("--rates", default="8,32,128,0", help="writer rates, MiB/s (0: unthrottled)")
    ap.add_argument("--check-ms", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mnt = Path(tmp) / "tmpfs"
        mnt.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.size}m", "tmpfs", str(mnt)], capture_output=True)
        if r.returncode != 0:
            sys.exit(f"cannot mount a tmpfs (needs root): {r.stderr.decode().strip()}")
        try:
            print(f"tmpfs {a.size} MiB, floor {a.size // 2} MiB free, check every {a.check_ms} ms")
            print(f"{'rate MiB/s':>10} {'achieved':>9} {'ENOSPC':>7} {'lowest free MiB':>16} {'overshoot MiB':>14} "
                  f"{'x one check':>12}")
            for rate in (int(x) for x in a.rates.split(",")):
                ach, enospc, lowest, over, ratio = run_rate(a.kvtier, mnt, a.size, rate, a.check_ms)
                print(f"{rate or 'max':>10} {ach:9.0f} {str(enospc):>7} {lowest / MIB:16.1f} {over / MIB:14.1f} "
                      f"{ratio:12.2f}")
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


if __name__ == "__main__":
    main()
