#!/usr/bin/env python3
"""Independent float64 PyTorch reference for tpfabric's GPT-2 model.

Compare mode: recompute logits, loss and every weight gradient from an unsharded
Hugging Face-layout GPT-2 checkpoint and a token batch, then check tpfabric's
candidate outputs against them.

    gpt_reference.py --weights W.safetensors --batch B.safetensors \
        [--candidate C.safetensors] [--dump-reference R.safetensors] \
        [--rtol-logits 1e-4] [--rtol-loss 1e-4] [--rtol-grad 1e-3]

Generator mode: write a random model, batch and a float32 candidate (computed by
this reference) for self-tests.

    gpt_reference.py --write-random OUT_DIR [--n-layer 2 --n-head 4 --n-embd 32
        --n-ctx 16 --vocab 256 --batch-size 2 --seq 8 --seed 0]

Exit status: 0 all checks pass, 1 some check fails, 2 bad input (unreadable
file, missing tensor, shape mismatch, bad config), 3 internal error,
77 torch or numpy is missing (the caller should report a skip).

Only the standard library, torch and numpy are used; safetensors files are read
and written by hand (see read_safetensors / write_safetensors).
"""
import sys

# Import torch before anything else so that a machine without it skips cleanly.
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: python3-torch is not installed")
    sys.exit(77)
try:
    import numpy as np
except ImportError:
    print("SKIP: python3-numpy is not installed")
    sys.exit(77)

import argparse
import json
import math
import os
import struct
import traceback


class BadInput(Exception):
    """Malformed or inconsistent input; reported with exit status 2."""


# ---------------------------------------------------------------- safetensors
# Format: u64 little-endian header length N, N bytes of JSON header, then the data
# buffer. Each header entry gives dtype, shape and [begin, end) byte offsets into
# the buffer; "__metadata__" maps strings to strings. All data is little-endian.
# dtype code -> (torch dtype, little-endian numpy dtype; None: read as raw i16).
_DTYPES = {
    "F64": (torch.float64, "<f8"), "F32": (torch.float32, "<f4"),
    "F16": (torch.float16, "<f2"), "BF16": (torch.bfloat16, None),
    "I64": (torch.int64, "<i8"), "I32": (torch.int32, "<i4"),
    "I16": (torch.int16, "<i2"), "I8": (torch.int8, "i1"),
    "U8": (torch.uint8, "u1"), "BOOL": (torch.bool, "?"),
}
_CODE_OF = {tdt: code for code, (tdt, _) in _DTYPES.items()}


def read_safetensors(path):
    """Return ({name: tensor}, {metadata key: str}); raise BadInput on any defect."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e}")
    if len(data) < 8:
        raise BadInput(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise BadInput(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"{path}: header is not valid JSON: {e}")
    if not isinstance(header, dict):
        raise BadInput(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    base, tensors = 8 + n, {}
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: malformed header entry for {name!r}")
        if dtype not in _DTYPES:
            raise BadInput(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
        tdt, npdt = _DTYPES[dtype]
        numel = math.prod(shape)
        itemsize = 2 if npdt is None else np.dtype(npdt).itemsize
        if min(shape, default=0) < 0 or not 0 <= begin <= end or end - begin != numel * itemsize \
                or base + end > len(data):
            raise BadInput(f"{path}: tensor {name!r} has inconsistent shape {shape} / offsets {[begin, end]}")
        if numel == 0:
            tensors[name] = torch.zeros(shape, dtype=tdt)
            continue
        arr = np.frombuffer(data, dtype=npdt or "<i2", count=numel, offset=base + begin)
        arr = arr.astype(arr.dtype.newbyteorder("="))  # native order, owned copy
        t = torch.from_numpy(arr)
        if npdt is None:                               # reinterpret raw 16 bits as bf16
            t = t.view(torch.bfloat16)
        tensors[name] = t.reshape(shape)
    return tensors, meta


def write_safetensors(path, tensors, metadata=None):
    """Write {name: tensor} (any dtype in _DTYPES) with string metadata."""
    header = {"__metadata__": {str(k): str(v) for k, v in (metadata or {}).items()}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype not in _CODE_OF:
            raise ValueError(f"cannot write dtype {t.dtype} of {name}")
        code = _CODE_OF[t.dtype]
        npdt = _DTYPES[code][1]
        arr = t.view(torch.int16).numpy().astype("<i2") if npdt is None else t.numpy().astype(npdt)
        blob = arr.tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # pad so the buffer starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


# ---------------------------------------------------------------- model
def read_config(meta):
    """Parse the model config from the weights' __metadata__ strings."""
    cfg = {}
    for key in ("n_layer", "n_head", "n_embd", "n_ctx", "vocab_size"):
        try:
            cfg[key] = int(meta[key])
        except (KeyError, ValueError, TypeError):
            raise BadInput(f"weights metadata: missing or non-integer {key!r}")
        if cfg[key] <= 0:
            raise BadInput(f"weights metadata: {key} must be positive, got {cfg[key]}")
    try:
        cfg["eps"] = float(meta.get("layer_norm_epsilon", "1e-5"))
    except ValueError:
        raise BadInput("weights metadata: layer_norm_epsilon is not a number")
    if cfg["n_embd"] % cfg["n_head"]:
        raise BadInput(f"n_embd {cfg['n_embd']} is not divisible by n_head {cfg['n_head']}")
    return cfg


