"""One inference instance of tests/python/test_kv_events_index.py: a real process that opens a
kvtier front end on the shared root with kvtier's own KV event publisher on, and stores (or
loads) seeded random batches of a shared pool of keys, then closes (which sends what is queued).

    python3 kv_events_instance.py FRONT ROOT CONFIG_JSON POOL_JSON SEED ROUNDS MODE [PAUSE_MS]

POOL_JSON: a list of keys (hex), or of [key, [block hash, ...]] pairs: chunk files of that many
blocks (the namespace's blocks_per_file), whose stores ("fs" only: vLLM's front end has no way to
say them) give their block hashes, so the file records them (FORMAT.md L197-L202).

FRONT: "fs" (kvtier.FsTier, the Python front end) or "engine" (kvtier.VllmTier, the vLLM front
end's C++ core). MODE: "store" (each round stores 1-4 random keys of the pool), "load" (each round
loads 1-4 random keys: corrupt blocks found are removed, and announced) or "sweep" (loads every
key of the pool once, four at a time). Prints one JSON
line of counts after each part of its rounds (ROUNDS: "N" or "N1,N2,...", rounds PAUSE_MS apart),
then waits for a line, or the end, of its standard input before the next part (after the last:
before it closes), keeping its tier, publisher and replay socket open meanwhile.
"""

import json
import random
import sys
import time

import kvtier

ROW = 16384
NS = dict(kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])


class FsFront:
    def __init__(self, ns, config, blocks):
        self.tier = kvtier.FsTier(ns, ROW, config)
        self.blocks = blocks  # key -> its block hashes, for chunk files

    def run(self, keys, store, rng):
        rows = [bytearray(rng.randbytes(ROW)) if store else bytearray(ROW) for _ in keys]
        if store and self.blocks:
            job = self.tier.submit_store(keys, rows, block_hashes=[self.blocks[k] for k in keys])
        else:
            job = (self.tier.submit_store if store else self.tier.submit_load)(keys, rows)
        while True:
            for r in self.tier.wait(1000):
                if r.job_id == job:
                    return r.outcomes

    def close(self):
        self.tier.close()


class EngineFront:
    SLOTS = 8

    def __init__(self, ns, config, _blocks):
        self.rows = bytearray(self.SLOTS * ROW)
        self.tier = kvtier.VllmTier(ns, self.rows, ROW, config)
        self.next_job = 1

    def run(self, keys, store, rng):
        slots = list(range(len(keys)))
        if store:
            for s in slots:
                self.rows[s * ROW:(s + 1) * ROW] = rng.randbytes(ROW)
        job, self.next_job = self.next_job, self.next_job + 1
        (self.tier.submit_store if store else self.tier.submit_load)(job, keys, slots)
        self.tier.drain()
        for job_id, _, success, _, _, _ in self.tier.poll_finished():
            if job_id == job:
                return ["ok" if success else "failed"]
        return ["lost"]

    def close(self):
        self.tier.shutdown()


def batches(pool, rounds, mode, rng):
    """The key batches of a run: `rounds` random ones of 1-4 keys, or ("sweep") every key once."""
    if mode == "sweep":
        return [pool[i:i + 4] for i in range(0, len(pool), 4)]
    return [rng.sample(pool, rng.randint(1, 4)) for _ in range(rounds)]


def main(argv):
    front, root, config_json, pool_json, seed, rounds, mode = argv[:7]
    pause_s = int(argv[7]) / 1000 if len(argv) > 7 else 0
    rng = random.Random(int(seed))
    items = json.loads(pool_json)
    pool = [bytes.fromhex(k if isinstance(k, str) else k[0]) for k in items]
    blocks = {bytes.fromhex(k[0]): [bytes.fromhex(h) for h in k[1]] for k in items if not isinstance(k, str)}
    config = {"root_dir": root, **json.loads(config_json)}
    per_file = len(next(iter(blocks.values()))) if blocks else 1
    ns = kvtier.Namespace("kvtier-test/events-index", blocks_per_file=per_file, **NS)
    fe = (FsFront if front == "fs" else EngineFront)(ns, config, blocks)
    counts = {}
    for part in rounds.split(","):
        for keys in batches(pool, int(part), mode, rng):
            for outcome in fe.run(keys, mode == "store", rng):
                counts[outcome] = counts.get(outcome, 0) + 1
            time.sleep(pause_s)
        print(json.dumps(counts), flush=True)
        sys.stdin.readline()  # held (its publisher and replay socket live) until the test says go on
    fe.close()


if __name__ == "__main__":
    main(sys.argv[1:])
