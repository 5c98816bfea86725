#!/usr/bin/python3
"""Soak test (issue 37): load on two models while a churn loop reloads them, hot-patches mlp and
rolls the patches back, tiers versions up, snapshots and restores, and sends hostile patches;
then failed requests, p99 latency per minute, the server's resident-memory growth and its
/proc/PID/maps line count.

usage: soak.py SERVER_BINARY PERF_BINARY EXAMPLE_REPO DURATION_SECS [--with-resnet SHARED_MODELS]
               [--warmup-secs N] [--no-patch] [--rss-limit-pct P] [--concurrency C]
               [--compile-tier tiered|full|fast] [--quiet-secs Q] [--maps-limit-pct P]
               [--snapshot-every N] [--json OUT]

- Starts cuvil-server (explicit model control, --compile-tier tiered by default, --no-jit-cache,
  --snapshot-dir in the temp folder, cuvil-patch-sandbox beside SERVER_BINARY through
  CUVIL_PATCH_SANDBOX) on a temp copy of the example repository with mlp and lenet loaded, plus
  `lenet_churn` (a copy of lenet) that the churn loop unloads and loads. Without a JIT cache every
  load and reload is a tiered start: the quick tier (O0) serves, then the full tier is swapped in
  beneath the patch stack (a `tier_swap` patch event). With a cache only the first load of each
  model would tier up: the in-memory cache answers every reload of the same bytes with the full
  tier.
- Load: cuvil-perf in back-to-back 60 s windows (closed loop) on the two models that stay loaded,
  each at --concurrency outstanding requests (default 8): mlp over gRPC (C - C/4) and HTTP (C/4),
  lenet over gRPC (C); resnet18 over gRPC at 1 with --with-resnet.
- Churn, in a loop: copy mlp/1 to mlp/2 and load (v2 replaces v1 once READY), remove mlp/2 and
  load (v1 replaces v2), reload mlp v1 in place, reload lenet in place, unload and load
  lenet_churn. Every load tiers up (tiered).
- Hot patching (unless --no-patch), on mlp v1 each cycle: an IR patch (hand-written LLVM IR
  computing the same Relu, or the same output Gemm when the Relus are fused into the Gemms), a
  recompile patch (opt_level 1 or 2, every other kernel) and a 0.01 s profile window, all
  validated against the current outputs so responses stay correct. The patched version is then
  reloaded in place (its active patches must be carried over, same ids) and every
  --snapshot-every cycles (default 3) snapshotted and restored over the admin HTTP API (the
  restore must bring back the same active patch ids); mlp's answer to a fixed input is compared
  with the unpatched one after each. Both patches are rolled back at the end of the cycle, the
  top one first on even cycles, the one beneath first on odd ones. Every tenth patch sent is
  hostile (a store to address 0, an endless loop, inline asm, a call to system(), in turn): each
  must be refused with a reason naming the cause while the server (same pid) stays up. A refused
  benign patch or rollback, a lost patch or a wrong answer counts as a failure. With
  --snapshot-dir the server rewrites mlp.1.cuvilsnap after each patch: checked too.
- Phases: warm-up (default the first 25% of DURATION_SECS, at least 30 s) with load and churn,
  then a quiet pause (no load, the churn cycle finished, every patch rolled back, tier-ups done,
  --quiet-secs, default 15) that takes the baseline of /proc/PID/maps, VmRSS, threads and open
  descriptors, then the rest of DURATION_SECS with load and churn, then the same quiet pause
  again for the end figures.
- Every 5 s it samples VmRSS of the server from /proc. Growth = mean RSS of the last 20% of the
  samples under load after the warm-up over the mean of its first 20%; the two quiet readings
  (one sample each, so allocator state weighs more) are reported, not checked.
- With --json OUT the summary goes to OUT and the server's log to OUT.server.log.
Exits 1 if any request failed, a reload, patch, rollback, snapshot or restore failed, a patch was
lost or an answer changed, a hostile patch was not refused with its reason, no tier-up happened
(tiered) or one failed, a model does not serve its full tier when quiet, the server died, RSS
grew by 5% or more under load (--rss-limit-pct), or the maps line count at the end exceeds the
baseline by more than --maps-limit-pct (default 5%; see MAPS_NOTE).
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from mlp_patches import gemm_patch_ir  # noqa: E402

WINDOW_MS = 60000
TIER_AUTHOR = "tiered-compilation"  # Author of the tier swap's base layer in ListPatches.
# The maps line count moves a little with no leak: glibc merges or splits adjacent anonymous
# mappings as arenas grow and trim, and thread stacks (gRPC blocking pool, HTTP connection
# threads) come and go with demand, each a stack plus a guard page. A leaked JIT module, memfd
# or sandbox mapping per patch, reload or restore adds one or more lines per churn cycle (3-4
# patches, 5 loads), i.e. well above 5% of a ~600-line baseline within a 30-minute soak.
MAPS_NOTE = "5% covers allocator and thread-stack churn; a per-cycle leak grows past it"
# mlp's answer to this input, unpatched, is the reference every patched answer must match.
PROBE_INPUT = [((i * 37) % 101) / 101.0 for i in range(784)]


def http_post(addr, path, body=b"{}", timeout=300):
    req = urllib.request.Request(f"http://{addr}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def http_get(addr, path):
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def relu_ir(symbol, width):
    """LLVM IR for a Relu kernel over batch*width floats (args = {in, out}): the same values as the
    compiled kernel, so validation passes and a patched mlp answers exactly as before."""
    return f"""
