#!/usr/bin/env python3
"""Issue 41: the container image, run with podman as a user or a kubelet would run it.

Starts IMAGE with its own entrypoint and default arguments (the bundled example repository in
/models, HTTP 8000, gRPC 8001, metrics 8002, bound to 0.0.0.0 with an admin token mounted at
/run/secrets/cuvil-admin-token), published on free loopback ports of the host. Then:

  - waits for GET /v2/health/ready = 200 (time from `podman run` printed), checks
    /v2/health/live, that an admin call without the token gets 401, an HTTP inference on the
    bundled model (`mlp` by default) with the output shape its metadata declares, and the
    Prometheus endpoint counting that inference;
  - keeps CLIENTS clients sending inferences (batch 32, one connection each) and sends SIGTERM
    (`podman kill --signal TERM`) while they are in flight; clients start no new request once the
    signal is sent. Every request started before it must succeed with the right shape, and the
    container must exit with status 0 within the grace period (--exit-timeout-secs 30 in the
    image's arguments; the test allows GRACE seconds). Requests still unanswered when the server
    logged "received signal" are counted: they prove the drain.

Exit 77 (skipped) when podman is missing or IMAGE is not in podman's storage (build it with
deploy/container/build-image.sh). On this VM podman needs runc and lower rlimits: pass
--containers-conf (default: $CONTAINERS_CONF, else ../shared/k8s/podman/containers.conf next to
the repository when present).

usage: image_test.py [IMAGE] [--model NAME] [--clients N] [--cpus C] [--grace S]
                     [--containers-conf FILE]
"""
import argparse
import datetime
import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SKIP = 77


