#!/usr/bin/python3
"""Issue 38 (a): HTTP front end under slow and idle clients.

Opens SLOW slowloris connections (a request line and one header, then one more header byte every
TRICKLE seconds so no single read ever times out) and IDLE keep-alive connections (one request
answered, then silence), then measures, from a new client on a new connection each time:
  * GET /v2/health/ready latency (target: p99 < 100 ms),
  * POST /v2/models/mlp/infer latency, JSON body (target: p99 < 50 ms),
over TRIES tries each, and finally when the server cut each slow connection (target: at its
header deadline, --http-header-timeout-secs).

Slow and idle connections come from 127.0.0.2 .. 127.0.0.9 (Linux routes all of 127/8 to
loopback), so the per-address cap (512 by default) is not what admits the measuring client.

usage (from the checkout, after building cuvil-server):
  ulimit -n 65536   # or as high as the hard limit allows; the script raises its own soft limit
  bench/http_slow_clients.py build/bin/cuvil-server examples/model-repository \\
      [--slow 1000] [--idle 1000] [--tries 100] [--header-timeout 10] [--threads 32]
  bench/http_slow_clients.py --connect 127.0.0.1:8000 ...   # an already running server
Everything is bounded: connections are opened once, each measurement has a 5 s timeout, and the
script gives up waiting for cuts at header timeout + 15 s.
"""
import argparse
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import threading
import time


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port, source="127.0.0.1", timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, deadline):
    """Reads one response (Content-Length or close-delimited); returns (status, body) or None."""
    data = b""
    while time.monotonic() < deadline:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end].decode("latin-1")
            length = None
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            if length is not None and len(data) >= end + 4 + length:
                return int(head.split(" ")[1]), data[end + 4:end + 4 + length]
        s.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except (socket.timeout, OSError):
            return None
        if not chunk:
            return None
        data += chunk
    return None


def timed_request(port, method, path, body=b"", timeout=5.0):
    """A new connection, one request; (seconds, status) with status None on failure/timeout."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        s = connect(port, timeout=timeout)
    except OSError:
        return time.monotonic() - t0, None
    with s:
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                f"Content-Length: {len(body)}\r\n")
        if body:
            head += "Content-Type: application/json\r\n"
        try:
            s.sendall(head.encode() + b"\r\n" + body)
        except OSError:
            return time.monotonic() - t0, None
        got = read_response(s, deadline)
    return time.monotonic() - t0, (got[0] if got else None)


def summary(name, results, target_ms):
    times = sorted(t for t, _ in results)
    ok = sum(1 for _, st in results if st == 200)
    p = lambda q: times[min(len(times) - 1, int(q * len(times)))] * 1000
    print(f"{name}: {ok}/{len(results)} answered 200; p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, "
          f"max {times[-1] * 1000:.1f} ms (target p99 < {target_ms} ms)")
    return ok == len(results) and p(0.99) < target_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server", nargs="?")
    ap.add_argument("repo", nargs="?")
    ap.add_argument("--connect", help="host:port of a running server instead of starting one")
    ap.add_argument("--slow", type=int, default=1000)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--tries", type=int, default=100)
    ap.add_argument("--header-timeout", type=int, default=10)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--trickle", type=float, default=2.0)
    args = ap.parse_args()
    limit = raise_fd_limit()
    print(f"open-file limit {limit}")

    proc = None
    if args.connect:
        port = int(args.connect.rsplit(":", 1)[1])
    else:
        port = free_port()
        cmd = [args.server, "--model-repository", args.repo, "--http-port", str(port),
               "--grpc-port", "0", "--metrics-port", str(free_port()),
               "--http-threads", str(args.threads),
               "--http-header-timeout-secs", str(args.header_timeout), "--log-level", "warn"]
        proc = subprocess.Popen(cmd, preexec_fn=raise_fd_limit)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            _, st = timed_request(port, "GET", "/v2/health/ready", timeout=1)
            if st == 200:
                break
            if proc and proc.poll() is not None:
                sys.exit("server exited")
            time.sleep(0.2)
        else:
            sys.exit("server not ready in 120 s")
        infer_body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                             "shape": [1, 784], "data": [0.0] * 784}]}).encode()
        base_h = [timed_request(port, "GET", "/v2/health/ready") for _ in range(20)]
        base_i = [timed_request(port, "POST", "/v2/models/mlp/infer", infer_body)
                  for _ in range(20)]
        summary("baseline health", base_h, 100)
        summary("baseline infer", base_i, 50)

        sources = [f"127.0.0.{i}" for i in range(2, 10)]
        slow, slow_opened = [], []
        for i in range(args.slow):
            try:
                s = connect(port, sources[i % 4])
                s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
                s.setblocking(False)
                slow.append(s)
                slow_opened.append(time.monotonic())
            except OSError as e:
                print(f"slow connection {i}: {e}")
                break
        idle = []
        for i in range(args.idle):
            try:
                s = connect(port, sources[4 + i % 4])
                s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if read_response(s, time.monotonic() + 5) is None:
                    print(f"idle connection {i}: no answer")
                idle.append(s)
            except OSError as e:
                print(f"idle connection {i}: {e}")
                break
        print(f"opened {len(slow)} slow and {len(idle)} idle connections")

        closed_at = [None] * len(slow)
        stop = threading.Event()
        lock = threading.Lock()

        def trickle():
            while not stop.wait(args.trickle):
                with lock:
                    for i, s in enumerate(slow):
                        if closed_at[i] is None:
                            try:
                                s.send(b"a")
                            except OSError:
                                pass

        def watch():
            poller = select.poll()
            by_fd = {}
            for i, s in enumerate(slow):
                poller.register(s.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
                by_fd[s.fileno()] = i
            limit_t = time.monotonic() + args.header_timeout + 15
            while by_fd and time.monotonic() < limit_t and not stop.is_set():
                for fd, _ in poller.poll(100):
                    i = by_fd.get(fd)
                    if i is None:
                        continue
                    try:
                        gone = slow[i].recv(4096) == b""
                    except BlockingIOError:
                        gone = False
                    except OSError:
                        gone = True
                    if gone:
                        closed_at[i] = time.monotonic()
                        poller.unregister(fd)
                        del by_fd[fd]

        threads = [threading.Thread(target=trickle), threading.Thread(target=watch)]
        for t in threads:
            t.start()
        health = [timed_request(port, "GET", "/v2/health/ready") for _ in range(args.tries)]
        infer = [timed_request(port, "POST", "/v2/models/mlp/infer", infer_body)
                 for _ in range(args.tries)]
        ok_h = summary(f"health under load ({len(slow)} slow + {len(idle)} idle)", health, 100)
        ok_i = summary(f"infer under load ({len(slow)} slow + {len(idle)} idle)", infer, 50)
        threads[1].join()
        stop.set()
        threads[0].join()
        cuts = sorted(c - o for c, o in zip(closed_at, slow_opened) if c is not None)
        still = sum(1 for c in closed_at if c is None)
        if cuts:
            print(f"slow connections cut: {len(cuts)}/{len(slow)}; after {cuts[0]:.2f} s (first), "
                  f"{statistics.median(cuts):.2f} s (median), {cuts[-1]:.2f} s (last); header "
                  f"deadline {args.header_timeout} s; {still} still open")
        else:
            print(f"no slow connection was cut within {args.header_timeout + 15} s")
        for s in slow + idle:
            s.close()
        return 0 if ok_h and ok_i and still == 0 else 1
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