def param_shapes(cfg):
    """Ordered {HF name: shape} of every model weight (Conv1D weights are [in, out])."""
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["n_ctx"]
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C)}
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def forward(w, cfg, inputs, targets):
    """GPT-2 pre-LN forward pass; returns (logits [B,S,V], mean cross-entropy loss)."""
    B, S = inputs.shape
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["eps"]
    d = C // H
    ln = lambda x, name: F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], eps)
    conv1d = lambda x, name: x @ w[name + ".weight"] + w[name + ".bias"]  # y = x W + b
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)  # True above the diagonal = masked
    x = w["wte.weight"][inputs] + w["wpe.weight"][:S]
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)
        # [B, S, C] -> [B, H, S, d]: head h owns columns h*d .. (h+1)*d-1 of q, k and v.
        q, k, v = (t.reshape(B, S, H, d).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        att = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, C)
        x = x + conv1d(y, p + "attn.c_proj")
        h = F.gelu(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        x = x + conv1d(h, p + "mlp.c_proj")
    logits = ln(x, "ln_f") @ w["wte.weight"].T  # LM head tied to wte
    loss = F.cross_entropy(logits.reshape(B * S, -1), targets.reshape(B * S))
    return logits, loss


def reference(weights, cfg, tokens, dtype):
    """Run forward + backward in `dtype`; return (logits, loss, {name: grad})."""
    leaves = {n: t.detach().to(dtype).clone().requires_grad_(True) for n, t in weights.items()}
    tokens = tokens.to(torch.int64)
    logits, loss = forward(leaves, cfg, tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).detach() for n, t in leaves.items()}
    return logits.detach(), loss.detach(), grads


# ---------------------------------------------------------------- input checks
def load_inputs(weights_path, batch_path):
    """Read and validate the weights and batch; return (cfg, {name: weight}, tokens)."""
    raw, meta = read_safetensors(weights_path)
    cfg = read_config(meta)
    problems, weights = [], {}
    for name, shape in param_shapes(cfg).items():
        if name not in raw:
            problems.append(f"weights: missing tensor {name} {list(shape)}")
        elif tuple(raw[name].shape) != shape:
            problems.append(f"weights: {name} has shape {list(raw[name].shape)}, expected {list(shape)}")
        elif not raw[name].is_floating_point():
            problems.append(f"weights: {name} is not floating point ({raw[name].dtype})")
        else:
            weights[name] = raw[name]
    extra = sorted(set(raw) - set(param_shapes(cfg)))
    if extra:  # e.g. HF's attention-mask buffers h.{i}.attn.bias: not parameters
        print(f"note: ignoring {len(extra)} extra tensor(s) in weights: {', '.join(extra[:5])}"
              + (" ..." if len(extra) > 5 else ""))
    batch, _ = read_safetensors(batch_path)
    tok = batch.get("tokens")
    if tok is None:
        problems.append("batch: missing tensor 'tokens'")
    elif tok.dtype not in (torch.int32, torch.int64) or tok.dim() != 2 or tok.shape[1] < 2:
        problems.append(f"batch: tokens must be I32/I64 [batch, seq+1] with seq >= 1, got "
                        f"{_CODE_OF.get(tok.dtype, tok.dtype)} {list(tok.shape)}")
    else:
        if tok.shape[1] - 1 > cfg["n_ctx"]:
            problems.append(f"batch: seq {tok.shape[1] - 1} exceeds n_ctx {cfg['n_ctx']}")
        if tok.numel() and (tok.min() < 0 or tok.max() >= cfg["vocab_size"]):
            problems.append(f"batch: token ids must lie in [0, {cfg['vocab_size']}), got "
                            f"[{int(tok.min())}, {int(tok.max())}]")
    if problems:
        raise BadInput("\n".join(problems))
    return cfg, weights, tok


