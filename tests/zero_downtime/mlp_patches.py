"""Hand-written LLVM IR patches for the example mlp's kernels (tests of hot patching)."""
import re


def gemm_ir(symbol, k, n, panel, scale):
    """LLVM IR for a Gemm kernel with packed weights (args = {in [batch,k], weights
    [panels][k][panel], bias, out [batch,n]}): out[b,j] = scale * (bias[j] + sum_i in[b,i] *
    w[j/panel][i][j%panel]). scale 1 reproduces the compiled kernel."""
    return f"""
define i32 @{symbol}(ptr %args, i64 %batch) {{
entry:
  %in = load ptr, ptr %args
  %wp = getelementptr ptr, ptr %args, i64 1
  %w = load ptr, ptr %wp
  %bp = getelementptr ptr, ptr %args, i64 2
  %bias = load ptr, ptr %bp
  %op = getelementptr ptr, ptr %args, i64 3
  %out = load ptr, ptr %op
  %empty = icmp eq i64 %batch, 0
  br i1 %empty, label %exit, label %row
row:
  %b = phi i64 [ 0, %entry ], [ %b1, %row_end ]
  br label %col
col:
  %n = phi i64 [ 0, %row ], [ %n1, %col_end ]
  br label %dot
dot:
  %k = phi i64 [ 0, %col ], [ %k1, %dot ]
  %acc = phi float [ 0.0, %col ], [ %acc1, %dot ]
  %bk = mul i64 %b, {k}
  %ii = add i64 %bk, %k
  %ia = getelementptr float, ptr %in, i64 %ii
  %x = load float, ptr %ia
  %p = udiv i64 %n, {panel}
  %j = urem i64 %n, {panel}
  %pk = mul i64 %p, {k * panel}
  %k16 = mul i64 %k, {panel}
  %wi0 = add i64 %pk, %k16
  %wi = add i64 %wi0, %j
  %wa = getelementptr float, ptr %w, i64 %wi
  %wv = load float, ptr %wa
  %prod = fmul float %x, %wv
  %acc1 = fadd float %acc, %prod
  %k1 = add i64 %k, 1
  %kd = icmp eq i64 %k1, {k}
  br i1 %kd, label %col_end, label %dot
col_end:
  %bia = getelementptr float, ptr %bias, i64 %n
  %bv = load float, ptr %bia
  %s = fadd float %acc1, %bv
  %r = fmul float %s, {scale:e}
  %bn = mul i64 %b, {n}
  %oi = add i64 %bn, %n
  %oa = getelementptr float, ptr %out, i64 %oi
  store float %r, ptr %oa
  %n1 = add i64 %n, 1
  %nd = icmp eq i64 %n1, {n}
  br i1 %nd, label %row_end, label %col
row_end:
  %b1 = add i64 %b, 1
  %bd = icmp eq i64 %b1, %batch
  br i1 %bd, label %exit, label %row
exit:
  ret i32 0
}}
"""


def gemm_patch_ir(function, scale):
    """IR for a ListFunctions entry of a Gemm with a bias, from its signature
    "(float32[batch,K], float32[P,K,W], float32[B]) -> (float32[batch,N])"."""
    m = re.match(r"\(float32\[batch,(\d+)\], float32\[(\d+),(\d+),(\d+)\], float32\[\d+\]\) -> "
                 r"\(float32\[batch,(\d+)\]\)", function["signature"])
    if not m or function["op_type"] != "Gemm":
        raise ValueError(f"not a packed Gemm with bias: {function}")
    k, _, k2, panel, n = (int(g) for g in m.groups())
    if k != k2:
        raise ValueError(f"weights do not match the input width: {function['signature']}")
    return gemm_ir(function["symbol"], k, n, panel, scale)
