#!/usr/bin/env bash
# Configures and builds Cuvil.
# usage: [TARGETS="a b"] scripts/build.sh [PRESET | BUILD_DIR] [extra cmake args...]
# PRESET is one of CMakePresets.json's configure presets (release, asan, tsan); a path builds a
# Release tree there. Uses ccache when present (paths relative to the checkout so clean clones
# share hits). The configure log stays inside the build folder so a build never dirties the tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-release}
shift || true
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime
case "$target" in
  release | asan | tsan)
    build_dir=$root/build
    [[ $target == release ]] || build_dir=$root/build-$target
    configure=(cmake --preset "$target" -S "$root") ;;
  *)
    build_dir=$target
    configure=(cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release) ;;
esac
mkdir -p "$build_dir"
(cd "$root" && "${configure[@]}" "$@") > "$build_dir/configure.log" 2>&1 ||
  { cat "$build_dir/configure.log"; exit 1; }
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
