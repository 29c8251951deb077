#!/bin/sh
# Same-run comparison of `bertcc bench` with the PyTorch peer (bench/peer_torch.py).
# Usage: bench/peer_bench.sh [BERTCC] ; env: CONFIGS, MODES, PRECISIONS, BATCH, SEQ, STEPS, THREADS
set -eu
BERTCC="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CONFIGS="${CONFIGS:-bert-base}"; MODES="${MODES:-train infer}"; PRECISIONS="${PRECISIONS:-fp32 bf16}"
BATCH="${BATCH:-8}"; SEQ="${SEQ:-128}"; STEPS="${STEPS:-5}"; THREADS="${THREADS:-$(nproc)}"
OUT="${OUT:-bench/results.jsonl}"
: > "$OUT"
printf "%-11s %-6s %-5s %12s %12s %8s %10s %10s\n" config mode prec "bertcc seq/s" "torch seq/s" ratio "TFLOP/s" "probe"
for cfg in $CONFIGS; do for mode in $MODES; do for prec in $PRECISIONS; do
  ours=$("$BERTCC" bench "$mode" --config "$cfg" --batch "$BATCH" --seq "$SEQ" --precision "$prec" \
         --steps "$STEPS" --threads "$THREADS" 2>/dev/null | tail -1)
  # PyTorch's fp32 path goes through OpenBLAS: time it without the environment's core-type pinning.
  peer=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" "$mode" \
         --config "$cfg" --batch "$BATCH" --seq "$SEQ" --precision "$prec" --steps "$STEPS" --threads "$THREADS" | tail -1)
  echo "$ours" >> "$OUT"; echo "$peer" >> "$OUT"
  /usr/bin/python3 - "$ours" "$peer" "$cfg" "$mode" "$prec" <<'PY'
import json, sys
o, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{sys.argv[3]:11s} {sys.argv[4]:6s} {sys.argv[5]:5s} {o['seq_per_s']:12.2f} {p['seq_per_s']:12.2f} "
      f"{o['seq_per_s'] / p['seq_per_s']:7.2f}x {o['model_tflops']:10.3f} {o['gemm_probe_tflops']:10.3f}")
PY
done; done; done
echo "raw JSON lines: $OUT"
