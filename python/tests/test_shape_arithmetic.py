"""Shape arithmetic as exporters write it, compiled once with free dims and run at several sizes.

Real models compute pads, ranges and resize targets from input shapes at run time: swin's window
padding (Shape -> Gather -> Mod -> Sub -> Mod -> Pad), detection transforms' ceil(H / 32) in
floating point (Cast -> Div -> Ceil -> Cast), decoders' arange(past, past + seq), segmentation
heads that resize back to the input's size. Each model here is compiled once with symbolic dims
(the shape-generic code the server runs) and must agree with numpy, or with the same model
compiled for the fixed shape, at every size.

Needs PYTHONPATH=build/python (python/CMakeLists.txt runs the class as one CTest test).
"""

import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import cuvil

OPSET = 13


def const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(value, dtype=dtype), name))


def model(nodes, inputs, outputs, opset=OPSET):
    graph = helper.make_graph(nodes, "shape_arith", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


def image_input(name="x", c=2):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, c, "H", "W"])


def shape_dim(prefix, src, axis):
    """Nodes computing Shape(src)[axis] as a 1-element int64 tensor named prefix."""
    return [
        helper.make_node("Shape", [src], [prefix + "_shape"]),
        const(prefix + "_axis", [axis]),
        helper.make_node("Gather", [prefix + "_shape", prefix + "_axis"], [prefix], axis=0),
    ]


def float_output(name="y", rank=4):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * rank)


def random_image(h, w, c=2, seed=0):
    return np.random.default_rng(seed).standard_normal((1, c, h, w)).astype(np.float32)


SIZES = [(7, 7), (9, 13), (20, 15), (1, 30)]


