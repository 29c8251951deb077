#!/bin/sh
# Fine-tuning end to end on real data (../shared/data), each head from a randomly initialised
# bert-tiny with the bert-base-uncased vocabulary: the model must fit a small real training set
# (SST-2 128 sentences, CoNLL 60 sentences, 106 SQuAD questions) -- a broken gradient, optimizer
# or decoding step cannot reach these scores. Also: same seed and threads -> bit-identical model;
# --freeze-layers leaves the frozen tensors untouched; eval of the saved model reproduces the
# training's last evaluation; prediction files in GLUE/CoNLL/SQuAD formats; clear errors.
#   tests/train/finetune.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"; S="$(dirname "$0")/../../../shared/data"; PY=/usr/bin/python3
. "$(dirname "$0")/common.sh"
rm -rf "$W"; mkdir -p "$W/sst"
"$B" init-model --config bert-tiny --vocab "$S/bert_vocab/bert-base-uncased-vocab.txt" --output "$W/tiny" --seed 1 > /dev/null 2>&1 || fail init-model
head -129 "$S/glue/SST-2/train.tsv" > "$W/sst/train.tsv"
cp "$W/sst/train.tsv" "$W/sst/dev.tsv"
{ printf 'index\tsentence\n'; tail -n +2 "$W/sst/train.tsv" | cut -f1 | awk '{print NR-1 "\t" $0}'; } > "$W/sst/test.tsv"
BASE="--init-checkpoint $W/tiny --learning-rate 2e-3 --precision fp32 --threads 2 --train-batch-size 16 --log-freq 1000"
COMMON="$BASE --max-seq-length 64"
metric() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
atleast() { $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$1" "$2"; }

# --- GLUE SST-2: fit, eval of the saved model, submission file (determinism: the resume section's
# two runs with the same seed and threads)
"$B" finetune glue --task-name sst-2 --data-dir "$W/sst" $COMMON --num-train-epochs 20 --seed 3 \
  --output-dir "$W/sst_a" --mode "train eval prediction" > "$W/sst_a.out" 2> "$W/sst_a.err" || fail "glue train: $(tail -3 "$W/sst_a.err")"
# At this learning rate the fitted accuracy wobbles between epochs (0.95-1.0): the best epoch must
# fit, the last must stay close.
acc=$(metric "$W/sst_a/eval_metrics.json" '["acc"]'); best=$(metric "$W/sst_a/eval_results.json" '["best_eval"]["acc"]')
echo "SST-2 (128 train sentences) accuracy after fitting: best epoch $best, last $acc"
atleast "$best" 0.99 || fail "SST-2 best accuracy $best < 0.99"
atleast "$acc" 0.93 || fail "SST-2 last accuracy $acc < 0.93"
[ "$(wc -l < "$W/sst_a/SST-2.tsv")" -eq 129 ] && head -1 "$W/sst_a/SST-2.tsv" | grep -q "^index	prediction$" || fail "SST-2.tsv submission file"
"$B" finetune glue --task-name sst-2 --data-dir "$W/sst" --init-checkpoint "$W/sst_a" --mode eval --precision fp32 --threads 2 > "$W/sst_eval.out" 2>/dev/null || fail "eval of saved model"
grep -q "\"acc\":$acc" "$W/sst_eval.out" || fail "eval of the saved model: $(cat "$W/sst_eval.out") vs acc $acc"
[ -f "$W/sst_a/best/model.safetensors" ] && grep -q '"BertForSequenceClassification"' "$W/sst_a/config.json" || fail "best/ model or architecture"

# --- freeze: only the top layer and head move
"$B" finetune glue --task-name sst-2 --data-dir "$W/sst" $COMMON --max-steps 3 --freeze-layers 1 --output-dir "$W/frozen" --mode train > /dev/null 2>&1 || fail "freeze run"
$PY - "$W/tiny/model.safetensors" "$W/frozen/model.safetensors" "$(dirname "$0")/../torch" <<'PYEOF' || fail "--freeze-layers 1"
import sys
sys.path.insert(0, sys.argv[3])
import st, numpy as np
a, b = st.load(sys.argv[1]), st.load(sys.argv[2])
moved = sorted(n for n in b if n in a and not np.array_equal(a[n], b[n]))
bad = [n for n in moved if n.startswith("bert.embeddings") or ".layer.0." in n]
ok = any(".layer.1." in n for n in moved) and any(n.startswith("bert.pooler") for n in moved)
print(f"freeze-layers 1: {len(moved)} tensors changed, frozen ones changed: {bad}")
sys.exit(1 if bad or not ok else 0)
PYEOF

# --- GLUE test layouts end to end: the real STS-B test file (nine columns) and MNLI's matched and
# mismatched dev/test files (test files have other columns than train/dev in both).
mkdir -p "$W/stsb" "$W/mnli"
head -33 "$S/glue/STS-B/train.tsv" > "$W/stsb/train.tsv"; head -17 "$S/glue/STS-B/dev.tsv" > "$W/stsb/dev.tsv"
cp "$S/glue/STS-B/test.tsv" "$W/stsb/test.tsv"
"$B" finetune glue --task-name sts-b --data-dir "$W/stsb" $COMMON --max-steps 2 --output-dir "$W/stsb_out" \
  --mode "train eval prediction" > /dev/null 2> "$W/stsb.err" || fail "sts-b prediction: $(tail -2 "$W/stsb.err")"
[ "$(wc -l < "$W/stsb_out/STS-B.tsv" 2>/dev/null)" = 1380 ] && awk -F'\t' 'NR>1 && !($2 ~ /^[0-5]\.[0-9][0-9][0-9]$/ && $2 <= 5) {exit 1}' "$W/stsb_out/STS-B.tsv" \
  || fail "STS-B.tsv: 1379 scores in [0, 5] with 3 decimals expected"
H='index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2'
for f in train dev_matched dev_mismatched test_matched test_mismatched; do
  case $f in  # label columns: train label1 + gold_label; dev five annotators + gold_label; test none
    train) n=2; printf "$H\tlabel1\tgold_label\n" ;;
    dev*) n=6; printf "$H\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n" ;;
    test*) n=0; printf "$H\n" ;;
  esac > "$W/mnli/$f.tsv"
  i=0
  for pair in "A man plays music.|entailment" "Nobody plays.|contradiction" "He is famous.|neutral"; do
    printf '%s\t1\t%se\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tA man is playing a guitar.\t%s' $i $i "${pair%|*}"
    for _ in $(seq $n); do printf '\t%s' "${pair#*|}"; done
    printf '\n'; i=$((i + 1))
  done >> "$W/mnli/$f.tsv"
