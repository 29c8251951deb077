#!/bin/sh
# Accuracy of --precision int8 against fp32 on real dev sets, with models fine-tuned here (there are
# no pre-trained weights on this machine): randomly initialised models (bert-base-uncased's
# vocabulary, seed 1) fine-tuned in fp32 by `bertcc finetune` (lr 1e-4, batch 32) on
#   SST-2: bert-mini (SST2_CONFIG), train.tsv, SST2_STEPS steps (600), seq 128; dev.tsv (872)
#   MRPC:  bert-tiny (MRPC_CONFIG), train.tsv, MRPC_EPOCHS epochs (3), seq 128; dev.tsv (408)
#   SQuAD v1.1: bert-tiny (SQUAD_CONFIG), seq 256, doc stride 128. There is no train-v1.1.json
#          here, so dev-v1.1.json is split by article: the first 24 articles fine-tune
#          (SQUAD_STEPS steps, 150), the other 24 are evaluated (their question count is printed).
# Then each model is evaluated twice, `--precision fp32` and `--precision int8`, with the same
# command (finetune --mode eval: GLUE accuracy/F1, SQuAD's official EM/F1), and once more through
# `classify` (GLUE: both labels' probabilities ("scores") per dev example) / the n-best (SQuAD) to compare
# the two runs example by example: metric ratio int8/fp32, agreement of the predicted labels
# (answer texts), and the largest difference of the logits that can be recovered (GLUE: the margin
# l1 - l0 = log(p1/p0); SQuAD: the best answer's start_logit + end_logit).
# Fine-tuned models are kept in WORK and reused (delete WORK to retrain). nice -n 10, THREADS each.
# The int8 runs take the machine's --int8-activation-bits (auto); to measure one width on any CPU:
#   QUANT_FLAGS="--int8-activation-bits 7" QUANT_TAG=int8a7 bench/int8_accuracy.sh BERTCC
#   bench/int8_accuracy.sh BERTCC              env: WORK, THREADS (1), CONFIG (bert-mini), SHARED
set -eu
B="$1"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${SHARED:-$HERE/../shared/data}"; [ -d "$SHARED" ] || SHARED="$HERE/../../shared/data"  # a worktree one level deeper
WORK="${WORK:-/tmp/bertcc_int8_acc}"; THREADS="${THREADS:-1}"
SST2_CONFIG="${SST2_CONFIG:-bert-mini}"; MRPC_CONFIG="${MRPC_CONFIG:-bert-tiny}"; SQUAD_CONFIG="${SQUAD_CONFIG:-bert-tiny}"
SST2_STEPS="${SST2_STEPS:-600}"; MRPC_EPOCHS="${MRPC_EPOCHS:-3}"; SQUAD_STEPS="${SQUAD_STEPS:-150}"
PY=/usr/bin/python3; N="nice -n 10"
VOCAB="$SHARED/bert_vocab/bert-base-uncased-vocab.txt"
mkdir -p "$WORK"
for c in "$SST2_CONFIG" "$MRPC_CONFIG" "$SQUAD_CONFIG"; do
  [ -d "$WORK/init-$c" ] || $N "$B" init-model --config "$c" --vocab "$VOCAB" --output "$WORK/init-$c" --seed 1 > /dev/null
done
# SQuAD v1.1 dev, split by article (no article in both halves)
"$PY" - "$SHARED/squad/v1.1/dev-v1.1.json" "$WORK" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
for name, part in (("squad_train.json", d["data"][:24]), ("squad_eval.json", d["data"][24:])):
    p = os.path.join(sys.argv[2], name)
    if not os.path.exists(p):
        json.dump({"version": d["version"], "data": part}, open(p + ".tmp", "w"))
        os.replace(p + ".tmp", p)
