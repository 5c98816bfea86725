"""Writes a plain C reference of a quantized (QDQ) convolutional model for the Cortex-M7 tests:
OUT_DIR/NAME.c and OUT_DIR/NAME.h, with the C API of a Cuvil AOT library that run_model.c uses
(NAME_inputs, NAME_outputs, NAME_arena_bytes, NAME_run; batch 1), so the same board harness
runs it and counts its instructions. This is the yardstick of issue 44: the model's loops as a
C programmer would write them from the ONNX graph (TensorFlow Lite Micro's reference kernels are
written the same way), compiled by arm-none-eabi-gcc -O2; nothing Cuvil generates is used.

Each Conv or Gemm reading DequantizeLinear outputs runs in integers: int32 sums of
(x - x_zero) * w with the int32 bias, the sum times x_scale * w_scale[channel] in float, then the
Relu and QuantizeLinear that follow (if any) in the same loop. GlobalAveragePool averages floats
(dequantising an 8-bit input). Layout NCHW, as ONNX; bounds checked per tap.

Handles what cuvil-quantize writes for the test models: QuantizeLinear, DequantizeLinear, Conv
(groups, strides, pads, dilations), Gemm (transB), Relu, GlobalAveragePool, Flatten.

usage: /usr/bin/python3 make_reference.py MODEL.onnx OUT_DIR NAME"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def c_array(ctype, name, values):
    flat = np.asarray(values).reshape(-1)
    if ctype == "float":
        body = ", ".join(f"{float(v)!r}f" if np.isfinite(v) else "0.0f" for v in flat.astype(np.float32))
    else:
        body = ", ".join(str(int(v)) for v in flat)
    return f"static const {ctype} {name}[{max(len(flat), 1)}] __attribute__((unused)) = {{{body}}};\n"


def main():
    model_path, out, name = sys.argv[1:4]
    model = onnx.load(model_path)
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = {}
    inferred = onnx.shape_inference.infer_shapes(model).graph
    for vi in list(inferred.value_info) + list(inferred.input) + list(inferred.output):
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    # value -> ("u8", buffer, scale, zero) | ("f32", buffer) | ("dq", source u8 value)
    #        | ("w", int array, scales, zeros)
    kind = {}
    decls, body = [], []
    buf_id = [0]

    def new_buffer(ctype, count):
        buf_id[0] += 1
        b = f"buf{buf_id[0]}"
        decls.append(f"static {ctype} {b}[{count}];\n")
        return b

    inp = g.input[0].name
    kind[inp] = ("f32", "in0")
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    skip = set()
    weights = []
    for idx, n in enumerate(g.node):
        if id(n) in skip:
            continue
        op = n.op_type
        if op == "DequantizeLinear" and n.input[0] in inits:
            q = inits[n.input[0]]
            s = inits[n.input[1]].astype(np.float32).reshape(-1)
            z = inits[n.input[2]].reshape(-1) if len(n.input) > 2 else np.zeros(1, np.int64)
            wname = f"w{len(weights)}"
            ctype = {np.dtype(np.int8): "int8_t", np.dtype(np.uint8): "uint8_t",
                     np.dtype(np.int32): "int32_t"}[q.dtype]
            weights.append(c_array(ctype, wname, q) + c_array("float", wname + "_s", s) +
                           c_array("int32_t", wname + "_z", z))
            kind[n.output[0]] = ("w", wname, q.shape, len(s))
            continue
        if op == "QuantizeLinear":
            src = kind[n.input[0]]
            s = float(inits[n.input[1]].reshape(-1)[0])
            z = int(inits[n.input[2]].reshape(-1)[0])
            count = int(np.prod(shapes[n.input[0]]))
            b = new_buffer("uint8_t", count)
            assert src[0] == "f32"
            body.append(f"  for (int i = 0; i < {count}; ++i) {b}[i] = quantize({src[1]}[i], {s!r}f, {z});\n")
            kind[n.output[0]] = ("u8", b, s, z)
            continue
        if op == "DequantizeLinear":
            kind[n.output[0]] = ("dq", n.input[0])
            continue
        if op in ("Conv", "Gemm"):
            x = kind[kind[n.input[0]][1]] if kind[n.input[0]][0] == "dq" else None
            assert x is not None and x[0] == "u8", f"{n.name}: input is not dequantized 8-bit"
            w = kind[n.input[1]]
            bias = kind[n.input[2]] if len(n.input) > 2 else None
            # Relu and QuantizeLinear after it, folded into the loop.
            out_value = n.output[0]
            relu = False
            nxt = consumers.get(out_value, [])
            if len(nxt) == 1 and nxt[0].op_type == "Relu":
                relu = True
                skip.add(id(nxt[0]))
                out_value = nxt[0].output[0]
                nxt = consumers.get(out_value, [])
            quant = None
            if len(nxt) == 1 and nxt[0].op_type == "QuantizeLinear":
                qn = nxt[0]
                quant = (float(inits[qn.input[1]].reshape(-1)[0]), int(inits[qn.input[2]].reshape(-1)[0]))
                skip.add(id(qn))
                out_value = qn.output[0]
            xs, xz = x[2], x[3]
            wname = w[1]
            bname = bias[1] if bias else None
            if op == "Conv":
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                _, c, h, wd = shapes[n.input[0]]
                m, cg, kh, kw = w[2]
                group = attrs.get("group", 1)
                sh, sw = attrs.get("strides", [1, 1])
                dh, dw = attrs.get("dilations", [1, 1])
                pt, pl = attrs.get("pads", [0, 0, 0, 0])[:2]
                _, _, oh, ow = shapes[n.output[0]]
                count = m * oh * ow
                mg = m // group
                inner = (f"        for (int ic = 0; ic < {cg}; ++ic)\n"
                         f"          for (int ky = 0; ky < {kh}; ++ky) {{\n"
                         f"            const int iy = oy * {sh} - {pt} + ky * {dh};\n"
                         f"            if (iy < 0 || iy >= {h}) continue;\n"
                         f"            for (int kx = 0; kx < {kw}; ++kx) {{\n"
                         f"              const int ix = ox * {sw} - {pl} + kx * {dw};\n"
                         f"              if (ix < 0 || ix >= {wd}) continue;\n"
                         f"              acc += ((int32_t)X[((g * {cg} + ic) * {h} + iy) * {wd} + ix] - {xz}) *\n"
                         f"                     {wname}[((oc * {cg} + ic) * {kh} + ky) * {kw} + kx];\n"
                         f"            }}\n"
                         f"          }}\n")
                loop_open = (f"  for (int oc = 0; oc < {m}; ++oc) {{\n"
                             f"    const int g = oc / {mg};\n"
                             f"    const float mult = {xs!r}f * {wname}_s[{wname}_s_count == 1 ? 0 : oc];\n"
                             f"    for (int oy = 0; oy < {oh}; ++oy)\n"
                             f"      for (int ox = 0; ox < {ow}; ++ox) {{\n"
                             f"        int32_t acc = {bname + '[oc]' if bname else '0'};\n")
                at = f"(oc * {oh} + oy) * {ow} + ox"
                close = "      }\n  }\n"
            else:
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                assert attrs.get("transB", 0) == 1 and attrs.get("transA", 0) == 0
                k = shapes[n.input[0]][1]
                m = w[2][0]
                count = m
                inner = (f"      for (int i = 0; i < {k}; ++i) {{\n"
                         f"        acc += ((int32_t)X[i] - {xz}) * {wname}[oc * {k} + i];\n"
                         f"      }}\n")
                loop_open = (f"  for (int oc = 0; oc < {m}; ++oc) {{\n"
                             f"    const float mult = {xs!r}f * {wname}_s[{wname}_s_count == 1 ? 0 : oc];\n"
                             f"    {{\n"
                             f"      int32_t acc = {bname + '[oc]' if bname else '0'};\n")
                at = "oc"
                close = "    }\n  }\n"
            if out_value in [o.name for o in g.output]:
                dst, ctype = "out0", "float"
            else:
                ctype = "uint8_t" if quant else "float"
                dst = new_buffer(ctype, count)
            epi = "float v = (float)acc * mult;\n"
            if relu:
                epi += "        if (v < 0.0f) v = 0.0f;\n"
            if quant:
                epi += f"        {dst}[{at}] = quantize(v, {quant[0]!r}f, {quant[1]});\n"
                kind[out_value] = ("u8", dst, quant[0], quant[1])
            else:
                epi += f"        {dst}[{at}] = v;\n"
                kind[out_value] = ("f32", dst)
            body.append("  {\n    const uint8_t* X = " + x[1] + ";\n" + loop_open + inner +
                        "        " + epi + close + "  }\n")
            continue
        if op == "Relu":
            src = kind[n.input[0]]
            assert src[0] == "f32"
            count = int(np.prod(shapes[n.input[0]]))
            body.append(f"  for (int i = 0; i < {count}; ++i) if ({src[1]}[i] < 0.0f) {src[1]}[i] = 0.0f;\n")
            kind[n.output[0]] = src
            continue
        if op == "GlobalAveragePool":
            src = kind[n.input[0]]
            _, c, h, wd = shapes[n.input[0]]
            b = new_buffer("float", c)
            if src[0] == "dq":
                u = kind[src[1]]
                load = f"((float)((int32_t){u[1]}[c * {h * wd} + i] - {u[3]}) * {u[2]!r}f)"
            else:
                load = f"{src[1]}[c * {h * wd} + i]"
            body.append(f"  for (int c = 0; c < {c}; ++c) {{\n    float s = 0.0f;\n"
                        f"    for (int i = 0; i < {h * wd}; ++i) s += {load};\n"
                        f"    {b}[c] = s / {float(h * wd)!r}f;\n  }}\n")
            kind[n.output[0]] = ("f32", b)
            continue
        if op == "Flatten":
            kind[n.output[0]] = kind[n.input[0]]
            continue
        raise SystemExit(f"make_reference.py: {op} is not handled")
    in_elems = int(np.prod(shapes[inp]))
    out_name = g.output[0].name
    out_elems = int(np.prod(shapes[out_name]))
    in_dims = shapes[inp]
    out_dims = shapes[out_name]
    os.makedirs(out, exist_ok=True)
    weight_text = "".join(weights)
    # Each weight's scale count, for per-tensor or per-channel scales.
    for i in range(len(weights)):
        s_len = weight_text.split(f"w{i}_s[")[1].split("]")[0]
        weight_text += f"enum {{ w{i}_s_count = {s_len} }};\n"
    with open(os.path.join(out, name + ".h"), "w") as f:
        f.write(f"""/* {name}.h: plain C reference of {os.path.basename(model_path)} (make_reference.py). */
