"""Proves that `kvtier gc` (one-shot and --watch) and `kvtier fsck --repair` publish vLLM's
BlockRemoved for exactly the block files they delete (issue 41, docs/kv-events.md "The tools").

Method: block trees are written directly in the layout (FORMAT.md L2-L8); each test lists the
tree before and after the run, and decodes what a subscriber got with python3-zmq and
python3-msgpack in vLLM's layout (multipart (topic, seq, payload), payload [ts, [event...]],
event ["BlockRemoved", [hash...], medium, (group_idx)]). The set of (hash, group) removed must
equal the set of block files that disappeared, each once:

* one-shot gc --max-bytes: the test's SUB socket is bound, the CLI connects to it (the endpoint
  rule); the sequence numbers must run from 0 without a gap (nothing lost to ZeroMQ's slow joiner:
  the publisher holds its first batch until this socket's subscription arrives). Hashes are vLLM's int (the last 8
  bytes, big-endian) by default, the raw bytes with --events-hash-encoding bytes; --events-topic
  "{volume}" and --events-medium are honoured; an SGLang namespace's pages are their key strings.
* hostile names planted in an orphaned namespace (uppercase hex, wrong length, non-hex, a newline)
  are never removed, and no event carries anything but a valid hash (an int, 1 to 32 bytes, or a
  64-lowercase-hex str).
* fsck --repair: the short and the corrupt block it removes are published.
* a file of several blocks (FORMAT.md L197-L202) whose block-hash record is written here by hand,
  byte for byte as L198 says (in the attribute, or at the start of the last page), is published
  block by block by gc and by fsck --repair; a record copied beside another name, or none, names
  the file's stem alone.
* gc --watch: every pass on one publisher; the test fetches everything through the replay socket
  while the watch runs; the metrics file carries kvtier_kv_events_*.
* a bad endpoint (malformed, an address in use, a port out of range, a host that does not
  resolve) fails with an error naming --events-endpoint, exit 2 (fsck: 8), and deletes nothing;
  `bench fs` refuses it as usage too (exit 2).
Skipped (one line) where python3-zmq or python3-msgpack is missing.
"""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

import block_hash_records

zmq = pytest.importorskip("zmq", reason="python3-zmq is needed to subscribe to kvtier's KV events")
msgpack = pytest.importorskip("msgpack", reason="python3-msgpack is needed to decode kvtier's KV events")

NS = "m_0123456789ab"
ROW = 4096
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def block_path(root, ns, h, group=0, rank=0):
    return root / f"{ns}_r{rank}" / h[:3] / f"{h[3:5]}_g{group}" / f"{h}.bin"


def make_blocks(root, n, salt, ns=NS, size=ROW, base_age_s=100000, groups=1, hex_chars=64):
    """n blocks of `size` bytes, block i last used base_age_s - i seconds ago, groups round-robin."""
    os.makedirs(root / ns, exist_ok=True)
    now = time.time()
    out = []
    for i in range(n):
        h = hashlib.sha256(f"{salt}{i}".encode()).hexdigest()[:hex_chars]
        p = block_path(root, ns, h, group=i % groups)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"\0" * size)
        t = now - base_age_s + i
        os.utime(p, (t, t))
        out.append(p)
    return out


def files(root):
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def removed_keys(gone):
    """(stem, group) of every block file in `gone` (relative paths)."""
    out = set()
    for rel in gone:
        parts = rel.split("/")
        if len(parts) == 4 and parts[3].endswith(".bin"):
            out.add((parts[3][:-4], int(parts[2].split("_g")[1])))
    return out


def wire_hash(stem, encoding="int", engine="vllm"):
    if engine == "sglang":
        return stem
    raw = bytes.fromhex(stem)
    return int.from_bytes(raw[-8:], "big") if encoding == "int" else raw


