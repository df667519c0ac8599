#!/usr/bin/env bash
# Proves that an installed kvtier is usable from another project: it installs
# the build tree into a scratch prefix, builds tests/package/consumer with
# find_package(kvtier) and again with `pkg-config --cflags --libs kvtier`, and
# runs both binaries, which compute a golden vLLM block hash through the API.
set -euo pipefail
build_dir=$1
consumer_src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
libdir=$(dirname "$(find "$work/prefix" -name 'libkvtier.so*' -o -name 'libkvtier.a' | head -n 1)")
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cmake -S "$consumer_src" -B "$work/cmake-consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-consumer" >/dev/null
"$work/cmake-consumer/kvtier_consumer"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
c++ -std=c++20 "$consumer_src/main.cc" -o "$work/pc-consumer" $(pkg-config --cflags --libs kvtier)
"$work/pc-consumer"
echo "package test: find_package and pkg-config consumers both work"
