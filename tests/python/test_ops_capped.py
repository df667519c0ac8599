"""Proves that kvtier.fsck counts every finding while listing at most 10**4 of a kind per namespace.

Method: a namespace whose one shard directory holds 10,050 badly named files and 3 stale temp
files. fsck lists 10**4 bad names and counts the other 50 in ``findings_unlisted``;
``findings_total`` counts them all, and the exit code is 4 (problems left). ``repair=True``
removes the stale temp files (listed) and still leaves the unlisted bad names counted.
Then 20,000 young temp files (writes in flight) beside 50 stale ones: only stale ones are listed,
so fsck reports all 50 and one gc pass removes all 50, however many young ones come first in
the directory; du still counts every temp file.
"""

import os

import kvtier

CAP = 10000


def plant(root, bad, tmps, young=0):
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
    for i in range(young):
        open(os.path.join(d, "abcde" + "1" * 59 + ".bin_%d.tmp" % i), "wb").close()
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


def test_only_stale_temp_files_are_listed(tmp_path):
    d = plant(str(tmp_path), 0, 50, young=20000)
    r = kvtier.fsck(str(tmp_path))
    assert [f.kind for f in r.findings].count("stale_tmp") == 50
    assert r.findings_unlisted == {}
    (ns,) = kvtier.du(str(tmp_path)).namespaces
    assert ns.tmp_files == 20050
    g = kvtier.gc(str(tmp_path))
    assert [x.reason for x in g.reclaimed] == ["stale_tmp"] * 50
    assert len(os.listdir(d)) == 20000
