#!/usr/bin/env python3
"""Measure the kernels the planner's compute model prices, on one NVIDIA GPU.

For each transformer layout in CONFIGS (the held-out H100 runs of docs/plan.md), the layer's
GEMMs as `tpf plan` shapes them (QKV, projection, MLP up and down, logits: tokens x out x in,
out split over TP), each in its three passes with Megatron's memory layouts (forward
X @ W^T, input gradient dY @ W, weight gradient dY^T @ X), in BF16 and (Hopper) in FP8 with
per-tensor scales (torch._scaled_mm, e4m3, every pass TN as Transformer Engine runs them);
square GEMMs for the large-GEMM rate and the fixed cost per kernel; and fused causal attention
forward + backward (torch's SDPA, cuDNN's and FlashAttention-2's kernels); and whole GPT layers
forward + backward (LAYERS), with and without their element-wise work, eager and compiled.
Writes one CSV file per kind to the output folder. Timing: CUDA events over back-to-back replays
of a CUDA graph of the call after warm-up, median of 5 repeats.

    python3 bench/gpu/hopper_kernels.py --out DIR [--only gemm,attention,layer]  # on the GPU
    python3 bench/gpu/hopper_kernels.py --out DIR --dry-run  # here: tiny shapes on the CPU
"""
import argparse
import contextlib
import csv
import os
import statistics
import time

import torch

# name, hidden, mlp width, gated MLP, heads, kv heads, tp, tokens per GEMM (mb x s / cp), vocab
CONFIGS = [
    ("megatron-1.7b", 2048, 8192, False, 16, 16, 1, 4096, 131072),
    ("megatron-7.1b", 4096, 16384, False, 32, 32, 2, 4096, 131072),
    ("megatron-16b", 6144, 24576, False, 48, 48, 4, 4096, 131072),
    ("megatron-32b", 7168, 28672, False, 56, 56, 8, 4096, 131072),
    ("megatron-70b", 8192, 32768, False, 64, 64, 8, 4096, 131072),
    ("megatron-177b", 12288, 49152, False, 96, 96, 8, 4096, 131072),
    ("megatron-462b", 18432, 73728, False, 144, 144, 8, 4096, 131072),
    ("gpt3-175b-tp4", 12288, 49152, False, 96, 96, 4, 2048, 51200),
    ("llama3-8b-cp2", 4096, 14336, True, 32, 8, 1, 4096, 128256),
    ("llama3-70b-tp4", 8192, 28672, True, 64, 8, 4, 8192, 128256),
    ("llama3-405b-tp8", 16384, 53248, True, 128, 8, 8, 8192, 128256),
]
SQUARES = [256, 512, 1024, 2048, 4096, 8192, 16384]
# name, batch, heads, sequence, head dim (the heads one TP rank holds)
ATTENTION = [
    ("megatron-1.7b", 1, 16, 4096, 128),
    ("megatron-70b-tp8", 1, 8, 4096, 128),
    ("gpt3-175b-tp4", 1, 24, 2048, 128),
    ("llama3-70b-tp4", 1, 16, 8192, 128),
] + [(f"sweep-bh{bh}-s{s}", 1, bh, s, 128) for bh in (4, 8, 16, 32, 64)
     for s in (1024, 2048, 4096, 8192, 16384)]


