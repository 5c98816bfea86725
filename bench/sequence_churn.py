#!/usr/bin/python3
"""Issue 42's memory target, measured (not asserted): the server's RSS over a churn of short
sequences, with checkpoints on (every START is recorded and every END tombstoned, so the log
grows and is compacted while serving).

The accumulator of tests/sequences (state 16 bytes) and the VAD-style model (state 1 KiB) are
served with --snapshot-dir; cuvil-perf runs sequences of --length steps from --concurrency
slots over gRPC for --seconds; the server's VmRSS is sampled every --every seconds. Prints the
samples, the sequences started, and the checkpoint log's size at the end.

usage: sequence_churn.py CUVIL_SERVER CUVIL_PERF [--model vad|acc] [--seconds 600]
                         [--length 2] [--concurrency 16] [--every 10]
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "zero_downtime"))
from cuvil_proc import CuvilProcess, metric_samples  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("perf")
    ap.add_argument("--model", choices=["vad", "acc"], default="vad")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--length", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--every", type=int, default=10)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cuvil-seq-churn-")
    try:
        repo = os.path.join(tmp, "repo")
        subprocess.run(["/usr/bin/python3",
                        os.path.join(HERE, "..", "tests", "sequences",
                                     "make_streaming_models.py"), repo],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        model = "vad_state"
        if a.model == "acc":
            sys.path.insert(0, os.path.join(HERE, "..", "tests", "sequences"))
            import onnx
            from perf_sequences_test import SEQ_CONFIG, accumulator
            os.makedirs(os.path.join(repo, "acc", "1"))
            onnx.save(accumulator(), os.path.join(repo, "acc", "1", "model.onnx"))
            with open(os.path.join(repo, "acc", "config.pbtxt"), "w") as f:
                f.write(SEQ_CONFIG)
            model = "acc"
        snap = os.path.join(tmp, "snap")
        with CuvilProcess(a.server, repo, ["--load-model", model, "--snapshot-dir", snap]) as s:
            pid = s.proc.pid
            out_csv = os.path.join(tmp, "churn.csv")
            perf = subprocess.Popen(
                [a.perf, "-m", model, "-u", s.grpc, "--concurrency-range", str(a.concurrency),
                 "--measurement-interval", str(a.seconds * 1000), "--max-requests",
                 "1000000000", "--sequence-length", str(a.length),
                 "--sequence-length-variation", "0", "-f", out_csv],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            t0 = time.time()
            print(f"t_s rss_mib open_sequences log_mib", flush=True)
            log = os.path.join(snap, "sequences", f"{model}.v1.seqlog")
            while perf.poll() is None:
                time.sleep(a.every)
                active = metric_samples(s.metrics_text(), "cuvil_sequences_active")
                size = os.path.getsize(log) if os.path.exists(log) else 0
                print(f"{time.time() - t0:.0f} {rss_kib(pid) / 1024:.1f} "
                      f"{sum(active.values()):.0f} {size / 2**20:.2f}", flush=True)
            out, err = perf.communicate()
            print(out.strip())
            if err.strip():
                print(err.strip())
            with open(out_csv) as f:
                row = list(csv.DictReader(f))[-1]
            print(f"sequences started {row['sequences_started']}, completed "
                  f"{row['sequences_completed']}, steps {row['requests']}, errors "
                  f"{row['errors']}; final RSS {rss_kib(pid) / 1024:.1f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
