#!/usr/bin/env bash
# kv_events_cost.sh DIR [ROWS=2000] [ROW_BYTES=262144] [QD=32] [REPEAT=3]
# kv_events_cost.sh --smoke [DIR]
#
# What kvtier's KV events cost the fs tier (issue 41 item 5, docs/kv-events.md):
#   part 1: `kvtier bench fs` with events off and with events on (every stored row publishes
#     vLLM's BlockStored to a real subscriber process, bench/kv_events_sub.py, bound on loopback,
#     the tier connecting to it), REPEAT rounds interleaved (the order alternates each round:
#     CPU figures on a shared VM vary), plus one fio run (ioengine=io_uring, direct=1, the same
#     row size and count, as bench/fio_compare.sh runs it). Prints store and load GB/s (median
#     and range) for fio, events off and events on; the on/off ratio per direction against the
#     target (>= 0.98x); kvtier/fio; and that the subscriber received every event published.
#   part 2: a SLOW subscriber (sleeps SLOW_SLEEP_MS=20 after each batch, RCVHWM 10, a 4 KiB
#     kernel receive buffer) while bench fs stores with events on, once with the PUB socket's
#     default high-water mark (100000 messages) and once with SLOW_HWM=100: events/s the tier
#     published, events/s the subscriber received, and what was lost (seq gaps: dropped at the
#     PUB's high-water mark; the tier's kv_events_dropped: its queue full or cut at close), with
#     the store GB/s against part 1's events-off median and against an events-off run just
#     before it: a slow subscriber must not slow stores.
# BLOCKS_PER_FILE=N (default 1) makes every run's files hold N blocks, each store given their
# hashes (bench fs --blocks-per-file): events on then also pay for the block-hash record
# (FORMAT.md L197-L202: in the trailer page, else one attribute more a file) and each BlockStored
# names N blocks; the subscriber counts them.
# Speed is only printed, never asserted: --smoke (tiny rows, one round, no fio) is what ctest
# runs (bench.kv_events_cost_smoke, and with BLOCKS_PER_FILE=4 bench.kv_events_cost_smoke_chunks),
# to keep this path working.
#
# FRESH_FS=1 (the default as root, except --smoke) runs every tool on a freshly made ext4 (a
# loop device on a sparse file under DIR, --direct-io=on), as bench/fio_compare.sh can: on a
# volume whose files were just deleted (the previous run's), ext4's inode allocator scans the
# recently freed inodes (recently_deleted() in perf), which here tripled the store CPU and
# halved store GB/s from one run to the next whatever the events did. FRESH_FS=0: every run
# under DIR itself (each bench fs run removes its files after).
# Space: ROWS x ROW_BYTES x 1.1 (plus ext4's own with FRESH_FS). The default (2000 x 256 KiB,
# 3 rounds) takes about 1-2 minutes on a 2-core VM. Binaries: $KVTIER_BUILD_DIR/bin (default
# <repo>/build/bin). KEEP_RAW=1 keeps the raw JSON. Exit 77: no python3-zmq or python3-msgpack
# for /usr/bin/python3.
set -euo pipefail

usage() {
  echo "usage: $0 DIR [ROWS=2000] [ROW_BYTES=262144] [QD=32] [REPEAT=3]  |  $0 --smoke [DIR]" >&2
  echo "  env: KVTIER_BUILD_DIR (default <repo>/build), KEEP_RAW=1, SLOW_SLEEP_MS=20, SLOW_HWM=100, FRESH_FS=0|1," >&2
  echo "       BLOCKS_PER_FILE=1" >&2
  exit 2
}
SMOKE=0
if [[ ${1:-} == --smoke ]]; then
  SMOKE=1
  DIR=${2:-${TMPDIR:-/tmp}}
  ROWS=64 ROW_BYTES=65536 QD=8 REPEAT=1
