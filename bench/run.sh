#!/usr/bin/env bash
# bench/run.sh [--quick] [--out DIR] [--dir DIR] [--keep]
#
# kvtier's benchmark suite: runs every CPU-only benchmark, then prints ONE
# table of figures and ratios and writes it as JSON beside the raw output of
# each tool. Speed targets are judged from the printed ratios (each against a
# baseline measured in the same run), never asserted.
#
#   hashing       build/bin/hash_bench (Google Benchmark): ms per 128K-token
#                 prompt per algorithm, x over vLLM's Python hasher
#   eviction      build/bin/policy_bench: LRU and ARC operations per second
#   lookups       kvtier bench fs: batched existence checks of stored blocks
#   fs engine     bench/fio_compare.sh: kvtier vs fio and vs the thread-pool
#                 baseline doing vLLM's syscalls (GB/s, GB per CPU-second,
#                 load p99 under a store backlog)
#   CLI scan      bench/scan_vs_find.sh: kvtier du / fsck vs find
#   tiered store  kvtier bench tiers: store, then load in a fresh process
#   replay        kvtier replay --synthetic agents --restart: hit rate, load
#                 GB/s, warm-restart share from fs, TTFT with / without
#   GPU transfer  build/bin/transfer_bench --device 0 (only where nvidia-smi
#                 lists a GPU): kvtier staging vs a plain pinned cudaMemcpy
#
# Modes: --quick (small sizes: about a minute on a 2-core VM once built) and
# the default (fio_compare 4000 x 1 MiB, 200,000 files for the scan, 2000 x
# 2 MiB through the tiered store, the full agents trace: about 5-10 minutes
# there, most of it building the scan tree). Work files go to --dir (default: a fresh directory under /var/tmp,
# removed at the end unless --keep). Output: --out (default
# build/bench-results): summary.json, summary.txt and one raw file per tool.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

QUICK=0 KEEP=0 OUT=build/bench-results WORKDIR=
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    --out) OUT=$2; shift ;;
    --dir) WORKDIR=$2; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ $QUICK == 1 ]]; then
  FIO_ROWS=500 SCAN_FILES=20000 TIERS_ROWS=300 TIERS_ROW=256KiB TIERS_CPU=16MiB REPLAY_SCALE=0.3 BENCH_MIN_TIME=0.1
else
  FIO_ROWS=4000 SCAN_FILES=200000 TIERS_ROWS=2000 TIERS_ROW=2MiB TIERS_CPU=1GiB REPLAY_SCALE=1 BENCH_MIN_TIME=0.5
fi

scripts/bootstrap
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target kvtier_cli hash_bench policy_bench vllm_baseline transfer_bench >/dev/null
BIN=$REPO/build/bin

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ -z $WORKDIR ]]; then
  mkdir -p /var/tmp
  WORKDIR=$(mktemp -d /var/tmp/kvtier-bench.XXXXXX)
else
  mkdir -p "$WORKDIR"
fi
cleanup() { if [[ $KEEP == 0 ]]; then rm -rf "$WORKDIR"; fi; }
trap cleanup EXIT
START=$(date +%s)
step() { echo "bench/run.sh: $*" >&2; }

step "hashing (hash_bench)"
"$BIN/hash_bench" --benchmark_filter='BM_HashPrompt' --benchmark_min_time="$BENCH_MIN_TIME" \
  --benchmark_format=json >"$OUT/hash.json" 2>/dev/null

step "eviction policies (policy_bench)"
"$BIN/policy_bench" --benchmark_min_time="$BENCH_MIN_TIME" --benchmark_format=json >"$OUT/policy.json" 2>/dev/null

step "fs tier lookups (kvtier bench fs)"
mkdir -p "$WORKDIR/fs"
"$BIN/kvtier" bench fs --root "$WORKDIR/fs" --rows 5000 --row-bytes 64KiB --json >"$OUT/bench_fs.json"

step "fs engine vs fio and the baseline (bench/fio_compare.sh, $FIO_ROWS x 1 MiB)"
KVTIER_BUILD_DIR=$REPO/build bash bench/fio_compare.sh "$WORKDIR/fio" "$FIO_ROWS" >"$OUT/fio_compare.txt" 2>&1 ||
  step "fio_compare failed: see $OUT/fio_compare.txt"

