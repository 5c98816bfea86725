#!/usr/bin/python3
"""End-to-end latency of an IR hot patch against a real cuvil-server (not run in CI).

usage: bench/patch_latency.py [SERVER_BINARY] [SHARED_MODELS] [TRIES]

For each model (mlp, mobilenet_v2, resnet18 from ../shared/models) the script loads it into a
fresh repository, then TRIES times: patches its first kernel with IR that returns at once
(`force: true`: the sandbox program rebuilds the version, compiles and runs the patch once, then
validation runs three input sets and the patch commits although its outputs differ), and rolls
it back. Prints the median and the worst of each, in ms, with the host's CPU.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "snapshot_restart"))
from snapshot_restart_test import Server  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "bin", "cuvil-server")
shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "..", "shared", "models")
tries = int(sys.argv[3]) if len(sys.argv) > 3 else 10

cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                     capture_output=True, text=True).stdout.strip()
print(f"host: {cpu}, {os.cpu_count()} CPUs")
work = tempfile.mkdtemp(prefix="cuvil-patch-latency-")
try:
    repo = os.path.join(work, "repo")
    for name in ("mlp", "mobilenet_v2", "resnet18"):
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(os.path.join(shared, name, "model.onnx"), os.path.join(repo, name, "1"))
    server = Server(binary, repo, os.path.join(work, "snap"), os.path.join(work, "cache"))
    # No --snapshot-dir: a snapshot written after each change would be timed too.
    i = server.args.index("--snapshot-dir")
    del server.args[i:i + 2]
    server.start()
    try:
        for name in ("mlp", "mobilenet_v2", "resnet18"):
            status, body = server.post(f"/v2/repository/models/{name}/load", {})
            assert status == 200, body
            status, body = server.get(f"/v2/admin/models/{name}/versions/1/functions")
            symbol = json.loads(body)["functions"][0]["symbol"]
            ir = f"define i32 @{symbol}(ptr %args, i64 %batch) {{\nentry:\n  ret i32 0\n}}\n"
            patch_ms, rollback_ms = [], []
            for _ in range(tries):
                t0 = time.perf_counter()
                status, body = server.post(f"/v2/admin/models/{name}/versions/1/patch",
                                           {"ir": ir, "force": True})
                patch_ms.append((time.perf_counter() - t0) * 1000)
                assert status == 200, body
                pid = json.loads(body)["patch_id"]
                t0 = time.perf_counter()
                status, body = server.post(f"/v2/admin/models/{name}/versions/1/rollback",
                                           {"patch_id": pid})
                rollback_ms.append((time.perf_counter() - t0) * 1000)
                assert status == 200, body
            print(f"{name:14s} patch median {statistics.median(patch_ms):7.1f} ms "
                  f"max {max(patch_ms):7.1f}   rollback median "
                  f"{statistics.median(rollback_ms):6.1f} ms max {max(rollback_ms):6.1f}")
    finally:
        server.stop()
finally:
    shutil.rmtree(work, ignore_errors=True)
