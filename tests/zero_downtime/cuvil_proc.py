"""A cuvil-server child process on ephemeral ports for integration tests and target scripts.

    with CuvilProcess(server_bin, repo, ["--load-model", "mlp"]) as s:
        s.http_post("/v2/repository/models/mlp/load")
        text = s.metrics_text()
"""
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request


class CuvilProcess:
    def __init__(self, server_bin, repo, extra_args=(), start_timeout=300):
        self.args = [server_bin, "--model-repository", repo, "--model-control-mode", "explicit",
                     "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
                     "--exit-timeout-secs", "10"] + list(extra_args)
        self.start_timeout = start_timeout
        self.log = []
        self.proc = None
        self.grpc = self.http = self.metrics = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        deadline = time.time() + self.start_timeout
        try:
            self.grpc, self.http, self.metrics = listening_addresses(
                self.proc, self.start_timeout, self.log)
        except SystemExit as e:
            self.stop()
            raise SystemExit("server did not start: " + str(e))
        while time.time() < deadline:
            if self.http_get("/v2/health/ready")[0] == 200:
                return
            time.sleep(0.2)
        raise SystemExit("server did not become ready:\n" + "".join(self.log))

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return "hung"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _call(self, req, timeout):
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, ConnectionError) as e:
            return 0, str(e)

    def http_get(self, path, timeout=60):
        return self._call(f"http://{self.http}{path}", timeout)

    def http_post(self, path, body=None, timeout=300):
        data = json.dumps(body if body is not None else {}).encode()
        req = urllib.request.Request(f"http://{self.http}{path}", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        return self._call(req, timeout)

    def metrics_text(self):
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=30) as r:
            return r.read().decode()


# cuvil-server's line once every listener is bound; with port 0 the addresses are the only way
# to learn its ports (a port picked by binding 0 and closing is free to be taken by any other
# process before the server binds it).
LISTENING = re.compile(r"listening grpc=([\w.:\[\]-]+) http=([\w.:\[\]-]+) "
                       r"metrics=([\w.:\[\]-]+)")


def port_of(address):
    """The port of a 'host:port' address as the server logs it."""
    return int(address.rpartition(":")[2])


def listening_addresses(proc, timeout=120, log=None, log_file=None, offset=0):
    """Waits for a cuvil-server child's "listening grpc=H:P http=H:P metrics=H:P" line and
    returns (grpc, http, metrics) as 'host:port' strings: start it with --grpc-port 0
    --http-port 0 --metrics-port 0 and connect to what it bound.

    Without log_file the line is read from proc.stdout (a pipe with stderr merged into it) by a
    daemon thread that appends each line to the list `log` and keeps draining the pipe for the
    process' lifetime (a full pipe would block the server); server_output() returns all of it
    once the process exited. With log_file (the file proc writes its output to) the file is read
    from byte `offset` on. When the process exits first, or after `timeout` seconds (the process
    is then killed), raises SystemExit with its output so far."""
    deadline = time.time() + timeout
    if log is None:
        log = []
    if log_file is None:
        found = []
        done = threading.Event()

        def drain():
            for line in proc.stdout:
                if isinstance(line, bytes):
                    line = line.decode(errors="replace")
                log.append(line)
                m = None if found else LISTENING.search(line)
                if m:
                    found.append(m.groups())
                    done.set()
            done.set()  # End of the output: the process exited.

        proc.drain_thread = threading.Thread(target=drain, daemon=True)
        proc.drain_thread.start()
        done.wait(timeout)
        if found:
            return found[0]
        if done.is_set():
            # Its output ended: it is exiting, a moment before it can be waited for.
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    else:
        while True:
            exited = proc.poll() is not None
            text = _read_from(log_file, offset)
            # Complete lines only: a line being written could show part of a port.
            m = LISTENING.search(text[:text.rfind("\n") + 1])
            if m:
                return m.groups()
            if exited or time.time() > deadline:
                break
            time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        why = f"not listening after {timeout} s (killed)"
    else:
        why = f"exited with status {proc.wait()} before listening"
    if log_file is None:
        proc.drain_thread.join(timeout=5)
        text = "".join(log)
    else:
        text = _read_from(log_file, offset)
    raise SystemExit(f"server {why}; its output:\n{text}")


def _read_from(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def server_output(proc, log, timeout=10):
    """Everything a process whose output listening_addresses(proc, ..., log) drains wrote, once
    it exited (waits up to `timeout` s for the draining thread to reach the end)."""
    proc.wait(timeout=timeout)
    proc.drain_thread.join(timeout=timeout)
    return "".join(log)


def metric_samples(text, name):
    """{labels-string: value} of the samples of `name` in a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):]] = float(value)
    return out


def histogram_quantile(text, name, q, labels=""):
    """The q-quantile (0..1) of a Prometheus histogram, interpolated within its bucket as
    PromQL's histogram_quantile does. `labels` selects series containing that substring."""
    buckets = []
    for key, value in metric_samples(text, name + "_bucket").items():
        if labels not in key:
            continue
        le = re.search(r'le="([^"]+)"', key).group(1)
        buckets.append((float("inf") if le == "+Inf" else float(le), value))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-12)
        prev_le, prev_count = le, count
    return buckets[-1][0]


def run_perf(perf_bin, model, url, concurrency, seconds, csv, protocol="grpc", extra=()):
    """Starts cuvil-perf as a closed loop for `seconds` (one window, no request cap)."""
    return subprocess.Popen(
        [perf_bin, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", str(concurrency),
         "--measurement-interval", str(int(seconds * 1000)), "--max-requests", "100000000",
         "--warmup-requests", "20", "-f", csv] + list(extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def perf_result(proc, csv):
    """Waits for cuvil-perf; returns (rc, row dict of its CSV or None, stdout+stderr)."""
    out, err = proc.communicate()
    row = None
    try:
        with open(csv) as f:
            lines = f.read().strip().split("\n")
        if len(lines) >= 2:
            row = dict(zip(lines[0].split(","), lines[-1].split(",")))
    except OSError:
        pass
    return proc.returncode, row, out + err