class ShapeArithmeticTest(unittest.TestCase):

    def test_window_padding_with_mod(self):
        # swin: pad_b = (7 - H % 7) % 7, pad_r likewise; integer Mod/Sub on shape values.
        nodes = shape_dim("h", "x", 2) + shape_dim("w", "x", 3) + [
            const("seven", [7]), const("zeros", [0, 0, 0, 0]), const("zero2", [0, 0])]
        for d in ("h", "w"):
            nodes += [
                helper.make_node("Mod", [d, "seven"], [d + "_m1"]),
                helper.make_node("Sub", ["seven", d + "_m1"], [d + "_s"]),
                helper.make_node("Mod", [d + "_s", "seven"], [d + "_pad"]),
            ]
        nodes += [
            helper.make_node("Concat", ["zeros", "zero2", "h_pad", "w_pad"], ["pads"], axis=0),
            helper.make_node("Pad", ["x", "pads"], ["y"]),
        ]
        m = cuvil.compile(model(nodes, [image_input()], [float_output()]))
        for h, w in SIZES:
            x = random_image(h, w)
            want = np.pad(x, [(0, 0), (0, 0), (0, (7 - h % 7) % 7), (0, (7 - w % 7) % 7)])
            got = m(x)[0]
            self.assertEqual(got.shape, want.shape, (h, w))
            np.testing.assert_array_equal(got, want)

    def test_float_ceil_division_pads_to_a_multiple(self):
        # Detection transforms: pad = int(ceil(float(max(H, W)) / 8.0)) * 8 - dim, computed
        # through float casts, ReduceMax, Div, Ceil and a cast back.
        nodes = shape_dim("h", "x", 2) + shape_dim("w", "x", 3) + [
            const("eight_f", 8.0, np.float32), const("eight", [8]),
            const("zeros", [0, 0, 0, 0]), const("zero2", [0, 0]),
            helper.make_node("Concat", ["h", "w"], ["hw"], axis=0),
            helper.make_node("Cast", ["hw"], ["hw_f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMax", ["hw_f"], ["m_f"], keepdims=1),
            helper.make_node("Cast", ["m_f"], ["m_i"], to=TensorProto.INT64),
            helper.make_node("Cast", ["m_i"], ["m_f2"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["m_f2", "eight_f"], ["q"]),
            helper.make_node("Ceil", ["q"], ["qc"]),
            helper.make_node("Cast", ["qc"], ["qi"], to=TensorProto.INT64),
            helper.make_node("Mul", ["qi", "eight"], ["side"]),
            helper.make_node("Sub", ["side", "h"], ["h_pad"]),
            helper.make_node("Sub", ["side", "w"], ["w_pad"]),
            helper.make_node("Concat", ["zeros", "zero2", "h_pad", "w_pad"], ["pads"], axis=0),
            helper.make_node("Pad", ["x", "pads"], ["y"]),
        ]
        m = cuvil.compile(model(nodes, [image_input()], [float_output()]))
        for h, w in SIZES:
            x = random_image(h, w)
            side = -(-max(h, w) // 8) * 8
            want = np.pad(x, [(0, 0), (0, 0), (0, side - h), (0, side - w)])
            np.testing.assert_array_equal(m(x)[0], want)

    def test_float_scale_and_truncating_cast_crop(self):
        # Crop to int(W * 0.75) and floor(H / 3.0) + 1 rows: a non-power-of-two denominator and
        # a fractional scale, truncated by Cast and floored by Floor.
        nodes = shape_dim("h", "x", 2) + shape_dim("w", "x", 3) + [
            const("three", 3.0, np.float32), const("scale", 0.75, np.float32),
            const("one", [1]), const("starts", [0, 0]), const("axes", [2, 3]),
            helper.make_node("Cast", ["h"], ["h_f"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["h_f", "three"], ["h_q"]),
            helper.make_node("Floor", ["h_q"], ["h_fl"]),
            helper.make_node("Cast", ["h_fl"], ["h_i"], to=TensorProto.INT64),
            helper.make_node("Add", ["h_i", "one"], ["h_end"]),
            helper.make_node("Cast", ["w"], ["w_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["w_f", "scale"], ["w_s"]),
            helper.make_node("Cast", ["w_s"], ["w_end"], to=TensorProto.INT64),
            helper.make_node("Concat", ["h_end", "w_end"], ["ends"], axis=0),
            helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"]),
        ]
        m = cuvil.compile(model(nodes, [image_input()], [float_output()]))
        for h, w in SIZES:
            x = random_image(h, w)
            want = x[:, :, :h // 3 + 1, :int(w * 0.75)]
            np.testing.assert_array_equal(m(x)[0], want)

    def test_range_between_shape_values(self):
        # Decoders: positions arange(past, past + seq) from two inputs' shapes.
        nodes = shape_dim("past", "k", 2) + shape_dim("seq", "ids", 1) + [
            helper.make_node("Add", ["past", "seq"], ["end1"]),
            const("sq", [0]),
            helper.make_node("Squeeze", ["past", "sq"], ["start"]),
            helper.make_node("Squeeze", ["end1", "sq"], ["end"]),
            const("step", 1),
            helper.make_node("Range", ["start", "end", "step"], ["pos"]),
        ]
        inputs = [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
            helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 2, "past", 4]),
        ]
        m = cuvil.compile(model(nodes, inputs,
                                [helper.make_tensor_value_info("pos", TensorProto.INT64, [None])]))
        for past, seq in [(0, 1), (16, 1), (12, 5), (3, 40)]:
            ids = np.zeros((1, seq), np.int64)
            k = np.zeros((1, 2, past, 4), np.float32)
            np.testing.assert_array_equal(m(ids, k)[0], np.arange(past, past + seq))

    def test_resize_to_another_inputs_size(self):
        # Segmentation heads: Resize(features, sizes = Shape(features)[:2] ++ Shape(image)[2:]).
        # One shape-generic compile against the same model compiled for each fixed shape (the
        # static path the conformance suite checks against ONNX Runtime).
        cases = [
            ("linear", "half_pixel"), ("linear", "align_corners"), ("linear", "asymmetric"),
            ("linear", "pytorch_half_pixel"), ("nearest", "asymmetric"),
            ("nearest", "half_pixel"), ("cubic", "half_pixel"),
        ]
        for mode, ctm in cases:
            nodes = [
                helper.make_node("Shape", ["f"], ["f_shape"]),
                const("s0", [0]), const("s2", [2]), const("s4", [4]),
                helper.make_node("Slice", ["f_shape", "s0", "s2"], ["nc"]),
                helper.make_node("Shape", ["img"], ["img_shape"]),
                helper.make_node("Slice", ["img_shape", "s2", "s4"], ["hw"]),
                helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
                helper.make_node("Resize", ["f", "", "", "sizes"], ["y"], mode=mode,
                                 coordinate_transformation_mode=ctm),
            ]
            inputs = [
                helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 3, "h", "w"]),
                helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 1, "H", "W"]),
            ]
            proto = model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                        [None] * 4)])
            generic = cuvil.compile(proto)
            for (h, w), (big_h, big_w) in [((4, 5), (13, 17)), ((7, 7), (7, 7)),
                                           ((6, 3), (2, 9)), ((1, 2), (5, 1))]:
                with self.subTest(mode=mode, ctm=ctm, h=h, w=w, H=big_h, W=big_w):
                    f = random_image(h, w, c=3, seed=h * 31 + w)
                    img = np.zeros((1, 1, big_h, big_w), np.float32)
                    fixed = cuvil.compile(proto, input_shapes={"f": [1, 3, h, w],
                                                               "img": [1, 1, big_h, big_w]})
                    want = fixed(f, img)[0]
                    got = generic(f, img)[0]
                    self.assertEqual(got.shape, (1, 3, big_h, big_w))
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    def test_unproven_equal_sizes_are_checked_per_request(self):
        # Reshape to another input's shape and GridSample with N from two inputs: sizes the rules
        # cannot prove equal are assumed equal and checked before each run.
        nodes = [
            helper.make_node("Shape", ["b"], ["b_shape"]),
            helper.make_node("Reshape", ["a", "b_shape"], ["y"]),
        ]
        inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
                  helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, "m"])]
        m = cuvil.compile(model(nodes, inputs, [float_output(rank=2)]))
        a = np.arange(12, dtype=np.float32).reshape(4, 3)
        np.testing.assert_array_equal(m(a, np.zeros((3, 4), np.float32))[0], a.reshape(3, 4))
        with self.assertRaisesRegex(ValueError, "cannot run on them"):
            m(a, np.zeros((3, 5), np.float32))
        grid_nodes = [helper.make_node("GridSample", ["x", "g"], ["y"], align_corners=1)]
        grid_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 3, 3]),
                       helper.make_tensor_value_info("g", TensorProto.FLOAT, ["k", 2, 2, 2])]
        gs = cuvil.compile(model(grid_nodes, grid_inputs, [float_output()], opset=16))
        x = np.arange(18, dtype=np.float32).reshape(2, 1, 3, 3)
        g = np.zeros((2, 2, 2, 2), np.float32)  # the centre of each image
        np.testing.assert_allclose(gs(x, g)[0], np.broadcast_to(x[:, :, 1:2, 1:2], (2, 1, 2, 2)))
        with self.assertRaisesRegex(ValueError, "cannot run on them"):
            gs(x, np.zeros((3, 2, 2, 2), np.float32))

    def test_extents_that_may_be_negative_are_refused(self):
        # pads end = -(W + 1): W - (W + 1) < 0 for every W; a symbolic extent or K that is not
        # provably non-negative would size buffers negatively at run time.
        nodes = shape_dim("w", "x", 3) + [
            const("one", [1]), const("z6", [0] * 6), const("z0", [0]),
            helper.make_node("Add", ["w", "one"], ["w1"]),
            helper.make_node("Neg", ["w1"], ["nw"]),
            helper.make_node("Concat", ["z6", "z0", "nw"], ["pads"], axis=0),
            helper.make_node("Pad", ["x", "pads"], ["y"]),
        ]
        with self.assertRaisesRegex(RuntimeError, "may be negative"):
            cuvil.compile(model(nodes, [image_input()], [float_output()]))
        nodes = shape_dim("w", "x", 3) + [
            const("ten", [10]),
            helper.make_node("Sub", ["w", "ten"], ["k"]),
            helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=3),
        ]
        outputs = [float_output(), helper.make_tensor_value_info("i", TensorProto.INT64, [None] * 4)]
        with self.assertRaisesRegex(RuntimeError, "may be negative"):
            cuvil.compile(model(nodes, [image_input()], outputs))

    def test_shape_values_not_exact_in_float_stay_run_time(self):
        # Div by a constant that is not a power of two: the float result itself (not a shape)
        # is computed by the model and must equal float32 arithmetic.
        nodes = shape_dim("w", "x", 3) + [
            const("three", 3.0, np.float32),
            helper.make_node("Cast", ["w"], ["w_f"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["w_f", "three"], ["y"]),
        ]
        m = cuvil.compile(model(nodes, [image_input()], [float_output(rank=1)]))
        for h, w in SIZES:
            got = m(random_image(h, w))[0]
            np.testing.assert_array_equal(got, np.array([w], np.float32) / np.float32(3.0))


try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the host
    torch = None


def export_torch(module, example, dynamic_axes, opset=OPSET):
    """torch.onnx.export of `module` (inputs input_i, outputs output_i) as an onnx.ModelProto."""
    import io
    example = example if isinstance(example, tuple) else (example,)
    names = [f"input_{i}" for i in range(len(example))]
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module.eval(), example, buf, opset_version=opset, input_names=names,
                          output_names=["output_0"], dynamic_axes=dynamic_axes)
    return onnx.load_from_string(buf.getvalue())


