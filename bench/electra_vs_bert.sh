#!/bin/sh
# ELECTRA vs BERT of the same size for the same pre-training wall time, then GLUE fine-tuning.
#  1. dynamic-masking shards (seq 128) from a sentence-segmented corpus (make demo's: demo-out/corpus);
#  2. step times of both pre-training steps measured with `bertcc bench` (same batch, same threads),
#     and the step counts that fill BUDGET seconds each: BERT (MLM + NSP) with bert-mini's shape, and
#     ELECTRA whose discriminator has that shape (embedding 256 = hidden) with Google's 1/4 generator;
#  3. both pre-trained with LAMB (same learning rate, warm-up, batch, seed); actual wall times printed;
#  4. bench/finetune_compare.py --names electra bert on GLUE dev sets, 3 seeds each.
# Usage: bench/electra_vs_bert.sh [BERTCC] ; env: CORPUS (demo-out/corpus), VOCAB (demo-out/vocab.txt),
#        OUT (electra-vs-bert), BUDGET (600 s), BATCH (64), LR (2e-3), TASKS ("mrpc rte cola sts-b"), THREADS,
#        DEVICE (cpu | cuda: pre-training, step times and fine-tuning on it), JOBS (fine-tuning runs at
#        once, 2), GLUE_DATA (the GLUE root, ../shared/data), the shape: LAYERS (4), HIDDEN (256),
#        HEADS (4), SEEDS ("1 2 3"), PYTHON (/usr/bin/python3), EMB (ELECTRA's embedding size, = HIDDEN; BERT's is always HIDDEN). ELECTRA-small
#        against a BERT of its shape on a GPU: DEVICE=cuda LAYERS=12 EMB=128 BATCH=128 LR=5e-3.
set -eu
B="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CORPUS="${CORPUS:-demo-out/corpus}"; VOCAB="${VOCAB:-demo-out/vocab.txt}"; OUT="${OUT:-electra-vs-bert}"
BUDGET="${BUDGET:-600}"; BATCH="${BATCH:-64}"; LR="${LR:-2e-3}"; TASKS="${TASKS:-mrpc rte cola sts-b}"
PY="${PYTHON:-/usr/bin/python3}"; SEEDS="${SEEDS:-1 2 3}"
THREADS="${THREADS:-$(nproc)}"; DEVICE="${DEVICE:-cpu}"; JOBS="${JOBS:-2}"
LAYERS="${LAYERS:-4}"; HIDDEN="${HIDDEN:-256}"; HEADS="${HEADS:-4}"; EMB="${EMB:-$HIDDEN}"
[ -d "$CORPUS/train" ] || { echo "no corpus at $CORPUS (run make demo, or set CORPUS)"; exit 1; }
mkdir -p "$OUT"
echo "$(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, --device $DEVICE$(command -v nvidia-smi > /dev/null && [ "$DEVICE" != cpu ] \
  && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/^/ (/; s/$/)/'); budget $BUDGET s per model, batch $BATCH"
V=$(wc -l < "$VOCAB")
cat > "$OUT/electra.json" <<JSON
{"model_type": "electra", "vocab_size": $V, "embedding_size": $EMB, "hidden_size": $HIDDEN, "num_hidden_layers": $LAYERS,
 "num_attention_heads": $HEADS, "intermediate_size": $((4 * HIDDEN)), "max_position_embeddings": 512, "type_vocab_size": 2}
JSON
sed 's/"electra"/"bert"/; s/"embedding_size": [0-9]*, //' "$OUT/electra.json" > "$OUT/bert.json"
for split in train test; do
  [ -d "$OUT/h5/$split" ] || "$B" create-pretraining-data --input "$CORPUS/$split" --output "$OUT/h5/$split" \
    --vocab "$VOCAB" --max-seq-length 128 --dupe-factor 1 --dynamic-masking > /dev/null
done
# step times (seconds) of the two steps on random data of the same shape
t_of() { "$B" bench "$1" --config "$2" --batch "$BATCH" --seq 128 --steps 4 --threads "$THREADS" --device "$DEVICE" 2>/dev/null | tail -1 \
  | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read())["step_ms"] / 1e3)'; }
tb=$(t_of train "$OUT/bert.json"); te=$(t_of electra "$OUT/electra.json")
nb=$("$PY" -c "print(int($BUDGET / $tb))"); ne=$("$PY" -c "print(int($BUDGET / $te))")
echo "step time: BERT $tb s, ELECTRA $te s -> $nb BERT steps, $ne ELECTRA steps"
COMMON="--vocab $VOCAB --input-dir $OUT/h5/train --eval-dir $OUT/h5/test --eval-batches 20 --train-batch-size $BATCH \
--learning-rate $LR --warmup-proportion 0.05 --precision bf16 --log-freq 50 --num-steps-per-checkpoint 0 --seed 1 --threads $THREADS \
--device $DEVICE"
for m in bert electra; do
  n=$nb; [ $m = electra ] && n=$ne
  if [ ! -f "$OUT/$m/dllogger.json" ] || ! grep -q "finished at step $n" "$OUT/$m.log" 2>/dev/null; then
    rm -rf "$OUT/$m"
    s0=$(date +%s)
    "$B" pretrain --config "$OUT/$m.json" --model-type $m $COMMON --max-steps $n --eval-freq $((n / 4)) \
      --output-dir "$OUT/$m" > "$OUT/$m.out" 2> "$OUT/$m.log"
    echo "$m: $n steps in $(( $(date +%s) - s0 )) s"
  fi
  grep "^eval at step" "$OUT/$m.out" | sed "s/^/   $m /"
done
"$PY" "$HERE/finetune_compare.py" --bertcc "$B" --pretrained "$OUT/electra/discriminator" \
  --scratch "$OUT/bert/model" --names electra bert --tasks $TASKS --out "$OUT/glue" --jobs "$JOBS" --threads 1 \
  --device "$DEVICE" --seeds $SEEDS \
  | grep -v '^{'
