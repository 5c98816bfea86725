#!/usr/bin/python3
"""Zero-downtime version swap under load, and the counting of rejected requests (issue 8 item 7).

usage: version_swap_test.py SERVER PERF PY_STUBS EXAMPLE_REPO [--seconds 15] [--versions 6]
                            [--concurrency 8] [--protocol grpc|http] [--promtool PATH]

1. cuvil-server (explicit control, ephemeral ports) on a copy of the example repository with mlp
   loaded (default version policy: latest).
2. cuvil-perf on mlp over gRPC (or --protocol http), closed loop at --concurrency for --seconds. Meanwhile version
   folders 2..N are added one by one, each followed by RepositoryModelLoad over gRPC: version
   N+1 loads while N serves, routing flips when N+1 is READY, N drains.
   Checks: 0 failed requests, every load OK, afterwards only version N READY and serving, and no
   request counted as rejected for mlp.
3. Rejected requests are counted per model and reason: requests for an unknown version, a
   non-numeric version, an unknown model and a model without READY version are refused, and the
   gRPC and HTTP statistics (version-less entry: inference_stats.fail + `rejected` by reason) and
   cuvil_requests_rejected_total{model,reason} show exactly those; promtool accepts the scrape.
Exit 0 when every check passes, 1 otherwise.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuvil_proc import CuvilProcess, metric_samples, perf_result, run_perf  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("perf")
    ap.add_argument("stubs")
    ap.add_argument("example_repo")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--versions", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--promtool", default=shutil.which("promtool"))
    a = ap.parse_args()
    sys.path.insert(0, a.stubs)
    import grpc  # noqa: E402
    import grpc_service_pb2 as pb  # noqa: E402
    import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

    problems = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            problems.append(what)

    tmp = tempfile.mkdtemp(prefix="cuvil-swap-")
    repo = os.path.join(tmp, "repo")
    shutil.copytree(a.example_repo, repo)
    mlp = os.path.join(repo, "mlp")
    try:
        # No JIT cache: every load compiles, so each new version really loads while the old serves.
        with CuvilProcess(a.server, repo, ["--load-model", "mlp", "--load-model", "lenet",
                                           "--no-jit-cache"]) as s:
            stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(s.grpc))

            # -- 2. version swaps under load ---------------------------------------------------
            csv = os.path.join(tmp, "perf.csv")
            perf = run_perf(a.perf, "mlp", s.grpc if a.protocol == "grpc" else s.http,
                            a.concurrency, a.seconds, csv, protocol=a.protocol)
            time.sleep(1.5)  # cuvil-perf's warm-up requests
            swaps = list(range(2, a.versions + 1))
            spacing = max(0.2, (a.seconds - 3) / max(len(swaps), 1))
            for v in swaps:
                t = time.time()
                shutil.copytree(os.path.join(mlp, "1"), os.path.join(mlp, str(v)))
                try:
                    stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="mlp"),
                                             timeout=120)
                    check(True, f"RepositoryModelLoad mlp -> version {v} "
                                f"({time.time() - t:.2f} s)")
                except grpc.RpcError as e:
                    check(False, f"RepositoryModelLoad mlp -> version {v}: {e.code()} {e.details()}")
                time.sleep(max(0.0, spacing - (time.time() - t)))
            rc, row, output = perf_result(perf, csv)
            print(output.strip())
            check(row is not None, "cuvil-perf wrote its result")
            if row:
                requests, errors = int(row["requests"]), int(row["errors"])
                check(requests > 0 and errors == 0,
                      f"{requests} requests across {len(swaps)} version swaps, {errors} failed")
            check(rc == 0, f"cuvil-perf exit status {rc}")
            index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=30)
            states = {m.version: m.state for m in index.models if m.name == "mlp"}
            want = {str(v): "UNAVAILABLE" for v in range(1, a.versions)}
            want[str(a.versions)] = "READY"
            check(states == want, f"mlp versions after the swaps: {states}")
            x = pb.ModelInferRequest(model_name="mlp")
            t = x.inputs.add(name="input", datatype="FP32", shape=[1, 784])
            t.contents.fp32_contents.extend([0.5] * 784)
            served = stub.ModelInfer(x, timeout=30)
            check(served.model_version == str(a.versions),
                  f"latest request served by version {served.model_version}")
            stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp"), timeout=30)
            rejected = [m for m in stats.model_stats if m.version == ""]
            check(not rejected, "no mlp request rejected during the swaps")

            # -- 3. rejected requests are counted ----------------------------------------------
            def refused(model, version, code):
                q = pb.ModelInferRequest()
                q.CopyFrom(x)
                q.model_name = model
                q.model_version = version
                try:
                    stub.ModelInfer(q, timeout=30)
                    check(False, f"{model}/{version or '-'} refused")
                except grpc.RpcError as e:
                    check(e.code() == code, f"{model}/{version or '-'} refused with {e.code()}: "
                                            f"{e.details()}")

            refused("mlp", "99", grpc.StatusCode.NOT_FOUND)
            refused("mlp", "99", grpc.StatusCode.NOT_FOUND)
            refused("mlp", "abc", grpc.StatusCode.INVALID_ARGUMENT)
            refused("mlp", "1", grpc.StatusCode.UNAVAILABLE)  # retired by the swaps
            refused("no_such_model", "", grpc.StatusCode.NOT_FOUND)
            stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="lenet"),
                                       timeout=60)
            refused("lenet", "", grpc.StatusCode.UNAVAILABLE)
            # HTTP counts the same way.
            status, _ = s.http_post("/v2/models/lenet/infer", {"inputs": []})
            check(status == 503, f"HTTP infer on unloaded lenet: {status}")

            stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp"), timeout=30)
            entry = [m for m in stats.model_stats if m.version == ""]
            check(len(entry) == 1, "mlp has one version-less statistics entry")
            if entry:
                got = {r.reason: r.count for r in entry[0].rejected}
                check(got == {"unknown_version": 2, "invalid_version": 1,
                              "version_unavailable": 1}, f"mlp rejections by reason: {got}")
                check(entry[0].inference_stats.fail.count == 4,
                      f"mlp version-less fail count {entry[0].inference_stats.fail.count}")
            # Versioned entries are unchanged for Triton clients asking for one version.
            one = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp",
                                                                 version=str(a.versions)))
            check([m.version for m in one.model_stats] == [str(a.versions)],
                  "a versioned statistics request lists that version only")
            try:
                lenet = stub.ModelStatistics(pb.ModelStatisticsRequest(name="lenet"), timeout=30)
                got = {r.reason: r.count for m in lenet.model_stats for r in m.rejected}
                check(got == {"no_ready_version": 2},
                      f"unloaded lenet's statistics show its rejections: {got}")
            except grpc.RpcError as e:
                check(False, f"lenet statistics: {e.code()} {e.details()}")
            status, body = s.http_get("/v2/models/mlp/stats")
            http_entry = [m for m in json.loads(body)["model_stats"] if m["version"] == ""]
            check(status == 200 and len(http_entry) == 1 and
                  http_entry[0]["inference_stats"]["fail"]["count"] == 4,
                  f"HTTP statistics carry the version-less entry: {http_entry}")

            text = s.metrics_text()
            got = metric_samples(text, "cuvil_requests_rejected_total")
            want = {'{model="mlp",reason="unknown_version"}': 2,
                    '{model="mlp",reason="invalid_version"}': 1,
                    '{model="mlp",reason="version_unavailable"}': 1,
                    '{model="",reason="unknown_model"}': 1,
                    '{model="lenet",reason="no_ready_version"}': 2}
            check(got == want, f"cuvil_requests_rejected_total: {got}")
            if a.promtool:
                p = subprocess.run([a.promtool, "check", "metrics"], input=text,
                                   capture_output=True, text=True)
                check(p.returncode == 0, f"promtool check metrics: {(p.stdout + p.stderr).strip()}")
            check(s.alive(), "server alive")
            rc = s.stop()
            check(rc == 0, f"server exit status after SIGTERM: {rc}")
            if problems:
                print("---- server log tail ----\n" + "".join(s.log[-30:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"FAILED: {len(problems)} check(s): " + "; ".join(problems))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