step "CLI scan vs find (bench/scan_vs_find.sh, $SCAN_FILES files)"
bash bench/scan_vs_find.sh "$WORKDIR/scan" "$SCAN_FILES" >"$OUT/scan_vs_find.txt" 2>&1 ||
  step "scan_vs_find failed: see $OUT/scan_vs_find.txt"
rm -rf "$WORKDIR/scan"

step "tiered store end to end (kvtier bench tiers, $TIERS_ROWS x $TIERS_ROW)"
mkdir -p "$WORKDIR/tiers"
"$BIN/kvtier" bench tiers --root "$WORKDIR/tiers" --rows "$TIERS_ROWS" --row-bytes "$TIERS_ROW" \
  --cpu-bytes "$TIERS_CPU" --json >"$OUT/bench_tiers.json"

step "replay (kvtier replay --synthetic agents --restart --scale $REPLAY_SCALE)"
mkdir -p "$WORKDIR/replay"
"$BIN/kvtier" replay --synthetic agents --restart --scale "$REPLAY_SCALE" --root "$WORKDIR/replay" \
  --json >"$OUT/replay.json"

rm -f "$OUT/transfer_"*.json
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  step "GPU transfers (transfer_bench --device 0)"
  "$BIN/transfer_bench" --device 0 --json >"$OUT/transfer_128k.json"
  "$BIN/transfer_bench" --device 0 --row-bytes 262144 --rows 2048 --json >"$OUT/transfer_16k.json"
fi

WALL=$(( $(date +%s) - START ))
python3 - "$OUT" "$QUICK" "$WALL" <<'PY'
import json, os, re, sys

out, quick, wall = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
rows = []  # (group, name, figure, unit, ratio, against)

def add(group, name, figure, unit, ratio=None, against=""):
    rows.append({"group": group, "name": name, "figure": figure, "unit": unit, "ratio": ratio, "against": against})

