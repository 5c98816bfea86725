#!/usr/bin/python3
"""Hot patching against a real cuvil-server process cannot crash it or lose a patch (issue 37).

usage: patch_trust_server_test.py SERVER_BINARY MODEL_REPOSITORY SHARED_MODELS

1. A profile window that ends while an IR patch's validation still runs (the SIGSEGV of issue 37,
   three times): the server lives, the patch is applied or refused with a reason.
2. Hostile patches (inline asm, a call to system(), a store to address 0, an endless loop, code
   LLVM cannot select) are refused with their reason; system() never runs; the server lives and
   answers correctly after each.
3. Tier-up keeps user patches: with --compile-tier tiered, a patch committed on the quick tier
   (its tier-up held back behind a bigger model's) is still in effect after the tier swap, which
   goes beneath it in the history.
4. A reload of the same version carries its patches (same id, still in effect), and a restart on
   --snapshot-dir after the reload comes back patched.
   A snapshot taken on the quick tier, restored, tiers up too (beneath its patch).
5. Without a token or --insecure-admin, IR patches, snapshots and restores are refused (403).
6. Six patches of one kernel sent at once all land (they queue instead of invalidating each
   other's prepared table), each with its own id; rolling all back restores the output.
7. Rolling back a patch with patches above it checks the combination left: refused (400, naming
   why) when a patch above was never validated or when the stack without it computes other
   outputs than the version did before it; applied when it computes the same; force skips it.
8. A kernel that never returns (a forced patch spinning on one input value): its rollback answers
   after 10 s naming the stuck execution; a forced rollback retires the version (a fresh build
   serves again), answers the stuck requests (HTTP 503, gRPC UNAVAILABLE) and runs the one queued
   behind them on the fresh build; reload and unload answer within the drain timeout; SIGTERM
   ends the process within twice the exit timeout plus 10 s.
9. `exact: true` over HTTP refuses a one-ulp difference; without its sandbox program the server
   refuses IR patches naming it, and lives; a patch of a kernel no validation input runs (an If
   branch) is refused as unchecked unless forced, and once served requests take that branch,
   validation compares the patch on them.
"""
import base64
import json
import os
import re
import shutil
import subprocess
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "snapshot_restart"))
from snapshot_restart_test import WIDTH, Server, adder_model, doubled_add_ir, fail  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

PLAIN = [1.0, 2.0, 3.0, 4.0]
DOUBLED = [2.0, 4.0, 6.0, 8.0]
LOAD = {"name": "adder", "config_pbtxt": 'name: "adder" max_batch_size: 8',
        "onnx_model_base64": base64.b64encode(adder_model()).decode(), "wait": True}


def kernel_ir(symbol, body, prelude=""):
    return f"{prelude}\ndefine i32 @{symbol}(ptr %args, i64 %batch) {{\nentry:\n{body}\n}}\n"


def slow_doubled_ir(symbol, iterations):
    """The doubled Add, spinning first: its validation takes about a second."""
    return doubled_add_ir(symbol).replace(
        "entry:\n",
        "entry:\n  br label %spin\nspin:\n  %k = phi i64 [ 0, %entry ], [ %k1, %spin ]\n"
        "  %vv = load volatile ptr, ptr %args\n  %k1 = add i64 %k, 1\n"
        f"  %more = icmp ult i64 %k1, {iterations}\n  br i1 %more, label %spin, label %body\n"
        "body:\n").replace("[ 0, %entry ], [ %i1", "[ 0, %body ], [ %i1")


def load_adder(server):
    status, body = server.post("/v2/admin/models/load", LOAD)
    if status != 200:
        fail(f"load: {status} {body}")


def add_symbol(server):
    status, body = server.get("/v2/admin/models/adder/versions/1/functions")
    adds = [f["symbol"] for f in json.loads(body)["functions"] if f["op_type"] == "Add"]
    if status != 200 or len(adds) != 1:
        fail(f"functions: {status} {body}")
    return adds[0]


