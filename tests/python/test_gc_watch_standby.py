"""Proves that a `kvtier gc --watch` behind another collector's live lease says so, with two real CLI
processes on one root.

The second watch logs at once that it stands by, naming the holder as the lease file's owner record
does (its token, its pid, and since when, in UTC: FORMAT.md L121, L195), says it again every
--interval while the lease stays held, and removes nothing meanwhile. The standby behaviour stays:
once the holder gives the lease up (SIGTERM) it takes the lease over, says so and runs passes, and
it exits 0 when stopped (docs/ops.md, exit codes of --watch).
"""

import json
import re
import time

from test_gc_watch import ROW, Watcher, blocks, make_blocks, wait_for

FLAGS = ["--interval", "300ms", "--check-interval", "50ms", "--collector-ttl", "3s", "--max-bytes", str(20 * ROW)]


def test_a_standby_watch_says_who_holds_the_lease_and_still_takes_over(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 30, "a")
    holder = Watcher(kvtier_bin, root, tmp_path, "holder", *FLAGS)
    standby = None
    try:
        wait_for("the first watch's pass", lambda: holder.holding() and len(blocks(root)) == 20)
        record = json.loads((root / ".kvtier" / "gc.lease").read_text())
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["started"]))
        standby = Watcher(kvtier_bin, root, tmp_path, "standby", *FLAGS)
        said = re.escape(f"the collector lease {root}/.kvtier/gc.lease is held by collector {record['token']} "
                         f"(pid {record['pid']}) since {since}; this watch removes nothing")

        def log():
            return standby.log_path.read_text()

        wait_for("the standby's first word", lambda: re.search(r"\]: standing by: " + said, log()))
        wait_for("its word again, an interval later", lambda: re.search(r"still standing by: " + said, log()))
        assert standby.passes() == 0, log()
        assert "holding the collector lease" not in log()

        assert holder.stop() == 0, holder.log_path.read_text()
        wait_for("the takeover and a pass", lambda: standby.holding() and standby.passes() >= 1)
        assert "holding the collector lease" in log()
    finally:
        rcs = [w.stop() for w in (holder, standby) if w is not None]
    assert rcs == [0, 0], log()
