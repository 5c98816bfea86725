#!/usr/bin/env python3
"""The ONNX node cases of the windowed ops with their spatial dims made free.

Copies every node case of Conv, ConvTranspose, MaxPool, AveragePool, GlobalMaxPool and
GlobalAveragePool (not ConvInteger) into a temporary folder with each input's and output's dims
after N and C replaced by dim_params, so Cuvil compiles them over symbolic spatial dims (output
extents as floor/ceil expressions, SAME pads at run time), then runs `cuvilc test` on them against
the suite's own reference outputs. expected-failures.txt beside this script lists the cases that
may fail, with reasons; a new failure fails the test, and so does a listed case that now passes.

usage: run_symbolic_windows.py CUVILC NODE_DATA_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import onnx

CASE = re.compile(r"^test_(conv|convtranspose|maxpool|averagepool|globalmaxpool|globalaveragepool|"
                  r"basic_conv)(_|$)")


def free_spatial_dims(model_path, out_path):
    model = onnx.load(model_path)
    graph = model.graph
    for value in list(graph.input[:1]) + list(graph.output):
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            if i >= 2:
                dim.ClearField("dim_value")
                dim.dim_param = f"{value.name}_{i}"
    onnx.save(model, out_path)


def main():
    cuvilc, node_dir = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    expected = {}
    with open(os.path.join(here, "expected-failures.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.strip().partition(" ")
                expected[name] = reason
    names = sorted(n for n in os.listdir(node_dir) if CASE.match(n))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            shutil.copytree(os.path.join(node_dir, name), os.path.join(tmp, name))
            free_spatial_dims(os.path.join(node_dir, name, "model.onnx"),
                              os.path.join(tmp, name, "model.onnx"))
        run = subprocess.run([cuvilc, "test"] + [os.path.join(tmp, n) for n in names],
                             capture_output=True, text=True)
    results = {}
    for line in (run.stdout + run.stderr).splitlines():
        m = re.match(r"^(PASS|FAIL) ([^:\s]+)", line)
        if m:
            results[m.group(2)] = line
    passed = sum(1 for line in results.values() if line.startswith("PASS"))
    print(f"symbolic windows: {passed} passed, {len(names) - passed} failed of {len(names)} cases")
    status = 0
    for name in names:
        line = results.get(name, f"FAIL {name}: no result (the process crashed)")
        if line.startswith("FAIL") and name not in expected:
            print("unexpected failure:", line)
            status = 1
        elif line.startswith("PASS") and name in expected:
            print(f"{name} now passes: remove it from expected-failures.txt")
            status = 1
    for name in expected:
        if name not in names:
            print(f"{name} is listed but is no case here")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
