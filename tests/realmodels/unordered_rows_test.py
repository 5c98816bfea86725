#!/usr/bin/env python3
"""`cuvilc test --unordered-rows`: outputs compare as multisets of their dim-0 rows.

Builds a case folder (an Identity model over [4, 2]) whose reference output is the input with
two rows swapped: it must fail without the flag and pass with it, and a reference with one value
changed must fail either way. usage: unordered_rows_test.py CUVILC
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_case(folder, x, expected):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for name, array in (("input_0.pb", x), ("output_0.pb", expected)):
        with open(os.path.join(folder, "test_data_set_0", name), "wb") as f:
            f.write(numpy_helper.from_array(array).SerializeToString())


def run(cuvilc, folder, *flags):
    p = subprocess.run([cuvilc, "test", folder, *flags], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    cuvilc = sys.argv[1]
    x = np.array([[0.5, 1.0], [0.25, 3.0], [2.0, -1.0], [0.25, 2.0]], dtype=np.float32)
    swapped = x[[0, 3, 2, 1]]
    changed = swapped.copy()
    changed[2, 1] = -1.5
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        checks = [
            ("swapped rows, ordered compare", swapped, [], 1),
            ("swapped rows, --unordered-rows", swapped, ["--unordered-rows"], 0),
            ("changed value, --unordered-rows", changed, ["--unordered-rows"], 1),
            ("same order, --unordered-rows", x, ["--unordered-rows"], 0),
        ]
        for i, (what, expected, flags, want_rc) in enumerate(checks):
            folder = os.path.join(tmp, f"case{i}")
            write_case(folder, x, expected)
            rc, out = run(cuvilc, folder, *flags)
            status = "ok" if rc == want_rc else "WRONG"
            print(f"{status}: {what}: exit {rc} (want {want_rc}): {out.strip()}")
            if rc != want_rc:
                failures.append(what)
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
