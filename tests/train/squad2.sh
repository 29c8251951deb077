#!/bin/sh
# SQuAD 2.0 "no answer" from fine-tuning to inference: a BERT with BertForQuestionAnswering's head
# (no answer class) fitted on the fixture's v2.0 paragraph (9 questions, 4 unanswerable). The
# model folder records the version and the evaluation's best_f1_thresh (config.json,
# version_2_with_negative / null_score_diff_threshold); `finetune squad --mode prediction` of the
# saved model, `qa` and serve's /v1/qa then answer alike: "" where the null score wins, a span
# elsewhere; --null-score-diff-threshold overrides. The end of the run is one pass: the metrics
# written are the end-of-training evaluation's (with its step), printed once.
#   tests/train/squad2.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"; PY=/usr/bin/python3
. "$(dirname "$0")/common.sh"
rm -rf "$W"; mkdir -p "$W"
use_fixture "$B" "$W"
[ -f "$FIX/ft/sq2.json" ] || { echo "SKIPPED: no fine-tuning data in the fixture (../shared/data missing)"; exit 77; }
SQ="$FIX/ft/sq2.json"
RUN="--precision fp32 --threads 2 --max-seq-length 128"
"$B" finetune squad --train-file "$SQ" --predict-file "$SQ" --init-checkpoint "$FIX/ft/bert" --no-joint-head \
  --learning-rate 3e-3 --train-batch-size 8 --num-train-epochs 40 --log-freq 1000 --seed 2 $RUN \
  --mode "train eval prediction" --output-dir "$W/m" > "$W/m.out" 2> "$W/m.err" || fail "finetune squad v2: $(tail -3 "$W/m.err")"
metric() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

# the folder records the task's version and the evaluation's best threshold
$PY - "$W/m/config.json" "$W/m/eval_metrics.json" <<'PYEOF' || fail "config.json does not record the v2.0 decision"
import json, sys
c, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert c.get("version_2_with_negative") is True, c
assert c["null_score_diff_threshold"] == m["best_f1_thresh"], (c["null_score_diff_threshold"], m["best_f1_thresh"])
PYEOF
grep -q 'answers "" when the null score beats the best span by more than' "$W/m.err" || fail "no line says what the model records: $(tail -3 "$W/m.err")"
# one pass at the end: the metrics are the end-of-training evaluation's, printed once
[ "$(metric "$W/m/eval_metrics.json" '.get("step")')" != None ] || fail "eval_metrics.json is not the end-of-training evaluation (no step): a second pass"
[ "$(wc -l < "$W/m.out")" = 1 ] || fail "the metrics line is printed $(wc -l < "$W/m.out") times: $(cat "$W/m.out")"
echo "v2.0 fitted: exact $(metric "$W/m/eval_metrics.json" '["exact"]'), best_f1_thresh $(metric "$W/m/eval_metrics.json" '["best_f1_thresh"]')"

# finetune squad's own predictions of the saved model (its recorded threshold)
"$B" finetune squad --predict-file "$SQ" --init-checkpoint "$W/m" --mode prediction $RUN --output-dir "$W/p" \
  > /dev/null 2> "$W/p.err" || fail "prediction with the saved model: $(tail -3 "$W/p.err")"
# each question of the paragraph as qa's JSON lines, and what finetune squad predicted for it
$PY - "$SQ" "$W/p/predictions.json" "$W/in.jsonl" "$W/want.txt" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); pred = json.load(open(sys.argv[2]))
p = d["data"][0]["paragraphs"][0]
with open(sys.argv[3], "w") as f, open(sys.argv[4], "w") as g:
    for q in p["qas"]:
        f.write(json.dumps({"question": q["question"], "context": p["context"], "id": q["id"]}) + "\n")
        g.write(("impossible" if q.get("is_impossible") else "answerable") + "\t" + json.dumps(pred[q["id"]]) + "\n")
