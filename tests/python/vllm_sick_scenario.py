"""One secondary tier on a sick faultfs mount, driven by vLLM's real tiering manager, in a child
interpreter (shared by tests/python/test_vllm_sick_volume.py and bench/sick_volume_vllm.py).

Why a child: on a hung mount a tier may never give a thread back (vLLM's own fs tier joins its
threads in shutdown), and the claim under test is that the process exits by itself while the
mount is still hung. So the parent mounts (tests/support/faultfs.py), runs this file with a
budget, kills it when the budget passes, and releases the mount only after the child is gone.

The child steers the mount itself through the daemon's control socket, so a fault starts exactly
between two manager calls. It prints one ``SICK {json}`` line per finished phase (flushed), so a
parent that had to kill it still knows how far it got. Phases, all through the manager's calls
(vllm_harness.Engine: lookup / on_schedule_end / prepare_store / complete_store / shutdown):

  stored   healthy: N prompts stored and cascaded; the first is then only on the mount
  primed   healthy: the first prompt looked up until the manager promotes it (HIT_PENDING), so
           its load job is submitted at the next step, after the fault starts
  fault    the condition is applied (``stopped``: the server is stopped (SIGSTOP), so every call
           waits in the kernel, unread by the server, as on a dead NFS or FUSE server;
           ``hung``: every op but flush hangs in the server; ``slow``: every op
           takes 200 ms; ``failing``: EIO on reads, ENOSPC on writes; ``none``)
  load     steps until the promotion's load job has a result (or the phase budget passes),
           then the same request asks again: 0 hits means vLLM recomputes
  lookup   a new request asks keys never stored, until each is decided (HIT/MISS) or the budget
  store    a new request stores new prompts; steps until the cascade's jobs have results
  metrics  kvtier's counters (the tier's metrics() and the manager's get_stats())
  recover  (optional) the child releases the mount and waits for the same tier to come back
  shutdown the manager's shutdown(), timed
  exit     the interpreter is about to exit normally

``check`` mode instead opens a fresh tier on the root and fetches every prompt stored before
(byte-exact) and stores a new one: the mount works again.

Run: python3 vllm_sick_scenario.py '<json args>' (see ``main``). Times are CLOCK_MONOTONIC,
which is system-wide, so the parent can compare them with its own.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "support"
MARK = "SICK "
# Every faultfs op but flush: a process holding a FUSE fd whose FLUSH is never answered cannot
# finish exiting (even SIGKILL waits), which no tier can avoid; see docs/sick-volumes.md.
HANG_OPS = ("lookup", "open", "read", "write", "xattr", "rename", "unlink", "mkdir", "readdir", "statfs",
            "utimens", "truncate", "chmod", "symlink", "readlink")
SLOW_MS = 200


# ---- parent side (no vLLM imports) ------------------------------------------------------------

def child_command(args):
    return [sys.executable, str(Path(__file__).resolve()), json.dumps(args)]


def run_child(args, budget_s, env=None, exit_grace_s=10.0):
    """Runs the scenario; kills it (SIGKILL) when ``budget_s`` passes, or ``exit_grace_s`` after
    it said it is exiting (an exit that takes longer is stuck, and waiting on proves nothing). Returns a dict: events
    (phase -> payload), rc, killed, reaped (False: even SIGKILL did not end it within 10 s),
    start/end (monotonic), output (its stdout+stderr, for failure messages), proc (to reap it
    once the mount is released when it was not reaped)."""
    import threading

    start = time.monotonic()
    proc = subprocess.Popen(child_command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, text=True)
    lines = []  # read on a thread: a child that cannot be reaped still told us how far it got
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    killed, reaped = False, True
    try:
        wait_exit(proc, lines, start + budget_s, exit_grace_s)
    except subprocess.TimeoutExpired:
        killed = True
        proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a hung FUSE call the server never lets go
            reaped = False
    end = time.monotonic()
    reader.join(2)
    out = "".join(list(lines))
    return {"events": parse_events(out), "rc": proc.returncode, "killed": killed, "reaped": reaped,
            "start": start, "end": end, "output": out, "proc": proc}


def wait_exit(proc, lines, deadline, exit_grace_s):
    said_exit = None
    while proc.poll() is None:
        now = time.monotonic()
        if said_exit is None and any(line.startswith(MARK + '{"phase": "exit"') for line in list(lines)):
            said_exit = now
        if now >= deadline or (said_exit is not None and now - said_exit >= exit_grace_s):
            raise subprocess.TimeoutExpired(proc.args, now)
        time.sleep(0.05)


def parse_events(text):
    events = {}
    for line in text.splitlines():
        if line.startswith(MARK):
            payload = json.loads(line[len(MARK):])
            events[payload.pop("phase")] = payload
    return events


# ---- child side -------------------------------------------------------------------------------

def emit(phase, **payload):
    print(MARK + json.dumps({"phase": phase, "t": time.monotonic(), **payload}), flush=True)


def control(socket_path):
    """A FaultFs handle that only steers (the parent owns the mount and its daemon)."""
    from faultfs import FaultFs

    ctl = FaultFs.__new__(FaultFs)
    ctl.control = socket_path
    return ctl


def wait_stopped(pid, timeout_s=5.0):
    """Waits until every thread of `pid` is stopped. kill() only queues SIGSTOP: a server thread
    could still take one more call before it stops, and a call the server has taken but not
    answered is no longer the kernel's to give back (docs/sick-volumes.md)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.01)
    raise RuntimeError(f"the faultfs server {pid} did not stop within {timeout_s} s")


