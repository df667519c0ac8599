#!/usr/bin/env bash
# fio_compare_devices.sh DIR N [ROWS=400] [ROW_BYTES=1048576] [QD=16]
#
# The many-drives comparison on a machine with one disk: N loop devices
# (ext4 on sparse files under DIR, attached with --direct-io=on), each capped
# at CAP_MIBPS MiB/s per direction with cgroup v1 blkio throttling, so that the
# devices, not the CPU, are the limit (no device-mapper and no cgroup v2 I/O
# controller on these machines: see docs/performance.md, "Many drives"). Then,
# REPEAT times interleaved, all inside the capped cgroup:
#   (a) fio io_uring O_DIRECT, ROWS files of ROW_BYTES per device: one device
#       alone, then all N devices at once (one job per device, summed);
#   (b) kvtier bench fs --mixed on one root (device 0), ROWS rows;
#   (c) kvtier bench fs --mixed on N roots (path_sharding by_block_hash),
#       N x ROWS rows.
# It prints the medians and the issue's targets: kvtier / fio >= 0.9 on one
# root and aggregated over N, N roots >= 0.9 x N x one root, and load p99
# under saturating stores <= 2x unloaded on one root and on N.
#
# Needs root (losetup, mount, cgroups). Env: CAP_MIBPS (default 100),
# REPEAT (default 3), KVTIER_BUILD_DIR (default <repo>/build), KEEP_RAW=1.
set -euo pipefail

