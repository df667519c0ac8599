"""kvtier.VllmTier and kvtier.FsTier used wrongly, from several threads, and at scale.

Proves: every method called while another thread runs VllmTier.shutdown() or FsTier.close()
completes or raises KvtierError('unavailable'), and each accepted job still gets exactly one
result; shutdown()/close() stop admitting jobs first, so a thread that keeps submitting cannot hold
them up -- these races run in a child interpreter with a time limit, so a crash or a deadlock
fails the test instead of the test run; results not yet polled survive shutdown()/close() and
has_pending_work() answers after it; a load naming one slot or buffer twice, or a slot or
buffer that a job not yet polled uses, is refused; a job id stays taken until its result is
polled; drain(None) waits with no limit and drain(0) only checks; 1-byte block hashes get
vLLM's path and never stick in the lookup batch; slots are 1-D integers only; a wrong argument
names the argument without quoting a row buffer.
"""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import kvtier

ROW = 8192
NS_ARGS = dict(kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])


@pytest.fixture
def ns():
    return kvtier.Namespace("kvtier-test/misuse", **NS_ARGS)


@pytest.fixture
def engine(tmp_path, ns):
    rows = bytearray(16 * ROW)
    et = kvtier.VllmTier(ns, rows, ROW, {"root_dir": str(tmp_path)})
    yield et
    et.shutdown()


@pytest.fixture
def tier(tmp_path, ns):
    t = kvtier.FsTier(ns, ROW, {"root_dir": str(tmp_path / "fs")})
    yield t
    t.close()


def keys_for(n, salt):
    return kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * n)), seed=salt))


def refused(call, code="invalid_argument"):
    with pytest.raises(kvtier.KvtierError) as e:
        call()
    assert e.value.code == code, str(e.value)
    return str(e.value)


def poll_all(tier, n, timeout_s=20):
    """FsTier results until n arrived (or the deadline)."""
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += tier.wait(100)
    return got


# ---- races, in a child interpreter --------------------------------------------------------------

PRELUDE = """
import sys, threading, time
import kvtier
ROW = 8192
ns = kvtier.Namespace("kvtier-test/race", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
keys = kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * 64)), seed="race"))
kvtier.set_log_sink(lambda level, message: None)  # kvtier's threads call into Python to log
bad, accepted, results, rounds = [], [], [], [0]

def call(fn, *args):
    try:
        fn(*args)
        return "ok"
    except kvtier.KvtierError as e:
        if e.code == "invalid_argument" and "not yet polled" in e.message:
            return "busy"  # a row still in use by this thread's earlier job: the documented refusal
        if e.code not in ("unavailable", "timed_out"):
            bad.append(repr(e))
        return e.code

def race(worker, close):
    # Four workers call in while two threads close at once, after 40 rounds.
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    while rounds[0] < 40:
        time.sleep(0.001)
    second = threading.Thread(target=close)
    second.start()
    close()
    second.join()
    return threads, second

def finish(threads, extra):
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread never returned"
    results.extend(extra)
    ids = sorted(results)
    assert bad == [], bad
    assert accepted and ids == sorted(accepted), (len(ids), len(accepted))
    print("ok", len(accepted), "jobs")
"""

ENGINE_RACE = PRELUDE + """
rows = bytearray(64 * ROW)
et = kvtier.VllmTier(ns, rows, ROW, {"root_dir": sys.argv[1]})

def worker(t):
    for i in range(10**9):
        jid = t + 4 * i
        key = [keys[jid % 64]]
        submit = et.submit_store if i % 2 == 0 else et.submit_load
        calls = [(et.lookup, key[0], f"r{jid}"), (et.flush_lookups,), (et.has_pending_work,), (et.stats,),
                 (et.metrics,), (et.prometheus_text,), (et.block_path, key[0]), (et.drain, 5),
                 (et.finish_request, f"r{jid}")]
        outcome = call(submit, jid, key, [jid % 64])
        if outcome == "ok":
            accepted.append(jid)
        for c in calls:
            call(*c)
        results.extend(r[0] for r in et.poll_finished())
        rounds[0] += 1
        if outcome == "unavailable":
            return

threads, second = race(worker, et.shutdown)
assert et.lookup(keys[0], "late") == 0 and et.backend
finish(threads + [second], [r[0] for r in et.poll_finished()])
assert not et.has_pending_work()
"""

