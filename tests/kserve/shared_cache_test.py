#!/usr/bin/env python3
"""Issue 41: replicas sharing one JIT cache folder (a ReadWriteMany volume or a per-node hostPath).

Part 1 (the test): REPS times, on a fresh private folder, two processes compile the same model at
the same moment (`cuvilc compile MODEL --jit-cache-dir DIR`, released together by a barrier
file): both must succeed, the folder must then hold exactly one entry (*.cjc), no temporary file
may be left, and a third process must load it as a verified hit (`cache=hit`: every section's
checksum checked over the mapping, so a torn entry would be refused and recompiled, `cache=miss`).

Part 2 (--warm-start MODEL, a figure, not a pass/fail): how long a cuvil-server replica takes
from process start to /v2/health/ready = 200 on a cold folder and on one a previous replica
filled, for issue 41's "a second replica ... ready in <= 10% of a cold replica's time".

usage: shared_cache_test.py CUVILC MODEL [--reps N]
       shared_cache_test.py CUVILC MODEL --warm-start CUVIL_SERVER [--runs N]
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import listening_addresses, port_of  # noqa: E402

# Starts the command once the barrier file exists: both processes begin within microseconds.
WAIT_THEN_EXEC = 'while [ ! -e "$0" ]; do :; done; exec "$@"'


def race(cuvilc, model, folder, barrier):
    procs = [subprocess.Popen(["/bin/sh", "-c", WAIT_THEN_EXEC, barrier, cuvilc, "compile", model,
                               "--jit-cache-dir", folder, "--timings"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    time.sleep(0.05)
    open(barrier, "w").close()
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return [p.returncode for p in procs], outs


def time_to_ready(server, repo, cache):
    t0 = time.time()
    # Port 0 (any free one), read back from the server's output: a port picked in advance could
    # be taken by another process before the server binds it.
    proc = subprocess.Popen([server, "--model-repository", repo, "--jit-cache-dir", cache,
                             "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = port_of(listening_addresses(proc, 300)[1])
        while time.time() - t0 < 300:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready",
                                            timeout=1) as r:
                    if r.status == 200:
                        return time.time() - t0
            except OSError:
                pass
            time.sleep(0.01)
        raise SystemExit("not ready after 300 s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cuvilc")
    ap.add_argument("model")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warm-start", metavar="CUVIL_SERVER")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cuvil_shared_cache_")
    failures = []
    try:
        if args.warm_start:
            repo = os.path.join(tmp, "repo")
            name = os.path.basename(os.path.dirname(os.path.abspath(args.model)))
            os.makedirs(os.path.join(repo, name, "1"))
            shutil.copy(args.model, os.path.join(repo, name, "1", "model.onnx"))
            cold, warm = [], []
            for run in range(args.runs):
                cache = os.path.join(tmp, f"cache{run}")
                cold.append(time_to_ready(args.warm_start, repo, cache))
                warm.append(time_to_ready(args.warm_start, repo, cache))
            cold.sort()
            warm.sort()
            c, w = cold[len(cold) // 2], warm[len(warm) // 2]
            print(f"{name}: process start to ready, median of {args.runs}: cold cache {c:.2f} s, "
                  f"warm cache {w:.2f} s ({100 * w / c:.1f}% of cold); cold {cold}, warm {warm}")
            return 0
        for rep in range(args.reps):
            folder = os.path.join(tmp, f"cache{rep}")
            os.mkdir(folder, 0o700)
            codes, outs = race(args.cuvilc, args.model, folder, os.path.join(tmp, f"go{rep}"))
            entries = glob.glob(os.path.join(folder, "*.cjc"))
            leftovers = [f for f in os.listdir(folder) if ".tmp" in f]
            third = subprocess.run([args.cuvilc, "compile", args.model, "--jit-cache-dir", folder,
                                    "--timings"], capture_output=True, text=True)
            hit = "cache=hit" in third.stdout
            if codes != [0, 0] or len(entries) != 1 or leftovers or not hit:
                failures.append(f"rep {rep}: exit {codes}, {len(entries)} entries, leftovers "
                                f"{leftovers}, third load hit={hit}: {outs} {third.stdout[-300:]}")
            shutil.rmtree(folder)
        print(f"{args.reps} races of two processes on one folder: "
              f"{args.reps - len(failures)} clean (both served, one entry, verified hit)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
