#!/usr/bin/env bash
# bench/run.sh [--quick] [--out DIR] [--dir DIR] [--keep]
#
# kvtier's benchmark suite runner. Builds what it needs (kvtier_cli hash_bench
# policy_bench vllm_baseline transfer_bench, RelWithDebInfo, in build/), runs
# the CPU-only suite, then prints ONE table (name | figure | unit | ratio |
# what the ratio is against), each section naming the raw file its figures
# come from, and writes the same rows as JSON. Speed targets are judged by a
# reader from the printed ratios (each against a baseline measured in the same
# run, or vLLM's published figure for the hasher); nothing is asserted, and
# the script fails only when it cannot build or cannot run at all. A tool that
# fails gets a "FAILED" row naming its raw output; the others still run.
#
#   hashing       build/bin/hash_bench (Google Benchmark, BM_HashPrompt): ms per
#                 128K-token prompt per algorithm (sha256, sha256_cbor, xxhash,
#                 xxhash_cbor); ratio = x faster than vLLM's Python hasher
#   eviction      build/bin/policy_bench: LRU and ARC (100k rows) items/s per
#                 benchmark; ARC's ratio is against LRU's same benchmark
#   lookups       kvtier bench fs (its lookup phase, `.lookup` in the JSON):
#                 existence checks of every stored block in jobs of 64 keys,
#                 statx through the ring on warm dentries. No tool measures
#                 lookups on their own; this is the figure that stands for them.
#   fs tier       bench/fio_compare.sh DIR ROWS 1048576 32: kvtier's io_uring fs
#                 tier vs fio (io_uring, O_DIRECT) and vs the thread-pool
#                 baseline doing vLLM's syscalls: GB/s, GB per CPU-second, load
#                 p99 under a store stream / unloaded ("skipped: fio not
#                 installed" for the fio rows without fio)
#   CLI scan      bench/scan_vs_find.sh DIR N: kvtier du / fsck time vs
#                 `find -type f | wc -l`; then du --json and fsck --json once
#                 more on the same tree to show they scanned all N files (the
#                 script times them ignoring their exit status)
#   tiered store  kvtier bench tiers: store through a CPU tier into an fs tier,
#                 load and verify in a fresh process
#   replay        kvtier replay --synthetic agents --restart: per phase hit rate,
#                 load GB/s and p50/p99, TTFT with kvtier vs the GPU cache alone,
#                 after the restart the share of earlier tokens loaded from fs
#   GPU transfer  build/bin/transfer_bench --device 0 --json, default layout
#                 (2 MiB rows, 128 KiB pages) and --row-bytes 262144 --rows 2048
#                 (16 KiB pages): kvtier's stager vs a plain pinned copy probe;
#                 only when `nvidia-smi -L` lists a GPU, else one "skipped" row.
#                 (On such a machine bench tiers and replay also run through
#                 device 0, their default; their rows say which device.)
#
# Modes (wall times on the 2-core development VM, built; its disk is shared,
# mounted with discard, and its speed varies from run to run):
#   --quick   the table after 40-110 s, then removing the work directory takes
#             50-210 s (measured over four runs): 2-4.5 minutes in all:
#             hash/policy benches 0.1 s per figure, lookups over 5000 x 64 KiB
#             rows, fio_compare 500 rows of 1 MiB (QD 32), scan of 20,000
#             files, bench tiers 300 x 256 KiB rows through a 16 MiB CPU tier,
#             replay --scale 0.3 with the GPU pool scaled the same way
#             (--gpu-blocks 2458) so that its tiers see the pressure of the
#             full run
#   default   not measured; from the quick run's steps scaled by size, the
#             table after 5-8 minutes, and removing the 200,000-file scan tree
#             may take as long again on that disk (--keep skips it): benches
#             0.5 s per figure, lookups over 20000 x 64 KiB rows, fio_compare
#             4000 rows of 1 MiB (needs about 21 GB free under the work
#             directory), scan of 200,000 files, bench tiers 2000 x 2 MiB rows
#             through a 1 GiB CPU tier, the full agents trace (--scale 1)
#
# Options:
#   --out DIR   output directory (default build/bench-results): summary.txt (the
#               table), summary.json ({mode, wall_s, build_s, steps[], rows[]}:
#               rows carry group, source, name, figure, unit, ratio, against),
#               steps.tsv (exit status and seconds per step), build.log
#               and the raw output of every tool: hash.json, policy.json,
#               bench_fs.json, fio_compare.txt + fio_compare/*.json (fio's,
#               the baseline's and kvtier's JSON), scan_vs_find.txt,
#               scan_du.json, scan_fsck.json, bench_tiers.json, replay.json,
#               transfer_128k.json and transfer_16k.json (GPU only); a tool's
#               stderr, when it wrote any, beside it as <file>.stderr
#   --dir DIR   where the work files go: a fresh directory is made under DIR
#               (default /var/tmp) and removed at the very end, after the
#               table, unless --keep (the steps' files stay until then: the
#               lookup rows, the scan tree, the tiers' and the replay's roots,
#               about 7 GB in the default mode; fio_compare.sh removes its own)
#   --keep      keep the work directory
set -euo pipefail