done
"$B" finetune glue --task-name mnli --data-dir "$W/mnli" $COMMON --max-steps 2 --output-dir "$W/mnli_out" \
  --mode "train eval prediction" > "$W/mnli.out" 2> "$W/mnli.err" || fail "mnli: $(tail -2 "$W/mnli.err")"
grep -q '"examples":3' "$W/mnli.out" && grep -q '"mm_acc":' "$W/mnli.out" && grep -q '"mm_examples":3' "$W/mnli.out" \
  || fail "mnli metrics: matched and mismatched expected: $(cat "$W/mnli.out")"
for m in MNLI-m MNLI-mm; do
  [ "$(wc -l < "$W/mnli_out/$m.tsv" 2>/dev/null)" = 4 ] && awk -F'\t' 'NR>1 && $2 !~ /^(entailment|neutral|contradiction)$/ {exit 1}' "$W/mnli_out/$m.tsv" \
    || fail "$m.tsv: 3 label names expected"
done
echo "GLUE test layouts: STS-B real test file 1379 scores; MNLI matched + mismatched dev metrics and submission files"

# --- NER (CoNLL-2003, IOB2): fit 60 sentences
awk 'BEGIN{n=0} /^$/{n++} n<=60{print}' "$S/conll2003/iob2/train.txt" > "$W/ner.txt"
"$B" finetune ner --train-file "$W/ner.txt" --predict-file "$W/ner.txt" $COMMON --num-train-epochs 30 --output-dir "$W/ner" \
  --mode "train eval prediction" > "$W/ner.out" 2> "$W/ner.err" || fail "ner: $(tail -3 "$W/ner.err")"
f1=$(metric "$W/ner/eval_metrics.json" '["f1"]')
echo "CoNLL (60 train sentences) entity F1 after fitting: $f1"
atleast "$f1" 0.95 || fail "NER f1 $f1 < 0.95"
# the summary shows seqeval's table, not the per-type JSON
grep -q "^weighted avg " "$W/ner.err" && ! grep -q "eval_per_type" "$W/ner.err" || fail "NER summary without the classification report: $(tail -12 "$W/ner.err")"
"$B" eval ner --data "$W/ner.txt" --predictions "$W/ner/predictions.txt" --json > "$W/ner_eval.out" 2>&1 || fail "eval ner of predictions.txt"
grep -q "\"f1\":$f1" "$W/ner_eval.out" || fail "eval ner on predictions.txt disagrees: $(cat "$W/ner_eval.out")"

