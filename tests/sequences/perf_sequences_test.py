#!/usr/bin/python3
"""Issue 42: cuvil-perf's sequence options (as Triton's perf_analyzer has them) against a real
cuvil-server serving an accumulator with sequence_batching.

  1. Closed loop, concurrency 4, --sequence-length 5 --sequence-length-variation 0
     --sequence-id-range 1000:1063 over gRPC: no step is refused (each sequence starts with
     sequence_start, so the server never sees a step of a sequence that is not open); the
     report's completed sequences equal its steps / 5 (within the 4 sequences a window cuts);
     while it runs, the admin list shows at most 4 open sequences, all with ids in the range
     and at most 5 steps; afterwards none is open (the cut ones were closed with an END step).
  2. Open loop over HTTP, --request-rate-range 300 --num-of-sequences 3
     --sequence-length 10 --sequence-length-variation 50: at most 3 open at once, none with
     more than 15 steps, no errors.
  3. A --sequence-* flag on a model without sequence_batching is refused (exit 1), and an id
     range smaller than the sequences open at once too.

usage: perf_sequences_test.py CUVIL_SERVER CUVIL_PERF
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import CuvilProcess, metric_samples  # noqa: E402

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

SEQ_CONFIG = """
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 600000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ] } ]
  oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 500 }
}
"""


def accumulator():
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Add", ["state_in", "x"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["y"]),
         helper.make_node("Cast", ["START"], ["started"], to=f)],
        "accumulator",
        [helper.make_tensor_value_info("x", f, ["batch", 4]),
         helper.make_tensor_value_info("START", TensorProto.INT32, ["batch", 1]),
         helper.make_tensor_value_info("state_in", f, ["batch", 4])],
        [helper.make_tensor_value_info("y", f, ["batch", 4]),
         helper.make_tensor_value_info("state_out", f, ["batch", 4]),
         helper.make_tensor_value_info("started", f, ["batch", 1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    server, perf = sys.argv[1:]
    problems = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            problems.append(what)

    tmp = tempfile.mkdtemp(prefix="cuvil-perf-seq-")
    repo = os.path.join(tmp, "repo")
    for name, config in (("acc", SEQ_CONFIG), ("plain", "max_batch_size: 8\n")):
        os.makedirs(os.path.join(repo, name, "1"))
        onnx.save(accumulator(), os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)

    def watch(s, proc):
        """Samples the admin list while `proc` runs: (max open, ids seen, max steps)."""
        most, ids, steps = 0, set(), 0
        while proc.poll() is None:
            code, text = s.http_get("/v2/admin/sequences")
            if code == 200:
                seqs = json.loads(text)["sequences"]
                most = max(most, len(seqs))
                ids.update(q["sequence_id"] for q in seqs)
                steps = max([steps] + [q["steps"] for q in seqs])
            time.sleep(0.05)
        return most, ids, steps

    def report(csv_file):
        with open(csv_file) as f:
            return list(csv.DictReader(f))[-1]

    try:
        with CuvilProcess(server, repo, ["--load-model", "acc", "--load-model", "plain"]) as s:
            out_csv = os.path.join(tmp, "closed.csv")
            p = subprocess.Popen(
                [perf, "-m", "acc", "-u", s.grpc, "--concurrency-range", "4",
                 "--measurement-interval", "2500", "--sequence-length", "5",
                 "--sequence-length-variation", "0", "--sequence-id-range", "1000:1063",
                 "-f", out_csv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            most, ids, steps = watch(s, p)
            out, err = p.communicate()
            print(out.strip())
            check(p.returncode == 0, f"closed loop: exit {p.returncode} {err.strip()!r}")
            check("sequences of 5 steps (+-0%), ids 1000:1063, one per concurrency slot" in out,
                  "the header states the sequence plan")
            row = report(out_csv) if p.returncode == 0 else {}
            requests = int(row.get("requests", 0))
            completed = int(row.get("sequences_completed") or 0)
            started = int(row.get("sequences_started") or 0)
            check(requests > 50 and int(row.get("errors", 1)) == 0,
                  f"steps measured, none refused: {requests} steps, {row.get('errors')} errors")
            check(abs(completed - requests / 5) <= 4 and abs(started - completed) <= 4,
                  f"sequences of 5 steps: {completed} completed, {started} started for "
                  f"{requests} steps")
            check(1 <= most <= 4 and all(1000 <= i <= 1063 for i in ids) and steps <= 5,
                  f"while running: at most 4 open ({most}), ids in 1000:1063 "
                  f"({sorted(ids)[:8]}...), at most 5 steps ({steps})")
            code, text = s.http_get("/v2/admin/sequences")
            check(code == 200 and json.loads(text)["sequences"] == [],
                  f"no sequence left open after the run: {text[:200]}")

            rate_csv = os.path.join(tmp, "rate.csv")
            p = subprocess.Popen(
                [perf, "-m", "acc", "-u", s.http, "-i", "http", "--request-rate-range", "300",
                 "--measurement-interval", "2000", "--num-of-sequences", "3",
                 "--sequence-length", "10", "--sequence-length-variation", "50",
                 "-f", rate_csv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            most, ids, steps = watch(s, p)
            out, err = p.communicate()
            print(out.strip())
            row = report(rate_csv) if p.returncode == 0 else {}
            check(p.returncode == 0 and int(row.get("errors", 1)) == 0 and
                  int(row.get("requests", 0)) > 100,
                  f"open loop over HTTP: exit {p.returncode}, {row.get('requests')} steps, "
                  f"{row.get('errors')} errors {err.strip()!r}")
            check(1 <= most <= 3 and steps <= 15,
                  f"rate mode: at most 3 open ({most}), at most 15 steps ({steps})")
            active = metric_samples(s.metrics_text(), "cuvil_sequences_active")
            check(active.get('{model="acc",version="1"}') == 0.0,
                  f"none open after the rate run: {active}")

            p = subprocess.run([perf, "-m", "plain", "-u", s.grpc, "--sequence-length", "5"],
                               capture_output=True, text=True)
            check(p.returncode == 1 and "need a model with sequence_batching" in p.stderr,
                  f"sequence flags on a plain model: {p.returncode} {p.stderr.strip()!r}")
            p = subprocess.run([perf, "-m", "acc", "-u", s.grpc, "--concurrency-range", "4",
                                "--sequence-id-range", "1:3"], capture_output=True, text=True)
            check(p.returncode == 1 and "holds 3 ids" in p.stderr,
                  f"an id range too small for 4 slots: {p.returncode} {p.stderr.strip()!r}")
            check(s.alive(), "server alive")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"FAILED: {len(problems)} check(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