# ---------------------------------------------------------------- comparison
# Tolerances. The candidate computes in float32 (unit roundoff 2^-24 ~ 6e-8) while the
# reference is float64, so the reference is exact by comparison and all the difference
# is the candidate's rounding, plus a different summation order (tensor-parallel
# partial sums reduced across ranks). Errors are measured relative to the largest
# magnitude in each tensor, so elements that cancel to ~0 do not blow up the ratio.
#  * logits / loss: a few matmuls of length C..4C per layer, softmax and layer norm;
#    accumulated fp32 error is ~1e-6 relative, so 1e-4 leaves a wide margin while
#    still catching any real mistake (a wrong mask, scale or layout moves O(1)).
#  * gradients: backward runs through more cancelling reductions (softmax and
#    layer-norm backward subtract means, weight grads sum over all batch*seq
#    positions, wte sums embedding and LM-head parts), so fp32 error is larger,
#    typically 1e-6..1e-5 relative; 1e-3 keeps margin for larger models.
DEFAULT_RTOL = {"logits": 1e-4, "loss": 1e-4, "grad": 1e-3}
TINY = 1e-30  # floor of max|ref| in the relative error (guards all-zero tensors)


def compare(ref, cand, rtol):
    """Print the comparison table; return True if every tensor passes.

    ref and cand map names ('logits', 'loss', 'grad.<hf name>') to tensors; cand
    has been checked for presence and shape already."""
    print(f"{'tensor':<32} {'max|diff|':>11} {'max|ref|':>11} {'rel err':>11} {'tol':>8}  result")
    ok_all, worst = True, {}
    for name, r in ref.items():
        r = r.to(torch.float64).reshape(-1)
        c = cand[name].to(torch.float64).reshape(-1)
        diff = (c - r).abs().max().item()  # NaN/inf in the candidate propagate here
        mref = r.abs().max().item()
        rel = diff / max(mref, TINY)
        kind = "grad" if name.startswith("grad.") else name
        ok = rel <= rtol[kind]  # False for NaN
        ok_all &= ok
        worst[kind] = max(worst.get(kind, 0.0), rel) if rel == rel else float("nan")
        print(f"{name:<32} {diff:11.3e} {mref:11.3e} {rel:11.3e} {rtol[kind]:8.1e}  {'PASS' if ok else 'FAIL'}")
    print("worst relative error: " + ", ".join(f"{k} {v:.3e}" for k, v in worst.items()))
    return ok_all


def outputs_as_dict(logits, loss, grads):
    out = {"logits": logits, "loss": loss.reshape(())}
    out.update({"grad." + n: g for n, g in grads.items()})
    return out


def check_candidate(cand, ref):
    """Raise BadInput listing every missing, non-float or mis-shaped candidate tensor."""
    problems = []
    for name, r in ref.items():
        if name not in cand:
            problems.append(f"candidate: missing tensor {name} {list(r.shape)}")
        elif not cand[name].is_floating_point():
            problems.append(f"candidate: {name} is not floating point ({cand[name].dtype})")
        elif (cand[name].numel() != 1) if name == "loss" else (cand[name].shape != r.shape):
            problems.append(f"candidate: {name} has shape {list(cand[name].shape)}, expected {list(r.shape)}"
                            + (" or [1]" if name == "loss" else ""))
    if problems:
        raise BadInput("\n".join(problems))


