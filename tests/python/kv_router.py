"""A router's index of a shared volume, kept from KV events only, as llm-d's indexer or Dynamo's
router keeps one: the subscriber process of tests/python/test_kv_events_index.py.

It decodes with the layout of vLLM's event classes (vllm/distributed/kv_events.py at vLLM commit
b4e69e0af33f: msgspec structs with array_like=True, tag=True; a batch is [ts, [event, ...]]),
using Debian's python3-zmq and python3-msgpack, never kvtier's code. One SUB socket is bound;
every source (instances, collectors) connects to it with its own topic and sequence numbers. A
batch is appended to a journal as it arrives, so a subscriber killed and restarted knows the last
sequence of each source and asks that source's replay socket for the rest (vLLM's protocol:
[b"", start_seq] to a ROUTER, replies (b"", seq, payload) until seq -1). A source whose sequence
restarts at 0 is a restarted instance. The index merges the sources by batch ts.

    python3 kv_router.py --bind tcp://127.0.0.1:P --journal J [--replay TOPIC=ENDPOINT ...]
"""

import argparse
import json
import signal
import sys
import time

import msgpack
import zmq


def hash_key(h):
    """A hash field as a JSON-able key: int as int, bytes as "b:<hex>", a page key as "s:<key>"."""
    if isinstance(h, int) and not isinstance(h, bool):
        return h
    if isinstance(h, bytes):
        return "b:" + h.hex()
    if isinstance(h, str):
        return "s:" + h
    raise ValueError(f"a block hash of type {type(h).__name__} is outside vLLM's encodings")


def decode_event(e):
    """vLLM's array-like tagged event -> (kind, [hash keys], medium, group_idx)."""
    tag = e[0]
    if tag == "BlockStored":  # block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...
        return "stored", [hash_key(h) for h in e[1]], e[6] if len(e) > 6 else None, e[9] if len(e) > 9 else None
    if tag == "BlockRemoved":  # block_hashes, medium, (group_idx)
        return "removed", [hash_key(h) for h in e[1]], e[2] if len(e) > 2 else None, e[3] if len(e) > 3 else None
    if tag == "AllBlocksCleared":
        return "cleared", [], None, None
    raise ValueError(f"unknown event tag {tag!r}")


def decode_batch(payload):
    ts, events = msgpack.unpackb(payload, raw=False)
    assert isinstance(ts, float), "a batch's ts is a float64"
    return ts, [decode_event(e) for e in events]


def read_journal(path):
    """The batches recorded so far: dicts of topic, seq, ts, events (decoded)."""
    batches = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):  # a line cut by a kill is not a batch
                    batches.append(json.loads(line))
    except FileNotFoundError:
        pass
    return batches


def index_of(batches):
    """{(medium, group, hash)} after applying every batch in ts order (then source, seq)."""
    index = set()
    for b in sorted(batches, key=lambda b: (b["ts"], b["topic"], b["inc"], b["seq"])):
        for kind, hashes, medium, group in b["events"]:
            for h in hashes:
                key = (medium, group, h)
                if kind == "stored":
                    index.add(key)
                elif kind == "removed":
                    index.discard(key)
            if kind == "cleared":
                index.clear()
    return index


class Router:
    def __init__(self, bind, journal, replays):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.bind(bind)
        self.journal_path, self.replays = journal, replays
        self.last = {}  # topic -> (incarnation, last seq)
        for b in read_journal(journal):
            self.last[b["topic"]] = (b["inc"], b["seq"])
        self.journal = open(journal, "a")
        self.gaps = self.replayed = 0

    def record(self, topic, seq, payload, inc):
        ts, events = decode_batch(payload)
        self.journal.write(json.dumps({"topic": topic, "inc": inc, "seq": seq, "ts": ts, "events": events}) + "\n")
        self.journal.flush()
        self.last[topic] = (inc, seq)

    def replay(self, topic, start):
        """Asks `topic`'s replay socket for every batch from `start` on; records what is new."""
        endpoint = self.replays.get(topic)
        if endpoint is None:
            return
        req = self.ctx.socket(zmq.DEALER)
        req.setsockopt(zmq.LINGER, 0)
        req.connect(endpoint)
        req.send_multipart([b"", start.to_bytes(8, "big")])
        inc = self.last.get(topic, (0, -1))[0]
        while req.poll(5000):
            _, seq_bytes, payload = req.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq < 0:
                break
            if seq > self.last.get(topic, (inc, -1))[1]:
                self.record(topic, seq, payload, inc)
                self.replayed += 1
        req.close()

    def on_message(self, topic, seq, payload):
        inc, last = self.last.get(topic, (0, -1))
        if seq == 0 and last >= 0:
            inc, last = inc + 1, -1  # the source restarted: a new sequence
        if seq <= last:
            return  # already had it (from a replay)
        if seq > last + 1:
            self.gaps += 1
            self.last[topic] = (inc, last)
            self.replay(topic, last + 1)
            if self.last[topic][1] >= seq:
                return
        self.record(topic, seq, payload, inc)

    def catch_up(self):
        """At a restart: whatever each known source sent since the journal's last batch."""
        for topic, (_, last) in list(self.last.items()):
            self.replay(topic, last + 1)

    def run(self):
        self.catch_up()
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while not stop:
            if self.sub.poll(100):
                topic, seq_bytes, payload = self.sub.recv_multipart()
                self.on_message(topic.decode(), int.from_bytes(seq_bytes, "big"), payload)
        print(json.dumps({"gaps": self.gaps, "replayed": self.replayed}), flush=True)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--bind", required=True)
    p.add_argument("--journal", required=True)
    p.add_argument("--replay", action="append", default=[], help="TOPIC=ENDPOINT")
    a = p.parse_args(argv)
    replays = dict(r.split("=", 1) for r in a.replay)
    Router(a.bind, a.journal, replays).run()


if __name__ == "__main__":
    main(sys.argv[1:])
