#!/usr/bin/env python3
"""Issue 41: a rolling update played locally, as Kubernetes and a gray-release engine do it.

Real cuvil-server processes on one model repository and one shared JIT cache folder behind
haproxy (Debian's; an HTTP/1.1 front end and a gRPC one over HTTP/2 cleartext), which
health-checks each through GET /v2/health/ready and whose weights are changed through its runtime
API, while cuvil-perf keeps 16 requests in flight over HTTP and 16 over gRPC through the proxy. Three versions roll through in sequence: each new server starts (on the warm cache),
becomes ready, takes 5%, then 30%, then 100% of the traffic; the old one is set to drain in the
proxy, gets SIGTERM, finishes what it has in flight and exits 0. No request may fail, and the
p99 during the rollout is reported against the p99 at rest (target <= 2x; a figure, printed).

usage: rolling_update_test.py CUVIL_SERVER CUVIL_PERF REPOSITORY [--stage-seconds S]
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import listening_addresses, port_of  # noqa: E402

# Where a slot points until its server runs: nothing listens on port 1, its health checks fail.
NO_SERVER = 1


def free_port():
    """A port free now, which another process may take before haproxy binds it: Proxy retries.
    (cuvil-server binds port 0 and says which port it got.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"a process exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return time.time() - t0
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"port {port} not ready after {timeout} s")


class Proxy:
    """haproxy with an HTTP/1.1 front end and a gRPC (HTTP/2 cleartext) one, each with a backend
    slot per server: slot i is server i's HTTP port and its gRPC port (set through the runtime API
    once the server said which ports it bound), health-checked over HTTP. The front ends' ports
    are picked free in advance: when another process took one first, haproxy cannot bind it and
    exits, and it starts again on other ports, up to `attempts` times."""

    def __init__(self, tmp, slots, attempts=5):
        self.sock = os.path.join(tmp, "haproxy.sock")
        servers = "\n".join(
            f"    server s{i} 127.0.0.1:{NO_SERVER} weight 0 check inter 200ms fall 2 rise 1"
            for i in range(slots))
        grpc_servers = "\n".join(
            f"    server s{i} 127.0.0.1:{NO_SERVER} proto h2 weight 0 check port {NO_SERVER} "
            f"check-proto h1 inter 200ms fall 2 rise 1"
            for i in range(slots))
        cfg = os.path.join(tmp, "haproxy.cfg")
        log = os.path.join(tmp, "haproxy.log")
        for attempt in range(attempts):
            self.port = free_port()
            self.grpc_port = free_port()
            with open(cfg, "w") as f:
                f.write(f"""global
    stats socket {self.sock} mode 600 level admin
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    retries 0
frontend inference
    bind 127.0.0.1:{self.port}
    default_backend cuvil
frontend inference_grpc
    bind 127.0.0.1:{self.grpc_port} proto h2
    default_backend cuvil_grpc
backend cuvil
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
{servers}
backend cuvil_grpc
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
{grpc_servers}
""")
            with open(log, "w") as out:
                self.proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=out,
                                             stderr=subprocess.STDOUT)
            # Its runtime API answers once every front end is bound (it exits when one is not).
            deadline = time.time() + 30
            while self.proc.poll() is None and time.time() < deadline:
                try:
                    if "Name: HAProxy" in self.command("show info"):
                        return
                except OSError:
                    pass
                time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
            with open(log) as f:
                text = f.read()
            if "Address already in use" not in text:
                break
            print(f"haproxy could not bind port {self.port} or {self.grpc_port}, "
                  "taken since they were picked: again on others", flush=True)
        raise SystemExit(f"haproxy did not start (attempt {attempt + 1} of {attempts}):\n{text}")

    def command(self, text):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.sock)
            s.sendall(text.encode() + b"\n")
            out = b""
            while chunk := s.recv(4096):
                out += chunk
        return out.decode()

    def point(self, slot, http_port, grpc_port):
        """Slot `slot` to a server's HTTP and gRPC ports; both health-checked on its HTTP port."""
        for command in (f"set server cuvil/s{slot} addr 127.0.0.1 port {http_port}",
                        f"set server cuvil_grpc/s{slot} addr 127.0.0.1 port {grpc_port}",
                        f"set server cuvil_grpc/s{slot} check-port {http_port}"):
            out = self.command(command).strip()
            if out and "changed" not in out:
                raise SystemExit(f"haproxy: {command}: {out}")

    def weight(self, slot, w):
        for backend in ("cuvil", "cuvil_grpc"):
            self.command(f"set server {backend}/s{slot} weight {w}")

    def state(self, slot, state):
        for backend in ("cuvil", "cuvil_grpc"):
            self.command(f"set server {backend}/s{slot} state {state}")

    def up(self, slot):
        running = 0
        for backend in ("cuvil", "cuvil_grpc"):
            for line in self.command(f"show servers state {backend}").splitlines():
                parts = line.split()
                # srv_op_state 2: running (health checks pass).
                if len(parts) > 5 and parts[3] == f"s{slot}" and parts[5] == "2":
                    running += 1
        return running == 2