CALLER_PWD=$PWD
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abspath() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$CALLER_PWD/$1" ;; esac; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$REPO/bench/run.sh"; }

QUICK=0 KEEP=0 OUT=$REPO/build/bench-results WORKBASE=/var/tmp
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    --out|--dir)
      [[ $# -ge 2 && -n $2 ]] || { echo "bench/run.sh: $1 needs a directory" >&2; exit 2; }
      if [[ $1 == --out ]]; then OUT=$(abspath "$2"); else WORKBASE=$(abspath "$2"); fi
      shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
cd "$REPO"

if [[ $QUICK == 1 ]]; then
  MODE=quick BENCH_MIN_TIME=0.1 LOOKUP_ROWS=5000 FIO_ROWS=500 SCAN_FILES=20000
  TIERS_ROWS=300 TIERS_ROW=256KiB TIERS_CPU=16MiB REPLAY_ARGS=(--scale 0.3 --gpu-blocks 2458)
else
  MODE=full BENCH_MIN_TIME=0.5 LOOKUP_ROWS=20000 FIO_ROWS=4000 SCAN_FILES=200000
  TIERS_ROWS=2000 TIERS_ROW=2MiB TIERS_CPU=1GiB REPLAY_ARGS=(--scale 1)
fi
FIO_ROW_BYTES=1048576 FIO_QD=32 LOOKUP_ROW=64KiB

step() { echo "bench/run.sh: $*" >&2; }
START=$(date +%s)

# ---- output directory: only the files this script writes are replaced --------
mkdir -p "$OUT"
rm -rf "$OUT/fio_compare"
for f in summary.txt summary.json steps.tsv build.log hash.json policy.json bench_fs.json fio_compare.txt \
         scan_vs_find.txt scan_du.json scan_fsck.json bench_tiers.json replay.json transfer_128k.json transfer_16k.json; do
  rm -f "$OUT/$f" "$OUT/$f.stderr"
done

# ---- build --------------------------------------------------------------------
step "building kvtier_cli hash_bench policy_bench vllm_baseline transfer_bench (log: $OUT/build.log)"
if ! { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
       cmake --build build -j"$(nproc)" --target kvtier_cli hash_bench policy_bench vllm_baseline transfer_bench; } \
     >"$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log" >&2
  echo "bench/run.sh: the build failed (full log: $OUT/build.log)" >&2
  exit 1
fi
BIN=$REPO/build/bin
BUILD_S=$(( $(date +%s) - START ))

# ---- work directory -------------------------------------------------------------
mkdir -p "$WORKBASE"
WORKDIR=$(mktemp -d "$WORKBASE/kvtier-bench.XXXXXX")
# Every step's files stay until the end (bench fs and bench tiers get --keep):
# deleting them between steps would make the next step share the disk with the
# deletion (tens of seconds for the scan tree on this VM's discard-mounted
# ext4), and the table is printed first.
cleanup() {
  if [[ $KEEP == 0 ]]; then
    local t0=$SECONDS
    rm -rf "$WORKDIR"
    step "work directory removed ($(( SECONDS - t0 )) s)"
  else
    step "work files kept in $WORKDIR"
  fi
}
trap cleanup EXIT

# run_tool NAME FILE CMD...: CMD's stdout goes to $OUT/FILE, its stderr to
# $OUT/FILE.stderr (deleted when empty); a failure is recorded in steps.tsv
# (and shows as a FAILED row), not fatal.
printf 'step\tfile\trc\tseconds\n' >"$OUT/steps.tsv"
run_tool() {
  local name=$1 file=$2 rc=0 t0 t1
  shift 2
  step "$name"
  t0=$(date +%s.%N)
  "$@" >"$OUT/$file" 2>"$OUT/$file.stderr" || rc=$?
  t1=$(date +%s.%N)
  [[ -s $OUT/$file.stderr ]] || rm -f "$OUT/$file.stderr"
  if [[ $rc != 0 ]]; then step "  $name failed (exit $rc): see $OUT/$file and $file.stderr"; fi
  printf '%s\t%s\t%s\t%.1f\n' "$name" "$file" "$rc" "$(echo "$t1 - $t0" | bc -l)" >>"$OUT/steps.tsv"
}

# ---- the suite --------------------------------------------------------------------
run_tool "hashing" hash.json \
  "$BIN/hash_bench" --benchmark_filter='^BM_HashPrompt/' --benchmark_min_time="$BENCH_MIN_TIME" --benchmark_format=json

run_tool "eviction policies" policy.json \
  "$BIN/policy_bench" --benchmark_min_time="$BENCH_MIN_TIME" --benchmark_format=json

# Lookups: `kvtier bench fs` times existence lookups of every row it stored
# (its "lookup" object) after the store and load phases; that is the figure.
mkdir -p "$WORKDIR/lookup"
run_tool "lookups (kvtier bench fs, $LOOKUP_ROWS x $LOOKUP_ROW)" bench_fs.json \
  "$BIN/kvtier" bench fs --root "$WORKDIR/lookup" --rows "$LOOKUP_ROWS" --row-bytes "$LOOKUP_ROW" --json --keep

# fio_compare keeps its raw JSON (KEEP_RAW=1) in a fresh directory under
# $TMPDIR: point that into the work directory, then copy it to $OUT/fio_compare/.
mkdir -p "$WORKDIR/fio-raw"
TMPDIR=$WORKDIR/fio-raw KEEP_RAW=1 KVTIER_BUILD_DIR=$REPO/build \
  run_tool "fs tier vs fio and the baseline (bench/fio_compare.sh, $FIO_ROWS x $FIO_ROW_BYTES B, QD $FIO_QD)" \
  fio_compare.txt bash bench/fio_compare.sh "$WORKDIR/fio" "$FIO_ROWS" "$FIO_ROW_BYTES" "$FIO_QD"
for raw in "$WORKDIR"/fio-raw/kvtier-fio-compare-json.*; do
  if [[ -d $raw ]]; then
    mkdir -p "$OUT/fio_compare"
    cp "$raw"/*.json "$OUT/fio_compare/" 2>/dev/null || true
  fi
done

KVTIER_BUILD_DIR=$REPO/build \
  run_tool "CLI scan vs find (bench/scan_vs_find.sh, $SCAN_FILES files)" \
  scan_vs_find.txt bash bench/scan_vs_find.sh "$WORKDIR/scan" "$SCAN_FILES"
# scan_vs_find.sh times du and fsck whatever their exit status: record what they
# saw on the same tree (fsck exits 4 on findings, hence `|| true`).
if [[ -d $WORKDIR/scan ]]; then
  "$BIN/kvtier" du "$WORKDIR/scan" --json --force >"$OUT/scan_du.json" 2>"$OUT/scan_du.json.stderr" || true
  "$BIN/kvtier" fsck "$WORKDIR/scan" --json --force >"$OUT/scan_fsck.json" 2>"$OUT/scan_fsck.json.stderr" || true
  for f in scan_du.json scan_fsck.json; do [[ -s $OUT/$f.stderr ]] || rm -f "$OUT/$f.stderr"; done
fi

mkdir -p "$WORKDIR/tiers"
run_tool "tiered store end to end (kvtier bench tiers, $TIERS_ROWS x $TIERS_ROW, CPU tier $TIERS_CPU)" bench_tiers.json \
  "$BIN/kvtier" bench tiers --root "$WORKDIR/tiers" --rows "$TIERS_ROWS" --row-bytes "$TIERS_ROW" \
  --cpu-bytes "$TIERS_CPU" --json --keep

mkdir -p "$WORKDIR/replay"
run_tool "replay (kvtier replay --synthetic agents --restart ${REPLAY_ARGS[*]})" replay.json \
  "$BIN/kvtier" replay --synthetic agents --restart "${REPLAY_ARGS[@]}" --root "$WORKDIR/replay" --json

HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  HAVE_GPU=1
  run_tool "GPU transfers (transfer_bench --device 0, 2 MiB rows / 128 KiB pages)" transfer_128k.json \
    "$BIN/transfer_bench" --device 0 --json
  run_tool "GPU transfers (transfer_bench --device 0, 256 KiB rows / 16 KiB pages)" transfer_16k.json \
    "$BIN/transfer_bench" --device 0 --row-bytes 262144 --rows 2048 --json
fi

# ---- the table ------------------------------------------------------------------
WALL=$(( $(date +%s) - START ))
HAVE_FIO=0
if command -v fio >/dev/null 2>&1; then HAVE_FIO=1; fi
python3 - "$OUT" "$MODE" "$WALL" "$HAVE_GPU" "$SCAN_FILES" "$HAVE_FIO" "$BUILD_S" <<'PY'
import csv, json, math, os, re, sys

out, mode, wall, have_gpu, scan_files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5])
have_fio, build_s = sys.argv[6] == "1", int(sys.argv[7])

with open(os.path.join(out, "steps.tsv")) as f:
    steps = [dict(r, rc=int(r["rc"]), seconds=float(r["seconds"])) for r in csv.DictReader(f, delimiter="\t")]
step_of = {s["file"]: s for s in steps}

sections = []  # (title, source file, rows)

def section(title, source):
    sections.append((title, source, []))

def num(v):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return v

def add(name, figure=None, unit="", ratio=None, against=""):
    if isinstance(figure, (list, tuple)):
        figure = [num(x) for x in figure]
    else:
        figure = num(figure)
    sections[-1][2].append({"name": name, "figure": figure, "unit": unit, "ratio": num(ratio), "against": against})

def failed(file, why=None):
    s = step_of.get(file)
    if why is None:
        why = "failed (exit %d)" % s["rc"] if s and s["rc"] else "no usable output"
    extra = " and %s.stderr" % file if os.path.exists(os.path.join(out, file + ".stderr")) else ""
    add("FAILED", None, "", None, "%s: see %s%s" % (why, file, extra))

def read(file):
    """The tool's output (JSON or text), or None after adding a failed row."""
    path = os.path.join(out, file)
    s = step_of.get(file)
    if s is not None and s["rc"] != 0 or not os.path.exists(path) or os.path.getsize(path) == 0:
        failed(file)
        return None
    with open(path) as f:
        text = f.read()
    if not file.endswith(".json"):
        return text
    try:
        return json.loads(text)
    except ValueError as e:
        failed(file, "unreadable JSON (%s)" % e)
        return None

def guarded(file, fn):
    data = read(file)
    if data is None:
        return
    try:
        fn(data)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
        failed(file, "unexpected output (%s: %s)" % (type(e).__name__, e))

def device_name(d):
    return "host stand-in" if d is None or d < 0 else "GPU %d" % d

# 1. hashing ------------------------------------------------------------------------
section("hashing: ms per 128K-token prompt (131072 tokens, 8192 blocks of 16)", "hash.json")
def hashing(j):
    for b in j["benchmarks"]:
        if b.get("error_occurred"):
            add(b["name"], None, "", None, "FAILED: " + b.get("error_message", ""))
            continue
        ms, x = b["ms_per_128K"], b["x_vs_vllm"]
        add(b["label"], ms, "ms/128K tok", x,
            "vLLM's Python hasher, %.0f ms (x faster; target >= 30)" % (ms * x))
guarded("hash.json", hashing)

# 2. eviction policies ------------------------------------------------------------
section("eviction policies at 100k rows (items: gets, rows evicted, keys touched)", "policy.json")
def policy(j):
    names = {"0": "lru", "1": "arc"}
    figures = {}
    for b in j["benchmarks"]:
        if b.get("error_occurred"):
            add(b["name"], None, "", None, "FAILED: " + b.get("error_message", ""))
            continue
        parts = b["name"].split("/")
        what = parts[0].replace("BM_", "")
        if what == "InsertEvict":
            what += " n=%s held=%s%%" % (parts[2], parts[3])
        figures[(names.get(parts[1], parts[1]), what)] = b["items_per_second"]
    for (pol, what), ips in figures.items():
        lru = figures.get(("lru", what))
        ratio = ips / lru if pol != "lru" and lru else None
        add("%s %s" % (pol, what), ips / 1e6, "M items/s", ratio,
            "lru's items/s, same benchmark (%.0f ns/item vs %.0f)" % (1e9 / ips, 1e9 / lru) if ratio else
            "%.0f ns/item" % (1e9 / ips))
guarded("policy.json", policy)

# 3. lookups ------------------------------------------------------------------------
section("lookups: kvtier bench fs lookup phase (existence checks of stored blocks)", "bench_fs.json")
def lookups(j):
    lk = j["lookup"]
    add("fs tier lookups, jobs of %d keys" % lk["keys_per_job"], lk["keys_per_s"], "keys/s", None,
        "%d of %d keys found" % (lk["hits"], lk["keys"]))
    add("  CPU per key", lk["cpu_s"] * 1e6 / lk["keys"] if lk["keys"] else None, "us")
guarded("bench_fs.json", lookups)

# 4. fs tier vs fio and the baseline ---------------------------------------------------
section("fs tier: kvtier vs fio and vs the vLLM-syscall thread pool", "fio_compare.txt (+ fio_compare/*.json)")
NUM = r"(-?[\d.]+|nan|inf)"
def f(x):
    return float(x)
def fs_tier(t):
    tools = {}
    for line in t.splitlines():
        m = re.match(r"^(fio |vLLM baseline|kvtier )(.*?)\s+" + r"\s+".join([NUM] * 6) + r"\s*$", line)
        if m:
            key = {"fio ": "fio", "vLLM baseline": "baseline", "kvtier ": "kvtier"}[m.group(1)]
            v = [f(x) for x in m.groups()[2:]]
            tools[key] = {"label": (m.group(1) + m.group(2)).strip(), "store_gbps": v[0], "load_gbps": v[1],
                          "store_gb_cpu": v[4], "load_gb_cpu": v[5]}
    kv, base, fio = tools["kvtier"], tools["baseline"], tools.get("fio")
    def ratio_line(label):
        m = re.search(re.escape(label) + r"\s+store\s+" + NUM + r"\s+load\s+" + NUM, t)
        return (f(m.group(1)), f(m.group(2))) if m else (None, None)
    r = ratio_line("kvtier / fio  GB/s")
    if fio and r[0] is not None:
        for i, d in enumerate(("store", "load")):
            add("%s GB/s, kvtier / fio" % d, kv[d + "_gbps"], "GB/s", r[i],
                "%s: %.3f GB/s (target >= 0.90)" % (fio["label"], fio[d + "_gbps"]))
    else:
        add("kvtier / fio", None, "", None, "skipped: fio not installed" if not have_fio else
            "no kvtier / fio line in fio_compare.txt")
    r = ratio_line("kvtier / baseline  GB/s")
    for i, d in enumerate(("store", "load")):
        add("%s GB/s, kvtier / baseline" % d, kv[d + "_gbps"], "GB/s", r[i],
            "%s: %.3f GB/s" % (base["label"], base[d + "_gbps"]))
    r = ratio_line("kvtier / baseline  GB per CPU-second")
    for i, d in enumerate(("store", "load")):
        add("%s GB per CPU-s, kvtier / baseline" % d, kv[d + "_gb_cpu"], "GB/CPU-s", r[i],
            "baseline: %.2f GB/CPU-s (target >= 1.5)" % base[d + "_gb_cpu"])
    r = ratio_line("kvtier / baseline+CRC32C  GB per CPU-s")
    for i, d in enumerate(("store", "load")):
        add("%s GB per CPU-s, kvtier / baseline+CRC32C" % d, kv[d + "_gb_cpu"], "GB/CPU-s", r[i],
            "the baseline doing kvtier's integrity work too (vllm_baseline --crc)")
    m = re.search(r"kvtier load p99 under stores / unloaded\s+" + NUM + r"\s+\(([\d.]+) us vs ([\d.]+) us", t)
    if m:
        add("load p99 under stores", f(m.group(2)) / 1e3, "ms", f(m.group(1)),
            "kvtier unloaded load p99, %.2f ms (target <= 2.0)" % (f(m.group(3)) / 1e3))
    else:
        add("load p99 under stores", None, "", None, "FAILED: no such line in fio_compare.txt")
    m = re.search(r"fio read p99 under writes / alone\s+" + NUM + r"\s+\(([\d.]+) us vs ([\d.]+) us", t)
    if m:
        add("fio read p99 under writes", f(m.group(2)) / 1e3, "ms", f(m.group(1)),
            "fio reads alone, %.2f ms (the disk's own share)" % (f(m.group(3)) / 1e3))
    m = re.search(r"rows verified: baseline (\d+)/(\d+) \(corrupt (\d+)\), kvtier (\d+)/(\d+) \(corrupt (\d+)\)", t)
    if m:
        add("kvtier rows verified / corrupt", [int(m.group(4)), int(m.group(6))], "rows", None,
            "of %s stored (baseline: %s / %s)" % (m.group(5), m.group(1), m.group(3)))
guarded("fio_compare.txt", fs_tier)

# 5. CLI scan vs find ---------------------------------------------------------------------
section("CLI scan vs find (warm tree of %d block files)" % scan_files, "scan_vs_find.txt (+ scan_du.json, scan_fsck.json)")
def scan(t):
    m = re.search(r"find -type f \| wc -l\s+([\d.]+)", t)
    t_find = f(m.group(1))
    for tool in ("kvtier du", "kvtier fsck"):
        m = re.search(re.escape(tool) + r"\s+([\d.]+)\s+" + NUM, t)
        add(tool, f(m.group(1)), "s", f(m.group(2)), "find -type f | wc -l, %.2f s (target <= 2)" % t_find)
    try:
        with open(os.path.join(out, "scan_du.json")) as fh:
            du = json.load(fh)
        with open(os.path.join(out, "scan_fsck.json")) as fh:
            fsck = json.load(fh)["summary"]
        add("  files du scanned / blocks fsck checked", [du["files_scanned"], fsck["blocks_checked"]], "files",
            None, "of %d created; fsck findings %d (%s)" % (scan_files, fsck["findings"],
                                                             ", ".join(sorted(fsck.get("by_kind", {}))) or "none"))
    except (OSError, ValueError, KeyError) as e:
        add("  du / fsck check", None, "", None, "FAILED: unreadable scan_du.json / scan_fsck.json (%s)" % e)
guarded("scan_vs_find.txt", scan)

# 6. tiered store ---------------------------------------------------------------------------
section("tiered store end to end (kvtier bench tiers)", "bench_tiers.json")
def tiers(j):
    add("store GB/s", j["store"]["gbps"], "GB/s", None,
        "%d x %d KiB rows, CPU tier %d MiB, %s" % (j["rows"], j["row_bytes"] // 1024, j["cpu_bytes"] >> 20,
                                                   device_name(j.get("device"))))
    add("load GB/s (fresh process)", j["load"]["gbps"], "GB/s", None,
        "hits on load: " + ", ".join("%s %d" % kv for kv in sorted(j.get("hits", {}).items())))
    add("rows verified / corrupt", [j["rows_verified"], j["rows_corrupt"]], "rows", None,
        "of %d (missing %d)" % (j["rows"], j.get("rows_missing", 0)))
guarded("bench_tiers.json", tiers)

# 7. replay ------------------------------------------------------------------------------------
section("replay: kvtier replay --synthetic agents --restart", "replay.json")
def replay(j):
    for p in j["phases"]:
        n = p["name"]
        add("%s hit rate" % n, p["hit_rate"], "of prompt tok", None,
            "%d requests, %d prompt tokens, %s" % (p["requests"], p["prompt_tokens"], device_name(p.get("device"))))
        add("%s load GB/s" % n, p["load_gbps"], "GB/s", None,
            "p50 %.2f ms, p99 %.2f ms per request; %d rows loaded" % (p["load_p50_ms"], p["load_p99_ms"],
                                                                    p.get("rows_loaded", 0)))
        w, wo = p["ttft_s_with"], p["ttft_s_without"]
        add("%s TTFT with / without" % n, [w, wo], "s", wo / w if w > 0 else None,
            "GPU cache alone (without / with: x faster with kvtier)")
        if n == "after_restart" or p.get("first_touch_tokens", 0) > 0:
            add("%s earlier tokens from fs" % n, p["first_touch_fs_share"], "share", None,
                "of %d tokens from before the restart needed again" % p.get("first_touch_tokens", 0))
        add("%s rows verified / corrupt" % n, [p["rows_verified"], p["rows_corrupt"]], "rows")
guarded("replay.json", replay)

# 8. GPU -------------------------------------------------------------------------------------------
section("GPU transfer (transfer_bench --device 0)", "transfer_128k.json, transfer_16k.json")
if not have_gpu:
    add("GPU transfer: skipped (no GPU)")
else:
    for file, layout in (("transfer_128k.json", "2 MiB rows, 128 KiB pages"),
                         ("transfer_16k.json", "256 KiB rows, 16 KiB pages")):
        def transfer(t, layout=layout):
            c = t.get("copy", {})
            path = ", ".join("%s %d" % (k.replace("_segments", ""), v) for k, v in sorted(c.items())
                             if k.endswith("_segments") and v)
            for d in ("h2d", "d2h"):
                add("%s %s" % (d, layout), t[d]["kvtier_gbps"], "GB/s", t[d]["ratio"],
                    "pinned copy probe, %.2f GB/s (target >= 0.90)%s" % (t[d]["probe_gbps"],
                                                                        "; segments: " + path if path else ""))
        guarded(file, transfer)

# ---- print ------------------------------------------------------------------------------------------
def fig(v):
    if v is None:
        return ""
    if isinstance(v, list):
        return " / ".join(fig(x) for x in v)
    if isinstance(v, int):
        return str(v)
    a = abs(v)
    return "%.0f" % v if a >= 100 else "%.1f" % v if a >= 10 else "%.2f" % v if a >= 1 else "%.3f" % v

def rat(v):
    return "" if v is None else "%.1f" % v if abs(v) >= 10 else "%.2f" % v

head = ("name", "figure", "unit", "ratio", "ratio against / note")
cells = [[(r["name"], fig(r["figure"]), r["unit"], rat(r["ratio"]), r["against"]) for r in rows]
         for _, _, rows in sections]
widths = [max([len(head[i])] + [len(c[i]) for rows in cells for c in rows]) for i in range(4)]
def line(c):
    return ("  " + c[0].ljust(widths[0]) + "  " + c[1].rjust(widths[1]) + "  " + c[2].ljust(widths[2]) +
            "  " + c[3].rjust(widths[3]) + "  " + c[4]).rstrip()
bad = [s for s in steps if s["rc"] != 0]
text = ("kvtier benchmark suite (%s mode, %d s of which %d s building; GB = 1e9 bytes; ratios are judged, "
        "not asserted)\n" % (mode, wall, build_s))
text += line(head) + "\n" + line(["-" * w for w in widths] + ["-" * len(head[4])]) + "\n"
for (title, source, _), rows in zip(sections, cells):
    text += "%s   [%s]\n" % (title, source)
    for c in rows:
        text += line(c) + "\n"
if bad:
    text += "FAILED steps: " + "; ".join("%s (exit %d, %s)" % (s["step"], s["rc"], s["file"]) for s in bad) + "\n"
print(text, end="")
with open(os.path.join(out, "summary.txt"), "w") as fh:
    fh.write(text)
with open(os.path.join(out, "summary.json"), "w") as fh:
    json.dump({"mode": mode, "wall_s": wall, "build_s": build_s, "steps": steps,
               "rows": [dict(r, group=title, source=source) for title, source, rows in sections for r in rows]},
              fh, indent=1)
print("raw output, summary.txt and summary.json in " + out)
PY
