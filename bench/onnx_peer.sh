#!/bin/sh
# bertcc inference against ONNX Runtime on the same graph, in the same run, on this machine:
# a BERT encoder (CONFIG, random weights) exported with `bertcc export-onnx`, run by ONNX Runtime
# (onnxruntime-node, CPU, all optimisations, THREADS intra-op threads) and by `bertcc bench infer`
# (fp32 and bf16) at batch BATCH x sequence SEQ. Prints sequences/s, ratios and bertcc's achieved
# TFLOP/s against its same-run GEMM probe.
#   bench/onnx_peer.sh BERTCC [CONFIG] [BATCH] [SEQ] [THREADS] [STEPS]
set -eu
B="$1"; CONFIG="${2:-bert-base}"; BATCH="${3:-8}"; SEQ="${4:-128}"; THREADS="${5:-$(nproc)}"; STEPS="${6:-10}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/tmp/bertcc_onnx_bench}"
[ -d "$HERE/tests/onnx/node_modules/onnxruntime-node" ] || { echo "onnx bench: run scripts/install-deps.sh first"; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"
# a placeholder vocabulary of the config's size (init-model copies one into the model directory)
V=$(/usr/bin/python3 -c 'import json, os, sys; c = sys.argv[1]; print(json.load(open(c)).get("vocab_size", 30522) if os.path.isfile(c) else 30522)' "$CONFIG")
/usr/bin/python3 -c 'import sys; print("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["w%d" % i for i in range(5, int(sys.argv[1]))]))' "$V" > "$WORK/vocab.txt"
"$B" init-model --config "$CONFIG" --vocab "$WORK/vocab.txt" --output "$WORK/model" > /dev/null
"$B" export-onnx --model "$WORK/model" --out "$WORK/model.onnx" 2> /dev/null
echo "onnx bench: $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, $CONFIG batch $BATCH seq $SEQ"
ort=$(node "$HERE/tests/onnx/run_ort.js" "$WORK/model.onnx" --bench "$BATCH" "$SEQ" "$THREADS" "$STEPS")
echo "$ort"
ort_rate=$(printf '%s' "$ort" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["seq_per_s"])')
for p in fp32 bf16; do
  j=$("$B" bench infer --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision $p --threads "$THREADS" \
        --steps "$STEPS" --warmup 3 2> /dev/null | tail -1)
  echo "$j"
  printf '%s' "$j" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin); ort = float(sys.argv[1])
print("bertcc %s: %.1f seq/s = %.2fx ONNX Runtime fp32 (%.1f seq/s); %.3f TFLOP/s, GEMM probe %.3f" % (
      j["precision"], j["seq_per_s"], j["seq_per_s"] / ort, ort, j["model_tflops"], j["gemm_probe_tflops"]))' "$ort_rate"
done
