#!/usr/bin/env bash
# kvtier's and vLLM's fs tiers on a FUSE mount that adds 0, 0.5 and 2 ms to
# every call (bench/network_fs.py says what is measured), and the calls per
# block under vLLM's own tiering manager. Prints markdown tables;
# about 3 minutes on 2 cores. Flags go to the driver, e.g.
#   bench/network_fs.sh --json /tmp/netfs.json
#   bench/network_fs.sh --smoke          # 8 blocks at 0 ms: what ctest runs
# KVTIER_BUILD_DIR: the build directory (default: build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${KVTIER_BUILD_DIR:-$here/../build}"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$here/network_fs.py" --build "$build" "$@"
