#!/usr/bin/python3
"""Issue 38's HTTP memory target: many concurrent 60 MiB request bodies against one cuvil-server.

Starts the server on examples/model-repository with --max-inflight-bytes BUDGET, then sends
CALLS concurrent POSTs to /v2/models/mlp/infer, each a small JSON header declaring a binary
input followed by 60 MiB of zeros (binary tensor extension), while a prober times
GET /v2/health/ready every 50 ms and a client sends one small mlp inference every 20 ms. Prints
the server's peak RSS (VmHWM) against the budget, the status codes the bodies got, the slowest
health answer, and mlp's p99 latency during the flood against its idle p99 measured just before
(target: under 10x).

usage: bench/http_body_flood.py [--server build/bin/cuvil-server] [--calls 512]
       [--budget 1073741824] [--mib 60]
"""
import argparse
import collections
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def status_bytes(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def read_to_close(sock):
    data = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return data
        data += chunk


def post(addr, body_head, zeros, out, i):
    host, port = addr.rsplit(":", 1)
    head = (f"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: {addr}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(body_head)}\r\n"
            f"Content-Length: {len(body_head) + len(zeros)}\r\nConnection: close\r\n\r\n")
    try:
        with socket.create_connection((host, int(port)), timeout=600) as s:
            s.sendall(head.encode() + body_head)
            s.sendall(zeros)
            data = read_to_close(s)
        out[i] = data.split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError as e:
        out[i] = f"error {type(e).__name__}"


def infer_ms(addr, body):
    """One JSON mlp inference on a new connection; its latency in ms, or None on failure."""
    host, port = addr.rsplit(":", 1)
    head = (f"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: {addr}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(head + body)
            data = read_to_close(s)
    except OSError:
        return None
    if not data.startswith(b"HTTP/1.1 200"):
        return None
    return (time.monotonic() - t0) * 1000


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))] if values else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, "build/bin/cuvil-server"))
    ap.add_argument("--calls", type=int, default=512)
    ap.add_argument("--budget", type=int, default=1 << 30)
    ap.add_argument("--mib", type=int, default=60)
    args = ap.parse_args()
    proc = subprocess.Popen(
        [args.server, "--model-repository", os.path.join(ROOT, "examples/model-repository"),
         "--model-control-mode", "explicit", "--load-model", "mlp", "--grpc-port", "0",
         "--http-port", "0", "--metrics-port", "0", "--no-jit-cache",
         "--max-inflight-bytes", str(args.budget), "--http-body-min-rate", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    addr = None
    for line in proc.stdout:
        m = re.search(r"listening grpc=\S+ http=(\S+)", line)
        if m:
            addr = m.group(1)
        if "server ready" in line:
            break
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    try:
        before = status_bytes(proc.pid, "VmRSS")
        n = args.mib << 20
        body_head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 784],
                                            "parameters": {"binary_data_size": n}}]}).encode()
        zeros = b"\0" * n
        results = [None] * args.calls
        done = threading.Event()
        worst = [0.0]

        def probe():
            host, port = addr.rsplit(":", 1)
            while not done.is_set():
                t0 = time.monotonic()
                try:
                    with socket.create_connection((host, int(port)), timeout=30) as s:
                        s.sendall(f"GET /v2/health/ready HTTP/1.1\r\nHost: {addr}\r\n"
                                  "Connection: close\r\n\r\n".encode())
                        s.recv(1024)
                except OSError:
                    pass
                worst[0] = max(worst[0], time.monotonic() - t0)
                time.sleep(0.05)

        small = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 784],
                                        "data": [0.5] * 784}]}).encode()
        idle = [v for v in (infer_ms(addr, small) for _ in range(100)) if v is not None]
        during, failed = [], [0]

        def inferrer():
            while not done.is_set():
                v = infer_ms(addr, small)
                if v is None:
                    failed[0] += 1
                else:
                    during.append(v)
                time.sleep(0.02)

        prober = threading.Thread(target=probe)
        prober.start()
        client = threading.Thread(target=inferrer)
        client.start()
        t0 = time.monotonic()
        threads = [threading.Thread(target=post, args=(addr, body_head, zeros, results, i))
                   for i in range(args.calls)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        done.set()
        prober.join()
        client.join()
        peak = status_bytes(proc.pid, "VmHWM")
        print(f"{args.calls} HTTP bodies of {args.mib} MiB in {took:.1f} s: server RSS before "
              f"{before >> 20} MB, peak {peak >> 20} MB, --max-inflight-bytes {args.budget} "
              f"({args.budget >> 20} MiB); slowest health check {worst[0] * 1000:.0f} ms")
        print(f"mlp inference: idle p99 {p99(idle):.1f} ms ({len(idle)} tries); during the flood "
              f"p99 {p99(during):.1f} ms ({len(during)} answered, {failed[0]} failed): "
              f"{p99(during) / p99(idle):.1f}x (target < 10x)")
        for what, count in collections.Counter(results).most_common():
            print(f"  {count:5d} x {what}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
