#!/usr/bin/env bash
# bench/gpu_host.sh [--smoke] [--budget-s N] [--only STEPS]
#
# Everything a lent GPU machine is for, in one command: it names the machine,
# runs the GPU tests, sweeps the stager against the pinned-copy probe, and
# runs the engine benchmarks on the machine's local disk, then writes
# "$OUT"/summary.md (a table per item), summary.json and raw.tar.gz (every log
# and JSON), and prints summary.md last (the device tool returns the end of
# the output). OUT defaults to ./gpu-host-out.
#
# The device machine runs another image than this repository's (no liburing,
# ISA-L, xxHash, CLI11, GoogleTest, fio; Python 3.12) and nothing can be
# installed there, so nothing is built there: bench/gpu_host_prepare.sh,
# run beforehand on the development machine, puts the binaries (CUDA for
# sm_90), the libraries they need, the kvtier module for Python 3.12, vLLM's
# assembled tree, SGLang's kit and a static fio into .gpu-carry/ (ignored;
# about 20 MiB, under the tool's 64 MiB), and this script uses that folder.
#
# THE DEVICE CALL (one call, ~8 minutes of the session's 15; the machine's
# start comes on top). On the development machine first:
#     bench/gpu_host_prepare.sh            # ~6 min at -j2 the first time; prints the size
# then the device tool's run with
#     command:   bash bench/gpu_host.sh
#     carry:     [".gpu-carry"]
#     timeout_s: 540
# (the script's own budget is 450 s, checked between steps, and each step
# runs under its own `timeout` cut to what is left of it; the summary and
# the tarball take a few seconds more). The
# figures come back in output_tail and under files_at (summary.md,
# summary.json, raw.tar.gz), rewritten after each step: a run the tool
# kills at its limit keeps the steps that ended. A second call, should one be needed, runs only
# the steps still missing, e.g. `bash bench/gpu_host.sh --only vllm,sglang
# --budget-s 200` (right away: the machine stays warm 30 s after a call, and
# a fresh start costs minutes), then give_back.
#
# Steps, in order (--only takes these names, comma-separated; machine always runs):
#   machine   GPU (nvidia-smi), CPU, memory, the disk under the work
#             directory, kernel, OS, glibc (against what .gpu-carry needs),
#             Python and torch
#   tests     every .gpu-carry/bin/gpu_*_test (GoogleTest JSON): on a GPU they
#             must pass, elsewhere they skip
#   transfer  transfer_bench against its pinned-memcpy probe, rows of 4 KiB to
#             2 MiB (pages of min(row, row/16 >= 4 KiB)), both directions,
#             --checksums on and off (off only, with a note, when the binary
#             has no such flag)
#   fio       bench/fio_compare.sh: kvtier (checksums on and off) against fio
#             and vLLM's syscalls, 2 rounds
#   vllm      bench/vllm_tier.py: kvtier against vLLM's own fs tier, 2 rounds,
#             --checksums on, then off
#   sglang    bench/sglang_backends.py: kvtier against SGLang's HiCacheFile and
#             fio, 2 rounds, --checksums on, then off (kvtier alone: HiCacheFile
#             has no checksums)
#
# --smoke: the same steps on any machine, with the host stand-in
# (transfer_bench --device -1), tiny sizes and 1 round, in under 2 minutes:
# the script's logic, parsing and summary, tested where there is no GPU.
#
# Environment: OUT (results), GPU_HOST_DIR (where the work directory goes, on
# the disk under test: a fresh kvtier-gpu-host.* in it, removed at the end;
# default .gpu-host-work in the repository), GPU_HOST_CARRY (default
# .gpu-carry), GPU_HOST_PYTHON (the interpreter with numpy and torch; default:
# the first of python3 and /usr/bin/python3 that imports the kvtier package).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CALLER_PWD=$PWD
SMOKE=0 BUDGET_S='' ONLY=machine,tests,transfer,fio,vllm,sglang
while [[ $# -gt 0 ]]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --budget-s) BUDGET_S=${2:?--budget-s needs seconds}; shift ;;
    --only) ONLY=${2:?--only needs step names}; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_host.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
abspath() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$CALLER_PWD/$1" ;; esac; }
OUT=$(abspath "${OUT:-gpu-host-out}")
# A fresh directory of this run's own under GPU_HOST_DIR (made in main):
# only it is removed at the end.
WORK_BASE=$(abspath "${GPU_HOST_DIR:-$REPO/.gpu-host-work}")
WORK=$WORK_BASE/run
CARRY=$(abspath "${GPU_HOST_CARRY:-$REPO/.gpu-carry}")
RAW=$WORK/raw
BIN=$CARRY/bin

# ---- sizes: the full run fits ~7 minutes on 16 cores; smoke, seconds on 2 ----
if [[ $SMOKE == 1 ]]; then
  MODE=smoke BUDGET_S=${BUDGET_S:-110} DEVICE=-1
  TB_SIZES=(4KiB 64KiB 2MiB) TB_PASS_BYTES=$(( 16 << 20 )) TB_REPEAT=1
  FIO_ROWS=48 FIO_ROW_BYTES=65536 FIO_QD=4 ROUNDS=1
  VLLM_ROWS=32 VLLM_SIZES=64KiB SGL_PAGES=16
else
  MODE=full BUDGET_S=${BUDGET_S:-450} DEVICE=0
  TB_SIZES=(4KiB 16KiB 64KiB 256KiB 1MiB 2MiB) TB_PASS_BYTES=$(( 512 << 20 )) TB_REPEAT=5
  FIO_ROWS=1000 FIO_ROW_BYTES=1048576 FIO_QD=32 ROUNDS=2
  VLLM_ROWS=2000 VLLM_SIZES=1MiB,64KiB SGL_PAGES=1024
fi

T0=$SECONDS
say() { printf 'gpu_host: %s\n' "$*" >&2; }
used() { echo $(( SECONDS - T0 )); }
wants() { [[ ,$ONLY, == *,$1,* ]]; }

# ---- steps: each under its own timeout, recorded in steps.tsv; a step that
# would start with less budget left than it needs is skipped, with a line --
# step NAME NEED_S CAP_S LOG CMD...: CMD's output to $RAW/LOG; never fatal.
step() {
  local name=$1 need=$2 cap=$3 log=$4 rc=0 t0=$SECONDS left status
  shift 4
  left=$(( BUDGET_S - $(used) ))
  if (( left < need )); then
    say "$name: SKIPPED: $(used) s of the $BUDGET_S s budget used, it needs about $need s"
    printf '%s\t%s\tskipped\t0\t%s s of %s s used\n' "$name" "$log" "$(used)" "$BUDGET_S" >>"$RAW/steps.tsv"
    return 0
  fi
  (( cap < left )) || cap=$left
  say "$name (at most $cap s; log $log)"
  # In the background, then `wait`: timeout runs the step in a process group
  # of its own, so the device tool's SIGTERM reaches only this script, and
  # bash runs a trap only once a foreground command has ended (up to the
  # step's cap later); a `wait` returns at once and the trap stops the step.
  STEP_T0=$SECONDS
  timeout -k 5 "$cap" "$@" >"$RAW/$log" 2>&1 </dev/null &
  STEP_PID=$! STEP_NAME=$name STEP_LOG=$log
  wait "$STEP_PID" || rc=$?
  STEP_PID=''
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  [[ $status == ok ]] || say "  $name: $status (exit $rc): see $log"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$log" "$status" "$(( SECONDS - t0 ))" "exit $rc" >>"$RAW/steps.tsv"
  snapshot partial
}
STEP_PID='' STEP_NAME='' STEP_LOG='' STEP_T0=0  # the step in flight

# The interrupt trap: the step in flight (its own process group) gets the
# TERM too; the EXIT trap then writes the summary.
interrupted() {
  note "interrupted after $(used) s"
  if [[ -n $STEP_PID ]]; then
    kill -TERM "$STEP_PID" 2>/dev/null || true
    printf '%s\t%s\tinterrupted\t%s\tstopped by the signal\n' "$STEP_NAME" "$STEP_LOG" "$(( SECONDS - STEP_T0 ))" \
      >>"$RAW/steps.tsv"
  fi
  exit 130
}

# A line in notes.txt, shown under the summary's steps (why something was
# skipped or is doubtful).
note() { say "NOTE: $*"; echo "$*" >>"$RAW/notes.txt"; }

# ---- what the steps need ---------------------------------------------------
check_carry() {
  if [[ ! -x $BIN/kvtier ]]; then
    note "no $BIN/kvtier: run bench/gpu_host_prepare.sh on the development machine and name .gpu-carry in carry"
    return 1
  fi
  local missing
  missing=$(ldd "$BIN"/* 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t' ' ' || true)
  [[ -z $missing ]] || note "libraries the carried binaries cannot find:$missing"
  # fio_compare.sh and sglang_backends.py call `fio`: the carried one when the machine has none.
  command -v fio >/dev/null || PATH=$PATH:$BIN
}

# The interpreter and kvtier package for the Python benchmarks: the carried
# module (built for the device's 3.12) first, then a development build.
pick_python() {
  local py path
  for py in ${GPU_HOST_PYTHON:-python3 /usr/bin/python3}; do
    command -v "$py" >/dev/null || continue
    for path in "$CARRY/python" "$REPO/build/python"; do
      if PYTHONPATH=$path "$py" -c 'import kvtier, numpy' >/dev/null 2>&1; then
        PY=$(command -v "$py") KVTIER_PYPATH=$path
        # vLLM's hashing imports cbor2; the carried pure-Python copy only when the machine has none.
        "$PY" -c 'import cbor2' >/dev/null 2>&1 || KVTIER_PYPATH=$KVTIER_PYPATH:$CARRY/pylib
        return 0
      fi
    done
  done
  PY='' KVTIER_PYPATH=''
  note "Python benchmarks skipped: no interpreter among '${GPU_HOST_PYTHON:-python3 /usr/bin/python3}' imports kvtier" \
       "and numpy from $CARRY/python or $REPO/build/python (the carried module is for CPython $(sed -n 's/^python //p' "$CARRY/MANIFEST" 2>/dev/null))"
  return 1
}

# ../shared beside the checkout (a helper's worktree is two levels down), or the carried copy.
shared_dir() {
  local d
  for d in "$CARRY/shared" "$REPO/../shared" "$REPO/../../shared"; do
    [[ -f $d/$1 ]] && { (cd "$d" && pwd); return 0; }
  done
  return 1
}

# vLLM's assembled tree: the carried one when its fs_io_C fits this
# interpreter, else assembled here from ../shared/vllm.
vllm_tree() {
  local suffix shared
  suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  if [[ -f $CARRY/vllm-tree/vllm/fs_io_C$suffix ]]; then echo "$CARRY/vllm-tree"; return 0; fi
  shared=$(shared_dir vllm/assemble.sh) || { note "vLLM benchmark skipped: no vLLM tree for $suffix and no ../shared/vllm"; return 1; }
  PYTHON=$PY bash "$shared/vllm/assemble.sh" "$WORK/vllm-tree" >"$RAW/vllm_assemble.log" 2>&1 ||
    { note "vLLM benchmark skipped: assembling $shared/vllm failed (vllm_assemble.log)"; return 1; }
  echo "$WORK/vllm-tree"
}

# The engine benchmarks' sizes assume a disk of about 1.5 GB/s (their I/O is
# ~28 GB for fio_compare, ~8 GB per vllm_tier run, ~6 GB per sglang run):
# one 1 GiB direct write first, and a slower disk gets proportionally fewer
# rows, so that every benchmark still fits the budget (never under a floor).
size_for_disk() {
  local gbps scale
  command -v fio >/dev/null || return 0
  mkdir -p "$WORK/probe"
  gbps=$(fio --name=probe --directory="$WORK/probe" --rw=write --bs=1M --size=1G --ioengine=io_uring --direct=1 \
           --iodepth=32 --output-format=json 2>/dev/null | "${PY:-python3}" -c \
           'import json, sys; print("%.3f" % (json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 1e9))' 2>/dev/null) || true
  rm -rf "$WORK/probe"
  [[ -n $gbps ]] || return 0
  echo "disk_write_gbps: $gbps (fio, 1 GiB, 1 MiB writes, direct, QD 32)" >>"$RAW/machine.txt"
  scale=$(awk -v g="$gbps" 'BEGIN {s = g / 1.5; print (s > 1 ? 1 : s < 0.125 ? 0.125 : s)}')
  [[ $scale == 1 ]] && return 0
  FIO_ROWS=$(awk -v n="$FIO_ROWS" -v s="$scale" 'BEGIN {printf "%d", n * s < 128 ? 128 : n * s}')
  VLLM_ROWS=$(awk -v n="$VLLM_ROWS" -v s="$scale" 'BEGIN {printf "%d", n * s < 256 ? 256 : n * s}')
  SGL_PAGES=$(awk -v n="$SGL_PAGES" -v s="$scale" 'BEGIN {printf "%d", n * s < 256 ? 256 : n * s}')
  note "the disk writes $gbps GB/s: engine benchmarks scaled by $scale (fio_compare $FIO_ROWS rows, vllm_tier $VLLM_ROWS, sglang $SGL_PAGES pages)"
}

# ---- the steps -------------------------------------------------------------------
machine_info() {
  {
    echo "mode: $MODE; budget: $BUDGET_S s; started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max \
                   --format=csv,noheader 2>/dev/null | head -1 | grep . || echo 'none (nvidia-smi lists no GPU)')"
    echo "cpu: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
    echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "disk: $(df -hP "$WORK" | awk 'NR==2 {print $2 " total, " $4 " free"}'), $(findmnt -no FSTYPE,SOURCE -T "$WORK" 2>/dev/null || true) under $WORK"
    echo "kernel: $(uname -r)"
    echo "os: $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'); carried binaries need $(sed -n 's/^glibc_needed //p' "$CARRY/MANIFEST" 2>/dev/null)"
    echo "python: ${PY:-none} $([[ -n $PY ]] && "$PY" -c 'import sys; print(sys.version.split()[0])'); kvtier from ${KVTIER_PYPATH:-nowhere}"
    echo "torch: $([[ -n $PY ]] && "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>/dev/null || echo none)"
    echo "fio: $(command -v fio || echo none) $(fio --version 2>/dev/null || true)"
    echo "carry: $(sed -n 's/^commit //p' "$CARRY/MANIFEST" 2>/dev/null); $(du -sh "$CARRY" 2>/dev/null | cut -f1)"
    echo "repo: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } >"$RAW/machine.txt"
  cat "$RAW/machine.txt" >&2
  if (( DEVICE >= 0 )) && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    note "no GPU listed by nvidia-smi: the GPU tests skip and transfer_bench --device $DEVICE fails (--smoke uses the host stand-in)"
  fi
}

gpu_tests() {
  local t name
  for t in "$BIN"/gpu_*; do
    [[ -x $t ]] || continue
    name=$(basename "$t")
    step "tests: $name" 5 150 "test_$name.log" "$t" --gtest_output="json:$RAW/test_$name.json"
  done
}

# Pages per row: 16 (vLLM's blocks per chunk) down to one 4 KiB page.
pages_for() { local b=$1 n=16; while (( b / n < 4096 )); do n=$(( n / 2 )); done; echo "$n"; }
bytes_of() { numfmt --from=iec "${1%iB}"; }

transfer_sweep() {
  local modes=(off) size bytes rows ck flag=()
  "$BIN/transfer_bench" --help >"$RAW/transfer_help.txt" 2>&1 || true
  if grep -q -- '--checksums' "$RAW/transfer_help.txt"; then
    modes=(on off)
  else
    note "transfer_bench has no --checksums flag: the sweep runs without it (the stager's own default, checksums off)"
  fi
  for size in "${TB_SIZES[@]}"; do
    # At most 65536 rows a pass: the smallest rows cost the stager per row, and
    # a slow path must not eat the budget (4 KiB rows: 256 MiB a pass).
    bytes=$(bytes_of "$size") rows=$(( TB_PASS_BYTES / bytes < 65536 ? TB_PASS_BYTES / bytes : 65536 ))
    for ck in "${modes[@]}"; do
      [[ ${#modes[@]} == 2 ]] && flag=(--checksums "$ck")
      step "transfer: $size rows, checksums $ck" 5 60 "transfer_${size}_$ck.json" \
        "$BIN/transfer_bench" --device "$DEVICE" --row-bytes "$bytes" --rows "$rows" \
        --blocks-per-chunk "$(pages_for "$bytes")" --repeat "$TB_REPEAT" "${flag[@]}" --json
    done
  done
}

# fio_compare.sh refuses to start without room for every tool's files (its
# formula, repeated here): halve the rows until they fit in 80 % of the free
# space (the device's 64 GiB disk also holds its image).
fit_fio_rows() {
  local avail rows=$FIO_ROWS loads stream need
  avail=$(( $(df -Pk "$WORK" | awk 'NR==2 {print $4}') * 1024 ))
  while :; do
    loads=$(( rows - rows / 2 < 1000 ? rows - rows / 2 : 1000 ))
    stream=$(( rows > 8 * loads ? rows : 8 * loads ))
    need=$(( (2 * rows + ROUNDS * (4 * rows + stream)) * FIO_ROW_BYTES * 105 / 100 ))
    (( need > avail * 8 / 10 && rows > 64 )) || break
    rows=$(( rows / 2 ))
  done
  (( rows == FIO_ROWS )) || note "fio_compare: $rows rows instead of $FIO_ROWS (free space under $WORK)"
  FIO_ROWS=$rows
}

fio_compare() {
  mkdir -p "$WORK/fio" "$WORK/fio-raw"
  fit_fio_rows
  TMPDIR=$WORK/fio-raw KEEP_RAW=1 KVTIER_BUILD_DIR=$CARRY REPEAT=$ROUNDS \
    step "fio: kvtier vs fio and vLLM's syscalls" 40 200 fio_compare.txt \
    bash "$REPO/bench/fio_compare.sh" "$WORK/fio" "$FIO_ROWS" "$FIO_ROW_BYTES" "$FIO_QD"
  local raw
  for raw in "$WORK"/fio-raw/kvtier-fio-compare-json.*/*.json; do
    [[ -f $raw ]] && cp "$raw" "$RAW/fio_$(basename "$raw")"
  done
  return 0
}

vllm_bench() {
  local tree ck
  tree=$(vllm_tree) || return 0
  for ck in on off; do
    PYTHONPATH=$KVTIER_PYPATH PYTHONUNBUFFERED=1 \
      step "vllm: kvtier vs vLLM's fs tier, checksums $ck" 40 150 "vllm_tier_$ck.txt" \
      "$PY" "$REPO/bench/vllm_tier.py" --dir "$WORK/vllm" --rows "$VLLM_ROWS" --row-bytes "$VLLM_SIZES" \
      --rounds "$ROUNDS" --vllm-tree "$tree" --checksums "$ck" --json "$RAW/vllm_tier_$ck.json"
  done
}

sglang_bench() {
  local shared ck
  "$PY" -c 'import torch' >/dev/null 2>&1 || { note "SGLang benchmark skipped: $PY has no torch"; return 0; }
  shared=$(shared_dir sglang/bench_backends.py) || { note "SGLang benchmark skipped: no SGLang kit (.gpu-carry/shared/sglang or ../shared/sglang)"; return 0; }
  mkdir -p "$WORK/sglang"
  # HiCacheFile has no checksums: measured once, in the "on" run.
  local backends=("HiCacheFile,kvtier v1,kvtier generic" "kvtier v1,kvtier generic") i=0
  for ck in on off; do
    KVTIER_SHARED_DIR=$shared PYTHONPATH=$KVTIER_PYPATH PYTHONUNBUFFERED=1 \
      step "sglang: kvtier vs HiCacheFile and fio, checksums $ck" 40 150 "sglang_$ck.txt" \
      "$PY" "$REPO/bench/sglang_backends.py" "$WORK/sglang" --pages "$SGL_PAGES" --rounds "$ROUNDS" \
      --backends "${backends[i++]}" --checksums "$ck" --json "$RAW/sglang_$ck.json"
  done
}

# ---- results: summary.md, summary.json and one tarball of the raw files
# (the device tool brings back at most 8 files from $OUT) -------------------------
# What has ended so far, into $OUT, after every step as well as at the end:
# a run the device tool kills (SIGKILL after its SIGTERM) keeps the summary
# and logs of the steps that ended. Each file is replaced whole (written
# beside it, then renamed), so $OUT holds 3 files, at most 3 more in flight.
# $1: "partial" between steps. Never fatal.
snapshot() {
  local py
  py=$(command -v python3 || command -v /usr/bin/python3 || true)
  mkdir -p "$OUT"
  if [[ -n $py ]]; then
    "$py" "$REPO/bench/gpu_host_summary.py" "$RAW" "$OUT" "$MODE" "$(used)" "$@" || say "the summary failed (exit $?)"
  fi
  if tar -czf "$OUT/raw.tar.gz.part" -C "$WORK" raw; then
    mv -f "$OUT/raw.tar.gz.part" "$OUT/raw.tar.gz"
  else
    say "the tarball failed: $OUT/raw.tar.gz holds an earlier state"
  fi
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  snapshot
  [[ -f $OUT/summary.md ]] && cat "$OUT/summary.md"
  recap
  rm -rf "$WORK"
  rmdir "$WORK_BASE" 2>/dev/null || true
  say "$MODE run done in $(used) s: $OUT/summary.md, summary.json, raw.tar.gz"
  exit "$rc"
}

# The device tool returns the last 12,000 characters of the output: the
# machine and every step that did not end well, again, in case the top was cut.
recap() {
  echo
  grep -E '^(gpu|cpu|disk):' "$RAW/machine.txt" 2>/dev/null || true
  awk -F'\t' 'NR > 1 && $3 != "ok" {print "step " $3 ": " $1 " (" $5 ")"}' "$RAW/steps.tsv"
}

main() {
  mkdir -p "$WORK_BASE" "$OUT"
  WORK=$(mktemp -d "$WORK_BASE/kvtier-gpu-host.XXXXXX") RAW=$WORK/raw
  mkdir -p "$RAW"
  rm -f "$OUT"/summary.md* "$OUT"/summary.json* "$OUT"/raw.tar.gz*
  printf 'step\tlog\tstatus\tseconds\tdetail\n' >"$RAW/steps.tsv"
  trap finish EXIT
  trap interrupted INT TERM
  check_carry || exit 1
  pick_python || true
  machine_info
  [[ $MODE == smoke ]] || size_for_disk
  wants tests && gpu_tests
  wants transfer && transfer_sweep
  wants fio && fio_compare
  if [[ -n $PY ]]; then
    wants vllm && vllm_bench
    wants sglang && sglang_bench
  fi
  return 0
}

main
