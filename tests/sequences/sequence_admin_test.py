#!/usr/bin/python3
"""Issue 42: the admin API's sequence calls against a real cuvil-server with an admin token.

An accumulator (state_out = state_in + x; the server keeps the 16-byte state) checkpointed every
5 steps under --snapshot-dir, and the same graph served without sequence_batching.

  - HTTP GET /v2/admin/sequences (and per model / version) lists each open sequence with its
    id (numeric or string), model, version, steps, last checkpoint step and state bytes; a
    model without sequence_batching is 400, an unknown one 404, no token 401.
  - `cuvil-admin sequences list` (gRPC ListSequences) prints the same as a table and as JSON;
    without the token UNAUTHENTICATED.
  - `cuvil-admin sequences end` and HTTP POST .../sequences/end (gRPC EndSequence) end one: it
    leaves the list, its next step without sequence_start is refused, ending it again is
    NOT_FOUND, cuvil_sequences_active drops, and a restart on the same --snapshot-dir does not
    restore it (its tombstone is in the log) while the others come back at their checkpoint;
    after the model file changes, the log is dropped with the reason (the build identity).
  - Ending a sequence while 16 of its steps race in: every step is either answered 200 or
    refused as ended by an administrator, the refused count matches, and the server serves on.

usage: sequence_admin_test.py CUVIL_SERVER CUVIL_ADMIN
"""
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

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
  oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 1000 }
}
parameters { key: "cuvil_sequence_checkpoint_every" value { string_value: "5" } }
"""
PLAIN_CONFIG = "max_batch_size: 8\n"
TOKEN = "seq-admin-token"


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
    server, admin = sys.argv[1:]
    problems = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            problems.append(what)

    tmp = tempfile.mkdtemp(prefix="cuvil-seq-admin-")
    repo = os.path.join(tmp, "repo")
    for name, config in (("acc", SEQ_CONFIG), ("plain", PLAIN_CONFIG)):
        os.makedirs(os.path.join(repo, name, "1"))
        onnx.save(accumulator(), os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    snap = os.path.join(tmp, "snap")
    args = ["--load-model", "acc", "--load-model", "plain", "--snapshot-dir", snap,
            "--admin-token-file", token_file]

    def request(s, method, path, body=None, token=True):
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = "Bearer " + TOKEN
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{s.http}{path}", data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def step(s, seq, x, start=False, end=False):
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [x] * 4}],
                "parameters": {"sequence_id": seq, "sequence_start": start,
                               "sequence_end": end}}
        code, text = request(s, "POST", "/v2/models/acc/infer", body, token=False)
        y = json.loads(text)["outputs"][0]["data"][0] if code == 200 else None
        return code, y, text

    def cli(s, *argv, token=True):
        cmd = [admin, "-u", s.grpc] + (["--token-file", token_file] if token else [])
        p = subprocess.run(cmd + list(argv), capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout, p.stderr

    def listed(s, path="/v2/admin/sequences"):
        code, text = request(s, "GET", path)
        if code != 200:
            return code, {}
        return code, {q["sequence_id"]: q for q in json.loads(text)["sequences"]}

    try:
        with CuvilProcess(server, repo, args) as s:
            for i in range(3):
                step(s, 7, 1.0, start=(i == 0))
            for i in range(6):
                step(s, "stream-x", 2.0, start=(i == 0))
            step(s, 9, 5.0, start=True)

            code, text = request(s, "GET", "/v2/admin/sequences", token=False)
            check(code == 401, f"GET /v2/admin/sequences without the token: {code}")
            code, seqs = listed(s)
            check(code == 200 and set(seqs) == {7, "stream-x", 9}, f"listed ids: {code} {seqs}")
            want = {7: (3, 1), "stream-x": (6, 6), 9: (1, 1)}
            for sid, (steps, ckpt) in want.items():
                q = seqs.get(sid, {})
                check(q.get("model") == "acc" and q.get("version") == 1 and
                      q.get("steps") == steps and q.get("checkpoint_step") == ckpt and
                      q.get("state_bytes") == 16 and q.get("running") is False,
                      f"sequence {sid!r}: steps {steps}, checkpoint {ckpt}, 16 bytes: {q}")
            for path in ("/v2/admin/models/acc/sequences",
                         "/v2/admin/models/acc/versions/1/sequences"):
                code, per_model = listed(s, path)
                check(code == 200 and per_model.keys() == seqs.keys(), f"GET {path}: {code}")
            code, text = request(s, "GET", "/v2/admin/models/plain/sequences")
            check(code == 400 and "does not use sequence_batching" in text,
                  f"a model without sequence_batching: {code} {text}")
            code, text = request(s, "GET", "/v2/admin/models/nope/sequences")
            check(code == 404, f"an unknown model: {code} {text}")

            rc, out, err = cli(s, "sequences", "list")
            check(rc == 0 and out.startswith("ID") and
                  re.search(r"^7\s+acc\s+1\s+3\s+1\s+16 B\s", out, re.M) and
                  re.search(r'^"stream-x"\s+acc\s+1\s+6\s+6\s+16 B\s', out, re.M),
                  f"cuvil-admin sequences list: {rc} {out!r} {err!r}")
            rc, out, err = cli(s, "--json", "sequences", "list", "acc", "-v", "1")
            rows = json.loads(out)["sequences"] if rc == 0 else []
            check(len(rows) == 3 and rows[0]["sequence_id"] == "7" and
                  rows[2]["string_sequence_id"] == "stream-x",
                  f"sequences list --json (numeric ids first): {rows}")
            rc, out, err = cli(s, "sequences", "list", token=False)
            check(rc == 1 and "UNAUTHENTICATED" in err, f"list without the token: {err!r}")

            rc, out, err = cli(s, "sequences", "end", "acc", "7")
            check(rc == 0 and "sequence 7 of acc ended after 3 step(s)" in out,
                  f"cuvil-admin sequences end acc 7: {rc} {out!r} {err!r}")
            code, y, text = step(s, 7, 1.0)
            check(code == 400 and "is not open" in text, f"step of an ended sequence: {code}")
            rc, out, err = cli(s, "sequences", "end", "acc", "7")
            check(rc == 1 and "NOT_FOUND" in err, f"ending it again: {rc} {err!r}")
            code, text = request(s, "POST", "/v2/admin/models/acc/sequences/end",
                                 {"sequence_id": "stream-x"})
            check(code == 200 and json.loads(text)["steps"] == 6,
                  f"HTTP end of a string id: {code} {text}")
            code, text = request(s, "POST", "/v2/admin/models/acc/sequences/end",
                                 {"sequence_id": "stream-x"}, token=False)
            check(code == 401, f"HTTP end without the token: {code}")
            code, seqs = listed(s)
            check(set(seqs) == {9}, f"left open: {set(seqs)}")
            active = metric_samples(s.metrics_text(), "cuvil_sequences_active")
            check(active.get('{model="acc",version="1"}') == 1.0,
                  f"cuvil_sequences_active after two ends: {active}")
            code, y, _ = step(s, 7, 4.0, start=True)
            check(code == 200 and y == 4.0, f"an ended id starts again from zero: {y}")

            # Ending while steps of the sequence race in.
            step(s, 11, 0.0, start=True)
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                futures = [pool.submit(step, s, 11, 1.0) for _ in range(16)]
                time.sleep(0.005)  # Steps queue behind each other (1 ms batching delay each).
                code, text = request(s, "POST", "/v2/admin/models/acc/sequences/end",
                                     {"sequence_id": 11})
                results = [f.result() for f in futures]
            ok = sum(1 for c, _, _ in results if c == 200)
            by_admin = sum(1 for c, _, t in results if c != 200 and "ended by an administrator" in t)
            not_open = sum(1 for c, _, t in results if c == 400 and "is not open" in t)
            ended = json.loads(text) if code == 200 else {}
            check(code == 200 and ok + by_admin + not_open == 16 and
                  ended.get("refused_steps", -1) in (by_admin, by_admin - 1) and
                  ended.get("steps", 0) <= ok + 1,
                  f"end during 16 racing steps: {ok} answered, {by_admin} refused by the admin "
                  f"call, {not_open} after it: {code} {text}")
            code, seqs = listed(s)
            check(set(seqs) == {7, 9}, f"open after the race: {set(seqs)}")

        # A restart restores the open sequences, not the ended ones.
        with CuvilProcess(server, repo, args) as s:
            code, seqs = listed(s)
            check(code == 200 and set(seqs) == {7, 9} and seqs[9]["steps"] == 1 and
                  seqs[9]["checkpoint_step"] == 1, f"restored after a restart: {seqs}")
            code, y, text = step(s, "stream-x", 1.0)
            check(code == 400 and "is not open" in text,
                  f"an ended sequence is not restored: {code} {text}")
            code, y, _ = step(s, 9, 1.0)
            check(code == 200 and y == 6.0, f"an open one continues its sum: {y}")
            check(s.alive(), "server alive")

        # Checkpoints carry the model's build identity: another model file (same states) drops
        # the log with a reason.
        other = accumulator()
        other.graph.name = "accumulator, rebuilt"
        onnx.save(other, os.path.join(repo, "acc", "1", "model.onnx"))
        with CuvilProcess(server, repo, args) as s:
            code, seqs = listed(s)
            log = "".join(s.log)
            check(code == 200 and seqs == {} and
                  "written for another model file (ONNX digest xxh3:" in log and
                  "every sequence in it dropped" in log,
                  f"a log of another model file is dropped with its reason: {seqs} "
                  f"{[ln for ln in s.log if 'checkpoints' in ln]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"FAILED: {len(problems)} check(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
