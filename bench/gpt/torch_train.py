#!/usr/bin/env python3
"""The PyTorch peer of `tpf train`: the same GPT-2-style model (pre-LayerNorm, learned positions,
causal attention, tanh GELU MLP of 4x width, tied output layer), fp32, AdamW with the same
hyperparameters and global-norm clipping, trained on random byte windows of a text file in one
process with a given number of threads. Prints one JSON line: tokens/s over the steps after the
first (which warms up), like `tpf train`'s summary.

Usage: torch_train.py --data FILE [--layers 6 --heads 12 --width 768 --context 256 --batch 8]
                      [--steps 6] [--threads 2]
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: python3-torch is not installed", file=sys.stderr)
    sys.exit(77)


class Block(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(width)
        self.c_attn = torch.nn.Linear(width, 3 * width)
        self.c_proj = torch.nn.Linear(width, width)
        self.ln_2 = torch.nn.LayerNorm(width)
        self.c_fc = torch.nn.Linear(width, 4 * width)
        self.mlp_proj = torch.nn.Linear(4 * width, width)

    def forward(self, x, mask):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        scores = scores.masked_fill(mask[:t, :t], float("-inf"))
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, layers, heads, width, context, vocab=256):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, width)
        self.wpe = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(width)
        self.register_buffer("mask", torch.ones(context, context).triu(1).bool())
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    data = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8).long()
    model = Gpt(a.layers, a.heads, a.width, a.context)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=6e-4, betas=(0.9, 0.95))
    times, losses = [], []
    for _ in range(a.steps):
        start = time.perf_counter()
        offsets = torch.randint(0, len(data) - a.context - 1, (a.batch,))
        window = torch.stack([data[o:o + a.context + 1] for o in offsets.tolist()])
        loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    tokens = a.batch * a.context
    timed = times[1:] if len(times) > 1 else times
    print(json.dumps({"impl": "torch", "threads": a.threads, "tokens_per_s": tokens * len(timed) / sum(timed),
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
