#!/usr/bin/python3
"""Bad-input corpus: drives one real cuvil-server with the cases in cases.jsonl (broken models,
bad configs, bad requests on both protocols, hostile admin/repository calls) and checks each gets
the expected status and message. Then checks the server is alive and mlp and lenet still return
their reference outputs.

usage: run_bad_inputs.py SERVER_BINARY PY_STUB_DIR EXAMPLE_REPO SHARED_MODELS [CASES_FILE]
       [--only SUBSTRING] [--verbose]

Case file: one JSON object per line ('#' lines are comments). Keys:
  id      unique name
  do      http | http_raw | grpc_infer | grpc_stream | grpc_load | grpc_unload | grpc_metadata
  expect  {"http": 400} or {"grpc": "INVALID_ARGUMENT"} ({"grpc": "OK"} for success)
  msg     substring the error message must contain ("" = any)
  files   optional {repo-relative path: content} placed in the temp repository first
  cleanup optional list of repo-relative paths removed afterwards
and per action:
  http        method, path, headers, body: {"json": V} | {"text": S} | {"nest": depth} |
              {"zeros": n}, optional "binary": n (zero bytes after the JSON, with an
              Inference-Header-Content-Length of the JSON's length unless headers set one),
              "chunked": true, "no_host": true; "HOSTPORT" in a header value is the server's
              HTTP host:port; body {"infer_zeros": [n, shape]} is an mlp-style JSON infer body
              whose one FP32 input "input" of `shape` has n zeros as data
  http_raw    raw: the request's bytes as text ("HOSTPORT" replaced, "REPEAT" replaced by
              repeat: [text, count] repeated), optional zeros: n (zero bytes appended)
  grpc_infer  req: ModelInferRequest as JSON (json_format), raw: [byte counts of zero tensors],
              optional raw_repeat: [count, bytes] (that many more zero entries), inputs_repeat: n
              (n more empty inputs), outputs_repeat: n (n more outputs named "output"),
              params_repeat: n (n more request parameters), input_params_repeat: n (n more
              parameters on the first input), shape_repeat: n (n more dims of 1 on the first
              input), wire_append: [hex, count] (bytes appended to the serialised message, which
              is then sent as it is); grpc_stream takes the same keys
  grpc_load   name, params: {key: {"string": S} | {"bytes": content} | {"int": N} | {"bool": B}}
  grpc_unload name
Content values anywhere may be {"$model": MODEL_SPEC} (bytes; base64 text inside JSON bodies),
{"$json": V} (V serialised as JSON text), {"$zeros": n}, {"$symlink": target} (files only) or a
plain string. MODEL_SPEC is {"gen": NAME, ...}: see GENERATORS below.
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np
import onnx
from google.protobuf import json_format
from onnx import TensorProto, helper, numpy_helper

MAX_REQUEST_BYTES = 4 << 20  # The server runs with this limit, so oversized bodies stay cheap.
# And with this in-flight budget (--max-inflight-bytes), so what a body may expand into is
# refused at a size the corpus can send.
# Half of it is for requests, the other half set aside for gRPC's receive buffers; at least 10
# times MAX_REQUEST_BYTES, so gRPC takes messages of that size.
MAX_INFLIGHT_BYTES = 40 << 20


# ---------------------------------------------------------------------------------------------
# Model generators: every broken model is described in the case file by one of these plus its
# arguments.

def _model(nodes, inputs, outputs, initializers=(), opset=13, ir=8, domain_opsets=None):
    graph = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] if opset is not None else []
    for domain, version in (domain_opsets or {}).items():
        opsets.append(helper.make_opsetid(domain, version))
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = ir
    return m.SerializeToString()


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def gen_tiny(opset=13, ir=8, op="Relu", domain="", domain_opsets=None, in_shape=("batch", 4),
             out_shape=("batch", 4), elem="FLOAT", attrs=None):
    """x -> op -> y: the smallest loadable model when left at its defaults."""
    e = getattr(TensorProto, elem)
    node = helper.make_node(op, ["x"], ["y"], domain=domain, **(attrs or {}))
    return _model([node], [_vi("x", list(in_shape), e)], [_vi("y", list(out_shape), e)],
                  opset=opset, ir=ir, domain_opsets=domain_opsets)


def gen_add_const(w_dims=(4,), w_values=None, ext=None, raw_bytes=None, in_shape=("batch", 4)):
    """y = x + W. W inline (values), raw (raw_bytes hex) or external (ext: key -> value)."""
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=list(w_dims))
    if ext is not None:
        w.data_location = TensorProto.EXTERNAL
        for k, v in ext.items():
            w.external_data.add(key=k, value=str(v))
    elif raw_bytes is not None:
        w.raw_data = bytes.fromhex(raw_bytes)
    else:
        n = int(np.prod(w_dims)) if w_values is None else len(w_values)
        w.float_data.extend(w_values if w_values is not None else [1.0] * n)
    node = helper.make_node("Add", ["x", "W"], ["y"])
    return _model([node], [_vi("x", list(in_shape))], [_vi("y", ["batch", 4])], [w])


def gen_cyclic(kind="two"):
    """Nodes whose inputs depend on their own outputs."""
    if kind == "self":
        nodes = [helper.make_node("Add", ["x", "t"], ["t"])]
    else:
        nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    out = "t" if kind == "self" else "a"
    return _model(nodes, [_vi("x", ["batch", 4])], [_vi(out, ["batch", 4])])


def gen_dangling():
    """A node reads a tensor nothing produces."""
    node = helper.make_node("Add", ["x", "ghost"], ["y"])
    return _model([node], [_vi("x", ["batch", 4])], [_vi("y", ["batch", 4])])


def gen_unproduced_output():
    node = helper.make_node("Relu", ["x"], ["y"])
    return _model([node], [_vi("x", ["batch", 4])], [_vi("z", ["batch", 4])])


def gen_no_outputs():
    node = helper.make_node("Relu", ["x"], ["y"])
    return _model([node], [_vi("x", ["batch", 4])], [])


def gen_reshape_huge(shape):
    """x reshaped to a constant shape (huge or overflowing element counts)."""
    s = numpy_helper.from_array(np.array(shape, dtype=np.int64), "s")
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    return _model([node], [_vi("x", ["batch", 4])], [_vi("y", None)], [s])


def gen_raw(hex=None, text=None):
    return bytes.fromhex(hex) if hex is not None else text.encode()


def gen_file(path):
    with open(path.replace("shared:", SHARED + "/").replace("repo:", REPO + "/"), "rb") as f:
        return f.read()


def gen_truncate(of, keep):
    data = make_model(of)
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    return data[:n]


def gen_bitflip(of, offsets, bit=0):
    data = bytearray(make_model(of))
    for off in offsets:
        data[off % len(data)] ^= 1 << bit
    return bytes(data)


def gen_edit(of, edit):
    """Parses a model and changes one field: a structural edit protobuf still accepts."""
    m = onnx.ModelProto()
    m.ParseFromString(make_model(of))
    if edit == "node_empty_op":
        m.graph.node[0].op_type = ""
    elif edit == "dup_output":
        m.graph.output.append(m.graph.output[0])
    elif edit == "dup_input":
        m.graph.input.append(m.graph.input[0])
    elif edit == "input_no_type":
        m.graph.input[0].ClearField("type")
    elif edit == "drop_initializers":
        del m.graph.initializer[:]
    elif edit == "weights_short":
        for t in m.graph.initializer:
            if len(t.raw_data) > 8:
                t.raw_data = t.raw_data[:8]
                break
    elif edit == "weights_wrong_dtype":
        m.graph.initializer[0].data_type = 999
    elif edit == "neg_dim":
        m.graph.initializer[0].dims[0] = -5
    elif edit == "gemm_bad_attr":
        for n in m.graph.node:
            if n.op_type == "Gemm":
                n.attribute.append(helper.make_attribute("transB", "yes"))
                del n.attribute[:-1]
                break
    elif edit == "input_elem_type_string":
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    else:
        raise ValueError(f"unknown edit {edit}")
    return m.SerializeToString()


GENERATORS = {
    "tiny": gen_tiny, "add_const": gen_add_const, "cyclic": gen_cyclic, "dangling": gen_dangling,
    "unproduced_output": gen_unproduced_output, "no_outputs": gen_no_outputs,
    "reshape_huge": gen_reshape_huge, "raw": gen_raw, "file": gen_file, "truncate": gen_truncate,
    "bitflip": gen_bitflip, "edit": gen_edit,
}


def make_model(spec):
    spec = dict(spec)
    return GENERATORS[spec.pop("gen")](**spec)


def content(value):
    """Bytes for a file or a bytes parameter."""
    if isinstance(value, dict):
        if "$model" in value:
            return make_model(value["$model"])
        if "$json" in value:
            return json.dumps(value["$json"]).encode()
        if "$zeros" in value:
            return b"\0" * value["$zeros"]
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"bad content {value!r}")


def resolve_json(value):
    """A JSON body with {"$model": ...} as base64 text and {"$json": ...} as JSON text."""
    if isinstance(value, dict):
        if "$model" in value:
            return base64.b64encode(make_model(value["$model"])).decode()
        if "$json" in value:
            return json.dumps(value["$json"])
        return {k: resolve_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_json(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Clients.

def http_request(addr, method, path, headers=None, body=b"", chunked=False, no_host=False):
    """One HTTP/1.1 request on its own connection; returns (status, body bytes, headers)."""
    host, port = addr.rsplit(":", 1)
    hdrs = {} if no_host else {"Host": addr}
    hdrs["Connection"] = "close"
    if chunked:
        hdrs["Transfer-Encoding"] = "chunked"
    elif body or method == "POST":
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    payload = head.encode("latin-1") + b"\r\n"
    if chunked:
        step = 1 << 16
        for i in range(0, len(body), step):
            part = body[i:i + step]
            payload += f"{len(part):x}\r\n".encode() + part + b"\r\n"
        payload += b"0\r\n\r\n"
    else:
        payload += body
    with socket.create_connection((host, int(port)), timeout=30) as s:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # The server may answer (413) and close before reading everything.
        data = b""
        try:
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    if not data:
        return None, b"", {}
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, rest, headers


def raw_request(addr, payload):
    """Sends `payload` on a fresh connection; returns (status, body bytes) of the answer."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # Answered and closed before it read everything (ENOTCONN, EPIPE, reset).
        data = b""
        try:
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        except (OSError, socket.timeout):
            pass
    if not data:
        return None, b""
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b"\r\n")[0].split()[1])
    while 100 <= status < 200 and rest:  # An interim answer (100 Continue): the final one follows.
        head, _, rest = rest.partition(b"\r\n\r\n")
        status = int(head.split(b"\r\n")[0].split()[1])
    return status, rest


