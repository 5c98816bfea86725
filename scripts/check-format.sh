#!/usr/bin/env bash
# Checks that every tracked C, C++ and proto file is clang-format clean (.clang-format at the root).
# usage: scripts/check-format.sh [--fix]   (--fix rewrites the files in place)
# Uses clang-format-19 (installed by install-deps.sh) so every machine formats the same way.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fmt=$(command -v clang-format-19 || true)
if [[ -z $fmt ]]; then
  echo "check-format: clang-format-19 not found (run scripts/install-deps.sh)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.c' '*.proto')
if [[ ${1:-} == --fix ]]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]} > 0)); then
  echo "check-format: ${#bad[@]} file(s) not clang-format clean (fix: scripts/check-format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files clean"