# ---------------------------------------------------------------- random mode
def write_random(a):
    """Write weights, batch and a float32 candidate computed by this reference."""
    cfg = {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "n_ctx": a.n_ctx,
           "vocab_size": a.vocab, "eps": 1e-5}
    if a.n_embd % a.n_head or a.seq > a.n_ctx or min(a.n_layer, a.n_head, a.vocab, a.batch_size, a.seq) < 1:
        raise BadInput("need n_embd % n_head == 0, 1 <= seq <= n_ctx and positive sizes")
    g = torch.Generator().manual_seed(a.seed)
    randn = lambda shape, std: torch.randn(shape, generator=g, dtype=torch.float64) * std
    # Unit-scale init (std 1/sqrt(fan_in), not GPT-2's 0.02) so that attention is far
    # from uniform and logits are O(1): softmax, masking and CE are actually exercised.
    weights = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            t = 1.0 + randn(shape, 0.1)           # layer-norm gains around 1
        elif len(shape) == 1:
            t = randn(shape, 0.1)                 # biases (incl. layer-norm biases)
        else:
            fan_in = shape[1] if name in ("wte.weight", "wpe.weight") else shape[0]
            scale = 1.0 / math.sqrt(2 * cfg["n_layer"]) if name.endswith("c_proj.weight") else 1.0
            t = randn(shape, scale / math.sqrt(fan_in))
        weights[name] = t.to(torch.float32)
    tokens = torch.randint(0, a.vocab, (a.batch_size, a.seq + 1), generator=g, dtype=torch.int32)
    meta = {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "n_ctx": a.n_ctx,
            "vocab_size": a.vocab, "layer_norm_epsilon": "1e-05", "generator": "gpt_reference.py"}
    os.makedirs(a.write_random, exist_ok=True)
    write_safetensors(os.path.join(a.write_random, "weights.safetensors"), weights, meta)
    write_safetensors(os.path.join(a.write_random, "batch.safetensors"), {"tokens": tokens})
    cand = outputs_as_dict(*reference(weights, cfg, tokens, torch.float32))
    write_safetensors(os.path.join(a.write_random, "candidate.safetensors"), cand)
    print(f"wrote weights/batch/candidate.safetensors to {a.write_random} (loss {cand['loss'].item():.6f})")
    return 0


# ---------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", help="unsharded HF-layout GPT-2 weights (.safetensors)")
    ap.add_argument("--batch", help="safetensors with 'tokens' [batch, seq+1] (I32/I64)")
    ap.add_argument("--candidate", help="tpfabric outputs: logits, loss, grad.<name>")
    ap.add_argument("--dump-reference", metavar="OUT", help="write the reference outputs (as f32) here")
    for kind in ("logits", "loss", "grad"):
        ap.add_argument(f"--rtol-{kind}", type=float, default=DEFAULT_RTOL[kind],
                        help=f"relative tolerance for {kind} (default {DEFAULT_RTOL[kind]:g})")
    ap.add_argument("--write-random", metavar="OUT_DIR", help="generator mode: write a random test case")
    for flag, default in (("n-layer", 2), ("n-head", 4), ("n-embd", 32), ("n-ctx", 16),
                          ("vocab", 256), ("batch-size", 2), ("seq", 8), ("seed", 0)):
        ap.add_argument(f"--{flag}", type=int, default=default, help=f"generator mode (default {default})")
    a = ap.parse_args(argv)  # argparse itself exits 2 on bad usage

    if a.write_random:
        return write_random(a)
    if not (a.weights and a.batch and (a.candidate or a.dump_reference)):
        ap.error("compare mode needs --weights, --batch and --candidate and/or --dump-reference")
    cfg, weights, tokens = load_inputs(a.weights, a.batch)
    cand = read_safetensors(a.candidate)[0] if a.candidate else None
    ref = outputs_as_dict(*reference(weights, cfg, tokens, torch.float64))
    if a.dump_reference:
        write_safetensors(a.dump_reference, {n: t.to(torch.float32) for n, t in ref.items()})
        print(f"wrote reference outputs to {a.dump_reference}")
    if cand is None:
        return 0
    check_candidate(cand, ref)
    print(f"model: n_layer={cfg['n_layer']} n_head={cfg['n_head']} n_embd={cfg['n_embd']} "
          f"vocab={cfg['vocab_size']}; batch={tokens.shape[0]} seq={tokens.shape[1] - 1}")
    ok = compare(ref, cand, {"logits": a.rtol_logits, "loss": a.rtol_loss, "grad": a.rtol_grad})
    print("RESULT: PASS" if ok else "RESULT: FAIL")
    return 0 if ok else 1


def run(argv=None):
    """main() with the exit statuses of the command line (see the top); returns the status.

    The self-test calls it in-process: one torch import for all its cases."""
    try:
        return main(argv)
    except SystemExit as e:  # argparse: bad usage (2) or --help (0)
        return 0 if e.code is None else e.code if isinstance(e.code, int) else 2
    except BadInput as e:
        print(f"BAD INPUT:\n{e}", file=sys.stderr)
        return 2
    except Exception:  # a bug in this script, not a tpfabric failure
        traceback.print_exc()
        return 3


if __name__ == "__main__":
    sys.exit(run())
