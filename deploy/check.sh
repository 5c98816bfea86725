#!/usr/bin/env bash
# Checks deploy/: Prometheus config and alert rules (promtool check + rule unit tests), the
# Grafana dashboard (well-formed JSON, every query on ${DS_PROMETHEUS}, template variables) and
# that the Kubernetes manifests parse. Registered as CTest `deploy_configs`; exits 77 (skipped)
# without promtool.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
if ! command -v promtool >/dev/null; then
  echo "SKIPPED: promtool not found (apt-get install prometheus)"
  exit 77
fi
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3

promtool check config "$dir/prometheus/prometheus.yml"
promtool check rules "$dir/prometheus/alerts.yml"
(cd "$dir/prometheus" && promtool test rules alerts_test.yml)

"$python" -m json.tool "$dir/grafana/cuvil-dashboard.json" >/dev/null
"$python" - "$dir/grafana/cuvil-dashboard.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
errors = []
names = [v["name"] for v in d["templating"]["list"]]
for want in ("DS_PROMETHEUS", "model", "version"):
    if want not in names:
        errors.append(f"no template variable {want}")
ids = [p["id"] for p in d["panels"]]
if len(ids) != len(set(ids)):
    errors.append("duplicate panel ids")
exprs = []
for p in d["panels"]:
    if p["type"] == "row":
        continue
    if p.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
        errors.append(f"panel {p['title']!r} is not on ${{DS_PROMETHEUS}}")
    for t in p.get("targets", []):
        exprs.append(t["expr"])
        if t["expr"].count("(") != t["expr"].count(")"):
            errors.append(f"unbalanced parentheses in {t['expr']!r}")
text = "\n".join(exprs)
for metric in ("cuvil_inference_samples_total", "cuvil_request_duration_seconds_bucket",
               "cuvil_queue_duration_seconds", "cuvil_compute_duration_seconds",
               "cuvil_batch_size_bucket", "cuvil_inference_requests_total",
               "cuvil_jit_compile_duration_seconds", "cuvil_jit_cache_hits_total",
               "cuvil_jit_cache_misses_total", "cuvil_patches_total", "cuvil_model_memory_bytes",
               "process_resident_memory_bytes", "cuvil_pending_requests", "cuvil_model_ready",
               'cuvil_request_latency_seconds{quantile="0.99"'):
    if metric not in text:
        errors.append(f"no panel queries {metric}")
if d.get("schemaVersion", 0) < 36:
    errors.append("schemaVersion too old")
for e in errors:
    print("dashboard:", e)
sys.exit(1 if errors else 0)
PY
echo "dashboard: OK ($dir/grafana/cuvil-dashboard.json)"

if "$python" -c 'import yaml' 2>/dev/null; then
  for f in "$dir"/k8s/*.yaml; do
    [ -e "$f" ] || continue
    "$python" -c 'import sys, yaml; list(yaml.safe_load_all(open(sys.argv[1])))' "$f"
  done
  echo "k8s: manifests parse"
fi
echo "deploy: all checks passed"
