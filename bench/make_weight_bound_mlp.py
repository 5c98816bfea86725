#!/usr/bin/python3
"""Writes the Triton model repository of the batching benchmark (bench/run_batching.sh).

usage: /usr/bin/python3 bench/make_weight_bound_mlp.py REPOSITORY_DIR [--shared SHARED_DIR]

Each model appears twice, as <name>_batched (dynamic batching, 2 ms max queue delay) and
<name>_unbatched (same model and max_batch_size, no dynamic batching):
  wmlp   four 2048x2048 fully-connected layers with ReLU (64 MB of FP32 weights, weight-bound
         at small batches), input "input" FP32 [batch, 2048], written here (opset 13);
  mlp    the shared zoo's 784-512-512-10 MLP;
  lenet  the shared zoo's LeNet.
"""
import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 2048
LAYERS = 4
MAX_BATCH = 32
QUEUE_DELAY_US = 2000


def weight_bound_mlp():
    rng = np.random.default_rng(20240601)
    nodes, inits = [], []
    x = "input"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        b = (rng.standard_normal(WIDTH) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"fc{i}.weight"),
                  numpy_helper.from_array(b, f"fc{i}.bias")]
        # Gemm with transB=1, as PyTorch exports nn.Linear.
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"fc{i}"],
                                      name=f"fc{i}", transB=1))
        y = "output" if i == LAYERS - 1 else f"relu{i}"
        nodes.append(helper.make_node("Relu", [f"fc{i}"], [y], name=f"relu{i}"))
        x = y
    graph = helper.make_graph(
        nodes, "weight_bound_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", WIDTH])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="cuvil-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def dims_of(value_info):
    """Dims after the batch dim, as config.pbtxt wants them."""
    dims = [d.dim_value if d.HasField("dim_value") else -1
            for d in value_info.type.tensor_type.shape.dim]
    return dims[1:]


def config_pbtxt(name, model, batched):
    g = model.graph
    init_names = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in init_names]
    lines = [f'name: "{name}"', 'platform: "onnxruntime_onnx"', f"max_batch_size: {MAX_BATCH}"]
    for key, values in (("input", inputs), ("output", g.output)):
        lines.append(f"{key} [")
        entries = [f'  {{ name: "{v.name}" data_type: TYPE_FP32 dims: '
                   f'[ {", ".join(str(d) for d in dims_of(v))} ] }}' for v in values]
        lines.append(",\n".join(entries))
        lines.append("]")
    if batched:
        lines.append(f"dynamic_batching {{\n  max_queue_delay_microseconds: {QUEUE_DELAY_US}\n}}")
    lines.append("instance_group [ { count: 1 kind: KIND_CPU } ]")
    return "\n".join(lines) + "\n"


def write_pair(repo, base, model_path, model):
    for batched in (True, False):
        name = f"{base}_{'batched' if batched else 'unbatched'}"
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        shutil.copyfile(model_path, os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config_pbtxt(name, model, batched))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository")
    parser.add_argument("--shared", default=os.path.join(here, "..", "..", "shared"))
    args = parser.parse_args()
    os.makedirs(args.repository, exist_ok=True)

    wmlp = weight_bound_mlp()
    wmlp_path = os.path.join(args.repository, "wmlp.onnx.tmp")
    onnx.save(wmlp, wmlp_path)
    write_pair(args.repository, "wmlp", wmlp_path, wmlp)
    os.remove(wmlp_path)

    for base in ("mlp", "lenet"):
        path = os.path.join(args.shared, "models", base, "model.onnx")
        if not os.path.exists(path):
            sys.exit(f"missing {path} (pass --shared DIR)")
        write_pair(args.repository, base, path, onnx.load(path, load_external_data=False))
    print(f"wrote {args.repository}: "
          + " ".join(sorted(d for d in os.listdir(args.repository))))


if __name__ == "__main__":
    main()
