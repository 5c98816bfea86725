#!/usr/bin/python3
"""Issue 42 figures (not assertions): the VAD-style streaming model of
tests/sequences/make_streaming_models.py under 1,000 concurrent sequences, and the restore of
1,000 checkpointed sequences at start.

  1. Throughput and step latency: cuvil-perf over gRPC with 1,000 sequences of 200 steps
     (ids 1:2000000): closed loop at concurrency 1000 (a thread and a connection per sequence),
     and open loop offering --rate steps/s over 1,000 open sequences from --threads senders
     (fewer client threads on the same 2 cores), against
       oldest  sequence_batching oldest, max_batch_size 64, preferred batch 64, queue delay
               --delay-us (default 2000 us)
       direct  sequence_batching direct, max_batch_size 1 (batching off)
     printing steps/s, p50/p99 step latency and the average executed batch.
  2. Restore: a server with --snapshot-dir opens 1,000 sequences (one START step each, which is
     checkpointed), is killed with SIGKILL, and started again; the time its log reports for
     reading the log and restoring them, and the time from exec to ready.

usage: sequence_vad.py CUVIL_SERVER CUVIL_PERF [--seconds S] [--concurrency N] [--delay-us N]
"""
import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import concurrent.futures

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "zero_downtime"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sequences"))
from cuvil_proc import CuvilProcess  # noqa: E402

import numpy as np  # noqa: E402
from streaming_models_test import Client  # noqa: E402


def make_repo(root, *args):
    subprocess.run(["/usr/bin/python3",
                    os.path.join(HERE, "..", "tests", "sequences", "make_streaming_models.py"),
                    root] + list(args), check=True, stderr=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)


def throughput(server, perf, repo, label, a, rate):
    """rate 0: closed loop at a.concurrency; else open loop at `rate` steps/s over
    a.concurrency sequences with a.threads senders."""
    with CuvilProcess(server, repo, ["--load-model", "vad_state",
                                     "--grpc-max-concurrent-calls", "4096"]) as s:
        out_csv = os.path.join(repo, f"{label}.csv")
        cpu0 = cpu_seconds(s.proc.pid)
        load = (["--concurrency-range", str(a.concurrency)] if rate == 0 else
                ["--request-rate-range", str(rate), "--num-of-sequences", str(a.concurrency),
                 "--max-threads", str(a.threads)])
        p = subprocess.run(
            [perf, "-m", "vad_state", "-u", s.grpc] + load +
            ["--measurement-interval", str(int(a.seconds * 1000)), "--warmup-requests",
             str(2 * a.concurrency), "--sequence-length", "200",
             "--sequence-length-variation", "0", "--sequence-id-range", "1:2000000",
             "--input-data", "random", "-f", out_csv],
            capture_output=True, text=True)
        cpu = cpu_seconds(s.proc.pid) - cpu0
        print(p.stdout.strip(), flush=True)
        if p.returncode not in (0, 3):
            print(p.stderr.strip())
            return None
        with open(out_csv) as f:
            row = list(csv.DictReader(f))[-1]
        # Every step of the run (warm-up, window, closing steps) over the server's CPU time.
        code, text = s.http_get("/v2/models/vad_state/stats")
        steps = json.loads(text)["model_stats"][0]["inference_count"] if code == 200 else 0
        return (float(row["client_infer_per_sec"]), float(row["p50_us"]),
                float(row["p99_us"]), float(row["avg_batch"]), int(row["errors"]),
                cpu * 1e6 / max(steps, 1))


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restore(server, repo, n):
    snap = os.path.join(repo, "snap")
    args = ["--load-model", "vad_state", "--snapshot-dir", snap]
    rng = np.random.default_rng(1)
    chunk = rng.standard_normal((1, 512)).astype(np.float32)
    s = CuvilProcess(server, repo, args)
    s.start()
    try:
        def start(ids):
            c = Client(s.http)
            for i in ids:
                c.infer("vad_state", [("audio", chunk)], ["prob"],
                        {"sequence_id": i, "sequence_start": True})
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(start, [range(k + 1, n + 1, 8) for k in range(8)]))
        code, text = s.http_get("/v2/admin/sequences")
        opened = len(json.loads(text)["sequences"]) if code == 200 else -1
    finally:
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
    size = os.path.getsize(os.path.join(snap, "sequences", "vad_state.v1.seqlog"))
    t0 = time.time()
    s = CuvilProcess(server, repo, args)
    s.start()
    ready_s = time.time() - t0
    try:
        code, text = s.http_get("/v2/admin/sequences")
        restored = len(json.loads(text)["sequences"]) if code == 200 else -1
        line = next((ln for ln in s.log if "open sequence(s) restored" in ln), "")
    finally:
        s.stop()
    m = re.search(r"(\d+) open sequence\(s\) restored from .* in ([\d.]+) ms", line)
    return opened, restored, size, float(m.group(2)) if m else float("nan"), ready_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("perf")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--delay-us", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=40000,
                    help="open loop: steps/s offered (above what is served: saturation)")
    ap.add_argument("--threads", type=int, default=128, help="open loop: sender threads")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cuvil-seq-bench-")
    try:
        oldest, direct = os.path.join(tmp, "oldest"), os.path.join(tmp, "direct")
        make_repo(oldest, "--strategy", "oldest", "--max-batch", "64", "--delay-us",
                  str(a.delay_us), "--max-sequences", "4096")
        make_repo(direct, "--strategy", "direct", "--max-batch", "1", "--delay-us", "0",
                  "--max-sequences", "4096")
        results = {}
        for label, repo, rate in (("oldest, closed loop", oldest, 0),
                                  ("direct, closed loop", direct, 0),
                                  ("oldest, open loop", oldest, a.rate),
                                  ("direct, open loop", direct, a.rate)):
            results[label] = throughput(a.server, a.perf, repo, label.replace(", ", "_").replace(
                " ", "_"), a, rate)
        print()
        print(f"| config ({a.concurrency} sequences) | steps/s | p50 step, ms | p99 step, ms "
              f"| avg batch | errors | server CPU per step, us |")
        print("|---|---|---|---|---|---|---|")
        for label, r in results.items():
            if r:
                print(f"| {label} | {r[0]:.0f} | {r[1] / 1000:.1f} | {r[2] / 1000:.1f} | "
                      f"{r[3]:.2f} | {r[4]} | {r[5]:.0f} |")
        for mode in ("closed loop", "open loop"):
            o, d = results[f"oldest, {mode}"], results[f"direct, {mode}"]
            if o and d:
                print(f"{mode}: oldest / direct steps/s {o[0] / d[0]:.2f}x")
        opened, restored, size, ms, ready = restore(a.server, oldest, 1000)
        print(f"restore: {opened} opened, {restored} restored after SIGKILL from a "
              f"{size / 1e6:.2f} MB log; the log read and sequences restored in {ms:.1f} ms; "
              f"exec to ready {ready:.2f} s (the model's load included)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
