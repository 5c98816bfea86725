#!/usr/bin/python3
"""Issue 42: example streaming models through a real cuvil-server, state kept by the server.

The models of make_streaming_models.py (a VAD-style conv + 2-layer LSTM over 512-sample chunks,
and a tiny transformer decoder step whose key/value cache grows by one position per step) run
N interleaved streams of S steps each from T client threads (every thread steps its streams in
turn, so the server batches steps of different streams in ever-changing compositions):

  (a) MODEL_state: sequence_batching keeps h/c (the cache) in the server; the client sends only
      the chunk (the token). Its outputs must match ONNX Runtime run step by step at batch 1
      (ort_stream_reference.js) within tolerance (VAD prob 1e-4, decoder logits 1e-3).
  (b) MODEL_client: the same ONNX file without sequence_batching; the client sends the state
      tensors and reads them back (binary tensor extension, so no bits are lost). Outputs of (a)
      and (b) must be identical bit for bit at every step of every stream when every execution
      is batch 1 (a serial pass), and the VAD's state (h and c, asked for by name) after every
      step in the batched runs too; the batched outputs are held to 1e-5, and bit for bit with
      --exact (CTest passes it): both models run batch-invariant kernels (sequence_batching
      turns them on; the _client configs set cuvil_batch_invariant), so a row's bits do not
      depend on the batch it runs in.

Also checked: the server batched steps together (average executed batch above 1.5 for the
_state models) and no stream is left open after its END step.

usage: streaming_models_test.py CUVIL_SERVER [--streams N] [--steps S] [--threads T]
  The issue's target is --streams 1000 --steps 200 (about 15 minutes here); CTest runs a
  smaller set. Exit 77 (skipped) when onnxruntime-node is not installed.
"""
import argparse
import concurrent.futures
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zero_downtime"))
from cuvil_proc import CuvilProcess  # noqa: E402

VAD_HIDDEN, DEC_LAYERS, DEC_D, DEC_VOCAB = 64, 2, 32, 64
DTYPES = {"FP32": np.float32, "INT64": np.int64}


def ort_node_path():
    base = os.environ.get("CUVIL_PEER_DIR",
                          os.path.join(os.environ.get("XDG_CACHE_HOME",
                                                      os.path.expanduser("~/.cache")),
                                       "cuvil-peer-ort"))
    path = os.path.join(base, "node_modules")
    return path if os.path.exists(os.path.join(path, "onnxruntime-node")) else None


class Client:
    """One HTTP/1.1 connection speaking the KServe binary tensor extension."""

    def __init__(self, hostport):
        host, port = hostport.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def infer(self, model, inputs, outputs, params=None):
        """inputs: [(name, ndarray)]; returns ({name: ndarray}) or raises on an error."""
        header = {"inputs": [], "outputs": [{"name": n, "parameters": {"binary_data": True}}
                                            for n in outputs]}
        blobs = []
        for name, arr in inputs:
            dt = "FP32" if arr.dtype == np.float32 else "INT64"
            b = np.ascontiguousarray(arr).tobytes()
            header["inputs"].append({"name": name, "datatype": dt, "shape": list(arr.shape),
                                     "parameters": {"binary_data_size": len(b)}})
            blobs.append(b)
        if params:
            header["parameters"] = params
        head = json.dumps(header).encode()
        self.conn.request("POST", f"/v2/models/{model}/infer", head + b"".join(blobs),
                          {"Content-Type": "application/octet-stream",
                           "Inference-Header-Content-Length": str(len(head))})
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"{model}: HTTP {r.status}: {body[:300]!r}")
        n = int(r.getheader("Inference-Header-Content-Length", len(body)))
        doc = json.loads(body[:n])
        out, off = {}, n
        for o in doc["outputs"]:
            size = o["parameters"]["binary_data_size"]
            out[o["name"]] = np.frombuffer(body[off:off + size],
                                           dtype=DTYPES[o["datatype"]]).reshape(o["shape"])
            off += size
        return out


