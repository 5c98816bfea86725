#!/usr/bin/env bash
# Validates every Kubernetes manifest under deploy/k8s, deploy/kserve and deploy/argo offline.
#
#   tests/kserve/validate_manifests.sh [SHARED_DIR]      (default: <repo>/../shared)
#
# 1. Schemas: SHARED_DIR/k8s/validate (validate.js; read-only, so copied to a temporary folder
#    and installed there with `npm ci`) checks each document strictly (unknown fields are errors)
#    against the Kubernetes OpenAPI (kubernetes-models), Argo Rollouts' types and the KServe CRDs
#    in SHARED_DIR/k8s/crds.
#    validate.js has no schema for the Prometheus operator's kinds (monitoring.coreos.com/v1
#    ServiceMonitor, PrometheusRule): without --skip-unknown-kinds it fails on them ("no schema"),
#    with it it skips them without checking anything, not even metadata.name. So it runs with
#    --skip-unknown-kinds, any skipped document of another kind fails this test, and those two
#    kinds get a structural check of our own below (fields used by these manifests, required
#    fields, types; js-yaml from the validator's node_modules).
# 2. Consistency: the PrometheusRule's groups equal deploy/prometheus/alerts.yml's; the Rollout's
#    pod template and selector equal the Deployment's; the ServiceMonitor selects Service
#    cuvil-server (and its port) but not the Rollout's stable/canary Services; the Rollout passes
#    the AnalysisTemplate's arguments; the HPAs scale on the metric the prometheus-adapter rule
#    publishes.
# 3. PromQL (with promtool, else skipped with a note): the PrometheusRule's rules pass
#    `promtool check rules`; the AnalysisTemplate's two queries (arguments filled in) and the
#    adapter rule's query are evaluated by `promtool test rules` on made-up series of a canary
#    and a stable ReplicaSet: the canary's p99 and error ratio breach, the stable's do not, and
#    the adapter sums a pod's models.
# 4. Negative checks (the test must be able to fail): a Deployment with replicas: "two", a
#    ServiceMonitor whose endpoints is a string and a PrometheusRule whose threshold differs
#    from alerts.yml must each be rejected.
#
# Exit status: 0 all valid; 1 something invalid; 77 (skipped) when node, npm or SHARED_DIR/k8s
# is missing. Needs the npm registry (or npm's cache) for `npm ci` (30 packages, ~29 MB).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
shared=${1:-$root/../shared}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIPPED: node and npm are needed (apt-get install nodejs npm)"
  exit 77
fi
if [ ! -f "$shared/k8s/validate/validate.js" ] || [ ! -d "$shared/k8s/crds" ]; then
  echo "SKIPPED: no validator in $shared/k8s/validate (pass the shared folder as \$1)"
  exit 77
