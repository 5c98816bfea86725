"""Tests of the cuvil Python package (python/CMakeLists.txt runs one class per CTest test).

Needs PYTHONPATH=build/python and CUVIL_MODELS_DIR (the zoo: ../shared/models from the source
root); torch tests skip when python3-torch is missing.
"""

import glob
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

import cuvil

MODELS_DIR = os.environ.get(
    "CUVIL_MODELS_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "models"))
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = ["lenet", "mlp", "mobilenet_v2", "resnet18", "transformer"]
TOL = 1e-3

try:
    import torch
except ImportError:  # pragma: no cover - depends on the host
    torch = None


def model_path(name):
    return os.path.join(MODELS_DIR, name, "model.onnx")


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


DYNAMIC_DIR = os.path.join(MODELS_DIR, "..", "models-dynamic")


def test_sets(name, models_dir=MODELS_DIR):
    """(inputs, expected output_0) of every test_data_set_* of zoo model `name`."""
    sets = []
    for d in sorted(glob.glob(os.path.join(models_dir, name, "test_data_set_*"))):
        inputs = [read_tensor(p) for p in sorted(glob.glob(os.path.join(d, "input_*.pb")))]
        sets.append((inputs, read_tensor(os.path.join(d, "output_0.pb"))))
    return sets


class ZooTest(unittest.TestCase):
    """Every zoo model from a path, bytes and a ModelProto, on its test data."""

    def check(self, model, name, models_dir=MODELS_DIR):
        sets = test_sets(name, models_dir)
        self.assertGreater(len(sets), 0, f"{name}: no test_data_set_*")
        for i, (inputs, expected) in enumerate(sets):
            outputs = model(*inputs)
            self.assertIsInstance(outputs, list)
            self.assertEqual(len(outputs), len(model.outputs))
            got = outputs[0]
            self.assertIsInstance(got, np.ndarray)
            self.assertEqual(got.shape, expected.shape, f"{name} set {i}")
            self.assertEqual(got.dtype, expected.dtype, f"{name} set {i}")
            np.testing.assert_allclose(got, expected, rtol=TOL, atol=TOL,
                                       err_msg=f"{name} test_data_set_{i}")

    def test_zoo(self):
        for name in ZOO:
            path = model_path(name)
            with open(path, "rb") as f:
                data = f.read()
            sources = {
                "path": path,
                "pathlib": pathlib.Path(path),
                "bytes": data,
                "ModelProto": onnx.load_from_string(data),
            }
            if name != "mlp":  # pathlib is the same code path as str; once is enough.
                del sources["pathlib"]
            for kind, source in sources.items():
                with self.subTest(model=name, source=kind):
                    model = cuvil.compile(source)
                    self.check(model, name)


    def test_free_dimensions_beyond_the_batch(self):
        """One compile of each dynamic-zoo model serves data sets that differ in seq, H and W."""
        for name in ["seq_encoder", "lstm_tagger", "unet_dynamic"]:
            with self.subTest(model=name):
                model = cuvil.compile(os.path.join(DYNAMIC_DIR, name, "model.onnx"))
                self.check(model, name, DYNAMIC_DIR)
        unet = cuvil.compile(os.path.join(DYNAMIC_DIR, "unet_dynamic", "model.onnx"))
        self.assertEqual(unet.inputs[0].shape, ["batch", 3, "height", "width"])
        with self.assertRaisesRegex(ValueError, r"height=63.*2\*floor\(height / 2\)"):
            unet(np.zeros((1, 3, 63, 64), np.float32))
        self.assertEqual(unet(np.zeros((1, 3, 62, 64), np.float32))[0].shape, (1, 2, 62, 64))
        with self.assertRaisesRegex(ValueError, "height, width"):
            unet.arena_bytes(1)  # Sized per call, not by the batch alone.


class ApiTest(unittest.TestCase):
    """Properties, inputs by name, batches, threads, torch-free conveniences."""

    @classmethod
    def setUpClass(cls):
        cls.model = cuvil.compile(model_path("mlp"), intra_op_threads=2)
        cls.sets = test_sets("mlp")

    def test_signature(self):
        m = self.model
        self.assertEqual(len(m.inputs), 1)
        info = m.inputs[0]
        self.assertEqual(info.dtype, "float32")
        self.assertEqual(info.shape[0], m.symbol)  # symbolic dim as a string
        self.assertTrue(all(isinstance(d, int) for d in info.shape[1:]))
        self.assertIn(info.name, repr(m))
        self.assertEqual(m.outputs[0].dtype, "float32")
        self.assertEqual(m.intra_op_threads, 2)
        self.assertEqual(m.opt_level, 3)
        # mlp keeps batch-scaled intermediates: scratch grows with the batch.
        self.assertGreater(m.arena_bytes(8), m.arena_bytes(1))

    def test_kernels_and_timings(self):
        kernels = self.model.kernels
        self.assertGreater(len(kernels), 0)
        self.assertEqual([k["index"] for k in kernels], list(range(len(kernels))))
        self.assertTrue(all(k["op_type"] and k["symbol"] for k in kernels))
        timings = self.model.timings
        self.assertIn("jit_load", timings)
        self.assertGreater(len(timings), 1)
        self.assertTrue(all(ms >= 0 for ms in timings.values()))

    def test_by_name_and_batches(self):
        inputs, expected = self.sets[0]
        name = self.model.inputs[0].name
        (by_name,) = self.model(**{name: inputs[0]})
        np.testing.assert_allclose(by_name, expected, rtol=TOL, atol=TOL)
        # Batch 3: the same row three times gives the same output three times.
        x3 = np.repeat(inputs[0], 3, axis=0)
        (y3,) = self.model(x3)
        self.assertEqual(y3.shape[0], 3 * expected.shape[0])
        for r in range(3):
            np.testing.assert_allclose(y3[r:r + 1], expected, rtol=TOL, atol=TOL)

    def test_output_sizes_the_data_decides(self):
        """NonZero and Unique: one compile, each output exactly as long as the data makes it."""
        from onnx import TensorProto, helper
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5])
        nz = helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "n"])
        u = helper.make_tensor_value_info("u", TensorProto.FLOAT, ["m"])
        graph = helper.make_graph(
            [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Unique", ["x"], ["u"], sorted=1)], "data_sized", [x], [nz, u])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        proto.ir_version = 8
        model = cuvil.compile(proto)
        for data in ([[0, 1, 0, 2, 2]], [[0, 0, 0, 0, 0], [3, 3, 0, 1, 0]], [[1, 2, 3, 4, 5]]):
            a = np.array(data, np.float32)
            got_nz, got_u = model(a)
            np.testing.assert_array_equal(got_nz, np.array(np.nonzero(a)))
            np.testing.assert_array_equal(got_u, np.unique(a))

    def test_non_contiguous_and_lists_are_copied(self):
        inputs, expected = self.sets[0]
        x = inputs[0]
        wide = np.zeros((x.shape[0], x.shape[1] * 2), np.float32)
        wide[:, ::2] = x
        strided = wide[:, ::2]
        self.assertFalse(strided.flags["C_CONTIGUOUS"])
        (y,) = self.model(strided)
        np.testing.assert_allclose(y, expected, rtol=TOL, atol=TOL)
        (y,) = self.model(x.tolist())  # converted to the input's dtype
        np.testing.assert_allclose(y, expected, rtol=TOL, atol=TOL)

    def test_inputs_not_modified_and_outputs_fresh(self):
        inputs, _ = self.sets[0]
        before = inputs[0].copy()
        (a,) = self.model(inputs[0])
        (b,) = self.model(inputs[0])
        np.testing.assert_array_equal(inputs[0], before)
        self.assertFalse(np.shares_memory(a, b))
        np.testing.assert_array_equal(a, b)

    def test_threads_share_a_model(self):
        inputs, expected = self.sets[0]
        errors = []

        def work():
            try:
                for _ in range(50):
                    (y,) = self.model(inputs[0])
                    np.testing.assert_allclose(y, expected, rtol=TOL, atol=TOL)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_options(self):
        m = cuvil.compile(model_path("mlp"), opt_level=1, dim_overrides={self.model.symbol: 2})
        self.assertEqual(m.opt_level, 1)
        self.assertEqual(m.inputs[0].shape[0], 2)
        inputs, expected = self.sets[0]
        (y,) = m(np.repeat(inputs[0], 2, axis=0))
        np.testing.assert_allclose(y[:1], expected, rtol=TOL, atol=TOL)
        with self.assertRaisesRegex(TypeError, "unknown option 'bogus'"):
            cuvil.compile(model_path("mlp"), bogus=1)
        with self.assertRaisesRegex(ValueError, "opt_level must be 0..3"):
            cuvil.compile(model_path("mlp"), opt_level=7)

    def test_example_inputs_check(self):
        inputs, _ = self.sets[0]
        cuvil.compile(model_path("mlp"), example_inputs=inputs)
        with self.assertRaises(ValueError):
            cuvil.compile(model_path("mlp"), example_inputs=[np.zeros((1, 3), np.float32)])


class ErrorTest(unittest.TestCase):
    """Bad paths, bytes and inputs raise ValueError carrying Cuvil's message."""

    @classmethod
    def setUpClass(cls):
        cls.model = cuvil.compile(model_path("mlp"))

    def test_bad_path(self):
        with self.assertRaisesRegex(ValueError, "cannot open model .*no_such_model.onnx"):
            cuvil.compile("/nonexistent/no_such_model.onnx")

    def test_malformed_bytes(self):
        with self.assertRaisesRegex(ValueError, "not a valid ONNX model"):
            cuvil.compile(b"\x08\x07garbage that is not a model\xff\xff\xff")
        with self.assertRaisesRegex(ValueError, "not a valid ONNX model"):
            cuvil.compile(b"")

    def test_wrong_type(self):
        with self.assertRaisesRegex(TypeError, "model must be a path"):
            cuvil.compile(42)

    def test_wrong_shape(self):
        name = self.model.inputs[0].name
        with self.assertRaisesRegex(ValueError, f"input '{name}'.*expected"):
            self.model(np.zeros((1, 3), np.float32))
        with self.assertRaisesRegex(ValueError, f"input '{name}': expected rank"):
            self.model(np.zeros((784,), np.float32))
        with self.assertRaisesRegex(ValueError, "must be at least 1"):
            self.model(np.zeros((0, self.model.inputs[0].shape[1]), np.float32))

    def test_wrong_dtype(self):
        name = self.model.inputs[0].name
        width = self.model.inputs[0].shape[1]
        with self.assertRaisesRegex(ValueError,
                                    f"input '{name}': expected dtype float32, got float64"):
            self.model(np.zeros((1, width), np.float64))
        with self.assertRaisesRegex(ValueError, "expected dtype float32, got int64"):
            self.model(np.zeros((1, width), np.int64))
        big_endian = np.zeros((1, width), ">f4")
        with self.assertRaisesRegex(ValueError, "expected dtype float32"):
            self.model(big_endian)

    def test_wrong_arity_and_names(self):
        x = np.zeros((1, self.model.inputs[0].shape[1]), np.float32)
        with self.assertRaisesRegex(ValueError, "expected 1 inputs, got 2"):
            self.model(x, x)
        with self.assertRaisesRegex(ValueError, "missing input"):
            self.model()
        with self.assertRaisesRegex(ValueError, "has no input 'nope'"):
            self.model(nope=x)
        with self.assertRaisesRegex(ValueError, "given twice"):
            self.model(x, **{self.model.inputs[0].name: x})

    def test_bad_aot_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(ValueError, "one of x86_64, aarch64"):
                self.model.save_aot(d, target="sparc")
            with self.assertRaises(ValueError):
                self.model.save_aot(d, name="not an identifier")


class AotTest(unittest.TestCase):
    """save_aot writes what `cuvilc compile --aot` writes."""

    def check_library(self, out, name, target_machine):
        lib = os.path.join(out, f"lib{name}.a")
        header = os.path.join(out, f"{name}.h")
        self.assertTrue(os.path.isfile(lib), lib)
        self.assertTrue(os.path.isfile(header), header)
        with open(header) as f:
            text = f.read()
        self.assertIn(f"int {name}_run(", text)
        self.assertIn(f"{name}_arena_bytes", text)
        with open(lib, "rb") as f:
            data = f.read()
        self.assertTrue(data.startswith(b"!<arch>\n"))
        self.assertIn(target_machine, data)  # ELF e_machine of the members

    def test_host_and_aarch64(self):
        model = cuvil.compile(model_path("mlp"))
        with tempfile.TemporaryDirectory() as d:
            report = model.save_aot(d)
            # The default name is the file's stem, as with cuvilc.
            self.assertEqual(report["library"], os.path.join(d, "libmodel.a"))
            self.assertGreater(report["weights_bytes"], 0)
            self.assertGreater(report["code_bytes"], 0)
            self.assertEqual(os.path.getsize(report["library"]), report["library_bytes"])
            self.check_library(d, "model", b"ELF")
            if cuvil.host_arch() == "x86_64":
                # As cuvilc writes it: one body per x86-64 level, chosen at run time (model_tier()
                # names the CPU of each).
                with open(report["library"], "rb") as f:
                    data = f.read()
                for level in (b"x86-64-v4", b"x86-64-v3", b"x86-64\0"):
                    self.assertIn(level, data)
            report = model.save_aot(os.path.join(d, "arm"), target="aarch64", name="mlp_arm")
            self.check_library(os.path.join(d, "arm"), "mlp_arm", b"ELF")
            with open(report["library"], "rb") as f:
                data = f.read()
            # EM_AARCH64 (183) in the members' ELF headers: ELF64 LE, e_type REL, e_machine 0xb7.
            self.assertIn(b"\x01\x00\xb7\x00", data)

    def run_library(self, out, name, model, cc="cc", runner=()):
        """Builds examples/aot/run_model.c against out/libNAME.a and runs every data set."""
        exe = os.path.join(out, f"run_{name}")
        subprocess.run(
            [cc, "-O2", "-Wall", "-Werror", f"-I{out}", f"-DMODEL={name}",
             os.path.join(SOURCE_DIR, "examples", "aot", "run_model.c"),
             os.path.join(SOURCE_DIR, "examples", "aot", "tensor_proto.c"),
             os.path.join(out, f"lib{name}.a"), "-lm", "-o", exe], check=True)
        sets = sorted(glob.glob(os.path.join(MODELS_DIR, model, "test_data_set_*")))
        self.assertGreater(len(sets), 0)
        for d in sets:
            r = subprocess.run([*runner, exe, d, "--atol", "1e-3", "--rtol", "1e-3"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, f"{name} on {d}: {r.stdout}{r.stderr}")
            self.assertIn("PASS", r.stdout)

    @unittest.skipIf(shutil.which("cc") is None, "no C compiler")
    def test_library_runs(self):
        model = cuvil.compile(model_path("mlp"))
        with tempfile.TemporaryDirectory() as d:
            model.save_aot(d, name="mlp")
            self.run_library(d, "mlp", "mlp")

    @unittest.skipIf(shutil.which("aarch64-linux-gnu-gcc") is None or
                     shutil.which("qemu-aarch64") is None, "no aarch64 cross compiler or qemu")
    def test_aarch64_library_runs(self):
        model = cuvil.compile(model_path("lenet"))
        with tempfile.TemporaryDirectory() as d:
            model.save_aot(d, target="aarch64", name="lenet")
            self.run_library(d, "lenet", "lenet", cc="aarch64-linux-gnu-gcc",
                             runner=("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"))

    def test_from_bytes(self):
        with open(model_path("lenet"), "rb") as f:
            model = cuvil.compile(f.read())
        with tempfile.TemporaryDirectory() as d:
            model.save_aot(d, name="lenet_from_bytes")
            self.check_library(d, "lenet_from_bytes", b"ELF")
            model.save_aot(d, target="aarch64", name="lenet_arm")
            self.check_library(d, "lenet_arm", b"ELF")


@unittest.skipIf(torch is None, "python3-torch is not installed (apt-get install python3-torch)")
class TorchTest(unittest.TestCase):
    """torch.nn.Module compiled through ONNX export, compared with torch's own output."""

    def compare(self, module, example, batches):
        module.eval()
        model = cuvil.compile(module, example)
        self.assertEqual(model.inputs[0].name, "input_0")
        self.assertEqual(model.inputs[0].shape[0], "batch")
        for b in batches:
            x = torch.randn((b,) + tuple(example.shape[1:]))
            with torch.no_grad():
                want = module(x)
            got = model(x)
            self.assertEqual(len(got), 1)
            self.assertIsInstance(got[0], torch.Tensor)
            self.assertEqual(tuple(got[0].shape), tuple(want.shape))
            torch.testing.assert_close(got[0], want, rtol=TOL, atol=TOL)
            # numpy in, numpy out, same numbers.
            (np_out,) = model(x.numpy())
            self.assertIsInstance(np_out, np.ndarray)
            np.testing.assert_allclose(np_out, want.numpy(), rtol=TOL, atol=TOL)
        return model

    def test_mlp(self):
        torch.manual_seed(1)
        module = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
            torch.nn.Softmax(dim=1))
        self.compare(module, torch.randn(2, 32), [1, 2, 7])

    def test_convnet(self):
        torch.manual_seed(2)

        class ConvNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(8)
                self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
                self.fc = torch.nn.Linear(16 * 7 * 7, 5)

            def forward(self, x):
                x = torch.relu(self.bn(self.conv1(x)))
                x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 1)
                return self.fc(torch.flatten(x, 1))

        model = self.compare(ConvNet(), torch.randn(1, 3, 16, 16), [1, 3])
        self.assertTrue(any("Conv" in k["op_type"] for k in model.kernels), model.kernels)

    def test_needs_example(self):
        with self.assertRaisesRegex(ValueError, "needs example_inputs"):
            cuvil.compile(torch.nn.Linear(2, 2))

    def test_non_contiguous_tensor(self):
        torch.manual_seed(3)
        module = torch.nn.Linear(8, 4).eval()
        model = cuvil.compile(module, torch.randn(1, 8))
        x = torch.randn(8, 3).t()  # [3, 8], not contiguous
        self.assertFalse(x.is_contiguous())
        (got,) = model(x)
        with torch.no_grad():
            torch.testing.assert_close(got, module(x), rtol=TOL, atol=TOL)


if __name__ == "__main__":
    unittest.main()
