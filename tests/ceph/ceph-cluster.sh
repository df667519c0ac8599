#!/bin/bash
# A one-node Ceph cluster for the tests, from Debian's packages (ceph-mon
# ceph-osd ceph-mgr ceph-mds ceph-fuse ceph-common): one mon on 127.0.0.1,
# one mgr, one OSD on a sparse bluestore file, one MDS, a CephFS "kvtier"
# with data and metadata pools, and three ceph-fuse mounts (a, b: the two
# instances; op: the operator). Everything lives in DIR; small memory targets
# for a 2-core machine. Usage:
#   ceph-cluster.sh start DIR   # prints the seconds it took; exit 77 = cannot start here (one line why)
#   ceph-cluster.sh stop DIR    # unmounts and kills the daemons, removes DIR
set -u
cmd=${1:?start|stop}; dir=${2:?DIR}
skip() { echo "ceph cluster skipped: $*"; exit 77; }
fail() { echo "ceph cluster failed: $*"; for l in "$dir"/log/*.log; do [ -f "$l" ] && { echo "== $l"; tail -n 15 "$l"; }; done; exit 1; }

stop() {
  for m in a b op; do
    mountpoint -q "$dir/mnt/$m" 2>/dev/null && { fusermount -u "$dir/mnt/$m" 2>/dev/null || umount -l "$dir/mnt/$m"; }
  done
  for p in "$dir"/run/*.pid; do
    [ -f "$p" ] || continue
    pid=$(cat "$p"); kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null
  done
  for _ in $(seq 50); do
    alive=0
    for p in "$dir"/run/*.pid; do [ -f "$p" ] && kill -0 "$(cat "$p")" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in "$dir"/run/*.pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$dir"
}
[ "$cmd" = stop ] && { stop; exit 0; }

for b in ceph ceph-mon ceph-osd ceph-mgr ceph-mds ceph-fuse monmaptool ceph-authtool uuidgen; do
  command -v $b >/dev/null || skip "$b not installed (Debian: ceph-mon ceph-osd ceph-mgr ceph-mds ceph-fuse ceph-common)"
done
[ "$(id -u)" = 0 ] || skip "not root"
[ -c /dev/fuse ] || skip "no /dev/fuse"
t0=$(date +%s.%N)
mkdir -p "$dir"/{run,log,mon,osd,mgr,mds,mnt/a,mnt/b,mnt/op} || fail "mkdir $dir"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
fsid=$(uuidgen)
conf=$dir/ceph.conf
cat > "$conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
log file = $dir/log/\$name.log
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon osd full ratio = 0.97
mon osd nearfull ratio = 0.95
mon osd backfillfull ratio = 0.96
mon pg warn min per osd = 0
mds beacon grace = 60           # a test stops the MDS (SIGSTOP) for up to ~15 s: it stays the active one
auth allow insecure global id reclaim = false
[mon]
mon data = $dir/mon/\$cluster-\$id
mgr initial modules =
[mgr]
mgr data = $dir/mgr/\$cluster-\$id
[osd]
osd data = $dir/osd/\$cluster-\$id
osd objectstore = bluestore
bluestore block path = $dir/osd/block.\$id
bluestore block create = true
bluestore block size = 4294967296
bluestore fsck on mount = false
bluestore cache size = 67108864
osd memory target = 536870912
osd memory cache min = 67108864
osd op num shards = 1
osd op num threads per shard = 2
[mds]
mds data = $dir/mds/\$cluster-\$id
mds cache memory limit = 134217728
CONF
C="-c $conf"
monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >"$dir/log/monmaptool.out" 2>&1 || fail "monmaptool"
ceph-mon $C --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mkfs-mon.out" 2>&1 || fail "ceph-mon --mkfs: $(tail -1 "$dir/log/mkfs-mon.out")"
ceph-mon $C -i a || fail "ceph-mon"
CEPH="timeout 30 ceph $C"
$CEPH -s >/dev/null 2>&1 || fail "mon does not answer"
mkdir -p "$dir/mgr/ceph-x"; ceph-mgr $C -i x || fail "ceph-mgr"
uuid=$(uuidgen)
id=$($CEPH osd new "$uuid" 2>"$dir/log/osd-new.out") || fail "ceph osd new: $(cat "$dir/log/osd-new.out")"
mkdir -p "$dir/osd/ceph-$id"
ceph-osd $C -i "$id" --mkfs --osd-uuid "$uuid" >"$dir/log/mkfs-osd.out" 2>&1 || fail "ceph-osd --mkfs: $(tail -3 "$dir/log/mkfs-osd.out")"
ceph-osd $C -i "$id" || fail "ceph-osd"
mkdir -p "$dir/mds/ceph-a"; ceph-mds $C -i a || fail "ceph-mds"
$CEPH osd pool create kvtier_meta 8 >/dev/null 2>&1 || fail "pool create meta"
$CEPH osd pool create kvtier_data 8 >/dev/null 2>&1 || fail "pool create data"
$CEPH fs new kvtier kvtier_meta kvtier_data >/dev/null 2>&1 || fail "fs new"
for _ in $(seq 240); do
  $CEPH fs status kvtier 2>/dev/null | grep -q active && $CEPH health 2>/dev/null | grep -q HEALTH_OK && break
  sleep 0.5
done
$CEPH fs status kvtier 2>/dev/null | grep -q active || fail "no active MDS after 120 s"
for m in a b op; do
  ceph-fuse $C --client_mountpoint / --id admin --pid-file "$dir/run/fuse-$m.pid" --admin-socket "$dir/run/fuse-$m.asok" --log-file "$dir/log/fuse-$m.log" "$dir/mnt/$m" >"$dir/log/fuse-$m.out" 2>&1 || fail "ceph-fuse $m: $(tail -2 "$dir/log/fuse-$m.out")"
done
echo "ceph cluster up in $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s: $($CEPH health 2>&1 | head -1); mounts $dir/mnt/{a,b,op}"