fi
crds=$(cd "$shared/k8s/crds" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cuvil-validate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
v="$tmp/validate"
cp -r "$shared/k8s/validate" "$v"
chmod -R u+w "$v"
rm -rf "$v/node_modules"
start=$(date +%s)
(cd "$v" && npm ci --no-audit --no-fund --loglevel=error)
echo "npm ci: $(($(date +%s) - start)) s"

cd "$root"
mapfile -t manifests < <(find deploy/k8s deploy/kserve deploy/argo -type f \
  \( -name '*.yaml' -o -name '*.yml' \) | LC_ALL=C sort)
if [ "${#manifests[@]}" -eq 0 ]; then
  echo "FAIL: no manifests found under deploy/"
  exit 1
fi

# -------------------------------------------------------------------------------- our checks
# Written into the validator's folder so that `import "js-yaml"` finds its node_modules.
cat >"$v/cuvil-checks.mjs" <<'JS'
// usage: node cuvil-checks.mjs monitoring FILE...   structure of ServiceMonitor/PrometheusRule
//        node cuvil-checks.mjs consistency ROOT     cross-file checks of deploy/
//        node cuvil-checks.mjs promtest ROOT OUTDIR  writes promtool rule files and a unit test
import fs from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import * as yaml from "js-yaml";

const errors = [];
const fail = (where, msg) => errors.push(`${where}: ${msg}`);
const docsOf = (file) => yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);
const isObj = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
const DNS1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DURATION = /^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function onlyKeys(where, obj, allowed) {
  for (const k of Object.keys(obj)) if (!allowed.includes(k)) fail(where, `unknown field ${k}`);
}
function stringMap(where, m) {
  if (m === undefined) return;
  if (!isObj(m)) return fail(where, "must be a map of strings");
  for (const [k, val] of Object.entries(m)) if (typeof val !== "string") fail(`${where}/${k}`, "must be a string");
}
function labelSelector(where, s) {
  if (!isObj(s)) return fail(where, "must be a label selector");
  onlyKeys(where, s, ["matchLabels", "matchExpressions"]);
  stringMap(`${where}/matchLabels`, s.matchLabels);
  if (s.matchExpressions !== undefined && !Array.isArray(s.matchExpressions)) fail(`${where}/matchExpressions`, "must be a list");
}
function metadata(where, doc) {
  const m = doc.metadata;
  if (!isObj(m)) return fail(where, "missing metadata");
  if (typeof m.name !== "string" || m.name.length > 253 || !DNS1123.test(m.name)) fail(`${where}/metadata/name`, "missing or not a DNS-1123 subdomain");
  onlyKeys(`${where}/metadata`, m, ["name", "namespace", "labels", "annotations"]);
  stringMap(`${where}/metadata/labels`, m.labels);
  stringMap(`${where}/metadata/annotations`, m.annotations);
}

// monitoring.coreos.com/v1 ServiceMonitor: the fields of the operator's Endpoint and
// ServiceMonitorSpec types that a scrape of cuvil-server can use.
const SM_SPEC = ["selector", "endpoints", "podTargetLabels", "targetLabels", "jobLabel",
  "namespaceSelector", "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
  "labelValueLengthLimit", "attachMetadata", "scrapeClass", "bodySizeLimit"];
const SM_ENDPOINT = ["port", "targetPort", "path", "scheme", "interval", "scrapeTimeout",
  "honorLabels", "honorTimestamps", "relabelings", "metricRelabelings", "params",
  "tlsConfig", "authorization", "basicAuth", "bearerTokenSecret", "followRedirects",
  "enableHttp2", "filterRunning", "proxyUrl"];
function serviceMonitor(where, doc) {
  const s = doc.spec;
  if (!isObj(s)) return fail(where, "missing spec");
  onlyKeys(`${where}/spec`, s, SM_SPEC);
  labelSelector(`${where}/spec/selector`, s.selector);
  if (!Array.isArray(s.endpoints) || s.endpoints.length === 0) return fail(`${where}/spec/endpoints`, "must be a non-empty list");
  s.endpoints.forEach((e, i) => {
    const w = `${where}/spec/endpoints/${i}`;
    if (!isObj(e)) return fail(w, "must be a mapping");
    onlyKeys(w, e, SM_ENDPOINT);
    if (e.port === undefined && e.targetPort === undefined) fail(w, "needs port (a Service port name) or targetPort");
    if (e.port !== undefined && typeof e.port !== "string") fail(`${w}/port`, "must be a string (port name)");
    if (e.path !== undefined && (typeof e.path !== "string" || !e.path.startsWith("/"))) fail(`${w}/path`, "must be an absolute path");
    if (e.scheme !== undefined && !["http", "https", "HTTP", "HTTPS"].includes(e.scheme)) fail(`${w}/scheme`, "must be http or https");
    for (const k of ["interval", "scrapeTimeout"]) {
      if (e[k] !== undefined && (typeof e[k] !== "string" || !DURATION.test(e[k]))) fail(`${w}/${k}`, "must be a Prometheus duration");
    }
  });
  for (const k of ["podTargetLabels", "targetLabels"]) {
    if (s[k] !== undefined && (!Array.isArray(s[k]) || s[k].some((x) => typeof x !== "string"))) fail(`${where}/spec/${k}`, "must be a list of strings");
  }
}

