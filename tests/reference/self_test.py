#!/usr/bin/env python3
"""Self-test of gpt_reference.py; self_test.sh runs it with the interpreter it chose.

A random model, its own float32 outputs as the candidate, and doctored candidates that must be
rejected with the right status. Every Python start imports torch (about 2 s, nearly all of a
check's time), so the checks call gpt_reference.run() - main() with the command line's exit
statuses - in this one process; two of them also run the script as its own process, so the
statuses are checked where callers see them.

Exit 0: every check behaved as expected; 1: some did not; 77: torch or numpy is missing (from
importing gpt_reference).
"""
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import textwrap

sys.dont_write_bytecode = True  # do not leave __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "gpt_reference.py")
sys.path.insert(0, HERE)
import gpt_reference as g  # noqa: E402  (exits 77 without torch or numpy)
import torch  # noqa: E402

failed = False


def in_process(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = g.run(argv)
    return rc, out.getvalue()


def own_process(argv):
    p = subprocess.run([sys.executable, REF] + argv, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def expect(want, pattern, argv, runner=in_process):
    """Run gpt_reference with argv; require status `want` and (if given) a line matching pattern."""
    global failed
    rc, out = runner(argv)
    shown = " ".join(os.path.basename(a) if os.sep in a else a for a in argv)
    where = "own process" if runner is own_process else "in-process"
    if rc != want or (pattern and not re.search(pattern, out, re.M)):
        print(f"FAIL: expected status {want}" + (f" and /{pattern}/" if pattern else "")
              + f", got {rc} ({where}): {shown}")
        print(textwrap.indent(out, "    "))
        failed = True
    else:
        print(f"ok   (status {rc}, {where}) {shown}")


def mutate(src, dst, op):
    """Write a doctored copy of a safetensors file."""
    t, meta = g.read_safetensors(src)
    if op == "perturb-grad":
        t["grad.h.1.attn.c_attn.weight"][3, 70] += 1e-2
    elif op == "perturb-logits":
        t["logits"][1, 5, 17] += 1e-2
    elif op == "nan-grad":
        t["grad.h.0.mlp.c_fc.bias"][0] = float("nan")
    elif op == "loss-shape1":
        t["loss"] = t["loss"].reshape(1)
    elif op == "drop-grad":
        del t["grad.h.0.ln_2.bias"]
    elif op == "bad-shape":
        t["logits"] = t["logits"][:, :-1]
    elif op == "tokens-i64":
        t["tokens"] = t["tokens"].to(torch.int64)
    else:
        raise ValueError(f"unknown op {op}")
    g.write_safetensors(dst, t, meta)


def checks(d):
    path = lambda name: os.path.join(d, name)  # noqa: E731
    expect(0, "wrote", ["--write-random", d, "--n-layer", "2", "--n-head", "4", "--n-embd", "32",
                        "--n-ctx", "16", "--vocab", "256", "--batch-size", "2", "--seq", "8",
                        "--seed", "1"])
    w = ["--weights", path("weights.safetensors"), "--batch", path("batch.safetensors")]
    cand = path("candidate.safetensors")

    # The reference's own float32 outputs must pass against its float64 outputs (as a command)...
    expect(0, "RESULT: PASS", w + ["--candidate", cand, "--dump-reference", path("ref.safetensors")],
           own_process)
    # ... and so must the dumped reference (f64 outputs rounded to f32).
    expect(0, "RESULT: PASS", w + ["--candidate", path("ref.safetensors")])

    # Accepted variants: loss of shape [1], I64 tokens.
    mutate(cand, path("c_loss1.safetensors"), "loss-shape1")
    expect(0, "RESULT: PASS", w + ["--candidate", path("c_loss1.safetensors")])
    mutate(path("batch.safetensors"), path("batch64.safetensors"), "tokens-i64")
    expect(0, "RESULT: PASS", ["--weights", path("weights.safetensors"),
                               "--batch", path("batch64.safetensors"), "--candidate", cand])

    # Wrong numbers: exit 1, naming the tensor.
    for op, tensor in (("perturb-grad", "grad.h.1.attn.c_attn.weight"), ("perturb-logits", "logits"),
                       ("nan-grad", "grad.h.0.mlp.c_fc.bias")):
        mutate(cand, path(f"c_{op}.safetensors"), op)
        expect(1, f"^{re.escape(tensor)} .*FAIL", w + ["--candidate", path(f"c_{op}.safetensors")])
    # A tighter tolerance than the fp32 error must fail too (the check is not vacuous).
    expect(1, "RESULT: FAIL", w + ["--candidate", cand, "--rtol-grad", "1e-9"])

    # Bad input: exit 2, naming the problem.
    mutate(cand, path("c_drop.safetensors"), "drop-grad")
    expect(2, "missing tensor grad.h.0.ln_2.bias", w + ["--candidate", path("c_drop.safetensors")])
    mutate(cand, path("c_shape.safetensors"), "bad-shape")
    expect(2, r"logits has shape \[2, 7, 256\]", w + ["--candidate", path("c_shape.safetensors")])
    with open(path("weights.safetensors"), "rb") as f, open(path("truncated.safetensors"), "wb") as t:
        t.write(f.read(100))
    expect(2, "runs past the end", ["--weights", path("truncated.safetensors"),
                                    "--batch", path("batch.safetensors"), "--candidate", cand])
    expect(2, "cannot read", w + ["--candidate", path("does_not_exist.safetensors")], own_process)
    expect(2, "", ["--no-such-flag"])  # bad usage, from argparse


def main():
    with tempfile.TemporaryDirectory(prefix="tpf-gpt-reference-") as d:
        checks(d)
    if failed:
        print("self_test: FAILED")
        return 1
    print("self_test: all checks behaved as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
