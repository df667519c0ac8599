#!/usr/bin/env python3
"""vLLM's own "fs" tier and kvtier.vllm.KvtierFsTier side by side on sick mounts
(docs/sick-volumes.md).

Each tier runs under vLLM's real tiering manager (../shared/vllm) on a kvtier_faultfs mount, in
its own child interpreter with a --budget (60 s), through the same manager calls
(tests/python/vllm_sick_scenario.py): 4 prompts stored while healthy, one promotion primed, then
the condition; then a load of stored blocks, lookups of 8 new keys, stores of 2 new prompts (each
phase bounded by --phase-s), the manager's shutdown(), and the interpreter's exit. A child still
running at its budget (or --exit-grace-s after it said it was exiting) is killed with SIGKILL;
the mount is released only after the child is gone, or after 10 s more when even SIGKILL did not
end it.

Conditions: stopped (the server is stopped with SIGSTOP: every call waits in the kernel, as on a
dead server; the mount is resumed only after the child is gone), hung (every op but FLUSH hangs
inside a running server, which never answers: a FUSE fd whose FLUSH is never answered blocks any
process exit, SIGKILL included, whatever the tier does), slow (every op takes 200 ms), failing
(EIO on reads, ENOSPC on writes). Per tier and condition one row: jobs finished / submitted,
lookups decided / asked, load and store outcomes, shutdown time, process exit; then a markdown
table.

    /usr/bin/python3 bench/sick_volume_vllm.py --build build [--io-timeout-ms 1000] [--budget 60]
        [--conditions stopped,hung,slow,failing] [--tiers vllm,kvtier] [--faultfs BIN] [--vllm-tree DIR]

Needs root (or fusermount3) and /dev/fuse, the kvtier package and kvtier_faultfs built in
--build, and ../shared/vllm (or --vllm-tree, a tree made by its assemble.sh).
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "python"), str(REPO / "tests" / "support")]
import vllm_sick_scenario as scenario  # noqa: E402
from faultfs import FaultFs  # noqa: E402

TIERS = {"vllm": "vLLM fs", "kvtier": "KvtierFsTier"}
COLUMNS = ("tier", "condition", "jobs finished / submitted", "lookups decided / asked", "load", "stores",
           "shutdown", "process exit")


def args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build directory (python/ and bin/kvtier_faultfs)")
    ap.add_argument("--io-timeout-ms", type=int, default=1000, help="KvtierFsTier's io_timeout_ms")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per child before SIGKILL")
    ap.add_argument("--phase-s", type=float, default=10.0, help="seconds each sick phase may take")
    ap.add_argument("--exit-grace-s", type=float, default=10.0, help="seconds for the exit after shutdown")
    ap.add_argument("--conditions", default="stopped,hung,slow,failing")
    ap.add_argument("--tiers", default="vllm,kvtier")
    ap.add_argument("--faultfs", help="kvtier_faultfs binary (default: BUILD/bin/kvtier_faultfs)")
    ap.add_argument("--vllm-tree", help="a tree made by ../shared/vllm/assemble.sh (default: assemble one)")
    ap.add_argument("--dir", help="work directory for the mounts (default: a temporary one)")
    return ap.parse_args()


def vllm_tree(tree):
    if tree:
        return str(Path(tree).resolve())
    assemble = REPO.parent / "shared" / "vllm" / "assemble.sh"
    if not assemble.is_file():
        sys.exit(f"sick_volume_vllm.py: {assemble} not found; pass --vllm-tree")
    tree = tempfile.mkdtemp(prefix="kvtier-vllm-")
    subprocess.run(["bash", str(assemble), tree], check=True, env=dict(os.environ, PYTHON=sys.executable),
                   stdout=subprocess.DEVNULL)
    return tree


def run_one(opts, tree, work, tier, condition):
    """One child on a fresh mount; the mount is released only once the child is gone."""
    base = Path(tempfile.mkdtemp(prefix=f"{tier}-{condition}-", dir=work))
    env = dict(os.environ, PYTHONPATH=str(Path(opts.build).resolve() / "python"), PYTHONDONTWRITEBYTECODE="1")
    with FaultFs(base / "backing", base / "mnt", binary=opts.faultfs) as fs:
        child = {"vllm_tree": tree, "tier": tier, "root": f"{fs.mountpoint}/root", "control": fs.control,
                 "condition": condition, "salt": uuid.uuid4().hex[:8], "io_timeout_ms": opts.io_timeout_ms,
                 "phase_s": opts.phase_s, "daemon_pid": fs.daemon_pid}
        try:
            result = scenario.run_child(child, opts.budget, env, opts.exit_grace_s)
        finally:
            os.kill(fs.daemon_pid, signal.SIGCONT)  # a stopped server resumes only now
    if not result["reaped"]:  # it can exit only now that the mount let its calls go
        try:
            result["proc"].wait(timeout=10)
        except subprocess.TimeoutExpired:
            print(f"warning: child {result['proc'].pid} still alive after the mount was released", flush=True)
    return result


def fraction(done, total):
    return f"{done} / {total}"


def jobs_cell(ev):
    load, store = ev.get("load"), ev.get("store")
    submitted = sum(p["submitted"] for p in (load, store) if p)
    finished = sum(p["ok"] + p["failed"] for p in (load, store) if p)
    cell = fraction(finished, submitted)
    return cell if load and store else cell + " (phases not all reached)"


def lookup_cell(ev):
    lk = ev.get("lookup")
    if not lk:
        return "not reached"
    cell = fraction(lk["decided"], lk["asked"])
    if lk["decided"]:
        cell += f" ({lk['miss']} miss, {lk['hit']} hit, last at {lk['decided_within_s']:.2f} s)"
    return cell


def outcome(phase):
    """A job phase: 'ok N, failed M in X s', or what was left unfinished."""
    if not phase:
        return "not reached"
    parts = []
    if phase["ok"]:
        parts.append(f"{phase['ok']} ok")
    if phase["failed"]:
        parts.append(f"{phase['failed']} failed")
    open_jobs = phase["submitted"] - phase["ok"] - phase["failed"]
    if open_jobs:
        parts.append(f"{open_jobs} unfinished")
    cell = ", ".join(parts) or "none submitted"
    if phase.get("result_s") is not None and not open_jobs:
        cell += f" in {phase['result_s']:.2f} s"
    return cell


def load_cell(ev):
    load = ev.get("load")
    cell = outcome(load)
    if load and load.get("hits_after") is not None:
        cell += "; then " + ("recompute (0 hits)" if load["hits_after"] == 0 else
                             f"{load['hits_after']} hits" + (", byte-exact" if load.get("byte_exact") else ""))
    return cell


def shutdown_cell(ev, budget):
    if "shutdown" in ev:
        return f"{ev['shutdown']['seconds']:.2f} s"
    if "shutdown_start" in ev:
        return f"did not return in {budget:.0f} s"
    return "not reached"


def exit_cell(result):
    if not result["killed"]:
        return "normal" if result["rc"] == 0 else f"exit code {result['rc']}"
    said = "exit" in result["events"]
    cell = "killed" + (" (stuck in exit after shutdown)" if said else "")
    if not result["reaped"]:
        cell += "; SIGKILL did not end it until the mount was released"
    return cell


def row(tier, condition, result, budget):
    ev = result["events"]
    return (TIERS[tier], condition, jobs_cell(ev), lookup_cell(ev), load_cell(ev), outcome(ev.get("store")),
            shutdown_cell(ev, budget), exit_cell(result))


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main():
    opts = args()
    opts.faultfs = opts.faultfs or str(Path(opts.build).resolve() / "bin" / "kvtier_faultfs")
    why = FaultFs.unavailable(opts.faultfs)
    if why:
        sys.exit(f"sick_volume_vllm.py: {why}")
    tree = vllm_tree(opts.vllm_tree)
    work = Path(opts.dir or tempfile.mkdtemp(prefix="kvtier-sick-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"KvtierFsTier io_timeout_ms={opts.io_timeout_ms}; budget {opts.budget:.0f} s per child; "
          f"each sick phase at most {opts.phase_s:.0f} s; faultfs {opts.faultfs}", flush=True)
    rows = []
    for condition in opts.conditions.split(","):
        for tier in opts.tiers.split(","):
            result = run_one(opts, tree, work, tier, condition)
            rows.append(row(tier, condition, result, opts.budget))
            print(" | ".join(rows[-1]), flush=True)
            if "stored" not in result["events"]:
                print(result["output"][-2000:], flush=True)
    print()
    print(markdown(rows))


if __name__ == "__main__":
    main()
