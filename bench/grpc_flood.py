#!/usr/bin/python3
"""Issue 38's memory target with gRPC, HTTP or both floods at once against one cuvil-server.

Starts the server on examples/model-repository with --max-inflight-bytes BUDGET (and
--grpc-max-concurrent-calls 1024, so the call limit is not what refuses the flood), starts the probers
below and takes mlp's idle p99 over gRPC and over HTTP from their first --idle-seconds (6), then
floods it:
  --grpc-calls N: N concurrent ModelInfer calls of MIB MiB at once, alternating 1-byte
    raw_input_contents entries to mlp and empty `inputs` to a model that does not exist. They are
    sent by build/bin/grpc_limits_test (GrpcLimitsTest.FloodAnotherServer), whose calls share
    one copy of each message: grpcio would copy every call's 60 MiB.
  --http-calls N: N concurrent POSTs of a 60 MiB binary body to mlp (bench/http_body_flood.py's).
While the floods run, a prober times GET /v2/health/ready (new connection) and gRPC
grpc.health.v1.Health/Check every 50 ms, one client sends a small mlp inference over gRPC and
another over HTTP every 20 ms, and the server's VmRSS is sampled every 5 ms. Prints the peak RSS
(VmHWM) against the budget and the target (budget + 200 MB), the slowest health answers, mlp's p99
during the flood against its idle p99 (target: under 10x), and how the flood's calls ended.

The gRPC calls go over one connection unless --grpc-connections N spreads them over N;
--no-grpc-probes leaves out the gRPC health checks and mlp calls (HTTP ones only).

usage: bench/grpc_flood.py [--server build/bin/cuvil-server] [--budget 1073741824]
       [--grpc-calls 512] [--grpc-connections 1] [--http-calls 0] [--mib 60] [--no-grpc-probes]
e.g. both floods at once: bench/grpc_flood.py --grpc-calls 512 --http-calls 512
"""
import argparse
import collections
import json
import multiprocessing
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import http_body_flood as hbf  # noqa: E402  (post, infer_ms, p99, status_bytes)


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def mlp_request():
    """ModelInferRequest bytes: mlp, one [1, 784] FP32 input of 0.5 as raw_input_contents."""
    tensor = field(1, b"input") + field(2, b"FP32") + field(3, varint(1) + varint(784))
    raw = struct.pack("<784f", *([0.5] * 784))
    return field(1, b"mlp") + field(5, tensor) + field(7, raw)


def timed(fn, errors=None):
    """fn()'s latency in ms, or None when it raised (counting why in `errors`, a Counter)."""
    t0 = time.monotonic()
    try:
        fn()
    except (grpc.RpcError, OSError) as e:
        if errors is not None:
            what = f"{e.code().name} {e.details()}" if isinstance(e, grpc.RpcError) else repr(e)
            errors[what[:120]] += 1
        return None
    return (time.monotonic() - t0) * 1000


def probe(name, period, grpc_addr, http_addr, stop, results):
    """One prober's process: times `name` ("HTTP mlp", "HTTP health", "gRPC mlp", "gRPC health")
    every `period` seconds until `stop`, then puts (name, [(start time, ms or None)]) on
    `results`."""
    channel = grpc.insecure_channel(grpc_addr)
    infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    health = channel.unary_unary("/grpc.health.v1.Health/Check")
    request = mlp_request()
    small = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 784],
                                    "data": [0.5] * 784}]}).encode()

    def grpc_mlp():
        infer(request, timeout=30)

    def http_mlp():
        if hbf.infer_ms(http_addr, small) is None:
            raise OSError("mlp over HTTP failed")

    def http_health():
        host, port = http_addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(f"GET /v2/health/ready HTTP/1.1\r\nHost: {http_addr}\r\n"
                      "Connection: close\r\n\r\n".encode())
            if not hbf.read_to_close(s).startswith(b"HTTP/1.1 200"):
                raise OSError("not ready")

    def grpc_health():
        if health(b"", timeout=30) != b"\x08\x01":
            raise OSError("not serving")

    fn = {"gRPC mlp": grpc_mlp, "HTTP mlp": http_mlp, "HTTP health": http_health,
          "gRPC health": grpc_health}[name]
    for _ in range(20):  # Warm up the connection and the model.
        timed(fn)
    timings = []
    errors = collections.Counter()
    while not stop.is_set():
        started = time.time()
        timings.append((started, timed(fn, errors)))
        time.sleep(period)
    results.put((name, timings, dict(errors)))


