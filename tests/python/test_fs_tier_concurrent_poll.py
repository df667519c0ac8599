"""Proves that kvtier.FsTier serves threads that submit and threads that poll at once without
deadlocking: a submit holds the shell's lock while it files its buffers, and a poll hands the
jobs' memory claims back to the shell, so the two must take their locks in one order.

Method: a child process runs two threads that submit stores (each from its own rows) and two that
poll, for a fixed number of jobs, on each backend; the parent fails the test if the child has not
finished within a generous time (a deadlock never finishes) or if any job is lost.
"""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = r"""
import sys, threading
import numpy as np
import kvtier

root, backend = sys.argv[1], sys.argv[2]
ROW, JOBS_PER_THREAD = 4096, 3000
ns = kvtier.Namespace("kvtier-test/concurrent-poll", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
tier = kvtier.FsTier(ns, ROW, {"root_dir": root, "io_backend": backend})
keys = kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * 2 * JOBS_PER_THREAD)), seed="poll"))
submitted, polled, lock = [], [], threading.Lock()
done = threading.Event()

def submitter(first):
    rows = [np.full(ROW, first % 251, dtype=np.uint8)]
    for i in range(JOBS_PER_THREAD):
        job = tier.submit_store([keys[first + i]], rows)
        with lock:
            submitted.append(job)

def poller():
    while not done.is_set():
        results = tier.poll()
        with lock:
            polled.extend(r.job_id for r in results)

subs = [threading.Thread(target=submitter, args=(k * JOBS_PER_THREAD,)) for k in range(2)]
polls = [threading.Thread(target=poller) for _ in range(2)]
for t in subs + polls:
    t.start()
for t in subs:
    t.join()
tier.wait_idle(30000)
done.set()
for t in polls:
    t.join()
polled.extend(r.job_id for r in tier.poll())
tier.close()
assert sorted(submitted) == sorted(polled), (len(submitted), len(polled))
print("jobs", len(polled))
"""


@pytest.mark.parametrize("backend", ["syscall", "uring"])
def test_submits_and_polls_on_other_threads_finish(tmp_path, backend):
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path), backend],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child did not finish in 60 s (a deadlock between submit and poll)\n{e.stdout}\n{e.stderr}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert "jobs 6000" in proc.stdout
