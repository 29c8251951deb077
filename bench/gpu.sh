#!/bin/sh
# Same-run comparison on the GPU machine: `bertcc bench --device cuda` against transformers on the
# same GPU (bench/peer_torch_gpu.py, eager and torch.compile), the issue's shapes by default.
# Usage: bench/gpu.sh [BERTCC] ; env: CASES ("mode config batch seq [padding]" lines; padding: the
# fraction of every other sequence that is padding, both sides), PRECISION (bf16; fp16 is NVIDIA's
# recipe: the peer adds AMP's GradScaler), STEPS (20), COMPILE (1; 0 skips the torch.compile peer, which
# takes minutes to compile), ERRLOG (where both sides' stderr goes; /dev/null)
set -u
B="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"; ERR="${ERRLOG:-/dev/null}"; PREC="${PRECISION:-bf16}"; STEPS="${STEPS:-20}"; COMPILE="${COMPILE:-1}"
CASES="${CASES:-train bert-base 128 128
train bert-large 64 128
train bert-large 16 512
squad bert-large 32 384
infer bert-large 64 384
squad bert-large 32 384 0.5}"
# memory: each side's own buffers at their peak (bertcc's peak_gpu_mem_mb; PyTorch's max_memory_allocated),
# then the device's memory in use at the end, CUDA context and libraries included (cudaMemGetInfo)
printf "%-6s %-10s %5s %4s %12s %12s %14s %8s %8s %9s %18s %18s\n" mode config batch seq "bertcc seq/s" "eager seq/s" "compile seq/s" \
  "/eager" "/compile" "TFLOP/s" "peak MB ours/eager" "used MB ours/eager"
echo "$CASES" | while read -r mode cfg batch seq pad; do
  [ -z "$mode" ] && continue
  pad="${pad:-0}"
  ours=$("$B" bench "$mode" --device cuda --config "$cfg" --batch "$batch" --seq "$seq" --precision "$PREC" \
    --padding "$pad" --steps "$STEPS" --warmup 3 2>>"$ERR" | tail -1)
  eager=$("$PY" "$HERE/peer_torch_gpu.py" "$mode" --config "$cfg" --batch "$batch" --seq "$seq" --precision "$PREC" \
    --padding "$pad" --steps "$STEPS" 2>>"$ERR" | tail -1)
  comp=""
  [ "$COMPILE" = 1 ] && comp=$("$PY" "$HERE/peer_torch_gpu.py" "$mode" --config "$cfg" --batch "$batch" --seq "$seq" \
    --precision "$PREC" --padding "$pad" --steps "$STEPS" --compile 2>>"$ERR" | tail -1)
  echo "$ours"; echo "$eager"; echo "$comp"
  "$PY" - "$mode" "$cfg" "$batch" "$seq$( [ "$pad" = 0 ] || echo "p$pad")" "$ours" "$eager" "$comp" <<'PYEOF'
import json, sys
def load(s):
    try:
        return json.loads(s)
    except Exception:
        return None
m, c, b, s = sys.argv[1:5]
o, e, k = (load(x) for x in sys.argv[5:8])
f = lambda d: d["seq_per_s"] if d else float("nan")
g = lambda d, k: d.get(k, float("nan")) if d else float("nan")
print(f"{m:6s} {c:10s} {b:>5s} {s:>4s} {f(o):12.1f} {f(e):12.1f} {f(k):14.1f} {f(o) / f(e):7.2f}x {f(o) / f(k):7.2f}x "
      f"{g(o, 'model_tflops'):9.1f} {g(o, 'peak_gpu_mem_mb'):8.0f}/{g(e, 'peak_gpu_mem_mb'):<9.0f} "
      f"{g(o, 'gpu_mem_used_mb'):8.0f}/{g(e, 'gpu_mem_used_mb'):<9.0f}")
PYEOF
done
