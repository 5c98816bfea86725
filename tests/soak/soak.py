#!/usr/bin/python3
"""Soak test: load on several models while a churn loop reloads them, then failed requests, p99
latency per minute and the server's resident-memory growth.

usage: soak.py SERVER_BINARY PERF_BINARY EXAMPLE_REPO DURATION_SECS [--with-resnet SHARED_MODELS]
               [--warmup-secs N] [--no-patch] [--rss-limit-pct P] [--json OUT]

- Starts cuvil-server (explicit model control) on a temp copy of the example repository with mlp
  and lenet loaded, plus `lenet_churn` (a copy of lenet) that the churn loop unloads and loads.
- Load: cuvil-perf in back-to-back 60 s windows (closed loop) on mlp over gRPC, mlp over HTTP and
  lenet over gRPC (resnet18 over gRPC with --with-resnet). Only models that stay loaded get load.
- Churn, in a loop: copy mlp/1 to mlp/2 and load (v2 replaces v1 once READY), remove mlp/2 and
  load (v1 replaces v2), reload lenet in place, unload and load lenet_churn.
- Hot patching (when the server lists mlp's functions): after mlp is back on v1, each cycle patches
  one of its Relu kernels with hand-written LLVM IR computing the same Relu (or, when the Relus are
  fused into the Gemms, recompiles its kernels at opt_level=2; validated against the current
  outputs either way, so responses stay correct), keeps it under load through the lenet reloads,
  then rolls it back. A refused patch or rollback counts as a failure. Each cycle also runs a
  0.01 s profile window and one hostile IR patch (a store to address 0, an endless loop, inline
  asm, a call to system(), in turn) that must be refused with its reason (issue 37).
- Every 5 s it samples VmRSS of the server from /proc. Growth = mean RSS of the last 20% of the run
  over the mean of the 20% after the warm-up (default: the first 25% of the run, at least 30 s).
Exits 1 if any request failed, a reload, patch or rollback failed, the server died, or RSS grew by 5% or more
(--rss-limit-pct).
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
import urllib.request

WINDOW_MS = 60000


def http_post(addr, path, body=b"{}"):
    req = urllib.request.Request(f"http://{addr}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def http_get(addr, path):
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


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


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Soak:
    def __init__(self, args):
        self.server, self.perf, example, duration = args[:4]
        self.duration = float(duration)
        self.shared = None
        if "--with-resnet" in args:
            self.shared = args[args.index("--with-resnet") + 1]
        self.warmup = max(30.0, 0.25 * self.duration)
        if "--warmup-secs" in args:
            self.warmup = float(args[args.index("--warmup-secs") + 1])
        self.no_patch = "--no-patch" in args
        # 5% is the target for long runs; a run of a few minutes is still dominated by the
        # allocator settling, so the CI run passes a looser limit.
        self.rss_limit = float(args[args.index("--rss-limit-pct") + 1]) if "--rss-limit-pct" in args else 5.0
        self.json_out = args[args.index("--json") + 1] if "--json" in args else None
        self.tmp = tempfile.mkdtemp(prefix="cuvil-soak-")
        self.repo = os.path.join(self.tmp, "repo")
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
        self.lock = threading.Lock()
        self.events = []        # (time, text) of churn steps and problems
        self.windows = []       # per finished perf window
        self.rss = []           # (t, KiB)
        self.reload_failures = []
        self.patching = False   # set once the server lists mlp's functions
        self.patches = self.rollbacks = 0
        self.profiles = self.hostile_refused = 0
        self.patch_failures = []
        self.patch_switch_us = []
        self.patch_max_abs_diff = 0.0  # validation's old-vs-patched difference: 0 for a true identity
        self.stop = threading.Event()
        self.log = []

    def note(self, text):
        with self.lock:
            self.events.append((time.time() - self.t0, text))
        print(f"[{time.time() - self.t0:7.1f}s] {text}", flush=True)

    def start_server(self):
        self.proc = subprocess.Popen(
            [self.server, "--model-repository", self.repo, "--model-control-mode", "explicit",
             "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
             "--exit-timeout-secs", "10", "--insecure-admin"] +
            sum((["--load-model", m] for m in self.models), []),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        deadline = time.time() + 300
        self.grpc = self.http = None
        # Read until the ports are logged, then poll readiness.
        while time.time() < deadline and not self.grpc:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening grpc=(\S+) http=(\S+) metrics=(\S+)", line)
            if m:
                self.grpc, self.http = m.group(1), m.group(2)
        if not self.grpc:
            raise SystemExit("server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True).start()
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.http}/v2/health/ready", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            time.sleep(0.5)
        for m in self.models:
            status, body = http_post(self.http, f"/v2/repository/models/{m}/load")
            if status != 200:
                raise SystemExit(f"cannot load {m}: {status} {body}")

    def perf_loop(self, model, protocol, concurrency):
        url = self.grpc if protocol == "grpc" else self.http
        n = 0
        while not self.stop.is_set():
            left = self.end - time.time()
            if left < 15:
                break
            window = int(min(WINDOW_MS, left * 1000 - 5000))
            csv = os.path.join(self.tmp, f"perf-{model}-{protocol}-{n}.csv")
            n += 1
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
                if len(lines) >= 2:
                    row = dict(zip(lines[0].split(","), lines[-1].split(",")))
            w = {"model": model, "protocol": protocol, "start": t_start,
                 "end": time.time() - self.t0, "rc": p.returncode}
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

    def churn_loop(self):
        mlp = os.path.join(self.repo, "mlp")
        cycle = 0
        def load(name, why):
            t = time.time()
            status, body = http_post(self.http, f"/v2/repository/models/{name}/load")
            if status != 200:
                self.reload_failures.append(f"{why}: {status} {body[:200]}")
                self.note(f"RELOAD FAILED {why}: {status} {body[:200]}")
            return time.time() - t
        while not self.stop.wait(2.0):
            if time.time() > self.end - 10:
                break
            cycle += 1
            shutil.copytree(os.path.join(mlp, "1"), os.path.join(mlp, "2"))
            a = load("mlp", "mlp -> v2")
            shutil.rmtree(os.path.join(mlp, "2"))
            b = load("mlp", "mlp -> v1")
            # Patch v1 now so the patched kernel serves mlp's load through the lenet steps.
            patch_id = self.patch() if self.patching else None
            if self.patching:
                self.profile_window()
                self.hostile_patch(cycle)
            c = load("lenet", "lenet in place")
            status, body = http_post(self.http, "/v2/repository/models/lenet_churn/unload")
            if status != 200:
                self.reload_failures.append(f"unload lenet_churn: {status} {body[:200]}")
            d = load("lenet_churn", "lenet_churn after unload")
            if patch_id:
                self.rollback(patch_id)
            if cycle % 10 == 1:
                self.note(f"churn cycle {cycle}: mlp v2 {a:.2f}s, v1 {b:.2f}s, lenet {c:.2f}s, "
                          f"lenet_churn {d:.2f}s")
        self.cycles = cycle

    def relu_function(self):
        """(symbol, width) of a Relu kernel of mlp v1, or None if the server cannot list them."""
        status, body = http_get(self.http, "/v2/admin/models/mlp/versions/1/functions")
        if status != 200:
            return None
        for f in json.loads(body)["functions"]:
            # signature: (float32[batch,W]) -> ...
            m = re.match(r"\(float32\[batch,(\d+)\]\)", f["signature"])
            if f["op_type"] == "Relu" and m:
                return f["symbol"], int(m.group(1))
        return None

    def patch(self):
        fn = self.relu_function()
        if fn:
            request = {"ir": relu_ir(*fn), "function": fn[0], "author": "soak"}
        else:
            # The Relus are fused into the Gemms: swap in the same kernels compiled at another
            # optimisation level instead (same outputs, validated).
            fn = ("all kernels (recompile)",)
            request = {"kind": "recompile", "options": "opt_level=2", "author": "soak"}
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/patch",
                                 json.dumps(request).encode())
        if status != 200:
            self.patch_failures.append(f"patch {fn[0]}: {status} {body[:200]}")
            self.note(f"PATCH FAILED {fn[0]}: {status} {body[:200]}")
            return None
        out = json.loads(body)
        self.patches += 1
        self.patch_switch_us.append(out.get("switch_us", 0))
        self.patch_max_abs_diff = max(self.patch_max_abs_diff, out.get("max_abs_diff", 0))
        return out["patch_id"]

    def profile_window(self):
        """A 0.01 s profile window over mlp under load: it rolls itself back."""
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/patch", json.dumps(
            {"kind": "profile", "profile_seconds": 0.01, "wait": True, "author": "soak"}).encode())
        if status != 200:
            self.patch_failures.append(f"profile: {status} {body[:200]}")
        else:
            self.profiles += 1

    HOSTILE = [
        ("segfault", "  store volatile i32 1, ptr null\n  ret i32 0", "", "signal 11"),
        ("endless loop", "  br label %l\nl:\n  %v = load volatile ptr, ptr %args\n  br label %l", "",
         "longer than"),
        ("inline asm", '  call void asm sideeffect "nop", ""()\n  ret i32 0', "", "asm"),
        ("system()", "  %r = call i32 @system(ptr null)\n  ret i32 0", "declare i32 @system(ptr)",
         "'system'"),
    ]

    def hostile_patch(self, cycle):
        """One hostile IR patch (rotating kinds) on a kernel of mlp: it must be refused with its
        reason while the server keeps serving."""
        status, body = http_get(self.http, "/v2/admin/models/mlp/versions/1/functions")
        if status != 200:
            return
        symbol = json.loads(body)["functions"][0]["symbol"]
        what, code, prelude, reason = self.HOSTILE[cycle % len(self.HOSTILE)]
        ir = f"{prelude}\ndefine i32 @{symbol}(ptr %args, i64 %batch) {{\nentry:\n{code}\n}}\n"
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/patch", json.dumps(
            {"ir": ir, "function": symbol, "force": True, "author": "soak-hostile"}).encode())
        if status == 200 or reason not in body:
            self.patch_failures.append(f"hostile {what}: {status} {body[:200]}")
            self.note(f"HOSTILE PATCH NOT REFUSED ({what}): {status} {body[:200]}")
        else:
            self.hostile_refused += 1

    def rollback(self, patch_id):
        status, body = http_post(self.http, "/v2/admin/models/mlp/versions/1/rollback",
                                 json.dumps({"patch_id": patch_id}).encode())
        if status != 200:
            self.patch_failures.append(f"rollback {patch_id}: {status} {body[:200]}")
            self.note(f"ROLLBACK FAILED {patch_id}: {status} {body[:200]}")
            return
        self.rollbacks += 1
        self.patch_switch_us.append(json.loads(body).get("switch_us", 0))

    def rss_loop(self):
        while not self.stop.wait(5.0):
            try:
                kib = vm_rss_kib(self.proc.pid)
            except OSError:
                break
            with self.lock:
                self.rss.append((time.time() - self.t0, kib))

    def run(self):
        self.t0 = time.time()
        self.start_server()
        self.note(f"server up (grpc {self.grpc}, http {self.http}), models {self.models}")
        listed = http_get(self.http, "/v2/admin/models/mlp/versions/1/functions")[0] == 200
        self.patching = not self.no_patch and listed
        what = ("an mlp Relu kernel (IR)" if self.relu_function() is not None
                else "mlp's kernels (recompile at opt_level=2)")
        self.note("hot patching: " + (f"patch + rollback of {what} every churn cycle"
                                      if self.patching else "off or not available, skipped"))
        self.t0 = time.time()  # The soak clock starts with every model READY.
        self.end = self.t0 + self.duration
        self.cycles = 0
        loads = [("mlp", "grpc", 2), ("mlp", "http", 1), ("lenet", "grpc", 2)]
        if self.shared:
            loads.append(("resnet18", "grpc", 1))
        threads = [threading.Thread(target=self.perf_loop, args=l) for l in loads]
        threads.append(threading.Thread(target=self.churn_loop))
        rss_thread = threading.Thread(target=self.rss_loop)
        for t in threads + [rss_thread]:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(timeout=1)
                    if self.proc.poll() is not None:
                        self.note(f"SERVER DIED with {self.proc.returncode}")
                        self.stop.set()
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
            problems.append(f"{len(self.patch_failures)} failed patches/rollbacks")
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
        # RSS growth after the warm-up.
        after = [kib for t, kib in self.rss if t >= self.warmup]
        growth = float("nan")
        if len(after) >= 4:
            k = max(2, len(after) // 5)
            base, last = statistics.mean(after[:k]), statistics.mean(after[-k:])
            growth = (last - base) / base * 100
            print(f"\nVmRSS: start {self.rss[0][1] / 1024:.1f} MiB, after warm-up "
                  f"{base / 1024:.1f} MiB, end {last / 1024:.1f} MiB, peak "
                  f"{max(k for _, k in self.rss) / 1024:.1f} MiB: growth {growth:+.2f}% "
                  f"(mean of the first and last {k} samples after {self.warmup:.0f} s)")
            if growth >= self.rss_limit:
                problems.append(f"RSS grew {growth:.2f}% (limit {self.rss_limit:g}%)")
        else:
            problems.append("too few RSS samples after the warm-up")
        print(f"\n{self.duration:.0f} s soak: {requests} requests, {failed} failed, "
              f"{self.cycles} churn cycles ({4 * self.cycles} loads, {self.cycles} unloads), "
              f"{len(self.reload_failures)} failed reloads, server {'alive' if alive else 'DEAD'}")
        if self.patching:
            sw = sorted(self.patch_switch_us) or [0]
            print(f"profile windows: {self.profiles}; hostile patches refused with their reason: "
                  f"{self.hostile_refused}")
            print(f"hot patching: {self.patches} patches applied, {self.rollbacks} rolled back, "
                  f"{len(self.patch_failures)} failed; switch max {sw[-1]:.0f} us, validation max abs diff "
                  f"{self.patch_max_abs_diff:g}")
        if self.json_out:
            with open(self.json_out, "w") as f:
                json.dump({"duration_s": self.duration, "requests": requests, "failed": failed,
                           "churn_cycles": self.cycles, "reload_failures": self.reload_failures,
                           "patches": self.patches, "rollbacks": self.rollbacks,
                           "patch_failures": self.patch_failures,
                           "patch_max_abs_diff": self.patch_max_abs_diff,
                           "rss_kib": self.rss, "rss_growth_pct": growth,
                           "minutes": minutes, "windows": self.windows,
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