# --- resume: checkpoints every 5 steps; drop the newest two and the final model, resume from step 10:
# the final and best models must be byte-identical to an uninterrupted run (which checkpointing
# does not change), and so must the best evaluation.
R="--task-name sst-2 --data-dir $W/sst $COMMON --seed 5 --mode train,eval"
"$B" finetune glue $R --num-train-epochs 3 --output-dir "$W/rs_a" > /dev/null 2>&1 || fail "resume: straight run"
"$B" finetune glue $R --num-train-epochs 3 --output-dir "$W/rs_b" --num-steps-per-checkpoint 5 --keep-checkpoints 4 > /dev/null 2>&1 || fail "resume: checkpointed run"
[ "$(ls "$W/rs_b/checkpoints" | tr '\n' ' ')" = "step_10 step_15 step_20 step_5 " ] || fail "checkpoints: $(ls "$W/rs_b/checkpoints")"
cmp -s "$W/rs_a/model.safetensors" "$W/rs_b/model.safetensors" || fail "same seed and threads, checkpointing on: a different model"
rm -rf "$W/rs_b/checkpoints/step_15" "$W/rs_b/checkpoints/step_20" "$W/rs_b/model.safetensors"  # as if killed after step 14
"$B" finetune glue $R --num-train-epochs 3 --output-dir "$W/rs_b" --num-steps-per-checkpoint 5 --keep-checkpoints 4 --resume-from-checkpoint \
  > /dev/null 2> "$W/rs_b.err" || fail "resume: $(tail -3 "$W/rs_b.err")"
