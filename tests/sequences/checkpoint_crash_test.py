#!/usr/bin/env python3
"""Issue 42: sequence checkpoints survive a crash of a real cuvil-server process.

An accumulator model (state_out = state_in + x, y = state_out; the server keeps the state)
served twice from one repository: `acc5` checkpoints every 5 steps, `acc1` every step. Streams
step with numbered steps (sequence_step) and expected running sums kept by the client.

  1. 12 streams per model take 7 steps; the server is killed with SIGKILL.
  2. Restarted on the same --snapshot-dir: an acc1 stream's step 8 is accepted and its sum is
     the uninterrupted one (nothing lost). An acc5 stream (checkpoints at its START step and
     every 5 steps after) has its step 8 refused ("is at step 6") without it being applied; the
     client resends steps 7 and 8 and the sums equal the uninterrupted run's.
  3. Garbage appended to acc5's log and 10 more kills at random moments while streams step:
     after each restart every stream resumes from a checkpoint no later than what it was told,
     and its sums stay those of an uninterrupted run.
  4. SIGTERM: the steps since the last checkpoint are written at exit (teardown); after the
     restart acc5 streams continue at their last step.
  5. A stream that ended is not restored.

usage: checkpoint_crash_test.py CUVIL_SERVER
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import listening_addresses, port_of  # noqa: E402

CONFIG = """
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: 600000000
  control_input [ {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }} ]
  state [ {{ input_name: "state_in" output_name: "state_out" data_type: TYPE_FP32 dims: [ 4 ] }} ]
  oldest {{ max_candidate_sequences: 16 max_queue_delay_microseconds: 1000 }}
}}
parameters {{ key: "cuvil_sequence_checkpoint_every" value {{ string_value: "{every}" }} }}
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


class Server:
    def __init__(self, binary, repo, snap):
        self.binary, self.repo, self.snap = binary, repo, snap
        self.proc = None
        self.log_path = os.path.join(os.path.dirname(snap), "server.log")
        self.log = open(self.log_path, "a")

    def start(self):
        # Port 0 (any free one), read back from this start's output: a port picked in advance
        # could be taken by another process before the server binds it. Each start may get other
        # ports.
        offset = os.path.getsize(self.log_path)
        self.proc = subprocess.Popen(
            [self.binary, "--model-repository", self.repo, "--snapshot-dir", self.snap,
             "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"], stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        _, http, metrics = listening_addresses(self.proc, 120, log_file=self.log_path,
                                               offset=offset)
        self.port, self.metrics_port = port_of(http), port_of(metrics)
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited with {self.proc.returncode} while starting")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/health/ready",
                                            timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("server not ready after 120 s")

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=60)
        if sig == signal.SIGTERM and rc != 0:
            raise SystemExit(f"exit status {rc} on SIGTERM")

    def step(self, model, seq, number, x, start=False, end=False):
        params = {"sequence_id": seq, "sequence_start": start, "sequence_end": end,
                  "sequence_step": number}
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                       "data": [x] * 4}], "parameters": params}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v2/models/{model}/infer",
                                     body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                doc = json.loads(r.read())
                y = [o for o in doc["outputs"] if o["name"] == "y"][0]["data"][0]
                return 200, y, doc.get("parameters", {}).get("sequence_step")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()).get("error", ""), None