FS_RACE = PRELUDE + """
tier = kvtier.FsTier(ns, ROW, {"root_dir": sys.argv[1]})
ids = {}

def worker(t):
    src = bytearray(ROW)
    dst = [bytearray(ROW) for _ in range(8)]
    for i in range(10**9):
        key = [keys[(t + 4 * i) % 64]]
        if i % 3 == 2:
            job = lambda: ids.setdefault(tier.submit_load(key, [dst[i % 8]]), t)
        elif i % 3 == 1:
            job = lambda: ids.setdefault(tier.submit_lookup(key), t)
        else:
            job = lambda: ids.setdefault(tier.submit_store(key, [src]), t)
        outcome = call(job)
        for c in [(tier.wait_idle, 5), (tier.metrics,), (tier.prometheus_text,), (tier.block_path, key[0]),
                  (lambda: tier.backend,), (lambda: tier.o_direct,)]:
            call(*c)
        results.extend(r.job_id for r in tier.poll() + tier.wait(2))
        rounds[0] += 1
        if outcome == "unavailable":
            return

threads, second = race(worker, tier.close)
accepted.extend(ids)
finish(threads + [second], [r.job_id for r in tier.poll()])
assert tier.poll() == []
"""

# A thread that submits as fast as it can (one key again and again: after the first store each is a
# cheap "exists" check) until it is refused; the old code admitted it for ever while closing.
BUSY_SUBMITTER = PRELUDE + """
rows = bytearray(64 * ROW)
engine = sys.argv[2] == "engine"
t = kvtier.VllmTier(ns, rows, ROW, {"root_dir": sys.argv[1]}) if engine else \\
    kvtier.FsTier(ns, ROW, {"root_dir": sys.argv[1]})
src = bytearray(ROW)
stopped_by = []

def submitter():
    deadline = time.monotonic() + 20
    i = 0
    while time.monotonic() < deadline:
        i += 1
        try:
            if engine:
                t.submit_store(i, keys[:1], [i % 64])
            else:
                t.submit_store(keys[:1], [src])
        except kvtier.KvtierError as e:
            stopped_by.append(e.code)
            return
        rounds[0] += 1
        if i % 64 == 0:
            t.poll_finished() if engine else t.poll()
    stopped_by.append("deadline")

th = threading.Thread(target=submitter)
th.start()
while rounds[0] < 20:
    time.sleep(0.001)
t.shutdown() if engine else t.close()
th.join()
assert stopped_by == ["unavailable"], stopped_by
print("ok")
"""