def apply_condition(ctl, condition, daemon_pid=None):
    if condition == "stopped":
        os.kill(daemon_pid, signal.SIGSTOP)
        wait_stopped(daemon_pid)
    elif condition == "hung":
        for op in HANG_OPS:
            ctl.hang(op)
    elif condition == "slow":
        ctl.delay("all", SLOW_MS)
    elif condition == "failing":
        ctl.fail("read", "EIO")
        ctl.fail("write", "ENOSPC")
    elif condition != "none":
        raise ValueError(f"unknown condition {condition!r}")


class Recorder:
    """Wraps the tier instance's job calls, as the manager makes them, to see each job's fate."""

    def __init__(self, tier):
        self.submitted = {}  # job_id -> (kind, monotonic time)
        self.finished = {}  # job_id -> (success, monotonic time)
        self.since = 0.0
        self._wrap(tier, "submit_load", "load")
        self._wrap(tier, "submit_store", "store")
        polled = tier.get_finished_jobs

        def get_finished_jobs():
            results = list(polled())
            for r in results:
                self.finished[r.job_id] = (bool(r.success), time.monotonic())
            return results

        tier.get_finished_jobs = get_finished_jobs

    def _wrap(self, tier, name, kind):
        call = getattr(tier, name)

        def submit(job):
            self.submitted[job.job_id] = (kind, time.monotonic())
            return call(job)

        setattr(tier, name, submit)

    def jobs(self, kind):
        """(submitted, ok, failed) among jobs of ``kind`` submitted since ``self.since``."""
        ids = [j for j, (k, t) in self.submitted.items() if k == kind and t >= self.since]
        ok = sum(1 for j in ids if self.finished.get(j, (False,))[0])
        failed = sum(1 for j in ids if j in self.finished and not self.finished[j][0])
        return len(ids), ok, failed

    def all_finished(self, kind):
        submitted, ok, failed = self.jobs(kind)
        return submitted > 0 and ok + failed == submitted

    def latest_finish(self, kind):
        times = [self.finished[j][1] for j, (k, t) in self.submitted.items()
                 if k == kind and t >= self.since and j in self.finished]
        return max(times) if times else None


class Timed:
    """The longest single manager call: every call must return at once, sick mount or not."""

    def __init__(self):
        self.max_s = 0.0

    def __call__(self, fn, *a):
        t0 = time.monotonic()
        try:
            return fn(*a)
        finally:
            self.max_s = max(self.max_s, time.monotonic() - t0)