def error_text(body):
    try:
        return str(json.loads(body).get("error", body.decode(errors="replace")))
    except Exception:  # noqa: BLE001 - any non-JSON body is shown as it is
        return body.decode(errors="replace")


# ---------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, server, stubs, repo, models):
        sys.path.insert(0, stubs)
        global pb, pb_grpc
        import grpc_service_pb2 as pb  # noqa: E402
        import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
        self.tmp = tempfile.mkdtemp(prefix="cuvil-bad-inputs-")
        self.repo = os.path.join(self.tmp, "repo")
        shutil.copytree(repo, self.repo)
        self.models = models
        self.log = []
        self.proc = subprocess.Popen(
            [server, "--model-repository", self.repo, "--model-control-mode", "explicit",
             "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
             "--max-request-bytes", str(MAX_REQUEST_BYTES),
             "--max-inflight-bytes", str(MAX_INFLIGHT_BYTES), "--exit-timeout-secs", "5"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        deadline = time.time() + 60
        self.grpc_addr = self.http_addr = None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening grpc=(\S+) http=(\S+) metrics=(\S+)", line)
            if m:
                self.grpc_addr, self.http_addr = m.group(1), m.group(2)
            if "server ready" in line:
                break
        if not self.grpc_addr:
            raise SystemExit("server did not report its ports:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True).start()
        opts = [("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 64 << 20)]
        self.channel = grpc.insecure_channel(self.grpc_addr, options=opts)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def close(self):
        self.channel.close()
        rc = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = "hung on SIGTERM"
        else:
            rc = self.proc.returncode
        shutil.rmtree(self.tmp, ignore_errors=True)
        return rc

    # Setup: the example models, loaded explicitly.
    def load_examples(self):
        for name in ("mlp", "lenet"):
            self.stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=name),
                                          timeout=120)

    def place_files(self, files):
        for rel, value in files.items():
            path = os.path.join(self.repo, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if isinstance(value, dict) and "$symlink" in value:
                os.symlink(value["$symlink"], path)
                continue
            with open(path, "wb") as f:
                f.write(content(value))

    def remove_files(self, paths):
        for rel in paths:
            path = os.path.join(self.repo, rel)
            if os.path.islink(path) or os.path.isfile(path):
                os.remove(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)

    # Each action returns (status, message): status an int (HTTP) or a gRPC code name.
    def do_http(self, c):
        b = c.get("body", {})
        if "json" in b:
            body = json.dumps(resolve_json(b["json"])).encode()
        elif "text" in b:
            body = b["text"].encode("utf-8", "surrogatepass")
        elif "nest" in b:
            body = b"[" * b["nest"] + b"]" * b["nest"]
            if b.get("in_object"):
                body = b'{"inputs":' + body + b"}"
        elif "zeros" in b:
            body = b"\0" * b["zeros"]
        elif "infer_zeros" in b:
            n, shape = b["infer_zeros"]
            body = (json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": shape,
                                            "data": []}]})[:-4] + ",".join(["0"] * n) + "]}]}")
            body = body.encode()
        else:
            body = b""
        headers = {k: v.replace("HOSTPORT", self.http_addr) for k, v in c.get("headers", {}).items()}
        if "binary" in c:
            headers.setdefault("Inference-Header-Content-Length", str(len(body)))
            body += b"\0" * c["binary"]
        status, out, _ = http_request(self.http_addr, c.get("method", "POST"), c["path"], headers,
                                      body, chunked=c.get("chunked", False),
                                      no_host=c.get("no_host", False))
        return status, error_text(out) if status != 200 else out.decode(errors="replace")

    def do_http_raw(self, c):
        text = c["raw"].replace("HOSTPORT", self.http_addr)
        if "repeat" in c:
            piece, count = c["repeat"]
            text = text.replace("REPEAT", piece * count)
        payload = text.encode("latin-1") + b"\0" * c.get("zeros", 0)
        status, out = raw_request(self.http_addr, payload)
        return status, error_text(out) if status != 200 else out.decode(errors="replace")

    def _grpc(self, fn, *args, **kw):
        try:
            r = fn(*args, timeout=60, **kw)
            return "OK", str(r)
        except grpc.RpcError as e:
            return e.code().name, e.details() or ""

    def build_infer(self, c):
        req = json_format.ParseDict(c.get("req", {}), pb.ModelInferRequest())
        for n in c.get("raw", []):
            req.raw_input_contents.append(b"\0" * n)
        # Amplifying requests (issue 38): many entries that each cost a few wire bytes.
        if "raw_repeat" in c:
            count, size = c["raw_repeat"]
            req.raw_input_contents.extend([b"\0" * size] * count)
        for _ in range(c.get("inputs_repeat", 0)):
            req.inputs.add()
        for _ in range(c.get("outputs_repeat", 0)):
            req.outputs.add(name="output")
        for i in range(c.get("params_repeat", 0)):
            req.parameters[f"p{i}"].int64_param = i
        for i in range(c.get("input_params_repeat", 0)):
            req.inputs[0].parameters[f"p{i}"].int64_param = i
        for _ in range(c.get("shape_repeat", 0)):
            req.inputs[0].shape.append(1)
        return req

    def build_wire(self, c):
        """The serialised request, with wire_append's bytes after it."""
        data = self.build_infer(c).SerializeToString()
        if "wire_append" in c:
            hexbytes, count = c["wire_append"]
            data += bytes.fromhex(hexbytes) * count
        return data

    def do_grpc_infer(self, c):
        if "wire_append" in c:
            call = self.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                            request_serializer=lambda b: b,
                                            response_deserializer=lambda b: b)
            return self._grpc(call, self.build_wire(c))
        return self._grpc(self.stub.ModelInfer, self.build_infer(c))

    def do_grpc_stream(self, c):
        """A bad request on a stream: the error arrives as error_message, the stream stays up."""
        call = self.channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                          request_serializer=lambda b: b,
                                          response_deserializer=pb.ModelStreamInferResponse.FromString)
        try:
            for r in call(iter([self.build_wire(c)]), timeout=60):
                if r.error_message:
                    return "STREAM_ERROR", r.error_message
                return "OK", ""
        except grpc.RpcError as e:
            return e.code().name, e.details() or ""
        return "NO_RESPONSE", ""

    def do_grpc_load(self, c):
        req = pb.RepositoryModelLoadRequest(model_name=c["name"])
        for key, v in c.get("params", {}).items():
            p = req.parameters[key]
            if "string" in v:
                s = v["string"]
                p.string_param = json.dumps(s["$json"]) if isinstance(s, dict) else s
            elif "bytes" in v:
                p.bytes_param = content(v["bytes"])
            elif "int" in v:
                p.int64_param = v["int"]
            elif "bool" in v:
                p.bool_param = v["bool"]
        return self._grpc(self.stub.RepositoryModelLoad, req)

    def do_grpc_unload(self, c):
        return self._grpc(self.stub.RepositoryModelUnload,
                          pb.RepositoryModelUnloadRequest(model_name=c["name"]))

    def do_grpc_metadata(self, c):
        return self._grpc(self.stub.ModelMetadata,
                          pb.ModelMetadataRequest(name=c["name"], version=c.get("version", "")))

    def do_reference(self, c):
        """Not an error case: checks a model still serves its reference output."""
        try:
            self.check_reference(c["model"])
            return "OK", ""
        except AssertionError as e:
            return "MISMATCH", str(e)
        except grpc.RpcError as e:
            return e.code().name, e.details() or ""

    def reference(self, model, n=0):
        d = os.path.join(self.models, model, f"test_data_set_{n}")
        def load(p):
            t = onnx.TensorProto()
            with open(os.path.join(d, p), "rb") as f:
                t.ParseFromString(f.read())
            return numpy_helper.to_array(t)
        return load("input_0.pb"), load("output_0.pb")

    def check_reference(self, model):
        x, y = self.reference(model)
        req = pb.ModelInferRequest(model_name=model)
        req.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
        req.raw_input_contents.append(x.astype(np.float32).tobytes())
        resp = self.stub.ModelInfer(req, timeout=60)
        got = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32)
        got = got.reshape(resp.outputs[0].shape)
        np.testing.assert_allclose(got, y, rtol=1e-3, atol=1e-3, err_msg=f"{model} over gRPC")
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                       "shape": list(x.shape),
                                       "data": x.flatten().tolist()}]}).encode()
        status, out, _ = http_request(self.http_addr, "POST", f"/v2/models/{model}/infer",
                                      {"Content-Type": "application/json"}, body)
        assert status == 200, f"{model} over HTTP: {status} {out[:200]!r}"
        o = json.loads(out)["outputs"][0]
        got = np.array(o["data"], dtype=np.float32).reshape(o["shape"])
        np.testing.assert_allclose(got, y, rtol=1e-3, atol=1e-3, err_msg=f"{model} over HTTP")

    def run_case(self, c):
        if "files" in c:
            self.place_files(c["files"])
        try:
            return getattr(self, "do_" + c["do"])(c)
        finally:
            if "cleanup" in c:
                self.remove_files(c["cleanup"])


