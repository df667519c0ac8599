#!/usr/bin/env bash
# fio_compare.sh DIR [ROWS] [ROW_BYTES] [QD]
#
# The fs tier against fio and vLLM's syscalls, in one go and on the same directory:
#   (a) fio, ioengine=io_uring, direct=1: ROWS files of ROW_BYTES each, created
#       at open (create_on_open=1), iodepth QD; a write phase, then a read phase;
#   (b) vllm_baseline: QD plain threads doing vLLM's per-block syscalls
#       (access, mkdir -p, open O_EXCL, write, close, rename / open, read, close);
#   (b') vllm_baseline --crc: the same plus the integrity work kvtier always
#       does (CRC32C into the xattr on store, checked on load), so that one
#       ratio compares the two I/O paths doing the same work;
#   (c) kvtier bench fs --mixed: the io_uring fs tier, queue depth QD;
#   (c') kvtier bench fs --no-checksum: the same tier with checksum_blocks
#       off, the same work as (b);
# dropping the page cache between phases when allowed (root). (b), (b'), (c)
# and (c') run REPEAT times, interleaved (CPU figures on a shared VM vary by
# 2x from run to run), and the table shows each figure's median: GB/s per
# direction, kvtier/fio and kvtier/baseline, GB per CPU-second of kvtier
# against the baseline doing the same work, the CRC32C share of each, and the
# mixed-load p99 ratio, beside the fs tier's targets (>= 0.9x fio; GB per
# CPU-second >= 1.2x / 1.5x (store / load) the baseline+CRC32C, and with
# checksums off >= 1.2x the plain baseline; load p99 under stores <= 2x
# unloaded).
#
# FRESH_FS=1 (root) runs every tool on a freshly made ext4 (a loop device on
# a sparse file under DIR, --direct-io=on), so that no tool pays for the
# previous one's files: ext4's inode allocator scans recently freed inodes,
# which made the same tool's store CPU vary by 30 % with the volume's history.
#
# Defaults: 4000 rows of 1 MiB, REPEAT=3 (about 4.2 GB per tool and round;
# everything is kept until the end, so about 70 GB of free space: lower ROWS
# or REPEAT where there is less), QD 32: a few minutes on a 2-core VM with a
# ~1-2 GB/s disk.
# Binaries: $KVTIER_BUILD_DIR/bin (default: <repo>/build/bin).
# KEEP_RAW=1 keeps the raw JSON of every tool next to DIR's work directory.
# FRESH_FS=1: a fresh ext4 for every tool run (above).
# DEVICES=N runs the many-drives comparison instead (fio_compare_devices.sh:
# N bandwidth-capped loop devices under DIR, kvtier on one root and on N).
set -euo pipefail
if [[ -n "${DEVICES:-}" ]]; then
  exec "$(dirname "${BASH_SOURCE[0]}")/fio_compare_devices.sh" "$1" "$DEVICES" "${@:2}"
fi

