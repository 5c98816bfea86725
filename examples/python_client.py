#!/usr/bin/python3
"""Minimal KServe v2 gRPC client for cuvil-server (stubs: build/proto/python).

usage: examples/python_client.py [HOST:PORT]
"""
import os
import sys

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "build", "proto", "python"))
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8001"))
x = np.random.default_rng(0).standard_normal((2, 784), dtype=np.float32)
request = pb.ModelInferRequest(model_name="mlp", id="example")
request.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
request.raw_input_contents.append(x.tobytes())
response = stub.ModelInfer(request)
y = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(response.outputs[0].shape)
print(response.model_name, response.model_version, y.shape, y.argmax(axis=1))