def run_streams(server, model, kind, data, streams, steps, threads, id_base, states=None):
    """Runs every stream; returns the main output, [streams, steps, ...] float32. With `states`
    (a [streams, steps] uint64 array) the VAD's h and c after every step are asked for (a
    _state model returns its state outputs when asked by name) and a digest of them stored."""
    main_out = "prob" if kind == "vad" else "logits"
    width = 1 if kind == "vad" else DEC_VOCAB
    result = np.zeros((streams, steps, width), np.float32)
    server_state = model.endswith("_state")

    def initial():
        if kind == "vad":
            return [np.zeros((1, 2, VAD_HIDDEN), np.float32)] * 2
        return [np.zeros((1, DEC_LAYERS, 1, DEC_D), np.float32)] * 2

    # The threads step in lockstep (a barrier after each round), so all streams are at the same
    # step: the decoder's caches then have one length and its steps can share an execution.
    barrier = threading.Barrier(threads)

    def worker(k):
        client = Client(server.http)
        mine = list(range(k, streams, threads))
        state = {s: initial() for s in mine}
        for t in range(steps):
            for s in mine:
                x = data[s, t][None]
                if kind == "vad":
                    names, outs = ["audio"], ["prob", "h_out", "c_out"]
                    state_names = ["h_in", "c_in"]
                else:
                    names, outs = ["token"], ["logits", "present_k", "present_v"]
                    state_names = ["past_k", "past_v"]
                inputs = [(names[0], x)]
                params = None
                if server_state:
                    outs = outs if states is not None else outs[:1]
                    params = {"sequence_id": id_base + s, "sequence_start": t == 0,
                              "sequence_end": t == steps - 1}
                else:
                    inputs += list(zip(state_names, state[s]))
                got = client.infer(model, inputs, outs, params)
                result[s, t] = got[main_out][0]
                if states is not None:
                    states[s, t] = int.from_bytes(hashlib.blake2b(
                        got[outs[1]].tobytes() + got[outs[2]].tobytes(),
                        digest_size=8).digest(), "little")
                if not server_state:
                    state[s] = [got[outs[1]], got[outs[2]]]
            barrier.wait(timeout=300)

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(worker, k) for k in range(threads)]:
            f.result()
    return result