def prime_load(eng, keys, budget_s):
    """Looks ``keys`` up (healthy) until the manager promotes them; returns the request. The
    promotion's submit_load happens at the next step, so the fault set up in between hits it."""
    from vllm.v1.kv_offload.base import LookupResult

    ctx = eng.request()
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        answers = [eng.m.lookup(k, ctx) for k in keys]
        if all(a in (LookupResult.HIT_PENDING, LookupResult.HIT) for a in answers):
            return ctx
        eng.step()
        time.sleep(0.3)  # let every existence check of the batch finish, so all promote together
    raise AssertionError(f"stored keys not promoted within {budget_s} s (healthy mount)")


def step_until(eng, timed, done, budget_s):
    deadline = time.monotonic() + budget_s
    while not done() and time.monotonic() < deadline:
        timed(eng.step)
        time.sleep(0.01)
    return done()


def ask(eng, keys, ctx, timed, budget_s):
    """Per key, the manager's first definite answer (HIT or MISS) and when; None if undecided."""
    from vllm.v1.kv_offload.base import LookupResult

    t0, answers = time.monotonic(), {}

    def decide():
        for i, k in enumerate(keys):
            if i not in answers:
                r = timed(eng.m.lookup, k, ctx)
                if r in (LookupResult.HIT, LookupResult.MISS):
                    answers[i] = (r.name, time.monotonic() - t0)
        return len(answers) == len(keys)

    deadline = time.monotonic() + budget_s
    while not decide() and time.monotonic() < deadline:
        timed(eng.step)
        time.sleep(0.01)
    return [answers.get(i) for i in range(len(keys))]


def load_phase(eng, rec, ctx, keys, h, timed, budget_s):
    """The primed promotion runs on the sick mount; then the request asks again (vLLM's next
    step): HIT rows are loaded to the "GPU" and checked; 0 hits means vLLM recomputes."""
    t0 = time.monotonic()
    finished = step_until(eng, timed, lambda: rec.all_finished("load"), budget_s)
    submitted, ok, failed = rec.jobs("load")
    end = rec.latest_finish("load")
    answers = ask(eng, keys, ctx, timed, budget_s) if finished else [None] * len(keys)
    hits = 0
    for a in answers:
        if a is None or a[0] != "HIT":
            break
        hits += 1
    exact = None
    if hits:
        exact = eng.load(keys[:hits], ctx) == [h.content(k) for k in keys[:hits]]
    return {"submitted": submitted, "ok": ok, "failed": failed, "finished": finished,
            "result_s": None if end is None else end - t0, "hits_after": hits if finished else None,
            "reask_decided": sum(a is not None for a in answers), "byte_exact": exact}


def lookup_phase(eng, keys, timed, budget_s):
    ctx = eng.request()
    answers = ask(eng, keys, ctx, timed, budget_s)
    decided = [a for a in answers if a is not None]
    return ctx, {"asked": len(keys), "decided": len(decided), "miss": sum(a[0] == "MISS" for a in decided),
                 "hit": sum(a[0] == "HIT" for a in decided),
                 "decided_within_s": max((a[1] for a in decided), default=None)}


def store_phase(eng, rec, prompts, timed, budget_s):
    t0 = time.monotonic()
    for keys in prompts:
        ctx = eng.request()
        timed(eng.step, [(ctx, keys)], [ctx])
    finished = step_until(eng, timed, lambda: rec.all_finished("store"), budget_s)
    submitted, ok, failed = rec.jobs("store")
    end = rec.latest_finish("store")
    return {"submitted": submitted, "ok": ok, "failed": failed, "finished": finished,
            "result_s": None if end is None else end - t0}


def kvtier_metrics(eng):
    """kvtier's counters, from the tier (metrics()) and through the manager (get_stats())."""
    tier = eng.tiers[0]
    if not hasattr(tier, "_tier"):
        return None
    m = tier._tier.metrics()
    out = {k: m[k] for k in ("root_up", "roots_down", "deadline_misses", "requests_stuck", "load_errors",
                             "store_errors", "lookup_errors", "rows_dropped")}
    stats = eng.m.get_stats()
    data = stats.data.get("data", {}) if stats is not None else {}
    out["manager_stats"] = {k: sum(v.values()) for k, v in data.items() if k.startswith("kvtier:")}
    return out