def start_server(binary, repo, cache):
    """A server on ports 0 (any free ones): (process, its HTTP port, its gRPC port)."""
    proc = subprocess.Popen(
        [binary, "--model-repository", repo, "--jit-cache-dir", cache, "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--exit-timeout-secs", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    grpc, http, _ = listening_addresses(proc, 120)
    return proc, port_of(http), port_of(grpc)


def perf(binary, protocol, port, millis):
    return subprocess.Popen(
        [binary, "-m", "mlp", "-i", protocol, "-u", f"127.0.0.1:{port}", "--concurrency-range",
         "16", "--measurement-interval", str(millis), "--warmup-requests", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def p99_ms(report):
    """cuvil-perf's "latency us: ... p99 N" as milliseconds (None when absent)."""
    m = re.search(r"latency us:.*?\bp99 ([0-9.]+)", report)
    return float(m.group(1)) / 1000 if m else None


def errors(report):
    m = re.search(r"\berrors ([0-9]+)", report)
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("perf")
    ap.add_argument("repository")
    ap.add_argument("--stage-seconds", type=float, default=2.0)
    args = ap.parse_args()
    if shutil.which("haproxy") is None:
        print("haproxy is not installed (scripts/install-deps.sh installs it)")
        return 1
    tmp = tempfile.mkdtemp(prefix="cuvil_rolling_")
    cache = os.path.join(tmp, "cache")
    os.mkdir(cache, 0o700)
    procs = {}
    failures = []
    proxy = None
    try:
        proxy = Proxy(tmp, 4)  # A slot per revision.
        procs[0], http_port, grpc_port = start_server(args.server, args.repository, cache)
        proxy.point(0, http_port, grpc_port)
        wait_ready(http_port, procs[0])
        proxy.weight(0, 100)
        deadline = time.time() + 10
        while not proxy.up(0) and time.time() < deadline:
            time.sleep(0.05)
        wait_ready(proxy.port, None)
        ports = {"http": proxy.port, "grpc": proxy.grpc_port}
        rest = {p: perf(args.perf, p, port, 3000) for p, port in ports.items()}
        rest_p99 = {p: p99_ms(proc.communicate(timeout=120)[0]) for p, proc in rest.items()}
        stage = args.stage_seconds
        # The load runs through the whole rollout: 3 versions x (start + 3 stages + drain).
        millis = int((3 * (4 * stage + 3) + 6) * 1000)
        load = {p: perf(args.perf, p, port, millis) for p, port in ports.items()}
        time.sleep(1.5)  # Past cuvil-perf's warm-up.
        old = 0
        for new in (1, 2, 3):
            t0 = time.time()
            procs[new], http_port, grpc_port = start_server(args.server, args.repository, cache)
            proxy.point(new, http_port, grpc_port)
            wait_ready(http_port, procs[new])
            ready = time.time() - t0
            deadline = time.time() + 10
            while not proxy.up(new) and time.time() < deadline:
                time.sleep(0.05)
            for share in (5, 30, 100):
                proxy.weight(new, share)
                proxy.weight(old, 100 - share)
                time.sleep(stage)
            proxy.state(old, "drain")  # No new requests; those in flight finish.
            time.sleep(0.5)
            procs[old].terminate()
            rc = procs[old].wait(timeout=60)
            if rc != 0:
                failures.append(f"version {old} exited {rc} on SIGTERM")
            proxy.state(old, "maint")
            print(f"version {new}: ready {ready:.2f} s after start on the shared cache; "
                  f"5% -> 30% -> 100%; version {old} drained and exited {rc} "
                  f"({time.time() - t0:.1f} s)", flush=True)
            old = new
        for protocol, proc in load.items():
            out = proc.communicate(timeout=300)[0]
            if proc.returncode != 0 or errors(out) != 0:
                failures.append(f"{protocol}: cuvil-perf exit {proc.returncode} (3: requests "
                                f"failed), errors {errors(out)}:\n{out}")
            p99, at_rest = p99_ms(out), rest_p99[protocol]
            last = out.strip().splitlines()[-1] if out.strip() else ""
            print(f"{protocol} through the rollout: {last}")
            print(f"{protocol}: p99 at rest {at_rest} ms, during the rollout {p99} ms"
                  + (f" ({p99 / at_rest:.2f}x; target <= 2x)" if p99 and at_rest else ""))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        if proxy is not None:
            proxy.proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("PASS" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
