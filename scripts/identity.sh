#!/bin/sh
# Byte identity of bertcc's results: runs one binary over a fixed set of small jobs and
# writes a manifest of the sha256 of every result, so that two binaries (before and after a
# refactoring) or two runs of one binary can be compared file by file.
#
#   scripts/identity.sh run BERTCC OUT         OUT/manifest.txt ("sha256  name" lines, sorted), results in OUT/run
#   scripts/identity.sh compare OLD NEW OUT    runs both (OUT/old, OUT/new) and diffs their manifests
#   scripts/identity.sh diff MANIFEST_A MANIFEST_B   lists every name whose hash differs or that one lacks
#   scripts/identity.sh check BERTCC OUT       two runs of one binary (OUT/a, OUT/b): complete and identical
#   scripts/identity.sh check-quick BERTCC OUT the same on a representative subset of the jobs (QUICK below;
#                                              the ctest test identity_harness)
#
# What is hashed (every job on the test fixture's tiny models, 2 threads, so a run takes minutes on
# 2 cores):
#  - the fixture itself (tests/fixture.sh, made by BERTCC unless IDENTITY_FIXTURE or ctest's
#    BERTCC_TEST_FIXTURE names one): sentence shards, vocabulary, the initial BERT and ELECTRA
#    models (not the HDF5 shards, which hold their creation times; every pre-training reads them);
#  - 20-step pre-trainings: BERT (LAMB fp32, bf16, fp16 with loss scaling, AdamW; bf16 on cpu-staged)
#    and ELECTRA (bf16 on cpu and cpu-staged): final models, every file of the step-10 and step-20
#    checkpoints (weights, optimizer moments, trainer state) and the DLLogger records without their
#    times and throughputs;
#  - fine-tuning (dropout, accumulation 2, a checkpoint): GLUE SST-2 (fp32, bf16, cpu-staged, ELECTRA),
#    STS-B, classify (CSV/TSV), NER, SQuAD v1.1, SQuAD v2.0 (BERT and ELECTRA's joint head, bf16):
#    models, checkpoints, eval metrics and prediction files;
#  - dump-step of every head (pre-training, qa, qa-joint, classify, token, discriminator, generator,
#    ELECTRA's joint pre-training step) in fp32 and bf16 on cpu and cpu-staged, on the models above
#    and batches written here;
#  - classify/qa/tag (fp32, bf16; one text and JSON lines), embed, fill-mask, export-onnx of each model.
# Hashes depend on the CPU (oneDNN picks kernels per ISA): compare binaries on one machine.
# IDENTITY_ONLY (an extended regular expression over job names: pt_bert_fp32, ft_sst2,
# dump_classify_bf16_cpu, qa1_fp32, onnx_ft_sst2, ...) runs and hashes only the jobs it matches.
# Exits 1 when a job fails or a result is missing or empty (the manifest then says MISSING), 77
# without ../shared/data (no fine-tuning data in the fixture).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY=${PY:-/usr/bin/python3}
TH=${IDENTITY_THREADS:-2}

usage() { sed -n 6,11p "$0" | sed 's/^# //'; exit 2; }
# make test's subset (check-quick): one job of each kind, twice, so that every hashing rule (every
# checkpoint file, trainer_state.json and eval_results.json without times, DLLogger records,
# prediction files, dump-step tensors, inference outputs, ONNX) and both model types are compared
# run against run: BERT fp32 and ELECTRA bf16 pre-training; fine-tuning with GLUE SST-2 (fp32),
# classify (TSV), SQuAD v2.0 with BERT (fp32) and with ELECTRA's joint head (bf16); dump-step of
# the pre-training, ELECTRA, classification and joint SQuAD heads on cpu and cpu-staged in fp32 and
# bf16; classify/qa/embed/fill-mask in fp32 and bf16; two ONNX exports. The other jobs' commands
# are compared byte for byte between two processes by tests/train/device.sh (cpu against
# cpu-staged: every precision, AdamW, STS-B, NER, SQuAD v1.1, the ELECTRA classifier, every
# inference command); the other exports are the same writer on other heads
# (checked against ONNX Runtime by tests/onnx/check_onnx.py). The full list runs with `check`
# (about 4 minutes on 2 cores) or `compare`.
QUICK='pt_bert_fp32|pt_electra_bf16|ft_(sst2|classify|squad2|squad2_joint)|dump_(pretraining|electra|classify|qa_joint)_.*'
QUICK="$QUICK|(classify1|classify|qa_joint|embed|fill_mask)_(fp32|bf16)|onnx_(ft_squad2_joint|pt_bert_fp32_model)"