PY
common="--precision fp32 --threads $THREADS --seed 1 --learning-rate 1e-4 --train-batch-size 32 --log-freq 100000"
train() {  # name, config, then finetune's task arguments (a stopped run resumes from its checkpoint)
  name=$1; cfg=$2; shift 2; resume=""
  [ -d "$WORK/$name/checkpoints" ] && resume="--resume-from-checkpoint"
  [ -f "$WORK/$name/config.json" ] && return 0
  t0=$(date +%s)
  $N "$B" finetune "$@" $common --init-checkpoint "$WORK/init-$cfg" --output-dir "$WORK/$name" --mode train $resume >> "$WORK/$name.train.log" 2>&1 ||
    { echo "int8_accuracy: fine-tuning $name failed: $(tail -3 "$WORK/$name.train.log")" >&2; exit 1; }
  echo "int8_accuracy: fine-tuned $name in $(( $(date +%s) - t0 )) s"
}
if [ "${TRAIN_PARALLEL:-0}" = 1 ]; then
  train sst2 "$SST2_CONFIG" glue --task-name sst-2 --data-dir "$SHARED/glue/SST-2" --max-seq-length 128 --max-steps "$SST2_STEPS" &
  p1=$!
  train mrpc "$MRPC_CONFIG" glue --task-name mrpc --data-dir "$SHARED/glue/MRPC" --max-seq-length 128 --num-train-epochs "$MRPC_EPOCHS" &
  p2=$!
  train squad "$SQUAD_CONFIG" squad --train-file "$WORK/squad_train.json" --max-seq-length 256 --doc-stride 128 --max-steps "$SQUAD_STEPS" &
  p3=$!
  wait $p1; wait $p2; wait $p3
else
  train sst2 "$SST2_CONFIG" glue --task-name sst-2 --data-dir "$SHARED/glue/SST-2" --max-seq-length 128 --max-steps "$SST2_STEPS"
  train mrpc "$MRPC_CONFIG" glue --task-name mrpc --data-dir "$SHARED/glue/MRPC" --max-seq-length 128 --num-train-epochs "$MRPC_EPOCHS"
  train squad "$SQUAD_CONFIG" squad --train-file "$WORK/squad_train.json" --max-seq-length 256 --doc-stride 128 --max-steps "$SQUAD_STEPS"
fi
[ "${TRAIN_ONLY:-0}" = 1 ] && exit 0
# --- each model evaluated in fp32 and int8 (QUANT: the second precision, int8 by default; QUANT_FLAGS:
# more flags for its runs, e.g. "--int8-activation-bits 7", and QUANT_TAG the name its results go
# by, e.g. int8a7)
QUANT="${QUANT:-int8}"; QUANT_FLAGS="${QUANT_FLAGS:-}"; QUANT_TAG="${QUANT_TAG:-$QUANT}"
ev="--threads $THREADS --eval-batch-size 32"
for tag in fp32 "$QUANT_TAG"; do
  if [ "$tag" = fp32 ]; then p="--precision fp32"; else p="--precision $QUANT $QUANT_FLAGS"; fi
  for t in sst2:sst-2:SST-2 mrpc:mrpc:MRPC; do
    name=${t%%:*}; rest=${t#*:}; task=${rest%%:*}; dir=${rest#*:}
    $N "$B" finetune glue --task-name "$task" --data-dir "$SHARED/glue/$dir" --model "$WORK/$name" --mode eval \
      --max-seq-length 128 $p $ev --output-dir "$WORK/eval-$name-$tag" > "$WORK/eval-$name-$tag.log" 2>&1 ||
      { echo "int8_accuracy: finetune glue --mode eval $p ($name) failed: $(tail -3 "$WORK/eval-$name-$tag.log")" >&2; exit 1; }
    # the dev examples through `classify` (JSON lines): both labels' probabilities, for the
    # example-by-example comparison
    "$PY" - "$SHARED/glue/$dir/dev.tsv" "$task" > "$WORK/dev-$name.jsonl" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1], encoding="utf-8-sig")][1:]
for r in rows:
    print(json.dumps({"text": r[0]} if sys.argv[2] == "sst-2" else {"text": r[3], "text_pair": r[4]}))
