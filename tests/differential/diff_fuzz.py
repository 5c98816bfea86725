#!/usr/bin/python3
"""Differential fuzzer for Cuvil's generated code.

Builds small random valid ONNX graphs (opset 13, float32 and int64, symbolic batch dim "batch" on
every input), computes the expected outputs with the plain numpy interpreter below (one function
per op, following the ONNX spec), runs `cuvilc run` at random batch sizes and compares.

usage: diff_fuzz.py CUVILC [--seed N] [--cases N | --seconds S] [--jobs J] [--out DIR] [--timeout S]
       diff_fuzz.py CUVILC --replay DIR      (re-run one saved failing case)

A finding is: a crash (signal), a hang (timeout), a mismatch (values, dtype or shape), a failed
execution where success is expected, a success where failure is expected (out-of-range Gather
indices), or a compile-time refusal not in UNSUPPORTED below. Every failing case is saved to
OUT/case-<seed>-<n>/ (model.onnx, exec-<k>/input_<i>.pb with the input names in inputs.txt,
expected_<i>.pb, and finding.txt with the command line) for replay.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
BATCHES = (1, 2, 3, 4, 5)  # shapes are tracked at every batch size the executions may use
INT64_MAX = 2**63 - 1
BATCH_SLICE_ENDS = False  # --batch-slice-ends

# Refusals that are accepted, documented in fuzz/README.md: (ops the graph must contain, message
# regex). Cuvil's symbolic extents are monomials c*batch, and slices of batch-dependent axes trust
# the model's bounds (checked at run time) instead of clamping them. Anything else Cuvil refuses
# or fails on is a finding.
UNSUPPORTED = [
    # Slice of a batch-dependent axis with a step other than 1 or a negative start.
    (("Slice",), r"slice \[.*\) step -?\d+ of extent .*batch.* cannot be resolved at compile time"),
    # Slice of a batch-dependent axis whose end lies past the input (e.g. [0, 1000)): the clamped
    # extent min(batch, 1000) is not c*batch, so the execution fails instead of clamping.
    (("Slice",), r"a slice whose bounds depend on the input shapes"),
    # Concat along a batch-dependent axis whose extent is not c*batch (batch + 2).
    (("Concat",), r"concatenated extent is not a monomial"),
]

# The error an execution with out-of-range Gather indices must fail with.
OOB_RE = re.compile(r"ind(ex|ices).*out of .*(bounds|range)", re.IGNORECASE)

F32, I64 = np.float32, np.int64
ONNX_DTYPE = {F32: TensorProto.FLOAT, I64: TensorProto.INT64}


# --------------------------------------------------------------------------------------------
# Reference interpreter: one function per op, following the ONNX (opset 13) spec. Floats are
# computed in float64 and rounded to float32 per node, like a float32 kernel would.


def _f(x, dtype):
    return x.astype(dtype)


def ref_unary(op):
    fns = {
        "Relu": lambda x: np.maximum(x, 0),
        "Neg": lambda x: -x,
        "Abs": np.abs,
        "Exp": np.exp,
        "Tanh": np.tanh,
        "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "Sqrt": np.sqrt,
    }
    fn = fns[op]

    def run(node, x):
        if x.dtype == F32:
            return [fn(x.astype(np.float64)).astype(F32)]
        return [fn(x).astype(x.dtype)]

    return run


def ref_binary(op):
    fns = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
           "Max": np.maximum, "Min": np.minimum}
    fn = fns[op]

    def run(node, a, b):
        if a.dtype == F32:
            return [fn(a.astype(np.float64), b.astype(np.float64)).astype(F32)]
        return [fn(a, b).astype(a.dtype)]

    return run


def _reduce_axes(node, x, axes):
    keepdims = node.attrs.get("keepdims", 1)
    if axes is None or len(axes) == 0:
        if node.op == "ReduceSum" and node.attrs.get("noop_with_empty_axes", 0):
            return None, keepdims
        axes = list(range(x.ndim))
    return tuple(sorted(int(a) % x.ndim for a in axes)), keepdims


def ref_reduce(op):
    def run(node, x, axes_t=None):
        axes = node.attrs.get("axes") if axes_t is None else list(axes_t)
        axes, keep = _reduce_axes(node, x, axes)
        if axes is None:
            return [x.copy()]
        xx = x.astype(np.float64) if x.dtype == F32 else x
        if op == "ReduceSum":
            r = np.sum(xx, axis=axes, keepdims=bool(keep))
        elif op == "ReduceMean":
            r = np.mean(xx, axis=axes, keepdims=bool(keep))
        else:
            r = np.max(xx, axis=axes, keepdims=bool(keep))
        return [np.asarray(r).astype(x.dtype)]

    return run


class IndexError_(Exception):
    pass


def ref_gather(node, data, idx):
    axis = node.attrs.get("axis", 0) % data.ndim
    n = data.shape[axis]
    if np.any(idx >= n) or np.any(idx < -n):
        raise IndexError_("gather indices out of bounds")
    return [np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)]


def ref_reshape(node, x, shape):
    shape = [int(s) for s in shape]
    out = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]  # allowzero=0
    return [x.reshape(out)]


def ref_transpose(node, x):
    perm = node.attrs.get("perm")
    return [np.transpose(x, perm)]


def ref_slice(node, x, starts, ends, axes=None, steps=None):
    r = x.ndim
    axes = list(range(len(starts))) if axes is None else [int(a) % r for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    sl = [slice(None)] * r
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        s, e = int(s), int(e)
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        if st < 0 and e == -1:
            sl[a] = slice(s, None, st)
        else:
            sl[a] = slice(s, e, st)
    return [x[tuple(sl)].copy()]


def ref_concat(node, *xs):
    return [np.concatenate(xs, axis=node.attrs["axis"])]


def ref_unsqueeze(node, x, axes):
    r = x.ndim + len(axes)
    axes = sorted(int(a) % r for a in axes)
    out = x
    for a in axes:
        out = np.expand_dims(out, a)
    return [out]


def ref_squeeze(node, x, axes):
    return [np.squeeze(x, axis=tuple(int(a) % x.ndim for a in axes))]


REF = {op: ref_unary(op) for op in ("Relu", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Sqrt")}
REF.update({op: ref_binary(op) for op in ("Add", "Sub", "Mul", "Div", "Max", "Min")})
REF.update({op: ref_reduce(op) for op in ("ReduceSum", "ReduceMean", "ReduceMax")})
REF.update({"Gather": ref_gather, "Reshape": ref_reshape, "Transpose": ref_transpose,
            "Slice": ref_slice, "Concat": ref_concat, "Unsqueeze": ref_unsqueeze,
            "Squeeze": ref_squeeze})


# --------------------------------------------------------------------------------------------
# Graph representation and generator.


class Node:
    def __init__(self, op, inputs, output, attrs=None):
        self.op, self.inputs, self.output, self.attrs = op, inputs, output, attrs or {}


class Graph:
    """Inputs (name, dtype, per-batch input shape fn), initializers, nodes, outputs."""

    def __init__(self):
        self.inputs = []  # (name, dtype, inner dims) -> shape [batch] + dims
        self.consts = {}  # name -> np.ndarray
        self.nodes = []
        self.outputs = []
        self.index_inputs = {}  # input name -> table length it indexes (for OOB executions)
        self.ops = set()

    def evaluate(self, feeds):
        env = dict(self.consts)
        env.update(feeds)
        for n in self.nodes:
            args = [env[i] if i else None for i in n.inputs]
            while args and args[-1] is None:
                args.pop()
            env[n.output] = REF[n.op](n, *args)[0]
        return env


def sample_inputs(g, batch, rng):
    """Random feeds at one batch size: floats in [-3, 3], ints in [-5, 5], indices in range."""
    feeds = {}
    for name, dtype, dims in g.inputs:
        shape = [batch] + dims
        if name in g.index_inputs:
            n = g.index_inputs[name]
            feeds[name] = rng.integers(-n, n, size=shape).astype(I64)
        elif dtype == I64:
            feeds[name] = rng.integers(-5, 6, size=shape).astype(I64)
        else:
            feeds[name] = rng.uniform(-3, 3, size=shape).astype(F32)
    return feeds


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.g = Graph()
        self.count = 0
        self.vals = []  # (name, dtype, shapes per batch, (lo, hi) bound)

    def name(self, p):
        self.count += 1
        return f"{p}{self.count}"

    def const(self, arr, p="c"):
        n = self.name(p)
        self.g.consts[n] = arr
        return n

    def sample_inputs(self, batch, rng):
        return sample_inputs(self.g, batch, rng)

    def shapes(self, name):
        """The value's shape at every batch size in BATCHES (from the reference interpreter)."""
        return self.probe[name]

    def reprobe(self):
        rng = np.random.default_rng(0)
        self.probe = {}
        for b in BATCHES:
            env = self.g.evaluate(self.sample_inputs(b, rng))
            for k, v in env.items():
                self.probe.setdefault(k, []).append(v.shape)

    # Per-dimension view: dims[a] is a tuple of sizes over BATCHES; constant if all equal.
    def dims(self, name):
        shapes = self.shapes(name)
        return [tuple(s[a] for s in shapes) for a in range(len(shapes[0]))]

    @staticmethod
    def const_dim(d):
        return len(set(d)) == 1

    def add_input(self, dtype, dims, index_len=None):
        n = self.name("in" if dtype == F32 else "ix")
        self.g.inputs.append((n, dtype, dims))
        if index_len is not None:
            self.g.index_inputs[n] = index_len
            bound = (-index_len, index_len - 1)
        else:
            bound = (-3.0, 3.0) if dtype == F32 else (-5, 5)
        return n, bound


