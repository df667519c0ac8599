#!/usr/bin/env python3
"""Filesystem calls per block: vLLM's own fs tier and kvtier.vllm.KvtierFsTier under vLLM's manager.

Each tier runs under vLLM's real tiering manager (tests/python/vllm_harness.py) on a fresh
kvtier_faultfs mount, whose per-op counters ("counters": every FUSE call reaches the daemon, no
entry, attribute or page caching, so each one is a round trip a network filesystem would make
unless its client cached it) are read around each phase. Keys are made so that pairs share a
shard directory ("<hhh>/<hh>_g0"). Phases, each divided by the blocks it concerns:

  lookup miss (no shard)   the lookups that settle a new prompt whose shards do not exist
  store (fresh shard)      storing those prompts (shard directories made)
  lookup miss (shard)      lookups of new keys whose shard directories exist
  store (present shard)    storing them, right after (kvtier: its shard directory fds still held)
  hit: lookup + load      a second engine (fresh manager and tier: no directory held) fetches
                           the first keys: the manager's lookup finds each in the fs tier and
                           reads it into its CPU tier, from which the request loads. (The store's
                           engine would answer from its own CPU tier.)
                           tests/integration/fs_tier_dirfd_test.cc prints kvtier's counts per
                           tier call, through held directories and by path.

    /usr/bin/python3 bench/fs_calls.py --build build --vllm-tree DIR [--prompts 8] [--tiers vllm,kvtier]

Needs root (or fusermount3) and /dev/fuse, the kvtier package and kvtier_faultfs built in --build,
and a tree made by ../shared/vllm/assemble.sh.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--vllm-tree", required=True, help="a tree made by ../shared/vllm/assemble.sh")
    ap.add_argument("--prompts", type=int, default=8, help="prompts of 4 blocks per phase")
    ap.add_argument("--tiers", default="vllm,kvtier")
    return ap.parse_args()


def keys_for(make_offload_key, prompts, salt):
    """`prompts` lists of 4 keys; salt 0 and 1 give keys pairwise in the same shard directory."""
    out = []
    for p in range(prompts):
        keys = []
        for c in range(4):
            n = p * 4 + c
            prefix = ((n * 2654435761) & 0xFFFFF).to_bytes(3, "big")  # 2.5 bytes name the shard
            keys.append(make_offload_key(prefix + bytes([salt]) + os.urandom(28), 0))
        out.append(keys)
    return out


class Counter:
    def __init__(self, fs):
        self.fs, self.last = fs, fs.counters()

    def quiesce(self):
        """Waits until the mount sees no call for 0.5 s (a tier's start-up walk is not a per-block cost)."""
        while True:
            time.sleep(0.5)
            if self.fs.counters() == self.last:
                return
            self.last = self.fs.counters()

    def take(self):
        now = self.fs.counters()
        delta = {k: v - self.last.get(k, 0) for k, v in now.items() if v != self.last.get(k, 0)}
        self.last = now
        return delta


def run(tier, opts, work):
    from faultfs import FaultFs
    import vllm_harness as h
    from vllm.v1.kv_offload.base import make_offload_key

    rows = {}
    with FaultFs(work / f"{tier}-backing", work / f"{tier}-mnt", binary=Path(opts.build) / "bin" / "kvtier_faultfs") as fs:
        root = Path(fs.mountpoint) / "root"
        cfg = h.vllm_tier(root) if tier == "vllm" else h.kvtier_tier(root)
        first = keys_for(make_offload_key, opts.prompts, 0)
        second = keys_for(make_offload_key, opts.prompts, 1)
        blocks = 4 * opts.prompts
        eng = h.Engine([cfg], cpu_rows=8)
        c = Counter(fs)
        c.quiesce()

        def store(prompts, miss_name, store_name):
            ctxs = []
            for keys in prompts:
                ctx = eng.request()
                assert eng.settle(keys, ctx) == 0
                ctxs.append((ctx, keys))
            rows[miss_name] = c.take()
            for ctx, keys in ctxs:  # one prompt at a time: the CPU tier holds 8 rows
                eng.step(stores=[(ctx, keys)], finished=[ctx])
                eng.idle()
            rows[store_name] = c.take()

        def fetch(engine, prompts, name):
            # Under vLLM's manager a secondary-tier hit is promoted (read into the CPU tier) while
            # the lookup settles; the request's load is then served from the CPU tier.
            for keys in prompts:
                n, data = engine.fetch(keys)
                assert n == len(keys) and data == [h.content(k) for k in keys], (n, name)
            engine.idle()
            rows[name] = c.take()

        store(first, "lookup miss (no shard)", "store (fresh shard)")
        store(second, "lookup miss (shard)", "store (present shard)")
        eng2 = h.Engine([cfg], cpu_rows=8)
        c.quiesce()
        fetch(eng2, first, "hit: lookup + load (fresh engine)")
        eng2.shutdown()
        eng.shutdown()
    return rows, blocks


def main():
    opts = args()
    os.environ.setdefault("KVTIER_FAULTFS_BIN", str(Path(opts.build).resolve() / "bin" / "kvtier_faultfs"))
    sys.path[:0] = [str(REPO / "tests" / "python"), str(REPO / "tests" / "support"), opts.vllm_tree,
                    str(Path(opts.build).resolve() / "python")]
    work = Path(tempfile.mkdtemp(prefix="kvtier-fs-calls-"))
    table = {}
    for tier in opts.tiers.split(","):
        rows, blocks = run(tier, opts, work)
        for phase, delta in rows.items():
            n = blocks
            table.setdefault(phase, {})[tier] = (sum(delta.values()) / n, delta, n)
    tiers = opts.tiers.split(",")
    print("| phase | " + " | ".join(f"{t} calls/block" for t in tiers) + " |")
    print("|---|" + "---|" * len(tiers))
    for phase, per in table.items():
        print(f"| {phase} | " + " | ".join(f"{per[t][0]:.1f}" for t in tiers if t in per) + " |")
    print()
    for phase, per in table.items():
        for t in tiers:
            if t in per:
                total, delta, n = per[t]
                print(f"{phase:28s} {t:7s} {n:3d} blocks: " +
                      " ".join(f"{k}={v / n:.2f}" for k, v in sorted(delta.items())))


if __name__ == "__main__":
    main()
