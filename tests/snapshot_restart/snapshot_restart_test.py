#!/usr/bin/python3
"""A restart with --snapshot-dir comes back patched (issue 8 item 6).

usage: snapshot_restart_test.py SERVER_BINARY MODEL_REPOSITORY

Starts cuvil-server on ephemeral ports with --snapshot-dir, loads a small model inline
(y = x + 1), patches its Add kernel with LLVM IR that doubles the result, profiles it for half a
second under load and recompiles it (then rolls that back) over HTTP, restarts the server on the
same folder and checks that the output is still doubled, under the same patch id, without a
compile. Also checks that a damaged snapshot is refused over HTTP (400) and that a damaged file in
the folder does not stop the server from starting.
"""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import onnx
from onnx import TensorProto, helper

WIDTH = 4


def adder_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])
    one = helper.make_tensor("one", TensorProto.FLOAT, [WIDTH], [1.0] * WIDTH)
    node = helper.make_node("Add", ["x", "one"], ["y"], name="add")
    graph = helper.make_graph([node], "adder", [x], [y], initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def doubled_add_ir(symbol):
    """The Add kernel (args = {a, b[WIDTH], out}) with its result doubled."""
    return f"""
define i32 @{symbol}(ptr %args, i64 %batch) {{
entry:
  %a = load ptr, ptr %args
  %bp = getelementptr ptr, ptr %args, i64 1
  %b = load ptr, ptr %bp
  %op = getelementptr ptr, ptr %args, i64 2
  %o = load ptr, ptr %op
  %n = mul i64 %batch, {WIDTH}
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %j = urem i64 %i, {WIDTH}
  %aa = getelementptr float, ptr %a, i64 %i
  %av = load float, ptr %aa
  %ba = getelementptr float, ptr %b, i64 %j
  %bv = load float, ptr %ba
  %s = fadd float %av, %bv
  %d = fmul float %s, 2.0
  %oa = getelementptr float, ptr %o, i64 %i
  store float %d, ptr %oa
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}}
"""


class Server:
    def __init__(self, binary, repo, snapshot_dir, cache_dir):
        self.args = [binary, "--model-repository", repo, "--model-control-mode", "explicit",
                     "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
                     "--exit-timeout-secs", "10", "--snapshot-dir", snapshot_dir,
                     "--jit-cache-dir", cache_dir, "--insecure-admin"]
        self.log = []

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.http = None
        deadline = time.time() + 300
        while time.time() < deadline and not self.http:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening grpc=(\S+) http=(\S+) metrics=(\S+)", line)
            if m:
                self.http = m.group(2)
        if not self.http:
            self.stop()
            fail("server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True).start()
        while time.time() < deadline:
            if self.get("/v2/health/ready")[0] == 200:
                return
            time.sleep(0.2)
        fail("server did not become ready:\n" + "".join(self.log))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                fail("server did not stop on SIGTERM")

    def _call(self, req):
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path):
        return self._call(f"http://{self.http}{path}")

    def post(self, path, body):
        req = urllib.request.Request(f"http://{self.http}{path}", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        return self._call(req)

    def infer(self):
        status, body = self.post("/v2/models/adder/infer", {"inputs": [
            {"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0]}]})
        if status != 200:
            fail(f"infer: {status} {body}")
        return json.loads(body)["outputs"][0]["data"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 3:
        fail(__doc__)
    binary, repo = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="cuvil-snapshot-test-")
    snapshot_dir = os.path.join(work, "snapshots")
    cache_dir = os.path.join(work, "cache")
    server = Server(binary, repo, snapshot_dir, cache_dir)
    try:
        server.start()
        status, body = server.post("/v2/admin/models/load", {
            "name": "adder", "config_pbtxt": 'name: "adder" max_batch_size: 8',
            "onnx_model_base64": base64.b64encode(adder_model()).decode(), "wait": True})
        if status != 200:
            fail(f"load: {status} {body}")
        plain = server.infer()
        if plain != [1.0, 2.0, 3.0, 4.0]:
            fail(f"unpatched output {plain}")
        status, body = server.get("/v2/admin/models/adder/versions/1/functions")
        adds = [f["symbol"] for f in json.loads(body)["functions"] if f["op_type"] == "Add"]
        if status != 200 or len(adds) != 1:
            fail(f"functions: {status} {body}")
        status, body = server.post("/v2/admin/models/adder/versions/1/patch", {
            "ir": doubled_add_ir(adds[0]), "function": adds[0], "force": True,
            "author": "restart-test"})
        if status != 200:
            fail(f"patch: {status} {body}")
        patch_id = json.loads(body)["patch_id"]
        doubled = server.infer()
        if doubled != [2.0, 4.0, 6.0, 8.0]:
            fail(f"patched output {doubled}")
        # A profile window over the patched code (requests keep flowing), then it ends by itself.
        stop = threading.Event()
        infers = threading.Thread(target=lambda: [server.infer() for _ in iter(stop.is_set, True)])
        infers.start()
        status, body = server.post("/v2/admin/models/adder/versions/1/patch", {
            "kind": "profile", "profile_seconds": 0.5, "wait": True, "author": "restart-test"})
        stop.set()
        infers.join()
        if status != 200:
            fail(f"profile: {status} {body}")
        table = json.loads(body)["profile"]
        if len(table) != 1 or table[0]["function"] != adds[0] or table[0]["calls"] < 1 or \
                abs(table[0]["share"] - 1.0) > 1e-9 or table[0]["total_ns"] <= 0:
            fail(f"profile table {table}")
        # A recompile of every kernel leaves kernels an IR patch replaces alone (issue 37): here
        # that is every kernel, so there is nothing to recompile.
        status, body = server.post("/v2/admin/models/adder/versions/1/patch", {
            "kind": "recompile", "options": "opt_level=1", "force": True})
        if status == 200 or "nothing to recompile" not in body or server.infer() != doubled:
            fail(f"a recompile of all kernels should leave the IR patch alone: {status} {body}")
        # A recompile that names the kernel lies over the IR patch: the Add computes x + 1 again
        # until the recompile patch is rolled back (a middle-of-history rollback works too).
        status, body = server.post("/v2/admin/models/adder/versions/1/patch", {
            "kind": "recompile", "options": "opt_level=1", "function": adds[0], "force": True})
        if status != 200:
            fail(f"recompile: {status} {body}")
        recompile_id = json.loads(body)["patch_id"]
        if server.infer() != plain:
            fail("the recompiled (unpatched) Add should compute x + 1 again")
        status, body = server.post("/v2/admin/models/adder/versions/1/rollback",
                                   {"patch_id": recompile_id})
        if status != 200 or server.infer() != doubled:
            fail(f"rollback of the recompile patch: {status} {body}")
        status, body = server.get("/v2/admin/models/adder/versions/1/patches")
        kinds = [(p["kind"], p["active"]) for p in json.loads(body)["patches"]]
        if kinds != [("ir", True), ("profile", False), ("recompile", False)]:
            fail(f"history {kinds}")
        # A damaged artifact is refused and changes nothing.
        status, body = server.post("/v2/admin/models/adder/versions/1/snapshot", {})
        if status != 200:
            fail(f"snapshot: {status} {body}")
        artifact = bytearray(base64.b64decode(json.loads(body)["snapshot"]))
        artifact[len(artifact) // 2] ^= 0x5A
        status, body = server.post("/v2/admin/snapshots/restore",
                                   {"snapshot": base64.b64encode(bytes(artifact)).decode()})
        if status != 400 or "snapshot" not in body:
            fail(f"damaged snapshot: expected 400, got {status} {body}")
        if server.infer() != doubled:
            fail("a refused restore changed the output")
        files = sorted(os.listdir(snapshot_dir))
        if files != ["adder.1.cuvilsnap"]:
            fail(f"snapshot folder holds {files}")
        server.stop()

        # A stray damaged file next to the good one must not stop the restore.
        with open(os.path.join(snapshot_dir, "junk.9.cuvilsnap"), "wb") as f:
            f.write(b"\x0a\x05junk" * 10)
        server = Server(binary, repo, snapshot_dir, cache_dir)
        server.start()
        out = server.infer()
        if out != doubled:
            fail(f"after the restart the output is {out}, expected {doubled} (still patched)")
        status, body = server.get("/v2/admin/models/adder/versions/1/patches")
        patches = json.loads(body)["patches"] if status == 200 else []
        if [(p["patch_id"], p["active"], p["author"]) for p in patches] != [
                (patch_id, True, "restart-test")]:
            fail(f"patches after the restart: {status} {body}")
        log = "".join(server.log)
        if "restored from a snapshot" not in log or "junk.9.cuvilsnap refused" not in log:
            fail("expected restore and refusal log lines:\n" + log)
        if "model 'adder' version 1: JIT cache" in log:
            fail("the restore looked the model up in the JIT cache instead of using its code")
        # Rolling back after the restart works and is snapshotted too.
        status, body = server.post("/v2/admin/models/adder/versions/1/rollback",
                                   {"patch_id": patch_id})
        if status != 200 or server.infer() != plain:
            fail(f"rollback after restart: {status} {body}")
        server.stop()
        print("PASS: restart came back patched (patch", patch_id, ")")
    finally:
        if server.proc.poll() is None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
