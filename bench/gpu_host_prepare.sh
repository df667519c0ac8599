#!/usr/bin/env bash
# bench/gpu_host_prepare.sh [--jobs N]
#
# Run HERE (the Debian 12 development machine), before a device session's one
# call of bench/gpu_host.sh: the lent GPU machine runs another image (the
# workplace's 'cuda' image: nvcc, CMake, PyTorch under Python 3.12, but none
# of kvtier's C++ dependencies: liburing, ISA-L, xxHash, nlohmann-json, CLI11,
# GoogleTest, nor fio), and nothing can be installed there. So everything the
# device needs is built here into one ignored folder, .gpu-carry/, which the
# device call names in `carry` (64 MiB at most, checked below):
#
#   bin/      kvtier, transfer_bench, vllm_baseline and every gpu_*_test
#             binary (Release, CUDA for sm_90 = H100/H200 plus its PTX,
#             stripped; they need glibc >= 2.34 and GCC 12's libstdc++, as
#             Ubuntu 22.04 and 24.04 have); fio (3.33,
#             Debian's source, built static with only the local engines)
#   lib/      the shared libraries those binaries need that are not glibc or
#             the CUDA driver (liburing, ISA-L, xxHash, OpenSSL's libcrypto):
#             the binaries find them through their RUNPATH ($ORIGIN/../lib),
#             so no LD_LIBRARY_PATH leaks into the device's Python and torch
#   python/   the kvtier package with its extension built for CPython 3.12 (the
#             device's python3 is 3.12.3; the module is built against pyenv's
#             3.12 headers, same ABI)
#   vllm-tree/ ../shared/vllm assembled (its assemble.sh), vLLM's fs_io_C
#             built for 3.12
#   shared/sglang/
#             a copy of ../shared/sglang (bench/sglang_backends.py assembles
#             it there): the device has no ../shared, only the repository
#             travels
#   pylib/    Debian's pure-Python cbor2 (vLLM's hashing imports it; the
#             device's image does not list it)
#   MANIFEST  commit, build flags, the highest glibc symbol version the
#             binaries need, sizes
#
# The Release tree is .gpu-build/ (ignored; ccache makes a rebuild cheap).
# Needs: nvcc (/usr/local/cuda), pyenv's Python 3.12 (PY312, default
# /root/.pyenv/versions/3.12.1/bin/python3.12), Debian's pybind11-dev and
# python3-cbor2, and Debian's source index for fio (fetched with apt-get
# into /tmp, the system's apt lists untouched). Takes about 6 minutes
# with -j2 on the 2-core VM from a cold cache.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARRY=$REPO/.gpu-carry
BUILD=$REPO/.gpu-build
PY312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
# ../shared beside the checkout (a helper's worktree: two levels up).
SHARED=${KVTIER_SHARED_DIR:-$REPO/../shared}
[[ -d $SHARED || -n ${KVTIER_SHARED_DIR:-} ]] || SHARED=$REPO/../../shared
FIO_VERSION=3.33
TRAVEL_MAX_BYTES=$(( 64 << 20 ))  # the device tool's limit: the working tree and the carried paths together
JOBS=2
[[ ${1:-} == --jobs && -n ${2:-} ]] && JOBS=$2

