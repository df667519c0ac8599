#!/usr/bin/env bash
# Proves that libkvtier.so exports the public API declared in include/kvtier/
# and nothing else: no kvtier::internal (or other nested namespace) symbol, no
# tool or benchmark code, no stray std::/nlohmann template instantiation.
# Whatever a user can link against is an ABI promise; what is not declared in
# the public headers must stay hidden (the library is built with
# -fvisibility=hidden and a version script; see src/CMakeLists.txt).
#
# Rule for every defined dynamic symbol:
#   - its mangled name is owned by namespace kvtier (a function, variable,
#     typeinfo or vtable of kvtier::X), and
#   - every kvtier::X named in its demangled form (template arguments too)
#     has X among the identifiers of include/kvtier/*.h, and X is not a
#     namespace of the implementation (internal, format, ...);
# or it is listed, demangled, in exported_symbols.allow beside this script
# (a symbol the public API genuinely needs from outside namespace kvtier).
#
# Usage: exported_symbols.sh LIBRARY LIBRARY_TYPE INCLUDE_DIR
# Exit 77 (ctest SKIP_RETURN_CODE) when the library is not a shared one.
set -euo pipefail
lib=$1
type=$2
include_dir=$3
allow_file=$(dirname "$0")/exported_symbols.allow

if [ "$type" != SHARED_LIBRARY ]; then
  echo "skip: libkvtier is a $type (BUILD_SHARED_LIBS=OFF): nothing is exported dynamically"
  exit 77
fi

# Identifiers that the public headers declare or use, comments removed.
declare -A public
for name in $(sed -e 's://.*$::' "$include_dir"/kvtier/*.h | grep -oE '[A-Za-z_][A-Za-z_0-9]*' | sort -u); do
  public[$name]=1
done
# Implementation namespaces: never public, even where the word is in a header.
for name in internal format detail; do
  unset "public[$name]"
done

declare -A allowed
if [ -f "$allow_file" ]; then
  while IFS= read -r line; do
    [ -n "$line" ] && [ "${line:0:1}" != "#" ] && allowed[$line]=1
  done <"$allow_file"
fi

# Owned by kvtier: _Z, an optional special prefix (typeinfo TI, its name TS,
# vtable TV, VTT TT, guard variable GV), then a nested name in kvtier (N,
# cv and ref qualifiers, 6kvtier).
owner_re='^_Z(T[ISVT]|GV)?N[rVKRO]*6kvtier'
name_re='kvtier::([A-Za-z_][A-Za-z_0-9]*)(.*)$'

# violation MANGLED DEMANGLED: prints why the symbol is not public API, or nothing.
violation() {
  local mangled=$1 rest=$2
  if ! [[ $mangled =~ $owner_re ]]; then
    echo "not in namespace kvtier"
    return
  fi
  while [[ $rest =~ $name_re ]]; do
    if [ -z "${public[${BASH_REMATCH[1]}]:-}" ]; then
      echo "kvtier::${BASH_REMATCH[1]} is not declared in include/kvtier/"
      return
    fi
    rest=${BASH_REMATCH[2]}
  done
}

symbols=$(nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}' | sed 's/@.*//')
total=0
bad=0
while IFS=$'\t' read -r mangled demangled; do
  total=$((total + 1))
  [ -n "${allowed[$demangled]:-}" ] && continue
  reason=$(violation "$mangled" "$demangled")
  if [ -n "$reason" ]; then
    bad=$((bad + 1))
    [ "$bad" -le 40 ] && echo "exported but not public API ($reason): $demangled"
  fi
done < <(paste <(printf '%s\n' "$symbols") <(printf '%s\n' "$symbols" | c++filt))

echo "$lib: $total defined dynamic symbols, $bad outside the public API"
if [ "$total" -eq 0 ]; then
  echo "FAIL: nm found no exported symbol at all"
  exit 1
fi
[ "$bad" -eq 0 ]