class Subscriber:
    """A SUB socket bound on a free loopback port: the CLI connects to tcp://127.0.0.1:<port>."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.port = self.sub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{self.port}"

    def run(self, kvtier_bin, *args, timeout_s=60):
        """Runs the CLI while serving this socket (ZeroMQ attaches a connecting peer, and sends it
        the subscription, only when the SUB socket is called), then drains what is left.
        Returns (the CompletedProcess-like result, [(topic, seq, payload decoded)])."""
        p = subprocess.Popen([kvtier_bin, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        out = []
        end = time.time() + timeout_s
        while p.poll() is None and time.time() < end:
            self._take(out, 20)
        stdout, stderr = p.communicate(timeout=max(1, end - time.time()))
        while self._take(out, 500):
            pass
        return subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), out

    def _take(self, out, wait_ms):
        if not self.sub.poll(wait_ms):
            return False
        topic, seq, payload = self.sub.recv_multipart()
        out.append((topic, int.from_bytes(seq, "big"), msgpack.unpackb(payload, raw=False)))
        return True

    def close(self):
        self.sub.close()
        self.ctx.term()


@pytest.fixture
def subscriber():
    s = Subscriber()
    yield s
    s.close()


def removals(messages, medium="STORAGE"):
    """[(hash, group)] of every BlockRemoved in order; checks the batch layout and the medium."""
    assert [m[1] for m in messages] == list(range(len(messages))), "seq from 0, no gap (slow joiner?)"
    out = []
    for _, _, payload in messages:
        ts, events = payload
        assert isinstance(ts, float)
        for e in events:
            assert e[0] == "BlockRemoved" and e[2] == medium, e
            assert len(e) in (3, 4)
            group = e[3] if len(e) == 4 else 0
            assert group != 0 or len(e) == 3, "vLLM leaves group_idx out for group 0"
            for h in e[1]:
                out.append((h, group))
    return out


def valid_hash(h):
    if isinstance(h, int):
        return 0 <= h < 2 ** 64
    if isinstance(h, bytes):
        return 1 <= len(h) <= 32
    return isinstance(h, str) and HEX64.match(h) is not None


def run(kvtier_bin, *args, timeout=60):
    return subprocess.run([kvtier_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("encoding", ["default", "bytes"])
def test_gc_publishes_exactly_what_it_removed(kvtier_bin, tmp_path, subscriber, encoding):
    make_blocks(tmp_path, 40, "a", groups=3)
    make_blocks(tmp_path, 10, "b", hex_chars=32, base_age_s=200000)
    before = files(tmp_path)
    extra = [] if encoding == "default" else ["--events-hash-encoding", "bytes"]
    r, messages = subscriber.run(kvtier_bin, "gc", tmp_path, "--max-bytes", 20 * ROW, "--collector-ttl", "1s",
                                 "--events-endpoint", subscriber.endpoint, "--events-topic", "kv@{volume}@m",
                                 "--events-medium", "SHARED_STORAGE", *extra)
    assert r.returncode == 0, r.stderr
    gone = before - files(tmp_path)
    assert len(gone) == 30
    assert {m[0] for m in messages} == {f"kv@{tmp_path}@m".encode()}
    got = removals(messages, medium="SHARED_STORAGE")
    want = {(wire_hash(s, "int" if encoding == "default" else "bytes"), g) for s, g in removed_keys(gone)}
    assert len(got) == len(set(got)) == 30, "each removal once"
    assert set(got) == want


def sglang_namespace(root, model):
    fields = {"inference_engine": "sglang", "format": "sglang-page/1", "model_name": model, "page_size": 4,
              "mem_layout": "page_first", "dtype": "float16", "k_bytes_per_token": 8, "v_bytes_per_token": 8,
              "layer_num": 2, "is_mla": False, "tp_size": 1, "pp_size": 1, "cp_size": 1, "page_bytes": 128}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    ns = model.replace("/", "_") + "_" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
    os.makedirs(root / ns)
    (root / ns / "config.json").write_text(json.dumps(fields, indent=2, sort_keys=True))
    return ns


def test_hostile_names_in_an_orphaned_namespace_never_reach_the_wire(kvtier_bin, tmp_path, subscriber):
    old = time.time() - 30 * 86400
    sg = sglang_namespace(tmp_path, "org/s")
    pages = make_blocks(tmp_path, 6, "p", ns=sg, size=128, base_age_s=30 * 86400)
    make_blocks(tmp_path, 6, "v", base_age_s=30 * 86400)  # a vLLM namespace without config.json
    make_blocks(tmp_path, 2000, "live", ns="live_0123456789ab", base_age_s=60)  # kept; a walk for the joiner
    shard = pages[0].parent
    hostile = ["A" * 64 + ".bin", "abc.bin", "a" * 63 + "\n.bin", "g" * 64 + ".bin", "a" * 66 + ".bin",
               pages[0].name.upper()]
    for name in hostile:
        (shard / name).write_bytes(b"x")
        os.utime(shard / name, (old, old))
    os.utime(tmp_path / sg / "config.json", (old, old))
    before = files(tmp_path)
    r, messages = subscriber.run(kvtier_bin, "gc", tmp_path, "--older-than", "1d", "--events-endpoint",
                                 subscriber.endpoint)
    assert r.returncode == 0, r.stderr
    after = files(tmp_path)
    for name in hostile:
        assert os.path.relpath(shard / name, tmp_path) in after, name
    got = removals(messages)
    assert all(valid_hash(h) for h, _ in got), got
    gone = before - after
    want = {(wire_hash(s, engine="sglang" if f"{sg}_r" in p else "vllm"), g)
            for p in gone for s, g in removed_keys([p])}
    assert len(want) == 12
    assert sorted(got, key=repr) == sorted(want, key=repr)


def test_fsck_repair_publishes_the_blocks_it_removes(kvtier_bin, tmp_path, subscriber):
    blocks = make_blocks(tmp_path, 3000, "f", groups=2)  # a first walk long enough for the joiner
    os.truncate(blocks[5], ROW // 2)
    os.truncate(blocks[6], 0)
    before = files(tmp_path)
    r, messages = subscriber.run(kvtier_bin, "fsck", tmp_path, "--repair", "--row-bytes", ROW, "--events-endpoint",
                                 subscriber.endpoint, "--events-hash-encoding", "int")
    assert r.returncode == 4, r.stdout + r.stderr  # repaired, but config_missing (L78) is left
    gone = before - files(tmp_path)
    assert gone == {os.path.relpath(blocks[i], tmp_path) for i in (5, 6)}
    got = removals(messages)
    assert sorted(got) == sorted((wire_hash(s), g) for s, g in removed_keys(gone))


def chunk_blocks(path, salt):
    """4 block hashes for the file at `path`, the last its stem's."""
    return [hashlib.sha256(f"{salt}{i}".encode()).digest() for i in range(3)] + [bytes.fromhex(path.stem)]