def numel_max(shapes):
    return max(int(np.prod(s)) for s in shapes)


MAX_ELEMS = 4096


def build_graph(rng):
    """Returns (Graph, info) with a random chain of 1-6 nodes."""
    gen = Gen(rng)
    g = gen.g
    r = rng.random()
    use_int = r < 0.2
    dtype = I64 if use_int else F32
    rank = rng.randint(1, 4)
    dims = [rng.choice([1, 2, 3, 4, 5, 6]) for _ in range(rank - 1)]
    cur, bound = gen.add_input(dtype, dims)
    bounds = {cur: bound}
    dtypes = {cur: dtype}
    gen.reprobe()
    target = rng.randint(1, 6)
    tries = 0
    while len(g.nodes) < target and tries < 60:
        tries += 1
        snapshot = (list(g.nodes), dict(g.consts), list(g.inputs), dict(g.index_inputs), gen.count)
        try:
            out, b = add_random_node(gen, rng, cur, dtypes, bounds)
        except Skip:
            out = None
        if out is not None:
            try:
                gen.reprobe()
                shapes = gen.shapes(out)
                ok = all(min(s) > 0 for s in shapes if len(s)) and numel_max(shapes) <= MAX_ELEMS
                ok = ok and all(min(s) > 0 for v in gen.probe.values() for s in v if len(s))
            except Exception:  # e.g. a reshape the reference refuses: drop the node
                ok = False
            ok = ok and max(abs(float(b[0])), abs(float(b[1]))) <= 1e3
            if ok:
                bounds[out] = b
                cur = out
                continue
        g.nodes, g.consts, g.inputs, g.index_inputs, gen.count = snapshot
        gen.reprobe()
    if not g.nodes:
        return None
    g.outputs = [g.nodes[-1].output]
    # Values no node consumes (a chain cut off by a Gather on a constant table) are outputs too.
    used = {i for n in g.nodes for i in n.inputs}
    g.outputs += [n.output for n in g.nodes[:-1] if n.output not in used]
    # Sometimes also an intermediate value as a second output.
    if len(g.nodes) > 2 and rng.random() < 0.2:
        mid = g.nodes[rng.randrange(len(g.nodes) - 1)].output
        if mid not in g.outputs:
            g.outputs.append(mid)
    g.ops = {n.op for n in g.nodes}
    g.dtypes = dtypes
    g.probe = gen.probe
    g.max_abs = max(max(abs(float(lo)), abs(float(hi))) for lo, hi in bounds.values())
    return g


