"""A router's index of a shared volume, kept only from kvtier's KV events, equals the blocks on the
volume, exactly (issue 41, docs/kv-events.md).

Method, all real processes on one root: a subscriber (kv_router.py: python3-zmq and python3-msgpack
decoding vLLM's event layout, never kvtier's code) binds one SUB socket; two instances of different
front ends (kvtier.FsTier, the Python front end, and kvtier.VllmTier, the vLLM front end's core;
kv_events_instance.py) and a `kvtier gc --watch` connect to it, each with its own topic and replay
socket. In a seeded run: both instances store overlapping random batches of one pool of keys at
once; the subscriber is killed (SIGKILL) while they are still up and restarted, and catches up
through their replay sockets; the test tears some block files; an instance loads every key (the torn blocks are removed and
announced); the first instance restarts (a new sequence from 0) with max_bytes, storing more, so
its tier evicts; gc --watch trims the volume further; a hostile file name planted in a shard
directory must never reach the wire. At the end the index, every batch applied in ts order, must
equal the set of block files on the volume, and every hash on the wire must be vLLM's int form.
The figures (events, removals, replays, final sizes) are printed. Seed: KVTIER_TEST_SEED, printed.

The same run over chunk files of 4 blocks (blocks_per_file 4; FORMAT.md L197-L202): the stores
give every block's hash, so every event names blocks, not files, and the index must equal every
block the files hold (read back as the rules say: block_hash_records.py). There both instances are
kvtier.FsTier (vLLM's front end cannot give its stores the blocks: docs/kv-events.md, "Limits");
the sweep, whose corrupt removals read the records, is still vLLM's front end.
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("zmq", reason="python3-zmq is needed to subscribe to kvtier's KV events")
pytest.importorskip("msgpack", reason="python3-msgpack is needed to decode kvtier's KV events")

import block_hash_records  # noqa: E402
import kvtier  # noqa: E402
import kv_router  # noqa: E402

HERE = Path(__file__).resolve().parent
ROW = 16384
VOLUME = "pvc-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Volume:
    """The run's endpoints, pool of keys and processes."""

    def __init__(self, tmp_path, seed, per_file):
        self.root, self.journal = tmp_path / "vol", tmp_path / "journal.jsonl"
        self.root.mkdir()
        self.rng = random.Random(seed)
        self.sub = f"tcp://127.0.0.1:{free_port()}"
        self.replays = {name: f"tcp://127.0.0.1:{free_port()}" for name in ("a", "b", "gc")}
        hashes = kvtier.block_hashes(list(range(16 * 256 * per_file)), seed=f"index-{seed}")
        keys = [k.hex() for k in kvtier.chunk_keys(hashes, blocks_per_chunk=per_file)]
        # Chunk files: each key with its blocks (the last one the key), for the stores to give.
        self.pool = keys if per_file == 1 else [
            [k, [h.hex() for h in hashes[i * per_file:(i + 1) * per_file]]] for i, k in enumerate(keys)]
        self.router = None

    def topic(self, name):
        return f"kv@{VOLUME}@{name}"

    def events(self, name):
        return {"enable_kv_cache_events": True, "endpoint": self.sub, "replay_endpoint": self.replays[name],
                "topic": "kv@{volume}@" + name, "volume_id": VOLUME}

    def start_router(self):
        argv = [sys.executable, str(HERE / "kv_router.py"), "--bind", self.sub, "--journal", str(self.journal)]
        for name, endpoint in self.replays.items():
            argv += ["--replay", f"{self.topic(name)}={endpoint}"]
        self.router = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)  # bound before a publisher connects (a publisher also waits up to 1 s for it)

    def instance(self, front, name, pool, rounds, mode, extra=None):
        config = {"kv_events_config": self.events(name), **(extra or {})}
        argv = [sys.executable, str(HERE / "kv_events_instance.py"), front, str(self.root), json.dumps(config),
                json.dumps(pool), str(self.rng.getrandbits(32)), str(rounds), mode]
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def done(proc, what):
    """The instance's counts, once a part of its rounds is over (it stays open, publishing and replaying)."""
    line = proc.stdout.readline()
    assert line, f"{what} ended early: {proc.stderr.read()[-2000:]}"
    return json.loads(line)


def go_on(*procs):
    for p in procs:
        p.stdin.write("\n")
        p.stdin.flush()


def finish(proc, what, timeout=120):
    """Lets the instance close (its last batches go out) and waits for it."""
    _, err = proc.communicate("\n", timeout=timeout)
    assert proc.returncode == 0, f"{what} exited {proc.returncode}: {err[-2000:]}"


