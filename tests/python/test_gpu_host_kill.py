"""bench/gpu_host.sh keeps what finished when the device tool kills it.

The device tool ends a run at its limit with SIGTERM, then SIGKILL. Proves:
  * SIGKILL after a step ended: $OUT already holds summary.md (marked partial)
    naming that step, summary.json and raw.tar.gz, written after each step;
  * SIGTERM while a long step runs: the script stops the step and exits at
    once (it does not wait for the step to end), with the final summary.

Method: a stand-in carry folder whose bin/ holds a dummy kvtier and two
"GPU tests": gpu_aa_test ends at once, gpu_zz_test writes its pid to a
marker and sleeps far longer than the test waits. `--only tests` runs just
those two steps, in name order, on the host (no GPU, no build needed).
"""

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_host.sh"
SLEEP_S = 300  # the long step: far beyond any wait below


def make_carry(tmp: Path) -> Path:
    carry = tmp / "carry"
    (carry / "bin").mkdir(parents=True)
    programs = {
        "kvtier": "#!/bin/sh\nexit 0\n",
        "gpu_aa_test": "#!/bin/sh\necho 'aa ran'\nexit 0\n",
        "gpu_zz_test": "#!/bin/sh\necho $$ > \"$MARK\"\nexec sleep %d\n" % SLEEP_S,
    }
    for name, text in programs.items():
        path = carry / "bin" / name
        path.write_text(text)
        path.chmod(0o755)
    return carry


def start(tmp: Path):
    env = dict(os.environ, GPU_HOST_CARRY=str(make_carry(tmp)), OUT=str(tmp / "out"),
               GPU_HOST_DIR=str(tmp / "work"), GPU_HOST_PYTHON="/nonexistent-python",
               MARK=str(tmp / "zz.pid"))
    proc = subprocess.Popen(["bash", str(SCRIPT), "--smoke", "--only", "tests"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, tmp / "zz.pid", tmp / "out"


def wait_for(path: Path, proc, limit_s=60.0) -> int:
    """The pid the long step wrote, once it has started."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        assert proc.poll() is None, "gpu_host.sh ended early:\n" + proc.stdout.read().decode(errors="replace")
        time.sleep(0.05)
    pytest.fail("the long step never started")


def gone(pid: int, limit_s=20.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def stop(pid: int):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def finished_steps(out: Path) -> str:
    summary = (out / "summary.md").read_text()
    assert "gpu_aa_test" in summary, summary
    with tarfile.open(out / "raw.tar.gz") as tar:
        steps = tar.extractfile("raw/steps.tsv").read().decode()
    assert "tests: gpu_aa_test\ttest_gpu_aa_test.log\tok" in steps, steps
    assert (out / "summary.json").is_file()
    return summary


def test_sigkill_after_a_step_keeps_its_summary(tmp_path):
    proc, mark, out = start(tmp_path)
    sleeper = wait_for(mark, proc)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        summary = finished_steps(out)
        assert "Partial" in summary, summary
        assert sorted(p.name for p in out.iterdir()) == ["raw.tar.gz", "summary.json", "summary.md"]
    finally:
        stop(sleeper)


def test_sigterm_during_a_step_stops_it_and_writes_the_summary(tmp_path):
    proc, mark, out = start(tmp_path)
    sleeper = wait_for(mark, proc)
    try:
        proc.send_signal(signal.SIGTERM)
        # The device tool sends SIGKILL soon after SIGTERM: the script must not
        # wait for the step (SLEEP_S) to end before writing its summary.
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("gpu_host.sh did not exit within 30 s of SIGTERM: it waited for the step")
        assert proc.returncode == 130, proc.stdout.read().decode(errors="replace")
        summary = finished_steps(out)
        assert "interrupted after" in summary, summary
        assert "Partial" not in summary, summary
        assert gone(sleeper), "the step in flight was left running"
    finally:
        stop(sleeper)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