def read_cases(path):
    cases = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                cases.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: {e}")
    ids = [c["id"] for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"duplicate case ids: {sorted(dup)}")
    return cases


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = None
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1]
        args.remove(only)
    verbose = "--verbose" in sys.argv
    if len(args) < 4:
        raise SystemExit(__doc__)
    server, stubs, repo, models = args[:4]
    cases_path = args[4] if len(args) > 4 else os.path.join(os.path.dirname(__file__),
                                                           "cases.jsonl")
    global SHARED, REPO
    SHARED, REPO = models, repo
    cases = read_cases(cases_path)
    if only:
        cases = [c for c in cases if only in c["id"]]

    start = time.time()
    r = Runner(server, stubs, repo, models)
    failures = []
    classes = {}
    try:
        r.load_examples()
        for c in cases:
            exp = c["expect"]
            want = exp["http"] if "http" in exp else exp["grpc"]
            t0 = time.time()
            try:
                status, msg = r.run_case(c)
            except Exception as e:  # noqa: BLE001 - a client-side error fails the case
                status, msg = "EXCEPTION", f"{type(e).__name__}: {e}"
            dt = (time.time() - t0) * 1000
            ok = status == want and c.get("msg", "") in msg
            cls = c["id"].split("/")[0]
            classes.setdefault(cls, [0, 0])[0 if ok else 1] += 1
            shown = msg.replace("\n", " ")
            shown = shown if verbose or not ok else shown[:110]
            print(f"{'ok  ' if ok else 'FAIL'} {c['id']:<44} {status!s:<18} {dt:7.1f} ms  {shown}",
                  flush=True)
            if not ok:
                failures.append(f"{c['id']}: expected {want} with {c.get('msg', '')!r}, "
                                f"got {status}: {msg[:300]}")
            if r.proc.poll() is not None:
                failures.append(f"server died (exit {r.proc.returncode}) after case {c['id']}")
                break
        # The server must still be up and serving the reference outputs.
        if r.proc.poll() is None:
            live = r.stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
            if not live:
                failures.append("server is not live at the end")
            for model in ("mlp", "lenet"):
                try:
                    r.check_reference(model)
                    print(f"ok   final reference check {model}")
                except (AssertionError, grpc.RpcError) as e:
                    failures.append(f"final reference check {model}: {e}")
    finally:
        rc = r.close()
    if rc != 0:
        failures.append(f"server exited with {rc} after SIGTERM")
    if failures and any(k in "".join(r.log) for k in ("terminate", "Sanitizer", "Segmentation")):
        print("---- server log tail ----\n" + "".join(r.log[-40:]))
    per_class = ", ".join(f"{k} {v[0]}/{v[0] + v[1]}" for k, v in sorted(classes.items()))
    print(f"\n{len(cases)} cases, {len(cases) - sum(v[1] for v in classes.values())} passed "
          f"({per_class}) in {time.time() - start:.1f} s")
    if failures:
        print(f"{len(failures)} FAILURES:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
