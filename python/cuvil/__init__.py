"""Cuvil from Python: compile an ONNX model (or a torch.nn.Module) to native code and run it.

    import cuvil, numpy as np
    model = cuvil.compile("model.onnx", intra_op_threads=2)
    (y,) = model(np.zeros((4, 784), np.float32))
    model.save_aot("out", target="aarch64")   # out/libmodel.a + out/model.h

Errors raise ValueError (the model, an option or the inputs are at fault: Cuvil's InvalidArgument
and NotFound) or RuntimeError (anything else), with Cuvil's message.
"""

import os
import sys
import tempfile

from . import _cuvil
from ._cuvil import CompiledModel, TensorInfo, host_arch

__all__ = ["compile", "CompiledModel", "TensorInfo", "host_arch"]
__version__ = "0.1.0"

# What torch models are exported with (see compile()).
TORCH_OPSET = 13
TORCH_BATCH_DIM = "batch"


def compile(model, example_inputs=None, **options):
    """Compiles `model` for this CPU and returns a callable CompiledModel.

    model: an ONNX file's path (str or os.PathLike), the bytes of a serialized ONNX model, an
        onnx.ModelProto, or a torch.nn.Module. A module is exported with torch.onnx.export on
        `example_inputs` (a tensor or a tuple of tensors) at opset 13, with dim 0 of every input
        and output symbolic ("batch"); its inputs are named input_0.., its outputs output_0...
    example_inputs: required for a torch.nn.Module; for an ONNX model, when given, the compiled
        model is run on them once (a check that they fit).
    options:
        intra_op_threads (int, default 1): threads one call may use (the caller included).
        opt_level (0..3, default 3): LLVM optimisation level.
        dim_overrides ({dim_name: int}): fix symbolic dims to a value.
        input_shapes ({input_name: [dims]}): fix whole input shapes.
        run_checker (bool, default True): run onnx::checker on the model first.
        emit_llvm (path): write the optimised LLVM IR there.

    Returns a CompiledModel: call it with numpy arrays (positionally or by input name) or torch
    tensors; it returns a list of numpy arrays (torch tensors for torch inputs). C-contiguous
    inputs of the right dtype are read in place; outputs are written straight into fresh arrays.
    """
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        name = os.path.splitext(os.path.basename(path))[0] or "model"
        compiled = _cuvil._compile_file(path, name, options)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        compiled = _cuvil._compile_bytes(bytes(model), "model", options)
    elif _is_model_proto(model):
        compiled = _cuvil._compile_bytes(model.SerializeToString(), _proto_name(model), options)
    elif _is_torch_module(model):
        return _compile_torch(model, example_inputs, options)
    else:
        raise TypeError(
            "cuvil.compile: model must be a path, ONNX bytes, an onnx.ModelProto or a "
            f"torch.nn.Module, not {type(model).__name__}")
    if example_inputs is not None:
        compiled(*_as_tuple(example_inputs))
    return compiled


def _as_tuple(inputs):
    if isinstance(inputs, (list, tuple)):
        return tuple(inputs)
    return (inputs,)


def _is_model_proto(model):
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(model, onnx.ModelProto)


def _proto_name(model):
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in model.graph.name)
    return name if name and not name[0].isdigit() else "model"


def _is_torch_module(model):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _compile_torch(module, example_inputs, options):
    import torch

    if example_inputs is None:
        raise ValueError("cuvil.compile: a torch.nn.Module needs example_inputs "
                         "(a tensor or a tuple of tensors) to be exported")
    example = _as_tuple(example_inputs)
    with torch.no_grad():
        result = module(*example)
    n_out = len(result) if isinstance(result, (list, tuple)) else 1
    in_names = [f"input_{i}" for i in range(len(example))]
    out_names = [f"output_{i}" for i in range(n_out)]
    axes = {n: {0: TORCH_BATCH_DIM} for n in in_names + out_names}
    with tempfile.TemporaryDirectory(prefix="cuvil-torch-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        torch.onnx.export(module, example, path, opset_version=TORCH_OPSET,
                          input_names=in_names, output_names=out_names, dynamic_axes=axes)
        with open(path, "rb") as f:
            data = f.read()
    name = "".join(c if c.isalnum() else "_" for c in type(module).__name__.lower()) or "model"
    return _cuvil._compile_bytes(data, name, options)