def layer_gemms(h, f, gated, heads, kv_heads, tp, tokens, vocab):
    """(name, m, n, k) of the forward GEMMs, as src/plan/step_model.cc shapes them."""
    d = h // heads
    return [
        ("qkv", tokens, (h + 2 * kv_heads * d) // tp, h),
        ("proj", tokens, h, h // tp),
        ("mlp_up", tokens, (2 if gated else 1) * f // tp, h),
        ("mlp_down", tokens, h, f // tp),
        ("logits", tokens, vocab // tp, h),
    ]


class Timer:
    """On a GPU each measurement replays a CUDA graph of the call, so the time is the kernels'
    and not Python's launch cost (about 20 us a call, which would bound the small cases)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def seconds(self, fn, min_total_s):
        """Median seconds of one call of fn over 5 repeats of enough back-to-back calls."""
        self.mode = "eager"
        run = fn
        if self.cuda:
            try:
                run, self.mode = self.graphed(fn), "graph"
            except RuntimeError as error:  # not capturable: eager, and the CSV says so
                print(f"eager timing: {str(error).splitlines()[0]}")
                torch.cuda.synchronize()
        run()
        self.sync()
        start = time.perf_counter()
        run()
        self.sync()
        once = max(time.perf_counter() - start, 1e-6)
        calls = max(3, min(2000, int(min_total_s / once)))
        for _ in range(2):
            run()
        repeats = []
        for _ in range(5):
            if self.cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                for _ in range(calls):
                    run()
                end.record()
                end.synchronize()
                repeats.append(begin.elapsed_time(end) * 1e-3 / calls)
            else:
                start = time.perf_counter()
                for _ in range(calls):
                    run()
                repeats.append((time.perf_counter() - start) / calls)
        return statistics.median(repeats)

    @staticmethod
    def graphed(fn):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as capture needs
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def bf16_passes(m, n, k, device, dtype):
    """The three passes with Megatron's layouts; W is stored out x in (n x k)."""
    x = torch.randn(m, k, device=device, dtype=dtype)
    w = torch.randn(n, k, device=device, dtype=dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype)
    return [
        ("fwd", m, n, k, lambda: x @ w.t()),
        ("dgrad", m, k, n, lambda: dy @ w),
        ("wgrad", n, k, m, lambda: dy.t() @ x),
    ]


def fp8_gemm(m, n, k, device):
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def measure_gemms(args, timer, device, writer):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    scale = 64 if args.dry_run else 1
    fp8 = device.type == "cuda" and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9)
    rows = []
    for name, h, f, gated, heads, kv, tp, tokens, vocab in CONFIGS:
        for gemm, m, n, k in layer_gemms(h, f, gated, heads, kv, tp, tokens, vocab):
            rows.append((name, gemm, m // scale, n // scale, k // scale))
    for size in SQUARES:
        rows.append(("square", str(size), size // scale, size // scale, size // scale))
    for config, gemm, m, n, k in rows:
        for pass_name, pm, pn, pk, fn in bf16_passes(m, n, k, device, dtype):
            s = timer.seconds(fn, args.min_total_s)
            writer.writerow([config, gemm, pass_name, "bf16", pm, pn, pk, f"{s * 1e6:.3f}",
                             f"{2 * pm * pn * pk / s / 1e12:.2f}", timer.mode])
        if fp8:
            for pass_name, pm, pn, pk in [("fwd", m, n, k), ("dgrad", m, k, n), ("wgrad", n, k, m)]:
                s = timer.seconds(fp8_gemm(pm, pn, pk, device), args.min_total_s)
                writer.writerow([config, gemm, pass_name, "fp8", pm, pn, pk, f"{s * 1e6:.3f}",
                                 f"{2 * pm * pn * pk / s / 1e12:.2f}", timer.mode])
        if device.type == "cuda":
            torch.cuda.empty_cache()


def causal_attention(q, k, v):
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    # torch 1.13 (the dry run here): the materialized reference
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def measure_attention(args, timer, device, writer):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = [("flash", lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])),
                    ("cudnn", lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])),
                   ]
    except ImportError:  # torch before 2.3 (Debian's 1.13): whatever SDPA picks
        backends = [("default", contextlib.nullcontext)]
    for name, b, heads, s, d in ATTENTION:
        if args.dry_run:
            s //= 32
        q, k, v = (torch.randn(b, heads, s, d, device=device, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(b, heads, s, d, device=device, dtype=dtype)
        full_flops = 4 * b * heads * s * s * d  # Megatron's count: QK^T and PV, no mask
        for backend_name, backend in backends:
            try:
                with backend():
                    def forward():
                        return causal_attention(q, k, v)

                    def forward_backward():
                        out = forward()
                        torch.autograd.grad(out, (q, k, v), grad)
                    fwd_s = timer.seconds(forward, args.min_total_s)
                    both_s = timer.seconds(forward_backward, args.min_total_s)
            except (RuntimeError, ValueError) as error:
                print(f"attention {name} {backend_name}: not run ({str(error).splitlines()[0]})")
                continue
            writer.writerow([name, backend_name, b, heads, s, d, f"{fwd_s * 1e6:.3f}",
                             f"{both_s * 1e6:.3f}", f"{full_flops / fwd_s / 1e12:.2f}",
                             f"{3 * full_flops / both_s / 1e12:.2f}", timer.mode])


# name, hidden, heads, MLP width, sequence: GPT layers (LayerNorm, biases, GELU, dropout 0.1) at
# tp = 1 with one sequence per micro-batch, the shapes of Megatron-LM's H100 table.
LAYERS = [
    ("gpt-h2048", 2048, 16, 8192, 4096),
    ("gpt-h4096", 4096, 32, 16384, 4096),
    ("gpt-h8192", 8192, 64, 32768, 4096),
]


class GptLayer:
    """One pre-LayerNorm GPT layer, forward and backward through autograd. `gemms_only` keeps the
    GEMMs, the attention and the reshapes between them and drops the element-wise work (norms,
    biases, GELU, dropout, residual adds), so the difference of the two is what that work costs."""

    def __init__(self, h, heads, f, device, dtype, gemms_only):
        def param(*shape):
            return (torch.randn(*shape, device=device, dtype=dtype) * 0.02).requires_grad_()
        self.h, self.heads, self.gemms_only = h, heads, gemms_only
        self.w_qkv, self.w_proj = param(3 * h, h), param(h, h)
        self.w_up, self.w_down = param(f, h), param(h, f)
        self.params = [self.w_qkv, self.w_proj, self.w_up, self.w_down]
        if not gemms_only:
            self.b_qkv, self.b_proj, self.b_up, self.b_down = param(3 * h), param(h), param(f), param(h)
            self.ln1 = (torch.ones(h, device=device, dtype=dtype).requires_grad_(),
                        torch.zeros(h, device=device, dtype=dtype).requires_grad_())
            self.ln2 = (torch.ones(h, device=device, dtype=dtype).requires_grad_(),
                        torch.zeros(h, device=device, dtype=dtype).requires_grad_())
            self.params += [self.b_qkv, self.b_proj, self.b_up, self.b_down, *self.ln1, *self.ln2]

    def __call__(self, x):
        fn = torch.nn.functional
        s, h, heads = x.shape[0], self.h, self.heads
        if self.gemms_only:
            qkv = x @ self.w_qkv.t()
        else:
            qkv = fn.linear(fn.layer_norm(x, (h,), *self.ln1), self.w_qkv, self.b_qkv)
        q, k, v = qkv.view(1, s, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
        context = causal_attention(q, k, v).transpose(1, 2).reshape(s, h)
        if self.gemms_only:
            return (context @ self.w_proj.t()) @ self.w_up.t() @ self.w_down.t()
        x = x + fn.dropout(fn.linear(context, self.w_proj, self.b_proj), 0.1)
        up = fn.gelu(fn.linear(fn.layer_norm(x, (h,), *self.ln2), self.w_up, self.b_up))
        return x + fn.dropout(fn.linear(up, self.w_down, self.b_down), 0.1)


def measure_layers(args, timer, device, writer):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    started = time.perf_counter()
    for name, h, heads, f, s in LAYERS:
        if args.dry_run:
            h, f, s = h // 32, f // 32, s // 32
        x = torch.randn(s, h, device=device, dtype=dtype, requires_grad=True)
        grad = torch.randn(s, h, device=device, dtype=dtype)
        for variant in ("full", "gemms_only", "full_compiled"):
            layer = GptLayer(h, heads, f, device, dtype, gemms_only=variant == "gemms_only")
            forward = layer
            if variant == "full_compiled":
                # Inductor fuses the element-wise work as Megatron's fused kernels do; compiling
                # costs device time, so it stops once the measurements have run 5 minutes.
                if args.dry_run or time.perf_counter() - started > 300:
                    continue
                forward = torch.compile(layer.__call__)

            def forward_backward():
                torch.autograd.grad(forward(x), [x] + layer.params, grad)
            try:
                seconds = timer.seconds(forward_backward, args.min_total_s)
            except RuntimeError as error:
                print(f"layer {name} {variant}: not run ({str(error).splitlines()[0]})")
                continue
            writer.writerow([name, variant, h, heads, f, s, f"{seconds * 1e6:.3f}", timer.mode])
        if device.type == "cuda":
            torch.cuda.empty_cache()


def describe(device):
    lines = [f"torch {torch.__version__}"]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        lines += [f"device {props.name}, {props.multi_processor_count} SMs, "
                  f"{props.total_memory / 2**30:.1f} GiB", f"cuda {torch.version.cuda}"]
    else:
        lines.append("device cpu (dry run: shapes divided by 64, timings meaningless)")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the CSV files")
    parser.add_argument("--only", default="attention,gemm,layer",
                        help="what to measure, of attention, gemm and layer (comma-separated)")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--min-total-s", type=float, default=0.02,
                        help="time each measurement over at least this long")
    args = parser.parse_args()
    device = torch.device("cpu" if args.dry_run or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu" and not args.dry_run:
        parser.error("no CUDA device: pass --dry-run to check the script on the CPU")
    if args.dry_run:
        args.min_total_s = min(args.min_total_s, 0.001)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "device.txt"), "w") as out:
        out.write(describe(device))
    torch.manual_seed(0)
    timer = Timer(device)
    tables = {
        "attention": (measure_attention, ["config", "backend", "batch", "heads", "seq", "head_dim",
                                          "fwd_us", "fwd_bwd_us", "fwd_full_count_tflops",
                                          "fwd_bwd_full_count_tflops", "timing"]),
        "gemm": (measure_gemms, ["config", "gemm", "pass", "dtype", "m", "n", "k", "us", "tflops",
                                 "timing"]),
        "layer": (measure_layers, ["config", "variant", "hidden", "heads", "mlp", "seq",
                                   "fwd_bwd_us", "timing"]),
    }
    for what in args.only.split(","):
        if what not in tables:
            parser.error(f"--only: '{what}': expected attention, gemm or layer")
        measure, header = tables[what]
        with open(os.path.join(args.out, what + ".csv"), "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(header)
            measure(args, timer, device, writer)


if __name__ == "__main__":
    main()