# diff_manifests A B: prints each differing or missing name; returns 1 when any
diff_manifests() {
  $PY - "$1" "$2" <<'PYEOF'
import sys
def load(p):
    m = {}
    for line in open(p):
        h, name = line.rstrip("\n").split("  ", 1)
        m[name] = h
    return m
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = 0
for n in sorted(set(a) | set(b)):
    if n not in a: print("only in B:", n); bad += 1
    elif n not in b: print("only in A:", n); bad += 1
    elif a[n] != b[n] or a[n] == "MISSING": print("differs:  ", n); bad += 1
print(f"{len(set(a) & set(b))} results compared, {bad} differing or missing")
sys.exit(1 if bad else 0)
PYEOF
}

case "${1:-}" in
  diff) [ $# -eq 3 ] || usage; diff_manifests "$2" "$3"; exit $?;;
  compare)
    [ $# -eq 4 ] || usage
    mkdir -p "$4"
    rc=0
    for side in old new; do
      b=$2; [ $side = new ] && b=$3
      t0=$(date +%s)
      sh "$0" run "$b" "$4/$side" > "$4/$side.log" 2>&1 || { echo "run with $b failed: $(grep FAIL "$4/$side.log" | head -5)"; rc=1; }
      echo "$side ($b): $(wc -l < "$4/$side/manifest.txt") results in $(( $(date +%s) - t0 )) s"
    done
    diff_manifests "$4/old/manifest.txt" "$4/new/manifest.txt" || rc=1
    exit $rc;;
  check|check-quick)
    [ $# -eq 3 ] || usage
    [ "$1" = check-quick ] && export IDENTITY_ONLY="$QUICK"
    mkdir -p "$3"
    rc=0
    for side in a b; do
      t0=$(date +%s)
      sh "$0" run "$2" "$3/$side" > "$3/$side.log" 2>&1
      r=$?
      [ $r -eq 77 ] && { cat "$3/$side.log"; exit 77; }
      [ $r -eq 0 ] || { echo "run $side: $(tail -5 "$3/$side.log")"; rc=1; }
      echo "run $side: $(wc -l < "$3/$side/manifest.txt") results in $(( $(date +%s) - t0 )) s"
    done
    diff_manifests "$3/a/manifest.txt" "$3/b/manifest.txt" || rc=1
    [ $rc -eq 0 ] && echo "PASS identity harness: complete and deterministic" || echo "FAIL identity harness"
    exit $rc;;
  run) [ $# -eq 3 ] || usage;;
  *) usage;;
esac

