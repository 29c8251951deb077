#!/bin/sh
# Unpadded execution against padded, same run, real data. Each line runs bertcc twice on
# the same examples with the same flags, unpadded (the default) and with --padded (each batch
# padded to its longest row, computed whole), alternating so that both see the same machine:
#   squad-train  `finetune squad --mode train` on SQuAD v1.1 dev questions (the train set's stand-in;
#                ../shared has no train set), shuffled batches of BATCH at 384/128: features/s
#   sst2-train   `finetune glue --task-name SST-2` on SST-2's train.tsv, shuffled: sentences/s
#   squad-infer  `finetune squad --mode prediction` on the first ARTICLES articles of SQuAD v1.1
#                dev, batches of 32 in order: wall seconds of the whole command (features, forward
#                passes and the n-best answers: what a user waits for)
#   infer        `bench infer --real` on SQuAD v1.1 dev features in order (prediction's order),
#                batches of 32 at 384/128: the forward passes alone, features/s
# and PyTorch (bench/peer_torch.py, the same bf16 autocast step) for squad-train and sst2-train at
# the batch lengths of bertcc's padded run (the same padding policy) and padded to the maximum as
# Hugging Face's run_qa.py / NVIDIA's run_squad.py (384) and run_glue.py (128) do by default, and
# for infer padded to 384 (run_qa.py's default).
# Usage: bench/unpadded.sh [BERTCC]
# env: CONFIG (bert-base), PRECISION (bf16), BATCH (8), STEPS (20), ARTICLES (2), THREADS, SKIP_PEER=1
set -eu
BERTCC="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
SHARED="${SHARED:-$HERE/../../shared/data}"
SQUAD="$SHARED/squad/v1.1/dev-v1.1.json"
VOCAB="$SHARED/bert_vocab/bert-base-uncased-vocab.txt"
CONFIG="${CONFIG:-bert-base}"; PRECISION="${PRECISION:-bf16}"; BATCH="${BATCH:-8}"; STEPS="${STEPS:-20}"
ARTICLES="${ARTICLES:-2}"; THREADS="${THREADS:-$(nproc)}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for f in "$SQUAD" "$VOCAB" "$SHARED/glue/SST-2/train.tsv"; do
  [ -f "$f" ] || { echo "unpadded.sh: $f not found (../shared/data)" >&2; exit 1; }
done
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)); $CONFIG $PRECISION, $THREADS threads"
"$BERTCC" init-model --config "$CONFIG" --vocab "$VOCAB" --output "$WORK/init" --seed 1 >/dev/null
/usr/bin/python3 - "$SQUAD" "$ARTICLES" "$WORK/squad_small.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["data"] = d["data"][:int(sys.argv[2])]
json.dump(d, open(sys.argv[3], "w"))
PY
mkdir -p "$WORK/sst2"
cp "$SHARED/glue/SST-2/train.tsv" "$SHARED/glue/SST-2/dev.tsv" "$WORK/sst2/"

common="--precision $PRECISION --threads $THREADS --seed 1"
run() {  # run NAME MODE(unpadded|padded) COMMAND...: prints the seconds, keeps the output dir
  name=$1; mode=$2; shift 2
  flag=""; [ "$mode" = padded ] && flag="--padded"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$@" $flag --output-dir "$WORK/$name.$mode" > "$WORK/$name.$mode.log" 2>&1 || { cat "$WORK/$name.$mode.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}'
}
rate() { /usr/bin/python3 -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['train_seq_per_s'])" "$1/eval_results.json"; }

printf "%-12s %14s %14s %8s\n" job unpadded padded speed-up
for mode in unpadded padded; do
  run squad_train $mode "$BERTCC" finetune squad --mode train --init-checkpoint "$WORK/init" --train-file "$SQUAD" \
    --max-seq-length 384 --doc-stride 128 --train-batch-size "$BATCH" --max-steps "$STEPS" --learning-rate 3e-5 \
    --log-freq 1 $common > /dev/null
done
a=$(rate "$WORK/squad_train.unpadded"); b=$(rate "$WORK/squad_train.padded")
printf "%-12s %11s f/s %11s f/s %7.2fx\n" squad-train "$a" "$b" "$(echo "$a $b" | awk '{print $1 / $2}')"
for mode in unpadded padded; do
  run sst2_train $mode "$BERTCC" finetune glue --task-name SST-2 --data-dir "$WORK/sst2" --mode train \
    --init-checkpoint "$WORK/init" --max-seq-length 128 --train-batch-size 32 --max-steps "$STEPS" \
    --learning-rate 2e-5 --log-freq 1 $common > /dev/null