def patches(server):
    status, body = server.get("/v2/admin/models/adder/versions/1/patches")
    if status != 200:
        fail(f"patches: {status} {body}")
    return json.loads(body)["patches"]


def load_and_double(server):
    """Loads the adder and patches its Add to double (author "user"); returns the patch id."""
    load_adder(server)
    status, body = patch(server, {"ir": doubled_add_ir(add_symbol(server)), "force": True,
                                  "author": "user"})
    if status != 200:
        fail(f"patch: {status} {body}")
    return json.loads(body)["patch_id"]


def wait_for_tier_swap(server, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if [p for p in patches(server) if p["author"] == "tiered-compilation"]:
            return
        time.sleep(0.2)
    fail(f"no tier swap within {seconds} s: {patches(server)}\n" + "".join(server.log[-40:]))


def patch(server, body):
    return server.post("/v2/admin/models/adder/versions/1/patch", body)


def alive(server, want):
    if server.proc.poll() is not None:
        fail("the server died:\n" + "".join(server.log[-40:]))
    out = server.infer()
    if out != want:
        fail(f"output {out}, expected {want}; server log:\n" + "".join(server.log[-30:]))


def profile_ending_during_validation(server, symbol):
    for attempt in range(3):
        results = {}
        prof = threading.Thread(target=lambda: results.update(prof=patch(server, {
            "kind": "profile", "profile_seconds": 0.5, "author": "trust-test"})))
        prof.start()
        time.sleep(0.05)
        status, body = patch(server, {"ir": slow_doubled_ir(symbol, 1_500_000_000),
                                      "force": True, "author": "trust-test"})
        prof.join()
        if status not in (200, 400, 409):
            fail(f"slow patch during a profile window: {status} {body}")
        time.sleep(0.6)  # The window has ended.
        if status == 200:
            alive(server, DOUBLED)
            status, body = server.post("/v2/admin/models/adder/versions/1/rollback",
                                       {"patch_id": json.loads(body)["patch_id"]})
            if status != 200:
                fail(f"rollback: {status} {body}")
        alive(server, PLAIN)
    print("ok: a profile window ending during validation, 3 times: the server lives")


def hostile_patches(server, symbol, work):
    marker = os.path.join(work, "system-ran")
    cases = [
        ("inline asm", kernel_ir(symbol, '  call void asm sideeffect "nop", ""()\n  ret i32 0'),
         "asm"),
        ("system()", kernel_ir(symbol, "  %r = call i32 @system(ptr @cmd)\n  ret i32 0",
                               f'@cmd = private constant [{len("touch " + marker) + 1} x i8] '
                               f'c"touch {marker}\\00"\ndeclare i32 @system(ptr)'),
         "'system'"),
        ("store to 0", kernel_ir(symbol, "  store volatile i32 1, ptr null\n  ret i32 0"),
         "signal 11"),
        ("llvm fatal error",
         kernel_ir(symbol, "  %f = call i64 @llvm.aarch64.get.fpcr()\n  %t = trunc i64 %f to i32\n"
                           "  ret i32 %t", "declare i64 @llvm.aarch64.get.fpcr()"),
         "LLVM ERROR"),
        ("endless loop",
         kernel_ir(symbol, "  br label %l\nl:\n  %v = load volatile ptr, ptr %args\n  br label %l"),
         "longer than"),
    ]
    for what, ir, reason in cases:
        for validate in (True, False):
            status, body = patch(server, {"ir": ir, "force": True, "validate": validate,
                                          "author": "hostile"})
            if status == 200 or reason not in body:
                fail(f"{what} (validate {validate}): expected a refusal naming '{reason}', got "
                     f"{status} {body}")
            alive(server, PLAIN)
    if os.path.exists(marker):
        fail("a patch's call to system() ran")
    if [p for p in patches(server) if p["author"] == "hostile"]:
        fail("a refused patch is in the history")
    print("ok: hostile patches refused with their reasons; the server lives")


def exact_over_http(server, symbol):
    # Times (1 + 2^-23): within the default tolerance, but not bit for bit.
    nearly = doubled_add_ir(symbol).replace("fmul float %s, 2.0", "fmul float %s, 0x3FF0000020000000")
    status, body = patch(server, {"ir": nearly, "exact": True, "author": "exact"})
    if status == 200:
        fail(f"a patch that changes outputs by one ulp was accepted with exact: true: {body}")
    alive(server, PLAIN)
    status, body = patch(server, {"ir": nearly, "exact": "yes"})
    if status != 400 or "exact" not in body:
        fail(f"'exact': \"yes\" should be refused naming the field, got {status} {body}")
    status, body = patch(server, {"ir": nearly, "author": "exact"})
    if status != 200:
        fail(f"the same patch within the default tolerance: {status} {body}")
    status, body = server.post("/v2/admin/models/adder/versions/1/rollback",
                               {"patch_id": json.loads(body)["patch_id"]})
    if status != 200:
        fail(f"rollback: {status} {body}")
    alive(server, PLAIN)
    print("ok: exact: true over HTTP refuses a one-ulp difference the default tolerance accepts")


def branchy_model():
    """y = If(sum(x) > 1000, then: x + 100, else: x + 1): no generated validation input (floats
    in [-1, 1)) takes the then branch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])

    def branch(name, value):
        out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, ["batch", WIDTH])
        c = helper.make_tensor(f"{name}_c", TensorProto.FLOAT, [WIDTH], [value] * WIDTH)
        add = helper.make_node("Add", ["x", f"{name}_c"], [f"{name}_y"], name=f"{name}_add")
        return helper.make_graph([add], name, [], [out], initializer=[c])

    big = helper.make_tensor("big", TensorProto.FLOAT, [], [1000.0])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "big"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="if",
                              then_branch=branch("then", 100.0),
                              else_branch=branch("else", 1.0))]
    graph = helper.make_graph(nodes, "branchy", [x], [y], initializer=[big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def a_kernel_no_input_runs_is_not_validated(server):
    status, body = server.post("/v2/admin/models/load", {
        "name": "branchy", "config_pbtxt": 'name: "branchy" max_batch_size: 8',
        "onnx_model_base64": base64.b64encode(branchy_model()).decode(), "wait": True})
    if status != 200:
        fail(f"load branchy: {status} {body}")
    status, body = server.get("/v2/admin/models/branchy/versions/1/functions")
    then_adds = [f["symbol"] for f in json.loads(body)["functions"]
                 if f["op_type"] == "Add" and "then" in f["symbol"]]
    if status != 200 or len(then_adds) != 1:
        fail(f"branchy functions: {status} {body}")
    url = "/v2/admin/models/branchy/versions/1/patch"
    status, body = server.post(url, {"ir": doubled_add_ir(then_adds[0])})
    if status == 200 or "never ran" not in body:
        fail(f"a patch of a kernel no validation input runs must be refused as unchecked, got "
             f"{status} {body}")
    # Served requests are validation inputs too: once traffic took the branch, the same patch is
    # compared there, and its doubled outputs are refused as different.
    big = [500.0] * WIDTH
    for _ in range(17):  # Every 16th request is kept, whatever the warm-up counted.
        status, body = server.post("/v2/models/branchy/infer", {"inputs": [
            {"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": big}]})
        if status != 200 or json.loads(body)["outputs"][0]["data"] != [600.0] * WIDTH:
            fail(f"branchy infer: {status} {body}")
    status, body = server.post(url, {"ir": doubled_add_ir(then_adds[0])})
    if status == 200 or "other outputs" not in body:
        fail(f"after traffic took the branch, the doubling patch must be refused as computing "
             f"other outputs, got {status} {body}")
    status, body = server.post(url, {"ir": doubled_add_ir(then_adds[0]), "force": True})
    if status != 200:
        fail(f"the same patch with force: {status} {body}")
    if server.proc.poll() is not None:
        fail("the server died")
    print("ok: a patch whose kernel no validation input runs is refused unless forced; served "
          "requests that take the branch validate it")


def missing_sandbox_program(binary, repo, work):
    os.environ["CUVIL_PATCH_SANDBOX"] = os.path.join(work, "no-such-sandbox")
    try:
        server = Server(binary, repo, os.path.join(work, "snap-nosandbox"),
                        os.path.join(work, "cache"))
        server.start()
    finally:
        del os.environ["CUVIL_PATCH_SANDBOX"]
    try:
        load_adder(server)
        status, body = patch(server, {"ir": doubled_add_ir(add_symbol(server)), "force": True})
        if status == 200 or "cuvil-patch-sandbox" not in body:
            fail(f"without its sandbox program an IR patch must be refused naming it: {status} "
                 f"{body}")
        alive(server, PLAIN)
    finally:
        server.stop()
    print("ok: without the sandbox program IR patches are refused, naming it")


def tier_up_keeps_patches(binary, repo, shared, work):
    # A bigger model first: the single tier-up thread compiles its full tier while the adder's
    # tier-up waits, so the adder's patch lands on the quick tier.
    big_repo = os.path.join(work, "tiered-repo")
    os.makedirs(os.path.join(big_repo, "mobilenet_v2", "1"))
    shutil.copyfile(os.path.join(shared, "mobilenet_v2", "model.onnx"),
               os.path.join(big_repo, "mobilenet_v2", "1", "model.onnx"))
    server = Server(binary, big_repo, os.path.join(work, "snap-tiered"),
                    os.path.join(work, "cache-tiered"))
    server.args += ["--compile-tier", "tiered"]
    server.start()
    try:
        status, body = server.post("/v2/repository/models/mobilenet_v2/load", {})
        if status != 200:
            fail(f"mobilenet_v2 load: {status} {body}")
        user_id = load_and_double(server)
        # The snapshot the patch wrote, taken on the quick tier (restored below).
        quick_snap = os.path.join(work, "snap-quick")
        os.makedirs(quick_snap)
        shutil.copy2(os.path.join(work, "snap-tiered", "adder.1.cuvilsnap"), quick_snap)
        wait_for_tier_swap(server, 240)
        history = patches(server)
        swaps = [p for p in history if p["author"] == "tiered-compilation"]
        user = [p for p in history if p["patch_id"] == user_id][0]
        if not user["active"]:
            fail(f"the user's patch is no longer active: {history}")
        if user["unix_ms"] > swaps[0]["unix_ms"]:
            fail("the tier swap came before the patch; the test did not hold the tier-up back")
        if [p["author"] for p in history] != ["tiered-compilation", "user"]:
            fail(f"the tier swap should sit beneath the user's patch: {history}")
        alive(server, DOUBLED)
        time.sleep(1)
        alive(server, DOUBLED)
        print("ok: the tier swap went beneath a patch committed on the quick tier")
    finally:
        server.stop()
    # A restore of the quick-tier snapshot tiers up too, beneath its patch.
    server = Server(binary, repo, quick_snap, os.path.join(work, "cache-quick"))
    server.start()
    try:
        wait_for_tier_swap(server, 120)
        history = patches(server)
        if [(p["author"], p["active"]) for p in history] != [("tiered-compilation", True),
                                                            ("user", True)]:
            fail(f"after the restored version's tier-up: {history}")
        alive(server, DOUBLED)
        print("ok: a snapshot taken on the quick tier tiers up after its restore")
    finally:
        server.stop()


def reload_keeps_patches(binary, repo, work):
    snap = os.path.join(work, "snap-reload")
    server = Server(binary, repo, snap, os.path.join(work, "cache-reload"))
    server.start()
    try:
        patch_id = load_and_double(server)
        alive(server, DOUBLED)
        load_adder(server)  # The same version again.
        alive(server, DOUBLED)
        active = [(p["patch_id"], p["author"]) for p in patches(server) if p["active"]]
        if active != [(patch_id, "user")]:
            fail(f"after the reload the active patches are {active}")
    finally:
        server.stop()
    server = Server(binary, repo, snap, os.path.join(work, "cache-reload"))
    server.start()
    try:
        alive(server, DOUBLED)
        print("ok: a reload keeps the version's patches, and the snapshot after it too")
    finally:
        server.stop()


def native_code_needs_authority(binary, repo, work):
    """Without a token and without --insecure-admin, IR patches and snapshots are refused even on
    loopback (any local user could otherwise run code as the server); other admin calls work."""
    server = Server(binary, repo, os.path.join(work, "snap-secure"),
                    os.path.join(work, "cache-secure"))
    server.args.remove("--insecure-admin")
    server.start()
    try:
        load_adder(server)
        symbol = add_symbol(server)
        status, body = patch(server, {"ir": doubled_add_ir(symbol), "force": True})
        if status != 403 or "--admin-token-file" not in body:
            fail(f"IR patch without authority: expected 403, got {status} {body}")
        status, body = server.post("/v2/admin/models/adder/versions/1/snapshot", {})
        if status != 403:
            fail(f"snapshot without authority: expected 403, got {status} {body}")
        status, body = server.post("/v2/admin/snapshots/restore", {"snapshot": ""})
        if status != 403:
            fail(f"restore without authority: expected 403, got {status} {body}")
        status, body = patch(server, {"kind": "recompile", "options": "opt_level=1"})
        if status != 200:
            fail(f"a recompile patch needs no token: {status} {body}")
        alive(server, PLAIN)
        print("ok: IR patches, snapshots and restores need a token or --insecure-admin")
    finally:
        server.stop()


def concurrent_patches_queue(server, symbol):
    results = [None] * 6

    def send(i):
        results[i] = patch(server, {"ir": doubled_add_ir(symbol), "force": True,
                                    "author": f"queue-{i}"})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [(s, b) for s, b in results if s != 200]
    if refused:
        fail(f"{len(refused)} of {len(results)} concurrent patches refused: {refused}")
    ids = {json.loads(b)["patch_id"] for _, b in results}
    active = [p for p in patches(server) if p["active"] and p["author"].startswith("queue-")]
    if len(ids) != len(results) or {p["patch_id"] for p in active} != ids:
        fail(f"concurrent patches: ids {sorted(ids)}, active {active}")
    alive(server, DOUBLED)
    for pid in sorted(ids, key=int, reverse=True):  # From the top (see the middle rollbacks).
        status, body = server.post("/v2/admin/models/adder/versions/1/rollback", {"patch_id": pid})
        if status != 200:
            fail(f"rollback {pid}: {status} {body}")
    alive(server, PLAIN)
    print(f"ok: {len(results)} concurrent patches of one kernel all landed, then rolled back")


def middle_rollbacks_are_checked(server, symbol):
    same_ir = doubled_add_ir(symbol).replace("fmul float %s, 2.0", "fmul float %s, 1.0")

    def apply(ir, force, author):
        status, body = patch(server, {"ir": ir, "force": force, "author": author})
        if status != 200:
            fail(f"patch {author}: {status} {body}")
        return json.loads(body)["patch_id"]

    def rollback(pid, force=False):
        return server.post("/v2/admin/models/adder/versions/1/rollback",
                           {"patch_id": pid, "force": force})

    def validated(pid):
        return [p["validated"] for p in patches(server) if p["patch_id"] == pid][0]

    # A forced change, then a validated patch that agrees with it: without the first, the second
    # still doubles, which the version never did before the first.
    forced = apply(doubled_add_ir(symbol), True, "middle-forced")
    agreeing = apply(doubled_add_ir(symbol), False, "middle-agreeing")
    if validated(forced) or not validated(agreeing):
        fail(f"validated flags: {patches(server)}")
    status, body = rollback(forced)
    if status != 400 or "other outputs than the version did before it" not in body:
        fail(f"a middle rollback leaving a doubling patch: {status} {body}")
    alive(server, DOUBLED)
    for pid in (agreeing, forced):  # From the top: each restores a table that once served.
        status, body = rollback(pid)
        if status != 200 or json.loads(body)["validated_sets"] != 0:
            fail(f"rollback from the top {pid}: {status} {body}")
    alive(server, PLAIN)
    # Two validated patches that compute what the version did: the middle one goes, checked.
    lower = apply(same_ir, False, "middle-lower")
    upper = apply(same_ir, False, "middle-upper")
    status, body = rollback(lower)
    if status != 200 or json.loads(body)["validated_sets"] < 1:
        fail(f"a checked middle rollback: {status} {body}")
    alive(server, PLAIN)
    # An unvalidated patch above: refused, naming it; force rolls back anyway.
    forced_above = apply(doubled_add_ir(symbol), True, "middle-forced-above")
    status, body = rollback(upper)
    if status != 400 or f"patch {forced_above} above it was never validated" not in body:
        fail(f"a middle rollback under an unvalidated patch: {status} {body}")
    status, body = rollback(upper, force=True)
    if status != 200:
        fail(f"a forced middle rollback: {status} {body}")
    alive(server, DOUBLED)
    status, body = rollback(forced_above)
    if status != 200:
        fail(f"rollback {forced_above}: {status} {body}")
    alive(server, PLAIN)
    print("ok: middle rollbacks are checked (refused twice with the reason, applied once, forced)")


def spinning_ir(symbol):
    """The doubled Add, spinning for ever when the first input element is 42."""
    return doubled_add_ir(symbol).replace("[ 0, %entry ]", "[ 0, %go ]").replace(
        "entry:\n",
        "entry:\n  %a0p = load ptr, ptr %args\n  %a0 = load volatile float, ptr %a0p\n"
        "  %is42 = fcmp oeq float %a0, 42.0\n  br i1 %is42, label %spin, label %go\n"
        "spin:\n  %v = load volatile float, ptr %a0p\n  br label %spin\ngo:\n", 1)


def grpc_infer_thread(server, binary, data, answers):
    """Starts a thread sending one adder ModelInfer over gRPC; appends (code name, message)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(binary)), "..", "proto",
                                    "python"))
    import grpc  # noqa: E402
    import grpc_service_pb2 as pb  # noqa: E402
    import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
    address = next(re.search(r"listening grpc=(\S+)", line).group(1) for line in server.log
                   if re.search(r"listening grpc=(\S+)", line))
    request = pb.ModelInferRequest(model_name="adder")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, WIDTH])
    tensor.contents.fp32_contents.extend(data)

    def call():
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))
        try:
            reply = stub.ModelInfer(request, timeout=120)
            answers.append(("OK", list(reply.raw_output_contents[0])))
        except grpc.RpcError as e:
            answers.append((e.code().name, e.details()))
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def stuck_kernel_retires_the_version(binary, repo, work):
    server = Server(binary, repo, os.path.join(work, "snap-stuck"), os.path.join(work, "cache"))
    server.start()
    try:
        # Two instances: one request spins on a scheduler worker (HTTP), one on whichever thread
        # gRPC runs it on (inline on its own thread when the other instance is idle), and a third
        # waits in the queue behind them.
        load = dict(LOAD, config_pbtxt='name: "adder" max_batch_size: 8 '
                    'instance_group { count: 2 kind: KIND_CPU }')
        status, body = server.post("/v2/admin/models/load", load)
        if status != 200:
            fail(f"load: {status} {body}")
        status, body = patch(server, {"ir": spinning_ir(add_symbol(server)), "force": True,
                                      "author": "spinner"})
        if status != 200:
            fail(f"spinning patch: {status} {body}")
        pid = json.loads(body)["patch_id"]
        http_infer = {"inputs": [{"name": "x", "shape": [1, WIDTH], "datatype": "FP32",
                                  "data": [42.0, 1.0, 2.0, 3.0]}]}
        stuck_answer, grpc_answer, queued_answer = [], [], []
        stuck = threading.Thread(
            target=lambda: stuck_answer.append(server.post("/v2/models/adder/infer", http_infer)),
            daemon=True)
        stuck.start()
        time.sleep(1)
        stuck_grpc = grpc_infer_thread(server, binary, [42.0, 1.0, 2.0, 3.0], grpc_answer)
        time.sleep(1)
        queued = threading.Thread(
            target=lambda: queued_answer.append(server.post("/v2/models/adder/infer", http_infer)),
            daemon=True)
        queued.start()
        time.sleep(1)
        t0 = time.time()
        status, body = server.post("/v2/admin/models/adder/versions/1/rollback", {"patch_id": pid})
        if status == 200 or "still running" not in body or "with force" not in body:
            fail(f"rollback with a stuck execution: {status} {body}")
        status, body = server.post("/v2/admin/models/adder/versions/1/rollback",
                                   {"patch_id": pid, "force": True})
        if status != 200 or not json.loads(body)["retired"]:
            fail(f"forced rollback with a stuck execution: {status} {body}")
        if time.time() - t0 > 40:
            fail(f"the rollbacks took {time.time() - t0:.0f} s")
        # The stuck requests are answered when their version is retired (their threads spin
        # on); the queued one runs on the fresh build, where the spinning patch is gone.
        for thread in (stuck, stuck_grpc, queued):
            thread.join(timeout=15)
        if not stuck_answer or stuck_answer[0][0] != 503 or "was retired" not in stuck_answer[0][1]:
            fail(f"the stuck HTTP request after a forced retire: {stuck_answer or 'no answer'}")
        if not grpc_answer or grpc_answer[0][0] != "UNAVAILABLE" or \
                "was retired" not in grpc_answer[0][1]:
            fail(f"the stuck gRPC request after a forced retire: {grpc_answer or 'no answer'}")
        if not queued_answer or queued_answer[0][0] != 200 or \
                json.loads(queued_answer[0][1])["outputs"][0]["data"] != [43.0, 2.0, 3.0, 4.0]:
            fail(f"the request queued behind them: {queued_answer or 'no answer'}")
        alive(server, PLAIN)  # The fresh build serves; the stuck one still spins.
        t0 = time.time()
        status, body = server.post("/v2/admin/models/load", LOAD)
        if status != 200:
            fail(f"reload after a retirement: {status} {body}")
        alive(server, PLAIN)
        status, body = server.post("/v2/repository/models/adder/unload", {})
        if status != 200 or time.time() - t0 > 30:
            fail(f"reload and unload: {status} {body} after {time.time() - t0:.0f} s")
        if server.get("/v2/health/ready")[0] != 200:
            fail("not ready after a retirement")
        t0 = time.time()
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=2 * 10 + 10 + 15)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            fail("SIGTERM with a stuck execution: the server did not exit")
        print(f"ok: a stuck kernel: rollback refused naming it, forced rollback retired the "
              f"version, reload/unload bounded, SIGTERM exit in {time.time() - t0:.0f} s "
              f"(status {server.proc.returncode})")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def main():
    if len(sys.argv) != 4:
        fail(__doc__)
    binary, repo, shared = sys.argv[1:]
    work = tempfile.mkdtemp(prefix="cuvil-patch-trust-")
    try:
        server = Server(binary, repo, os.path.join(work, "snap"), os.path.join(work, "cache"))
        server.start()
        try:
            load_adder(server)
            alive(server, PLAIN)
            symbol = add_symbol(server)
            profile_ending_during_validation(server, symbol)
            concurrent_patches_queue(server, symbol)
            middle_rollbacks_are_checked(server, symbol)
            hostile_patches(server, symbol, work)
            exact_over_http(server, symbol)
            a_kernel_no_input_runs_is_not_validated(server)
        finally:
            server.stop()
        native_code_needs_authority(binary, repo, work)
        missing_sandbox_program(binary, repo, work)
        reload_keeps_patches(binary, repo, work)
        tier_up_keeps_patches(binary, repo, shared, work)
        stuck_kernel_retires_the_version(binary, repo, work)
        print("PASS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