// monitoring.coreos.com/v1 PrometheusRule: RuleGroup and Rule.
function prometheusRule(where, doc) {
  const s = doc.spec;
  if (!isObj(s)) return fail(where, "missing spec");
  onlyKeys(`${where}/spec`, s, ["groups"]);
  if (!Array.isArray(s.groups) || s.groups.length === 0) return fail(`${where}/spec/groups`, "must be a non-empty list");
  const names = new Set();
  s.groups.forEach((g, i) => {
    const w = `${where}/spec/groups/${i}`;
    if (!isObj(g)) return fail(w, "must be a mapping");
    onlyKeys(w, g, ["name", "interval", "rules", "limit", "query_offset", "labels", "partial_response_strategy"]);
    if (typeof g.name !== "string" || !g.name) fail(`${w}/name`, "required string");
    if (names.has(g.name)) fail(`${w}/name`, `duplicate group ${g.name}`);
    names.add(g.name);
    if (!Array.isArray(g.rules)) return fail(`${w}/rules`, "must be a list");
    g.rules.forEach((r, j) => {
      const wr = `${w}/rules/${j}`;
      if (!isObj(r)) return fail(wr, "must be a mapping");
      onlyKeys(wr, r, ["alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"]);
      if ((r.alert === undefined) === (r.record === undefined)) fail(wr, "needs exactly one of alert and record");
      if (r.alert !== undefined && (typeof r.alert !== "string" || !r.alert)) fail(`${wr}/alert`, "must be a non-empty string");
      if (r.record !== undefined && (typeof r.record !== "string" || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(r.record))) fail(`${wr}/record`, "must be a metric name");
      if (typeof r.expr !== "string" || !r.expr.trim()) fail(`${wr}/expr`, "required string (int-or-string in the CRD; write PromQL)");
      for (const k of ["for", "keep_firing_for"]) {
        if (r[k] !== undefined && (typeof r[k] !== "string" || !DURATION.test(r[k]))) fail(`${wr}/${k}`, "must be a Prometheus duration");
      }
      if (r.record !== undefined && (r.for !== undefined || r.annotations !== undefined)) fail(wr, "a recording rule has no for/annotations");
      stringMap(`${wr}/labels`, r.labels);
      stringMap(`${wr}/annotations`, r.annotations);
      for (const k of Object.keys(r.labels ?? {})) if (!LABEL_NAME.test(k)) fail(`${wr}/labels/${k}`, "not a label name");
    });
  });
}

function monitoring(files) {
  let seen = 0;
  for (const file of files) {
    let docs;
    try {
      docs = docsOf(file);
    } catch (e) {
      fail(file, `YAML: ${e.message}`);
      continue;
    }
    docs.forEach((d, i) => {
      if (!isObj(d) || !String(d.apiVersion ?? "").startsWith("monitoring.coreos.com/")) return;
      const where = `${file} doc ${i + 1} (${d.kind}/${d.metadata?.name ?? "?"})`;
      seen++;
      if (d.apiVersion !== "monitoring.coreos.com/v1") return fail(where, `apiVersion ${d.apiVersion}: only v1 is checked`);
      onlyKeys(where, d, ["apiVersion", "kind", "metadata", "spec"]);
      metadata(where, d);
      const before = errors.length;
      if (d.kind === "ServiceMonitor") serviceMonitor(where, d);
      else if (d.kind === "PrometheusRule") prometheusRule(where, d);
      else return fail(where, `kind ${d.kind} is not checked here`);
      if (errors.length === before) console.log(`ok   ${where} (structure)`);
    });
  }
  console.log(`${seen} monitoring.coreos.com document(s) checked by cuvil-checks.mjs`);
}

function one(file, kind, name) {
  const d = docsOf(file).find((x) => x.kind === kind && (!name || x.metadata?.name === name));
  if (!d) throw new Error(`${file}: no ${kind}${name ? "/" + name : ""}`);
  return d;
}
const matches = (selector, labels) => Object.entries(selector).every(([k, val]) => labels?.[k] === val);

