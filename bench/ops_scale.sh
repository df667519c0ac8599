#!/usr/bin/env bash
# Do the operators' tools scale (docs/performance.md)? Builds a root_dir of N
# block files in vLLM's layout (4 namespaces by default, alternately vLLM's and
# SGLang's, 64-byte rows used at random times over 30 days) on an ext4 loop
# device made for it (1 KiB blocks, an inode per file), then reports, on the
# same warm tree, wall time against `find ROOT -printf '%A@ %s\n'` (target
# <= 1.0x), peak RSS (target: independent of N) and files per second for
# `kvtier du`, `kvtier fsck`, `kvtier gc --dry-run --max-bytes` and
# `kvtier gc --max-bytes` (half the bytes, or 1% with OPS_SCALE_GC_REMOVE=trim),
# and checks that gc met its bound;
# also `gc --dry-run --max-bytes` of all but 1% (a small trim: one walk). The
# walks column is how many walks of the tree each gc took.
#
# Usage: bench/ops_scale.sh [N] [DIR]     (N default 1000000; DIR default $TMPDIR or /tmp)
#   Everything lives in a fresh DIR/kvtier-ops-scale.XXXXXX, removed at the end.
#   OPS_SCALE_GC_FLAGS: extra gc flags (default "--list-max 100 --ignore-lease"; "" for a
#   kvtier from before --list-max, e.g. KVTIER_BUILD_DIR=../main/build).
#   OPS_SCALE_NO_LOOP=1: build the tree in a plain directory there (/dev/shm
#   without DIR; no root needed): the test suite's 10^5 run, ctest's ops_scale_1e5.
#   OPS_SCALE_NAMESPACES: how many namespaces share the N blocks (default 4).
#   OPS_SCALE_KEEP=1: keep the tree (and its mount) at the end and say where;
#   OPS_SCALE_REUSE=<that work dir>: measure a kept tree without building it
#   (N is the kept tree's; 10^7 files take a while to build);
#   OPS_SCALE_BUILD_ONLY=1: build and keep it, measure nothing. The tree is
#   built by one process per core.
# Needs root for the loop device (losetup, mkfs.ext4, mount), /usr/bin/time and bc.
set -euo pipefail
n=${1:-1000000}
build=${KVTIER_BUILD_DIR:-build}
kvtier=$build/bin/kvtier
[ -x "$kvtier" ] || { echo "build kvtier first (cmake --build $build --target kvtier_cli)" >&2; exit 1; }
base=${2:-${TMPDIR:-/tmp}}
namespaces=${OPS_SCALE_NAMESPACES:-4}
reuse=${OPS_SCALE_REUSE:-}
# Without a loop device and without a DIR, tmpfs where there is one: the tree is built in seconds.
if [ "${OPS_SCALE_NO_LOOP:-0}" = 1 ] && [ -z "${2:-}" ] && [ -d /dev/shm ]; then base=/dev/shm; fi
if [ -n "$reuse" ]; then
  work=$reuse
  [ -f "$work/n" ] && [ -d "$work/mnt/root" ] || { echo "OPS_SCALE_REUSE=$reuse: no finished tree there" >&2; exit 1; }
  n=$(cat "$work/n")
else
  work=$(mktemp -d "$base/kvtier-ops-scale.XXXXXX")
