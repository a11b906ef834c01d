#!/usr/bin/env bash
# Self-test of gpt_reference.py: a random model, its own float32 outputs as the
# candidate, and doctored candidates that must be rejected with the right status.
# Exit 0: all as expected; 1: some step misbehaved; 77: no Python with torch (skip).
# Python: $PYTHON if set, else the first of python3, /usr/bin/python3 that has torch
# (a pyenv/venv python3 earlier on PATH often lacks Debian's python3-torch).
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REF="$HERE/gpt_reference.py"
export PYTHONDONTWRITEBYTECODE=1  # do not leave __pycache__ in the source tree

has_torch() { command -v "$1" >/dev/null && "$1" -c 'import torch, numpy' 2>/dev/null; }
if [[ -n "${PYTHON:-}" ]]; then
  has_torch "$PYTHON" || { echo "SKIP: python3-torch is not installed (PYTHON=$PYTHON)"; exit 77; }
else
  for p in python3 /usr/bin/python3; do
    if has_torch "$p"; then PYTHON="$p"; break; fi
  done
  [[ -n "${PYTHON:-}" ]] || { echo "SKIP: python3-torch is not installed"; exit 77; }
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FAILED=0

# expect RC PATTERN -- CMD...: run CMD, require exit status RC and (if non-empty)
# a line of its output matching the extended regex PATTERN.
expect() {
  local want="$1" pattern="$2"; shift 3
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  if [[ "$rc" != "$want" ]] || { [[ -n "$pattern" ]] && ! grep -Eq "$pattern" <<<"$out"; }; then
    echo "FAIL: expected status $want${pattern:+ and /$pattern/}, got $rc: $*"
    sed 's/^/    /' <<<"$out"
    FAILED=1
  else
    echo "ok   (status $rc) $(basename "$1") ${*:2}" | sed "s|$WORK/||g"
  fi
}

# mutate SRC DST OP: write a doctored copy of a safetensors file (see the ops below).
mutate() {
  "$PYTHON" - "$HERE" "$@" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import torch, gpt_reference as g
src, dst, op = sys.argv[2:5]
t, meta = g.read_safetensors(src)
if op == "perturb-grad":    t["grad.h.1.attn.c_attn.weight"][3, 70] += 1e-2
elif op == "perturb-logits": t["logits"][1, 5, 17] += 1e-2
elif op == "nan-grad":      t["grad.h.0.mlp.c_fc.bias"][0] = float("nan")
elif op == "loss-shape1":   t["loss"] = t["loss"].reshape(1)
elif op == "drop-grad":     del t["grad.h.0.ln_2.bias"]
elif op == "bad-shape":     t["logits"] = t["logits"][:, :-1]
elif op == "tokens-i64":    t["tokens"] = t["tokens"].to(torch.int64)
else: sys.exit(f"unknown op {op}")
g.write_safetensors(dst, t, meta)
EOF
}

D="$WORK"
expect 0 "wrote" -- "$PYTHON" "$REF" --write-random "$D" --n-layer 2 --n-head 4 --n-embd 32 \
  --n-ctx 16 --vocab 256 --batch-size 2 --seq 8 --seed 1
W=(--weights "$D/weights.safetensors" --batch "$D/batch.safetensors")

# The reference's own float32 outputs must pass against its float64 outputs.
expect 0 "RESULT: PASS" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/candidate.safetensors" \
  --dump-reference "$D/ref.safetensors"
# ... and so must the dumped reference (f64 outputs rounded to f32).
expect 0 "RESULT: PASS" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/ref.safetensors"

# Accepted variants: loss of shape [1], I64 tokens.
mutate "$D/candidate.safetensors" "$D/c_loss1.safetensors" loss-shape1 || FAILED=1
expect 0 "RESULT: PASS" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/c_loss1.safetensors"
mutate "$D/batch.safetensors" "$D/batch64.safetensors" tokens-i64 || FAILED=1
expect 0 "RESULT: PASS" -- "$PYTHON" "$REF" --weights "$D/weights.safetensors" \
  --batch "$D/batch64.safetensors" --candidate "$D/candidate.safetensors"

# Wrong numbers: exit 1, naming the tensor.
for op in perturb-grad:grad.h.1.attn.c_attn.weight perturb-logits:logits nan-grad:grad.h.0.mlp.c_fc.bias; do
  mutate "$D/candidate.safetensors" "$D/c_${op%%:*}.safetensors" "${op%%:*}" || FAILED=1
  expect 1 "^${op#*:} .*FAIL" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/c_${op%%:*}.safetensors"
done
# A tighter tolerance than the fp32 error must fail too (the check is not vacuous).
expect 1 "RESULT: FAIL" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/candidate.safetensors" --rtol-grad 1e-9

# Bad input: exit 2, naming the problem.
mutate "$D/candidate.safetensors" "$D/c_drop.safetensors" drop-grad || FAILED=1
expect 2 "missing tensor grad.h.0.ln_2.bias" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/c_drop.safetensors"
mutate "$D/candidate.safetensors" "$D/c_shape.safetensors" bad-shape || FAILED=1
expect 2 "logits has shape \[2, 7, 256\]" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/c_shape.safetensors"
head -c 100 "$D/weights.safetensors" >"$D/truncated.safetensors"
expect 2 "runs past the end" -- "$PYTHON" "$REF" --weights "$D/truncated.safetensors" \
  --batch "$D/batch.safetensors" --candidate "$D/candidate.safetensors"
expect 2 "cannot read" -- "$PYTHON" "$REF" "${W[@]}" --candidate "$D/does_not_exist.safetensors"

if [[ "$FAILED" != 0 ]]; then echo "self_test: FAILED"; exit 1; fi
echo "self_test: all checks behaved as expected"