define i32 @{symbol}(ptr %args, i64 %batch) {{
entry:
  %in = load ptr, ptr %args
  %op = getelementptr ptr, ptr %args, i64 1
  %out = load ptr, ptr %op
  %n = mul i64 %batch, {width}
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %ia = getelementptr float, ptr %in, i64 %i
  %v = load float, ptr %ia
  %pos = fcmp ogt float %v, 0.0
  %r = select i1 %pos, float %v, float 0.0
  %oa = getelementptr float, ptr %out, i64 %i
  store float %r, ptr %oa
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}}
"""


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def vm_rss_kib(pid):
    return proc_status(pid, "VmRSS")


def maps_lines(pid):
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for _ in f)


class Soak:
    def __init__(self, args):
        self.server, self.perf, example, duration = args[:4]

        def opt(flag, default):
            return args[args.index(flag) + 1] if flag in args else default
        self.duration = float(duration)
        self.shared = opt("--with-resnet", None)
        self.warmup = float(opt("--warmup-secs", max(30.0, 0.25 * self.duration)))
        self.no_patch = "--no-patch" in args
        # 5% is the target for long runs; a run of a few minutes is still dominated by the
        # allocator settling, so the CI run passes a looser limit.
        self.rss_limit = float(opt("--rss-limit-pct", 5.0))
        self.maps_limit = float(opt("--maps-limit-pct", 5.0))
        self.concurrency = int(opt("--concurrency", 8))
        self.compile_tier = opt("--compile-tier", "tiered")
        self.quiet_secs = float(opt("--quiet-secs", 15))
        self.snapshot_every = int(opt("--snapshot-every", 3))
        self.json_out = opt("--json", None)
        self.tmp = tempfile.mkdtemp(prefix="cuvil-soak-")
        self.repo = os.path.join(self.tmp, "repo")
        self.snapdir = os.path.join(self.tmp, "snapshots")
        os.mkdir(self.snapdir, 0o700)
        shutil.copytree(example, self.repo)
        shutil.copytree(os.path.join(self.repo, "lenet"), os.path.join(self.repo, "lenet_churn"))
        cfg = os.path.join(self.repo, "lenet_churn", "config.pbtxt")
        with open(cfg) as f:
            text = f.read().replace('name: "lenet"', 'name: "lenet_churn"')
        with open(cfg, "w") as f:
            f.write(text)
        self.models = ["mlp", "lenet", "lenet_churn"]
        if self.shared:
            d = os.path.join(self.repo, "resnet18")
            os.makedirs(os.path.join(d, "1"))
            shutil.copy(os.path.join(self.shared, "resnet18", "model.onnx"), os.path.join(d, "1"))
            with open(os.path.join(d, "config.pbtxt"), "w") as f:
                f.write('name: "resnet18"\nmax_batch_size: 8\ndynamic_batching { '
                        'max_queue_delay_microseconds: 500 }\n')
            self.models.append("resnet18")
        self.sandbox = os.path.join(os.path.dirname(os.path.abspath(self.server)),
                                    "cuvil-patch-sandbox")
        self.lock = threading.Lock()
        self.events = []        # (time, text) of churn steps and problems
        self.windows = []       # per finished perf window
        self.rss = []           # (t, KiB, phase)
        self.phase = "start"
        self.quiet = {}         # phase -> figures at the end of a quiet pause
        self.reload_failures = []
        self.loads = self.unloads = self.same_version_reloads = 0
        self.patching = False   # set once the server lists mlp's functions
        self.ir_fn = None       # (kind, function entry) of the IR patch
        self.applied = {"ir": 0, "recompile": 0, "profile": 0}
        self.rolled_back = {"ir": 0, "recompile": 0}
        self.middle_rollbacks = 0
        self.sent = 0           # patches sent, hostile included: every tenth is hostile
        self.hostile = {}       # what -> {"sent", "refused", "status", "reasons"}
        self.hostile_refused = 0
        self.snapshots = self.restores = 0
        self.snapshot_bytes = 0
        self.snapdir_checks = 0
        self.carried_checks = 0
        self.output_checks = 0
        self.output_max_diff = 0.0
        self.reference = None
        self.patch_failures = []
        self.check_failures = []
        self.patch_switch_us = []
        self.patch_max_abs_diff = 0.0  # validation's old-vs-patched difference: 0 for a true identity
        self.cycle = 0
        self.stop = threading.Event()
        self.log = []

    def note(self, text):
        with self.lock:
            self.events.append((time.time() - self.t0, text))
        print(f"[{time.time() - self.t0:7.1f}s] {text}", flush=True)

    def fail(self, text):
        self.check_failures.append(text)
        self.note("FAILED CHECK: " + text)

    def start_server(self):
        env = dict(os.environ)
        if os.access(self.sandbox, os.X_OK):
            env["CUVIL_PATCH_SANDBOX"] = self.sandbox  # The copy beside this server binary.
        self.proc = subprocess.Popen(
            [self.server, "--model-repository", self.repo, "--model-control-mode", "explicit",
             "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
             "--exit-timeout-secs", "10", "--insecure-admin", "--compile-tier", self.compile_tier,
             "--no-jit-cache", "--snapshot-dir", self.snapdir] +
            sum((["--load-model", m] for m in self.models), []),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env)
        self.pid = self.proc.pid
        deadline = time.time() + 300
        self.grpc = self.http = self.metrics = None
        # Read until the ports are logged, then poll readiness.
        while time.time() < deadline and not self.grpc:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening grpc=(\S+) http=(\S+) metrics=(\S+)", line)
            if m:
                self.grpc, self.http, self.metrics = m.group(1), m.group(2), m.group(3)
        if not self.grpc:
            raise SystemExit("server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True).start()
        while time.time() < deadline:
            if http_get(self.http, "/v2/health/ready")[0] == 200:
                break
            time.sleep(0.5)
        for m in self.models:
            status, body = http_post(self.http, f"/v2/repository/models/{m}/load")
            if status != 200:
                raise SystemExit(f"cannot load {m}: {status} {body}")

    def alive(self):
        """The server we started is still running (same pid) and answers readiness."""
        if self.proc.poll() is not None or not os.path.exists(f"/proc/{self.pid}"):
            return False
        return http_get(self.http, "/v2/health/ready")[0] == 200

    def perf_loop(self, model, protocol, concurrency, until):
        url = self.grpc if protocol == "grpc" else self.http
        while not self.stop.is_set():
            left = until - time.time()
            if left < 15:
                break
            window = int(min(WINDOW_MS, left * 1000 - 5000))
            csv = os.path.join(self.tmp, f"perf-{model}-{protocol}-{len(self.windows)}-{time.time()}.csv")
            t_start = time.time() - self.t0
            p = subprocess.run(
                [self.perf, "-m", model, "-u", url, "-i", protocol, "--concurrency-range",
                 str(concurrency), "--measurement-interval", str(window), "--max-requests",
                 "100000000", "--warmup-requests", "20", "-f", csv],
                capture_output=True, text=True)
            row = None
            if os.path.exists(csv):
                with open(csv) as f:
                    lines = f.read().strip().split("\n")
                os.remove(csv)
                if len(lines) >= 2:
                    row = dict(zip(lines[0].split(","), lines[-1].split(",")))
            w = {"model": model, "protocol": protocol, "concurrency": concurrency,
                 "phase": self.phase, "start": t_start, "end": time.time() - self.t0,
                 "rc": p.returncode}
            if row:
                w.update(requests=int(row["requests"]), errors=int(row["errors"]),
                         p99_us=float(row["p99_us"]), p50_us=float(row["p50_us"]),
                         rate=float(row["client_infer_per_sec"]))
            else:
                # No result at all: setup failed (e.g. the first request failed).
                w.update(requests=0, errors=1, p99_us=float("nan"), p50_us=float("nan"), rate=0)
            first = re.search(r"first error: (.*)", p.stderr)
            if first:
                w["first_error"] = first.group(1)[:300]
            if w["errors"]:
                self.note(f"{model}/{protocol}: {w['errors']} failed, first: "
                          f"{w.get('first_error', '?')}")
            if p.returncode not in (0, 3) or (p.returncode == 3 and w["errors"] == 0):
                self.note(f"cuvil-perf {model}/{protocol} rc={p.returncode}: "
                          f"{(p.stdout + p.stderr).strip()[-300:]}")
            with self.lock:
                self.windows.append(w)
            print(f"[{w['end']:7.1f}s] window {model}/{protocol}: {w['requests']} requests, "
                  f"{w['errors']} errors, p99 {w['p99_us']:.0f} us", flush=True)

    def load(self, name, why):
        t = time.time()
        status, body = http_post(self.http, f"/v2/repository/models/{name}/load")
        self.loads += 1
        if status != 200:
            self.reload_failures.append(f"{why}: {status} {body[:200]}")
            self.note(f"RELOAD FAILED {why}: {status} {body[:200]}")
        return time.time() - t

    def churn_loop(self, until):
        mlp = os.path.join(self.repo, "mlp")
        while not self.stop.wait(2.0):
            if time.time() > until - 10:
                break
            self.cycle += 1
            cycle = self.cycle
            shutil.copytree(os.path.join(mlp, "1"), os.path.join(mlp, "2"))
            a = self.load("mlp", "mlp -> v2")
            shutil.rmtree(os.path.join(mlp, "2"))
            b = self.load("mlp", "mlp -> v1")
            # Patch v1 now so the patched kernels serve mlp's load through the other steps.
            ids = {}
            if self.patching:
                ir = self.patch_ir()
                if ir:
                    ids["ir"] = ir
                rc = self.patch_recompile(cycle)
                if rc:
                    ids["recompile"] = rc
                self.profile_window()
                self.check_output("patched")
            # A reload of the same version: its active patches are carried over (same ids).
            before = self.active_patches() if self.patching else None
            self.load("mlp", "mlp v1 in place")
            self.same_version_reloads += 1
            if self.patching:
                after = self.active_patches()
                self.carried_checks += 1
                if before != after or set(ids.values()) - set(after):
                    self.fail(f"cycle {cycle}: reload of mlp v1 in place: active patches "
                              f"{sorted(before)} before, {sorted(after)} after (applied {ids})")
                self.check_output("reloaded")
                if self.snapshot_every and cycle % self.snapshot_every == 0:
                    self.snapshot_restore(cycle, ids)
            c = self.load("lenet", "lenet in place")
            status, body = http_post(self.http, "/v2/repository/models/lenet_churn/unload")
            self.unloads += 1
            if status != 200:
                self.reload_failures.append(f"unload lenet_churn: {status} {body[:200]}")
            d = self.load("lenet_churn", "lenet_churn after unload")
            # Roll back both: the top one first on even cycles, the one beneath on odd ones (a
            # middle rollback, checked by the server against the layer above).
            order = ["recompile", "ir"] if cycle % 2 == 0 else ["ir", "recompile"]
            order = [k for k in order if k in ids]
            for i, kind in enumerate(order):
                self.rollback(ids[kind], kind, middle=(i == 0 and len(order) == 2 and kind == "ir"))
            if self.patching:
                left = self.active_patches()
                if left:
                    self.fail(f"cycle {cycle}: patches {sorted(left)} still active after rollback")
                self.check_output("rolled back")
            if cycle % 10 == 1:
                self.note(f"churn cycle {cycle}: mlp v2 {a:.2f}s, v1 {b:.2f}s, lenet {c:.2f}s, "
                          f"lenet_churn {d:.2f}s")

    def functions(self):
        status, body = http_get(self.http, "/v2/admin/models/mlp/versions/1/functions")
        return json.loads(body)["functions"] if status == 200 else None

    def ir_target(self):
        """("relu", (symbol, width)) of a Relu kernel of mlp v1, else ("gemm", entry) of its last
        Gemm (no Relu fused after it: the example mlp's output layer), else None."""
        fs = self.functions() or []
        for f in fs:
            # signature: (float32[batch,W]) -> ...
            m = re.match(r"\(float32\[batch,(\d+)\]\)", f["signature"])
            if f["op_type"] == "Relu" and m:
                return "relu", (f["symbol"], int(m.group(1)))
        gemms = [f for f in fs if f["op_type"] == "Gemm"]
        if gemms:
            try:
                gemm_patch_ir(gemms[-1], 1.0)
                return "gemm", gemms[-1]
            except ValueError:
                pass
        return None

    def active_patches(self):
        """{patch_id: kind} of mlp v1's active patches, the tier swap's base and profiles left out."""
        status, body = http_get(self.http, "/v2/admin/models/mlp/versions/1/patches")
        if status != 200:
            self.fail(f"ListPatches: {status} {body[:200]}")
            return {}
        return {p["patch_id"]: p["kind"] for p in json.loads(body)["patches"]
                if p["active"] and p["author"] != TIER_AUTHOR and p["kind"] != "profile"}

    def infer_mlp(self):
        body = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                       "data": PROBE_INPUT}]}).encode()
        status, text = http_post(self.http, "/v2/models/mlp/infer", body)
        if status != 200:
            return None, f"{status} {text[:200]}"
        return json.loads(text)["outputs"][0]["data"], None

    def check_output(self, when):
        """mlp's answer to PROBE_INPUT matches the unpatched one (validation's tolerances)."""
        out, err = self.infer_mlp()
        self.output_checks += 1
        if out is None:
            self.fail(f"cycle {self.cycle} {when}: mlp inference failed: {err}")
            return
        diff = max(abs(x - y) for x, y in zip(out, self.reference))
        self.output_max_diff = max(self.output_max_diff, diff)
        if len(out) != len(self.reference) or any(
                abs(x - y) > 1e-4 + 1e-3 * abs(y) for x, y in zip(out, self.reference)):
            self.fail(f"cycle {self.cycle} {when}: mlp answers {out}, expected {self.reference}")

    def snapfile_mtime(self):
        try:
            return os.stat(os.path.join(self.snapdir, "mlp.1.cuvilsnap")).st_mtime_ns
        except OSError:
            return 0

    def send_patch(self, request, what):
        """Sends one patch to mlp v1; every tenth patch sent is a hostile one first. Returns
        (status, body)."""
        if self.sent % 10 == 9:
            self.hostile_patch()
        self.sent += 1
        before = self.snapfile_mtime()
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/patch",
                                 json.dumps(request).encode())
        if status != 200:
            self.patch_failures.append(f"{what}: {status} {body[:200]}")
            self.note(f"PATCH FAILED {what}: {status} {body[:200]}")
        elif request.get("kind") != "profile":
            # --snapshot-dir: the version's new state is written before the call answers.
            self.snapdir_checks += 1
            if self.snapfile_mtime() <= before:
                self.fail(f"{what}: {self.snapdir}/mlp.1.cuvilsnap not rewritten")
        return status, body

    def patch_ir(self):
        kind, fn = self.ir_fn
        if kind == "relu":
            symbol, ir = fn[0], relu_ir(*fn)
        else:
            symbol, ir = fn["symbol"], gemm_patch_ir(fn, 1.0)
        status, body = self.send_patch({"ir": ir, "function": symbol, "author": "soak"},
                                       f"ir {symbol}")
        return self.patched(status, body, "ir")

    def patch_recompile(self, cycle):
        """Every kernel no active IR patch replaces, compiled again at opt_level 1 or 2."""
        status, body = self.send_patch(
            {"kind": "recompile", "options": f"opt_level={1 + cycle % 2}", "author": "soak"},
            "recompile")
        return self.patched(status, body, "recompile")

    def patched(self, status, body, kind):
        if status != 200:
            return None
        out = json.loads(body)
        self.applied[kind] += 1
        self.patch_switch_us.append(out.get("switch_us", 0))
        self.patch_max_abs_diff = max(self.patch_max_abs_diff, out.get("max_abs_diff", 0))
        return out["patch_id"]

    def profile_window(self):
        """A 0.01 s profile window over mlp under load: it rolls itself back."""
        status, _ = self.send_patch(
            {"kind": "profile", "profile_seconds": 0.01, "wait": True, "author": "soak"},
            "profile")
        if status == 200:
            self.applied["profile"] += 1

    HOSTILE = [
        ("segfault", "  store volatile i32 1, ptr null\n  ret i32 0", "", "signal 11"),
        ("endless loop", "  br label %l\nl:\n  %v = load volatile ptr, ptr %args\n  br label %l", "",
         "longer than"),
        ("inline asm", '  call void asm sideeffect "nop", ""()\n  ret i32 0', "", "asm"),
        ("system()", "  %r = call i32 @system(ptr null)\n  ret i32 0", "declare i32 @system(ptr)",
         "'system'"),
    ]

    def hostile_patch(self):
        """One hostile IR patch (rotating kinds) on a kernel of mlp: it must be refused with its
        reason while the server (same pid) keeps serving."""
        self.sent += 1
        fs = self.functions()
        n = sum(h["sent"] for h in self.hostile.values())
        what, code, prelude, reason = self.HOSTILE[n % len(self.HOSTILE)]
        h = self.hostile.setdefault(what, {"sent": 0, "refused": 0, "status": [], "reasons": []})
        h["sent"] += 1
        if not fs:
            self.fail(f"hostile {what}: cannot list mlp's functions")
            return
        symbol = fs[0]["symbol"]
        ir = f"{prelude}\ndefine i32 @{symbol}(ptr %args, i64 %batch) {{\nentry:\n{code}\n}}\n"
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/patch", json.dumps(
            {"ir": ir, "function": symbol, "force": True, "author": "soak-hostile"}).encode())
        try:
            message = json.loads(body).get("error", body)
        except ValueError:
            message = body
        if status not in h["status"]:
            h["status"].append(status)
        if len(h["reasons"]) < 2 and message[:300] not in h["reasons"]:
            h["reasons"].append(message[:300])
        if status == 200 or reason not in body:
            self.patch_failures.append(f"hostile {what}: {status} {body[:200]}")
            self.note(f"HOSTILE PATCH NOT REFUSED ({what}): {status} {body[:200]}")
        else:
            h["refused"] += 1
            self.hostile_refused += 1
        if not self.alive():
            self.fail(f"server not alive after the hostile patch {what}")

    def rollback(self, patch_id, kind, middle=False):
        before = self.snapfile_mtime()
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/rollback",
                                 json.dumps({"patch_id": patch_id}).encode())
        if status != 200:
            self.patch_failures.append(f"rollback {kind} {patch_id}: {status} {body[:200]}")
            self.note(f"ROLLBACK FAILED {kind} {patch_id}: {status} {body[:200]}")
            return
        self.rolled_back[kind] += 1
        self.middle_rollbacks += middle
        self.patch_switch_us.append(json.loads(body).get("switch_us", 0))
        self.snapdir_checks += 1
        if self.snapfile_mtime() <= before:
            self.fail(f"rollback {patch_id}: {self.snapdir}/mlp.1.cuvilsnap not rewritten")

    def snapshot_restore(self, cycle, ids):
        """Snapshot of the patched mlp v1, restored at once: the same active patches (ids) come
        back and mlp still answers as before."""
        expected = self.active_patches()
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/snapshot")
        if status != 200:
            self.fail(f"cycle {cycle}: snapshot: {status} {body[:200]}")
            return
        snap = json.loads(body)["snapshot"]
        self.snapshots += 1
        self.snapshot_bytes = max(self.snapshot_bytes, len(snap) * 3 // 4)
        status, body = http_post(self.http, "/v2/admin/snapshots/restore",
                                 json.dumps({"snapshot": snap}).encode())
        if status != 200:
            self.fail(f"cycle {cycle}: restore: {status} {body[:200]}")
            return
        self.restores += 1
        restored = json.loads(body)
        after = self.active_patches()
        if set(expected) - set(restored["patch_ids"]) or after != expected or \
                set(ids.values()) - set(after):
            self.fail(f"cycle {cycle}: restore: active {sorted(expected)} before, restore "
                      f"answered {restored['patch_ids']}, active {sorted(after)} after")
        self.check_output("restored")

    def rss_loop(self):
        while not self.stop.wait(5.0):
            try:
                kib = vm_rss_kib(self.pid)
            except OSError:
                break
            with self.lock:
                self.rss.append((time.time() - self.t0, kib, self.phase))

    def settle(self):
        """Waits for the tier-ups the last loads queued (the tier_swap count stops moving)."""
        last, still = None, 0
        deadline = time.time() + 120
        while still < 3 and time.time() < deadline:
            n = sum("kind tier_swap result" in line for line in list(self.log))
            still = still + 1 if n == last else 0
            last = n
            time.sleep(1)

    def quiet_pause(self, name):
        """No load, no churn, every patch rolled back: waits --quiet-secs, then takes the figures
        that the end must come back to."""
        self.phase = name
        self.settle()
        if self.patching:
            left = self.active_patches()
            if left:
                self.fail(f"{name}: patches {sorted(left)} still active")
        if self.compile_tier == "tiered":
            for m in self.models:
                status, body = http_get(self.http, f"/v2/admin/models/{m}/versions/1/patches")
                if status != 200 or not any(p["active"] and p["author"] == TIER_AUTHOR
                                            for p in json.loads(body)["patches"]):
                    self.fail(f"{name}: {m} v1 does not serve its full tier: {status} {body[:300]}")
        self.note(f"{name}: quiet for {self.quiet_secs:.0f} s")
        time.sleep(self.quiet_secs)
        q = {"t": time.time() - self.t0, "maps_lines": maps_lines(self.pid),
             "rss_kib": vm_rss_kib(self.pid), "threads": proc_status(self.pid, "Threads"),
             "fds": len(os.listdir(f"/proc/{self.pid}/fd")),
             "snapshot_files": sorted(os.listdir(self.snapdir))}
        self.quiet[name] = q
        self.note(f"{name}: maps {q['maps_lines']} lines, VmRSS {q['rss_kib'] / 1024:.1f} MiB, "
                  f"{q['threads']} threads, {q['fds']} fds, snapshots {q['snapshot_files']}")

    def active_phase(self, name, until):
        self.phase = name
        loads = [("mlp", "grpc", self.concurrency - self.concurrency // 4),
                 ("mlp", "http", self.concurrency // 4), ("lenet", "grpc", self.concurrency)]
        if self.shared:
            loads.append(("resnet18", "grpc", 1))
        threads = [threading.Thread(target=self.perf_loop, args=l + (until,))
                   for l in loads if l[2] > 0]
        threads.append(threading.Thread(target=self.churn_loop, args=(until,)))
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=1)
                if self.proc.poll() is not None and not self.stop.is_set():
                    self.note(f"SERVER DIED with {self.proc.returncode}")
                    self.stop.set()

    def run(self):
        self.t0 = time.time()
        self.start_server()
        self.note(f"server up (grpc {self.grpc}, http {self.http}, pid {self.pid}), models "
                  f"{self.models}, --compile-tier {self.compile_tier}, sandbox "
                  f"{self.sandbox if os.access(self.sandbox, os.X_OK) else 'default'}")
        self.settle()  # The first tier-ups: the reference answer is the full tier's.
        self.reference, err = self.infer_mlp()
        if self.reference is None:
            raise SystemExit(f"mlp does not answer: {err}")
        self.patching = not self.no_patch and self.functions() is not None
        self.ir_fn = self.ir_target() if self.patching else None
        if self.patching and self.ir_fn is None:
            self.patching = False
            self.note("mlp has no kernel the soak can write IR for: hot patching skipped")
        if self.patching:
            kind, fn = self.ir_fn
            self.note(f"hot patching: IR ({kind} {fn[0] if kind == 'relu' else fn['symbol']}), "
                      "recompile and profile patches every churn cycle, one in ten sent hostile")
        else:
            self.note("hot patching: off")
        self.t0 = time.time()  # The soak clock starts with every model READY.
        rss_thread = threading.Thread(target=self.rss_loop)
        rss_thread.start()
        try:
            self.active_phase("warmup", self.t0 + self.warmup)
            if not self.stop.is_set():
                self.quiet_pause("baseline")
            self.measured_start = time.time() - self.t0
            if not self.stop.is_set():
                self.active_phase("measured", time.time() + self.duration - self.warmup)
            self.measured_end = time.time() - self.t0
            if not self.stop.is_set():
                self.quiet_pause("end")
        finally:
            self.stop.set()
            rss_thread.join()
        return self.report()

    def report(self):
        problems = []
        alive = self.proc.poll() is None
        if not alive:
            problems.append(f"server died (exit {self.proc.returncode})")
        failed = sum(w["errors"] for w in self.windows)
        requests = sum(w["requests"] for w in self.windows)
        if failed:
            problems.append(f"{failed} failed requests")
        if self.reload_failures:
            problems.append(f"{len(self.reload_failures)} failed reloads")
        if self.patch_failures:
            problems.append(f"{len(self.patch_failures)} failed patches/rollbacks/refusals")
        if self.check_failures:
            problems.append(f"{len(self.check_failures)} failed checks ({self.check_failures[0]})")
        # p99 per minute: each window is about a minute; the worst p99 over the models per minute.
        print("\np99 per minute (us), by the minute each ~60 s window started in:")
        per_minute = {}
        for w in self.windows:
            per_minute.setdefault(int(w["start"] // 60), []).append(w)
        minutes = []
        for m in sorted(per_minute):
            ws = per_minute[m]
            parts = ", ".join(f"{w['model']}/{w['protocol']} {w['p99_us']:.0f}" for w in ws)
            worst = max(w["p99_us"] for w in ws)
            minutes.append({"minute": m + 1, "worst_p99_us": worst,
                            "windows": [{k: w[k] for k in ("model", "protocol", "p99_us",
                                                           "requests", "errors")} for w in ws]})
            print(f"  minute {m + 1:3d}: worst {worst:8.0f}  ({parts})")
        # RSS growth after the warm-up, under load.
        after = [kib for _, kib, phase in self.rss if phase == "measured"]
        growth = float("nan")
        if len(after) >= 4:
            k = max(2, len(after) // 5)
            base, last = statistics.mean(after[:k]), statistics.mean(after[-k:])
            growth = (last - base) / base * 100
            print(f"\nVmRSS under load: start {self.rss[0][1] / 1024:.1f} MiB, after warm-up "
                  f"{base / 1024:.1f} MiB, end {last / 1024:.1f} MiB, peak "
                  f"{max(s[1] for s in self.rss) / 1024:.1f} MiB: growth {growth:+.2f}% "
                  f"(mean of the first and last {k} samples after the warm-up)")
            if growth >= self.rss_limit:
                problems.append(f"RSS grew {growth:.2f}% under load (limit {self.rss_limit:g}%)")
        else:
            problems.append("too few RSS samples after the warm-up")
        b, e = self.quiet.get("baseline"), self.quiet.get("end")
        quiet_growth = maps_growth = float("nan")
        if b and e:
            quiet_growth = (e["rss_kib"] - b["rss_kib"]) / b["rss_kib"] * 100
            maps_growth = (e["maps_lines"] - b["maps_lines"]) / b["maps_lines"] * 100
            print(f"quiet: VmRSS {b['rss_kib'] / 1024:.1f} -> {e['rss_kib'] / 1024:.1f} MiB "
                  f"({quiet_growth:+.2f}%), /proc/PID/maps {b['maps_lines']} -> "
                  f"{e['maps_lines']} lines ({maps_growth:+.2f}%, limit +{self.maps_limit:g}%: "
                  f"{MAPS_NOTE}), threads {b['threads']} -> {e['threads']}, fds {b['fds']} -> "
                  f"{e['fds']}")
            if maps_growth > self.maps_limit:
                problems.append(f"maps lines {b['maps_lines']} -> {e['maps_lines']} "
                                f"({maps_growth:+.2f}%, limit {self.maps_limit:g}%)")
        elif alive:
            problems.append("no quiet baseline/end figures")
        # Counted from the server's `patch event:` log lines: cuvil_patches_total's series go
        # with their version, so the metric holds only what the versions loaded now saw.
        events = {}
        for line in list(self.log):
            m = re.search(r"patch event: model '[^']*' version \S+ kind (\w+) result (\w+)", line)
            if m:
                events[(m.group(1), m.group(2))] = events.get((m.group(1), m.group(2)), 0) + 1
        tier_ups = events.get(("tier_swap", "ok"), 0)
        tier_failed = events.get(("tier_swap", "failed"), 0)
        tier_refused = events.get(("tier_swap", "refused"), 0)
        if self.compile_tier == "tiered" and alive:
            if tier_ups == 0:
                problems.append("no tier-up happened")
            if tier_failed:
                problems.append(f"{tier_failed} tier-ups failed")
        hostile_sent = sum(h["sent"] for h in self.hostile.values())
        print(f"\n{self.duration:.0f} s soak: {requests} requests, {failed} failed, "
              f"{self.cycle} churn cycles ({self.loads} loads, {self.same_version_reloads} of mlp "
              f"v1 in place, {self.unloads} unloads), {len(self.reload_failures)} failed reloads, "
              f"server {'alive' if alive else 'DEAD'}")
        print(f"tier-ups (tier_swap events): {tier_ups} ok, {tier_failed} failed, {tier_refused} "
              f"refused (a build frozen by a reload of its version), after {self.loads} "
              f"loads and {self.restores} restores (a version replaced before its tier-up ran is "
              f"not tiered up)")
        if self.patching:
            sw = sorted(self.patch_switch_us) or [0]
            print(f"hot patching: {self.sent} patches sent; applied {self.applied}; rolled back "
                  f"{self.rolled_back} ({self.middle_rollbacks} beneath another); "
                  f"{len(self.patch_failures)} failed; switch max {sw[-1]:.0f} us, validation max "
                  f"abs diff {self.patch_max_abs_diff:g}")
            print(f"hostile patches: {hostile_sent} sent, {self.hostile_refused} refused with "
                  f"their reason:")
            for what, h in self.hostile.items():
                print(f"  {what}: {h['refused']}/{h['sent']} refused (HTTP {h['status']}): "
                      f"{h['reasons'][0][:160] if h['reasons'] else ''}")
            print(f"snapshots {self.snapshots}, restores {self.restores} (up to "
                  f"{self.snapshot_bytes} bytes); patches carried over {self.carried_checks} "
                  f"reloads; --snapshot-dir rewrites checked {self.snapdir_checks}; mlp answer "
                  f"checked {self.output_checks} times, max diff {self.output_max_diff:g}")
            print("server patch events (log): " + ", ".join(
                f"{k}/{r} {v}" for (k, r), v in sorted(events.items())))
            if self.applied["ir"] == 0 or self.applied["recompile"] == 0:
                problems.append(f"patches applied {self.applied}: a kind never landed")
            if hostile_sent == 0 and self.duration >= 300:
                problems.append("no hostile patch was sent")
        if self.json_out:
            with open(self.json_out + ".server.log", "w") as f:
                f.writelines(list(self.log))
            with open(self.json_out, "w") as f:
                json.dump({"duration_s": self.duration, "warmup_s": self.warmup,
                           "quiet_s": self.quiet_secs, "concurrency": self.concurrency,
                           "compile_tier": self.compile_tier, "server_alive": alive,
                           "server_pid": self.pid, "requests": requests, "failed": failed,
                           "churn_cycles": self.cycle, "loads": self.loads,
                           "unloads": self.unloads,
                           "same_version_reloads": self.same_version_reloads,
                           "reload_failures": self.reload_failures,
                           "tier_ups": tier_ups, "tier_ups_failed": tier_failed,
                           "tier_ups_refused": tier_refused,
                           "patches_sent": self.sent, "applied": self.applied,
                           "rolled_back": self.rolled_back,
                           "middle_rollbacks": self.middle_rollbacks,
                           "patches": sum(self.applied.values()),
                           "rollbacks": sum(self.rolled_back.values()),
                           "hostile_sent": hostile_sent, "hostile_refused": self.hostile_refused,
                           "hostile": self.hostile, "snapshots": self.snapshots,
                           "restores": self.restores, "snapshot_bytes": self.snapshot_bytes,
                           "carried_checks": self.carried_checks,
                           "snapdir_checks": self.snapdir_checks,
                           "output_checks": self.output_checks,
                           "output_max_diff": self.output_max_diff,
                           "patch_failures": self.patch_failures,
                           "check_failures": self.check_failures,
                           "patch_max_abs_diff": self.patch_max_abs_diff,
                           "patch_switch_us_max": max(self.patch_switch_us or [0]),
                           "server_patch_events": {f"{k}/{r}": v for (k, r), v in events.items()},
                           "rss_kib": self.rss, "rss_growth_pct": growth,
                           "quiet": self.quiet, "quiet_rss_growth_pct": quiet_growth,
                           "maps_baseline": b["maps_lines"] if b else None,
                           "maps_end": e["maps_lines"] if e else None,
                           "maps_growth_pct": maps_growth, "maps_limit_pct": self.maps_limit,
                           "problems": problems, "minutes": minutes, "windows": self.windows,
                           "events": self.events}, f, indent=1)
        return problems

    def close(self):
        rc = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = "hung"
        shutil.rmtree(self.tmp, ignore_errors=True)
        return rc


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    soak = Soak(sys.argv[1:])
    try:
        problems = soak.run()
    finally:
        rc = soak.close()
    if rc not in (0, None):
        problems.append(f"server exited with {rc} after SIGTERM")
    if problems:
        print("FAILED: " + "; ".join(problems))
        if any(k in "".join(soak.log) for k in ("terminate", "Sanitizer", "Segmentation")):
            print("---- server log tail ----\n" + "".join(soak.log[-40:]))
        sys.exit(1)
    print("PASSED")


if __name__ == "__main__":
    main()