else
  [[ $# -ge 1 && $# -le 5 ]] || usage
  [[ $1 == -h || $1 == --help ]] && usage
  DIR=$1 ROWS=${2:-2000} ROW_BYTES=${3:-262144} QD=${4:-32} REPEAT=${5:-3}
fi
SLOW_SLEEP_MS=${SLOW_SLEEP_MS:-20}
SLOW_HWM=${SLOW_HWM:-100}
BLOCKS_PER_FILE=${BLOCKS_PER_FILE:-1}
for v in "$ROWS" "$ROW_BYTES" "$QD" "$REPEAT" "$SLOW_HWM" "$BLOCKS_PER_FILE"; do
  [[ $v =~ ^[0-9]+$ && $v -gt 0 ]] || { echo "kv_events_cost: '$v' is not a positive integer" >&2; usage; }
done
(( ROW_BYTES % 4096 == 0 )) || { echo "kv_events_cost: ROW_BYTES must be a multiple of 4096 (O_DIRECT)" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=${KVTIER_BUILD_DIR:-$HERE/../build}
KVTIER=$BUILD/bin/kvtier
PY=/usr/bin/python3
[[ -x $KVTIER ]] || { echo "kv_events_cost: $KVTIER not found (ninja -C $BUILD kvtier_cli, or set KVTIER_BUILD_DIR)" >&2; exit 1; }
if ! "$PY" -c 'import zmq, msgpack' 2>/dev/null; then
  echo "kv_events_cost: skipped: $PY lacks python3-zmq or python3-msgpack (apt-get install python3-zmq python3-msgpack)" >&2
  exit 77
fi
HAVE_FIO=0
(( SMOKE == 0 )) && command -v fio >/dev/null && HAVE_FIO=1
(( SMOKE == 0 && HAVE_FIO == 0 )) && echo "kv_events_cost: fio not found: its row is skipped" >&2

mkdir -p "$DIR"
WORK=$(mktemp -d "$(realpath "$DIR")/kvtier-events-cost.XXXXXX")
RAW=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-events-cost-json.XXXXXX")
SUB_PID= LOOP=
cleanup() {
  set +e
  [[ -n $SUB_PID ]] && kill "$SUB_PID" 2>/dev/null && wait "$SUB_PID" 2>/dev/null
  if [[ -n $LOOP ]]; then umount "$WORK/mnt" 2>/dev/null; losetup -d "$LOOP"; fi
  rm -rf "$WORK"
  if [[ ${KEEP_RAW:-0} == 1 ]]; then echo "raw JSON kept in $RAW" >&2; else rm -rf "$RAW"; fi
}
trap cleanup EXIT

need_kib=$(( (ROWS * (ROW_BYTES + 16384) + (512 << 20)) / 1024 ))  # the rows, ext4's own, some slack
avail_kib=$(df -Pk "$WORK" | awk 'NR==2 {print $4}')
if (( avail_kib < need_kib )); then
  echo "kv_events_cost: about $(( need_kib / 1024 )) MiB needed under $DIR, $(( avail_kib / 1024 )) MiB free (lower ROWS)" >&2
  exit 1
fi
FSTYPE=$(df -PT "$WORK" | awk 'NR==2 {print $2}')
FRESH_FS=${FRESH_FS:-$(( EUID == 0 && SMOKE == 0 ? 1 : 0 ))}
ROOT=$WORK/run
if [[ $FRESH_FS == 1 ]]; then
  for t in losetup mkfs.ext4 mount truncate; do command -v $t >/dev/null || { echo "kv_events_cost: FRESH_FS=1 needs $t" >&2; exit 1; }; done
  truncate -s $(( ROWS * (ROW_BYTES + 16384) + (512 << 20) )) "$WORK/fresh.img"
  LOOP=$(losetup -f --show --direct-io=on "$WORK/fresh.img")
  ROOT=$WORK/mnt
  FSTYPE="a fresh ext4 per run (loop device on $FSTYPE)"
fi
# fresh: $ROOT made empty: a newly made ext4 with FRESH_FS=1.
fresh() {
  if [[ $FRESH_FS == 1 ]]; then
    umount "$ROOT" 2>/dev/null || true
    mkdir -p "$ROOT"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP" && mount "$LOOP" "$ROOT" ||
      { echo "kv_events_cost: could not make a fresh ext4 on $LOOP" >&2; exit 1; }
  else
    rm -rf "$ROOT" && mkdir -p "$ROOT"
  fi
}

# start_sub NAME [ARGS]: a subscriber in the background; sets SUB_PID and SUB_PORT.
start_sub() {
  local name=$1; shift
  rm -f "$RAW/$name.port"
  "$PY" "$HERE/kv_events_sub.py" --port-file "$RAW/$name.port" --out "$RAW/$name.sub.json" "$@" &
  SUB_PID=$!
  for _ in $(seq 200); do [[ -s $RAW/$name.port ]] && break; sleep 0.05; done
  [[ -s $RAW/$name.port ]] || { echo "kv_events_cost: the subscriber did not start" >&2; exit 1; }
  SUB_PORT=$(cat "$RAW/$name.port")
}
# stop_sub: SIGTERM, and the subscriber writes its counts.
stop_sub() {
  kill -TERM "$SUB_PID"
  wait "$SUB_PID"
  SUB_PID=
}
# bench NAME [FLAGS]: one `kvtier bench fs` run, its JSON in $RAW/NAME.json.
bench() {
  local name=$1; shift
  fresh
  sync
  "$KVTIER" bench fs --root "$ROOT" --row-bytes "$ROW_BYTES" --rows "$ROWS" --queue-depth "$QD" \
    --blocks-per-file "$BLOCKS_PER_FILE" --json "$@" \
    > "$RAW/$name.json" 2> "$RAW/$name.err" || { cat "$RAW/$name.err" >&2; exit 1; }
}
# bench_on NAME HWM [SUBSCRIBER ARGS]: events on, to a fresh subscriber; HWM "": the default.
bench_on() {
  local name=$1 hwm=$2; shift 2
  start_sub "$name" "$@"
  bench "$name" --events-endpoint "tcp://127.0.0.1:$SUB_PORT" ${hwm:+--events-hwm "$hwm"}
  stop_sub
}

echo "kv_events_cost: $ROWS rows x $ROW_BYTES bytes, $BLOCKS_PER_FILE block(s) a file, queue depth $QD, $REPEAT rounds, under $WORK ($FSTYPE)" >&2
start=$(date +%s)
if (( HAVE_FIO )); then
  echo "  fio write, read..." >&2
  fresh
  fio_common=(--directory="$ROOT" --bs="$ROW_BYTES" --filesize="$ROW_BYTES" --nrfiles="$ROWS"
              --ioengine=io_uring --direct=1 --iodepth="$QD" --openfiles=$(( QD * 2 )) --output-format=json)
  fio --name=kvtier-fio --rw=write --create_on_open=1 "${fio_common[@]}" --output="$RAW/fio_write.json" >/dev/null
  sync; { echo 1 > /proc/sys/vm/drop_caches; } 2>/dev/null || true
  fio --name=kvtier-fio --rw=read "${fio_common[@]}" --output="$RAW/fio_read.json" >/dev/null
fi
for ((round = 1; round <= REPEAT; round++)); do
  # Odd rounds run events off first, even rounds events on first.
  for which in $( (( round % 2 )) && echo "off on" || echo "on off"); do
    echo "  round $round/$REPEAT: bench fs, events $which..." >&2
    if [[ $which == off ]]; then bench "off.$round"; else bench_on "on.$round" ""; fi
  done
done
echo "  slow subscriber (sleeps $SLOW_SLEEP_MS ms a batch), default hwm, then hwm $SLOW_HWM..." >&2
# Each beside an events-off run of its own, so the machine's load of the moment is in both.
bench slow_default.off
bench_on slow_default "" --sleep-ms "$SLOW_SLEEP_MS" --rcvhwm 10
bench slow_hwm.off
bench_on slow_hwm "$SLOW_HWM" --sleep-ms "$SLOW_SLEEP_MS" --rcvhwm 10
elapsed=$(( $(date +%s) - start ))

"$PY" "$HERE/kv_events_cost_report.py" "$RAW" "$HAVE_FIO" "$ROWS" "$ROW_BYTES" "$QD" "$REPEAT" "$elapsed" \
  "$FSTYPE" "$SLOW_SLEEP_MS" "$SLOW_HWM" "$BLOCKS_PER_FILE" | tee "$RAW/table.txt"
# --smoke (ctest): both tables were printed, every event reached the fast subscriber.
if (( SMOKE )); then
  for want in '^events on / off, store: ' '^events on / off, load : ' "received $ROWS (the subscriber)" \
              '^slow subscriber: ' '^|   100000 |' "^block hashes in BlockStored: $((ROWS * BLOCKS_PER_FILE)) "; do
    grep -q -- "$want" "$RAW/table.txt" || { echo "kv_events_cost: --smoke: no '$want' in the table" >&2; exit 1; }
  done
fi
