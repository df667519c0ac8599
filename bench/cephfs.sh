#!/usr/bin/env bash
# kvtier's and vLLM's fs tiers on a real CephFS (issue 42): starts the
# one-node cluster of tests/ceph/ceph-cluster.sh, runs bench/network_fs.py
# with its work directory on one ceph-fuse mount (so every call goes through
# kvtier_faultfs, which counts it and adds nothing at --delays-ms 0, to
# ceph-fuse and the MDS/OSD), prints its markdown tables (kvtier/vLLM ratios),
# then stops the cluster. Flags go to the driver, e.g.
#   bench/cephfs.sh --blocks 256 --json /tmp/cephfs.json
# KVTIER_BUILD_DIR: the build directory (default: build). Exit 77: Ceph
# cannot start here (the script's line says why).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${KVTIER_BUILD_DIR:-$here/../build}"
cluster="$(mktemp -d /tmp/kvtier-ceph-XXXXXX)"
trap 'bash "$here/../tests/ceph/ceph-cluster.sh" stop "$cluster/c" >/dev/null 2>&1 || true; rm -rf "$cluster"' EXIT
rc=0; bash "$here/../tests/ceph/ceph-cluster.sh" start "$cluster/c" | tail -1 || rc=$?
[ "$rc" = 0 ] || exit "$rc"
mkdir -p "$cluster/c/mnt/a/bench"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
/usr/bin/python3 "$here/network_fs.py" --build "$build" --dir "$cluster/c/mnt/a/bench" --delays-ms 0 "$@"