def test_a_file_of_several_blocks_is_published_block_by_block(kvtier_bin, tmp_path, subscriber):
    blocks = make_blocks(tmp_path, 12, "c")  # no config.json: its files may hold several blocks (L201)
    want = {}
    for i, p in enumerate(blocks):
        hashes = chunk_blocks(p, f"c{i}")
        if i % 3 == 0:  # in the attribute
            os.setxattr(p, block_hash_records.XATTR, block_hash_records.encode(hashes))
        elif i % 3 == 1:  # at the start of a last page after the row, as in a trailer
            with open(p, "ab") as f:
                f.write(block_hash_records.encode(hashes).ljust(4096, b"\0"))
        else:  # another file's record: not believed
            os.setxattr(p, block_hash_records.XATTR, block_hash_records.encode(chunk_blocks(blocks[0], "c0")))
            hashes = hashes[-1:]
        want[os.path.relpath(p, tmp_path)] = [int.from_bytes(h[-8:], "big") for h in hashes]
    before = files(tmp_path)
    r, messages = subscriber.run(kvtier_bin, "gc", tmp_path, "--max-bytes", 3 * ROW, "--collector-ttl", "1s",
                                 "--events-endpoint", subscriber.endpoint)
    assert r.returncode == 0, r.stderr
    gone = before - files(tmp_path)
    assert len(gone) >= 9
    got = [e[1] for _, _, payload in messages for e in payload[1]]
    assert sorted(got) == sorted(want[g] for g in gone), "one BlockRemoved per file, every block in order"