def start_server(args):
    proc = subprocess.Popen(
        [args.server, "--model-repository", os.path.join(ROOT, "examples/model-repository"),
         "--model-control-mode", "explicit", "--load-model", "mlp", "--grpc-port", "0",
         "--http-port", "0", "--metrics-port", "0", "--no-jit-cache",
         "--max-inflight-bytes", str(args.budget), "--http-body-min-rate", "0",
         "--grpc-max-concurrent-calls", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    grpc_addr = http_addr = None
    for line in proc.stdout:
        m = re.search(r"listening grpc=(\S+) http=(\S+)", line)
        if m:
            grpc_addr, http_addr = m.group(1), m.group(2)
        if "server ready" in line:
            break
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, grpc_addr, http_addr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, "build/bin/cuvil-server"))
    ap.add_argument("--flooder", default=os.path.join(ROOT, "build/bin/grpc_limits_test"))
    ap.add_argument("--budget", type=int, default=1 << 30)
    ap.add_argument("--grpc-calls", type=int, default=512)
    ap.add_argument("--http-calls", type=int, default=0)
    ap.add_argument("--mib", type=int, default=60)
    ap.add_argument("--grpc-connections", type=int, default=1,
                    help="TCP connections the gRPC flood's calls are spread over")
    ap.add_argument("--idle-seconds", type=float, default=6,
                    help="how long the probers run before the flood (the idle baseline)")
    ap.add_argument("--flood-nice", type=int, default=0,
                    help="run the gRPC flood's sender at this nice level (e.g. 19: on a small "
                         "host the sender then does not take the CPU the server and probes need)")
    ap.add_argument("--no-grpc-probes", action="store_true",
                    help="no gRPC health checks or mlp calls during the flood (HTTP ones only)")
    args = ap.parse_args()
    proc, grpc_addr, http_addr = start_server(args)
    try:
        # Each prober runs in a process of its own, started before the flood: the first
        # --idle-seconds of its samples are the idle baseline, taken with every prober running as
        # during the flood, and no prober waits for another's interpreter lock.
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        results = ctx.Queue()
        kinds = [("HTTP mlp", 0.02), ("HTTP health", 0.05)]
        if not args.no_grpc_probes:
            kinds += [("gRPC mlp", 0.02), ("gRPC health", 0.05)]
        probers = [ctx.Process(target=probe, args=(name, period, grpc_addr, http_addr, stop,
                                                   results))
                   for name, period in kinds]
        for p in probers:
            p.start()
        before = hbf.status_bytes(proc.pid, "VmRSS")
        done = threading.Event()
        peak_sampled = [before]

        def sample_rss():
            while not done.is_set():
                peak_sampled[0] = max(peak_sampled[0], hbf.status_bytes(proc.pid, "VmRSS"))
                time.sleep(0.005)

        watchers = [threading.Thread(target=sample_rss)]
        for t in watchers:
            t.start()
        time.sleep(args.idle_seconds)
        flood_start = time.time()
        n = args.mib << 20
        body_head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                            "shape": [1, 784],
                                            "parameters": {"binary_data_size": n}}]}).encode()
        zeros = b"\0" * n if args.http_calls else b""
        http_results = [None] * args.http_calls
        t0 = time.monotonic()
        flooder = None
        if args.grpc_calls:
            env = dict(os.environ, CUVIL_GRPC_FLOOD_ADDRESS=grpc_addr,
                       CUVIL_GRPC_FLOOD_CALLS=str(args.grpc_calls),
                       CUVIL_GRPC_FLOOD_MIB=str(args.mib),
                       CUVIL_GRPC_FLOOD_CONNECTIONS=str(args.grpc_connections),
                       CUVIL_SOURCE_DIR=ROOT)
            nice = ["nice", "-n", str(args.flood_nice)] if args.flood_nice else []
            flooder = subprocess.Popen(nice + [args.flooder, "--gtest_filter=*FloodAnotherServer*"],
                                       env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
        posters = [threading.Thread(target=hbf.post, args=(http_addr, body_head, zeros,
                                                           http_results, i))
                   for i in range(args.http_calls)]
        for t in posters:
            t.start()
        flood_out = flooder.communicate()[0] if flooder else ""
        grpc_took = time.monotonic() - t0
        for t in posters:
            t.join()
        took = time.monotonic() - t0
        flood_end = time.time()
        done.set()
        stop.set()
        for t in watchers:
            t.join()
        idle = collections.defaultdict(list)
        samples = collections.defaultdict(list)
        failed = collections.Counter()
        why = {}
        for _ in probers:
            name, timings, errors = results.get(timeout=120)
            why[name] = errors
            for started, ms in timings:
                if ms is not None and started + ms / 1000 < flood_start:
                    idle[name].append(ms)
                elif flood_start <= started <= flood_end:
                    if ms is None:
                        failed[name] += 1
                    else:
                        samples[name].append(ms)
        for p in probers:
            p.join()
        peak = hbf.status_bytes(proc.pid, "VmHWM")

        print(f"flood: {args.grpc_calls} gRPC calls (over {args.grpc_connections} connection(s)) "
              f"and {args.http_calls} HTTP bodies of {args.mib} MiB in {took:.1f} s"
              + (f" (the gRPC calls ended after {grpc_took:.1f} s)" if args.grpc_calls else ""))
        print(f"server RSS before {before >> 20} MiB, peak {peak >> 20} MiB (VmHWM; sampled "
              f"VmRSS peak {peak_sampled[0] >> 20} MiB); --max-inflight-bytes {args.budget} "
              f"({args.budget >> 20} MiB); target < budget + 200 MB = "
              f"{(args.budget + 200_000_000) >> 20} MiB: "
              f"{'met' if peak < args.budget + 200_000_000 else 'MISSED'}")
        for name in ("HTTP health", "gRPC health"):
            v = samples[name]
            if not v and not failed[name]:
                continue
            print(f"{name}: {len(v)} answered, {failed[name]} failed, slowest "
                  f"{max(v) if v else float('nan'):.0f} ms")
        for name, errors in why.items():
            for what, count in errors.items():
                print(f"  {name} failed {count} x: {what}")
        for proto in ("gRPC", "HTTP"):
            during = samples[f"{proto} mlp"]
            if not during and not failed[f"{proto} mlp"]:
                continue
            base = idle[f"{proto} mlp"]
            ratio = hbf.p99(during) / hbf.p99(base)
            print(f"mlp over {proto}: idle p99 {hbf.p99(base):.1f} ms ({len(base)} "
                  f"tries); during the flood p99 {hbf.p99(during):.1f} ms ({len(during)} answered, "
                  f"{failed[f'{proto} mlp']} failed): {ratio:.1f}x (target < 10x)")
        for line in flood_out.splitlines():
            if re.match(r"^\s+\d+ x code|^\d+ gRPC calls", line):
                print("  gRPC " + line.strip())
        for what, count in collections.Counter(http_results).most_common():
            print(f"  HTTP {count:5d} x {what}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
