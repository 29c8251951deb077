#!/bin/sh
# SQuAD fine-tuning throughput on real data, same run, features per second:
#   bertcc:  `bertcc finetune squad --mode train` on SQuAD v1.1 dev questions (a stand-in for the
#            train set, which ../shared does not have), shuffled batches each padded to its longest
#            row (rounded up to a multiple of 8);
#   PyTorch: bench/peer_torch.py squad, (a) padding every feature to --max-seq-length as NVIDIA's
#            run_squad.py (and Hugging Face's run_qa.py by default) do, so its cost per feature
#            does not depend on the text; (b) given the very padded batch lengths of bertcc's run
#            (16 steps spread over it), i.e. the same padding policy.
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
    --learning-rate 3e-5 --precision "$PRECISION" --threads "$THREADS" --seed 1 --log-freq 1 $extra \
    --output-dir "$WORK/$order" 2>"$WORK/finetune.log" >/dev/null || { cat "$WORK/finetune.log" >&2; exit 1; }
  # 16 of the run's steps, evenly spread, replayed by PyTorch at the same padded lengths
  # bertcc's own time on those steps, from its cumulative rate: t_k = k * BATCH / seq_per_s_k
  lens=$(/usr/bin/python3 - "$WORK/$order/dllogger.json" "$BATCH" "$WORK/ours_$order.json" <<'PY'
import json, sys
rows = [r for r in (json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith("DLLL ")) if "padded_length" in r["data"]]
B = int(sys.argv[2])
t = [0.0] + [(i + 1) * B / r["data"]["seq_per_s"] for i, r in enumerate(rows)]
pick = [round(i * (len(rows) - 1) / 15) for i in range(16)]
L = [int(rows[k]["data"]["padded_length"]) for k in pick]
secs = sum(t[k + 1] - t[k] for k in pick)
json.dump({"seq_per_s": 16 * B / secs, "seq": sum(L) / 16, "lengths": L}, open(sys.argv[3], "w"))
print(",".join(map(str, L)))
PY
)
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" squad --config "$CONFIG" \
    --batch "$BATCH" --precision "$PRECISION" --threads "$THREADS" --lengths "$lens" | tail -1 > "$WORK/peer_$order.json"
done
fixed=$("$BERTCC" bench squad --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision "$PRECISION" \
        --steps 3 --threads "$THREADS" 2>/dev/null | tail -1)
peer=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" squad \
       --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision "$PRECISION" --steps 3 --threads "$THREADS" | tail -1)
/usr/bin/python3 - "$WORK/shuffled/eval_results.json" "$WORK/grouped/eval_results.json" "$fixed" "$peer" \
  "$WORK/peer_shuffled.json" "$WORK/peer_grouped.json" "$WORK/ours_shuffled.json" "$WORK/ours_grouped.json" <<PY
import json, sys
runs = {"shuffled": json.load(open(sys.argv[1])), "grouped": json.load(open(sys.argv[2]))}
fixed, peer = json.loads(sys.argv[3]), json.loads(sys.argv[4])
same = {"shuffled": json.load(open(sys.argv[5])), "grouped": json.load(open(sys.argv[6]))}
ours = {"shuffled": json.load(open(sys.argv[7])), "grouped": json.load(open(sys.argv[8]))}
print(f"SQuAD v1.1 dev features, $CONFIG $PRECISION, batch $BATCH, max-seq-length $SEQ, stride $STRIDE, $THREADS threads")
for name, flag in (("shuffled", ""), ("grouped", " --group-by-length")):
    r = runs[name]
    print(f"  bertcc finetune squad{flag}: {r['train_seq_per_s']:.2f} features/s over {r['steps']} steps "
          f"(mean padded length {r['mean_padded_length']:.1f}, mean feature length {r['mean_length']:.1f}) "
          f"= {r['train_seq_per_s'] / peer['seq_per_s']:.2f}x PyTorch padded to $SEQ; "
          f"on 16 of its steps (mean padded length {ours[name]['seq']:.1f}) bertcc {ours[name]['seq_per_s']:.2f} vs "
          f"PyTorch at the same lengths {same[name]['seq_per_s']:.2f} features/s "
          f"= {ours[name]['seq_per_s'] / same[name]['seq_per_s']:.2f}x")
print(f"  bertcc bench squad, every row {fixed['seq']} tokens: {fixed['seq_per_s']:.2f} features/s "
      f"= {fixed['seq_per_s'] / peer['seq_per_s']:.2f}x PyTorch; {fixed['model_tflops']:.3f} TFLOP/s "
      f"(GEMM probe {fixed['gemm_probe_tflops']:.3f})")
print(f"  PyTorch ({peer['peer']}), every row padded to {peer['seq']} as run_squad.py: {peer['seq_per_s']:.2f} features/s")
keys = ("steps", "train_seq_per_s", "mean_padded_length", "mean_length")
print(json.dumps({"shuffled": {k: runs["shuffled"][k] for k in keys}, "grouped": {k: runs["grouped"][k] for k in keys},
                  "fixed": fixed, "peer": peer, "peer_same_lengths": same, "bertcc_same_steps": ours}))
PY