done
a=$(rate "$WORK/sst2_train.unpadded"); b=$(rate "$WORK/sst2_train.padded")
printf "%-12s %11s s/s %11s s/s %7.2fx\n" sst2-train "$a" "$b" "$(echo "$a $b" | awk '{print $1 / $2}')"
# the fine-tuned SQuAD model of the unpadded run answers (the weights do not change the time)
for mode in unpadded padded; do
  eval "s_$mode=\$(run squad_infer $mode \"$BERTCC\" finetune squad --mode prediction \
    --init-checkpoint \"$WORK/squad_train.unpadded\" --predict-file \"$WORK/squad_small.json\" \
    --max-seq-length 384 --doc-stride 128 --eval-batch-size 32 $common)"
done
# shellcheck disable=SC2154
printf "%-12s %12s s %12s s %7.2fx\n" squad-infer "$s_unpadded" "$s_padded" "$(echo "$s_unpadded $s_padded" | awk '{print $2 / $1}')"
cmp -s "$WORK/squad_infer.unpadded/predictions.json" "$WORK/squad_infer.padded/predictions.json" \
  && echo "squad-infer: the same predictions.json" || echo "squad-infer: predictions.json differ (see $WORK, kept)"
[ "${SKIP_PEER:-0}" = 1 ] && exit 0
# PyTorch at the padded run's batch lengths and at 384: features/s
lengths() {  # lengths DIR: the padded length of each step of a run (its DLLogger records)
  /usr/bin/python3 - "$1/dllogger.json" <<'PY'
import json, sys
rows = [r for r in (json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith("DLLL ")) if "padded_length" in r["data"]]
print(",".join(str(int(r["data"]["padded_length"])) for r in rows))
PY
}
lens=$(lengths "$WORK/squad_train.padded")
peer() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" squad --config "$CONFIG" \
           --batch "$BATCH" --precision "$PRECISION" --threads "$THREADS" "$@" | tail -1 \
         | /usr/bin/python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['seq_per_s'])"; }
p_same=$(peer --lengths "$lens")
p_384=$(peer --seq 384 --steps 3)
a=$(rate "$WORK/squad_train.unpadded")
echo "PyTorch squad-train: $p_same f/s at bertcc's padded lengths, $p_384 f/s at 384 (run_qa's default)"
echo "$a $p_same $p_384" | awk '{printf "bertcc unpadded / PyTorch: %.2fx (same padding), %.2fx (padded to 384)\n", $1 / $2, $1 / $3}'
# sst2-train: run_glue.py's step (BertForSequenceClassification) at the padded run's lengths and at 128
lens=$(lengths "$WORK/sst2_train.padded")
cpeer() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" classify --config "$CONFIG" \
            --batch 32 --precision "$PRECISION" --threads "$THREADS" "$@" | tail -1 \
          | /usr/bin/python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['seq_per_s'])"; }
c_same=$(cpeer --lengths "$lens")
c_128=$(cpeer --seq 128 --steps 5)
a=$(rate "$WORK/sst2_train.unpadded")
echo "PyTorch sst2-train: $c_same s/s at bertcc's padded lengths, $c_128 s/s at 128 (run_glue's default)"
echo "$a $c_same $c_128" | awk '{printf "bertcc unpadded / PyTorch: %.2fx (same padding), %.2fx (padded to 128)\n", $1 / $2, $1 / $3}'
# infer: the forward passes on SQuAD dev features in order, bertcc unpadded and --padded, PyTorch at 384
binf() {  # binf [--padded]: features/s of bench infer on the dev features in order
  "$BERTCC" bench infer --config "$CONFIG" --real "$SQUAD" --vocab "$VOCAB" --batch 32 --seq 384 --steps 4 \
    --precision "$PRECISION" --threads "$THREADS" "$@" 2>/dev/null | tail -1 \
    | /usr/bin/python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['seq_per_s'])"; }
i_unpadded=$(binf)
i_padded=$(binf --padded)
i_pt=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$HERE/peer_torch.py" infer --config "$CONFIG" \
         --batch 32 --seq 384 --steps 2 --warmup 1 --precision "$PRECISION" --threads "$THREADS" | tail -1 \
       | /usr/bin/python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['seq_per_s'])")
printf "%-12s %11s f/s %11s f/s %7.2fx\n" infer "$i_unpadded" "$i_padded" "$(echo "$i_unpadded $i_padded" | awk '{print $1 / $2}')"
echo "PyTorch infer: $i_pt f/s at 384 (run_qa's default); bertcc unpadded / PyTorch: $(echo "$i_unpadded $i_pt" | awk '{printf "%.2fx", $1 / $2}')"