def average_batch(server, model):
    code, text = server.http_get(f"/v2/models/{model}/stats")
    stats = json.loads(text)["model_stats"][0]
    return stats["inference_count"] / max(stats["execution_count"], 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--exact", action="store_true",
                    help="hold the batched runs to bit-for-bit equality too (fails today)")
    ap.add_argument("--serial-streams", type=int, default=4,
                    help="streams of the serial pass (one client thread: every step batch 1)")
    a = ap.parse_args()
    node_path = ort_node_path()
    if node_path is None:
        print("SKIP: onnxruntime-node not installed (run ../shared/bench/ort/run.sh once)")
        return 77
    problems = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            problems.append(what)

    tmp = tempfile.mkdtemp(prefix="cuvil-streaming-")
    try:
        repo = os.path.join(tmp, "repo")
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_streaming_models.py"), repo,
                        "--max-sequences", str(max(4096, a.streams))], check=True,
                       stderr=subprocess.DEVNULL)
        rng = np.random.default_rng(7)
        n, s = a.streams, a.steps
        # Audio-like chunks: a tone whose loudness changes per stream and step, plus noise.
        tt = np.arange(512, dtype=np.float32) / 16000
        amp = rng.uniform(0, 1, (n, s, 1)).astype(np.float32)
        freq = rng.uniform(100, 1000, (n, 1, 1)).astype(np.float32)
        audio = (amp * np.sin(2 * np.pi * freq * tt) +
                 0.05 * rng.standard_normal((n, s, 512))).astype(np.float32)
        tokens = rng.integers(0, DEC_VOCAB, (n, s, 1), dtype=np.int64)

        # ONNX Runtime, step by step.
        refs = {}
        t0 = time.time()
        for kind, arr, name, shape, states, out in (
                ("vad", audio, "audio", [512],
                 [{"input": "h_in", "output": "h_out", "shape": [2, VAD_HIDDEN]},
                  {"input": "c_in", "output": "c_out", "shape": [2, VAD_HIDDEN]}], "prob"),
                ("decoder", tokens, "token", [1],
                 [{"input": "past_k", "output": "present_k", "shape": [DEC_LAYERS, 1, DEC_D]},
                  {"input": "past_v", "output": "present_v", "shape": [DEC_LAYERS, 1, DEC_D]}],
                 "logits")):
            arr.tofile(os.path.join(tmp, f"{kind}.in"))
            spec = {"streams": n, "steps": s,
                    "inputs": [{"name": name, "type": "float32" if kind == "vad" else "int64",
                                "shape": shape, "file": os.path.join(tmp, f"{kind}.in")}],
                    "states": states,
                    "outputs": [{"name": out, "file": os.path.join(tmp, f"{kind}.ref")}]}
            with open(os.path.join(tmp, f"{kind}.json"), "w") as f:
                json.dump(spec, f)
            subprocess.run(["node", os.path.join(HERE, "ort_stream_reference.js"),
                            os.path.join(repo, ".onnx", f"{kind}.onnx"),
                            os.path.join(tmp, f"{kind}.json")], check=True,
                           env=dict(os.environ, NODE_PATH=node_path))
            refs[kind] = np.fromfile(os.path.join(tmp, f"{kind}.ref"),
                                     np.float32).reshape(n, s, -1)
        print(f"ONNX Runtime references: {n} streams x {s} steps x 2 models in "
              f"{time.time() - t0:.1f} s", flush=True)

        models = ["vad_state", "vad_client", "decoder_state", "decoder_client"]
        load = sum((["--load-model", m] for m in models + ["decoder_capped"]), [])
        with CuvilProcess(a.server, repo, load) as server:
            got = {}
            vad_states = {m: np.zeros((n, s), np.uint64) for m in ("vad_state", "vad_client")}
            for model in models:
                kind = model.split("_")[0]
                t0 = time.time()
                got[model] = run_streams(server, model, kind, audio if kind == "vad" else tokens,
                                         n, s, a.threads, 1 if kind == "vad" else 1_000_000,
                                         vad_states.get(model))
                dt = time.time() - t0
                print(f"{model}: {n * s} steps in {dt:.1f} s ({n * s / dt:.0f} steps/s), "
                      f"average executed batch {average_batch(server, model):.2f}", flush=True)
            # The VAD's state itself (h and c after every step) is the same bit for bit under
            # any batching: the server carries exactly what the client would.
            same_state = np.array_equal(vad_states["vad_state"], vad_states["vad_client"])
            check(same_state, f"vad: h and c after every step of every stream equal the "
                              f"client-carried ones bit for bit ("
                              f"{int(np.sum(vad_states['vad_state'] != vad_states['vad_client']))}"
                              f" of {n * s} differ)")
            for kind, tol in (("vad", 1e-4), ("decoder", 1e-3)):
                st, cl = got[f"{kind}_state"], got[f"{kind}_client"]
                same = np.array_equal(st.view(np.uint32), cl.view(np.uint32))
                diff = np.argwhere(st.view(np.uint32) != cl.view(np.uint32))
                what = (f"{kind}: outputs with server-side state equal the client-carried "
                        f"run's bit for bit at all {n * s} steps ({len(diff)} values differ"
                        + (f", first at stream {diff[0][0]} step {diff[0][1]}, max abs diff "
                           f"{float(np.max(np.abs(st - cl))):.2e}" if len(diff) else "") + ")")
                if not a.exact:
                    # Known gap (docs/serving.md): the compiled code's rows change in the last
                    # bit with the batch size (the VAD's probability, from its last Linear +
                    # Sigmoid, in ~1.5% of rows; the decoder's projections), so runs batched
                    # differently differ there. Held to 1e-5 here; the serial pass below is
                    # held to bit equality, and so is the VAD's state above.
                    check(float(np.max(np.abs(st - cl))) <= 1e-5,
                          what.replace("bit for bit", "within 1e-5 (bit for bit: --exact)"))
                else:
                    check(same, what)
                err = float(np.max(np.abs(st - refs[kind])))
                check(err <= tol, f"{kind}: within {tol} of ONNX Runtime step by step "
                                  f"(max abs diff {err:.2e})")
                check(average_batch(server, f"{kind}_state") > 1.5,
                      f"{kind}_state: steps of different streams were batched together")
            # Serial pass: one step at a time, so every execution is batch 1 on both sides;
            # what the server carries must then be exactly what the client would.
            k = min(a.serial_streams, n)
            for kind, arr in (("vad", audio), ("decoder", tokens)):
                st = run_streams(server, f"{kind}_state", kind, arr[:k], k, s, 1, 5_000_000)
                cl = run_streams(server, f"{kind}_client", kind, arr[:k], k, s, 1, 0)
                check(np.array_equal(st.view(np.uint32), cl.view(np.uint32)),
                      f"{kind}, serial ({k} streams x {s} steps, batch 1): server-side state "
                      f"equals client-carried state bit for bit")
            # The cache's configured maximum: decoder_capped's state budget holds 8 positions.
            # A stream grows one position per step from 1: steps 1-7 fit, step 8 would make 9
            # and is refused unapplied (again when resent), and no other stream can start.
            capped = Client(server.http)

            def capped_step(seq, t, start=False, end=False):
                try:
                    return capped.infer("decoder_capped", [("token", tokens[0, t][None])],
                                        ["logits"], {"sequence_id": seq, "sequence_start": start,
                                                     "sequence_end": end})["logits"][0], ""
                except RuntimeError as e:
                    return None, str(e)
            first = capped_step(77, 0, True)[0]
            fits = [first is not None] + [capped_step(77, t)[0] is not None for t in range(1, 7)]
            refused = [capped_step(77, 7)[1] for _ in range(2)]
            other = capped_step(78, 0, True)[1]
            check(all(fits) and all("would grow" in r and "HTTP 413" in r for r in refused) and
                  "server is busy" in other,
                  f"decoder cache capped at 8 positions by the state budget: steps 1-7 "
                  f"{fits}, step 8 twice {[r[:160] for r in refused]}, another START "
                  f"{other[:160]!r}")
            again = capped_step(77, 0, True)
            check(again[0] is not None and np.array_equal(again[0], first),
                  "a START frees the capped stream's cache and starts over")
            check(capped_step(77, 1, end=True)[0] is not None, "and its END step closes it")
            check(server.alive(), "server alive")
            metrics = server.metrics_text()
            open_left = [ln for ln in metrics.splitlines()
                         if ln.startswith("cuvil_sequences_active{") and not ln.endswith(" 0")]
            check(not open_left, f"every stream closed by its END step: {open_left}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"FAILED: {len(problems)} check(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
