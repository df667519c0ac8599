#!/usr/bin/python3
"""A KV-events subscriber for bench/kv_events_cost.sh: counts what a kvtier publisher sent.

Binds a SUB socket (subscribed to every topic) on a free loopback port and writes the port to
--port-file; the benchmark's tier connects to it (tcp://127.0.0.1:PORT), so no slow joiner loses
the first batches. Every message (topic, seq, payload) is decoded as vLLM's KVEventBatch
(msgpack [ts, [event, ...]], each event an array tagged by its class name, docs/kv-events.md),
and counted: batches, events by tag, the block hashes BlockStored named, sequence gaps
(batches lost on the way, e.g. at the PUB socket's high-water mark) and undecodable payloads.
--sleep-ms makes it a slow subscriber: it sleeps that long after each batch, with a small
receive high-water mark and kernel buffer, so the publisher's side fills up. On SIGTERM (or SIGINT) it writes its counts as JSON to --out and
exits 0.

Needs Debian's python3-zmq and python3-msgpack; exits 77 when either is missing.
"""
import argparse
import json
import os
import signal
import sys
import time

try:
    import msgpack
    import zmq
except ImportError as e:  # the caller reports 77 as "skipped"
    print(f"kv_events_sub: {e} (apt-get install python3-zmq python3-msgpack)", file=sys.stderr)
    sys.exit(77)


def cpu_seconds():
    return time.process_time()  # user + sys of this process


class Counts:
    def __init__(self):
        self.batches = 0
        self.events = 0
        self.by_tag = {}
        self.stored_hashes = 0  # the block hashes BlockStored events named (several a file of several blocks)
        self.seq_first = None
        self.seq_last = None
        self.seq_gaps = 0  # batches missing between consecutive seqs
        self.seq_restarts = 0  # a seq at or below the last one: a new source (or its restart)
        self.undecodable = 0
        self.first_recv_s = None
        self.last_recv_s = None
        self.cpu_at_first_s = 0.0

    def add(self, frames):
        now = time.monotonic()
        if self.first_recv_s is None:
            self.first_recv_s = now
            self.cpu_at_first_s = cpu_seconds()
        self.last_recv_s = now
        if len(frames) != 3 or len(frames[1]) != 8:
            self.undecodable += 1
            return
        seq = int.from_bytes(frames[1], "big", signed=True)
        if self.seq_last is not None:
            if seq > self.seq_last:
                self.seq_gaps += seq - self.seq_last - 1
            else:
                self.seq_restarts += 1
        if self.seq_first is None:
            self.seq_first = seq
        self.seq_last = seq
        try:
            ts, events = msgpack.unpackb(frames[2], raw=False)
            float(ts)
            tags = [e[0] for e in events]
            hashes = sum(len(e[1]) for e in events if e[0] == "BlockStored")
        except Exception:  # a payload that is not a KVEventBatch
            self.undecodable += 1
            return
        self.stored_hashes += hashes
        self.batches += 1
        self.events += len(tags)
        for t in tags:
            self.by_tag[t] = self.by_tag.get(t, 0) + 1

    def as_json(self):
        span = (self.last_recv_s - self.first_recv_s) if self.batches > 1 else 0.0
        cpu = cpu_seconds() - self.cpu_at_first_s if self.batches else 0.0
        return {"cpu_s": round(cpu, 4),  # this process's, from its first message on (not its start-up)
                "batches": self.batches, "events": self.events, "by_tag": self.by_tag,
                "stored_hashes": self.stored_hashes,
                "seq_first": self.seq_first, "seq_last": self.seq_last, "seq_gaps": self.seq_gaps,
                "seq_restarts": self.seq_restarts, "undecodable": self.undecodable,
                "receive_span_s": round(span, 4),
                "events_per_s": round(self.events / span, 1) if span > 0 else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True, help="where the bound port is written")
    ap.add_argument("--out", required=True, help="the counts, as JSON, on SIGTERM")
    ap.add_argument("--sleep-ms", type=float, default=0, help="sleep after each batch (a slow subscriber)")
    ap.add_argument("--rcvhwm", type=int, default=1000, help="the SUB socket's receive high-water mark")
    args = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVHWM, args.rcvhwm)
    if args.sleep_ms > 0:
        sub.setsockopt(zmq.RCVBUF, 4096)  # the kernel then holds few messages for us either
    sub.setsockopt(zmq.LINGER, 0)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(args.port_file + ".tmp", args.port_file)  # the script sees the whole number or nothing

    counts = Counts()
    while not stop:
        if not sub.poll(100):
            continue
        counts.add(sub.recv_multipart())
        if args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000.0)
    with open(args.out, "w") as f:
        json.dump(counts.as_json(), f)
    sub.close()
    ctx.term()


if __name__ == "__main__":
    main()
