#!/usr/bin/python3
"""Wire-compatibility test from another language: drives the real cuvil-server binary with
Python gRPC stubs generated from the protos and with plain HTTP (urllib), checking outputs
against the model zoo's references.

usage: test_wire_compat.py SERVER_BINARY PY_STUB_DIR EXAMPLE_REPO SHARED_MODELS
"""
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
import unittest
import urllib.error
import urllib.request

import grpc
import numpy as np
import onnx
from onnx import numpy_helper

SERVER, STUBS, REPO, MODELS = sys.argv[1:5]
sys.path.insert(0, STUBS)
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


class WireCompatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        repo = os.path.join(cls.tmp, "repo")
        shutil.copytree(REPO, repo)
        cls.proc = subprocess.Popen(
            [SERVER, "--model-repository", repo, "--grpc-port", "0", "--http-port", "0",
             "--metrics-port", "0", "--exit-timeout-secs", "5"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        cls.grpc_addr = cls.http_addr = None
        while time.time() < deadline:
            line = cls.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"listening grpc=(\S+) http=(\S+) metrics=(\S+)", line)
            if m:
                cls.grpc_addr, cls.http_addr = m.group(1), m.group(2)
            if "server ready" in line:
                break
        assert cls.grpc_addr, "server did not report its ports"
        # Keep draining the log so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in cls.proc.stdout], daemon=True).start()
        cls.channel = grpc.insecure_channel(cls.grpc_addr)
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proc.send_signal(signal.SIGTERM)
        rc = cls.proc.wait(timeout=30)
        shutil.rmtree(cls.tmp)
        assert rc == 0, f"server exited with {rc} after SIGTERM"

    def http(self, method, path, body=None, headers=None):
        req = urllib.request.Request(f"http://{self.http_addr}{path}", data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def reference(self, model, n):
        d = os.path.join(MODELS, model, f"test_data_set_{n}")
        return load_tensor(os.path.join(d, "input_0.pb")), load_tensor(os.path.join(d, "output_0.pb"))

    def test_health_and_metadata(self):
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(self.stub.ServerReady(pb.ServerReadyRequest()).ready)
        meta = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"))
        self.assertEqual(meta.inputs[0].datatype, "FP32")
        self.assertEqual(list(meta.inputs[0].shape), [-1, 784])
        status, body = self.http("GET", "/v2/health/ready")
        self.assertEqual(status, 200)
        status, body = self.http("GET", "/v2/models/lenet")
        self.assertEqual(json.loads(body)["inputs"][0]["shape"], [-1, 1, 28, 28])

    def test_grpc_infer_matches_reference(self):
        for model in ("mlp", "lenet"):
            for n in range(3):
                x, y = self.reference(model, n)
                req = pb.ModelInferRequest(model_name=model, id=f"{model}-{n}")
                inp = req.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
                req.raw_input_contents.append(x.astype(np.float32).tobytes())
                resp = self.stub.ModelInfer(req)
                self.assertEqual(resp.id, f"{model}-{n}")
                got = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(resp.outputs[0].shape)
                np.testing.assert_allclose(got, y, rtol=1e-3, atol=1e-3)
                del inp

    def test_http_infer_matches_reference(self):
        for model in ("mlp", "lenet"):
            x, y = self.reference(model, 1)
            body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                           "data": x.flatten().tolist()}]}).encode()
            status, out = self.http("POST", f"/v2/models/{model}/infer", body,
                                    {"Content-Type": "application/json"})
            self.assertEqual(status, 200, out)
            r = json.loads(out)
            got = np.array(r["outputs"][0]["data"], dtype=np.float32).reshape(r["outputs"][0]["shape"])
            np.testing.assert_allclose(got, y, rtol=1e-3, atol=1e-3)

    def test_errors(self):
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.ModelInfer(pb.ModelInferRequest(model_name="nope"))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        req = pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="input", datatype="FP32", shape=[1, 784])
        req.raw_input_contents.append(b"\0" * 100)
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.ModelInfer(req)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("input", e.exception.details())

    def test_unload_and_load(self):
        self.stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="lenet"))
        self.assertFalse(self.stub.ModelReady(pb.ModelReadyRequest(name="lenet")).ready)
        self.assertTrue(self.stub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready)
        self.stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="lenet"))
        self.assertTrue(self.stub.ModelReady(pb.ModelReadyRequest(name="lenet")).ready)
        index = self.stub.RepositoryIndex(pb.RepositoryIndexRequest())
        self.assertEqual(sorted((m.name, m.state) for m in index.models),
                         [("lenet", "READY"), ("mlp", "READY")])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