def block_files(root):
    """{int hash} of every block the layout-named block files on the volume hold (what a load
    could find): a file's record's blocks, else its name's."""
    out = set()
    for p in root.rglob("*.bin"):
        stem = p.stem
        if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem):
            out.update(int.from_bytes(h[-8:], "big") for h in block_hash_records.file_blocks(p))
    return out


def file_count(root):
    return sum(1 for _ in root.rglob("*.bin"))


def tear_some(vol, n):
    files = sorted(vol.root.rglob("*.bin"))
    torn = vol.rng.sample(files, min(n, len(files)))
    for p in torn:
        os.truncate(p, ROW // 2)
    return torn


def plant_hostile(vol):
    """A file in a real shard directory under a name the layout never writes (uppercase hex)."""
    shard = next(p.parent for p in vol.root.rglob("*.bin"))
    bad = shard / ("AB" * 32 + ".bin")
    bad.write_bytes(b"\0" * ROW)
    return bad


def run_gc_watch(kvtier_bin, vol, max_rows):
    argv = [kvtier_bin, "gc", str(vol.root), "--watch", "--max-bytes", str(max_rows * ROW), "--interval", "0.3s",
            "--events-endpoint", vol.sub, "--events-replay-endpoint", vol.replays["gc"],
            "--events-topic", "kv@{volume}@gc", "--events-volume-id", VOLUME]
    gc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while file_count(vol.root) > max_rows and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.6)  # one more pass
    gc.send_signal(signal.SIGTERM)
    _, err = gc.communicate(timeout=30)
    assert gc.returncode == 0, err[-2000:]


def stop_router(vol):
    time.sleep(1.0)  # the last batches' way
    vol.router.send_signal(signal.SIGTERM)
    out, _ = vol.router.communicate(timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def wire_counts(batches):
    counts = {"batches": len(batches), "stored": 0, "removed": 0}
    for b in batches:
        for kind, hashes, medium, group in b["events"]:
            assert medium == "STORAGE" and group is None, (kind, medium, group)
            assert all(isinstance(h, int) and 0 <= h < 2**64 for h in hashes), hashes
            counts[kind] = counts.get(kind, 0) + len(hashes)
    return counts


@pytest.mark.parametrize("per_file", [1, 4], ids=["blocks", "chunks_of_4"])
def test_a_routers_index_equals_the_volume(tmp_path, kvtier_bin, per_file):
    seed = int(os.environ.get("KVTIER_TEST_SEED", random.SystemRandom().getrandbits(32)))
    print(f"KVTIER_TEST_SEED={seed}")
    vol = Volume(tmp_path, seed, per_file)
    vol.start_router()
    # Of 200 keys: the second half still stores new blocks, while the subscriber is down
    a = vol.instance("fs", "a", vol.pool[:200], "50,50", "store")
    b = vol.instance("engine" if per_file == 1 else "fs", "b", vol.pool[:200], "50,50", "store")
    done(a, "instance a"), done(b, "instance b")
    vol.router.kill()  # SIGKILL: the journal is all it keeps
    vol.router.wait()
    go_on(a, b)  # the second half's batches reach no one
    stores = [done(a, "instance a"), done(b, "instance b")]
    vol.start_router()  # catches up through a's and b's replay sockets
    finish(a, "instance a")
    finish(b, "instance b")
    torn = tear_some(vol, 4)
    sweeper = vol.instance("engine", "b", vol.pool[:200], "1", "sweep")
    sweep = done(sweeper, "instance b's sweep")
    finish(sweeper, "instance b's sweep")
    hostile = plant_hostile(vol)
    restarted_a = vol.instance("fs", "a", vol.pool, 40, "store", {"max_bytes": 16 * ROW})
    restarted = done(restarted_a, "instance a restarted")
    finish(restarted_a, "instance a restarted")
    run_gc_watch(kvtier_bin, vol, 10)
    router = stop_router(vol)
    batches = kv_router.read_journal(vol.journal)
    index = {h for (_, _, h) in kv_router.index_of(batches)}
    on_disk = block_files(vol.root)
    counts = wire_counts(batches)
    print(json.dumps({"blocks_per_file": per_file, "stores": stores, "sweep": sweep, "restarted": restarted,
                      "torn": len(torn), "router": router, "wire": counts, "index": len(index),
                      "on_disk": len(on_disk), "files": file_count(vol.root)}))
    assert hostile.exists(), "a name the layout never writes is not the tier's to remove"
    assert counts["removed"] > 0 and counts["stored"] > 0
    assert router["replayed"] > 0, "the restarted subscriber caught up through replay"
    assert index == on_disk, (sorted(index - on_disk)[:5], sorted(on_disk - index)[:5])
