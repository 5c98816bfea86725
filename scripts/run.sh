#!/usr/bin/env bash
# Installs dependencies, builds Cuvil and starts cuvil-server on the bundled example model
# repository (gRPC :8001, HTTP :8000, metrics :8002). Extra arguments go to cuvil-server.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
exec "$root/build/bin/cuvil-server" --model-repository "$root/examples/model-repository" "$@"
