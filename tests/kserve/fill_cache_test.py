#!/usr/bin/env python3
"""Issue 41: the init container that fills a shared JIT cache (`cuvil-server --fill-jit-cache`).

Against real cuvil-server processes:
  1. `--fill-jit-cache` over the example repository exits 0 without listening, says how many
     model versions it filled, and leaves one verified entry per model in the folder;
  2. a replica started on that folder serves every model from it: cuvil_jit_cache_hits_total
     counts each model and cuvil_jit_cache_misses_total is 0 (nothing compiled), and it answers
     an inference;
  3. a repository with one broken model fails the fill (exit 1, the model named) while the good
     model's entry is still stored; an explicit --load-model of a model the repository lacks fails
     the same way; a fill without a cache folder is refused before anything loads.

usage: fill_cache_test.py CUVIL_SERVER EXAMPLE_REPOSITORY
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import CuvilProcess, metric_samples  # noqa: E402


def fill(server, repo, cache, *extra):
    proc = subprocess.run([server, "--fill-jit-cache", "--model-repository", repo,
                           "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
                          + (["--jit-cache-dir", cache] if cache else []) + list(extra),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=600)
    return proc.returncode, proc.stdout


def check(cond, what, output=""):
    if not cond:
        raise SystemExit(f"FAIL: {what}\n{output}")
    print(f"ok: {what}")


def main():
    server, example = sys.argv[1], sys.argv[2]
    models = sorted(d for d in os.listdir(example) if os.path.isdir(os.path.join(example, d)))
    tmp = tempfile.mkdtemp(prefix="cuvil_fill_cache_")
    try:
        cache = os.path.join(tmp, "cache")
        os.mkdir(cache, 0o700)
        code, out = fill(server, example, cache)
        check(code == 0, "--fill-jit-cache over the example repository exits 0", out)
        check("listening" not in out, "a fill binds no listener", out)
        check(f"filled: {len(models)} model version(s)" in out,
              f"the fill names the {len(models)} model versions it compiled", out)
        entries = glob.glob(os.path.join(cache, "*.cjc"))
        check(len(entries) == len(models), f"one cache entry per model ({len(entries)})", out)
        check(not [f for f in os.listdir(cache) if ".tmp" in f], "no temporary file left", out)

        # A replica on the filled folder compiles nothing.
        with CuvilProcess(server, example, ["--jit-cache-dir", cache]
                          + sum((["--load-model", m] for m in models), [])) as s:
            text = s.metrics_text()
            hits = metric_samples(text, "cuvil_jit_cache_hits_total")
            misses = metric_samples(text, "cuvil_jit_cache_misses_total")
            for m in models:
                check(hits.get(f'{{model="{m}"}}', 0) >= 1, f"{m} loaded from the filled cache",
                      text)
            check(sum(misses.values()) == 0, "no cache miss: the replica compiled nothing", text)
            status, body = s.http_get("/v2/models/mlp")
            check(status == 200, "mlp's metadata", body)
            meta = json.loads(body)
            inp = meta["inputs"][0]
            shape = [1 if d == -1 else d for d in inp["shape"]]
            n = 1
            for d in shape:
                n *= d
            status, body = s.http_post("/v2/models/mlp/infer", {"inputs": [
                {"name": inp["name"], "shape": shape, "datatype": inp["datatype"],
                 "data": [0.5] * n}]})
            check(status == 200 and "outputs" in json.loads(body), "mlp answers an inference",
                  body)

        # One broken model: the fill fails naming it, the good one's entry is stored anyway.
        bad_repo = os.path.join(tmp, "bad_repo")
        shutil.copytree(os.path.join(example, "mlp"), os.path.join(bad_repo, "mlp"))
        os.makedirs(os.path.join(bad_repo, "broken", "1"))
        with open(os.path.join(bad_repo, "broken", "1", "model.onnx"), "wb") as f:
            f.write(b"not an onnx model")
        cache2 = os.path.join(tmp, "cache2")
        os.mkdir(cache2, 0o700)
        code, out = fill(server, bad_repo, cache2)
        check(code == 1, "a fill with a broken model exits 1", out)
        check("did not load" in out and "broken version 1" in out,
              "the failure names the broken model", out)
        check(len(glob.glob(os.path.join(cache2, "*.cjc"))) == 1,
              "the good model's entry is stored all the same", out)

        code, out = fill(server, example, cache, "--model-control-mode", "explicit",
                         "--load-model", "no_such_model")
        check(code == 1, "a fill of a model the repository lacks exits 1", out)
        code, out = fill(server, example, cache, "--model-control-mode", "explicit",
                         "--load-model", "mlp", "--load-model", "no_such_model")
        check(code == 1 and "no_such_model" in out,
              "a missing model fails the fill beside one that loads, by name", out)

        code, out = fill(server, example, None, "--no-jit-cache")
        check(code != 0 and "--fill-jit-cache needs" in out,
              "a fill without a cache folder is refused", out)
        print("PASS")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