usage() {
  echo "usage: $0 DIR [ROWS=4000] [ROW_BYTES=1048576] [QD=32]" >&2
  echo "  env: KVTIER_BUILD_DIR (default <repo>/build), KEEP_RAW=1, REPEAT=3, FRESH_FS=1" >&2
  exit 2
}
[[ $# -ge 1 && $# -le 4 ]] || usage
[[ "$1" == -h || "$1" == --help ]] && usage
DIR=$1
ROWS=${2:-4000}
ROW_BYTES=${3:-1048576}
QD=${4:-32}
REPEAT=${REPEAT:-3}
for v in "$ROWS" "$ROW_BYTES" "$QD" "$REPEAT"; do
  [[ "$v" =~ ^[0-9]+$ && "$v" -gt 0 ]] || { echo "fio_compare: '$v' is not a positive integer" >&2; usage; }
done
if (( ROW_BYTES % 4096 != 0 )); then
  echo "fio_compare: ROW_BYTES must be a multiple of 4096 (O_DIRECT), got $ROW_BYTES" >&2
  exit 2
fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${KVTIER_BUILD_DIR:-$REPO/build}
KVTIER=$BUILD/bin/kvtier
BASELINE=$BUILD/bin/vllm_baseline
for b in "$KVTIER" "$BASELINE"; do
  [[ -x "$b" ]] || { echo "fio_compare: $b not found (build it: ninja -C $BUILD kvtier_cli vllm_baseline, or set KVTIER_BUILD_DIR)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "fio_compare: python3 is required to read the JSON reports" >&2; exit 1; }
HAVE_FIO=1
command -v fio >/dev/null || { HAVE_FIO=0; echo "fio_compare: fio not found: the fio rows are skipped" >&2; }

FRESH_FS=${FRESH_FS:-0}
if [[ $FRESH_FS == 1 ]]; then
  (( EUID == 0 )) || { echo "fio_compare: FRESH_FS=1 needs root (losetup, mkfs, mount)" >&2; exit 1; }
  for t in losetup mkfs.ext4 mount truncate; do command -v $t >/dev/null || { echo "fio_compare: FRESH_FS=1 needs $t" >&2; exit 1; }; done
fi

mkdir -p "$DIR"
WORK=$(mktemp -d "$(realpath "$DIR")/kvtier-fio-compare.XXXXXX")
RAW=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-fio-compare-json.XXXXXX")
LOOP=
cleanup() {
  set +e  # every step, whatever failed before
  if [[ -n $LOOP ]]; then umount "$WORK/mnt" 2>/dev/null; losetup -d "$LOOP"; fi
  rm -rf "$WORK"
  if [[ "${KEEP_RAW:-0}" == 1 ]]; then echo "raw JSON kept in $RAW" >&2; else rm -rf "$RAW"; fi
}
trap cleanup EXIT

# Room for fio, the baseline, kvtier and kvtier's --mixed store stream, all
# kept until the end (deleting between tools would make the next tool pay for
# the deletions on some filesystems).
# (kvtier's stream writes up to max(ROWS, 8 x its timed loads) rows, the
# loads being min(1000, ROWS - ROWS/2).)
loads=$(( ROWS - ROWS / 2 < 1000 ? ROWS - ROWS / 2 : 1000 ))
stream=$(( ROWS > 8 * loads ? ROWS : 8 * loads ))
need=$(( (2 * ROWS + REPEAT * (4 * ROWS + stream)) * ROW_BYTES / 1024 * 105 / 100 ))
# A fresh filesystem holds one tool's run at a time (fio: its files and the
# mixed writer's; kvtier: its rows and its --mixed stream), plus ext4's own
# (journal, inodes, and up to two 4 KiB shard directories per row).
files=$(( 2 * ROWS + stream ))
fresh_bytes=$(( files * ROW_BYTES + files * 16384 + (2 << 30) ))
(( FRESH_FS == 1 )) && need=$(( fresh_bytes / 1024 * 105 / 100 ))
avail=$(df -Pk "$WORK" | awk 'NR==2 {print $4}')
if (( avail < need )); then
  echo "fio_compare: about $(( need / 1024 / 1024 )) GiB needed under $DIR, $(( avail / 1024 / 1024 )) GiB free (lower ROWS or REPEAT)" >&2
  exit 1
fi

DROP_NOTE="page cache dropped between phases"
if [[ $FRESH_FS == 1 ]]; then
  truncate -s "$fresh_bytes" "$WORK/fresh.img"
  LOOP=$(losetup -f --show --direct-io=on "$WORK/fresh.img")
  mkdir -p "$WORK/mnt"
  DROP_NOTE="a fresh ext4 per tool run; $DROP_NOTE"
fi
# fresh NAME: the directory a tool run writes under (made empty): on a newly
# made ext4 with FRESH_FS=1, else $WORK/NAME beside the other runs' files.
# Call it as `d=$(fresh NAME) || exit 1`: inside $(...) set -e is off, so
# each step checks itself (a failed mount must not put the run on DIR's own
# filesystem).
fresh() {
  if [[ $FRESH_FS == 1 ]]; then
    umount "$WORK/mnt" 2>/dev/null || true
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP" >&2 &&
      mount "$LOOP" "$WORK/mnt" && mkdir -p "$WORK/mnt/$1" ||
      { echo "fio_compare: could not make a fresh ext4 on $LOOP" >&2; return 1; }
    echo "$WORK/mnt/$1"
  else
    mkdir -p "$WORK/$1" && echo "$WORK/$1"
  fi
}
drop_caches() {
  sync
  if ! { echo 1 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
    DROP_NOTE="page cache not dropped (not root)"
  fi
}

echo "fio_compare: $ROWS rows x $ROW_BYTES bytes, queue depth $QD, under $WORK" >&2
start=$(date +%s)

# ---- (a) fio ------------------------------------------------------------------
if (( HAVE_FIO )); then
  FIO_DIR=$(fresh fio) || exit 1
  fio_common=(--directory="$FIO_DIR" --bs="$ROW_BYTES" --filesize="$ROW_BYTES" --nrfiles="$ROWS"
              --ioengine=io_uring --direct=1 --iodepth="$QD" --openfiles=$(( QD * 2 ))
              --output-format=json)
  echo "  fio write..." >&2
  fio --name=kvtier-fio --rw=write --create_on_open=1 "${fio_common[@]}" --output="$RAW/fio_write.json" >/dev/null
  drop_caches
  echo "  fio read..." >&2
  fio --name=kvtier-fio --rw=read "${fio_common[@]}" --output="$RAW/fio_read.json" >/dev/null
  drop_caches
  # The disk's own share of the mixed-load target: 1-row random reads at depth
  # 4 (kvtier's --mixed load depth) alone, then beside a writer creating files
  # at depth 2 x QD (kvtier's --mixed store stream), MIXED_SECONDS each.
  echo "  fio reads alone and under writes..." >&2
  reader=(--name=reader --directory="$FIO_DIR" --filename_format='kvtier-fio.$jobnum.$filenum'
          --rw=randread --bs="$ROW_BYTES" --filesize="$ROW_BYTES" --nrfiles="$ROWS" --openfiles=$(( QD * 2 ))
          --ioengine=io_uring --direct=1 --iodepth=4 --time_based --runtime="${MIXED_SECONDS:-5}")
  fio "${reader[@]}" --output-format=json --output="$RAW/fio_read_alone.json" >/dev/null
  drop_caches
  mkdir -p "$FIO_DIR-writer"
  fio "${reader[@]}" --name=writer --directory="$FIO_DIR-writer" --rw=write --bs="$ROW_BYTES" --filesize="$ROW_BYTES" \
    --nrfiles="$ROWS" --create_on_open=1 --openfiles=$(( QD * 4 )) --ioengine=io_uring --direct=1 \
    --iodepth=$(( QD * 2 )) --time_based --runtime="${MIXED_SECONDS:-5}" \
    --output-format=json --output="$RAW/fio_read_mixed.json" >/dev/null
  rm -rf "$FIO_DIR-writer"
  drop_caches
fi

# ---- (b), (b') the vLLM syscall thread-pool baselines, (c), (c') kvtier, interleaved ----
# Each round writes under its own directories (the tools name their namespaces
# alike and would otherwise remove the previous round's files first).
for ((round = 1; round <= REPEAT; round++)); do
  echo "  round $round/$REPEAT: vllm_baseline ($QD threads)..." >&2
  d=$(fresh "r$round/base") || exit 1
  "$BASELINE" --root "$d" --row-bytes "$ROW_BYTES" --rows "$ROWS" --threads "$QD" --json --keep \
    > "$RAW/baseline.$round.json"
  drop_caches
  echo "  round $round/$REPEAT: vllm_baseline --crc ($QD threads)..." >&2
  d=$(fresh "r$round/crc") || exit 1
  "$BASELINE" --root "$d" --row-bytes "$ROW_BYTES" --rows "$ROWS" --threads "$QD" --crc --json \
    --keep > "$RAW/baseline_crc.$round.json"
  drop_caches
  echo "  round $round/$REPEAT: kvtier bench fs --mixed..." >&2
  d=$(fresh "r$round/kvtier") || exit 1
  "$KVTIER" bench fs --root "$d" --row-bytes "$ROW_BYTES" --rows "$ROWS" --queue-depth "$QD" \
    --mixed --json --keep > "$RAW/kvtier.$round.json"
  drop_caches
  echo "  round $round/$REPEAT: kvtier bench fs --no-checksum..." >&2
  d=$(fresh "r$round/kvtier-nocrc") || exit 1
  "$KVTIER" bench fs --root "$d" --row-bytes "$ROW_BYTES" --rows "$ROWS" \
    --queue-depth "$QD" --no-checksum --json --keep > "$RAW/kvtier_nocrc.$round.json"
  drop_caches
done

if [[ $FRESH_FS != 1 ]]; then  # (the fresh filesystem goes with its loop device, at exit)
  echo "  removing the files..." >&2
  rm -rf "$WORK"/*
fi
elapsed=$(( $(date +%s) - start ))

python3 - "$RAW" "$HAVE_FIO" "$ROWS" "$ROW_BYTES" "$QD" "$DROP_NOTE" "$elapsed" "$DIR" "$REPEAT" <<'PY'
import copy, json, os, statistics, sys

raw, have_fio, rows, row_bytes, qd, drop_note, elapsed, root, repeat = sys.argv[1:10]
have_fio = have_fio == "1"
repeat = int(repeat)

def load(name):
    with open(os.path.join(raw, name)) as f:
        return json.load(f)

# The median of every number the table uses, over the rounds; row counts are
# the worst round's (fewest verified, most corrupt).
MEDIAN_PATHS = [(d, k) for d in ("store", "load") for k in ("gbps", "p50_us", "p99_us", "cpu_s_per_gb")] + \
    [("details", d, "checksum_s_per_gb") for d in ("store", "load")] + \
    [("mixed", k) for k in ("ratio_p99", "load_p99_us", "unloaded_load_p99_us", "load_p50_us")] + \
    [("details", "mixed", "store_stream_gbps")]

def get(d, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d

def median_of(prefix):
    runs = [load(f"{prefix}.{i}.json") for i in range(1, repeat + 1)]
    out = copy.deepcopy(runs[0])
    for path in MEDIAN_PATHS:
        vals = [get(r, path) for r in runs]
        if any(v is None for v in vals):
            continue
        node = out
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = statistics.median(vals)
    out["rows_verified"] = min(r["rows_verified"] for r in runs)
    out["rows_corrupt"] = sum(r["rows_corrupt"] for r in runs)
    out["cpu_spread"] = {d: (min(r[d]["cpu_s_per_gb"] for r in runs), max(r[d]["cpu_s_per_gb"] for r in runs))
                         for d in ("store", "load")}
    return out

def fio_dir(path, kind):
    job = load(path)["jobs"][0]
    d = job[kind]
    runtime_s = job["job_runtime"] / 1000.0
    cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * runtime_s
    gb = d["io_bytes"] / 1e9
    pct = d.get("clat_ns", {}).get("percentile", {})
    return {"gbps": d["bw_bytes"] / 1e9,
            "p50_us": pct.get("50.000000", 0) / 1000.0,
            "p99_us": pct.get("99.000000", 0) / 1000.0,
            "cpu_s_per_gb": cpu_s / gb if gb else 0.0}

tools = []
if have_fio:
    tools.append(("fio io_uring O_DIRECT", {"store": fio_dir("fio_write.json", "write"),
                                             "load": fio_dir("fio_read.json", "read")}))
base = median_of("baseline")
base_crc = median_of("baseline_crc")
kv = median_of("kvtier")
kv_nc = median_of("kvtier_nocrc")
tools.append((f"vLLM baseline ({base['threads']} thr)", base))
tools.append((f"vLLM+CRC32C baseline", base_crc))
tools.append((f"kvtier {kv['backend']}{' O_DIRECT' if kv['o_direct'] else ''}", kv))
tools.append(("kvtier, checksums off", kv_nc))

def gb_per_cpu_s(d):
    return 1.0 / d["cpu_s_per_gb"] if d["cpu_s_per_gb"] > 0 else float("inf")

def ratio(a, b):
    return a / b if b else float("nan")

print(f"fs benchmark under {root}: {rows} files x {int(row_bytes) / 2**20:g} MiB, queue depth {qd}; "
      f"{drop_note}; {elapsed} s; baselines and kvtier: median of {repeat} interleaved rounds")
print()
hdr = f"{'':26} {'store GB/s':>10} {'load GB/s':>10} {'store p99 us':>13} {'load p99 us':>12} {'store GB/CPU-s':>15} {'load GB/CPU-s':>14}"
print(hdr)
for name, d in tools:
    s, l = d["store"], d["load"]
    print(f"{name:26} {s['gbps']:10.3f} {l['gbps']:10.3f} {s['p99_us']:13.0f} {l['p99_us']:12.0f} "
          f"{gb_per_cpu_s(s):15.2f} {gb_per_cpu_s(l):14.2f}")
print()
ks, kl = kv["store"], kv["load"]
bs, bl = base["store"], base["load"]
if have_fio:
    fs_, fl = tools[0][1]["store"], tools[0][1]["load"]
    print(f"{'kvtier / fio  GB/s':40} store {ratio(ks['gbps'], fs_['gbps']):5.2f}   load {ratio(kl['gbps'], fl['gbps']):5.2f}   (target >= 0.90)")
print(f"{'kvtier / baseline  GB/s':40} store {ratio(ks['gbps'], bs['gbps']):5.2f}   load {ratio(kl['gbps'], bl['gbps']):5.2f}")
print(f"{'kvtier / baseline  GB per CPU-second':40} store {ratio(gb_per_cpu_s(ks), gb_per_cpu_s(bs)):5.2f}   "
      f"load {ratio(gb_per_cpu_s(kl), gb_per_cpu_s(bl)):5.2f}   (kvtier with checksums, the baseline without)")
cs, cl = base_crc["store"], base_crc["load"]
print(f"{'kvtier / baseline+CRC32C  GB per CPU-s':40} store {ratio(gb_per_cpu_s(ks), gb_per_cpu_s(cs)):5.2f}   "
      f"load {ratio(gb_per_cpu_s(kl), gb_per_cpu_s(cl)):5.2f}   (same work; target store >= 1.2, load >= 1.5)")
ns_, nl = kv_nc["store"], kv_nc["load"]
print(f"{'kvtier no checksum / baseline  GB/CPU-s':40} store {ratio(gb_per_cpu_s(ns_), gb_per_cpu_s(bs)):5.2f}   "
      f"load {ratio(gb_per_cpu_s(nl), gb_per_cpu_s(bl)):5.2f}   (same work; target >= 1.2)")
def crc_share(d, name):
    return d["details"][name]["checksum_s_per_gb"]
print(f"{'CRC32C CPU s/GB (kvtier, baseline+CRC)':40} store {crc_share(kv, 'store'):.4f} / {crc_share(base_crc, 'store'):.4f}   "
      f"load {crc_share(kv, 'load'):.4f} / {crc_share(base_crc, 'load'):.4f}   (one pass over each row)")
if repeat > 1:
    spread = "; ".join(f"{name} store {d['cpu_spread']['store'][0]:.3f}-{d['cpu_spread']['store'][1]:.3f}, "
                       f"load {d['cpu_spread']['load'][0]:.3f}-{d['cpu_spread']['load'][1]:.3f}"
                       for name, d in (("baseline", base), ("+CRC32C", base_crc), ("kvtier", kv),
                                       ("kvtier no checksum", kv_nc)))
    print(f"{'CPU s/GB range over the rounds':40} {spread}")
fio_ratio = None
if have_fio:
    def reader_clat(path):
        job = [j for j in load(path)["jobs"] if j["jobname"] == "reader"][0]
        pct = job["read"]["clat_ns"]["percentile"]
        return pct["50.000000"] / 1000.0, pct["99.000000"] / 1000.0
    a50, a99 = reader_clat("fio_read_alone.json")
    m50, m99 = reader_clat("fio_read_mixed.json")
    fio_ratio = m99 / a99 if a99 else float("nan")
if "mixed" in kv:
    m = kv["mixed"]
    dm = kv.get("details", {}).get("mixed", {})
    print(f"{'kvtier load p99 under stores / unloaded':40} {m['ratio_p99']:5.2f}   "
          f"({m['load_p99_us']:.0f} us vs {m['unloaded_load_p99_us']:.0f} us; p50 {m['load_p50_us']:.0f} us; "
          f"store stream {dm.get('store_stream_gbps', 0):.3f} GB/s; target <= 2.0)")
if fio_ratio is not None:
    print(f"{'fio read p99 under writes / alone':40} {fio_ratio:5.2f}   "
          f"({m99:.0f} us vs {a99:.0f} us; p50 {m50:.0f} vs {a50:.0f} us: the disk's own share)")
print()
print(f"rows verified: baseline {base['rows_verified']}/{rows} (corrupt {base['rows_corrupt']}), "
      f"kvtier {kv['rows_verified']}/{rows} (corrupt {kv['rows_corrupt']}), "
      f"kvtier no checksum {kv_nc['rows_verified']}/{rows} (corrupt {kv_nc['rows_corrupt']})")
print("GB = 1e9 bytes. CPU: fio's usr+sys; baseline and kvtier: getrusage over the phase minus the")
print("benchmark's own fill/verify (and kvtier's poll sleeps). fio writes into one directory; the baseline and")
print("kvtier also create vLLM's two shard directories per new block, as vLLM does.")
PY