B="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
O="$3"
rm -rf "$O"; mkdir -p "$O/run"
O="$(cd "$O" && pwd)"
W="$O/run"
M="$O/manifest.txt"
: > "$M.tmp"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# pick JOB: whether JOB runs (IDENTITY_ONLY)
pick() { [ -z "${IDENTITY_ONLY:-}" ] || echo "$1" | grep -Eq "^($IDENTITY_ONLY)\$"; }
# h NAME FILE: one manifest line (MISSING for a missing or empty file). trainer_state.json and
# eval_results.json are hashed without their times, throughputs and the checksum over them.
h() {
  if [ ! -s "$2" ]; then echo "MISSING  $1" >> "$M.tmp"; fail "missing or empty: $1 ($2)"; return; fi
  case "$2" in
    */trainer_state.json|*/eval_results.json) echo "$(untimed_json "$2" | sha256sum | cut -d' ' -f1)  $1" >> "$M.tmp";;
    *) echo "$(sha256sum < "$2" | cut -d' ' -f1)  $1" >> "$M.tmp";;
  esac
}
untimed_json() {
  $PY - "$1" <<'PYEOF'
import json, sys
timed = ("seconds", "per_s", "time", "state_checksum")
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if not any(t in k for t in timed)}
    return [strip(x) for x in v] if isinstance(v, list) else v
print(json.dumps(strip(json.load(open(sys.argv[1]))), sort_keys=True))
PYEOF
}
# hdir PREFIX DIR: every file under DIR except logs, TensorBoard events and DLLogger files (timed)
hdir() {
  [ -d "$2" ] || { h "$1/" "$2/missing"; return; }
  for f in $(cd "$2" && find . -type f ! -name '*.log' ! -name 'dllogger.json' ! -path '*/tensorboard/*' \
               ! -name '*.out' ! -name '*.err' | sed 's|^\./||' | LC_ALL=C sort); do
    h "$1/$f" "$2/$f"
  done
}
# records DLLOGGER OUT: the DLLogger records without time stamps, times and throughputs
records() {
  $PY - "$1" > "$2" <<'PYEOF'
import json, sys
timed = ("time", "per_s", "_sec", "throughput", "latency", "duration", "elapsed")
for line in open(sys.argv[1]):
    j = json.loads(line[5:])
    d = {k: v for k, v in j.get("data", {}).items() if not any(t in k for t in timed)}
    print(j["type"], json.dumps(j["step"]), json.dumps(d, sort_keys=True))
PYEOF
}
run() {  # NAME COMMAND...: stdout to W/NAME.out, stderr to W/NAME.err (nothing for a job not picked)
  _r=$1; shift
  pick "$_r" || return 0
  "$@" > "$W/$_r.out" 2> "$W/$_r.err" || fail "$_r: $(tail -3 "$W/$_r.err")"
}

# --- the fixture
FIX="${IDENTITY_FIXTURE:-${BERTCC_TEST_FIXTURE:-}}"  # ctest's fixture, made by this binary
if [ -n "$FIX" ]; then
  [ -f "$FIX/done" ] || { echo "fixture $FIX: incomplete (tests/fixture.sh)"; exit 1; }
else
  FIX="$O/fixture"
  sh "$ROOT/tests/fixture.sh" "$B" "$FIX" > "$O/fixture.log" 2>&1 || { echo "fixture: $(tail -3 "$O/fixture.log")"; exit 1; }
fi
# without ../shared/data there is no fine-tuning data: nothing to compare (ctest: skipped)
[ -f "$FIX/ft/sq.json" ] || { echo "SKIPPED: the fixture has no fine-tuning data (../shared/data missing)"; exit 77; }
# (the HDF5 shards hold their creation times: their contents are checked through every pre-training)
for f in vocab.txt $(cd "$FIX" && ls corpus/train); do h "fixture/$f" "$FIX/$([ $f = vocab.txt ] || echo corpus/train/)$f"; done
for m in bert electra; do h "fixture/ft/$m/model.safetensors" "$FIX/ft/$m/model.safetensors"; done
F="$FIX/ft"

