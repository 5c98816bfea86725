#!/usr/bin/python3
"""Runs cuvil-server exactly as a manifest's container would run it (deploy/kserve's
ClusterServingRuntime, deploy/k8s's Deployment): its args, with KServe's substitutions
({{.Name}} -> the InferenceService's name), the model repository replaced by a temporary folder
holding one model.onnx (the storage initializer's layout), the admin token from the mounted Secret
by a temporary file, and port 0 instead of the pod's ports (any free one: the test reads the ports
from the server's "listening" line, as a port picked in advance could be taken by another test
before the server binds it; the bind address as given: 0.0.0.0, which the server refuses without
an admin token).
Checks what KServe relies on: /v2/health/ready turns 200, the model answers under the
InferenceService's name over the v2 protocol, admin calls without the token are refused, metrics
are served, and SIGTERM ends the process cleanly. A manifest with an init container (the
Deployment's JIT cache fill) has it run first, with --jit-cache-dir mapped to a temporary folder
as the volume; it must exit 0 and the server must then load from that cache (hits, no miss).

usage: runtime_args_test.py CUVIL_SERVER MANIFEST_YAML MODEL_ONNX INPUT_PB OUTPUT_PB
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import listening_addresses, metric_samples, port_of, server_output  # noqa: E402


def container_args(path, after=None):
    """The first container's args list (plain '- value' lines under 'args:'); with `after`, the
    first args block after a line that is `after:` (e.g. initContainers), [] when none."""
    args, indent, seen = [], None, after is None
    for line in open(path):
        if not seen:
            seen = re.match(r"^\s*" + after + r":\s*$", line) is not None
            continue
        if indent is None:
            m = re.match(r"^(\s*)args:\s*$", line)
            if m:
                indent = len(m.group(1))
            continue
        if re.match(r"^\s*#", line):
            continue
        m = re.match(r"^(\s*)- (.*)$", line)
        if m and len(m.group(1)) >= indent:
            args.append(m.group(2).strip().strip('"'))
            continue
        break
    if not args and after is None:
        sys.exit(f"no container args in {path}")
    return args


def request(url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""


def main():
    server, runtime, model, input_pb, output_pb = sys.argv[1:6]
    name = "resnet18-test"  # what KServe puts for {{.Name}}: DNS-1123, with a dash
    with tempfile.TemporaryDirectory() as tmp:
        models = os.path.join(tmp, "mnt", "models")
        os.makedirs(models)
        with open(model, "rb") as src, open(os.path.join(models, "model.onnx"), "wb") as dst:
            dst.write(src.read())
        token_file = os.path.join(tmp, "admin-token")
        with open(token_file, "w") as f:
            f.write("s3cret-token-for-the-test")
        served = "model"  # the server's default name for a lone model.onnx
        cache = os.path.join(tmp, "cache")  # the pod's shared JIT cache volume

        def local(manifest_args):
            nonlocal served
            out = []
            for a in manifest_args:
                a = a.replace("{{.Name}}", name)
                flag, _, value = a.partition("=")
                if flag == "--model-repository":
                    a = f"{flag}={models}"
                if flag == "--admin-token-file":
                    a = f"{flag}={token_file}"
                if flag == "--jit-cache-dir":
                    a = f"{flag}={cache}/{os.path.basename(value)}"
                if flag == "--model-name":
                    served = value
                if flag in ("--http-port", "--grpc-port", "--metrics-port"):
                    a = f"{flag}=0"
                out.append(a)
            return out

        # An init container (the Deployment's cache fill) runs first, to completion, as the
        # kubelet runs it; the server must then load every model from what it stored.
        init = local(container_args(runtime, after="initContainers"))
        if init:
            os.makedirs(cache)
            print("init args:", " ".join(init))
            done = subprocess.run([server] + init, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=300)
            if done.returncode != 0:
                print(done.stdout)
                sys.exit(f"FAIL: the init container exited {done.returncode}")
        args = local(container_args(runtime))
        print("args:", " ".join(args))
        proc = subprocess.Popen([server] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        log = []
        try:
            deadline = time.time() + 120
            _, http_address, metrics_address = listening_addresses(proc, 120, log)
            http = f"http://127.0.0.1:{port_of(http_address)}"
            while request(http + "/v2/health/ready")[0] != 200:
                if proc.poll() is not None or time.time() > deadline:
                    print(server_output(proc, log) if proc.poll() is not None else "")
                    sys.exit("FAIL: never ready")
                time.sleep(0.2)
            x = numpy_helper.to_array(onnx.load_tensor(input_pb))
            want = numpy_helper.to_array(onnx.load_tensor(output_pb))
            body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                           "shape": list(x.shape),
                                           "data": x.ravel().tolist()}]}).encode()
            status, out = request(f"{http}/v2/models/{served}/infer", body,
                                  {"Content-Type": "application/json"})
            if status != 200:
                sys.exit(f"FAIL: infer gave {status}: {out[:300]!r}")
            got = np.array(json.loads(out)["outputs"][0]["data"], np.float32).reshape(want.shape)
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                sys.exit(f"FAIL: wrong answer, max error {np.abs(got - want).max()}")
            status, _ = request(f"{http}/v2/models/{served}/ready")
            if status != 200:
                sys.exit(f"FAIL: model ready gave {status}")
            status, out = request(f"{http}/v2/repository/models/{served}/unload", b"{}",
                                  {"Content-Type": "application/json"})
            if status != 401:
                sys.exit(f"FAIL: unload without the token gave {status}, not 401")
            status, out = request(f"http://127.0.0.1:{port_of(metrics_address)}/metrics")
            if status != 200 or b"cuvil_" not in out:
                sys.exit(f"FAIL: metrics gave {status}")
            if init:
                text = out.decode()
                hits = sum(metric_samples(text, "cuvil_jit_cache_hits_total").values())
                misses = sum(metric_samples(text, "cuvil_jit_cache_misses_total").values())
                if hits < 1 or misses != 0:
                    sys.exit(f"FAIL: after the init container's fill the server had {hits:g} "
                             f"cache hits and {misses:g} misses (it must compile nothing)")
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
            if rc != 0:
                sys.exit(f"FAIL: exit status {rc} after SIGTERM")
        finally:
            if proc.poll() is None:
                proc.kill()
    print(f"PASS: served model {served!r} from a lone model.onnx with the manifest's args"
          + (", warm from its init container's cache fill" if init else ""))


if __name__ == "__main__":
    main()