#ifndef REF_{name.upper()}_H_
#define REF_{name.upper()}_H_
#include <stddef.h>
#include <stdint.h>
typedef struct cuvil_aot_dim {{ int64_t coef; int32_t power; }} cuvil_aot_dim;
typedef struct cuvil_aot_tensor {{
  const char* name; int32_t dtype; int32_t elem_size; int32_t rank; const cuvil_aot_dim* dims;
}} cuvil_aot_tensor;
enum {{ CUVIL_AOT_OK = 0 }};
static inline int64_t cuvil_aot_elements(const cuvil_aot_tensor* t, int64_t batch) {{
  int64_t n = 1;
  for (int32_t i = 0; i < t->rank; ++i) {{
    int64_t d = t->dims[i].coef;
    for (int32_t p = 0; p < t->dims[i].power; ++p) d *= batch;
    n *= d;
  }}
  return n;
}}
#define {name}_NUM_INPUTS 1
#define {name}_NUM_OUTPUTS 1
extern const cuvil_aot_tensor {name}_inputs[1];
extern const cuvil_aot_tensor {name}_outputs[1];
size_t {name}_arena_bytes(int64_t batch);
int32_t {name}_run(const void* const* inputs, void* const* outputs, int64_t batch, void* arena);
#endif
""")
    dims_c = lambda ds: ", ".join(f"{{{d}, 0}}" for d in ds)
    with open(os.path.join(out, name + ".c"), "w") as f:
        f.write(f'#include "{name}.h"\n\n')
        f.write(weight_text)
        f.write("".join(decls))
        f.write(f"""
