#!/usr/bin/env python3
"""Issue 41: how long a cuvil-server replica takes from process start to /v2/health/ready = 200,
on a cold JIT cache folder and on a warm one (a folder another replica filled), for one or two
binaries run alternately (old vs new), with the median of each and the warm/cold ratio.

Every start is its own process on port 0 (ports read back from its "listening" line); readiness
is polled every 2 ms over one short HTTP request, so the figure is at most ~2 ms late. Each start
is also split by the server's own log timestamps (millisecond resolution), as the median time
after exec at which it
  log      wrote its first line: the dynamic loader, static initialisers, flag parsing, the JIT
           engine (what `LD_DEBUG=statistics` and `perf` split further)
  listen   had its gRPC, HTTP and metrics listeners up
  load     began loading the model (before `listen` when loads overlap the listeners' start)
  READY    had the model READY: JIT cache hit (or compile), link, warm-up inference
  200      answered /v2/health/ready with 200 (as the poller saw it)

usage: bench/warm_start.py [--rounds N] [--model ONNX] BIN [BIN2]
  BIN, BIN2  cuvil-server binaries (each needs its cuvil-patch-sandbox beside it, as the build
             leaves it). With two, every round runs A then B (cold and warm each), alternating
             which goes first, so load on the machine hits both alike.
Each round: a cold start on a fresh cache folder, then WARM starts (--warm, default 3) on a
folder filled once at setup by that binary (the shared cache a first replica left).
"""
import argparse
import datetime
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \[\w+\] (.*)$")
PHASES = ["log", "listen", "load", "READY", "200"]


def ready(port):
    """One GET /v2/health/ready; True on 200."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def log_times(path):
    """(seconds since the epoch, message) per log line of the server's stderr file."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
                out.append((t, m.group(2)))
    return out


def start_to_ready(server, repo, cache, workdir):
    """Seconds from exec to /v2/health/ready = 200, and when (seconds after exec) each mark of
    PHASES was logged."""
    log = os.path.join(workdir, "server.log")
    with open(log, "w") as err:
        t0 = time.time()
        proc = subprocess.Popen([server, "--model-repository", repo, "--jit-cache-dir", cache,
                                 "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        port = None
        while time.time() - t0 < 300:
            if proc.poll() is not None:
                raise SystemExit(f"{server} exited {proc.returncode}:\n" + open(log).read())
            if port is None:
                m = re.search(r"listening grpc=\S+ http=\S+:(\d+) ", open(log).read())
                port = int(m.group(1)) if m else None
            if port is not None and ready(port):
                t1 = time.time()
                break
            time.sleep(0.002)
        else:
            raise SystemExit(f"{server} not ready after 300 s:\n" + open(log).read())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    marks = {}
    for t, msg in log_times(log):
        marks.setdefault("log", t)
        if msg.startswith("listening "):
            marks.setdefault("listen", t)
        elif msg.startswith("loading model"):
            marks.setdefault("load", t)
        elif msg.endswith("is READY") or " is READY " in msg:
            marks.setdefault("READY", t)
    marks["200"] = t1
    return t1 - t0, {p: marks[p] - t0 for p in PHASES if p in marks}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("servers", nargs="+", metavar="BIN")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warm", type=int, default=3, help="warm starts per round and binary")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--model", default=os.path.join(here, "..", "..", "shared", "models",
                                                    "resnet18", "model.onnx"))
    args = ap.parse_args()
    if len(args.servers) > 2:
        ap.error("one or two binaries")
    tmp = tempfile.mkdtemp(prefix="cuvil_warm_start_")
    try:
        repo = os.path.join(tmp, "repo")
        name = os.path.basename(os.path.dirname(os.path.abspath(args.model)))
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(args.model, os.path.join(repo, name, "1", "model.onnx"))
        tags = ["A", "B"][:len(args.servers)]
        warm_dirs = {}
        for tag, server in zip(tags, args.servers):
            warm_dirs[tag] = os.path.join(tmp, f"warm-{tag}")
            start_to_ready(server, repo, warm_dirs[tag], tmp)  # The first replica fills it.
        results = {(tag, kind): [] for tag in tags for kind in ("cold", "warm")}
        phases = {(tag, kind): {p: [] for p in PHASES} for tag in tags for kind in ("cold", "warm")}
        for r in range(args.rounds):
            order = list(zip(tags, args.servers))
            if r % 2:
                order.reverse()
            for tag, server in order:
                cold = os.path.join(tmp, f"cold-{tag}-{r}")
                runs = [("cold", cold)] + [("warm", warm_dirs[tag])] * args.warm
                for kind, cache in runs:
                    secs, split = start_to_ready(server, repo, cache, tmp)
                    results[(tag, kind)].append(secs)
                    for p, v in split.items():
                        phases[(tag, kind)][p].append(v)
                shutil.rmtree(cold, ignore_errors=True)
        print(f"{name}: process start to /v2/health/ready = 200, {args.rounds} rounds "
              f"(1 cold + {args.warm} warm per round and binary), medians in ms")
        med = lambda xs: statistics.median(xs) * 1000 if xs else float("nan")
        for tag, server in zip(tags, args.servers):
            c, w = med(results[(tag, "cold")]), med(results[(tag, "warm")])
            print(f"{tag} {server}: cold {c:.0f}  warm {w:.0f}  warm/cold {100 * w / c:.1f}%")
            for kind in ("cold", "warm"):
                xs = sorted(round(x * 1000) for x in results[(tag, kind)])
                split = "  ".join(f"{p} {med(phases[(tag, kind)][p]):.0f}" for p in PHASES)
                print(f"   {kind}: ms after exec: {split}\n         all {xs}")
        if len(tags) == 2:
            for kind in ("cold", "warm"):
                a, b = med(results[("A", kind)]), med(results[("B", kind)])
                print(f"B/A {kind}: {b / a:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
