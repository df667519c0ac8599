#!/usr/bin/env bash
# What the sick-volume safety (docs/sick-volumes.md) costs on a local disk, side by side in interleaved
# rounds: a baseline kvtier binary (BASE: e.g. one built from the commit
# before stuck requests were abandoned), this build with bounce_loads "auto" (off on
# a local filesystem: only the abandonment bookkeeping is left) and with
# bounce rows forced on (what a network-filesystem user pays per loaded row).
# Prints each run and the median ratios against the baseline.
#   BASE=/path/to/old/kvtier ROOT=/mnt/ext4 [ROWS=1000] [ROUNDS=3] bench/bounce_cost.sh
set -euo pipefail
NEW=${NEW:-$(dirname "$0")/../build/bin/kvtier}
: "${BASE:?set BASE to a baseline kvtier binary}" "${ROOT:?set ROOT to a directory on a local disk}"
ROWS=${ROWS:-1000}
ROUNDS=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq "$ROUNDS"); do
  for v in base auto bounce; do
    bin=$NEW; extra=()
    [ "$v" = base ] && bin=$BASE
    [ "$v" = bounce ] && extra=(--bounce-loads on)
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    "$bin" bench fs --root "$ROOT" --row-bytes 1MiB --rows "$ROWS" --queue-depth 16 --json "${extra[@]}" \
      > "$out/$v.$round.json"
  done
done
/usr/bin/python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def figures(v):
    rows = []
    for r in range(1, rounds + 1):
        d = json.load(open(f"{out}/{v}.{r}.json"))["details"]
        s, l = d["store"], d["load"]
        rows.append((s["bytes"] / s["wall_s"] / 1e9, s["cpu_s"] / (s["bytes"] / 1e9),
                     l["bytes"] / l["wall_s"] / 1e9, l["cpu_s"] / (l["bytes"] / 1e9)))
    return [statistics.median(col) for col in zip(*rows)]
names = ("store GB/s", "store CPU s/GB", "load GB/s", "load CPU s/GB")
base = figures("base")
print("| variant | " + " | ".join(names) + " |")
print("| --- |" + " --- |" * len(names))
for v in ("base", "auto", "bounce"):
    f = figures(v)
    print(f"| {v} | " + " | ".join(f"{x:.3f} ({x / b:.2f}x)" for x, b in zip(f, base)) + " |")
PY
