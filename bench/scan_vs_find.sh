#!/usr/bin/env bash
# Is the operators' scan fast? Builds a root_dir of N block files in vLLM's
# layout (default 1,000,000 files of 4 KiB spread over a few namespaces), then
# times, on the same warm tree, `find ROOT -type f | wc -l` against
# `kvtier du ROOT` and `kvtier fsck ROOT` (without --verify-data), and prints
# the ratios (target: <= 2x find). Usage: bench/scan_vs_find.sh [DIR] [N]
set -euo pipefail
dir=${1:-./kvcache-scan-bench}
n=${2:-1000000}
build=${KVTIER_BUILD_DIR:-build}
kvtier=$build/bin/kvtier
[ -x "$kvtier" ] || { echo "build kvtier first (cmake --build $build --target kvtier_cli)" >&2; exit 1; }

if [ ! -f "$dir/.bench-complete-$n" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  echo "creating $n block files under $dir ..." >&2
  python3 - "$dir" "$n" <<'PY'
import hashlib, json, os, sys
root, n = sys.argv[1], int(sys.argv[2])
payload = b"\0" * 4096
for ns_i in range(4):
    fields = {"blocks_per_file": 1, "dcp_size": 1, "dtype": "bfloat16", "inference_engine": "vllm",
              "kv_cache_groups": [], "model_name": f"bench/model-{ns_i}", "pcp_size": 1, "pp_size": 1,
              "tokens_per_hash": 16, "tp_size": 1}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    ns = f"{root}/bench_model-{ns_i}_{digest}"
    os.makedirs(ns, exist_ok=True)
    with open(f"{ns}/config.json", "w") as f:
        json.dump(fields, f, indent=2, sort_keys=True)
    made = set()
    for i in range(ns_i, n, 4):
        h = hashlib.sha256(i.to_bytes(8, "little")).hexdigest()
        d = f"{ns}_r0/{h[:3]}/{h[3:5]}_g0"
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        fd = os.open(f"{d}/{h}.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, payload)
        os.close(fd)
PY
  touch "$dir/.bench-complete-$n"
fi

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
find_count() { find "$dir" -type f | wc -l; }
find_count >/dev/null  # warm the dentry and inode caches once for everyone
t_find=$(seconds find_count)
t_du=$(seconds "$kvtier" du "$dir" --json --force)
t_fsck=$(seconds "$kvtier" fsck "$dir" --json --force)
printf '%-28s %10s %8s\n' "command ($n files)" "seconds" "x find"
printf '%-28s %10.2f %8.2f\n' "find -type f | wc -l" "$t_find" 1
printf '%-28s %10.2f %8.2f\n' "kvtier du" "$t_du" "$(echo "$t_du / $t_find" | bc -l)"
printf '%-28s %10.2f %8.2f\n' "kvtier fsck" "$t_fsck" "$(echo "$t_fsck / $t_find" | bc -l)"
