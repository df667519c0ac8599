"""KvtierFsTier on a hung mount under vLLM's real tiering manager (vllm-project/vllm
``vllm/v1/kv_offload/tiering/manager.py`` at commit 7cfb97e33791, run from ../shared/vllm).

Proves, on a kvtier_faultfs mount whose server is stopped (SIGSTOP: every call waits in the
kernel, as on a dead NFS or FUSE server) and again with every operation but FLUSH hung inside a
running server (io_timeout_ms 1000), all
through the manager's calls in a child interpreter (tests/python/vllm_sick_scenario.py): no
manager call blocks; a load of stored blocks fails as a job within the deadline and the request
then gets 0 hits (vLLM recomputes); lookups of new keys are decided MISS within a bound; stores
get failed results; the tier's metrics() and the manager's get_stats() show the root down
(root_up 0, deadline_misses, requests_stuck, load errors, dropped rows); shutdown() returns
within io_timeout + 1.5 s; and, with the server stopped, the child then exits with code 0 by
itself while the mount is still hung (the parent resumes it only after). After release, a new tier on the same root loads
every block stored before, byte-exact, and stores again; and a tier left open comes back up by
itself (its probe) once the mount answers.

FLUSH is left answered: a process holding an fd on a FUSE mount whose server never answers FLUSH
cannot finish exiting, even on SIGKILL (the kernel sends FLUSH as a forced request), so no tier
could pass with it hung (docs/sick-volumes.md). Likewise a call that a running
server has taken and never answers can end only when the server answers, so the exit is checked
with the server stopped, where the kernel still holds every call and a dying process can take
them back. Each test is bounded (60 s per
child) and unmounts even when it fails. Skips with one line where ../shared/vllm or FUSE is
unavailable.
"""

import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "support")]
import vllm_sick_scenario as scenario  # noqa: E402
from faultfs import FaultFs  # noqa: E402

IO_TIMEOUT_S = 1.0  # 0.5 s failed the open itself on a loaded machine (the FUSE mount slow, not hung)
BUDGET_S = 60  # per child: a stuck child is killed then, and the test fails
CALL_S = 0.25  # the longest single manager call allowed (a loaded 2-core machine)
DECIDED_S = IO_TIMEOUT_S + 1.5  # a deadline miss + abandon (0.1 s) + steps on a busy machine
SHUTDOWN_S = IO_TIMEOUT_S + 1.5  # docs/sick-volumes.md: io_timeout + 0.15 s, plus at most 1 s for the lease


@pytest.fixture
def mount(tmp_path, vllm_tree):
    why = FaultFs.unavailable()
    if why:
        pytest.skip(why)
    with FaultFs(tmp_path / "backing", tmp_path / "mnt") as fs:
        yield fs


def run(vllm_tree, fs, exit_grace_s=10.0, **extra):
    args = {"vllm_tree": str(vllm_tree), "tier": "kvtier", "root": f"{fs.mountpoint}/root",
            "control": fs.control, "condition": "hung", "daemon_pid": fs.daemon_pid, "salt": uuid.uuid4().hex[:8],
            "io_timeout_ms": int(IO_TIMEOUT_S * 1000), "phase_s": 10.0, **extra}
    return args, scenario.run_child(args, BUDGET_S, exit_grace_s=exit_grace_s)


def phases(result, *names):
    ev = result["events"]
    missing = [n for n in names if n not in ev]
    assert not missing, f"child never finished {missing}; its output:\n{result['output'][-4000:]}"
    return [ev[n] for n in names]


def check_sick_phases(load, lookup, store):
    assert load["finished"] and load["submitted"] == 1 and load["failed"] == 1, load
    assert load["result_s"] < DECIDED_S, load
    assert load["hits_after"] == 0, f"after the failed load the request must recompute: {load}"
    assert lookup["decided"] == lookup["asked"] == lookup["miss"] == 8, lookup
    assert lookup["decided_within_s"] < DECIDED_S, lookup
    assert store["finished"] and store["submitted"] == 2 and store["ok"] == 0, store
    for phase in (load, lookup, store):
        assert phase["max_call_s"] < CALL_S, phase


def check_metrics(metrics):
    k = metrics["kvtier"]
    assert k["root_up"] == 0 and k["roots_down"] == 1, k
    assert k["deadline_misses"] >= 3 and k["requests_stuck"] >= 1, k
    assert k["load_errors"] >= 1 and k["rows_dropped"] + k["store_errors"] >= 8, k
    assert k["manager_stats"].get("kvtier:fs_load_errors", 0) >= 1, k


def resume(fs):
    os.kill(fs.daemon_pid, signal.SIGCONT)


def test_stopped_server_bounded_and_exits(vllm_tree, mount):
    try:
        args, result = run(vllm_tree, mount, condition="stopped")
    finally:
        resume(mount)
    load, lookup, store, metrics, shutdown = phases(result, "load", "lookup", "store", "metrics", "shutdown")
    check_sick_phases(load, lookup, store)
    check_metrics(metrics)
    assert shutdown["seconds"] < SHUTDOWN_S, shutdown
    exited = "exit" in result["events"] and not result["killed"] and result["rc"] == 0
    # Checked before the parent releases anything: the mount is hung still.
    assert exited, (
        f"the child did not exit by itself within {BUDGET_S} s of start while the mount was hung "
        f"(rc {result['rc']}, killed {result['killed']}, reaped after SIGKILL {result['reaped']}); a "
        "stopped server's calls are still the kernel's, so a dying process takes them back\n"
        + result["output"][-3000:])
    mount.clear()
    mount.release()
    again = scenario.run_child(dict(args, mode="check"), BUDGET_S)
    (check,) = phases(again, "check")
    assert check["hits"] == check["asked"] == 16 and check["byte_exact"], check
    assert check["stores"][1] == check["stores"][0] >= 1, check
    assert again["rc"] == 0


def test_hung_calls_in_the_server_are_bounded(vllm_tree, mount):
    """The server takes every call but FLUSH and never answers: everything but the exit is as
    above (a call the server holds can only end when it answers), and the tier shuts down."""
    _, result = run(vllm_tree, mount, exit_grace_s=2.0)
    load, lookup, store, metrics, shutdown = phases(result, "load", "lookup", "store", "metrics", "shutdown")
    check_sick_phases(load, lookup, store)
    check_metrics(metrics)
    assert shutdown["seconds"] < SHUTDOWN_S, shutdown
    mount.clear()
    mount.release()  # the child's stuck threads end with the server's answers
    result["proc"].wait(timeout=30)


def test_root_comes_back_by_itself(vllm_tree, mount):
    _, result = run(vllm_tree, mount, recover=True)
    load, lookup, store, metrics, back, shutdown = phases(
        result, "load", "lookup", "store", "metrics", "recover", "shutdown")
    check_sick_phases(load, lookup, store)
    check_metrics(metrics)
    assert back["root_up_after_s"] is not None and back["root_up_after_s"] < 5, back
    assert shutdown["seconds"] < SHUTDOWN_S, shutdown
    assert result["rc"] == 0 and not result["killed"], result["output"][-3000:]