def run_child(script, *args, timeout=120):
    """Runs `script` in a fresh interpreter; a crash, a hang or a failed assert fails the test."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child did not finish in {timeout} s (a deadlock?)\n{e.stdout}\n{e.stderr}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.startswith("ok"), proc.stdout


def test_vllm_tier_methods_racing_shutdown_complete_or_are_unavailable(tmp_path):
    run_child(ENGINE_RACE, tmp_path)


def test_fs_tier_methods_racing_close_complete_or_are_unavailable(tmp_path):
    run_child(FS_RACE, tmp_path)


@pytest.mark.parametrize("kind", ["engine", "fs"])
def test_shutdown_and_close_stop_admissions_before_waiting(tmp_path, kind):
    run_child(BUSY_SUBMITTER, tmp_path, kind)


# ---- results survive shutdown -----------------------------------------------------------------------

def test_results_not_yet_polled_survive_engine_shutdown(engine):
    keys = keys_for(4, "survive")
    for i in range(3):
        engine.submit_store(i + 1, keys[i:i + 1], [i])
    assert engine.lookup(keys[3], "r") == 2  # never flushed
    engine.shutdown()
    assert engine.has_pending_work() is True
    assert sorted(r[0] for r in engine.poll_finished()) == [1, 2, 3]
    assert engine.has_pending_work() is False and engine.poll_finished() == []
    assert engine.metrics()["rows_stored"] == 3 and engine.stats()["jobs_in_flight"] == 0
    refused(lambda: engine.submit_store(9, keys[:1], [0]), "unavailable")
    refused(engine.flush_lookups, "unavailable")
    refused(engine.prometheus_text, "unavailable")
    assert engine.lookup(keys[0], "r") == 0
    engine.drain()  # nothing left to wait for


def test_drain_spells_no_limit_none_and_zero_only_checks(engine):
    keys = keys_for(1, "drain-spelling")
    engine.submit_store(1, keys, [0])
    engine.drain(None)  # no limit: returns once the store has its result
    engine.drain(0)  # idle now: the check passes at once
    assert [r[:3] for r in engine.poll_finished()] == [(1, False, True)]


def test_results_not_yet_polled_survive_fs_tier_close(tier):
    keys = keys_for(2, "survive-fs")
    store = tier.submit_store(keys[:1], [bytearray(ROW)])
    lookup = tier.submit_lookup(keys)
    tier.wait_idle()
    tier.close()
    assert sorted(r.job_id for r in tier.poll()) == sorted([store, lookup])
    assert tier.poll() == [] and tier.metrics()["rows_stored"] == 1
    refused(lambda: tier.submit_lookup(keys), "unavailable")


# ---- rows and ids in use -----------------------------------------------------------------------------

def test_a_load_naming_one_slot_twice_is_refused(engine):
    keys = keys_for(2, "one-slot-twice")
    assert "slot 3" in refused(lambda: engine.submit_load(1, keys, [3, 3]))
    engine.submit_store(2, keys, [3, 3])  # two reads of one row are fine
    engine.drain(20000)
    assert [r[:3] for r in engine.poll_finished()] == [(2, False, True)]


def test_engine_slots_of_jobs_not_yet_polled_are_refused_to_conflicting_jobs(engine):
    keys = keys_for(6, "conflicts")
    engine.submit_store(1, keys[0:1], [2])
    engine.submit_load(2, keys[1:2], [4])
    refused(lambda: engine.submit_load(3, keys[2:3], [2]))   # would overwrite what the store writes
    refused(lambda: engine.submit_load(4, keys[3:4], [4]))   # two loads into one row
    refused(lambda: engine.submit_store(5, keys[4:5], [4]))  # would store half-loaded bytes
    engine.drain(20000)
    refused(lambda: engine.submit_load(3, keys[2:3], [2]))   # finished, not yet polled
    assert sorted(r[0] for r in engine.poll_finished()) == [1, 2]
    engine.submit_load(3, keys[0:1], [2])
    engine.drain(20000)
    assert [r[:3] for r in engine.poll_finished()] == [(3, True, True)]


def test_a_job_id_stays_taken_until_its_result_is_polled(engine):
    keys = keys_for(2, "id-taken")
    engine.submit_store(5, keys[:1], [0])
    engine.drain(20000)
    refused(lambda: engine.submit_store(5, keys[1:], [1]))
    assert [r[0] for r in engine.poll_finished()] == [5]
    engine.submit_store(5, keys[1:], [1])
    engine.drain(20000)
    assert [r[0] for r in engine.poll_finished()] == [5]


def test_fs_tier_refuses_a_buffer_twice_in_a_load_and_buffers_in_use(tier):
    keys = keys_for(2, "one-buffer-twice")
    buf = bytearray(ROW)
    assert "twice" in refused(lambda: tier.submit_load(keys, [buf, buf]))
    region = memoryview(bytearray(2 * ROW))
    refused(lambda: tier.submit_load(keys, [region[0:ROW], region[4096:4096 + ROW]]))  # overlapping views
    src, dst = bytearray(b"\x07" * ROW), bytearray(ROW)
    store = tier.submit_store(keys[:1], [src])
    refused(lambda: tier.submit_load(keys[:1], [src]))        # a store not yet polled reads it
    load = tier.submit_load(keys[1:], [dst])                  # a miss, but it writes dst
    refused(lambda: tier.submit_store(keys[1:], [dst]))
    refused(lambda: tier.submit_load(keys[1:], [memoryview(dst)]))
    assert sorted(r.job_id for r in poll_all(tier, 2)) == sorted([store, load])
    both = tier.submit_load(keys, [region[0:ROW], region[ROW:]])  # polled: free; adjacent views are fine
    (done,) = poll_all(tier, 1)
    assert done.job_id == both and done.outcomes == ["ok", "miss"] and bytes(region[0:ROW]) == bytes(src)


# ---- short block hashes ------------------------------------------------------------------------------

def test_one_byte_block_hashes_get_vllms_path_and_never_stick(engine, tier, ns):
    one, two = kvtier.make_key(b"\x01"), kvtier.make_key(b"\x01\x02")
    assert tier.block_path(one).endswith("_r0/01/_g0/01.bin")  # hash_hex[:3], hash_hex[3:5] as vLLM
    assert tier.block_path(two).endswith("_r0/010/2_g0/0102.bin")
    assert ns.block_path(one).endswith("/01/_g0/01.bin")
    assert engine.lookup(one, "r") == 2
    engine.flush_lookups()
    deadline = time.monotonic() + 20
    while engine.has_pending_work() and time.monotonic() < deadline:
        time.sleep(0.002)
    assert engine.lookup(one, "r") == 0 and not engine.has_pending_work()
    engine.submit_store(1, [one, two], [0, 1])
    engine.drain(20000)
    assert [r[:3] for r in engine.poll_finished()] == [(1, False, True)]
    assert engine.lookup(one, "r") == 1


# ---- slots --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("slots", [1.99, [1.99], ["2"], "2", 3, [[1]], np.array([[1]]), np.array([1.5]),
                                   [True], None, b"\x01", {1: 1}], ids=repr)
def test_slots_must_be_one_dimensional_integers(engine, slots):
    assert "slots" in refused(lambda: engine.submit_store(1, keys_for(1, "slots"), slots))
    assert not engine.has_pending_work()


@pytest.mark.parametrize("slots", [[1], (1,), range(1, 2), [np.int64(1)], np.array([1]),
                                   np.array([1], dtype=np.int32), np.array([1], dtype=np.uint8)], ids=repr)
def test_integer_slots_of_any_kind_are_accepted(engine, slots):
    engine.submit_store(1, keys_for(1, "slots-ok"), slots)
    engine.drain(20000)
    assert [r[:3] for r in engine.poll_finished()] == [(1, False, True)]


# ---- errors never quote a row buffer -----------------------------------------------------------------

def test_wrong_arguments_are_named_not_quoted(tmp_path, ns, tier):
    big = bytearray(1 << 20)  # its repr would be 4 MB
    keys = keys_for(1, "no-quote")
    cases = [
        (lambda: kvtier.VllmTier(ns, big, "8192", {"root_dir": str(tmp_path)}), "row_bytes"),
        (lambda: kvtier.VllmTier("ns", big, ROW, {"root_dir": str(tmp_path)}), "namespace"),
        (lambda: kvtier.VllmTier(ns, big, ROW), "config"),
        (lambda: tier.submit_store(5, [big]), "keys"),
        (lambda: tier.submit_load(keys, big), "rows"),
        (lambda: tier.submit_store(keys, [big], 1), "at most 2"),
        (lambda: tier.submit_store(keys, rows=[big], slots=[0]), "slots"),
    ]
    for call, name in cases:
        with pytest.raises((kvtier.KvtierError, TypeError)) as e:
            call()
        assert name in str(e.value) and len(str(e.value)) < 500, str(e.value)[:300]