def podman(*args, check=True, timeout=120):
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise SystemExit(f"podman {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def published(name, container_port):
    """The host port podman published `container_port` of container `name` on."""
    out = podman("port", name, f"{container_port}/tcp").stdout.strip()
    return int(out.splitlines()[0].rpartition(":")[2])


def get(url, timeout=5, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def infer_body(model_meta, batch):
    inp = model_meta["inputs"][0]
    dims = [batch] + [int(d) for d in inp["shape"][1:]]
    count = 1
    for d in dims:
        count *= d
    data = [((i * 37) % 101) / 101.0 for i in range(count)]
    return json.dumps({"inputs": [{"name": inp["name"], "shape": dims,
                                   "datatype": inp["datatype"], "data": data}]}).encode()


def expected_shape(model_meta, batch):
    return [batch] + [int(d) for d in model_meta["outputs"][0]["shape"][1:]]


def post_infer(port, model, body, timeout=60):
    """One request on its own connection: (status, parsed JSON or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=body,
                     headers={"Content-Type": "application/json", "Connection": "close"})
        r = conn.getresponse()
        payload = r.read()
        try:
            return r.status, json.loads(payload)
        except ValueError:
            return r.status, None
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image", nargs="?", default="localhost/cuvil:latest")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--cpus", default="0.5",
                    help="--cpus for the container: a slower server keeps requests in flight "
                         "when the signal lands (0: no limit)")
    ap.add_argument("--grace", type=float, default=35.0,
                    help="seconds the container may take to exit after SIGTERM")
    ap.add_argument("--containers-conf")
    args = ap.parse_args()

    if shutil.which("podman") is None:
        print("SKIP: podman is not installed (apt-get install podman runc; "
              "deploy/container/build-image.sh does it)")
        return SKIP
    conf = args.containers_conf or os.environ.get("CONTAINERS_CONF")
    if not conf:
        here = os.path.dirname(os.path.abspath(__file__))
        guess = os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "k8s", "podman",
                                              "containers.conf"))
        conf = guess if os.path.exists(guess) else None
    if conf and os.path.exists(conf):
        os.environ["CONTAINERS_CONF"] = os.path.abspath(conf)
    if podman("image", "exists", args.image, check=False).returncode != 0:
        print(f"SKIP: image {args.image} is not in podman's storage "
              "(build it: deploy/container/build-image.sh)")
        return SKIP

    tmp = tempfile.mkdtemp(prefix="cuvil-image-test.")
    os.chmod(tmp, 0o755)
    token = secrets.token_hex(24)
    token_file = os.path.join(tmp, "admin-token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    os.chmod(token_file, 0o644)  # The image runs as uid 999.
    name = f"cuvil-image-test-{os.getpid()}"
    # Host ports left to podman (any free ones, read back once it runs): a port picked in advance
    # could be taken by another process before podman binds it.
    run = ["run", "-d", "--name", name,
           "-p", "127.0.0.1::8000", "-p", "127.0.0.1::8001", "-p", "127.0.0.1::8002",
           "-v", f"{token_file}:/run/secrets/cuvil-admin-token:ro"]
    if args.cpus and float(args.cpus) > 0:
        run += ["--cpus", str(args.cpus)]
    run.append(args.image)  # The image's own ENTRYPOINT and CMD.
    ok = False
    try:
        t_start = time.time()
        podman(*run)
        http_port, metrics_port = published(name, 8000), published(name, 8002)
        base = f"http://127.0.0.1:{http_port}"
        # Ready: process start, model load and compile, all inside the container.
        deadline = t_start + 300
        last_check = 0.0
        while True:
            try:
                status, _ = get(base + "/v2/health/ready", timeout=1)
                if status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise SystemExit("not ready after 300 s")
            if time.time() - last_check > 1:
                last_check = time.time()
                st = podman("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", name)
                if not st.stdout.startswith("true"):
                    raise SystemExit(f"container exited before ready: {st.stdout.strip()}")
            time.sleep(0.05)
        t_ready = time.time() - t_start
        print(f"ready {t_ready:.2f} s after podman run")

        status, _ = get(base + "/v2/health/live")
        assert status == 200, f"/v2/health/live: {status}"
        status, _ = get(base + "/v2")
        assert status == 200, f"/v2: {status}"
        # An admin/repository call without the token is refused, with it accepted.
        json_type = {"Content-Type": "application/json"}
        req = urllib.request.Request(base + "/v2/repository/index", data=b"{}", method="POST",
                                     headers=json_type)
        try:
            urllib.request.urlopen(req, timeout=5)
            raise SystemExit("repository index without the admin token was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 401, f"repository index without token: {e.code}"
        req = urllib.request.Request(base + "/v2/repository/index", data=b"{}", method="POST",
                                     headers={**json_type, "Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            index = json.loads(r.read())
        names = sorted(m["name"] for m in index)
        assert args.model in names, f"{args.model} not in the repository index {names}"
        print(f"admin: 401 without the token, index with it: {names}")

        status, meta_raw = get(base + f"/v2/models/{args.model}")
        assert status == 200, f"model metadata: {status}"
        meta = json.loads(meta_raw)
        status, _ = get(base + f"/v2/models/{args.model}/ready")
        assert status == 200, f"model ready: {status}"
        for batch in (1, 3):
            status, out = post_infer(http_port, args.model, infer_body(meta, batch))
            assert status == 200, f"inference batch {batch}: HTTP {status} {out}"
            shape = out["outputs"][0]["shape"]
            assert shape == expected_shape(meta, batch), f"output shape {shape}"
            assert len(out["outputs"][0]["data"]) == batch * int(meta["outputs"][0]["shape"][1])
        print(f"inference {args.model}: output {meta['outputs'][0]['name']} shape "
              f"{expected_shape(meta, 3)} for batch 3")

        status, metrics = get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert status == 200, f"/metrics: {status}"
        text = metrics.decode()
        served = [l for l in text.splitlines()
                  if l.startswith("cuvil_inference_requests_total{")
                  and f'model="{args.model}"' in l and 'status="success"' in l]
        assert served and sum(float(l.rsplit(" ", 1)[1]) for l in served) >= 2, \
            f"metrics do not count the inferences: {served}"
        print(f"metrics: {served[0]}")

        # SIGTERM with requests in flight.
        batch = 32
        body = infer_body(meta, batch)
        want = expected_shape(meta, batch)
        stop = threading.Event()
        lock = threading.Lock()
        results = []  # (t_sent, t_done, ok, detail)
        inflight = [0]

        def client():
            while not stop.is_set():
                t0 = time.time()
                with lock:
                    inflight[0] += 1
                try:
                    status, out = post_infer(http_port, args.model, body)
                    good = status == 200 and out is not None and \
                        out["outputs"][0]["shape"] == want
                    detail = "" if good else f"HTTP {status}"
                except Exception as e:  # noqa: BLE001 - any failure counts
                    good, detail = False, f"{type(e).__name__}: {e}"
                with lock:
                    inflight[0] -= 1
                    results.append((t0, time.time(), good, detail))

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(3)
        stop.set()  # Set first: no client starts a request after the signal is sent.
        with lock:
            at_signal = inflight[0]
        t_sig = time.time()
        podman("kill", "--signal", "TERM", name)
        r = podman("wait", name, timeout=args.grace + 30)
        t_exit = time.time() - t_sig
        code = int(r.stdout.strip().splitlines()[-1])
        for t in threads:
            t.join(timeout=60)
        logs = podman("logs", name, check=False)
        log_text = logs.stdout + logs.stderr
        failed = [x for x in results if not x[2]]
        # The server's own record of the signal (spdlog's local-time stamp, container clock = host
        # clock): requests answered after it were in progress in the server when it landed.
        m = re.search(r"\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]? .*received signal",
                      log_text)
        after = None
        if m:
            stamp = m.group(1)
            t_recv = datetime.datetime.strptime(stamp[:26], "%Y-%m-%d %H:%M:%S.%f")
            # The container's TZ is UTC unless set; compare in UTC.
            t_recv = t_recv.replace(tzinfo=datetime.timezone.utc).timestamp()
            after = sum(1 for x in results if x[0] < t_recv < x[1])
        if m is None:
            print("note: no time stamp found on the server's 'received signal' line: "
                  + next((l for l in log_text.splitlines() if "received signal" in l), "(none)"))
        print(f"SIGTERM with {at_signal} requests in flight ({len(results)} sent in all, "
              f"{len(failed)} failed); container exited {code} {t_exit:.2f} s after the signal"
              + (f"; {after} requests were still unanswered when the server logged the signal"
                 if after is not None else ""))
        for x in failed[:10]:
            print(f"  failed: {x[3]}")
        assert not failed, f"{len(failed)} requests failed"
        assert at_signal > 0, "no request was in flight at the signal"
        assert code == 0, f"exit status {code}\n{log_text[-3000:]}"
        assert t_exit <= args.grace, f"exit took {t_exit:.1f} s (grace {args.grace} s)"
        assert "received signal" in log_text and "server stopped" in log_text, log_text[-3000:]
        ok = True
        print(f"PASS: ready {t_ready:.2f} s, SIGTERM -> exit 0 in {t_exit:.2f} s, "
              f"{len(results)} requests, 0 failed")
        return 0
    finally:
        if not ok:
            logs = podman("logs", name, check=False)
            sys.stdout.write("--- container log (tail) ---\n" + (logs.stdout + logs.stderr)[-4000:])
        podman("rm", "-f", "-t", "0", name, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