# --- pre-training: 20 steps, checkpoints at 10 and 20
PT="--config $FIX/tiny.json --vocab $FIX/vocab.txt --input-dir $FIX/h5 --eval-dir $FIX/h5 --eval-batches 2 \
--learning-rate 1e-3 --warmup-proportion 0.25 --num-steps-per-checkpoint 10 --keep-checkpoints 4 --log-freq 1 --seed 7 \
--threads $TH --max-steps 20 --train-batch-size 16 --gradient-accumulation-steps 2"
pt() {  # NAME ARGS...
  n=$1; shift
  pick "pt_$n" || return 0
  run "pt_$n" "$B" pretrain $PT "$@" --output-dir "$W/pt_$n"
  hdir "pt_$n" "$W/pt_$n"
  records "$W/pt_$n/dllogger.json" "$W/pt_$n.records" 2> /dev/null
  h "pt_$n/dllogger.records" "$W/pt_$n.records"
}
pt bert_fp32 --precision fp32
pt bert_bf16 --precision bf16
pt bert_bf16_staged --precision bf16 --device cpu-staged
pt bert_fp16 --precision fp16 --init-loss-scale 1048576 --loss-scale-window 3
pt bert_adamw --precision fp32 --optimizer adamw
pt electra_bf16 --precision bf16 --model-type electra
pt electra_fp32_staged --precision fp32 --model-type electra --device cpu-staged

# --- fine-tuning
FT="--learning-rate 2e-3 --threads $TH --train-batch-size 8 --gradient-accumulation-steps 2 --log-freq 1000 \
--max-seq-length 64 --num-train-epochs 2 --num-steps-per-checkpoint 3 --seed 5"
ft() {  # NAME ARGS...
  n=$1; shift
  pick "ft_$n" || return 0
  run "ft_$n" "$B" finetune "$@" $FT --output-dir "$W/ft_$n"
  hdir "ft_$n" "$W/ft_$n"
  if [ -f "$W/ft_$n/dllogger.json" ]; then
    records "$W/ft_$n/dllogger.json" "$W/ft_$n.records" 2> /dev/null
    h "ft_$n/dllogger.records" "$W/ft_$n.records"
  fi
}
ft sst2 glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert" --precision fp32
ft sst2_bf16 glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert" --precision bf16
ft sst2_staged glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert" --precision fp32 --device cpu-staged
ft electra_sst2 glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/electra" --precision fp32 --layerwise-lr-decay 0.8
ft stsb glue --task-name sts-b --data-dir "$F/stsb" --init-checkpoint "$F/bert" --precision fp32
ft classify classify --train-file "$F/sst/train.tsv" --predict-file "$F/sst/dev.tsv" --label-column 1 --text-columns 0 \
  --skip-header --mode "train eval prediction" --init-checkpoint "$F/bert" --precision fp32
ft ner ner --train-file "$F/ner.txt" --predict-file "$F/ner.txt" --init-checkpoint "$F/bert" --mode "train eval prediction" \
  --precision fp32
ft squad squad --train-file "$F/sq.json" --predict-file "$F/sq.json" --doc-stride 32 --init-checkpoint "$F/bert" --precision fp32
ft squad2 squad --train-file "$F/sq2.json" --predict-file "$F/sq2.json" --doc-stride 32 --init-checkpoint "$F/bert" \
  --version-2-with-negative --precision fp32
ft squad2_joint squad --train-file "$F/sq2.json" --predict-file "$F/sq2.json" --doc-stride 32 --init-checkpoint "$F/electra" \
  --version-2-with-negative --precision bf16

