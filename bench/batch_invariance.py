#!/usr/bin/python3
"""Does a row's result depend on the batch it runs in? A probe, not a test (it prints).

Issue 42's target — outputs with server-side state bit for bit equal to a client carrying the
state, at every batch composition — needs every row of a batched execution to be computed
exactly as it would be alone. This builds one-op models (random weights, seed 0), runs 40
batches of 16 random rows through a real cuvil-server, then each row alone, and counts the
values that differ in any bit:

  gemm      Gemm [B, 64] x [64, 1]^T + b   (the VAD example's last Linear)
  matmul3d  MatMul [B, 1, 32] x [32, 96]   (the decoder example's projections)
  sigmoid   Sigmoid [B, 1]
  lstm      LSTM, 8 steps of 32 -> hidden 64, h/c in and out (the VAD example's recurrence)

usage: batch_invariance.py CUVIL_SERVER [--invariant]
  --invariant: the models' configs ask for batch-invariant kernels (cuvil_batch_invariant), as
  sequence_batching models get by default; every count should then be 0.
"""
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "zero_downtime"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sequences"))
from cuvil_proc import CuvilProcess  # noqa: E402
from streaming_models_test import Client  # noqa: E402

F = TensorProto.FLOAT


INVARIANT = False


def save(repo, name, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    os.makedirs(os.path.join(repo, name, "1"))
    onnx.save(m, os.path.join(repo, name, "1", "model.onnx"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 16\n")
        if INVARIANT:
            f.write('parameters { key: "cuvil_batch_invariant" value { string_value: "true" } }\n')


def main():
    global INVARIANT
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--invariant"):
        raise SystemExit(__doc__)
    INVARIANT = len(sys.argv) == 3
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="cuvil-batch-inv-")
    repo = os.path.join(tmp, "repo")
    vi = helper.make_tensor_value_info

    def const(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    save(repo, "gemm", [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)],
         [vi("x", F, ["batch", 64])], [vi("y", F, ["batch", 1])],
         [const("W", (1, 64)), const("b", (1,))])
    save(repo, "matmul3d", [helper.make_node("MatMul", ["x", "W"], ["y"])],
         [vi("x", F, ["batch", 1, 32])], [vi("y", F, ["batch", 1, 96])], [const("W", (32, 96))])
    save(repo, "sigmoid", [helper.make_node("Sigmoid", ["x"], ["y"])],
         [vi("x", F, ["batch", 1])], [vi("y", F, ["batch", 1])], [])
    # LSTM over [B, 8, 32] (batch-first in, transposed to ONNX's [seq, batch, in]).
    save(repo, "lstm",
         [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
          helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0, 2]),
          helper.make_node("Transpose", ["c"], ["ct"], perm=[1, 0, 2]),
          helper.make_node("LSTM", ["xt", "W", "R", "B", "", "ht", "ct"], ["", "yh", "yc"],
                           hidden_size=64),
          helper.make_node("Transpose", ["yh"], ["h_out"], perm=[1, 0, 2]),
          helper.make_node("Transpose", ["yc"], ["y"], perm=[1, 0, 2])],
         [vi("x", F, ["batch", 8, 32]), vi("h", F, ["batch", 1, 64]),
          vi("c", F, ["batch", 1, 64])],
         [vi("y", F, ["batch", 1, 64]), vi("h_out", F, ["batch", 1, 64])],
         [const("W", (1, 256, 32)), const("R", (1, 256, 64)), const("B", (1, 512))])
    shapes = {"gemm": {"x": (64,)}, "matmul3d": {"x": (1, 32)}, "sigmoid": {"x": (1,)},
              "lstm": {"x": (8, 32), "h": (1, 64), "c": (1, 64)}}
    try:
        load = sum((["--load-model", m] for m in shapes), [])
        with CuvilProcess(sys.argv[1], repo, load) as s:
            c = Client(s.http)
            for model, inputs in shapes.items():
                bad = total = rows = 0
                for _ in range(40):
                    x = {n: rng.standard_normal((16,) + sh).astype(np.float32) * 0.5
                         for n, sh in inputs.items()}
                    many = c.infer(model, list(x.items()), ["y"])["y"]
                    for r in range(16):
                        one = c.infer(model, [(n, v[r:r + 1]) for n, v in x.items()],
                                      ["y"])["y"][0]
                        diff = int(np.sum(one.view(np.uint32) != many[r].view(np.uint32)))
                        bad += diff
                        rows += diff > 0
                        total += one.size
                print(f"{model}: {bad} of {total} values ({rows} of 640 rows) differ between "
                      f"batch 16 and batch 1")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