PY
    $N "$B" classify --model "$WORK/$name" $p --threads "$THREADS" --max-seq-length 128 \
      < "$WORK/dev-$name.jsonl" > "$WORK/classify-$name-$tag.jsonl" 2> "$WORK/classify-$name-$tag.log" ||
      { echo "int8_accuracy: classify $p ($name) failed: $(tail -3 "$WORK/classify-$name-$tag.log")" >&2; exit 1; }
  done
  $N "$B" finetune squad --model "$WORK/squad" --predict-file "$WORK/squad_eval.json" --mode eval $p \
    --max-seq-length 256 --doc-stride 128 $ev --output-dir "$WORK/eval-squad-$tag" > "$WORK/eval-squad-$tag.log" 2>&1 ||
    { echo "int8_accuracy: finetune squad --mode eval $p failed: $(tail -3 "$WORK/eval-squad-$tag.log")" >&2; exit 1; }
done
"$PY" - "$WORK" "$SHARED" "$QUANT_TAG" <<'PY'
import json, math, os, sys
W, SH, Q = sys.argv[1], sys.argv[2], sys.argv[3]
def metrics(d):  # finetune --mode eval's eval_metrics.json; val(m, "f1") takes f1 or eval_f1
    return json.load(open(os.path.join(W, d, "eval_metrics.json")))
def val(m, k):
    return float(m[k] if k in m else m["eval_" + k])
print("| task (model) | metric | fp32 | %s | %s/fp32 | predictions agreeing | largest logit difference |" % (Q, Q))
print("|---|---|---:|---:|---:|---:|---:|")
models = {n: json.load(open(os.path.join(W, n, "config.json"))) for n in ("sst2", "mrpc", "squad")}
def desc(n):
    c = models[n]
    return "%dL/%dH" % (c["num_hidden_layers"], c["hidden_size"])
for name, key, label in (("sst2", "acc", "accuracy"), ("mrpc", "f1", "F1")):
    a, b = metrics("eval-%s-fp32" % name), metrics("eval-%s-%s" % (name, Q))
    ra = [json.loads(l) for l in open(os.path.join(W, "classify-%s-fp32.jsonl" % name))]
    rb = [json.loads(l) for l in open(os.path.join(W, "classify-%s-%s.jsonl" % (name, Q)))]
    assert len(ra) == len(rb) and ra, name
    agree = sum(x["label"] == y["label"] for x, y in zip(ra, rb)) / len(ra)
    def margin(r):  # l1 - l0 from the two labels' probabilities
        labs = sorted(r["scores"])
        return math.log(r["scores"][labs[1]]) - math.log(r["scores"][labs[0]])
    dl = max(abs(margin(x) - margin(y)) for x, y in zip(ra, rb))
    ma, mb = val(a, key), val(b, key)
    print("| %s (%s, %d dev examples) | %s | %.4f | %.4f | %.4f | %.2f %% (%d of %d) | %.4f (l1 - l0) |" % (
        name.upper(), desc(name), len(ra), label, ma, mb, mb / ma if ma else float("nan"), 100 * agree,
        sum(x["label"] == y["label"] for x, y in zip(ra, rb)), len(ra), dl))
a, b = metrics("eval-squad-fp32"), metrics("eval-squad-%s" % Q)
pa = json.load(open(os.path.join(W, "eval-squad-fp32", "predictions.json")))
pb = json.load(open(os.path.join(W, "eval-squad-%s" % Q, "predictions.json")))
na = json.load(open(os.path.join(W, "eval-squad-fp32", "nbest_predictions.json")))
nb = json.load(open(os.path.join(W, "eval-squad-%s" % Q, "nbest_predictions.json")))
agree = sum(pa[k] == pb.get(k) for k in pa)
def spans(n, k):  # each n-best answer's start_logit + end_logit, by its text
    return {e["text"]: e["start_logit"] + e["end_logit"] for e in n[k]}
dl = 0.0  # over the answers both n-best lists hold (the same span in both runs)
for k in na:
    sa, sb = spans(na, k), spans(nb, k)
    dl = max([dl] + [abs(sa[t] - sb[t]) for t in sa if t in sb])
fa, fb = val(a, "f1"), val(b, "f1")
print("| SQuAD v1.1 (%s, %d held-out questions) | F1 (EM %.2f / %.2f) | %.2f | %.2f | %.4f | %.2f %% (%d of %d) | %.4f (start + end, same answer) |" % (
    desc("squad"), len(pa), val(a, "exact_match"), val(b, "exact_match"), fa, fb, fb / fa if fa else float("nan"),
    100 * agree / len(pa), agree, len(pa), dl))
PY
