#!/usr/bin/env bash
# Time to READY of `cuvilc compile --compile-tier tiered` on resnet18 against a full-only compile,
# for two cuvilc binaries run interleaved (each run its own process), median per case:
#   full      --compile-tier full --no-jit-cache (the reference of every ratio)
#   fresh     tiered, a fresh (empty) JIT cache folder
#   warm      tiered, the same folder again (the full tier is cached, its digest remembered)
#   racehit   tiered, that folder without its digest memo records (the entry must be re-keyed)
#   nocache   tiered, no cache folder
#   racemiss  tiered, a folder holding only lenet's entry
#   samesize  tiered, a folder holding resnet18's --compile-tier fast entry (same model size)
# usage (from the checkout, under /tmp/cuvil-build.lock):
#   BEFORE=/path/to/old/cuvilc [AFTER=build/bin/cuvilc] [ROUNDS=7] bench/tiered_ready.sh
set -u
cd "$(dirname "$0")/.."
model=${MODEL:-../shared/models/resnet18/model.onnx}
rounds=${ROUNDS:-7}
out=${OUT:-$(mktemp)}
: > "$out"
tm() { grep -o 'total_ms=[0-9.]*' | cut -d= -f2; }
for r in $(seq "$rounds"); do
  for bin in before after; do
    b=${BEFORE:?BEFORE=path of the cuvilc to compare with}
    [[ $bin == after ]] && b=${AFTER:-build/bin/cuvilc}
    echo "$bin full $($b compile $model --timings --compile-tier full --no-jit-cache | tm)" >> "$out"
    d=$(mktemp -d)
    echo "$bin fresh $($b compile $model --timings --compile-tier tiered --jit-cache-dir $d | tm)" >> "$out"
    echo "$bin warm $($b compile $model --timings --compile-tier tiered --jit-cache-dir $d | tm)" >> "$out"
    rm -f "$d"/memo-*.cjm  # The entry stays; its digest must be computed again.
    echo "$bin racehit $($b compile $model --timings --compile-tier tiered --jit-cache-dir $d | tm)" >> "$out"
    rm -rf "$d"
    echo "$bin nocache $($b compile $model --timings --compile-tier tiered | tm)" >> "$out"
    d=$(mktemp -d)
    $b compile "$(dirname "$model")/../lenet/model.onnx" --jit-cache-dir $d > /dev/null
    echo "$bin racemiss $($b compile $model --timings --compile-tier tiered --jit-cache-dir $d | tm)" >> "$out"
    rm -rf "$d"
    d=$(mktemp -d)
    $b compile $model --compile-tier fast --jit-cache-dir $d > /dev/null
    echo "$bin samesize $($b compile $model --timings --compile-tier tiered --jit-cache-dir $d | tm)" >> "$out"
    rm -rf "$d"
  done
done
python3 - "$out" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, k, v = line.split()
    d[(b, k)].append(float(v))
for b in ("before", "after"):
    full = statistics.median(d[(b, "full")])
    for k in ("full", "fresh", "nocache", "racemiss", "samesize", "warm", "racehit"):
        m = statistics.median(d[(b, k)])
        print(f"{b:6} {k:8} median {m:7.1f} ms  ratio {m/full*100:5.1f}%  n={len(d[(b,k)])}  {sorted(d[(b,k)])}")
PY