say() { printf 'gpu_host_prepare: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

check_needs() {
  command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || die "nvcc not found (/usr/local/cuda)"
  [[ -x $PY312 ]] || die "no Python 3.12 at $PY312 (set PY312): the device's python3 is 3.12"
  [[ -f /usr/lib/cmake/pybind11/pybind11Config.cmake ]] || die "pybind11-dev missing (apt-get install pybind11-dev)"
  [[ -d /usr/lib/python3/dist-packages/cbor2 ]] || die "python3-cbor2 missing (apt-get install python3-cbor2)"
  [[ -f $SHARED/vllm/assemble.sh && -f $SHARED/sglang/assemble.sh ]] || die "$SHARED/{vllm,sglang} not found"
}

# The GPU tests are every tests/*/gpu_*_test.cc: a new one joins by its name.
gpu_test_targets() {
  find "$REPO/tests" -name 'gpu_*_test.cc' -printf '%f\n' | sed 's/\.cc$//' | sort
}

# Release with CUDA for sm_90 (H100, H200) and compute_90 PTX; the library
# static so that the binaries and the module carry it; RUNPATH into lib/.
# The C++ runtime stays the device's own: GCC 12's static libstdc++ would
# call arc4random and so need glibc 2.36, while the dynamic one needs only
# glibc 2.34 and a libstdc++ from GCC >= 12 (Ubuntu 22.04 and 24.04 have
# both; Debian's libstdc++ could not help an older system, it needs 2.36).
configure() {
  mkdir -p "$BUILD"
  cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DKVTIER_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_BENCH=ON -DKVTIER_BUILD_PYTHON=ON -DKVTIER_WERROR=OFF \
    -DPython_EXECUTABLE="$PY312" -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGIN/../../lib' \
    -UCMAKE_EXE_LINKER_FLAGS -UCMAKE_SHARED_LINKER_FLAGS -UCMAKE_MODULE_LINKER_FLAGS \
    >"$BUILD/prepare-configure.log" 2>&1 ||
    { tail -30 "$BUILD/prepare-configure.log" >&2; die "configure failed (log: $BUILD/prepare-configure.log)"; }
  grep -q 'CUDA staging ON (copy kernel ON)' "$BUILD/prepare-configure.log" || die "configured without CUDA kernels"
  grep -q 'Python package for .*3\.12' "$BUILD/prepare-configure.log" || die "the Python package is not built for 3.12"
}

build() {
  local targets=(kvtier_cli transfer_bench vllm_baseline _kvtier kvtier_python_files)
  mapfile -t -O ${#targets[@]} targets < <(gpu_test_targets)
  say "building ${targets[*]} (-j$JOBS; log: $BUILD/prepare-build.log)"
  nice cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >"$BUILD/prepare-build.log" 2>&1 ||
    { tail -40 "$BUILD/prepare-build.log" >&2; die "build failed (log: $BUILD/prepare-build.log)"; }
}

copy_binaries() {
  mkdir -p "$CARRY/bin"
  local t
  for t in kvtier transfer_bench vllm_baseline $(gpu_test_targets); do
    strip --strip-unneeded -o "$CARRY/bin/$t" "$BUILD/bin/$t"
  done
}

# Every shared library the carried ELF files load, but glibc's own and the
# driver's (the device has its own, matching its kernel and GPU) and the C++
# runtime's (see configure).
copy_libraries() {
  mkdir -p "$CARRY/lib"
  local f lib
  for f in "$CARRY"/bin/* "$CARRY"/python/kvtier/*.so; do
    file -b "$f" | grep -q '^ELF' || continue
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
      [[ $(realpath "$lib") == "$CARRY"/* ]] && continue  # found through RUNPATH: copied already
      case $(basename "$lib") in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*|libstdc++.so*|libgcc_s.so*) ;;
        *) cp -L "$lib" "$CARRY/lib/" ;;
      esac
    done
  done
  strip --strip-unneeded "$CARRY"/lib/*.so* 2>/dev/null || true
}

copy_python() {
  mkdir -p "$CARRY/python"
  cp -r "$BUILD/python/kvtier" "$CARRY/python/"
  find "$CARRY/python" -name __pycache__ -prune -exec rm -rf {} +
  strip --strip-unneeded "$CARRY"/python/kvtier/*.so
  mkdir -p "$CARRY/pylib"
  cp -r /usr/lib/python3/dist-packages/cbor2 "$CARRY/pylib/"
  # Debian's C accelerator is for 3.11: cbor2 falls back to pure Python without it.
  rm -rf "$CARRY/pylib/cbor2/__pycache__" "$CARRY"/pylib/_cbor2*.so
}

# The engines' own code, assembled as the benchmarks do it here; vLLM's
# fs_io_C for 3.12. assemble.sh adds a torch stand-in when the interpreter
# has no torch (pyenv's 3.12 has none): removed, the device's real torch wins.
assemble_engines() {
  rm -rf "$CARRY/vllm-tree"
  PYTHON=$PY312 bash "$SHARED/vllm/assemble.sh" "$CARRY/vllm-tree" >/dev/null
  rm -rf "$CARRY/vllm-tree/torch"
  strip --strip-unneeded "$CARRY"/vllm-tree/vllm/fs_io_C*.so
  # sglang_backends.py assembles SGLang's tree itself (nothing compiled) from
  # KVTIER_SHARED_DIR/sglang, and runs the kit's bench_backends.py from there.
  mkdir -p "$CARRY/shared"
  rm -rf "$CARRY/shared/sglang"
  cp -r "$SHARED/sglang" "$CARRY/shared/sglang"
}

# fio from Debian's source (the device has no fio and no registry), static,
# with only the local engines (io_uring, libaio-less psync...): no library to carry.
build_fio() {
  local work=/tmp/kvtier-gpu-fio
  if [[ ! -x $work/fio-$FIO_VERSION/fio ]]; then
    mkdir -p "$work/lists/partial" "$work/src"
    echo "deb-src http://deb.debian.org/debian bookworm main" >"$work/sources.list"
    local o=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$work/lists")
    [[ -f $work/src/fio_$FIO_VERSION.orig.tar.gz ]] || {
      apt-get "${o[@]}" update >/dev/null && (cd "$work/src" && apt-get "${o[@]}" source --download-only "fio=$FIO_VERSION-3") >/dev/null 2>&1
    } || die "could not fetch fio's source"
    rm -rf "$work/fio-$FIO_VERSION" && mkdir -p "$work/fio-$FIO_VERSION"
    tar -xzf "$work/src/fio_$FIO_VERSION.orig.tar.gz" -C "$work/fio-$FIO_VERSION" --strip-components=1
    (cd "$work/fio-$FIO_VERSION" && ./configure --build-static --disable-native --disable-numa --disable-rdma \
       --disable-rados --disable-rbd --disable-http --disable-gfapi --disable-libnfs --disable-pmem --disable-xnvme \
       --disable-libzbc --disable-tcmalloc --disable-dfs && nice make -j"$JOBS" fio) >"$work/build.log" 2>&1 ||
      { tail -20 "$work/build.log" >&2; die "fio build failed ($work/build.log)"; }
  fi
  strip -o "$CARRY/bin/fio" "$work/fio-$FIO_VERSION/fio"
}

# The newest symbol version (GLIBC_ or GLIBCXX_) any carried ELF file asks
# for: the device's glibc and libstdc++ must have it (gpu_host.sh checks).
version_needed() {
  find "$CARRY" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c 'file -b "$1" | grep -q ^ELF && objdump -T "$1"' _ {} \; 2>/dev/null |
    grep -o "$1_[0-9.]*" | sort -t_ -k2 -V | tail -1
}

# What travels besides .gpu-carry: tracked and untracked-not-ignored files.
tree_bytes() {
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
}

manifest() {
  local bytes glibc tree
  bytes=$(du -sb "$CARRY" | cut -f1)
  tree=$(tree_bytes)
  glibc=$(version_needed GLIBC)
  {
    echo "commit $(git -C "$REPO" rev-parse HEAD)$(git -C "$REPO" diff --quiet HEAD || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(nvcc --version | tail -1)"
    echo "cuda_architectures 90 (sm_90 + compute_90 PTX)"
    echo "python $($PY312 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    echo "glibc_needed ${glibc#GLIBC_}"
    echo "libstdcxx_needed $(version_needed GLIBCXX)"
    echo "gpu_tests $(gpu_test_targets | tr '\n' ' ')"
    echo "bytes $bytes"
  } >"$CARRY/MANIFEST"
  say "$(du -sh "$CARRY" | cut -f1) in $CARRY ($bytes bytes) + the working tree ($tree bytes) travel;" \
      "the limit is $TRAVEL_MAX_BYTES; the binaries need glibc >= ${glibc#GLIBC_}"
  du -sh "$CARRY"/* >&2
  (( bytes + tree <= TRAVEL_MAX_BYTES )) || die "$CARRY and the working tree are over the device tool's 64 MiB"
}

main() {
  check_needs
  export PATH=$PATH:/usr/local/cuda/bin
  cd "$REPO"
  say "configuring $BUILD"
  configure
  build
  rm -rf "$CARRY" && mkdir -p "$CARRY"
  copy_binaries
  copy_python
  copy_libraries
  assemble_engines
  say "building fio $FIO_VERSION (static)"
  build_fio
  manifest
  say "done: the device call names .gpu-carry in carry (see bench/gpu_host.sh's header)"
}

main "$@"
