#!/usr/bin/env python3
"""Issue 8 item 2: N load/unload cycles of one model leave resident memory within 5% of where it
started. Starts cuvil-server on a repository holding only MODEL_DIR's model.onnx (config completed
by the server, JIT cache in a fresh folder so every load after the first is a cache hit, as a
production reload would be), loads and unloads it N times over HTTP and prints the server's VmRSS
after the first load+unload ("start") and after the last cycle ("end").

usage: load_unload_rss.py SERVER_BIN MODEL_DIR [--cycles N] [--limit-pct P] [--infer]

MODEL_DIR is a ../shared/models/<name> folder (model.onnx, test_data_set_0). --infer sends one
request per cycle while the model is loaded. Exit status 1 if the growth exceeds --limit-pct.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "zero_downtime"))
from cuvil_proc import CuvilProcess  # noqa: E402


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("model_dir")
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--limit-pct", type=float, default=5.0)
    ap.add_argument("--infer", action="store_true")
    args = ap.parse_args()
    name = os.path.basename(os.path.normpath(args.model_dir))
    work = tempfile.mkdtemp(prefix="cuvil-rss-")
    try:
        repo = os.path.join(work, "repo")
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(os.path.join(args.model_dir, "model.onnx"),
                    os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(f'name: "{name}"\nmax_batch_size: 8\n')
        extra = ["--jit-cache-dir", os.path.join(work, "cache")]
        with CuvilProcess(args.server, repo, extra) as s:
            body = None

            def cycle():
                nonlocal body
                code, text = s.http_post(f"/v2/repository/models/{name}/load")
                if code != 200:
                    raise SystemExit(f"load failed: {code} {text}")
                if args.infer:
                    if body is None:
                        meta = json.loads(s.http_get(f"/v2/models/{name}")[1])
                        inp = meta["inputs"][0]
                        shape = [1 if d < 0 else d for d in inp["shape"]]
                        count = 1
                        for d in shape:
                            count *= d
                        body = {"inputs": [{"name": inp["name"], "shape": shape,
                                            "datatype": inp["datatype"], "data": [0.5] * count}]}
                    code, text = s.http_post(f"/v2/models/{name}/infer", body)
                    if code != 200:
                        raise SystemExit(f"infer failed: {code} {text[:200]}")
                code, text = s.http_post(f"/v2/repository/models/{name}/unload")
                if code != 200:
                    raise SystemExit(f"unload failed: {code} {text}")

            cycle()  # The first load compiles and fills the cache; the baseline is after it.
            time.sleep(0.5)
            start = vm_rss_kib(s.proc.pid)
            t0 = time.time()
            for _ in range(args.cycles - 1):
                cycle()
            time.sleep(0.5)
            end = vm_rss_kib(s.proc.pid)
            growth = 100.0 * (end - start) / start
            print(f"load_unload_rss model={name} cycles={args.cycles} "
                  f"start_vmrss_mb={start / 1024:.1f} end_vmrss_mb={end / 1024:.1f} "
                  f"growth_pct={growth:+.2f} seconds={time.time() - t0:.1f}")
            return 0 if growth <= args.limit_pct else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