function consistency(root) {
  const p = (f) => path.join(root, f);
  // PrometheusRule == alerts.yml
  const rule = one(p("deploy/k8s/prometheusrule.yaml"), "PrometheusRule");
  const alerts = yaml.load(fs.readFileSync(p("deploy/prometheus/alerts.yml"), "utf8"));
  if (!isDeepStrictEqual(rule.spec?.groups, alerts.groups)) {
    const a = JSON.stringify(alerts.groups, null, 1).split("\n");
    const b = JSON.stringify(rule.spec?.groups ?? null, null, 1).split("\n");
    const i = a.findIndex((line, k) => line !== b[k]);
    fail("deploy/k8s/prometheusrule.yaml", `spec.groups differ from deploy/prometheus/alerts.yml groups (first difference: alerts.yml ${JSON.stringify(a[i])} vs ${JSON.stringify(b[i])})`);
  }
  // Rollout pod template == Deployment pod template
  const dep = one(p("deploy/k8s/deployment.yaml"), "Deployment", "cuvil-server");
  const ro = one(p("deploy/argo/rollout.yaml"), "Rollout", "cuvil-server");
  if (!isDeepStrictEqual(ro.spec.template, dep.spec.template)) fail("deploy/argo/rollout.yaml", "spec.template differs from deploy/k8s/deployment.yaml's");
  if (!isDeepStrictEqual(ro.spec.selector, dep.spec.selector)) fail("deploy/argo/rollout.yaml", "spec.selector differs from deploy/k8s/deployment.yaml's");
  // Services of the Rollout exist and select its pods
  const podLabels = ro.spec.template.metadata.labels;
  const argoSvcs = docsOf(p("deploy/argo/services.yaml")).filter((d) => d.kind === "Service");
  for (const n of [ro.spec.strategy.canary.canaryService, ro.spec.strategy.canary.stableService]) {
    const s = argoSvcs.find((x) => x.metadata.name === n);
    if (!s) fail("deploy/argo/rollout.yaml", `Service ${n} is not in deploy/argo/services.yaml`);
    else if (!matches(s.spec.selector, podLabels)) fail("deploy/argo/services.yaml", `Service ${n} does not select the Rollout's pods`);
  }
  // ServiceMonitor: selects cuvil-server (and its port), none of the Rollout's Services
  const sm = one(p("deploy/k8s/servicemonitor.yaml"), "ServiceMonitor");
  const svc = one(p("deploy/k8s/service.yaml"), "Service", "cuvil-server");
  if (!matches(sm.spec.selector.matchLabels, svc.metadata.labels)) fail("deploy/k8s/servicemonitor.yaml", "does not select Service cuvil-server");
  for (const e of sm.spec.endpoints) {
    if (!svc.spec.ports.some((pt) => pt.name === e.port)) fail("deploy/k8s/servicemonitor.yaml", `Service cuvil-server has no port named ${e.port}`);
  }
  for (const s of argoSvcs) {
    if (matches(sm.spec.selector.matchLabels, s.metadata.labels)) fail("deploy/k8s/servicemonitor.yaml", `also selects ${s.metadata.name}: its pods would be scraped twice`);
  }
  if (!(sm.spec.podTargetLabels ?? []).includes("rollouts-pod-template-hash")) fail("deploy/k8s/servicemonitor.yaml", "podTargetLabels lacks rollouts-pod-template-hash (the analysis selects the canary by it)");
  // Rollout analysis steps pass exactly the AnalysisTemplate's arguments
  const at = one(p("deploy/argo/analysis-template.yaml"), "AnalysisTemplate");
  const want = at.spec.args.filter((a) => a.value === undefined && a.valueFrom === undefined).map((a) => a.name).sort();
  const steps = ro.spec.strategy.canary.steps;
  const weights = steps.filter((s) => s.setWeight !== undefined).map((s) => s.setWeight);
  if (!isDeepStrictEqual(weights, [5, 30, 100])) fail("deploy/argo/rollout.yaml", `setWeight steps ${weights}, want 5, 30, 100`);
  steps.forEach((s, i) => {
    if (!s.analysis) return;
    if (i === 0 || steps[i - 1].setWeight === undefined) fail("deploy/argo/rollout.yaml", `analysis step ${i} does not follow a setWeight`);
    for (const t of s.analysis.templates) if (t.templateName !== at.metadata.name) fail("deploy/argo/rollout.yaml", `step ${i} names template ${t.templateName}`);
    const got = (s.analysis.args ?? []).map((a) => a.name).sort();
    if (!isDeepStrictEqual(got, want)) fail("deploy/argo/rollout.yaml", `step ${i} passes args ${got}, the template needs ${want}`);
  });
  if (steps.filter((s) => s.analysis).length !== 2) fail("deploy/argo/rollout.yaml", "want an analysis after 5 % and after 30 %");
  // HPAs scale on the adapter's metric, the right targets
  const cm = one(p("deploy/k8s/prometheus-adapter-rules.yaml"), "ConfigMap");
  const adapter = yaml.load(cm.data["config.yaml"]);
  const published = adapter.rules.map((r) => r.name.as);
  for (const [file, kind] of [["deploy/k8s/hpa.yaml", "Deployment"], ["deploy/argo/hpa.yaml", "Rollout"]]) {
    const h = one(p(file), "HorizontalPodAutoscaler");
    if (h.spec.scaleTargetRef.kind !== kind || h.spec.scaleTargetRef.name !== "cuvil-server") fail(file, `should scale ${kind} cuvil-server`);
    for (const m of h.spec.metrics) {
      if (m.type === "Pods" && !published.includes(m.pods.metric.name)) fail(file, `metric ${m.pods.metric.name} is not published by the adapter rule`);
    }
  }
  console.log("consistency: checked prometheusrule/alerts.yml, rollout/deployment, services, servicemonitor, analysis args, hpa/adapter");
}