def load(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        return text

hashing = load("hash.json")
for b in hashing["benchmarks"]:
    add("hashing", b["label"], round(b["ms_per_128K"], 3), "ms / 128K tokens", round(b["x_vs_vllm"], 1),
        "vLLM's Python hasher (x faster)")

policy = load("policy.json")
names = {"0": "lru", "1": "arc"}
for b in policy["benchmarks"]:
    parts = b["name"].split("/")
    what = parts[0].replace("BM_", "")
    label = names.get(parts[1], parts[1]) + " " + what + ("/" + "/".join(parts[2:]) if len(parts) > 2 else "")
    add("eviction", label, round(b["items_per_second"] / 1e6, 2), "M items/s")

fs = load("bench_fs.json")
if isinstance(fs, dict):
    lk = fs["lookup"]
    add("lookups", "fs tier existence checks (jobs of %d)" % lk["keys_per_job"], int(lk["keys_per_s"]), "keys/s")

fio = load("fio_compare.txt")
if isinstance(fio, str):
    def grab(pattern):
        m = re.search(pattern, fio)
        return [float(x) for x in m.groups()] if m else None
    r = grab(r"kvtier / fio\s+GB/s\s+store\s+([\d.]+)\s+load\s+([\d.]+)")
    if r:
        add("fs engine", "store GB/s vs fio", None, "", r[0], "fio io_uring O_DIRECT (target >= 0.90)")
        add("fs engine", "load GB/s vs fio", None, "", r[1], "fio io_uring O_DIRECT (target >= 0.90)")
    elif "fio not found" in fio:
        add("fs engine", "vs fio", None, "", None, "skipped: fio not installed")
    r = grab(r"kvtier / baseline\s+GB/s\s+store\s+([\d.]+)\s+load\s+([\d.]+)")
    if r:
        add("fs engine", "store GB/s vs baseline", None, "", r[0], "vLLM-syscall thread pool")
        add("fs engine", "load GB/s vs baseline", None, "", r[1], "vLLM-syscall thread pool")
    r = grab(r"kvtier / baseline\s+GB per CPU-second\s+store\s+([\d.]+)\s+load\s+([\d.]+)")
    if r:
        add("fs engine", "store GB per CPU-s vs baseline", None, "", r[0], "thread pool (target >= 1.5)")
        add("fs engine", "load GB per CPU-s vs baseline", None, "", r[1], "thread pool (target >= 1.5)")
    r = grab(r"kvtier load p99 under stores / unloaded\s+([\d.]+)")
    if r:
        add("fs engine", "load p99 under stores / unloaded", None, "", r[0], "target <= 2.0")
    r = grab(r"fio read p99 under writes / alone\s+([\d.]+)")
    if r:
        add("fs engine", "fio read p99 under writes / alone", None, "", r[0], "the disk's own share")
    r = re.search(r"kvtier io_uring O_DIRECT\s+([\d.]+)\s+([\d.]+)", fio)
    if r:
        add("fs engine", "kvtier store GB/s", float(r.group(1)), "GB/s")
        add("fs engine", "kvtier load GB/s", float(r.group(2)), "GB/s")

scan = load("scan_vs_find.txt")
if isinstance(scan, str):
    for tool in ("kvtier du", "kvtier fsck"):
        m = re.search(re.escape(tool) + r"\s+([\d.]+)\s+([\d.]+)", scan)
        if m:
            add("CLI scan", tool, float(m.group(1)), "s", float(m.group(2)), "find -type f | wc -l (target <= 2)")

tiers = load("bench_tiers.json")
if isinstance(tiers, dict):
    add("tiered store", "store GB/s (to fs)", tiers["store"]["gbps"], "GB/s")
    add("tiered store", "load GB/s (fresh process)", tiers["load"]["gbps"], "GB/s")
    add("tiered store", "rows verified / corrupt", "%d / %d" % (tiers["rows_verified"], tiers["rows_corrupt"]), "rows")

replay = load("replay.json")
if isinstance(replay, dict):
    for p in replay["phases"]:
        n = p["name"]
        add("replay", n + " hit rate", round(p["hit_rate"], 3), "of prompt tokens")
        add("replay", n + " load GB/s", round(p["load_gbps"], 2), "GB/s")
        add("replay", n + " load p50 / p99", "%.2f / %.2f" % (p["load_p50_ms"], p["load_p99_ms"]), "ms")
        if p["ttft_s_with"] > 0:
            add("replay", n + " TTFT with kvtier", round(p["ttft_s_with"], 3), "s",
                round(p["ttft_s_without"] / p["ttft_s_with"], 2), "GPU cache alone (x faster)")
        if p["first_touch_tokens"] > 0:
            add("replay", n + " warm restart from fs", round(p["first_touch_fs_share"], 3),
                "of tokens from before the restart")
        add("replay", n + " rows verified / corrupt", "%d / %d" % (p["rows_verified"], p["rows_corrupt"]), "rows")

gpu = False
for name, label in (("transfer_128k.json", "2 MiB rows, 128 KiB pages"), ("transfer_16k.json", "256 KiB rows, 16 KiB pages")):
    t = load(name)
    if isinstance(t, dict):
        gpu = True
        for d in ("h2d", "d2h"):
            add("GPU transfer", "%s %s" % (d, label), t[d]["kvtier_gbps"], "GB/s", t[d]["ratio"],
                "pinned cudaMemcpyAsync probe (target >= 0.90)")
if not gpu:
    add("GPU transfer", "skipped (no GPU)", None, "", None, "")

def cell(v):
    return "" if v is None else str(v)

head = ("group", "name", "figure", "unit", "ratio", "against")
table = [head] + [tuple(cell(r[k]) for k in head) for r in rows]
widths = [max(len(line[i]) for line in table) for i in range(len(head))]
text = "kvtier benchmark suite (%s, %d s)\n" % ("quick" if quick else "full", wall)
for i, line in enumerate(table):
    text += "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() + "\n"
    if i == 0:
        text += "  ".join("-" * w for w in widths) + "\n"
print(text, end="")
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write(text)
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump({"mode": "quick" if quick else "full", "wall_s": wall, "rows": rows}, f, indent=1)
print("raw output and summary.json in " + out)
PY
