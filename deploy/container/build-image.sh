#!/usr/bin/env bash
# Build the Cuvil image with podman, with no image registry: the base is a Debian 12 root imported
# into podman's storage (../shared/k8s/podman/import-debian12.sh, run when debian:12 is missing),
# and `podman build --pull=never` never asks a registry for anything. apt inside the build still
# reaches the Debian mirror (--network=host).
#
#   deploy/container/build-image.sh [TAG] [extra podman build args...]     # TAG: cuvil:latest
#
# Then: tests/kserve/image_test.py localhost/TAG (deploy/README.md, "Container image").
# Environment: CONTAINERS_CONF (default ../shared/k8s/podman/containers.conf: runc and the rlimits
# this VM allows), CUVIL_SHARED_DIR (default ../shared next to the repository).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${CUVIL_SHARED_DIR:-$root/../shared}
tag=${1:-cuvil:latest}
[ $# -gt 0 ] && shift
if [ -z "${CONTAINERS_CONF:-}" ] && [ -f "$shared/k8s/podman/containers.conf" ]; then
  export CONTAINERS_CONF=$shared/k8s/podman/containers.conf
fi

if ! command -v podman >/dev/null || ! command -v runc >/dev/null ||
   ! podman image exists debian:12; then
  import=$shared/k8s/podman/import-debian12.sh
  [ -f "$import" ] || { echo "build-image: no debian:12 image and no $import" >&2; exit 1; }
  echo "build-image: importing a Debian 12 base as debian:12 ($import)"
  bash "$import"
fi

# The runtime stage's base: debian:12-slim when there is one (a registry's), else the imported
# debian:12 (a minbase root: a little larger than slim, same packages otherwise).
runtime_base=debian:12-slim
podman image exists "$runtime_base" || runtime_base=debian:12

start=$(date +%s)
podman build --pull=never --network=host --format docker \
  --ignorefile "$root/deploy/container/Dockerfile.dockerignore" \
  --build-arg BUILD_BASE=debian:12 --build-arg RUNTIME_BASE="$runtime_base" \
  -f "$root/deploy/container/Dockerfile" -t "$tag" "$@" "$root"
took=$(( $(date +%s) - start ))
echo "build-image: $tag built in $((took / 60)) min $((took % 60)) s (runtime base $runtime_base)"
podman images --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$tag"