fi
mnt=$work/mnt
loopdev=""
cleanup() {
  if [ "${OPS_SCALE_KEEP:-0}" = 1 ]; then
    echo "kept: OPS_SCALE_REUSE=$work bench/ops_scale.sh measures it again (umount $mnt; losetup -d ${loopdev:-<dev>}; rm -rf $work when done)" >&2
    return
  fi
  if [ -n "$loopdev" ]; then umount "$mnt" 2>/dev/null || true; losetup -d "$loopdev" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$mnt"
if [ -z "$reuse" ] && [ "${OPS_SCALE_NO_LOOP:-0}" != 1 ]; then
  # 1 KiB blocks: a 64-byte row takes 1 KiB, a shard directory 1 KiB.
  img=$work/ext4.img
  truncate -s $(( (n * 3 + 200000) * 1024 + (1 << 30) )) "$img"
  mkfs.ext4 -q -F -b 1024 -N $(( n * 2 + 1200000 )) -O ^has_journal "$img"
  loopdev=$(losetup -f --show "$img")
  mount "$loopdev" "$mnt"
elif [ -n "$reuse" ] && mountpoint -q "$mnt"; then
  loopdev=$(findmnt -n -o SOURCE "$mnt")
fi
root=$mnt/root
mkdir -p "$root"

t0=$(date +%s.%N)
if [ -n "$reuse" ]; then
  echo "reusing the tree under $root ($(cat "$work/n") files)" >&2
else
/usr/bin/python3 - "$root" "$n" "$namespaces" "$(nproc)" <<'PY'
# One process per core, each writing every procs-th block of every namespace.
import hashlib, json, multiprocessing, os, random, sys, time
root, n, namespaces, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
payload = b"\x5a" * 64
now = int(time.time())

def namespace_dir(ns_i):
    fields = {"blocks_per_file": 1, "dcp_size": 1, "dtype": "bfloat16",
              "inference_engine": "vllm" if ns_i % 2 == 0 else "sglang", "kv_cache_groups": [],
              "model_name": f"bench/model-{ns_i}", "pcp_size": 1, "pp_size": 1, "tokens_per_hash": 16, "tp_size": 1}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    return f"{root}/bench_model-{ns_i}_{digest}", fields

def write_slice(worker):
    rng = random.Random(25 + worker)  # seeded: the same tree for the same N and core count
    for ns_i in range(namespaces):
        ns, _ = namespace_dir(ns_i)
        made = set()
        for i in range(ns_i + namespaces * worker, n, namespaces * procs):
            h = hashlib.sha256(i.to_bytes(8, "little")).hexdigest()
            d = f"{ns}_r0/{h[:3]}/{h[3:5]}_g0"
            if d not in made:
                os.makedirs(d, exist_ok=True)
                made.add(d)
            fd = os.open(f"{d}/{h}.bin", os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, payload)
            t = now - 3600 - rng.randrange(0, 30 * 86400)
            os.utime(fd, (t, t))
            os.close(fd)

for ns_i in range(namespaces):
    ns, fields = namespace_dir(ns_i)
    os.makedirs(ns, exist_ok=True)
    with open(f"{ns}/config.json", "w") as f:
        json.dump(fields, f, indent=2, sort_keys=True)
with multiprocessing.Pool(procs) as pool:
    pool.map(write_slice, range(procs))
PY
echo "$n" >"$work/n"
fi
t1=$(date +%s.%N)
[ -n "$reuse" ] || echo "built $n block files in $(echo "$t1 - $t0" | bc -l | xargs printf '%.0f') s under $root$([ -n "$loopdev" ] && echo " ($loopdev, ext4)")" >&2
if [ "${OPS_SCALE_BUILD_ONLY:-0}" = 1 ]; then OPS_SCALE_KEEP=1; exit 0; fi

find "$root" -printf '%A@ %s\n' >/dev/null  # warm the dentry and inode caches once for everyone
# Runs a command; prints "<wall s> <peak RSS KiB> <exit>".
measure() {
  local f=$work/time.txt rc=0
  /usr/bin/time -o "$f" -f '%e %M' "$@" >"$work/stdout.txt" 2>"$work/stderr.txt" || rc=$?
  echo "$(tail -1 "$f") $rc"
}
json_field() {  # FILE KEY: a top-level field of a kvtier --json report
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$1" "$2" 2>/dev/null || true
}
read -r t_find m_find _ < <(measure find "$root" -printf '%A@ %s\n')
printf '%-42s %9s %8s %10s %12s %6s\n' "command ($n files)" "seconds" "x find" "peak RSS" "files/s" "walks"
row() {  # name seconds rss [walks]
  printf '%-42s %9.2f %8.2f %7d MiB %12.0f %6s\n' "$1" "$2" "$(echo "$2 / $t_find" | bc -l)" $(( $3 / 1024 )) \
    "$(echo "$n / ($2 + 0.001)" | bc -l)" "${4:-}"
}
row "find -printf '%A@ %s\\n'" "$t_find" "$m_find"
status=0
# OPS_SCALE_GC_REMOVE: what the removing gc asks, "half" (default) or "trim"
# (1%: a watch pass's trim, one walk; at 10^7 files halving means 5*10^6 unlinks).
remove=${OPS_SCALE_GC_REMOVE:-half}
gc_flags=${OPS_SCALE_GC_FLAGS---list-max 100 --ignore-lease}  # no other collector: no lease settle (L124)
total="" half="" trim="" bound=""
for name in "du" "fsck" "gc --dry-run --max-bytes total-1%" "gc --dry-run --max-bytes half" "gc --max-bytes $remove"; do
  case $name in
    du | fsck) args=("$name") ;;
    "gc --dry-run --max-bytes total-1%") args=(gc --dry-run --max-bytes "$trim" $gc_flags) ;;
    "gc --dry-run --max-bytes half") args=(gc --dry-run --max-bytes "$half" $gc_flags) ;;
    *) bound=$([ "$remove" = trim ] && echo "$trim" || echo "$half"); args=(gc --max-bytes "$bound" $gc_flags) ;;
  esac
  read -r t m rc < <(measure "$kvtier" "${args[0]}" "$root" "${args[@]:1}" --json)
  if [ "$name" = du ]; then  # du's report gives the bounds: no extra walk
    total=$(json_field "$work/stdout.txt" total_bytes)
    half=$(( total / 2 ))
    trim=$(( total - total / 100 ))  # a 1% trim: fits gc's candidate buffer (one walk) up to ~4*10^7 files
  fi
  walks=""  # how many walks gc took (GcReport walks; empty for du, fsck, or a kvtier without it)
  [ "${args[0]}" = gc ] && walks=$(json_field "$work/stdout.txt" walks)
  row "kvtier $name" "$t" "$m" "$walks"
  # fsck: 4 is its findings (none expected here, but not an operational error); gc/du: 0.
  if [ "$rc" -ge 8 ] || { [ "$name" != fsck ] && [ "$rc" -ne 0 ]; }; then
    echo "kvtier $name exited $rc: $(cat "$work/stderr.txt")" >&2
    status=1
  fi
done
# What is left, by another du up to 10^6 files; beyond, by the removing gc's
# own report (total - reclaimed), sparing a walk of the large tree.
if [ "$n" -le 1000000 ]; then
  after=$("$kvtier" du "$root" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
else
  reclaimed=$(json_field "$work/stdout.txt" bytes_reclaimed)
  after=$(( total - ${reclaimed:-0} ))
fi
echo "gc --max-bytes $bound: $total -> $after bytes" >&2
if [ "$after" -gt "$bound" ]; then echo "gc left $after bytes, over its bound $bound" >&2; status=1; fi
exit $status
