#!/usr/bin/python3
"""cuvil-admin against a real cuvil-server on ephemeral ports with an admin token.

usage: cuvil_admin_cli_test.py SERVER CUVIL_ADMIN EXAMPLE_REPO

Every verb: list/index (table and --json), functions, patch --ir (mlp's output Gemm rewritten
in LLVM IR computing the same values, so validation passes),
patches, rollback, load/unload, snapshot/restore (UNIMPLEMENTED until snapshots land: exit 1 with
the server's status), sequences list (none open; a model without sequence_batching refused; the
sequence calls themselves are tested in tests/sequences/sequence_admin_test.py), the token (missing: UNAUTHENTICATED), --help per verb and bad usage (exit
2). Exit 0 when every check passes.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zero_downtime"))
from cuvil_proc import CuvilProcess  # noqa: E402
from mlp_patches import gemm_patch_ir  # noqa: E402

VERBS = ["load", "unload", "list", "index", "functions", "patch", "rollback", "patches",
         "snapshot", "restore", "sequences"]


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    server, admin, example = sys.argv[1:]
    problems = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            problems.append(what)

    tmp = tempfile.mkdtemp(prefix="cuvil-admin-cli-")
    repo = os.path.join(tmp, "repo")
    shutil.copytree(example, repo)
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write("s3cret-token\n")
    try:
        with CuvilProcess(server, repo, ["--load-model", "mlp", "--admin-token-file",
                                         token_file]) as s:
            def run(*args, token=True):
                cmd = [admin, "-u", s.grpc] + (["--token-file", token_file] if token else [])
                p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300)
                return p.returncode, p.stdout, p.stderr

            rc, out, err = run("list")
            check(rc == 0 and re.search(r"^mlp\s+1\s+READY\s+mlp/1\s", out, re.M) is not None,
                  f"list: table row for mlp v1 READY (rc {rc}) {out!r} {err!r}")
            check(out.startswith("MODEL"), "list: header first")
            check(re.search(r"^mlp\s+1\s+READY\s.*\sfloat32:3\s", out, re.M) is not None,
                  f"list: mlp's precision column (3 float32 kernels) {out!r}")
            rc, out, err = run("--json", "list")
            models = json.loads(out)["models"] if rc == 0 else []
            check(any(m["name"] == "mlp" and m["state"] == "READY" and m["namespace"] == "mlp/1"
                      for m in models), f"list --json: {out[:200]!r}")
            rc, out, err = run("list", token=False)
            check(rc == 1 and "UNAUTHENTICATED" in err,
                  f"list without the token: rc {rc}, {err.strip()!r}")

            rc, out, err = run("functions", "mlp", "--json")
            funcs = json.loads(out)["functions"] if rc == 0 else []
            gemm = funcs[-1] if funcs else None  # The output Gemm.
            check(gemm is not None and gemm["op_type"] == "Gemm",
                  f"functions --json lists the kernels ({len(funcs)} functions)")
            rc, out, err = run("functions", "mlp", "-v", "1")
            check(rc == 0 and "SYMBOL" in out and gemm and gemm["symbol"] in out,
                  "functions: table with the kernels")
            if gemm:
                ir_file = os.path.join(tmp, "gemm.ll")
                with open(ir_file, "w") as f:
                    f.write(gemm_patch_ir(gemm, 1.0))
                rc, out, err = run("patch", "mlp", "--ir", ir_file, "--author", "cli-test")
                m = re.search(r"patch (\d+) applied: (\S+)", out)
                check(rc == 0 and m and m.group(2) == gemm["symbol"],
                      f"patch --ir: {out.strip()!r} {err.strip()!r}")
                patch_id = m.group(1) if m else "0"
                rc, out, err = run("patches", "mlp")
                check(rc == 0 and re.search(rf"^{patch_id}\s.*\bir\s+active\s+cli-test\s+"
                                            rf"{gemm['symbol']}$", out, re.M) is not None,
                      f"patches: the patch is active {out!r}")
                rc, out, err = run("rollback", "mlp", patch_id)
                check(rc == 0 and f"patch {patch_id} rolled back" in out,
                      f"rollback: {out.strip()!r} {err.strip()!r}")
                rc, out, err = run("--json", "patches", "mlp")
                patches = json.loads(out)["patches"] if rc == 0 else []
                check(len(patches) == 1 and patches[0]["active"] is False,
                      f"patches --json after rollback: {patches}")
                rc, out, err = run("rollback", "mlp", patch_id)
                check(rc == 1 and err.startswith("cuvil-admin rollback: "),
                      f"second rollback of {patch_id} refused: {err.strip()!r}")
                # A patch that does not compile is refused and changes nothing.
                bad = os.path.join(tmp, "bad.ll")
                with open(bad, "w") as f:
                    f.write("this is not IR")
                rc, out, err = run("patch", "mlp", "--ir", bad)
                check(rc == 1 and "INVALID_ARGUMENT" in err, f"bad IR refused: {err.strip()!r}")
            # Pass-through kinds: a recompile at another optimisation level, and a profile
            # window that rolls itself back and prints the per-kernel table.
            rc, out, err = run("patch", "mlp", "--recompile", "opt_level=1")
            m = re.search(r"patch (\d+) applied", out)
            check(rc == 0 and m is not None, f"patch --recompile: {out.strip()!r} {err.strip()!r}")
            if m:
                rc, out, err = run("rollback", "mlp", m.group(1))
                check(rc == 0, f"rollback of the recompile: {err.strip()!r}")
            # The table counts executions inside the window only: send requests meanwhile.
            cmd = [admin, "-u", s.grpc, "--token-file", token_file]
            prof = subprocess.Popen(cmd + ["patch", "mlp", "--profile", "1"], text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            body = {"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                "data": [0.25] * 784}]}
            served = 0
            while prof.poll() is None:
                served += s.http_post("/v2/models/mlp/infer", body)[0] == 200
            out, err = prof.communicate()
            check(prof.returncode == 0 and served > 0 and "FUNCTION" in out and
                  re.search(r"^total\s", out, re.M),
                  f"patch --profile: per-kernel table ({served} requests) {out!r} {err.strip()!r}")
            rc, out, err = run("patch", "mlp", "--ir", os.path.join(tmp, "missing.ll"))
            check(rc == 1 and "cannot read IR file" in err, f"missing IR file: {err.strip()!r}")

            rc, out, err = run("load", "lenet")
            check(rc == 0 and "model lenet loaded; versions: 1" in out, f"load: {out!r} {err!r}")
            rc, out, err = run("index")
            check(rc == 0 and re.search(r"^lenet\s+1\s+READY", out, re.M) is not None,
                  f"index: {out!r}")
            rc, out, err = run("unload", "lenet")
            check(rc == 0 and "model lenet unloaded" in out, f"unload: {out!r} {err!r}")
            rc, out, err = run("--json", "index")
            idx = json.loads(out).get("models", []) if rc == 0 else []
            check(any(m["name"] == "lenet" and m["state"] == "UNAVAILABLE" for m in idx),
                  f"index --json after unload: {idx}")
            rc, out, err = run("load", "no_such_model")
            check(rc == 1 and "NOT_FOUND" in err, f"load of an unknown model: {err.strip()!r}")

            snap = os.path.join(tmp, "mlp.snap")
            rc, out, err = run("snapshot", "mlp", "--out", snap)
            if rc == 0:
                check(os.path.getsize(snap) > 0, f"snapshot written: {out.strip()!r}")
                rc, out, err = run("restore", snap)
                check(rc == 0, f"restore: {out.strip()!r} {err.strip()!r}")
            else:
                check(rc == 1 and "UNIMPLEMENTED" in err and not os.path.exists(snap),
                      f"snapshot before snapshots land: {err.strip()!r}")

            for verb in VERBS:
                p = subprocess.run([admin, verb, "--help"], capture_output=True, text=True)
                check(p.returncode == 0 and p.stdout.startswith(f"usage: cuvil-admin {verb}"),
                      f"{verb} --help")
            # mlp has no sequence_batching: the sequence calls say so.
            rc, out, err = run("sequences", "list", "mlp")
            check(rc == 1 and "INVALID_ARGUMENT" in err and "sequence_batching" in err,
                  f"sequences list of a model without sequence_batching: {err.strip()!r}")
            rc, out, err = run("--json", "sequences", "list")
            check(rc == 0 and json.loads(out).get("sequences", []) == [],
                  f"sequences list with none open: {out!r}")
            for args, why in [(["bogus"], "unknown verb"), (["patch", "mlp"], "exactly one"),
                              (["list", "--ir", "x"], "does not apply"),
                              (["sequences", "end", "mlp"], "'end MODEL ID'")]:
                p = subprocess.run([admin] + args, capture_output=True, text=True)
                check(p.returncode == 2 and why in p.stderr, f"bad usage {args}: {p.stderr!r}")
            p = subprocess.run([admin, "-u", "127.0.0.1:1", "--timeout", "5", "list"],
                               capture_output=True, text=True)
            check(p.returncode == 1 and "UNAVAILABLE" in p.stderr,
                  f"unreachable server: {p.stderr.strip()!r}")
            check(s.alive(), "server alive")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"FAILED: {len(problems)} check(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
