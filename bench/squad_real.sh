#!/bin/sh
# SQuAD fine-tuning throughput on real data, same run, features per second:
#   bertcc:  `bertcc finetune squad --mode train` on SQuAD v1.1 dev questions (a stand-in for the
#            train set, which ../shared does not have), shuffled batches each padded to its longest
#            row (rounded up to a multiple of 8);
#   PyTorch: bench/peer_torch.py squad, which pads every feature to --max-seq-length as NVIDIA's
#            run_squad.py (and Hugging Face's run_qa.py by default) do, so its cost per feature
#            does not depend on the text.
# Also prints bertcc's rate at the fixed length (`bertcc bench squad`), to separate the kernels'
# speed from the padding that is not computed.
# Usage: bench/squad_real.sh [BERTCC]
# Runs bertcc twice: shuffled batches, and --group-by-length (Hugging Face's length-grouped order; the
# first 50 batches of a mega-batch include the longest features, so use STEPS >= 100).
# env: SQUAD, VOCAB, CONFIG (bert-base), BATCH (8), SEQ (384), STRIDE (128), STEPS (100), THREADS, PRECISION (bf16)
set -eu
BERTCC="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
SHARED="${SHARED:-$HERE/../../shared/data}"
SQUAD="${SQUAD:-$SHARED/squad/v1.1/dev-v1.1.json}"
VOCAB="${VOCAB:-$SHARED/bert_vocab/bert-base-uncased-vocab.txt}"
CONFIG="${CONFIG:-bert-base}"; BATCH="${BATCH:-8}"; SEQ="${SEQ:-384}"; STRIDE="${STRIDE:-128}"
STEPS="${STEPS:-100}"; THREADS="${THREADS:-$(nproc)}"; PRECISION="${PRECISION:-bf16}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$BERTCC" init-model --config "$CONFIG" --vocab "$VOCAB" --output "$WORK/init" --seed 1 >/dev/null
for order in shuffled grouped; do
  extra=""; [ "$order" = grouped ] && extra="--group-by-length"
  # shellcheck disable=SC2086
  "$BERTCC" finetune squad --mode train --init-checkpoint "$WORK/init" --train-file "$SQUAD" \
    --max-seq-length "$SEQ" --doc-stride "$STRIDE" --train-batch-size "$BATCH" --max-steps "$STEPS" \
    --learning-rate 3e-5 --precision "$PRECISION" --threads "$THREADS" --seed 1 --log-freq 1000 $extra \
    --output-dir "$WORK/$order" 2>"$WORK/finetune.log" >/dev/null || { cat "$WORK/finetune.log" >&2; exit 1; }
done
fixed=$("$BERTCC" bench squad --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision "$PRECISION" \
        --steps 3 --threads "$THREADS" 2>/dev/null | tail -1)
peer=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" squad \
       --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision "$PRECISION" --steps 3 --threads "$THREADS" | tail -1)
/usr/bin/python3 - "$WORK/shuffled/eval_results.json" "$WORK/grouped/eval_results.json" "$fixed" "$peer" <<PY
import json, sys
runs = {"shuffled": json.load(open(sys.argv[1])), "grouped": json.load(open(sys.argv[2]))}
fixed, peer = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"SQuAD v1.1 dev features, $CONFIG $PRECISION, batch $BATCH, max-seq-length $SEQ, stride $STRIDE, $THREADS threads")
for name, flag in (("shuffled", ""), ("grouped", " --group-by-length")):
    r = runs[name]
    print(f"  bertcc finetune squad{flag}: {r['train_seq_per_s']:.2f} features/s over {r['steps']} steps "
          f"(mean padded length {r['mean_padded_length']:.1f}, mean feature length {r['mean_length']:.1f}) "
          f"= {r['train_seq_per_s'] / peer['seq_per_s']:.2f}x PyTorch")
print(f"  bertcc bench squad, every row {fixed['seq']} tokens: {fixed['seq_per_s']:.2f} features/s "
      f"= {fixed['seq_per_s'] / peer['seq_per_s']:.2f}x PyTorch; {fixed['model_tflops']:.3f} TFLOP/s "
      f"(GEMM probe {fixed['gemm_probe_tflops']:.3f})")
print(f"  PyTorch ({peer['peer']}), every row padded to {peer['seq']} as run_squad.py: {peer['seq_per_s']:.2f} features/s")
keys = ("steps", "train_seq_per_s", "mean_padded_length", "mean_length")
print(json.dumps({"shuffled": {k: runs["shuffled"][k] for k in keys}, "grouped": {k: runs["grouped"][k] for k in keys},
                  "fixed": fixed, "peer": peer}))
PY
