#!/usr/bin/python3
"""Per-call overhead of the cuvil Python package: a CompiledModel call vs the generated code alone.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py \
        [--model ../shared/models/mlp/model.onnx] [--cuvil-bench build/bin/cuvil-bench] [--batch 1]

The Python side times model(x) with timeit (best of several repeats, per call). The raw compute is
timed two ways, both on one thread with the buffers and the arena allocated once and no
validation: CompiledModel._time_execute (LoadedModel::Execute in a C++ loop in this process, on the
same compiled code) and cuvil-bench's mean_ms (a separate process and compile; skipped when the
binary is missing). overhead = python call - in-process Execute (best of the same repeats); the
issue-14 target is <= 10 us. A second line does the same for a one-Add model built in memory
(y = x + 1 on float32[batch, 4]), where the compute is nearly nothing and the call is all
overhead. Prints key=value lines.
"""

import argparse
import os
import re
import subprocess
import sys
import timeit

import numpy as np

import cuvil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raw_compute_us(bench, model, batch, min_time):
    out = subprocess.run(
        [bench, model, "--batch", str(batch), "--threads", "1", "--min-time", str(min_time)],
        check=True, capture_output=True, text=True).stdout
    m = re.search(r"mean_ms=([0-9.]+)", out)
    if not m:
        sys.exit(f"python_overhead: no mean_ms in cuvil-bench output: {out!r}")
    return float(m.group(1)) * 1e3, out.strip()


def python_call_us(model, inputs, repeats, number):
    call = lambda: model(*inputs)  # noqa: E731 - timeit needs a callable
    for _ in range(200):
        call()
    best = min(timeit.repeat(call, repeat=repeats, number=number))
    return best / number * 1e6


def execute_us(model, inputs, repeats, number):
    model._time_execute(inputs, 200)
    return min(model._time_execute(inputs, number) for _ in range(repeats)) / 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models", "mlp", "model.onnx"))
    p.add_argument("--cuvil-bench", default=os.path.join(ROOT, "build", "bin", "cuvil-bench"))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--number", type=int, default=2000)
    p.add_argument("--min-time", type=float, default=3)
    args = p.parse_args()

    model = cuvil.compile(args.model)
    rng = np.random.default_rng(0)
    inputs = []
    for info in model.inputs:
        shape = [args.batch if isinstance(d, str) else d for d in info.shape]
        inputs.append(rng.uniform(-1, 1, shape).astype(np.dtype(info.dtype)))
    bench = ""
    if os.path.exists(args.cuvil_bench):
        bench_us, _ = raw_compute_us(args.cuvil_bench, args.model, args.batch, args.min_time)
        bench = f" cuvil_bench_mean_us={bench_us:.2f}"
    name = os.path.basename(os.path.dirname(os.path.abspath(args.model)))
    report(name, model, inputs, args, bench)
    tiny = cuvil.compile(tiny_add_model())
    report("tiny_add", tiny, [np.ones((args.batch, 4), np.float32)], args, "")


def tiny_add_model():
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [4], [1.0] * 4)
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "tiny_add", [x], [y],
                              [one])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def report(name, model, inputs, args, bench):
    # Interleaved, best of each, so a noisy neighbour during one phase does not skew the figure.
    call_us, exec_us = [], []
    for _ in range(3):
        call_us.append(python_call_us(model, inputs, args.repeats, args.number))
        exec_us.append(execute_us(model, inputs, args.repeats, args.number))
    call, raw = min(call_us), min(exec_us)
    print(f"python_overhead model={name} batch={args.batch} python_call_us={call:.2f} "
          f"execute_us={raw:.2f} overhead_us={call - raw:.2f}{bench} target_us=10")


if __name__ == "__main__":
    main()