usage() {
  echo "usage: $0 DIR N [ROWS=400] [ROW_BYTES=1048576] [QD=16]" >&2
  echo "  env: CAP_MIBPS=100, REPEAT=3, KVTIER_BUILD_DIR, KEEP_RAW=1" >&2
  exit 2
}
[[ $# -ge 2 && $# -le 5 ]] || usage
DIR=$1
N=$2
ROWS=${3:-400}
ROW_BYTES=${4:-1048576}
QD=${5:-16}
CAP_MIBPS=${CAP_MIBPS:-100}
REPEAT=${REPEAT:-3}
for v in "$N" "$ROWS" "$ROW_BYTES" "$QD" "$CAP_MIBPS" "$REPEAT"; do
  [[ "$v" =~ ^[0-9]+$ && "$v" -gt 0 ]] || { echo "fio_compare_devices: '$v' is not a positive integer" >&2; usage; }
done
(( ROW_BYTES % 4096 == 0 )) || { echo "fio_compare_devices: ROW_BYTES must be a multiple of 4096" >&2; exit 2; }
(( EUID == 0 )) || { echo "fio_compare_devices: needs root (loop devices, mount, cgroup v1 blkio)" >&2; exit 1; }
BLKIO=/sys/fs/cgroup/blkio
[[ -f $BLKIO/blkio.throttle.read_bps_device ]] ||
  { echo "fio_compare_devices: no cgroup v1 blkio throttling at $BLKIO" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${KVTIER_BUILD_DIR:-$REPO/build}
KVTIER=$BUILD/bin/kvtier
[[ -x $KVTIER ]] || { echo "fio_compare_devices: $KVTIER not found (ninja -C $BUILD kvtier_cli)" >&2; exit 1; }
for t in fio losetup mkfs.ext4 python3; do
  command -v "$t" >/dev/null || { echo "fio_compare_devices: $t is required" >&2; exit 1; }
done

mkdir -p "$DIR"
WORK=$(mktemp -d "$(realpath "$DIR")/kvtier-devices.XXXXXX")
RAW=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-devices-json.XXXXXX")
CG=$BLKIO/kvtier-bench-$$
LOOPS=()
cleanup() {
  set +e
  for ((i = 0; i < ${#LOOPS[@]}; i++)); do umount "$WORK/mnt$i" 2>/dev/null; losetup -d "${LOOPS[$i]}"; done
  [[ -d $CG ]] && rmdir "$CG"
  rm -rf "$WORK"
  if [[ ${KEEP_RAW:-0} == 1 ]]; then echo "raw JSON kept in $RAW" >&2; else rm -rf "$RAW"; fi
}
trap cleanup EXIT

# Room per device (sparse): kvtier bench fs checks each root for all the rows of a run
# and its --mixed store stream (N x ROWS each, a conservative check), plus ext4's own.
bytes_per_dev=$(( (ROWS * 12 * N + 2048) * ROW_BYTES ))
setup_devices() {
  mkdir -p "$CG"
  for ((i = 0; i < N; i++)); do
    truncate -s "$bytes_per_dev" "$WORK/dev$i.img"
    LOOPS+=("$(losetup -f --show --direct-io=on "$WORK/dev$i.img")")
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "${LOOPS[$i]}"
    mkdir -p "$WORK/mnt$i"
    mount "${LOOPS[$i]}" "$WORK/mnt$i"
    local majmin; majmin=$(cat "/sys/block/$(basename "${LOOPS[$i]}")/dev")
    echo "$majmin $(( CAP_MIBPS * 1048576 ))" >"$CG/blkio.throttle.read_bps_device"
    echo "$majmin $(( CAP_MIBPS * 1048576 ))" >"$CG/blkio.throttle.write_bps_device"
  done
}

capped() {  # capped CMD...: runs CMD inside the throttled cgroup
  sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@"
}

drop_caches() { sync; echo 1 >/proc/sys/vm/drop_caches; }

# fio over the first K devices at once: one job per device, summed by
# group_reporting. $1 = K, $2 = write|read, $3 = output file.
fio_devices() {
  local k=$1 rw=$2 out=$3 jobs=()
  for ((i = 0; i < k; i++)); do jobs+=(--name="d$i" --directory="$WORK/mnt$i/fio"); done
  for ((i = 0; i < k; i++)); do mkdir -p "$WORK/mnt$i/fio"; done
  capped fio --bs="$ROW_BYTES" --filesize="$ROW_BYTES" --nrfiles="$ROWS" --ioengine=io_uring --direct=1 \
    --iodepth="$QD" --openfiles=$(( QD * 2 )) --create_on_open=1 --rw="$rw" --group_reporting \
    --output-format=json --output="$out" "${jobs[@]}" >/dev/null
}

kvtier_roots() {  # $1 = K roots, $2 = round, $3 = output file
  local k=$1 round=$2 out=$3 roots=""
  for ((i = 0; i < k; i++)); do
    mkdir -p "$WORK/mnt$i/kv$k.$round"
    roots+="${roots:+,}$WORK/mnt$i/kv$k.$round"
  done
  capped "$KVTIER" bench fs --root "$roots" --row-bytes "$ROW_BYTES" --rows $(( ROWS * k )) \
    --queue-depth $(( QD * k )) --mixed --json >"$out"
  for ((i = 0; i < k; i++)); do rm -rf "$WORK/mnt$i/kv$k.$round"; done
}

echo "fio_compare_devices: $N devices capped at $CAP_MIBPS MiB/s, $ROWS rows x $ROW_BYTES bytes each, QD $QD" >&2
start=$(date +%s)
setup_devices
for ((round = 1; round <= REPEAT; round++)); do
  for k in $(printf "%s\n" 1 "$N" | sort -un); do
    echo "  round $round/$REPEAT: fio on $k device(s)..." >&2
    fio_devices "$k" write "$RAW/fio$k.write.$round.json"; drop_caches
    fio_devices "$k" read "$RAW/fio$k.read.$round.json"; drop_caches
    for ((i = 0; i < k; i++)); do rm -rf "$WORK/mnt$i/fio"; done
    echo "  round $round/$REPEAT: kvtier bench fs on $k root(s)..." >&2
    kvtier_roots "$k" "$round" "$RAW/kvtier$k.$round.json"; drop_caches
  done
done
elapsed=$(( $(date +%s) - start ))

python3 - "$RAW" "$N" "$REPEAT" "$CAP_MIBPS" "$ROWS" "$ROW_BYTES" "$QD" "$elapsed" <<'PY'
import json, os, statistics, sys

raw, n, repeat, cap, rows, row_bytes, qd, elapsed = sys.argv[1:9]
n, repeat = int(n), int(repeat)

def load(name):
    with open(os.path.join(raw, name)) as f:
        return json.load(f)

def med(vals):
    return statistics.median(vals)

def fio_gbps(k, rw):
    return med([load(f"fio{k}.{rw}.{r}.json")["jobs"][0][rw]["bw_bytes"] / 1e9 for r in range(1, repeat + 1)])

def kv(k, path):
    vals = []
    for r in range(1, repeat + 1):
        d = load(f"kvtier{k}.{r}.json")
        for p in path:
            d = d[p]
        vals.append(d)
    return med(vals)

ks = sorted({1, n})
print(f"{n} loop devices capped at {cap} MiB/s per direction (cgroup v1 blkio), {rows} files x "
      f"{int(row_bytes) / 2**20:g} MiB per device, QD {qd} per device; median of {repeat} interleaved rounds; {elapsed} s")
print()
print(f"{'':24} {'store GB/s':>10} {'load GB/s':>10} {'kv/fio store':>13} {'kv/fio load':>12} {'load p99 x':>11}")
for k in ks:
    fs, fl = fio_gbps(k, "write"), fio_gbps(k, "read")
    vs, vl = kv(k, ("store", "gbps")), kv(k, ("load", "gbps"))
    p99 = kv(k, ("mixed", "ratio_p99"))
    print(f"{'fio, ' + str(k) + ' device(s)':24} {fs:10.3f} {fl:10.3f}")
    print(f"{'kvtier, ' + str(k) + ' root(s)':24} {vs:10.3f} {vl:10.3f} {vs / fs:13.2f} {vl / fl:12.2f} {p99:11.2f}")
print()
if n > 1:
    s1, l1 = kv(1, ("store", "gbps")), kv(1, ("load", "gbps"))
    sn, ln = kv(n, ("store", "gbps")), kv(n, ("load", "gbps"))
    print(f"kvtier {n} roots / ({n} x one root): store {sn / (n * s1):.2f}   load {ln / (n * l1):.2f}   (target >= 0.90)")
print("targets: kvtier / fio >= 0.90 on one root and over N; load p99 under stores / unloaded <= 2.0")
PY
