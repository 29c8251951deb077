#!/bin/sh
# `make demo` today: the engine on built-in random data (no downloads, no ../shared).
# The pre-training demo (corpus -> vocabulary -> shards -> bert-mini -> plots) replaces this
# when `bertcc pretrain` lands.
set -eu
BERTCC="${1:-build/bertcc}"
OUT="${DEMO_OUT:-demo-out}"
mkdir -p "$OUT"
echo "== bertcc demo: the BERT engine on built-in data =="
echo "-- 1. a randomly initialised bert-mini as a Hugging Face model directory"
"$BERTCC" init-model --config bert-mini --output "$OUT/bert-mini" --seed 1
echo "-- 2. a random pre-training batch in NVIDIA's HDF5 layout (8 x 128, 20 masked tokens each)"
"$BERTCC" random-batch --model "$OUT/bert-mini" --batch 8 --seq 128 --max-predictions-per-seq 20 --output "$OUT/batch.h5"
echo "-- 3. one forward+backward of the pre-training loss in fp32 and bf16 (dump-step)"
"$BERTCC" dump-step --model "$OUT/bert-mini" --batch "$OUT/batch.h5" --precision fp32 --out "$OUT/step_fp32.safetensors"
"$BERTCC" dump-step --model "$OUT/bert-mini" --batch "$OUT/batch.h5" --precision bf16 --out "$OUT/step_bf16.safetensors"
echo "-- 4. training and inference throughput (bench)"
for mode in train infer; do for p in fp32 bf16; do
  "$BERTCC" bench "$mode" --config bert-mini --batch 16 --seq 128 --precision "$p" --steps 5 2>/dev/null | head -1
done; done
echo "== done: model in $OUT/bert-mini, batch in $OUT/batch.h5, gradients in $OUT/step_*.safetensors =="