// promtool inputs: the PrometheusRule's groups as a rules file, and a unit test evaluating the
// AnalysisTemplate's queries and the adapter's query on made-up series.
function promtest(root, out) {
  const p = (f) => path.join(root, f);
  const rule = one(p("deploy/k8s/prometheusrule.yaml"), "PrometheusRule");
  fs.writeFileSync(path.join(out, "prometheusrule-groups.yml"), JSON.stringify({ groups: rule.spec.groups }, null, 1));
  const at = one(p("deploy/argo/analysis-template.yaml"), "AnalysisTemplate");
  const q = (name, hash) => at.spec.metrics.find((m) => m.name === name).provider.prometheus.query
    .replaceAll("{{args.namespace}}", "prod").replaceAll("{{args.canary-hash}}", hash);
  const cm = one(p("deploy/k8s/prometheus-adapter-rules.yaml"), "ConfigMap");
  const rule0 = yaml.load(cm.data["config.yaml"]).rules[0];
  const metric = rule0.seriesQuery.replace(/\{.*$/, "");
  const adapterQuery = rule0.metricsQuery.replaceAll("<<.Series>>", metric)
    .replaceAll("<<.LabelMatchers>>", 'namespace="prod",pod=~"cuvil-server-1|cuvil-server-2"')
    .replaceAll("<<.GroupBy>>", "pod");
  const exprs = [q("p99-latency", "canary1"), q("error-ratio", "canary1"), q("p99-latency", "stable1"), q("error-ratio", "stable1"), adapterQuery];
  fs.writeFileSync(path.join(out, "queries.yml"), JSON.stringify({
    groups: [{ name: "queries", rules: exprs.map((e, i) => ({ record: `cuvil_check:query${i}`, expr: e })) }],
  }, null, 1));

  // One minute per sample. canary1 (namespace prod): all 60 requests/min of model m between
  // 100 and 250 ms, 3 of 60 failed (5 %). stable1: under 50 ms, no failures. The same canary hash
  // in namespace staging is slow everywhere and must not leak into prod's result.
  const series = [];
  const lat = (ns, hash, pod, le, v) => series.push({ series: `cuvil_request_duration_seconds_bucket{namespace="${ns}",pod="${pod}",rollouts_pod_template_hash="${hash}",model="m",version="1",le="${le}"}`, values: v });
  const req = (ns, hash, pod, status, reason, v) => series.push({ series: `cuvil_inference_requests_total{namespace="${ns}",pod="${pod}",rollouts_pod_template_hash="${hash}",model="m",version="1",status="${status}",reason="${reason}"}`, values: v });
  for (const [le, v] of [["0.05", "0+0x10"], ["0.1", "0+0x10"], ["0.25", "0+57x10"], ["+Inf", "0+57x10"]]) lat("prod", "canary1", "cuvil-server-c", le, v);
  for (const le of ["0.05", "0.1", "0.25", "+Inf"]) lat("prod", "stable1", "cuvil-server-1", le, "0+600x10");
  for (const le of ["0.05", "0.1", "0.25"]) lat("staging", "stable1", "cuvil-server-s", le, "0+0x10");
  lat("staging", "stable1", "cuvil-server-s", "+Inf", "0+600x10");
  req("prod", "canary1", "cuvil-server-c", "success", "", "0+57x10");
  req("prod", "canary1", "cuvil-server-c", "failure", "internal", "0+3x10");
  req("prod", "canary1", "cuvil-server-c", "failure", "timeout", "0+0x10");
  req("prod", "stable1", "cuvil-server-1", "success", "", "0+600x10");
  req("prod", "stable1", "cuvil-server-1", "failure", "internal", "0+0x10");
  req("staging", "stable1", "cuvil-server-s", "success", "", "0+300x10");
  req("staging", "stable1", "cuvil-server-s", "failure", "internal", "0+300x10");
  // Adapter: cuvil_pending_requests per model; pod 1 serves two models (3 + 2), pod 2 one (4).
  const pend = (pod, model, v) => series.push({ series: `cuvil_pending_requests{job="cuvil-server",namespace="prod",pod="${pod}",model="${model}",version="1"}`, values: v });
  pend("cuvil-server-1", "a", "3x10");
  pend("cuvil-server-1", "b", "2x10");
  pend("cuvil-server-2", "a", "4x10");
  const t = (e, samples) => ({ expr: e, eval_time: "10m", exp_samples: samples });
  const test = {
    rule_files: [],
    evaluation_interval: "1m",
    tests: [{
      interval: "1m",
      input_series: series,
      promql_expr_test: [
        // canary: p99 above the 0.1 s threshold and error ratio above 0.01: analysis fails
        t(`(${q("p99-latency", "canary1")}) > bool 0.1`, [{ labels: "{}", value: 1 }]),
        t(`(${q("error-ratio", "canary1")}) > bool 0.01`, [{ labels: "{}", value: 1 }]),
        t(`(${q("error-ratio", "canary1")}) * 100`, [{ labels: "{}", value: 5 }]),
        // stable: within both thresholds (staging's failures and latency do not count)
        t(`(${q("p99-latency", "stable1")}) > bool 0.1`, [{ labels: "{}", value: 0 }]),
        t(`(${q("error-ratio", "stable1")})`, [{ labels: "{}", value: 0 }]),
        // no series for a hash: empty result (the analysis counts it as an error, not a pass)
        t(q("error-ratio", "nosuchhash"), []),
        // adapter: requests in flight per pod, models summed
        t(adapterQuery, [{ labels: '{pod="cuvil-server-1"}', value: 5 }, { labels: '{pod="cuvil-server-2"}', value: 4 }]),
      ],
    }],
  };
  fs.writeFileSync(path.join(out, "queries_test.yml"), JSON.stringify(test, null, 1));
}

const [mode, ...rest] = process.argv.slice(2);
try {
  if (mode === "monitoring") monitoring(rest);
  else if (mode === "consistency") consistency(rest[0]);
  else if (mode === "promtest") promtest(rest[0], rest[1]);
  else throw new Error(`unknown mode ${mode}`);
} catch (e) {
  fail(mode ?? "?", e.stack ?? String(e));
}
for (const e of errors) console.error(`FAIL ${e}`);
process.exit(errors.length ? 1 : 0);
JS

status=0

# ------------------------------------------------------------------- 1. schemas
out="$tmp/validate.out"
if node "$v/validate.js" --crds "$crds" --skip-unknown-kinds "${manifests[@]}" >"$out" 2>&1; then
  cat "$out"
else
  cat "$out"
  echo "FAIL: validate.js rejected a manifest"
  status=1
fi
# Only the Prometheus operator's kinds may lack a schema; they are checked below.
if grep '^SKIP ' "$out" |
  grep -v -E 'no schema for monitoring\.coreos\.com/v1 (ServiceMonitor|PrometheusRule)$'; then
  echo "FAIL: documents of a kind nobody checks (above)"
  status=1
fi
node "$v/cuvil-checks.mjs" monitoring "${manifests[@]}" || status=1

# --------------------------------------------------------------- 2. consistency
node "$v/cuvil-checks.mjs" consistency "$root" || status=1

# -------------------------------------------------------------------- 3. PromQL
if command -v promtool >/dev/null; then
  node "$v/cuvil-checks.mjs" promtest "$root" "$tmp" || status=1
  if [ -f "$tmp/queries_test.yml" ]; then
    promtool check rules "$tmp/prometheusrule-groups.yml" "$tmp/queries.yml" || status=1
    (cd "$tmp" && promtool test rules queries_test.yml) || status=1
  fi
else
  echo "NOTE: promtool not found (apt-get install prometheus): PromQL not checked"
fi

# --------------------------------------------------------- 4. negative checks
neg="$tmp/negative"
mkdir -p "$neg"
expect_rejected() {  # NAME LOGFILE PATTERN COMMAND...: COMMAND must fail and log PATTERN
  local name=$1 log=$2 pattern=$3
  shift 3
  if "$@" >"$log" 2>&1; then
    echo "FAIL: negative check '$name' was accepted"
    cat "$log"
    status=1
  elif ! grep -q -- "$pattern" "$log"; then
    echo "FAIL: negative check '$name' failed without '$pattern'"
    cat "$log"
    status=1
  else
    echo "ok   negative check '$name' rejected: $(grep -m1 -- "$pattern" "$log" | sed 's/^ *//')"
  fi
}
sed 's/^  replicas: 2$/  replicas: "two"/' deploy/k8s/deployment.yaml >"$neg/deployment.yaml"
if cmp -s deploy/k8s/deployment.yaml "$neg/deployment.yaml"; then
  echo "FAIL: could not make the broken Deployment (no 'replicas: 2' line)"
  status=1
fi
expect_rejected 'Deployment replicas: "two"' "$neg/deployment.log" '/spec/replicas' \
  node "$v/validate.js" --crds "$crds" "$neg/deployment.yaml"
sed 's/^  endpoints:$/  endpoints: metrics\n  unused:/' deploy/k8s/servicemonitor.yaml >"$neg/servicemonitor.yaml"
expect_rejected 'ServiceMonitor endpoints: a string' "$neg/servicemonitor.log" 'spec/endpoints' \
  node "$v/cuvil-checks.mjs" monitoring "$neg/servicemonitor.yaml"
mkdir -p "$neg/root/deploy"
cp -r deploy/k8s deploy/argo deploy/prometheus "$neg/root/deploy/"
sed -i 's/rate(cuvil_request_duration_seconds_bucket\[5m\]))) > 0.1$/rate(cuvil_request_duration_seconds_bucket[5m]))) > 0.2/' \
  "$neg/root/deploy/k8s/prometheusrule.yaml"
expect_rejected 'PrometheusRule threshold 0.2 != alerts.yml' "$neg/rule.log" 'differ from' \
  node "$v/cuvil-checks.mjs" consistency "$neg/root"

echo "validate_manifests: ${#manifests[@]} files, total $(($(date +%s) - start)) s"
if [ "$status" -ne 0 ]; then
  echo "validate_manifests: FAILED"
  exit 1
fi
echo "validate_manifests: all manifests valid"
