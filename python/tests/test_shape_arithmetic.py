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


if __name__ == "__main__":
    unittest.main()