def fixed_graph(inputs, consts, nodes, outputs, index_inputs=None):
    """A hand-built graph (regression case): inputs are (name, dtype, inner dims)."""
    g = Graph()
    g.inputs, g.consts, g.nodes, g.outputs = inputs, consts, nodes, outputs
    g.index_inputs = index_inputs or {}
    g.ops = {n.op for n in nodes}
    g.probe = {}
    g.dtypes = {}
    rng = np.random.default_rng(0)
    for b in BATCHES:
        for k, v in g.evaluate(sample_inputs(g, b, rng)).items():
            g.probe.setdefault(k, []).append(v.shape)
            g.dtypes[k] = v.dtype.type
    g.max_abs = 3.0
    return g


def _i64(*v):
    return np.asarray(v, dtype=I64)


# Regression cases for fixed findings, run before the random ones.
REGRESSIONS = [
    # x[INT64_MIN:INT64_MAX] on the batch axis was refused ("cannot be resolved at compile time").
    lambda: fixed_graph([("x", F32, [3])], {"s": _i64(-2**63), "e": _i64(2**63 - 1)},
                        [Node("Slice", ["x", "s", "e"], "y"), Node("Relu", ["y"], "z")], ["z"]),
]


class Skip(Exception):
    pass


FLOAT_UNARY = ["Relu", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Sqrt"]
INT_UNARY = ["Neg", "Abs"]
FLOAT_BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
INT_BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


def interval_bin(op, a, b):
    (al, ah), (bl, bh) = a, b
    if op == "Add":
        return (al + bl, ah + bh)
    if op == "Sub":
        return (al - bh, ah - bl)
    if op in ("Mul", "Div"):
        if op == "Div":  # divisors are constants with 0.5 <= |d| <= 2
            m = max(abs(al), abs(ah)) * 2
            return (-m, m)
        c = [al * bl, al * bh, ah * bl, ah * bh]
        return (min(c), max(c))
    if op == "Max":
        return (max(al, bl), max(ah, bh))
    return (min(al, bl), min(ah, bh))


def add_random_node(gen, rng, cur, dtypes, bounds):
    g = gen.g
    dt = dtypes[cur]
    dims = gen.dims(cur)
    rank = len(dims)
    lo, hi = bounds[cur]
    kinds = ["unary", "binary", "binary", "reduce", "gather", "reshape", "transpose", "slice",
             "concat", "unsqueeze", "squeeze"]
    kind = rng.choice(kinds)
    out = gen.name("t")

    def emit(op, inputs, attrs=None, odt=None):
        g.nodes.append(Node(op, inputs, out, attrs))
        dtypes[out] = odt or dt
        return out

    if kind == "unary":
        op = rng.choice(FLOAT_UNARY if dt == F32 else INT_UNARY)
        if op == "Exp" and max(abs(lo), abs(hi)) > 5:
            op = "Tanh"
        if op == "Sqrt":  # sqrt of abs: an Abs node first
            a = gen.name("t")
            g.nodes.append(Node("Abs", [cur], a))
            dtypes[a] = dt
            emit("Sqrt", [a])
            m = max(abs(lo), abs(hi))
            return out, (0.0, float(np.sqrt(m)) + 1)
        emit(op, [cur])
        m = max(abs(lo), abs(hi))
        b = {"Relu": (max(lo, 0), max(hi, 0)), "Neg": (-hi, -lo), "Abs": (0, m),
             "Exp": (0.0, float(np.exp(min(hi, 5)))), "Tanh": (-1.0, 1.0), "Sigmoid": (0.0, 1.0)}[op]
        return out, b

    if kind == "binary":
        op = rng.choice(FLOAT_BINARY if dt == F32 else INT_BINARY)
        choice = rng.random()
        other_b = None
        if op == "Div" or choice < 0.5:
            # A constant of lower or equal rank broadcast against cur (batch dims become 1).
            crank = rng.randint(0, rank)
            cdims = []
            for d in dims[rank - crank:]:
                cdims.append(d[0] if gen.const_dim(d) and rng.random() < 0.7 else 1)
            if dt == F32:
                if op == "Div":
                    arr = rng_np(rng).uniform(0.5, 2, size=cdims) * rng_np(rng).choice([-1, 1], size=cdims)
                else:
                    arr = rng_np(rng).uniform(-2, 2, size=cdims)
                arr = np.asarray(arr, dtype=F32)
                other_b = (-2.0, 2.0)
            else:
                arr = np.asarray(rng_np(rng).integers(-3, 4, size=cdims), dtype=I64)
                other_b = (-3, 3)
            other = gen.const(arr)
            if rng.random() < 0.5 and op != "Div":
                ins = [other, cur]
            else:
                ins = [cur, other]
            if op == "Div":
                ins = [cur, other]
        elif choice < 0.75:
            # A second graph input with a broadcastable shape: [batch] + some dims set to 1.
            idims = [d[0] if (gen.const_dim(d) and rng.random() < 0.7) else 1 for d in dims[1:]]
            if rank == 0 or dims[0] != tuple(BATCHES):
                raise Skip()
            other, other_b = gen.add_input(dt, idims)
            dtypes[other] = dt
            ins = [cur, other] if rng.random() < 0.5 else [other, cur]
        else:
            # An earlier value of the same shape and dtype (or cur itself).
            cands = [n for n in gen.probe if dtypes.get(n) == dt and n in bounds
                     and gen.probe[n] == gen.probe[cur]]
            other = rng.choice(cands)
            other_b = bounds[other]
            ins = [cur, other]
        emit(op, ins)
        b = interval_bin(op, (lo, hi), other_b) if ins[0] == cur else interval_bin(op, other_b, (lo, hi))
        return out, b

    if kind == "reduce":
        if rank == 0:
            raise Skip()
        op = rng.choice(["ReduceSum", "ReduceMean", "ReduceMax"] if dt == F32 else ["ReduceSum", "ReduceMax"])
        k = rng.randint(0, rank)
        axes = sorted(rng.sample(range(rank), k))
        axes = [a - rank if rng.random() < 0.3 else a for a in axes]
        keep = rng.choice([0, 1])
        attrs = {"keepdims": keep}
        count = 1
        for a in (axes or range(rank)):
            count *= max(dims[a])
        if op == "ReduceSum":
            if not axes and rng.random() < 0.5:
                # No axes input: reduce everything (noop_with_empty_axes=0).
                emit(op, [cur], attrs)
            else:
                if not axes and rng.random() < 0.5:
                    attrs["noop_with_empty_axes"] = 1
                    count = 1
                emit(op, [cur, gen.const(np.asarray(axes, dtype=I64), "axes")], attrs)
            return out, (lo * count, hi * count) if lo < 0 else (lo, hi * count)
        if axes:
            attrs["axes"] = axes
        emit(op, [cur], attrs)
        return out, (lo, hi)

    if kind == "gather":
        if rng.random() < 0.5:
            # Constant table indexed by a new int64 input [batch, m...] (in- and out-of-range).
            tlen = rng.randint(1, 7)
            tdims = [tlen] + [rng.randint(1, 4) for _ in range(rng.randint(0, 2))]
            tdt = rng.choice([F32, I64])
            if tdt == F32:
                table = np.asarray(rng_np(rng).uniform(-3, 3, size=tdims), dtype=F32)
                tb = (-3.0, 3.0)
            else:
                table = np.asarray(rng_np(rng).integers(-9, 10, size=tdims), dtype=I64)
                tb = (-9, 9)
            idims = [rng.randint(1, 4) for _ in range(rng.randint(0, 2))]
            idx, _ = gen.add_input(I64, idims, index_len=tlen)
            dtypes[idx] = I64
            emit("Gather", [gen.const(table, "table"), idx], {"axis": 0}, odt=tdt)
            return out, tb
        # Constant indices (incl. negative) into cur along a non-batch axis.
        axes = [a for a in range(rank) if gen.const_dim(dims[a])]
        if not axes:
            raise Skip()
        a = rng.choice(axes)
        n = dims[a][0]
        ishape = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        ind = np.asarray(rng_np(rng).integers(-n, n, size=ishape), dtype=I64)
        attrs = {"axis": a - rank if rng.random() < 0.3 else a}
        emit("Gather", [cur, gen.const(ind, "ind")], attrs)
        return out, (lo, hi)

    if kind == "reshape":
        if rank == 0:
            emit("Reshape", [cur, gen.const(np.asarray([1] * rng.randint(0, 2), dtype=I64), "shape")])
            return out, (lo, hi)
        k = rng.randint(0, rank)
        # Batch-dependent dims after the copied prefix must be absorbed by -1.
        rest = dims[k:]
        const_rest = 1
        has_sym = False
        for d in rest:
            if gen.const_dim(d):
                const_rest *= d[0]
            else:
                has_sym = True
        factors = factorize(rng, const_rest)
        if has_sym:
            factors.insert(rng.randint(0, len(factors)), -1)
        elif factors and rng.random() < 0.4:
            factors[rng.randrange(len(factors))] = -1
        shape = [0] * k + factors
        # Explicit sizes may also replace leading zeros when the dim is constant.
        for i in range(k):
            if gen.const_dim(dims[i]) and rng.random() < 0.3:
                shape[i] = dims[i][0]
        if -1 in shape and shape.count(-1) > 1:
            raise Skip()
        emit("Reshape", [cur, gen.const(np.asarray(shape, dtype=I64), "shape")])
        return out, (lo, hi)

    if kind == "transpose":
        perm = list(range(rank))
        rng.shuffle(perm)
        attrs = {"perm": perm} if rank and rng.random() < 0.85 else {}
        emit("Transpose", [cur], attrs)
        return out, (lo, hi)

    if kind == "slice":
        if rank == 0:
            raise Skip()
        naxes = rng.randint(1, rank)
        axes = rng.sample(range(rank), naxes)
        starts, ends, steps = [], [], []
        for a in axes:
            d = dims[a]
            if gen.const_dim(d):
                n = d[0]
                st = rng.choice([1, 1, 1, 2, 3, -1, -1, -2])
                s = rng.randint(-n - 2, n + 2)
                e = rng.choice([rng.randint(-n - 2, n + 2), INT64_MAX, -INT64_MAX - 1])
            else:
                # Full slices only: a finite end past the batch ([0, 1000)) is a known limitation
                # (see fuzz/README.md), generated with --batch-slice-ends.
                opts = [(1, 0, INT64_MAX), (1, 0, INT64_MAX), (1, -INT64_MAX - 1, INT64_MAX),
                        (-1, -1, -INT64_MAX - 1)]
                if BATCH_SLICE_ENDS:
                    opts += [(1, 0, 1000), (-1, INT64_MAX, -1000)]
                st, s, e = rng.choice(opts)
            starts.append(s)
            ends.append(e)
            steps.append(st)
        ins = [cur, gen.const(np.asarray(starts, dtype=I64), "starts"),
               gen.const(np.asarray(ends, dtype=I64), "ends")]
        default_axes = axes == list(range(naxes))
        all_one = all(s == 1 for s in steps)
        neg_axes = [a - rank if rng.random() < 0.3 else a for a in axes]
        if not (default_axes and all_one and rng.random() < 0.5):
            ins.append(gen.const(np.asarray(neg_axes, dtype=I64), "axes"))
            if not all_one or rng.random() < 0.5:
                ins.append(gen.const(np.asarray(steps, dtype=I64), "steps"))
        emit("Slice", ins)
        return out, (lo, hi)

    if kind == "concat":
        if rank == 0:
            raise Skip()
        a = rng.randrange(rank)
        others = []
        ob = (lo, hi)
        for _ in range(rng.randint(1, 2)):
            nonaxis_const = all(gen.const_dim(d) for i, d in enumerate(dims) if i != a)
            if nonaxis_const and rng.random() < 0.6:
                cd = [d[0] for d in dims]
                cd[a] = rng.randint(1, 3)
                if dt == F32:
                    arr = np.asarray(rng_np(rng).uniform(-2, 2, size=cd), dtype=F32)
                    ob = (min(ob[0], -2.0), max(ob[1], 2.0))
                else:
                    arr = np.asarray(rng_np(rng).integers(-3, 4, size=cd), dtype=I64)
                    ob = (min(ob[0], -3), max(ob[1], 3))
                others.append(gen.const(arr))
            else:
                others.append(cur)
        ins = [cur] + others
        rng.shuffle(ins)
        emit("Concat", ins, {"axis": a - rank if rng.random() < 0.3 else a})
        return out, ob

    if kind == "unsqueeze":
        k = rng.randint(1, 2)
        r = rank + k
        axes = rng.sample(range(r), k)
        axes = [x - r if rng.random() < 0.3 else x for x in axes]
        emit("Unsqueeze", [cur, gen.const(np.asarray(axes, dtype=I64), "axes")])
        return out, (lo, hi)

    if kind == "squeeze":
        ones = [a for a in range(rank) if dims[a] == (1,) * len(BATCHES)]
        if not ones:
            raise Skip()
        axes = rng.sample(ones, rng.randint(1, len(ones)))
        axes = [x - rank if rng.random() < 0.3 else x for x in axes]
        emit("Squeeze", [cur, gen.const(np.asarray(axes, dtype=I64), "axes")])
        return out, (lo, hi)
    raise Skip()


def factorize(rng, n):
    """A random factorization of n into 0-3 factors (possibly with 1s); [] only when n == 1."""
    fs = []
    m = n
    for p in (2, 3, 5, 7, 11, 13):
        while m % p == 0:
            fs.append(p)
            m //= p
    if m > 1:
        fs.append(m)
    rng.shuffle(fs)
    k = rng.randint(1, 3)
    out = [1] * k
    for f in fs:
        out[rng.randrange(k)] *= f
    if n == 1 and rng.random() < 0.5:
        return []
    return out


_np_rngs = {}


def rng_np(rng):
    return np.random.default_rng(rng.getrandbits(32))


# --------------------------------------------------------------------------------------------
# ONNX export, execution, comparison.


def to_onnx(g):
    nodes = []
    for n in g.nodes:
        attrs = dict(n.attrs)
        nodes.append(helper.make_node(n.op, n.inputs, [n.output], **attrs))
    inputs = [helper.make_tensor_value_info(name, ONNX_DTYPE[dt], ["batch"] + dims)
              for name, dt, dims in g.inputs]
    outputs = []
    for k, o in enumerate(g.outputs):
        shapes = g.probe[o]
        odims = []
        for a in range(len(shapes[0])):
            sizes = {s[a] for s in shapes}
            odims.append(shapes[0][a] if len(sizes) == 1 else f"out{k}_{a}")
        outputs.append(helper.make_tensor_value_info(o, ONNX_DTYPE[g.dtypes[o]], odims))
    inits = [numpy_helper.from_array(v, k) for k, v in g.consts.items()]
    graph = helper.make_graph(nodes, "diff_fuzz", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="diff_fuzz")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def tolerance(g):
    rtol, atol = 1e-4, 1e-5
    if g.ops & {"Exp", "Tanh", "Sigmoid"}:
        rtol, atol = 1e-3, 1e-4
    # Reductions and long chains accumulate float32 rounding relative to the largest magnitude
    # seen, not the (possibly cancelled) result.
    atol *= max(1.0, g.max_abs)
    return rtol, atol


def compare(got, want, rtol, atol):
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype != F32:
        bad = np.flatnonzero(got.ravel() != want.ravel())
    else:
        gw, ww = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        okv = np.abs(gw - ww) <= atol + rtol * np.abs(ww)
        okv |= np.isnan(gw) & np.isnan(ww)
        okv |= np.isinf(ww) & (gw == ww)
        bad = np.flatnonzero(~okv)
    if bad.size:
        i = int(bad[0])
        return (f"{bad.size} elements differ, first at flat index {i}: got {got.ravel()[i]!r}, "
                f"expected {want.ravel()[i]!r}")
    return None


class Finding(Exception):
    pass


def run_cuvilc(cuvilc, model_path, feeds, out_dir, timeout):
    args = [cuvilc, "run", model_path]
    os.makedirs(out_dir, exist_ok=True)
    for k, (name, arr) in enumerate(feeds.items()):
        p = os.path.join(out_dir, f"input_{k}.pb")
        with open(p, "wb") as f:
            f.write(numpy_helper.from_array(arr, name).SerializeToString())
        args += ["--input", f"{name}={p}"]
    args += ["--output-dir", os.path.join(out_dir, "out")]
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return args, None, "", "timeout"
    return args, p.returncode, p.stdout, p.stderr


def compile_refusal_ok(g, msg):
    for ops, pattern in UNSUPPORTED:
        if set(ops) & g.ops and re.search(pattern, msg):
            return True
    return False


def run_case(cuvilc, seed, n, out_root, timeout, workdir):
    """Builds, runs and checks one graph. Returns (executions, [finding lines], refused)."""
    rng = random.Random(f"{seed}-{n}")
    if isinstance(n, str):  # "r<i>": regression case i
        g = REGRESSIONS[int(n[1:])]()
    else:
        g = None
    while g is None:
        g = build_graph(rng)
    model = to_onnx(g)
    case_dir = os.path.join(workdir, f"case-{seed}-{n}")
    os.makedirs(case_dir, exist_ok=True)
    model_path = os.path.join(case_dir, "model.onnx")
    onnx.save(model, model_path)
    rtol, atol = tolerance(g)
    nrng = np.random.default_rng(rng.getrandbits(32))
    batches = rng.sample(BATCHES, rng.randint(1, 3))
    plans = [(b, False) for b in batches]
    if g.index_inputs and rng.random() < 0.5:
        plans.append((rng.choice(BATCHES), True))
    findings, execs, refused = [], 0, False
    desc = " -> ".join(n_.op for n_ in g.nodes)
    for k, (b, oob) in enumerate(plans):
        feeds = sample_inputs(g, b, nrng)
        if oob:
            name = rng.choice(sorted(g.index_inputs))
            tlen = g.index_inputs[name]
            arr = feeds[name]
            flat = arr.reshape(-1)
            flat[rng.randrange(flat.size)] = rng.choice([tlen, tlen + rng.randint(0, 100), -tlen - 1,
                                                          -tlen - rng.randint(1, 100), INT64_MAX,
                                                          -INT64_MAX - 1])
        expect_fail = False
        try:
            env = g.evaluate(feeds)
            want = [env[o] for o in g.outputs]
        except IndexError_:
            expect_fail = True
            want = []
        exec_dir = os.path.join(case_dir, f"exec-{k}")
        args, rc, out, err = run_cuvilc(cuvilc, model_path, feeds, exec_dir, timeout)
        execs += 1
        with open(os.path.join(exec_dir, "inputs.txt"), "w") as f:
            f.write("\n".join(feeds) + "\n")
        for i, w in enumerate(want):
            with open(os.path.join(exec_dir, f"expected_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(w, g.outputs[i]).SerializeToString())
        err1 = err.strip().splitlines()[-1] if err.strip() else ""
        where = f"case {seed}-{n} batch={b} [{desc}]"
        problem = None
        if rc is None:
            problem = f"hang (no exit after {timeout}s)"
        elif rc < 0:
            problem = f"crash (signal {-rc}) {err1}"
        elif rc != 0 and not isinstance(n, str) and compile_refusal_ok(g, err1):
            refused = True
            break
        elif expect_fail:
            if rc == 0:
                problem = "succeeded although Gather indices are out of range"
            elif not OOB_RE.search(err):
                problem = f"failed without an out-of-bounds error: {err1}"
        elif rc != 0:
            problem = f"execution failed (rc {rc}): {err1}"
        else:
            for i, w in enumerate(want):
                p = os.path.join(exec_dir, "out", f"output_{i}.pb")
                if not os.path.exists(p):
                    problem = f"output {i} missing"
                    break
                t = onnx.TensorProto()
                with open(p, "rb") as f:
                    t.ParseFromString(f.read())
                got = numpy_helper.to_array(t)
                why = compare(got, w, rtol, atol)
                if why:
                    problem = f"mismatch in output {i} ({g.outputs[i]}): {why}"
                    break
        if problem:
            line = f"FINDING {where}: {problem}"
            findings.append(line)
            with open(os.path.join(exec_dir, "finding.txt"), "w") as f:
                f.write(line + "\n" + " ".join(args) + "\n")
    if findings and out_root:
        dst = os.path.join(out_root, f"case-{seed}-{n}")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(case_dir, dst)
        with open(os.path.join(dst, "case.json"), "w") as f:
            json.dump({"seed": seed, "case": n, "ops": desc, "rtol": rtol, "atol": atol,
                       "findings": findings}, f, indent=1)
    shutil.rmtree(case_dir, ignore_errors=True)
    return execs, findings, refused


def replay(cuvilc, case_dir, timeout):
    """Re-runs every saved execution of a failing case and compares with its expected files."""
    info = json.load(open(os.path.join(case_dir, "case.json")))
    bad = 0
    for e in sorted(d for d in os.listdir(case_dir) if d.startswith("exec-")):
        ed = os.path.join(case_dir, e)
        names = open(os.path.join(ed, "inputs.txt")).read().split()
        feeds = {}
        for k, name in enumerate(names):
            t = onnx.TensorProto()
            t.ParseFromString(open(os.path.join(ed, f"input_{k}.pb"), "rb").read())
            feeds[name] = numpy_helper.to_array(t)
        with tempfile.TemporaryDirectory() as tmp:
            args, rc, out, err = run_cuvilc(cuvilc, os.path.join(case_dir, "model.onnx"), feeds, tmp, timeout)
            wants = sorted(f for f in os.listdir(ed) if f.startswith("expected_"))
            status = f"rc={rc}"
            if rc == 0:
                for i in range(len(wants)):
                    t = onnx.TensorProto()
                    t.ParseFromString(open(os.path.join(ed, f"expected_{i}.pb"), "rb").read())
                    g = onnx.TensorProto()
                    g.ParseFromString(open(os.path.join(tmp, "out", f"output_{i}.pb"), "rb").read())
                    why = compare(numpy_helper.to_array(g), numpy_helper.to_array(t), info["rtol"], info["atol"])
                    status += f" output_{i}: {why or 'ok'}"
                    bad += why is not None
            elif wants:
                bad += 1
            print(f"{e}: {status} {err.strip()}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cuvilc")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="time budget instead of --cases")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--out", default="diff_fuzz_findings", help="folder for failing cases")
    ap.add_argument("--replay", default=None, help="a saved case folder to re-run")
    ap.add_argument("--batch-slice-ends", action="store_true",
                    help="also slice batch axes with finite ends past the batch (known limitation)")
    a = ap.parse_args()
    global BATCH_SLICE_ENDS
    BATCH_SLICE_ENDS = a.batch_slice_ends
    if a.replay:
        return replay(a.cuvilc, a.replay, a.timeout)
    if a.cases is None and a.seconds is None:
        a.cases = 100
    deadline = time.time() + a.seconds if a.seconds else None
    graphs = execs = refused = 0
    findings = []
    workdir = tempfile.mkdtemp(prefix="diff_fuzz.")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            pending = set()
            n = 0

            def more():
                if a.cases is not None and n >= a.cases:
                    return False
                return deadline is None or time.time() < deadline

            for i in range(len(REGRESSIONS)):
                pending.add(pool.submit(run_case, a.cuvilc, a.seed, f"r{i}", a.out, a.timeout, workdir))
            while True:
                while len(pending) < a.jobs * 2 and more():
                    pending.add(pool.submit(run_case, a.cuvilc, a.seed, n, a.out, a.timeout, workdir))
                    n += 1
                if not pending:
                    break
                done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for f in done:
                    e, fs, r = f.result()
                    graphs += 1
                    execs += e
                    refused += r
                    for line in fs:
                        print(line, flush=True)
                    findings += fs
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    extra = f" ({refused} refused as documented)" if refused else ""
    print(f"diff_fuzz: {graphs} graphs, {execs} executions, {len(findings)} findings{extra}")
    if findings:
        print(f"failing cases saved under {os.path.abspath(a.out)}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