static const cuvil_aot_dim in_dims[] = {{{dims_c(in_dims)}}};
static const cuvil_aot_dim out_dims[] = {{{dims_c(out_dims)}}};
const cuvil_aot_tensor {name}_inputs[1] = {{{{"{inp}", 1, 4, {len(in_dims)}, in_dims}}}};
const cuvil_aot_tensor {name}_outputs[1] = {{{{"{out_name}", 1, 4, {len(out_dims)}, out_dims}}}};

size_t {name}_arena_bytes(int64_t batch) {{ (void)batch; return 0; }}

/* saturate(round_half_even(v / s) + z) to uint8, as QuantizeLinear. */
static uint8_t quantize(float v, float s, int32_t z) {{
  float q = __builtin_rintf(v / s) /* round half to even: the default mode */ + (float)z;
  if (q < 0.0f) q = 0.0f;
  if (q > 255.0f) q = 255.0f;
  return (uint8_t)(int32_t)q;
}}

int32_t {name}_run(const void* const* inputs, void* const* outputs, int64_t batch, void* arena) {{
  (void)batch; (void)arena;
  const float* in0 = (const float*)inputs[0];
  float* out0 = (float*)outputs[0];
{''.join(body)}  return 0;
}}
""")
    print(f"{name}: reference with {len(weights)} constant tensors, {in_elems} inputs, {out_elems} outputs")


if __name__ == "__main__":
    main()
