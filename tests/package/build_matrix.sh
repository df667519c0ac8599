#!/usr/bin/env bash
# Proves that kvtier configures the way packagers and users build it: each of
# the 8 combinations of generator (Unix Makefiles, Ninja) x build type
# (Release, Debug) x CUDA (AUTO: on where a toolkit is installed, OFF) must
# configure and generate, with KVTIER_WERROR=ON and otherwise default options.
#
# Why only configure, plus two objects: a full build of one combination takes
# about 4 minutes on CI's 2 cores, so 8 would take over half an hour. What
# broke before was caught by much less:
#   - the Makefile generator refused libkvtier at generate time where CUDA is
#     installed ("requires the language dialect CUDA20"): configuring all 8
#     catches that and anything like it;
#   - GCC 12's -Wrestrict false positives (`"lit" + string&&` and
#     `string = "lit"` read as an overlapping memcpy) appear only with
#     optimisation: the objects that had them are built in Release with
#     -Werror, once (with Makefiles, whose per-object rules build just that
#     object; Ninja would first build libkvtier and the CLI for a test's
#     object, and the compile lines are the same under both);
#   - the CUDA kernel object is built with the Makefile generator (Ninja's CUDA
#     build is already exercised by scripts/test's builds).
# The rest of the code is built with -Werror by scripts/test (Debug under
# sanitizers, RelWithDebInfo; tests/unit only in the Debug build, at -O0,
# which is why its objects that had -Wrestrict are listed here); a full build
# of every combination is a manual check before a release.
#
# Usage: build_matrix.sh SOURCE_DIR [WORK_DIR]  (WORK_DIR: kept when given)
set -euo pipefail
src=$(cd "$1" && pwd)
if [ $# -ge 2 ]; then
  work=$2
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

# Where GCC 12 reported -Wrestrict in Release: "DIR SOURCE", SOURCE relative
# to DIR, the source (and build) subdirectory whose CMakeLists.txt builds it.
restrict_objects=("tools bench/bench_fs.cc" "src fs/store_op.cc" "src hash/extra_keys.cc" "tools replay/plot.cc"
  "tests integration/cli_test.cc" "tests integration/cli_namespace_test.cc" "tests integration/cli_names_test.cc"
  "tests unit/trace_test.cc" "tests unit/trace_roundtrip_test.cc" "tests unit/trace_segments_test.cc"
  "tests unit/trace_synthetic_test.cc")

failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}

# build_object DIR SUBDIR SOURCE: builds the object of SUBDIR/SOURCE in the
# Makefile build tree DIR, and nothing else.
build_object() {
  local log=$1/object.log
  make -C "$1/$2" "$3.o" >"$log" 2>&1 || { cat "$log"; return 1; }
}

for gen in "Unix Makefiles" Ninja; do
  for type in Release Debug; do
    for cuda in AUTO OFF; do
      name="${gen// /_}-$type-cuda_$cuda"
      dir=$work/$name
      if ! cmake -S "$src" -B "$dir" -G "$gen" -DCMAKE_BUILD_TYPE="$type" -DKVTIER_WITH_CUDA="$cuda" \
          -DKVTIER_WERROR=ON "${launcher[@]}" >"$work/$name.configure.log" 2>&1; then
        cat "$work/$name.configure.log"
        fail "$name does not configure"
        continue
      fi
      kernel=no
      grep -q 'copy kernel ON' "$work/$name.configure.log" && kernel=yes
      echo "ok: $name configures (CUDA copy kernel: $kernel)"
      if [ "$gen" = "Unix Makefiles" ] && [ "$type" = Release ] && [ "$cuda" = OFF ]; then
        for object in "${restrict_objects[@]}"; do
          read -r sub source <<<"$object"
          if build_object "$dir" "$sub" "$source"; then
            echo "ok: $name builds $sub/$source with -Werror"
          else
            fail "$name: $sub/$source does not build with -Werror"
          fi
        done
      fi
      if [ "$gen" = "Unix Makefiles" ] && [ "$kernel" = yes ]; then
        if build_object "$dir" src staging/copy_kernel.cu; then
          echo "ok: $name builds the CUDA copy kernel"
        else
          fail "$name: the CUDA copy kernel does not build"
        fi
      fi
    done
  done
done

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "note: no CUDA toolkit here, so the CUDA=AUTO combinations built without CUDA"
fi
[ "$failed" = 0 ] && echo "build matrix: all 8 combinations configure; the objects that broke before build"
exit "$failed"
