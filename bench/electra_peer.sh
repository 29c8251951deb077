#!/bin/sh
# ELECTRA pre-training throughput: `bertcc bench electra` against the PyTorch peer
# (bench/electra_peer.py) in the same run, same shapes, fp32 and bf16.
# Usage: bench/electra_peer.sh [BERTCC] ; env: CONFIG (electra-small), BATCH (32), SEQ (128), STEPS (5), THREADS,
# DEVICE (cpu; cuda on the GPU machine, with PYTHON=python3 for its PyTorch), OUT
set -eu
BERTCC="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CONFIG="${CONFIG:-electra-small}"; BATCH="${BATCH:-32}"; SEQ="${SEQ:-128}"; STEPS="${STEPS:-5}"
THREADS="${THREADS:-$(nproc)}"; OUT="${OUT:-bench/electra_results.jsonl}"; DEVICE="${DEVICE:-cpu}"
PY="${PYTHON:-/usr/bin/python3}"
: > "$OUT"
echo "$(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, device $DEVICE; $CONFIG, batch $BATCH, seq $SEQ"
printf "%-5s %12s %12s %8s %10s %10s %10s\n" prec "bertcc seq/s" "torch seq/s" ratio "TFLOP/s" "torch" "probe"
for prec in fp32 bf16; do
  ours=$("$BERTCC" bench electra --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision "$prec" --steps "$STEPS" \
         --threads "$THREADS" --device "$DEVICE" 2>/dev/null | tail -1)
  peer=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" "$HERE/electra_peer.py" --config "$CONFIG" \
         --batch "$BATCH" --seq "$SEQ" --precision "$prec" --steps "$STEPS" --threads "$THREADS" --device "$DEVICE" | tail -1)
  echo "$ours" >> "$OUT"; echo "$peer" >> "$OUT"
  "$PY" - "$ours" "$peer" "$prec" <<'PY'
import json, sys
o, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{sys.argv[3]:5s} {o['seq_per_s']:12.2f} {p['seq_per_s']:12.2f} {o['seq_per_s'] / p['seq_per_s']:7.2f}x "
      f"{o['model_tflops']:10.3f} {p['model_tflops']:10.3f} {o['gemm_probe_tflops']:10.3f}")
PY
done
echo "raw JSON lines: $OUT"