@unittest.skipIf(torch is None, "python3-torch is not installed")
class TorchShapeArithmeticTest(unittest.TestCase):
    """The same patterns as torch writes them (its tracer's Shape/Gather/Cast chains), one compile
    with free H and W, against torch eager at several sizes."""

    def check(self, module, example, dynamic_axes, inputs_at):
        proto = export_torch(module, example, dynamic_axes)
        compiled = cuvil.compile(proto)
        for size in inputs_at:
            xs = size if isinstance(size, tuple) else (size,)
            with torch.no_grad():
                want = module(*xs)
            got = compiled(*[x.numpy() for x in xs])[0]
            self.assertEqual(tuple(got.shape), tuple(want.shape), [tuple(x.shape) for x in xs])
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)

    def test_swin_window_padding(self):
        class WindowPad(torch.nn.Module):
            def forward(self, x):
                h, w = x.shape[2], x.shape[3]
                pad_b = (7 - h % 7) % 7
                pad_r = (7 - w % 7) % 7
                return F.pad(x, (0, pad_r, 0, pad_b)) * 2.0

        torch.manual_seed(0)
        self.check(WindowPad(), torch.randn(1, 3, 9, 9), {"input_0": {2: "H", 3: "W"}},
                   [torch.randn(1, 3, h, w) for h, w in [(9, 9), (14, 20), (7, 3), (30, 16)]])

    def test_detection_batching_pads_to_a_stride(self):
        # torchvision's GeneralizedRCNNTransform._onnx_batch_images: the largest side through
        # float32, ceil(size / 32) * 32, pads as traced tensors.
        class BatchImages(torch.nn.Module):
            def forward(self, x):
                stride = 32.0
                sizes = torch.stack([torch.tensor(x.shape[2]), torch.tensor(x.shape[3])])
                side = torch.max(sizes.to(torch.float32)).to(torch.int64)
                side = (torch.ceil(side.to(torch.float32) / stride) * stride).to(torch.int64)
                return F.pad(x, (0, side - x.shape[3], 0, side - x.shape[2]))

        self.check(BatchImages(), torch.randn(1, 3, 40, 50), {"input_0": {2: "H", 3: "W"}},
                   [torch.randn(1, 3, h, w) for h, w in [(40, 50), (64, 33), (1, 97)]])

    def test_segmentation_head_resizes_to_the_input(self):
        class Head(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

            def forward(self, x):
                y = self.conv(x)
                return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)

        torch.manual_seed(1)
        self.check(Head(), torch.randn(1, 3, 16, 16), {"input_0": {2: "H", 3: "W"}},
                   [torch.randn(1, 3, h, w) for h, w in [(16, 16), (23, 40), (5, 9)]])

    def test_sizes_declared_multiples_simplify(self):
        # RAFT's pattern: a stride-8 convolution gives ceil(H / 8) rows, a reshape by H // 8
        # gives floor(H / 8), and a 1x1 convolution needs the channels those make, a constant
        # only when H and W are multiples of 8 (RAFT's PyTorch code asserts it, the export drops
        # the assert). Declared with dim_multiples the sizes simplify; a request whose H is not a
        # multiple is refused; GridSample samples an image of symbolic size.
        class Pyramid(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.down = torch.nn.Conv2d(3, 4, 8, stride=8, padding=3)
                self.mix = torch.nn.Conv2d(16, 5, 1)

            def forward(self, x):
                f = self.down(x)  # [1, 4, floor((H - 2) / 8) + 1, ...]
                h8, w8 = x.shape[2] // 8, x.shape[3] // 8
                n = f.shape[2] * f.shape[3]
                corr = f.reshape(1, 4, 1, n).expand(1, 4, 4, n)
                corr = corr.reshape(1, 16 * n // (h8 * w8), h8, w8)
                y = self.mix(corr)
                grid = torch.tanh(y[:, :2].permute(0, 2, 3, 1))
                return F.grid_sample(y, grid, align_corners=False, padding_mode="border")

        torch.manual_seed(0)
        module = Pyramid()
        proto = export_torch(module, torch.randn(1, 3, 32, 48),
                             {"input_0": {2: "height", 3: "width"}}, opset=16)
        with self.assertRaisesRegex(ValueError, "channels of X"):
            cuvil.compile(proto)
        compiled = cuvil.compile(proto, dim_multiples={"height": 8, "width": 8})
        for h, w in [(32, 48), (16, 16), (64, 40)]:
            x = torch.randn(1, 3, h, w)
            with torch.no_grad():
                want = module(x).numpy()
            got = compiled(x.numpy())[0]
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        with self.assertRaisesRegex(ValueError, "dim 2 is 36, which no value"):
            compiled(torch.randn(1, 3, 36, 48).numpy())
        with self.assertRaisesRegex(ValueError, "must be from 2"):
            cuvil.compile(proto, dim_multiples={"height": 1})

    def test_halves_of_a_concatenated_batch(self):
        # raft: both images go through one encoder as cat([a, b]), then x[n:2n] is the second.
        class Halves(torch.nn.Module):
            def forward(self, a, b):
                x = torch.cat([a, b], dim=0) * 2.0
                n = a.shape[0]
                return x[n:2 * n] - x[:n]

        self.check(Halves(), (torch.randn(2, 3), torch.randn(2, 3)),
                   {"input_0": {0: "batch"}, "input_1": {0: "batch"}},
                   [(torch.randn(b, 3), torch.randn(b, 3)) for b in (1, 2, 5)])

    def test_tile_by_the_batch(self):
        # raft tiles a coordinate grid by the batch: repeats from the input's shape.
        class TileGrid(torch.nn.Module):
            def forward(self, x):
                grid = torch.arange(6, dtype=torch.float32).reshape(1, 2, 3)
                return grid.repeat(x.shape[0], 1, 1) * x.reshape(-1, 1, 1)

        self.check(TileGrid(), torch.randn(2), {"input_0": {0: "batch"}},
                   [torch.randn(b) for b in (1, 2, 4)])

    def test_decoder_positions_from_the_cache_length(self):
        class Positions(torch.nn.Module):
            def forward(self, ids, past):
                start = past.shape[2]
                pos = torch.arange(start, start + ids.shape[1])
                return ids + pos.unsqueeze(0)

        self.check(Positions(), (torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 2, 5, 4)),
                   {"input_0": {1: "seq"}, "input_1": {2: "past"}},
                   [(torch.randint(0, 100, (1, s)), torch.zeros(1, 2, p, 4))
                    for s, p in [(3, 5), (1, 16), (7, 0)]])


if __name__ == "__main__":
    unittest.main()