# --- dump-step of every head: batches written here (F32 safetensors), models from above
$PY - "$W/batches" "$FIX/vocab.txt" <<'PYEOF' || fail "writing the dump-step batches"
import json, os, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
vocab = {t.rstrip("\n"): i for i, t in enumerate(open(sys.argv[2], encoding="utf-8"))}
def write(name, tensors):
    header, blobs, off = {}, [], 0
    for k, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *[float(v) for v in vals])
        header[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(b"".join(blobs))
state = [12345]
def rnd(n):  # a fixed LCG: the same batches everywhere
    state[0] = (state[0] * 1103515245 + 12345) % 2**31
    return state[0] % n
B, T = 4, 32
def rows(lo, hi, cls, sep, qlen=6):
    """[CLS] question [SEP] context [SEP] padding; lengths differ by row"""
    ids, seg, mask = [], [], []
    for b in range(B):
        n = T - 3 * b
        r = [cls] + [lo + rnd(hi - lo) for _ in range(qlen)] + [sep]
        s = [0] * len(r)
        ctx = n - len(r) - 1
        r += [lo + rnd(hi - lo) for _ in range(ctx)] + [sep]; s += [1] * (ctx + 1)
        ids += r + [0] * (T - n); seg += s + [0] * (T - n); mask += [1] * n + [0] * (T - n)
    return ids, seg, mask
# bert-base-uncased ids for the fine-tuned models
ids, seg, mask = rows(1000, 5000, 101, 102)
base = {"input_ids": ([B, T], ids), "segment_ids": ([B, T], seg), "input_mask": ([B, T], mask)}
write("classify.safetensors", dict(base, labels=([B], [b % 2 for b in range(B)])))
tok = [(-100 if m == 0 or i % T == 0 else rnd(3)) for i, m in enumerate(mask)]
write("token.safetensors", dict(base, labels=([B, T], tok)))
starts, ends = [9, 12, 0, 10], [11, 15, 0, 10]  # rows 2 unanswerable (0, 0)
write("qa.safetensors", dict(base, start_positions=([B], starts), end_positions=([B], ends)))
# the fixture's vocabulary for the pre-trained ELECTRA
ids, seg, mask = rows(5, len(vocab), vocab["[CLS]"], vocab["[SEP]"])
masked, mlm, disc = list(ids), [], []
for i, (t, m) in enumerate(zip(ids, mask)):
    pick = m == 1 and i % T not in (0,) and t not in (vocab["[SEP]"],) and rnd(100) < 20
    if pick: masked[i] = vocab["[MASK]"]
    mlm.append(t if pick else -100)
    disc.append(1 if m == 1 and rnd(100) < 15 else 0)
ebase = {"segment_ids": ([B, T], seg), "input_mask": ([B, T], mask)}
write("electra.safetensors", dict(ebase, input_ids=([B, T], masked), mlm_labels=([B, T], mlm)))
write("generator.safetensors", dict(ebase, input_ids=([B, T], masked), labels=([B, T], mlm)))
write("discriminator.safetensors", dict(ebase, input_ids=([B, T], ids), labels=([B, T], disc)))
PYEOF
H5="$FIX/h5/$(ls "$FIX/h5" | head -1)"
dump() {  # NAME ARGS...: fp32 and bf16 on cpu and cpu-staged
  n=$1; shift
  for prec in fp32 bf16; do
    for dv in cpu cpu-staged; do
      pick "dump_${n}_${prec}_$dv" || continue
      run "dump_${n}_${prec}_$dv" "$B" dump-step "$@" --precision $prec --device $dv --threads $TH \
        --out "$W/dump_${n}_${prec}_$dv.safetensors"
      h "dump/${n}_${prec}_$dv.safetensors" "$W/dump_${n}_${prec}_$dv.safetensors"
    done
  done
}
dump pretraining --model "$W/pt_bert_fp32/model" --batch "$H5" --rows 8
dump qa --head qa --model "$W/ft_squad" --batch "$W/batches/qa.safetensors"
dump qa_joint --head qa-joint --model "$W/ft_squad2_joint" --batch "$W/batches/qa.safetensors"
dump classify --head classify --model "$W/ft_sst2" --batch "$W/batches/classify.safetensors"
dump token --head token --model "$W/ft_ner" --batch "$W/batches/token.safetensors"
dump discriminator --head discriminator --model "$W/pt_electra_bf16/discriminator" --batch "$W/batches/discriminator.safetensors"
dump generator --head generator --model "$W/pt_electra_bf16/generator" --batch "$W/batches/generator.safetensors"
dump electra --model-type electra --model "$W/pt_electra_bf16/discriminator" --generator "$W/pt_electra_bf16/generator" \
  --batch "$W/batches/electra.safetensors"

# --- inference: one text, JSON lines on stdin; embed and fill-mask; ONNX export of each head
q="$($PY -c "import json;print(json.load(open('$F/sq.json'))['data'][0]['paragraphs'][0]['qas'][0]['question'])")"
c="$($PY -c "import json;print(json.load(open('$F/sq.json'))['data'][0]['paragraphs'][0]['context'])")"
$PY - "$F/sq2.json" "$W/qa.jsonl" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))["data"][0]["paragraphs"][0]
with open(sys.argv[2], "w") as f:
    for qa in p["qas"][:5]:
        f.write(json.dumps({"question": qa["question"], "context": p["context"]}) + "\n")