grep -q "resuming from .*step_10 (step 10)" "$W/rs_b.err" || fail "did not resume from step 10: $(cat "$W/rs_b.err")"
cmp -s "$W/rs_a/model.safetensors" "$W/rs_b/model.safetensors" || fail "resumed model differs"
cmp -s "$W/rs_a/best/model.safetensors" "$W/rs_b/best/model.safetensors" || fail "resumed best model differs"
[ "$(metric "$W/rs_a/eval_results.json" '["best_eval"]')" = "$(metric "$W/rs_b/eval_results.json" '["best_eval"]')" ] || fail "best_eval differs after resume"
for k in steps mean_padded_length mean_length; do  # the summary covers the steps before the resume too
  [ "$(metric "$W/rs_a/eval_results.json" "[\"$k\"]")" = "$(metric "$W/rs_b/eval_results.json" "[\"$k\"]")" ] || fail "$k differs after resume"
done
echo "resume: from step 10 of 24, final and best models byte-identical"
# SIGTERM: the current step finishes, a checkpoint is written, exit 0, no final model.
"$B" finetune glue $R --num-train-epochs 400 --num-steps-per-checkpoint 40 --output-dir "$W/rs_t" > /dev/null 2> "$W/rs_t.err" &
pid=$!
wait_for_dir "$W/rs_t/checkpoints/step_40" $pid
term_until_gone $pid  # none of the SIGTERMs may disturb the step in flight (resume.sh)
wait $pid; rc=$?
[ $rc -eq 0 ] || fail "SIGTERM exit code $rc"
grep -q "stopped by signal after step .*(to resume: the same command with --resume-from-checkpoint)" "$W/rs_t.err" || fail "SIGTERM message: $(tail -2 "$W/rs_t.err")"
last=$(grep -o "after step [0-9]*" "$W/rs_t.err" | grep -o "[0-9]*$")
[ -d "$W/rs_t/checkpoints/step_$last" ] && [ ! -f "$W/rs_t/model.safetensors" ] || fail "SIGTERM: no checkpoint at step $last, or a final model written"
echo "SIGTERM: stopped after step $last with a checkpoint"

# --- SQuAD v1.1: fit 106 questions (windows of 128, stride 64)
$PY - "$S/squad/v1.1/dev-v1.1.json" "$W/sq.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); a = d["data"][0]; a["paragraphs"] = a["paragraphs"][:4]
json.dump({"version": "1.1", "data": [a]}, open(sys.argv[2], "w"))
PYEOF
"$B" finetune squad --train-file "$W/sq.json" --predict-file "$W/sq.json" $BASE --max-seq-length 128 --doc-stride 64 \
  --num-train-epochs 30 --output-dir "$W/sq" > "$W/sq.out" 2> "$W/sq.err" || fail "squad: $(tail -3 "$W/sq.err")"
em=$(metric "$W/sq/eval_metrics.json" '["exact_match"]')
echo "SQuAD (106 train questions) exact match after fitting: $em"
atleast "$em" 50 || fail "SQuAD EM $em < 50"
"$B" eval squad --data "$W/sq.json" --predictions "$W/sq/predictions.json" | grep -q "\"exact_match\":$em" || fail "eval squad of predictions.json"
[ -f "$W/sq/nbest_predictions.json" ] || fail "nbest_predictions.json"
ans=$("$B" qa --model "$W/sq" --precision fp32 --threads 2 --question "$($PY -c "import json;print(json.load(open('$W/sq.json'))['data'][0]['paragraphs'][0]['qas'][0]['question'])")" \
  --context "$($PY -c "import json;print(json.load(open('$W/sq.json'))['data'][0]['paragraphs'][0]['context'])")" 2>/dev/null)
echo "qa: $ans"
echo "$ans" | grep -q '"answer":' || fail "bertcc qa"

# --- SQuAD v2.0 with ELECTRA's joint head (default for ELECTRA backbones): fit 28 questions, 15 of
# them unanswerable, from the v2.0 excerpt; the beams and the answer class decide the predictions
$PY - "$S/squad/v2.0/dev-v2.0.first5articles.json" "$W/sq2.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); a = d["data"][0]; a["paragraphs"] = a["paragraphs"][:4]
json.dump({"version": "v2.0", "data": [a]}, open(sys.argv[2], "w"))
PYEOF
printf '{"model_type": "electra", "vocab_size": 30522, "embedding_size": 64, "hidden_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}\n' > "$W/electra.json"
"$B" init-model --config "$W/electra.json" --vocab "$S/bert_vocab/bert-base-uncased-vocab.txt" --output "$W/etiny" --seed 1 > /dev/null 2>&1 || fail "init-model electra"
"$B" finetune squad --train-file "$W/sq2.json" --predict-file "$W/sq2.json" --init-checkpoint "$W/etiny" --learning-rate 2e-3 \
  --precision fp32 --threads 2 --train-batch-size 16 --log-freq 1000 --max-seq-length 128 --doc-stride 64 --num-train-epochs 30 \
  --output-dir "$W/sq2" > "$W/sq2.out" 2> "$W/sq2.err" || fail "squad v2 joint head: $(tail -3 "$W/sq2.err")"
grep -q "joint head .* beam search 4 starts x 4 ends" "$W/sq2.err" || fail "ELECTRA's SQuAD head is not the joint one: $(head -3 "$W/sq2.err")"
grep -q '"ElectraForQuestionAnsweringJoint"' "$W/sq2/config.json" && grep -q '"start_n_top": 4' "$W/sq2/config.json" || fail "joint head config"
em2=$(metric "$W/sq2/eval_metrics.json" '["exact"]'); has=$(metric "$W/sq2/eval_metrics.json" '["HasAns_exact"]'); no=$(metric "$W/sq2/eval_metrics.json" '["NoAns_exact"]')
echo "SQuAD v2.0 joint head (28 questions, 15 unanswerable) after fitting: exact $em2 (answerable $has, unanswerable $no)"
atleast "$has" 50 && atleast "$no" 50 || fail "SQuAD v2.0 joint head: answerable $has / unanswerable $no exact < 50"
[ -f "$W/sq2/null_odds.json" ] || fail "null_odds.json"
# (at the training's threshold, 0: the folder records the evaluation's best_f1_thresh for qa and serve)
"$B" finetune squad --predict-file "$W/sq2.json" --init-checkpoint "$W/sq2" --mode eval --precision fp32 --threads 2 \
  --max-seq-length 128 --doc-stride 64 --null-score-diff-threshold 0 --output-dir "$W/sq2e" > "$W/sq2e.out" 2>/dev/null || fail "eval of the joint model"
[ "$(metric "$W/sq2e/eval_metrics.json" '["exact"]')" = "$em2" ] || fail "the saved joint model evaluates differently"
ans=$("$B" qa --model "$W/sq2" --precision fp32 --threads 2 --max-seq-length 128 --doc-stride 64 --null-score-diff-threshold 0 \
  --question "$($PY -c "import json;print(json.load(open('$W/sq2.json'))['data'][0]['paragraphs'][0]['qas'][1]['question'])")" \
  --context "$($PY -c "import json;print(json.load(open('$W/sq2.json'))['data'][0]['paragraphs'][0]['context'])")" 2>/dev/null)
echo "qa (joint head): $ans"
# the same answer as the evaluation's predictions file for that question (the beams, the answer
# class and the windows as fine-tuning's evaluation decides them); which answer the tiny model
# learned depends on its dropout draws, and the metrics above judge that
want=$($PY -c "import json;d=json.load(open('$W/sq2.json'));print(json.dumps(json.load(open('$W/sq2/predictions.json'))[d['data'][0]['paragraphs'][0]['qas'][1]['id']]))")
[ "$want" != '""' ] && echo "$ans" | grep -qF "\"answer\":$want" || fail "bertcc qa with the joint head: $ans, evaluation predicted $want"
# the fine-tuned joint head exports as its beam search (ONNX Runtime's numbers: tests/onnx/check_onnx.py)
"$B" export-onnx --model "$W/sq2" --out "$W/sq2.onnx" > "$W/sq2x.out" 2> "$W/sq2x.err" \
  || fail "export-onnx of the joint head: $(cat "$W/sq2x.err")"
grep -q "ElectraForQuestionAnsweringJoint" "$W/sq2x.out" && grep -q "start_top_index" "$W/sq2.onnx" && grep -q "cls_logits" "$W/sq2.onnx" \
  || fail "export-onnx of the joint head: $(cat "$W/sq2x.out")"
"$B" finetune squad --train-file "$W/sq2.json" --init-checkpoint "$W/etiny" --no-joint-head --max-steps 1 --mode train \
  --precision fp32 --threads 2 --max-seq-length 128 --output-dir "$W/sq2s" > /dev/null 2>&1 || fail "--no-joint-head"
grep -q '"ElectraForQuestionAnswering"' "$W/sq2s/config.json" || fail "--no-joint-head: $(grep -A1 architectures "$W/sq2s/config.json")"

# --- inference commands on the fitted models, JSON lines in and out
printf '{"text":"a gorgeous , witty , seductive movie .","id":1}\n{"text":"the plot is nothing but boilerplate clichés","id":2}\n' |
  "$B" classify --model "$W/sst_a" --precision fp32 > "$W/cls.out" 2>/dev/null || fail "bertcc classify"
[ "$(grep -c '"label":' "$W/cls.out")" -eq 2 ] || fail "classify JSON lines: $(cat "$W/cls.out")"
echo '{"text":"SOCCER - JAPAN GET LUCKY WIN , CHINA IN SURPRISE DEFEAT ."}' | "$B" tag --model "$W/ner" --precision fp32 > "$W/tag.out" 2>/dev/null || fail "bertcc tag"
grep -q '"entities":' "$W/tag.out" || fail "tag output: $(cat "$W/tag.out")"
# A text longer than --max-seq-length is split between words as `finetune ner` splits sentences:
# with room for 8 one-piece words per sequence, 16 words are tagged as their two halves alone.
tags() { "$B" tag --model "$W/ner" --precision fp32 --max-seq-length 10 --text "$1" 2>/dev/null |
  $PY -c "import json,sys; print(' '.join(w['tag'] for w in json.loads(sys.stdin.read())['words']))"; }
h1="SOCCER - JAPAN GET LUCKY WIN , CHINA"; h2="IN SURPRISE DEFEAT . HE SAID ON FRIDAY"
whole=$(tags "$h1 $h2"); halves="$(tags "$h1") $(tags "$h2")"
echo "tag, 16 words in sequences of 8: $whole"
[ "$(echo "$whole" | wc -w)" -eq 16 ] && [ "$whole" = "$halves" ] || fail "long text tags '$whole' != halves '$halves'"

# --- errors
"$B" finetune glue --task-name sst-2 --data-dir "$W/sst" $COMMON --mode "train fly" --output-dir "$W/x" > /dev/null 2> "$W/err1" && fail "bad --mode accepted"
grep -q "unknown word 'fly'" "$W/err1" || fail "bad --mode message: $(cat "$W/err1")"
printf 'sentence\tlabel\nfine\t7\n' > "$W/sst/bad.tsv"
"$B" finetune glue --task-name sst-2 --data-dir "$W/sst" --train-file "$W/sst/bad.tsv" $COMMON --output-dir "$W/x" > /dev/null 2> "$W/err2" && fail "unknown label accepted"
grep -q "bad.tsv: example 1: unknown label '7'" "$W/err2" || fail "unknown label message: $(cat "$W/err2")"
echo 'not json' | "$B" classify --model "$W/sst_a" > /dev/null 2> "$W/err3" && fail "bad JSON accepted"
grep -q "stdin:1: invalid JSON" "$W/err3" || fail "bad JSON message: $(cat "$W/err3")"

[ "$fails" -eq 0 ] && echo OK || { echo "$fails failure(s)"; exit 1; }