def recover(eng, ctl, budget_s, daemon_pid=None):
    """Releases the mount; the same tier must come back up by itself (its probe)."""
    if daemon_pid is not None:
        os.kill(daemon_pid, signal.SIGCONT)
    ctl.clear()
    ctl.release()
    t0 = time.monotonic()
    deadline = t0 + budget_s
    while time.monotonic() < deadline:
        eng.step()
        if eng.tiers[0]._tier.metrics()["root_up"] == 1:
            return {"root_up_after_s": time.monotonic() - t0}
        time.sleep(0.05)
    return {"root_up_after_s": None}


def tier_config(h, args):
    if args["tier"] == "vllm":
        return h.vllm_tier(args["root"])
    return h.kvtier_tier(args["root"], io_timeout_ms=args.get("io_timeout_ms", 500))


def scenario(h, args):
    ctl = control(args["control"])
    budget = args.get("phase_s", 10.0)
    prompts = [h.chunk_keys(i, args["salt"]) for i in range(4)]
    eng = h.Engine([tier_config(h, args)], cpu_rows=12)  # 16 chunks through 12 rows: prompt 0 only on disk
    rec = Recorder(eng.tiers[0])
    eng.store_prompts(prompts)
    emit("stored", prompts=len(prompts))
    load_ctx = prime_load(eng, prompts[0], budget)
    emit("primed")
    rec.since = time.monotonic()
    apply_condition(ctl, args["condition"], args.get("daemon_pid"))
    emit("fault", condition=args["condition"])
    timed = Timed()
    emit("load", **load_phase(eng, rec, load_ctx, prompts[0], h, timed, budget), max_call_s=timed.max_s)
    timed = Timed()
    fresh = [k for i in (100, 101) for k in h.chunk_keys(i, args["salt"] + "-new")]
    ask_ctx, result = lookup_phase(eng, fresh, timed, budget)
    emit("lookup", **result, max_call_s=timed.max_s)
    timed = Timed()
    stores = [h.chunk_keys(i, args["salt"] + "-store") for i in (200, 201)]
    emit("store", **store_phase(eng, rec, stores, timed, budget), max_call_s=timed.max_s)
    emit("metrics", kvtier=kvtier_metrics(eng))
    if args.get("recover"):
        stopped = args["condition"] == "stopped"
        emit("recover", **recover(eng, ctl, budget, args.get("daemon_pid") if stopped else None))
    for ctx in (load_ctx, ask_ctx):
        eng.m.on_request_finished(ctx)
    emit("shutdown_start")
    t0 = time.monotonic()
    eng.shutdown()
    emit("shutdown", seconds=time.monotonic() - t0)


def check(h, args):
    """A new tier on the root: every prompt stored before loads byte-exact; a new store works."""
    prompts = [h.chunk_keys(i, args["salt"]) for i in range(4)]
    eng = h.Engine([tier_config(h, args)], cpu_rows=12)
    try:
        found = [eng.fetch(keys) for keys in prompts]
        exact = all(n == len(keys) and data == [h.content(k) for k in keys] for (n, data), keys in zip(found, prompts))
        rec = Recorder(eng.tiers[0])
        eng.store_prompts([h.chunk_keys(300, args["salt"] + "-after")])
        emit("check", hits=sum(n for n, _ in found), asked=sum(map(len, prompts)), byte_exact=exact,
             stores=rec.jobs("store"))
    finally:
        eng.shutdown()


def main():
    """argv[1]: JSON with vllm_tree, tier ("kvtier"|"vllm"), root, control (faultfs socket),
    condition, salt, io_timeout_ms, phase_s, recover, mode ("scenario"|"check")."""
    args = json.loads(sys.argv[1])
    sys.path[:0] = [args["vllm_tree"], str(HERE), str(SUPPORT)]
    import vllm_harness as h

    (check if args.get("mode") == "check" else scenario)(h, args)
    emit("exit")


if __name__ == "__main__":
    main()