def test_fsck_repair_publishes_every_block_of_a_file_it_removes(kvtier_bin, tmp_path, subscriber):
    blocks = make_blocks(tmp_path, 3000, "g")  # a first walk long enough for the joiner
    hashes = chunk_blocks(blocks[7], "g7")
    os.setxattr(blocks[7], block_hash_records.XATTR, block_hash_records.encode(hashes))
    os.truncate(blocks[7], ROW // 2)
    r, messages = subscriber.run(kvtier_bin, "fsck", tmp_path, "--repair", "--row-bytes", ROW, "--events-endpoint",
                                 subscriber.endpoint)
    assert r.returncode == 4, r.stdout + r.stderr
    assert not blocks[7].exists()
    got = [e[1] for _, _, payload in messages for e in payload[1]]
    assert got == [[int.from_bytes(h[-8:], "big") for h in hashes]]


def replay_all(endpoint, timeout_ms=5000):
    """Every batch the replay socket holds, from seq 0: [(seq, payload decoded)]."""
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(endpoint)
    d.send_multipart([b"", (0).to_bytes(8, "big")])
    out = []
    try:
        while True:
            assert d.poll(timeout_ms), "replay answered"
            _, seq, payload = d.recv_multipart()
            seq = int.from_bytes(seq, "big", signed=True)
            if seq == -1:
                return out
            out.append((seq, msgpack.unpackb(payload, raw=False)))
    finally:
        d.close()
        ctx.term()


def wait_for(cond, timeout_s=30):
    end = time.time() + timeout_s
    while time.time() < end and not cond():
        time.sleep(0.05)
    return cond()


def files_made(root, salt, n):
    return {os.path.relpath(block_path(root, NS, hashlib.sha256(f"{salt}{i}".encode()).hexdigest()), root)
            for i in range(n)}


def test_gc_watch_publishes_every_pass_and_serves_replay(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 30, "w")
    first = files_made(root, "w", 30)
    replay = f"ipc://{tmp_path}/replay"
    metrics = tmp_path / "metrics.prom"
    p = subprocess.Popen([kvtier_bin, "gc", str(root), "--watch", "--max-bytes", str(10 * ROW), "--interval", "0.3s",
                          "--check-interval", "0.1s", "--collector-ttl", "1s", "--metrics-file", str(metrics),
                          "--events-endpoint", f"ipc://{tmp_path}/pub", "--events-replay-endpoint", replay],
                         stderr=subprocess.PIPE, text=True)
    published = lambda n: metrics.exists() and f"kvtier_kv_events_published_total {n}\n" in metrics.read_text()
    try:
        assert wait_for(lambda: len(files(root) & first) == 10 and published(20)), "the first pass trimmed"
        make_blocks(root, 10, "x", base_age_s=300000)  # older than all: the next pass takes them
        second = files_made(root, "x", 10)
        assert wait_for(lambda: not (files(root) & second) and published(30)), "the second pass trimmed"
        gone = (first | second) - files(root)
        batches = replay_all(replay)
        text = metrics.read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert len(gone) == 30
    got = removals([(b"", s, payload) for s, payload in batches])
    assert sorted(got) == sorted((wire_hash(s), g) for s, g in removed_keys(gone))
    for name in ("dropped_total 0", "batches_total", "replay_requests_total", "queue_depth", "names_skipped_total 0"):
        assert f"kvtier_kv_events_{name}" in text, name


def busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def resolver_says_no_such_host(host):
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as e:
        return e.errno == socket.EAI_NONAME
    return False


@pytest.mark.parametrize("cmd", ["gc", "fsck"])
def test_a_bad_endpoint_is_refused_and_nothing_is_deleted(kvtier_bin, tmp_path, cmd):
    blocks = make_blocks(tmp_path, 8, "e")
    os.truncate(blocks[0], 1)
    before = files(tmp_path)
    held = busy_port()
    bad = [("bogus://x", "bogus"), (f"tcp://*:{held.getsockname()[1]}", "bind"), ("tcp://*:99999", "not 1-65535")]
    if resolver_says_no_such_host("no-such-host.invalid"):  # a machine without a nameserver says "try again": taken
        bad.append(("tcp://no-such-host.invalid:5557", "resolve"))
    try:
        for endpoint, what in bad:
            args = ["--max-bytes", ROW] if cmd == "gc" else ["--repair"]
            r = run(kvtier_bin, cmd, tmp_path, *args, "--events-endpoint", endpoint)
            assert r.returncode == (2 if cmd == "gc" else 8), (endpoint, r.stdout, r.stderr)
            assert "--events-endpoint" in r.stderr and "kv_events_config.endpoint" in r.stderr, r.stderr
            assert what in r.stderr
            assert files(tmp_path) == before
    finally:
        held.close()
    r = run(kvtier_bin, cmd, tmp_path, "--events-medium", "DISK", "--events-endpoint", "tcp://127.0.0.1:1",
            *(["--repair"] if cmd == "fsck" else []))
    assert r.returncode == (2 if cmd == "gc" else 8) and "--events-medium" in r.stderr, r.stderr
    assert files(tmp_path) == before


def test_bench_fs_refuses_a_bad_endpoint_as_usage(kvtier_bin, tmp_path):
    """A bad --events-endpoint is a usage error of `bench fs` too: exit 2, the flag named, no rows."""
    (tmp_path / "b").mkdir()
    for endpoint, what in (("bogus://x", "bogus"), ("tcp://*:99999", "not 1-65535")):
        r = run(kvtier_bin, "bench", "fs", "--root", tmp_path / "b", "--row-bytes", "4096", "--rows", "8",
                "--events-endpoint", endpoint)
        assert r.returncode == 2, (endpoint, r.stdout, r.stderr)
        assert "--events-endpoint: kv_events_config.endpoint" in r.stderr and what in r.stderr, r.stderr
    # A high-water mark out of ZeroMQ's int range is named by its own flag, not --events-endpoint's.
    for hwm in ("-1", str(2**31)):
        r = run(kvtier_bin, "bench", "fs", "--root", tmp_path / "b", "--row-bytes", "4096", "--rows", "8",
                "--events-endpoint", "tcp://*:0", "--events-hwm", hwm)
        assert r.returncode == 2, (hwm, r.stdout, r.stderr)
        assert f"--events-hwm: Value {hwm} not in range 0 to 2147483647" in r.stderr, r.stderr
    assert not list((tmp_path / "b").rglob("*.bin"))
