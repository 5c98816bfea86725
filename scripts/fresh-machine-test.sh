#!/usr/bin/env bash
# Proves the README's two set-up commands on a fresh Debian 12 machine (issue 36): builds a Debian
# 12 minbase root with debootstrap (plus what a cloud image has: ca-certificates, git, sudo, curl,
# procps; cached as a tarball), clones the committed HEAD into a fresh copy of it, and there runs
#   1. ./scripts/run.sh until the server answers health, the example model's metadata and one
#      inference (then stops it), and
#   2. ./scripts/test.sh (unless --run-only),
# printing a summary of what passed and how long each step took. Not part of .ci/run (a cold
# build and the whole suite: one to two hours on 2 cores); run it before closing an issue that
# adds a dependency.
#
# usage: sudo scripts/fresh-machine-test.sh [--run-only] [--keep] [--seed-ccache]
#   --run-only     stop after step 1
#   --keep         leave the root in place (its path is printed)
#   --seed-ccache  copy this machine's compiler cache into the root first: the packages, the
#                  clone and the commands stay as fresh, only compiles already made here are
#                  served from the cache (the summary says so); a two-hour cold build of three
#                  trees becomes minutes
# Needs root (debootstrap, chroot, mounts) and the Debian mirror (CUVIL_DEBIAN_MIRROR, default
# http://deb.debian.org/debian). The reference data beside the checkout (../shared) is bound
# read-only at the same place inside, as CI has it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run_only=0
keep=0
seed_ccache=0
for arg in "$@"; do
  case "$arg" in
    --run-only) run_only=1 ;;
    --keep) keep=1 ;;
    --seed-ccache) seed_ccache=1 ;;
    *) echo "usage: $0 [--run-only] [--keep] [--seed-ccache]" >&2; exit 2 ;;
  esac
done
if [[ $(id -u) -ne 0 ]]; then
  echo "fresh-machine-test: needs root (debootstrap, chroot and mounts)" >&2
  exit 2
fi
mirror=${CUVIL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${CUVIL_FRESH_CACHE:-/var/cache/cuvil-fresh-machine}
tarball=$cache/bookworm-minbase.tar
shared=$(cd "$root/.." && pwd)/shared
summary=()
step() {  # step NAME COMMAND...: runs it, records its time and outcome, stops on failure.
  local name=$1
  shift
  local t0=$(date +%s)
  if "$@"; then
    summary+=("PASS  $name ($(($(date +%s) - t0)) s)")
  else
    summary+=("FAIL  $name ($(($(date +%s) - t0)) s)")
    print_summary
    exit 1
  fi
}
print_summary() {
  echo
  echo "fresh-machine-test summary (HEAD ${cloned:-not cloned yet}, $(date -u +%FT%TZ)):"
  ((seed_ccache)) && echo "  (compiler cache seeded from this machine's ${ccache_src:-cache})"
  for line in "${summary[@]}"; do echo "  $line"; done
}

make_tarball() {
  command -v debootstrap > /dev/null || apt-get install -y -qq debootstrap
  mkdir -p "$cache"
  local tmp
  tmp=$(mktemp -d "$cache/root.XXXXXX")
  debootstrap --variant=minbase --include=ca-certificates,git,sudo,curl,procps bookworm "$tmp" \
    "$mirror"
  tar -C "$tmp" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$tmp"
}
[[ -f $tarball ]] || step "debootstrap a Debian 12 minbase root (cached)" make_tarball

work=$(mktemp -d /var/tmp/cuvil-fresh.XXXXXX)
chroot_dir=$work/root
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2> /dev/null || true; done
  if ((keep)); then
    echo "fresh-machine-test: root kept at $chroot_dir"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
mkdir -p "$chroot_dir"
tar -C "$chroot_dir" -xf "$tarball"
cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
# What a cloud image (or the Debian installer) writes and debootstrap does not: without it
# "localhost" does not resolve and the TLS tests, which verify that name, fail.
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$chroot_dir/etc/hosts"
for m in proc sys dev dev/pts dev/shm; do
  mkdir -p "$chroot_dir/$m"
  mount --bind "/$m" "$chroot_dir/$m"
  mounted+=("$chroot_dir/$m")
done
# The checkout goes where it is here, so that ../shared resolves the same way.
inside=$root
mkdir -p "$chroot_dir$(dirname "$inside")"
git clone -q --no-local "$root" "$chroot_dir$inside"
cloned=$(git -C "$chroot_dir$inside" rev-parse --short HEAD)
if [[ -d $shared ]]; then
  mkdir -p "$chroot_dir$shared"
  mount --bind -o ro "$shared" "$chroot_dir$shared"
  mounted+=("$chroot_dir$shared")
fi
if ((seed_ccache)); then
  ccache_src=$(ccache -k cache_dir 2> /dev/null || true)
  if [[ -n $ccache_src && -d $ccache_src ]]; then
    mkdir -p "$chroot_dir/root/.cache"
    cp -a "$ccache_src" "$chroot_dir/root/.cache/ccache"
  else
    echo "fresh-machine-test: --seed-ccache: no compiler cache here; building cold" >&2
    ccache_src=""
  fi
fi
in_root() { chroot "$chroot_dir" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 bash -c "cd '$inside' && $1"; }

serve_example() {
  in_root "./scripts/run.sh > /tmp/run.log 2>&1 & echo \$! > /tmp/run.pid"
  local deadline=$(($(date +%s) + 10800)) up=0
  while (($(date +%s) < deadline)); do
    if in_root "curl -fsS http://127.0.0.1:8000/v2/health/ready > /dev/null 2>&1"; then
      up=1
      break
    fi
    if ! in_root "kill -0 \$(cat /tmp/run.pid) 2> /dev/null"; then break; fi
    sleep 10
  done
  local ok=1
  if ((up)); then
    in_root "curl -fsS http://127.0.0.1:8000/v2/models/mlp" || ok=0
    echo
    in_root "python3 -c 'import json; print(json.dumps({\"inputs\": [{\"name\": \"input\", \"shape\": [1, 784], \"datatype\": \"FP32\", \"data\": [0.5] * 784}]}))' > /tmp/infer.json && curl -fsS -H 'Content-Type: application/json' --data @/tmp/infer.json http://127.0.0.1:8000/v2/models/mlp/infer" || ok=0
    echo
  else
    ok=0
    in_root "tail -40 /tmp/run.log"
  fi
  in_root "pkill -TERM -f bin/cuvil-server; sleep 2" || true
  ((ok))
}
step "./scripts/run.sh serves health, metadata and an inference" serve_example
if ((!run_only)); then
  step "./scripts/test.sh" in_root "./scripts/test.sh"
fi
print_summary