PYEOF
"$B" qa --model "$W/m" $RUN < "$W/in.jsonl" > "$W/qa.out" 2> "$W/qa.err" || fail "qa: $(cat "$W/qa.err")"
$PY - "$W/qa.out" "$W/want.txt" <<'PYEOF' || fail "qa differs from finetune squad's predictions"
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
assert len(got) == len(want), (len(got), len(want))
empty_ok = span_ok = False
for g, (kind, w) in zip(got, want):
    w = json.loads(w)
    assert g["answer"] == w, ("qa", g, "finetune squad", w)
    if kind == "impossible" and w == "":
        empty_ok = True
        assert g["start"] == -1 and 0 < g["score"] <= 1, g
    if kind == "answerable" and w != "":
        span_ok = True
        assert g["start"] >= 0, g
assert empty_ok and span_ok, ("needs an unanswerable question answered \"\" and an answerable one with a span", got)
print("qa = finetune squad's predictions:", [g["answer"] for g in got])
PYEOF
# the flags override the model's record: a huge threshold never answers "", a tiny one always does
"$B" qa --model "$W/m" $RUN --null-score-diff-threshold 1e9 < "$W/in.jsonl" > "$W/qa_hi.out" 2>&1 || fail "qa --null-score-diff-threshold"
grep -q '"answer":""' "$W/qa_hi.out" && fail "--null-score-diff-threshold 1e9 still answered \"\": $(head -3 "$W/qa_hi.out")"
"$B" qa --model "$W/m" $RUN --null-score-diff-threshold -1e9 < "$W/in.jsonl" > "$W/qa_lo.out" 2>&1 || fail "qa --null-score-diff-threshold -1e9"
[ "$(grep -c '"answer":""' "$W/qa_lo.out")" = "$(wc -l < "$W/in.jsonl")" ] || fail "--null-score-diff-threshold -1e9: not all \"\": $(head -3 "$W/qa_lo.out")"
# a v2.0 training run without an evaluation records the version (threshold 0, or the flag's)
"$B" finetune squad --train-file "$SQ" --init-checkpoint "$FIX/ft/bert" --no-joint-head --max-steps 1 --mode train $RUN \
  --output-dir "$W/one" > /dev/null 2>&1 || fail "one step of v2.0 training"
grep -q '"version_2_with_negative": true' "$W/one/config.json" || fail "a v2.0 training run without evaluation does not record the version"

# serve: /v1/qa answers as qa does
if "$B" serve --help > /dev/null 2>&1; then
  $PY - "$B" "$W/m" "$W/in.jsonl" "$W/qa.out" <<'PYEOF' || fail "/v1/qa differs from qa"
import http.client, json, subprocess, sys
p = subprocess.Popen([sys.argv[1], "serve", "--port", "0", "--precision", "fp32", "--threads", "2", "--max-seq-length", "128",
                      "--model", "sq2=" + sys.argv[2]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    line = p.stdout.readline()
    assert "listening on" in line, line + p.stderr.read()
    port = int(line.strip().rsplit(":", 1)[1])
    inputs = [json.loads(l) for l in open(sys.argv[3])]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/qa", body=json.dumps({"inputs": inputs}))
    r = json.loads(c.getresponse().read())
    want = [json.loads(l) for l in open(sys.argv[4])]
    got = r["results"]
    assert [g["answer"] for g in got] == [w["answer"] for w in want], (got, want)
    c.request("GET", "/v2/models/sq2")
    meta = json.loads(c.getresponse().read())
    rec = json.load(open(sys.argv[2] + "/config.json"))
    assert meta["parameters"] == {"version_2_with_negative": True,
                                  "null_score_diff_threshold": rec["null_score_diff_threshold"]}, meta
    print("/v1/qa = qa:", [g["answer"] for g in got])
finally:
    p.terminate()
    p.wait()
PYEOF
fi
[ "$fails" -eq 0 ] && echo "squad v2.0 no-answer: all checks passed"
exit $(( fails > 0 ))