class Stream:
    """A client stream: its x values so far and the server's step count it was last told."""

    def __init__(self, model, seq, rng):
        self.model, self.seq, self.rng = model, seq, rng
        self.xs = []

    def expected(self, n):
        return float(sum(self.xs[:n]))

    def advance(self, server, failures):
        """Sends the next step; on a 'step N' refusal resends from the server's step N+1."""
        n = len(self.xs) + 1
        x = float(self.rng.randint(-50, 50))
        code, y, step = server.step(self.model, self.seq, n, x, start=(n == 1))
        if code != 200:
            if "is at step" not in str(y):
                failures.append(f"{self.model}/{self.seq} step {n}: HTTP {code}: {y}")
                return
            at = int(str(y).split("is at step ")[1].split(":")[0])
            if at > len(self.xs):
                failures.append(f"{self.model}/{self.seq}: server claims step {at} > {len(self.xs)}")
                return
            for k in range(at + 1, n):  # Resend the steps after the checkpoint.
                code, y, step = server.step(self.model, self.seq, k, self.xs[k - 1])
                if code != 200 or y != self.expected(k) or step != k:
                    failures.append(f"{self.model}/{self.seq} resend {k}: {code} {y} {step}")
                    return
            code, y, step = server.step(self.model, self.seq, n, x, start=(n == 1))
        self.xs.append(x)
        if code != 200 or y != self.expected(n) or step != n:
            failures.append(f"{self.model}/{self.seq} step {n}: {code} y={y} "
                            f"(want {self.expected(n)}) step={step}")


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="cuvil_seq_ckpt_")
    failures = []
    try:
        repo = os.path.join(tmp, "repo")
        snap = os.path.join(tmp, "snap")
        for name, every in (("acc5", 5), ("acc1", 1)):
            os.makedirs(os.path.join(repo, name, "1"))
            onnx.save(accumulator(), os.path.join(repo, name, "1", "model.onnx"))
            with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
                f.write(CONFIG.format(every=every))
        server = Server(binary, repo, snap)
        server.start()
        rng = random.Random(7)
        streams = [Stream(m, 100 + i, rng) for m in ("acc5", "acc1") for i in range(12)]
        for _ in range(7):
            for s in streams:
                s.advance(server, failures)
        server.kill()
        server.start()
        for model in ("acc5", "acc1"):
            labels = f'{{model="{model}",version="1"}}'
            restored = server.metric("cuvil_sequences_restored_total" + labels)
            active = server.metric("cuvil_sequences_active" + labels)
            # Each build of the version restores them: with --snapshot-dir the server loads
            # the version from the repository and then from its snapshot.
            if not restored or restored % 12 != 0 or active != 12:
                failures.append(f"{model}: metrics say {restored} restored, {active} active "
                                "(want a multiple of 12, and 12)")
        # acc1: nothing lost; acc5: refused at 8, resumes at 6 (checked inside advance).
        refusals = 0
        for s in streams:
            code, y, _ = server.step(s.model, s.seq, 8, 1.0)
            if s.model == "acc1":
                if code != 200 or y != s.expected(7) + 1.0:
                    failures.append(f"acc1/{s.seq} after kill: {code} {y} (want {s.expected(7) + 1})")
                s.xs.append(1.0)
            else:
                # Checkpoints at the START step and every 5 steps after: 1, 6.
                refusals += code != 200 and "is at step 6" in str(y)
                s.advance(server, failures)
        if refusals != 12:
            failures.append(f"{refusals} of 12 acc5 streams were refused at step 8 as at step 6")
        print(f"after SIGKILL: acc1 resumed exactly, acc5 refused {refusals}/12 then resent")
        # Damage: garbage at the log's end and in the middle of a copy.
        log = os.path.join(snap, "sequences", "acc5.v1.seqlog")
        with open(log, "ab") as f:
            f.write(b"SEQ1" + os.urandom(300))
        # Kills at random moments while streams step.
        for kill in range(10):
            for _ in range(rng.randint(1, 6)):
                for s in streams:
                    s.advance(server, failures)
            server.kill()
            server.start()
        print(f"10 more kills: {sum(len(s.xs) for s in streams)} steps in all")
        # SIGTERM: teardown records the steps since the last checkpoint.
        for s in streams:
            s.advance(server, failures)
        told = {(s.model, s.seq): len(s.xs) for s in streams}
        server.kill(signal.SIGTERM)
        server.start()
        for s in streams:
            n = len(s.xs) + 1
            code, y, step = server.step(s.model, s.seq, n, 2.0)
            if code != 200 or step != n or y != s.expected(n - 1) + 2.0:
                failures.append(f"{s.model}/{s.seq} after SIGTERM: {code} {y} step {step} "
                                f"(want step {n}, told {told[(s.model, s.seq)]})")
            s.xs.append(2.0)
        # End one stream of each model: it is not restored.
        for s in (streams[0], streams[12]):
            code, y, _ = server.step(s.model, s.seq, len(s.xs) + 1, 0.0, end=True)
            if code != 200:
                failures.append(f"end {s.model}/{s.seq}: {code} {y}")
        server.kill()
        server.start()
        for s in (streams[0], streams[12]):
            code, y, _ = server.step(s.model, s.seq, len(s.xs) + 2, 0.0)
            if code == 200 or "is not open" not in str(y):
                failures.append(f"ended {s.model}/{s.seq} came back: {code} {y}")
        with open(os.path.join(tmp, "server.log")) as f:
            text = f.read()
        if "damaged bytes" not in text:
            failures.append("no warning about the damaged log bytes")
        server.kill(signal.SIGTERM)
    finally:
        if os.environ.get("KEEP_TMP"): print("kept", tmp)
        else: shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print("PASS" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
