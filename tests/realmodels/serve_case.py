#!/usr/bin/env python3
"""Serves one realmodels case with a real cuvil-server and checks every data set over HTTP.

The case's model.onnx goes into a temporary repository as `NAME/1/model.onnx` with no config (or
with CONFIG_TEXT as config.pbtxt), the server completes the config from the model, and each data
set's inputs are sent with the binary tensor extension; the outputs must match the ONNX Runtime
references (rtol/atol, optionally as row multisets). Prints the config the server chose and the
largest error per output. A model the server serves like this serves the same way under KServe.

usage: serve_case.py CUVIL_SERVER CASE_DIR [--rtol R] [--atol A] [--unordered-rows]
                     [--config TEXT]
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import listening_addresses, port_of, server_output  # noqa: E402

KSERVE = {np.float32: "FP32", np.float64: "FP64", np.int64: "INT64", np.int32: "INT32",
          np.uint8: "UINT8", np.bool_: "BOOL", np.int8: "INT8", np.float16: "FP16"}
NUMPY = {v: k for k, v in KSERVE.items()}


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def request(url, body=None, headers=None, timeout=600):
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def infer(base, model, inputs):
    header = {"inputs": [], "outputs": []}
    blobs = []
    for name, a in inputs:
        a = np.ascontiguousarray(a)
        header["inputs"].append({"name": name, "datatype": KSERVE[a.dtype.type],
                                 "shape": list(a.shape),
                                 "parameters": {"binary_data_size": a.nbytes}})
        blobs.append(a.tobytes())
    head = json.dumps(header).encode()
    status, headers, body = request(
        f"{base}/v2/models/{model}/infer", head + b"".join(blobs),
        {"Content-Type": "application/octet-stream",
         "Inference-Header-Content-Length": str(len(head))})
    if status != 200:
        return status, body.decode(errors="replace"), None
    json_len = int(headers.get("Inference-Header-Content-Length", len(body)))
    meta = json.loads(body[:json_len])
    offset, outputs = json_len, {}
    for out in meta["outputs"]:
        dtype = NUMPY[out["datatype"]]
        if "data" in out:
            outputs[out["name"]] = np.array(out["data"], dtype=dtype).reshape(out["shape"])
            continue
        n = out["parameters"]["binary_data_size"]
        outputs[out["name"]] = np.frombuffer(body[offset:offset + n], dtype=dtype).reshape(
            out["shape"])
        offset += n
    return status, meta, outputs


def compare(got, want, rtol, atol, unordered):
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}", None
    g, w = got.astype(np.float64), want.astype(np.float64)
    if unordered and g.ndim >= 1 and g.shape[0] > 1:
        g = g.reshape(g.shape[0], -1)
        w = w.reshape(w.shape[0], -1)
        g = g[np.lexsort(g.T[::-1])]
        w = w[np.lexsort(w.T[::-1])]
    err = np.abs(g - w)
    worst = float(err.max()) if err.size else 0.0
    bad = err > atol + rtol * np.abs(w)
    if bad.any():
        i = int(np.argmax(bad.reshape(-1)))
        return f"element {i}: {g.reshape(-1)[i]} vs {w.reshape(-1)[i]}", worst
    return None, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("case")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--unordered-rows", action="store_true")
    ap.add_argument("--config", default=None)
    args = ap.parse_args()
    name = os.path.basename(os.path.normpath(args.case)).replace(".", "_")
    model = onnx.load(os.path.join(args.case, "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    input_names = [i.name for i in model.graph.input if i.name not in inits]
    output_names = [o.name for o in model.graph.output]
    tmp = tempfile.mkdtemp(prefix="cuvil_serve_case_")
    failures = []
    proc = None
    try:
        os.makedirs(os.path.join(tmp, name, "1"))
        shutil.copy(os.path.join(args.case, "model.onnx"), os.path.join(tmp, name, "1"))
        if args.config:
            with open(os.path.join(tmp, name, "config.pbtxt"), "w") as f:
                f.write(args.config)
        # Port 0 (any free one), read back from the server's output: a port picked in advance
        # could be taken by another process before the server binds it.
        proc = subprocess.Popen([args.server, "--model-repository", tmp, "--http-port", "0",
                                 "--grpc-port", "0", "--metrics-port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = []
        t0 = time.time()
        base = f"http://127.0.0.1:{port_of(listening_addresses(proc, 600, log)[1])}"
        while time.time() - t0 < 600:
            if proc.poll() is not None:
                print(server_output(proc, log))
                print(f"FAIL: the server exited ({proc.returncode}) before it was ready")
                return 1
            try:
                if request(f"{base}/v2/models/{name}/ready", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            print("FAIL: not ready after 600 s")
            return 1
        print(f"ready after {time.time() - t0:.1f} s")
        status, _, body = request(f"{base}/v2/models/{name}/config")
        config = json.loads(body)
        print(f"config: max_batch_size {config.get('max_batch_size', 0)}, inputs "
              + ", ".join(f"{i['name']} {i.get('dims')}" for i in config.get("input", [])))
        for ds in sorted(glob.glob(os.path.join(args.case, "test_data_set_*"))):
            inputs = []
            for i, iname in enumerate(input_names):
                _, a = load_pb(os.path.join(ds, f"input_{i}.pb"))
                inputs.append((iname, a))
            t = time.time()
            status, meta, outputs = infer(base, name, inputs)
            ms = (time.time() - t) * 1000
            if status != 200:
                failures.append(f"{os.path.basename(ds)}: HTTP {status}: {meta}")
                print(f"FAIL {os.path.basename(ds)}: HTTP {status}: {meta}")
                continue
            for o, oname in enumerate(output_names):
                _, want = load_pb(os.path.join(ds, f"output_{o}.pb"))
                why, worst = compare(outputs[oname], want, args.rtol, args.atol,
                                     args.unordered_rows)
                line = (f"{os.path.basename(ds)} {oname} {list(want.shape)}: max abs error "
                        f"{worst}" + (f" FAIL {why}" if why else ""))
                print(line)
                if why:
                    failures.append(line)
            print(f"{os.path.basename(ds)}: {ms:.0f} ms over HTTP")
        health = request(f"{base}/v2/health/ready")[0]
        print(f"health after: {health}")
        if health != 200:
            failures.append("health")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                rc = proc.wait(timeout=60)
                print(f"server exit status on SIGTERM: {rc}")
                if rc != 0:
                    failures.append(f"exit {rc}")
            except subprocess.TimeoutExpired:
                proc.kill()
                failures.append("no exit within 60 s of SIGTERM")
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