PYEOF
printf '{"text": "a gorgeous, witty film"}\n{"text": "dull and far too long", "text_pair": "not at all"}\n{"text": "it is what it is"}\n' > "$W/cls.jsonl"
printf '{"text": "John lives in Berlin and works for Siemens"}\n{"text": "EU rejects German call to boycott British lamb ."}\n' > "$W/tag.jsonl"
printf '{"text": "sentence one of [MASK] is here."}\n{"text": "then a fourth [MASK] appears about trains", "text_pair": "a third one"}\n' > "$W/mask.jsonl"
for prec in fp32 bf16; do
  I="--precision $prec --threads $TH"
  run "qa1_$prec" "$B" qa --model "$W/ft_squad" $I --question "$q" --context "$c"
  run "qa_$prec" sh -c "\"$B\" qa --model \"$W/ft_squad\" $I < \"$W/qa.jsonl\""
  run "qa_joint_$prec" sh -c "\"$B\" qa --model \"$W/ft_squad2_joint\" $I < \"$W/qa.jsonl\""
  run "qa2_$prec" sh -c "\"$B\" qa --model \"$W/ft_squad2\" $I < \"$W/qa.jsonl\""
  run "classify1_$prec" "$B" classify --model "$W/ft_sst2" $I --text "a gorgeous, witty film"
  run "classify_$prec" sh -c "\"$B\" classify --model \"$W/ft_sst2\" $I < \"$W/cls.jsonl\""
  run "classify_stsb_$prec" sh -c "\"$B\" classify --model \"$W/ft_stsb\" $I < \"$W/cls.jsonl\""
  run "tag1_$prec" "$B" tag --model "$W/ft_ner" $I --text "John lives in Berlin"
  run "tag_$prec" sh -c "\"$B\" tag --model \"$W/ft_ner\" $I < \"$W/tag.jsonl\""
  run "embed_$prec" sh -c "\"$B\" embed --model \"$W/pt_bert_fp32/model\" $I < \"$W/mask.jsonl\""
  run "fill_mask_$prec" sh -c "\"$B\" fill-mask --model \"$W/pt_bert_fp32/model\" $I < \"$W/mask.jsonl\""
  for n in qa1 qa qa_joint qa2 classify1 classify classify_stsb tag1 tag embed fill_mask; do
    pick "${n}_$prec" || continue
    h "infer/${n}_$prec.out" "$W/${n}_$prec.out"
  done
done
for m in ft_sst2 ft_stsb ft_ner ft_squad ft_squad2_joint pt_bert_fp32/model pt_electra_bf16/discriminator; do
  n=$(echo "$m" | tr '/' '_')
  pick "onnx_$n" || continue
  run "onnx_$n" "$B" export-onnx --model "$W/$m" --out "$W/onnx_$n.onnx"
  h "onnx/$n.onnx" "$W/onnx_$n.onnx"
done

LC_ALL=C sort -k2 "$M.tmp" > "$M"; rm -f "$M.tmp"
echo "$(wc -l < "$M") results -> $M"
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
