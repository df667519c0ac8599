"""Proves that kvtier.fsck counts every finding while listing at most 10**4 of a kind per namespace (issue 25).

Method: a namespace whose one shard directory holds 10,050 badly named files and 3 stale temp
files. fsck lists 10**4 bad names and counts the other 50 in ``findings_unlisted``;
``findings_total`` counts them all, and the exit code is 4 (problems left). ``repair=True``
removes the stale temp files (listed) and still leaves the unlisted bad names counted.
"""

import os

import kvtier

CAP = 10000


def plant(root, bad, tmps):
    ns = "m0_0123456789a0"
    d = os.path.join(root, ns + "_r0", "abc", "de_g0")
    os.makedirs(d)
    os.makedirs(os.path.join(root, ns))
    old = 1_000_000_000  # 2001: older than any grace
    for i in range(bad):
        open(os.path.join(d, "junk_%d" % i), "wb").close()
    for i in range(tmps):
        path = os.path.join(d, "abcde" + "0" * 59 + ".bin_%d.tmp" % i)
        open(path, "wb").close()
        os.utime(path, (old, old))
    return d


def test_findings_past_the_cap_are_counted_not_listed(tmp_path):
    d = plant(str(tmp_path), CAP + 50, 3)
    r = kvtier.fsck(str(tmp_path))
    kinds = [f.kind for f in r.findings]
    assert kinds.count("bad_name") == CAP
    assert kinds.count("stale_tmp") == 3
    assert r.findings_unlisted == {"bad_name": 50}
    assert r.findings_total == len(r.findings) + 50
    assert r.exit_code == 4
    fixed = kvtier.fsck(str(tmp_path), repair=True)
    assert sorted(f.kind for f in fixed.findings if f.action == "removed") == ["stale_tmp"] * 3
    assert fixed.findings_unlisted == {"bad_name": 50}
    assert fixed.exit_code == 4
    assert len(os.listdir(d)) == CAP + 50
