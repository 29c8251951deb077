#!/bin/sh
# Bad input, table-driven: every case must end with exit code 1 (not a crash: 134 abort, 139
# segfault; not a hang: each case runs under a timeout), print one error naming the file and the
# field or tensor at fault, and leave nothing behind where it says so.
#   tests/bad_input.sh BERTCC WORKDIR [PART]
# The cases run one process at a time (--threads 1, or refused before any compute), in two parts
# side by side (WORKDIR/1, WORKDIR/2: the sections are independent; part 2 makes the shards and the
# short run it shares with part 1 itself); PART 1 or 2 runs one part alone in WORKDIR.
set -u
B="$1"; W="$2"; PART="${3:-}"; PY=/usr/bin/python3
TORCH_DIR="$(cd "$(dirname "$0")/torch" && pwd)"
if [ -z "$PART" ]; then
  rm -rf "$W"; mkdir -p "$W"
  sh "$0" "$B" "$W/1" 1 > "$W/1.log" 2>&1 & p1=$!
  sh "$0" "$B" "$W/2" 2 > "$W/2.log" 2>&1 & p2=$!
  wait $p1; r1=$?; wait $p2; r2=$?
  cat "$W/1.log" "$W/2.log"
  exit $((r1 + r2))
fi
fails=0; n=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
part() { [ "$PART" = "$1" ]; }
rm -rf "$W"; mkdir -p "$W"

# expect NAME PATTERN -- COMMAND...: exit 1 within 120 s, stderr matching PATTERN (grep -E)
expect() {
  name="$1"; pat="$2"; shift 3
  n=$((n + 1))
  timeout 120 "$@" > "$W/out.txt" 2> "$W/err.txt"; rc=$?
  if [ $rc -ne 1 ]; then fail "$name: exit $rc (expected 1): $(tail -2 "$W/err.txt")"; return; fi
  if ! grep -Eq -- "$pat" "$W/err.txt"; then fail "$name: message does not match /$pat/: $(tail -2 "$W/err.txt")"; return; fi
  echo "ok   $name: $(grep -E -m1 -- "$pat" "$W/err.txt" | sed "s|$W/||g" | cut -c1-150)"
}

expect_cli() {  # like expect, for CLI11's own validation (exit code 105, message on stderr)
  name="$1"; pat="$2"; shift 3
  n=$((n + 1))
  timeout 60 "$@" > "$W/out.txt" 2> "$W/err.txt" < /dev/null; rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: exit $rc"; return; fi
  grep -Eq -- "$pat" "$W/err.txt" && echo "ok   $name: $(grep -E -m1 -- "$pat" "$W/err.txt")" || fail "$name: $(head -2 "$W/err.txt")"
}

# ---- inputs: a tiny model (16 positions, 100 tokens) and NVIDIA-layout shards made with h5py
mkdir -p "$W/model"
cat > "$W/model/config.json" <<'EOF'
{"vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
 "max_position_embeddings": 16, "type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
 "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "layer_norm_eps": 1e-12}
EOF
{ printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; i=5; while [ $i -lt 100 ]; do echo "w$i"; i=$((i + 1)); done; } > "$W/vocab.txt"
"$B" init-model --config "$W/model/config.json" --vocab "$W/vocab.txt" --output "$W/model_init" --seed 1 > /dev/null 2>&1 || fail init-model
printf 'label\ttext\n' > "$W/cls.tsv"; i=0; while [ $i -lt 40 ]; do printf '%d\tw%d w%d w%d\n' $((i % 2)) $((i + 5)) $((i + 6)) $((i % 7 + 5)) >> "$W/cls.tsv"; i=$((i + 1)); done
shard() {  # shard DIR NAME SEQ FIELD=VALUE (one bad value in row 3)
  mkdir -p "$1"
  $PY - "$1/$2" "$3" "${4:-}" <<'PYEOF'
import sys, h5py, numpy as np
path, S, bad = sys.argv[1], int(sys.argv[2]), sys.argv[3]
N, P = 40, 3
rng = np.random.default_rng(1)
d = {"input_ids": rng.integers(5, 100, (N, S)).astype(np.int32), "input_mask": np.ones((N, S), np.int8),
     "segment_ids": np.zeros((N, S), np.int8), "masked_lm_positions": np.tile(np.array([1, 2, 3], np.int32), (N, 1)),
     "masked_lm_ids": rng.integers(5, 100, (N, P)).astype(np.int32), "next_sentence_labels": np.zeros(N, np.int8)}
d["input_ids"][:, 0] = 2
if bad:
    field, value = bad.split("=")
    a = d[field]
    if a.ndim == 2: a[3, 2] = int(value)
    else: a[3] = int(value)
with h5py.File(path, "w") as f:
    for k, v in d.items(): f.create_dataset(k, data=v, compression="gzip")
PYEOF
}
PRE="--config $W/model/config.json --vocab $W/vocab.txt --train-batch-size 8 --num-steps-per-checkpoint 2 --precision fp32 --threads 1"
if part 2; then  # what part 1 makes below and part 2 reads: two good shards, one of 32 tokens, a 6-step run
  shard "$W/good" a.h5 16; shard "$W/good" b.h5 16; shard "$W/long" part-0.h5 32
  "$B" pretrain $PRE --max-steps 6 --input-dir "$W/good" --output-dir "$W/run" > /dev/null 2>&1 || fail "good run"
fi

if part 1; then  # ---- part 1: shards, resume, checkpoint trust, divergence, hyper-parameters, memory
for c in "input_ids=100" "input_ids=-1" "segment_ids=2" "input_mask=2" "masked_lm_ids=100" "next_sentence_labels=2" "masked_lm_positions=16"; do
  field=${c%%=*}
  rm -rf "$W/bad"; shard "$W/bad" part-0.h5 16 "$c"
  expect "pretrain: $c in a shard" "bad/part-0.h5.*$field" -- "$B" pretrain $PRE --max-steps 6 --input-dir "$W/bad" --output-dir "$W/o_bad"
done
rm -rf "$W/long"; shard "$W/long" part-0.h5 32
expect "pretrain: shards of 32 tokens, a model of 16 positions" "long/part-0.h5.*sequence length 32 exceeds max_position_embeddings 16" \
  -- "$B" pretrain $PRE --max-steps 6 --input-dir "$W/long" --output-dir "$W/o_long"
# a non-HDF5 file among the shards, reached mid-run on the prefetch thread
rm -rf "$W/mixed"; shard "$W/mixed" a.h5 16; shard "$W/mixed" b.h5 16; echo "not hdf5" > "$W/mixed/c.h5"
expect "pretrain: a non-HDF5 file among the shards" "mixed/c.h5" -- "$B" pretrain $PRE --max-steps 40 --input-dir "$W/mixed" --output-dir "$W/o_mixed"

# a shard whose input_ids claim 2^40 x 16 elements (chunked, never written: the file is small)
rm -rf "$W/huge"; mkdir -p "$W/huge"
$PY - "$W/huge/part-0.h5" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("input_ids", shape=(2**40, 16), dtype="i4", chunks=(1, 16))
    for k in ("input_mask", "segment_ids"): f.create_dataset(k, data=np.ones((4, 16), np.int8))
PYEOF
expect "pretrain: a dataset shape larger than memory" "huge/part-0.h5: dataset 'input_ids' \\[1099511627776,16\\].*GiB" \
  -- "$B" pretrain $PRE --max-steps 6 --input-dir "$W/huge" --output-dir "$W/o_h5huge"

# shards on which libhdf5 1.10 itself crashes (found by fuzz_hdf5: H5HL_protect -> H5F__accum_read
# copies into a failed allocation; bertcc without its reader process died with SIGSEGV): bertcc reads
# shards in a child process, so the crash is an error naming the file, mid-run on the prefetch
# thread as in dump-step
HC="$(cd "$(dirname "$0")/data/libhdf5_crashes" && pwd)"
for f in "$HC"/*.h5; do
  c=$(basename "$f")
  rm -rf "$W/h5crash"; shard "$W/h5crash" a.h5 16; cp "$f" "$W/h5crash/b.h5"
  expect "pretrain: a shard that crashes libhdf5 ($c)" "h5crash/b.h5: libhdf5 crashed reading this file \\(Segmentation fault" \
    -- "$B" pretrain $PRE --max-steps 40 --input-dir "$W/h5crash" --output-dir "$W/o_h5crash"
  expect "dump-step: a batch file that crashes libhdf5 ($c)" "$c: libhdf5 crashed reading this file" \
    -- "$B" dump-step --model "$W/model_init" --batch "$f" --out "$W/h5crash.safetensors"
done

# ---- resume against another model or other data: stop, touch nothing
rm -rf "$W/good" "$W/run"; shard "$W/good" a.h5 16; shard "$W/good" b.h5 16
"$B" pretrain $PRE --max-steps 6 --input-dir "$W/good" --output-dir "$W/run" > /dev/null 2>&1 || fail "good run"
before=$(find "$W/run" -type f | sort | xargs md5sum | md5sum)
sed 's/"hidden_size": 16/"hidden_size": 32/' "$W/model/config.json" > "$W/other.json"
expect "pretrain: resume with another --config" "checkpoint's hidden_size is 16 but this run's model has 32; refusing" \
  -- "$B" pretrain --config "$W/other.json" --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/run" \
     --train-batch-size 8 --max-steps 12 --precision fp32 --threads 1 --resume-from-checkpoint
[ "$(find "$W/run" -type f | sort | xargs md5sum | md5sum)" = "$before" ] && echo "ok   ... and every file of the run is untouched" \
  || fail "resume with another model changed the run's files"
rm -rf "$W/fewer"; mkdir -p "$W/fewer"; cp "$W/good/a.h5" "$W/fewer/"
# checkpoint at step 6 = 6 x 8 rows past shard 0 of 40 rows: the cursor is in the second shard
expect "pretrain: resume with fewer shards than the checkpoint's position" "past the 1 shard\(s\) of the input folder" \
  -- "$B" pretrain $PRE --max-steps 12 --input-dir "$W/fewer" --output-dir "$W/run" --resume-from-checkpoint

# a flipped byte in the newest checkpoint's trainer_state.json: detected, the previous one is used
rm -rf "$W/flip"; cp -r "$W/run" "$W/flip"
sed -i 's/"row": \([0-9]\)/"row": 9\1/' "$W/flip/checkpoints/step_6/trainer_state.json"
n=$((n + 1))
"$B" pretrain $PRE --max-steps 6 --input-dir "$W/good" --output-dir "$W/flip" --resume-from-checkpoint > "$W/out.txt" 2> "$W/err.txt"; rc=$?
grep -q "skipping checkpoint .*step_6: .*trainer_state.json: checksum mismatch" "$W/err.txt" && grep -q "resuming from .*step_4" "$W/err.txt" && [ $rc -eq 0 ] \
  && echo "ok   an edited trainer_state.json: $(grep -o 'skipping checkpoint .*' "$W/err.txt" | sed "s|$W/||g"), resumed from step_4" \
  || fail "edited trainer_state.json: exit $rc: $(tail -3 "$W/err.txt")"

# ---- checkpoint trust (issue 39): checksums are verified before any content is interpreted
# resume_case NAME DIR PATTERN... [-- EXTRA FLAGS]: exit 0, stderr matching every PATTERN (grep -E)
resume_case() {
  name="$1"; dir="$2"; shift 2
  n=$((n + 1))
  pats=""; while [ $# -gt 0 ] && [ "$1" != "--" ]; do pats="$pats
$1"; shift; done
  [ $# -gt 0 ] && shift
  timeout 120 "$B" pretrain $PRE --max-steps 6 --input-dir "$W/good" --output-dir "$dir" --resume-from-checkpoint "$@" \
    > "$W/out.txt" 2> "$W/err.txt"; rc=$?
  if [ $rc -ne 0 ]; then fail "$name: exit $rc: $(tail -3 "$W/err.txt")"; return; fi
  echo "$pats" | while IFS= read -r p; do [ -z "$p" ] || grep -Eq -- "$p" "$W/err.txt" || echo "$p"; done > "$W/missing.txt"
  [ -s "$W/missing.txt" ] && { fail "$name: stderr lacks /$(head -1 "$W/missing.txt")/: $(tail -3 "$W/err.txt")"; return; }
  echo "ok   $name: $(grep -E -m1 'skipping checkpoint|warning' "$W/err.txt" | sed "s|$W/||g" | cut -c1-170)"
}
# (a) one bit flipped in the newest checkpoint's config.json (hidden_size 16 -> 17: '6' ^ 1 = '7'):
# damage, so the previous checkpoint is used (it stopped the run as "another model" before)
rm -rf "$W/cflip"; cp -r "$W/run" "$W/cflip"
sed -i 's/"hidden_size": 16/"hidden_size": 17/' "$W/cflip/checkpoints/step_6/config.json"
grep -q '"hidden_size": 17' "$W/cflip/checkpoints/step_6/config.json" || fail "cflip: config.json not edited"
resume_case "a bit flipped in the newest config.json" "$W/cflip" \
  "skipping checkpoint .*cflip/checkpoints/step_6: .*step_6/config.json: checksum mismatch" "resuming from .*step_4"
# (b) the checksum fields deleted, the step edited and the optimizer moments corrupted: unverified,
# refused; the previous checkpoint is used (it resumed silently from the edited one before)
rm -rf "$W/nosum" "$W/nosum_ok"; cp -r "$W/run" "$W/nosum"; cp -r "$W/run" "$W/nosum_ok"
$PY - "$W/nosum/checkpoints/step_6" edit "$W/nosum_ok/checkpoints/step_6" <<'PYEOF'
import json, sys
for d in (sys.argv[1], sys.argv[3]):
    j = json.load(open(d + "/trainer_state.json"))
    del j["checksums"], j["state_checksum"]
    if d == sys.argv[1]:
        j["step"] = 5
        b = bytearray(open(d + "/optimizer.safetensors", "rb").read())
        for k in range(len(b) - 64, len(b)): b[k] ^= 0x55  # the last moments
        open(d + "/optimizer.safetensors", "wb").write(bytes(b))
    json.dump(j, open(d + "/trainer_state.json", "w"), indent=2)
PYEOF
resume_case "checksums deleted, step and moments edited" "$W/nosum" \
  "skipping checkpoint .*nosum/checkpoints/step_6: .*trainer_state.json: cannot be verified: .*no state_checksum.*--trust-unverified-checkpoint" \
  "resuming from .*nosum/checkpoints/step_4"
# ... and with --trust-unverified-checkpoint a checkpoint without checksums resumes, with a warning
resume_case "--trust-unverified-checkpoint: checksums deleted" "$W/nosum_ok" \
  "warning: .*nosum_ok/checkpoints/step_6: resuming without verifying trainer_state.json .no state_checksum., config.json .no checksum." \
  "resuming from .*nosum_ok/checkpoints/step_6" -- --trust-unverified-checkpoint
# ... but a checksum that differs is refused even then
rm -rf "$W/tflip"; cp -r "$W/run" "$W/tflip"
sed -i 's/"hidden_size": 16/"hidden_size": 17/' "$W/tflip/checkpoints/step_6/config.json"
resume_case "--trust-unverified-checkpoint: a checksum that differs" "$W/tflip" \
  "skipping checkpoint .*tflip/checkpoints/step_6: .*config.json: checksum mismatch" "resuming from .*step_4" -- --trust-unverified-checkpoint
# (c) every checkpoint damaged: an error naming each and why, and nothing is touched (the run used
# to start again at step 0, exit 0, and overwrite them)
rm -rf "$W/alldmg"; cp -r "$W/run" "$W/alldmg"
printf 'x' >> "$W/alldmg/checkpoints/step_6/model.safetensors"
sed -i 's/"hidden_size": 16/"hidden_size": 17/' "$W/alldmg/checkpoints/step_4/config.json"
$PY -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); del j['checksums'], j['state_checksum']; json.dump(j, open(p, 'w'), indent=2)" \
  "$W/alldmg/checkpoints/step_2/trainer_state.json"
before=$(find "$W/alldmg" | sort | while read -r f; do [ -f "$f" ] && md5sum "$f" || echo "$f"; done | md5sum)
expect "pretrain: every checkpoint damaged" \
  "none of the 3 checkpoint\(s\) in .*alldmg/checkpoints can be resumed" \
  -- "$B" pretrain $PRE --max-steps 8 --input-dir "$W/good" --output-dir "$W/alldmg" --resume-from-checkpoint
n=$((n + 1))
grep -Eq "^  step_6: .*model.safetensors: checksum mismatch" "$W/err.txt" && grep -Eq "^  step_4: .*config.json: checksum mismatch" "$W/err.txt" \
  && grep -Eq "^  step_2: .*cannot be verified" "$W/err.txt" && echo "ok   ... naming each checkpoint and why it was refused" \
  || fail "every checkpoint damaged: the reasons are not listed: $(cat "$W/err.txt")"
after=$(find "$W/alldmg" | sort | while read -r f; do [ -f "$f" ] && md5sum "$f" || echo "$f"; done | md5sum)
n=$((n + 1))
[ "$after" = "$before" ] && echo "ok   ... and the output folder is untouched" || fail "every checkpoint damaged: the output folder changed"
# fine-tuning checkpoints: the same rules (the newest damaged: the previous one; all: an error)
"$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
  --train-batch-size 2 --max-steps 3 --num-steps-per-checkpoint 1 --keep-checkpoints 2 --output-dir "$W/ftck" --threads 1 \
  --precision fp32 --mode train > /dev/null 2>&1 || fail "finetune with checkpoints"
printf 'x' >> "$W/ftck/checkpoints/step_2/optimizer.safetensors"
rm -rf "$W/ftck2"; cp -r "$W/ftck" "$W/ftck2"
n=$((n + 1))
"$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
  --train-batch-size 2 --max-steps 3 --num-steps-per-checkpoint 1 --keep-checkpoints 2 --output-dir "$W/ftck" --threads 1 \
  --precision fp32 --mode train --resume-from-checkpoint > "$W/out.txt" 2> "$W/err.txt"; rc=$?
[ $rc -eq 0 ] && grep -q "skipping checkpoint .*ftck/checkpoints/step_2: .*optimizer.safetensors: checksum mismatch" "$W/err.txt" \
  && grep -q "resuming from .*ftck/checkpoints/step_1" "$W/err.txt" && echo "ok   finetune: a damaged newest checkpoint, resumed from step_1" \
  || fail "finetune: damaged newest checkpoint: exit $rc: $(tail -3 "$W/err.txt")"
printf 'x' >> "$W/ftck2/checkpoints/step_1/model.safetensors"
before=$(find "$W/ftck2" -type f | sort | xargs md5sum | md5sum)
expect "finetune: every checkpoint damaged" "finetune: --resume-from-checkpoint: none of the 2 checkpoint\(s\) in .*ftck2/checkpoints can be resumed" \
  -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
  --train-batch-size 2 --max-steps 3 --num-steps-per-checkpoint 1 --keep-checkpoints 2 --output-dir "$W/ftck2" --threads 1 \
  --precision fp32 --mode train --resume-from-checkpoint
[ "$(find "$W/ftck2" -type f | sort | xargs md5sum | md5sum)" = "$before" ] && echo "ok   ... and its checkpoints are untouched" \
  || fail "finetune: every checkpoint damaged: files changed"

# ---- divergence and non-finite weights
cp -r "$W/model_init" "$W/nan"
$PY - "$W/nan" "$TORCH_DIR" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np, st
out = sys.argv[1]
t = st.load(out + "/model.safetensors")
t["bert.encoder.layer.0.output.dense.weight"][0, 0] = np.nan
st.save(out + "/model.safetensors", t)
PYEOF
expect "pretrain: NaN weights in --init-checkpoint" "consecutive steps with a non-finite loss" \
  -- "$B" pretrain --init-checkpoint "$W/nan" --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/o_nan" \
     --train-batch-size 8 --max-steps 20 --precision bf16 --threads 1 --max-nonfinite-steps 3
[ ! -e "$W/o_nan/model" ] && echo "ok   ... and no final model was written" || fail "NaN run wrote a final model"
expect "finetune: diverging (learning rate 1e30)" "finetune: 3 consecutive steps with a non-finite loss" \
  -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 \
     --max-seq-length 16 --learning-rate 1e30 --train-batch-size 4 --num-train-epochs 3 --output-dir "$W/o_div" --threads 1 \
     --precision fp32 --mode train --max-nonfinite-steps 3
[ ! -e "$W/o_div/model.safetensors" ] && echo "ok   ... and no final model was written" || fail "diverged run wrote a final model"
# non-finite weights at the end of a run too short for --max-nonfinite-steps to stop it (exited 0 with a NaN model)
expect "pretrain: NaN weights, 2 steps (fewer than --max-nonfinite-steps)" \
  "pretrain: the run diverged at step 1 \(the last 2 step\(s\) had a non-finite loss or gradients\); stopping without a final model" \
  -- "$B" pretrain --init-checkpoint "$W/nan" --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/o_nan2" \
     --train-batch-size 8 --max-steps 2 --precision fp32 --threads 1
[ ! -e "$W/o_nan2/model" ] && [ -z "$(ls "$W/o_nan2/checkpoints" 2>/dev/null)" ] && echo "ok   ... and no model or checkpoint was written" \
  || fail "NaN run wrote a model or checkpoint"
expect "finetune: NaN weights, 2 steps (fewer than --max-nonfinite-steps)" \
  "finetune: the run diverged at step 1 \(the last 2 step\(s\) had a non-finite loss or gradients" \
  -- "$B" finetune classify --init-checkpoint "$W/nan" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
     --train-batch-size 4 --max-steps 2 --output-dir "$W/o_nanft" --threads 1 --precision fp32 --mode train
[ ! -e "$W/o_nanft/model.safetensors" ] && echo "ok   ... and no final model was written" || fail "NaN fine-tuning wrote a final model"
# divergence too late for --max-nonfinite-steps (10) to stop the run: the last steps skipped as
# non-finite, or finite weights whose outputs are not; exit 1, the diverging step named, no
# "[best]" evaluation, no final or best model (it exited 0 with train_loss -nan and a [best] eval)
expect "finetune: diverging in the last steps (learning rate 1e30, an evaluation)" "finetune: the run diverged at step [0-9]+ " \
  -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --predict-file "$W/cls.tsv" --text-columns 1 \
     --max-seq-length 16 --learning-rate 1e30 --train-batch-size 4 --num-train-epochs 1 --output-dir "$W/o_div2" --threads 1 \
     --precision fp32 --mode "train eval"
{ ! grep -q "\[best\]" "$W/err.txt" && [ ! -e "$W/o_div2/model.safetensors" ] && [ ! -e "$W/o_div2/best" ]; } \
  && echo "ok   ... and no evaluation marked best, no final or best model" || fail "diverged run: a [best] evaluation or a model written"
expect "finetune: one step to weights of 1e30 (finite weights, non-finite outputs)" \
  "finetune: not writing the final model to .*o_div3: training example 1: the model produced a non-finite logit" \
  -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
     --learning-rate 1e30 --warmup-proportion 0 --train-batch-size 4 --max-steps 1 --output-dir "$W/o_div3" --threads 1 --precision fp32 --mode train
[ ! -e "$W/o_div3/model.safetensors" ] && echo "ok   ... and no final model was written" || fail "a model with non-finite outputs was written"
expect "pretrain: diverging in the last steps (learning rate 1e30)" "pretrain: the run diverged at step [0-9]+ .*stopping without a final model" \
  -- "$B" pretrain $PRE --max-steps 4 --learning-rate 1e30 --warmup-proportion 0 --input-dir "$W/good" --output-dir "$W/o_div4"
[ ! -e "$W/o_div4/model" ] && echo "ok   ... and no final model was written" || fail "a diverged pretrain wrote a final model"
# hyper-parameters: not finite or out of range, refused at start-up naming the flag and the value (a NaN
# learning rate made every weight NaN at the first update, and the run could end with exit 0)
for c in "--learning-rate:nan:must be a finite number > 0" "--learning-rate:inf:must be a finite number > 0" \
         "--learning-rate:-1e-3:must be a finite number > 0" "--warmup-proportion:nan:must be a finite number in \[0, 1\]" \
         "--warmup-proportion:1.5:must be a finite number in \[0, 1\]" "--max-steps:1000000000000000:must be an integer in \[1, 1000000000000\]" \
         "--train-batch-size:0:must be an integer in \[1, " "--init-loss-scale:nan:must be a finite number > 0"; do
  flag=${c%%:*}; rest=${c#*:}; val=${rest%%:*}; msg=${rest#*:}
  rm -rf "$W/o_hp"
  case "$flag" in --max-steps) more="--train-batch-size 8";; --train-batch-size) more="--max-steps 2";; *) more="--max-steps 2 --train-batch-size 8";; esac
  case "$val" in nan|inf) ex=expect_cli; pat="^$flag: '$val' is not a finite number";; *) ex=expect_cli; pat="^$flag: $val is outside [[(]";; esac  # (the flag layer's range, before the trainer's $msg)
  $ex "pretrain: $flag $val" "$pat" \
    -- "$B" pretrain --config "$W/model/config.json" --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/o_hp" \
       --precision fp32 --threads 1 $more "$flag" "$val"
  [ ! -e "$W/o_hp" ] || fail "pretrain $flag $val created $W/o_hp"
done
for c in "--learning-rate:nan:must be a finite number > 0" "--learning-rate:-5e-5:must be a finite number > 0" \
         "--num-train-epochs:nan:must be a finite number in \(0, 1e6\]" "--num-train-epochs:1e30:must be a finite number in \(0, 1e6\]" \
         "--num-train-epochs:0:must be a finite number in \(0, 1e6\]" "--warmup-proportion:nan:must be a finite number in \[0, 1\]" \
         "--weight-decay:-0.01:must be a finite number >= 0" "--max-grad-norm:nan:must be a finite number" \
         "--max-steps:0:must be an integer in \[1, 1000000000000\]" "--max-steps:1000000000000000:must be an integer in \[1, 1000000000000\]"; do
  flag=${c%%:*}; rest=${c#*:}; val=${rest%%:*}; msg=${rest#*:}
  rm -rf "$W/o_hp"
  case "$val" in nan|inf) ex=expect_cli; pat="^$flag: '$val' is not a finite number";; *) ex=expect_cli; pat="^$flag: $val is outside [[(]";; esac  # (the flag layer's range, before the trainer's $msg)
  # (--max-steps 0: inside the flag's [-1, 1e12], where -1 means "from the epochs"; the trainer refuses it)
  [ "$flag $val" = "--max-steps 0" ] && { ex=expect; pat="^bertcc: error: $flag [-+.0-9a-z]+: $msg"; }
  $ex "finetune: $flag $val" "$pat" \
    -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
       --output-dir "$W/o_hp" --threads 1 --mode train "$flag" "$val"
  [ ! -e "$W/o_hp" ] || fail "finetune $flag $val created $W/o_hp"
done
fi

if part 2; then  # ---- part 2: inference limits, PyTorch checkpoints, safetensors, long vocabulary entries
# ---- inference against the model's limits
expect "finetune: --max-seq-length 128 (default) on a 16-position model" "max-seq-length 128 exceeds the model's max_position_embeddings 16" \
  -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-steps 1 \
     --output-dir "$W/o_len" --threads 1 --mode train
"$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-steps 1 --max-seq-length 16 \
  --output-dir "$W/cls_model" --threads 1 --mode train > /dev/null 2>&1 || fail "classify model"
expect "classify: --max-seq-length 4096 on a 16-position model" "max-seq-length 4096 exceeds the model's max_position_embeddings 16" \
  -- "$B" classify --model "$W/cls_model" --max-seq-length 4096 --text "w5 w6"
{ cat "$W/vocab.txt"; echo extra1; echo extra2; } > "$W/vocab_big.txt"
expect "classify: a vocabulary larger than the model's" "vocab_big.txt: 102 entries, more than the model's vocab_size 100" \
  -- "$B" classify --model "$W/cls_model" --vocab "$W/vocab_big.txt" --text "w5 w6"

# stdin lines are bounded: /dev/zero on stdin is one endless line, refused at the cap (it grew until memory ran out)
# (under 4 GB of address space and a timeout: the old binary read until memory ran out)
expect "classify: /dev/zero on stdin" "stdin:1: a line longer than 67108864 bytes" -- sh -c "ulimit -v 4194304; timeout 100 '$B' classify --model '$W/cls_model' < /dev/zero"
expect "classify: --vocab /dev/zero" "/dev/zero: is a character device, not a regular file" \
  -- sh -c "ulimit -v 4194304; timeout 20 '$B' classify --model '$W/cls_model' --vocab /dev/zero --text w5"

# errors thrown inside parallel loops (feature building) end the program cleanly
cat > "$W/sq.json" <<'EOF'
{"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "w6 w7 w8 w9",
 "qas": [{"id": "q1", "question": "w5", "answers": [{"text": "w7", "answer_start": 3}]}]}]}]}
EOF
sed 's/"question": "w5"/"question": "w5 w6 w7 w8 w9 w10 w11 w12"/' "$W/sq.json" > "$W/long_q.json"
"$B" finetune squad --init-checkpoint "$W/model_init" --train-file "$W/sq.json" --max-seq-length 16 --doc-stride 4 \
  --max-steps 1 --output-dir "$W/qa_model" --threads 1 --mode train > /dev/null 2>&1 || fail "qa model"
expect "finetune squad: --max-seq-length 8 with a question of 8 tokens" "max.seq.length|too (short|small|long)" \
  -- "$B" finetune squad --init-checkpoint "$W/model_init" --train-file "$W/long_q.json" --max-seq-length 8 --doc-stride 4 \
     --max-steps 1 --output-dir "$W/o_sq" --threads 1 --mode train
expect "qa: --max-seq-length 3 (no room for the context)" "max.seq.length|too (short|small|long)" \
  -- "$B" qa --model "$W/qa_model" --max-seq-length 3 --question "w5 w6" --context "w7 w8 w9"
# a tag set of one label is a one-class token classifier, not a regression
awk 'BEGIN{n=0} /^$/{n++} n<=6{print}' "$(dirname "$0")/../../shared/data/conll2003/iob2/train.txt" | awk 'NF{print $1, "O"; next}{print}' > "$W/only_o.txt"
n=$((n + 1))
if timeout 120 "$B" finetune ner --init-checkpoint "$W/model_init" --train-file "$W/only_o.txt" --predict-file "$W/only_o.txt" \
     --max-seq-length 16 --max-steps 2 --output-dir "$W/o_ner" --threads 1 --mode train,eval > "$W/out.txt" 2> "$W/err.txt"; then
  echo "ok   finetune ner: training data whose only tag is O trains: $(cat "$W/out.txt" | cut -c1-80)"
else
  fail "finetune ner with only O tags: exit $?: $(tail -2 "$W/err.txt")"
fi

# a SQuAD answer_start of the wrong type (found by fuzz_datasets: was a bare nlohmann type_error)
sed 's/"answer_start": 3/"answer_start": null/' "$W/sq.json" > "$W/sq_null.json"
expect "finetune squad: answer_start null" "sq_null.json: article 1, paragraph 1, question 1: .*type must be number" \
  -- "$B" finetune squad --init-checkpoint "$W/model_init" --train-file "$W/sq_null.json" --max-seq-length 16 --doc-stride 4 \
     --max-steps 1 --output-dir "$W/o_sqn" --threads 1 --mode train

# ---- PyTorch checkpoints (convert --from pt): a storage_offset near 2^63 wrapped the extent check
# around (one file loaded the bytes before the storage as weights with exit 0, another crashed)
for c in "wrap:9223372036854775800:1:16" "segv:9223369837831520256:1099511627775:16" "numel:0:1:-16"; do
  k=${c%%:*}; rest=${c#*:}; off=${rest%%:*}; rest=${rest#*:}; stride=${rest%%:*}; numel=${rest#*:}
  mkdir -p "$W/pt/$k"
  $PY - "$W/pt/$k/pytorch_model.bin" "$off" "$stride" "$numel" "$W/model_init/model.safetensors" "$TORCH_DIR" <<'PYEOF'
import collections, struct, sys, zipfile
sys.path.insert(0, sys.argv[6])
import torch, st
path, off, stride, numel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = torch.ones(16)
class Crafted:  # pickles as torch.save pickles a tensor: _rebuild_tensor_v2 of t's storage, with this offset and stride
    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, (t.storage(), off, (16,), (stride,), False, collections.OrderedDict()))
# the tiny model's state dict, its first tensor crafted (so its storage is the first, key '0')
sd = {"bert.embeddings.LayerNorm.weight": Crafted()}
sd.update({k: torch.from_numpy(v.copy()) for k, v in st.load(sys.argv[5]).items() if k not in sd})
torch.save(sd, path)
if numel != 16:  # the persistent id's element count (BININT1 16 after the first 'cpu'), replaced by a BININT
    z = zipfile.ZipFile(path); entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]; z.close()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, d in entries:
            if n.endswith("/data.pkl"):
                i = d.index(b"K\x10", d.index(b"cpu"))
                d = d[:i] + b"J" + struct.pack("<i", numel) + d[i + 2:]
            z.writestr(n, d)
PYEOF
done
expect "convert --from pt: storage_offset 2^63 - 8 (wraps to 32 bytes before the storage)" \
  "pt/wrap/pytorch_model.bin: tensor 'bert.embeddings.LayerNorm.weight': storage offset 9223372036854775800 with its sizes and strides overflows" \
  -- "$B" convert --from pt "$W/pt/wrap/pytorch_model.bin" --config "$W/model_init/config.json" --out "$W/o_ptwrap"
[ ! -e "$W/o_ptwrap" ] || fail "refused checkpoint left $W/o_ptwrap behind"
expect "convert --from pt: storage_offset 2^63 - 2^41 (wraps to 8 TB before the storage)" \
  "pt/segv/pytorch_model.bin: tensor 'bert.embeddings.LayerNorm.weight': storage offset 9223369837831520256 with its sizes and strides overflows" \
  -- "$B" convert --from pt "$W/pt/segv/pytorch_model.bin" --config "$W/model_init/config.json" --out "$W/o_ptsegv"
expect "convert --from pt: a storage of -16 elements" \
  "pt/numel/pytorch_model.bin: tensor 'bert.embeddings.LayerNorm.weight': storage data/[0-9]+ has a negative element count -16" \
  -- "$B" convert --from pt "$W/pt/numel/pytorch_model.bin" --config "$W/model_init/config.json" --out "$W/o_ptnumel"

# ---- safetensors headers and config.json values
st_file() {  # st_file PATH HEADER_JSON DATA_BYTES
  $PY - "$1" "$2" "$3" <<'PYEOF'
import struct, sys
h = sys.argv[2].encode(); pad = (8 - len(h) % 8) % 8; h += b" " * pad
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * int(sys.argv[3]))
PYEOF
}
for c in dup overlap huge; do mkdir -p "$W/st/$c"; cp "$W/model_init/config.json" "$W/model_init/vocab.txt" "$W/st/$c/"; done
# dup / overlap: the model's own file with its header edited (real tensor names, so only these checks catch them)
$PY - "$W/model_init/model.safetensors" "$W/st" <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def write(path, text):
    b = text.encode(); b += b" " * ((8 - len(b) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(b)) + b + data)
a, b = "bert.embeddings.LayerNorm.bias", "bert.embeddings.LayerNorm.weight"
body = json.dumps(h)[1:-1]
# the same name twice: the second entry points at another tensor's bytes (a JSON reader keeps the last)
write(sys.argv[2] + "/dup/model.safetensors", "{" + body + ', "' + a + '": ' + json.dumps(h[b]) + "}")
h2 = dict(h); h2[a] = dict(h[a], data_offsets=h[b]["data_offsets"])  # a reads b's bytes
write(sys.argv[2] + "/overlap/model.safetensors", json.dumps(h2))
PYEOF
st_file "$W/st/huge/model.safetensors" '{"a":{"dtype":"F32","shape":[4611686018427387906],"data_offsets":[0,8]}}' 8
for c in "dup:bert.embeddings.LayerNorm.bias' appears twice" "overlap:overlap in the data" "huge:overflows"; do
  expect "safetensors: ${c%%:*}" "${c%%:*}/model.safetensors.*${c#*:}" \
    -- "$B" pretrain --init-checkpoint "$W/st/${c%%:*}" --input-dir "$W/good" --output-dir "$W/o_st" --max-steps 1 --train-batch-size 8 --threads 1
done
sed 's/"vocab_size": 100/"vocab_size": 4294975296/' "$W/model/config.json" > "$W/big_vocab.json"
expect "config.json: vocab_size 2^32 + 8000" "big_vocab.json: field 'vocab_size' = 4294975296 is out of range" \
  -- "$B" init-model --config "$W/big_vocab.json" --vocab "$W/vocab.txt" --output "$W/o_cfg"
[ ! -e "$W/o_cfg" ] || fail "config error left $W/o_cfg behind"

# ---- a vocabulary entry of 160,000 characters: loads in bounded time and memory (was 16.6 GB, then SIGSEGV)
# (with "x" and "##x" in the vocabulary, a chain of x's made the trie's failure links quadratic)
{ cat "$W/vocab.txt"; echo x; echo "##x"; $PY -c "print('x' * 160000)"; } > "$W/vocab_long.txt"
n=$((n + 1))
out=$( (ulimit -v 3000000; echo "w5 xx w6" | timeout 60 "$B" tokenize --vocab "$W/vocab_long.txt") 2> "$W/err.txt"); rc=$?
[ $rc -eq 0 ] && [ "$out" = "5 100 101 6" ] && echo "ok   a 160,000-character vocabulary entry: tokenized within 3 GB and 60 s ($out)" \
  || fail "long vocabulary entry: exit $rc, output '$out': $(tail -2 "$W/err.txt")"

fi

if part 1; then
# ---- memory: sizes that would not fit are refused with the estimate before anything is allocated
printf '{"vocab_size": 100, "hidden_size": 2048, "num_hidden_layers": 3, "num_attention_heads": 16, "intermediate_size": 8192, "max_position_embeddings": 16}\n' > "$W/wide.json"
printf '{"vocab_size": 1000000, "hidden_size": 16384, "num_hidden_layers": 2, "num_attention_heads": 16, "intermediate_size": 1024}\n' > "$W/huge.json"
expect "a config of 19 billion parameters" "the weights of this model \(about [0-9]+ parameters\) would take about 71.32 GiB, but [0-9.]+ GiB are available" \
  -- "$B" init-model --config "$W/huge.json" --output "$W/o_huge"
[ ! -e "$W/o_huge" ] || fail "refused model left $W/o_huge behind"
expect "bench: activations of 65536 x 512 tokens" "activations of a batch of 65536 x 512 tokens would take about [0-9.]+ GiB" \
  -- "$B" bench train --config bert-base --batch 65536 --seq 512 --steps 1
expect "pretrain: a step that does not fit in 2.6 GB of address space (ulimit -v)" \
  "pretrain: a training step \(micro-batches of 32 x 16 tokens, [0-9]+ parameters: gradients, optimizer moments, activations\) would take about [0-9.]+ GiB, but [0-9.]+ GiB are available; lower --train-batch-size" \
  -- sh -c "ulimit -v 2600000; exec \"$B\" pretrain --config \"$W/wide.json\" --vocab \"$W/vocab.txt\" --input-dir \"$W/good\" --output-dir \"$W/o_wide\" --train-batch-size 32 --max-steps 1"

fi

if part 2; then  # ---- part 2: model directories, shards, task files, encodings, outputs, serve, CLI, newcomers
# ---- model directories: safetensors and config.json damaged one way each, vocabularies
mkst() {  # mkst NAME: a copy of the tiny model to damage
  rm -rf "$W/md/$1"; mkdir -p "$W/md/$1"; cp "$W/model_init/config.json" "$W/model_init/vocab.txt" "$W/model_init/model.safetensors" "$W/md/$1/"
}
mkst trunc; head -c 5000 "$W/model_init/model.safetensors" > "$W/md/trunc/model.safetensors"
expect "safetensors: truncated in the data" "trunc/model.safetensors: tensor '.*': data ends at byte [0-9]+ but the file holds only" \
  -- "$B" embed --model "$W/md/trunc" --text "w5 w6"
mkst hdr; $PY -c "import struct,sys; b=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(struct.pack('<Q',10**9)+b[8:])" \
  "$W/model_init/model.safetensors" "$W/md/hdr/model.safetensors"
expect "safetensors: header larger than the file" "hdr/model.safetensors: truncated safetensors file \(header of 1000000000 bytes" \
  -- "$B" embed --model "$W/md/hdr" --text "w5 w6"
edit_header() {  # edit_header NAME PYTHON-EXPR-ON-h (the header bytes)
  mkst "$1"
  $PY -c "import struct,sys; b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=b[8:8+n]; h=$2; open(sys.argv[2],'wb').write(b[:8]+h+b[8+n:])" \
    "$W/model_init/model.safetensors" "$W/md/$1/model.safetensors"
}
edit_header badjson "b'['+h[1:]"
expect "safetensors: header not JSON" "badjson/model.safetensors: safetensors header is not valid JSON" -- "$B" embed --model "$W/md/badjson" --text "w5 w6"
edit_header dtype "h.replace(b'\"F32\"', b'\"F8X\"', 1)"
expect "safetensors: unknown dtype" "dtype/model.safetensors: tensor '.*': unsupported dtype 'F8X'" -- "$B" embed --model "$W/md/dtype" --text "w5 w6"
for c in "del:hidden_size:missing field 'hidden_size'" "num_attention_heads:0:field 'num_attention_heads' must be positive, got 0" \
         "num_attention_heads:3:field 'hidden_size' \\(16\\) is not a multiple of 'num_attention_heads' \\(3\\)" \
         "hidden_size:\"abc\":field 'hidden_size' must be an integer" "intermediate_size:-5:field 'intermediate_size' must be positive, got -5"; do
  key=${c%%:*}; rest=${c#*:}; val=${rest%%:*}; msg=${rest#*:}
  mkst cfg
  $PY -c "import json,sys; c=json.load(open(sys.argv[1])); k,v=sys.argv[2],sys.argv[3]
if k=='del': del c[v]
else: c[k]=json.loads(v)
json.dump(c,open(sys.argv[1],'w'))" "$W/md/cfg/config.json" "$key" "$val"
  expect "config.json: $key $val" "cfg/config.json: $msg" -- "$B" embed --model "$W/md/cfg" --text "w5 w6"
done
mkst vempty; : > "$W/md/vempty/vocab.txt"
expect "vocab.txt: empty" "vempty/vocab.txt: empty vocabulary file" -- "$B" embed --model "$W/md/vempty" --text "w5 w6"
mkst vunk; grep -v UNK "$W/model_init/vocab.txt" > "$W/md/vunk/vocab.txt"
mkst vutf; sed -i '50s/.*/w\xff\xfex/' "$W/md/vutf/vocab.txt"
expect "vocab.txt: a line that is not UTF-8" "vutf/vocab.txt:50: vocabulary entry is not valid UTF-8 \\(byte 2\\)" -- "$B" embed --model "$W/md/vutf" --text "w5 w6"
expect "vocab.txt: no [UNK]" "vunk/vocab.txt: the vocabulary has no \[UNK\] token" -- "$B" embed --model "$W/md/vunk" --text "w5 w6"
expect "pretrain: --gradient-accumulation-steps 3" "--train-batch-size \(8\) must be a multiple of --gradient-accumulation-steps \(3\)" \
  -- "$B" pretrain $PRE --max-steps 6 --gradient-accumulation-steps 3 --input-dir "$W/long" --output-dir "$W/o_acc"
expect_cli "pretrain: --gradient-accumulation-steps 0" "^--gradient-accumulation-steps: 0 is outside \[1, 1048576\]" \
  -- "$B" pretrain $PRE --max-steps 6 --gradient-accumulation-steps 0 --input-dir "$W/long" --output-dir "$W/o_acc"
expect_cli "pretrain: --max-steps 0" "^--max-steps: 0 is outside \[1, 1e\+12\]" -- "$B" pretrain $PRE --max-steps 0 --input-dir "$W/long" --output-dir "$W/o_steps"

# ---- shards with a dataset missing, of the wrong type, or of another row count
for v in "missing:missing dataset 'masked_lm_ids'" "dtype:dataset 'input_ids' is not an integer dataset" \
         "ragged:dataset 'segment_ids' has shape \\[35,16\\], inconsistent with input_ids \\[40,16\\]"; do
  k=${v%%:*}; rm -rf "$W/h5$k"; mkdir -p "$W/h5$k"
  $PY - "$W/h5$k/part-0.h5" "$k" <<'PYEOF'
import sys, h5py, numpy as np
path, v = sys.argv[1], sys.argv[2]
N, S, P = 40, 16, 3
rng = np.random.default_rng(1)
d = {"input_ids": rng.integers(5, 100, (N, S)).astype(np.int32), "input_mask": np.ones((N, S), np.int8),
     "segment_ids": np.zeros((N, S), np.int8), "masked_lm_positions": np.tile(np.array([1, 2, 3], np.int32), (N, 1)),
     "masked_lm_ids": rng.integers(5, 100, (N, P)).astype(np.int32), "next_sentence_labels": np.zeros(N, np.int8)}
if v == "missing": del d["masked_lm_ids"]
if v == "dtype": d["input_ids"] = d["input_ids"].astype(np.float32) + 0.5
if v == "ragged": d["segment_ids"] = d["segment_ids"][:N - 5]
with h5py.File(path, "w") as f:
    for k, x in d.items(): f.create_dataset(k, data=x)
PYEOF
  expect "pretrain: a shard with ${k} datasets" "h5$k/part-0.h5: ${v#*:}" \
    -- "$B" pretrain $PRE --max-steps 4 --input-dir "$W/h5$k" --output-dir "$W/o_h5$k"
done

# ---- task files and JSON lines on stdin
FT="--init-checkpoint $W/model_init --max-seq-length 16 --max-steps 1 --threads 1 --mode train"
printf 'label\ttext\n0\tw5 w6\n1\n0\tw7 w8\n' > "$W/rag.tsv"
expect "classify TSV: a ragged row" "rag.tsv:3: expected 2 fields \(as line 1\), saw 1" \
  -- "$B" finetune classify $FT --train-file "$W/rag.tsv" --text-columns 1 --output-dir "$W/o_rag"
: > "$W/empty.tsv"
expect "classify TSV: an empty file" "empty.tsv: no examples" \
  -- "$B" finetune classify $FT --train-file "$W/empty.tsv" --text-columns 1 --output-dir "$W/o_empty"
printf '{"data": [' > "$W/sq_bad.json"
expect "SQuAD: malformed JSON" "sq_bad.json: invalid JSON" \
  -- "$B" finetune squad $FT --train-file "$W/sq_bad.json" --doc-stride 4 --output-dir "$W/o_sqbad"
printf '{"version":"1.1","data":[{"title":"t","paragraphs":[{"context":"w5 w6 w7","qas":[{"id":"a","question":"w5?","answers":[{"text":"w9 w9","answer_start":500}]}]}]}]}' > "$W/sq_out.json"
expect "SQuAD: the only answer outside its context" "1 skipped: answer not found in the context" \
  -- "$B" finetune squad $FT --train-file "$W/sq_out.json" --doc-stride 4 --output-dir "$W/o_sqout"
printf 'w5 B-PER\nw6\nw7 O\n\n' > "$W/ner_rag.txt"
expect "CoNLL: a ragged line" "ner_rag.txt:2: expected 2 columns like the first token line, found 1" \
  -- "$B" finetune ner $FT --train-file "$W/ner_rag.txt" --output-dir "$W/o_nerrag"
printf 'w5 X-FOO\nw6 O\n\n' > "$W/ner_tag.txt"
expect "CoNLL: an unknown tag scheme" "ner_tag.txt:1: tag 'X-FOO' is not O or B-/I-/E-/S-TYPE" \
  -- "$B" finetune ner $FT --train-file "$W/ner_tag.txt" --output-dir "$W/o_nertag"
expect "classify, JSON lines on stdin: not JSON" "stdin:1: invalid JSON" \
  -- sh -c 'echo "not json" | "$0" classify --model "$1" --max-seq-length 16' "$B" "$W/cls_model"
expect "classify, JSON lines on stdin: no text field" 'input 1: missing field "text"' \
  -- sh -c 'echo "{\"txt\": 5}" | "$0" classify --model "$1" --max-seq-length 16' "$B" "$W/cls_model"
# an "id" of 100,000 nested arrays (echoed back: nlohmann::json's recursion overflowed the stack, SIGSEGV)
$PY -c "print('{\"text\": \"w5\"}'); print('{\"text\": \"w5\", \"id\": ' + '[' * 100000 + ']' * 100000 + '}')" > "$W/deep.jsonl"
expect "classify, JSON lines on stdin: an id nested 100,000 deep" "stdin:2: JSON nested deeper than 64 levels" \
  -- sh -c '"$0" classify --model "$1" --max-seq-length 16 < "$2"' "$B" "$W/cls_model" "$W/deep.jsonl"

# ---- text encodings (issue 39): UTF-16/32 (a byte-order mark) refused naming the file and the
# encoding (read as bytes before: NULs kept, lines and documents merged, exit 0); a UTF-8 BOM skipped
$PY - "$W/enc" <<'PYEOF'
import os, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
corpus = "w5 w6 w7 w8.\nw9 w10 w11.\n\nw12 w13 w14 w15.\nw16 w17.\n"
for name, enc in [("le", "utf-16-le"), ("be", "utf-16-be"), ("u32", "utf-32-le")]:
    bom = {"le": b"\xff\xfe", "be": b"\xfe\xff", "u32": b"\xff\xfe\x00\x00"}[name]
    open(f"{d}/corpus_{name}.txt", "wb").write(bom + corpus.encode(enc))
    open(f"{d}/cls_{name}.tsv", "wb").write(bom + "label\ttext\n0\tw5 w6\n1\tw7 w8\n".encode(enc))
open(f"{d}/corpus.txt", "w").write(corpus)
open(f"{d}/corpus_bom.txt", "wb").write(b"\xef\xbb\xbf" + corpus.encode())
open(f"{d}/ner_le.txt", "wb").write(b"\xff\xfe" + "w5 B-PER\nw6 O\n\n".encode("utf-16-le"))
open(f"{d}/sq_le.json", "wb").write(b"\xff\xfe" + '{"version": "1.1", "data": []}'.encode("utf-16-le"))
PYEOF
expect "tokenize: a UTF-16LE file" "enc/corpus_le.txt: the text is UTF-16LE \(it starts with the byte-order mark FF FE\); bertcc reads UTF-8: convert it first, e.g. iconv -f UTF-16" \
  -- "$B" tokenize --vocab "$W/vocab.txt" --input "$W/enc/corpus_le.txt"
expect "tokenize: UTF-16BE on stdin" "<stdin>: the text is UTF-16BE \(it starts with the byte-order mark FE FF\)" \
  -- sh -c '"$0" tokenize --vocab "$1" < "$2"' "$B" "$W/vocab.txt" "$W/enc/corpus_be.txt"
expect "create-pretraining-data: a UTF-16LE corpus" "enc/corpus_le.txt: the text is UTF-16LE" \
  -- "$B" create-pretraining-data --input "$W/enc/corpus_le.txt" --output "$W/enc/o_le.h5" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 1
[ ! -e "$W/enc/o_le.h5" ] || fail "a refused UTF-16 corpus left $W/enc/o_le.h5"
expect "create-pretraining-data: a UTF-32LE corpus" "enc/corpus_u32.txt: the text is UTF-32LE \(it starts with the byte-order mark FF FE 00 00\)" \
  -- "$B" create-pretraining-data --input "$W/enc/corpus_u32.txt" --output "$W/enc/o_u32.h5" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 1
expect "train-vocab: a UTF-16LE corpus" "enc/corpus_le.txt: the text is UTF-16LE" \
  -- "$B" train-vocab --input "$W/enc/corpus_le.txt" --output "$W/enc/o_vocab.txt" --vocab-size 120
expect "prep-corpus: a UTF-16BE text file" "enc/corpus_be.txt: the text is UTF-16BE" \
  -- "$B" prep-corpus --input "$W/enc/corpus_be.txt" --output "$W/enc/o_prep"
expect "finetune classify: a UTF-16LE TSV" "enc/cls_le.tsv: the text is UTF-16LE" \
  -- "$B" finetune classify $FT --train-file "$W/enc/cls_le.tsv" --text-columns 1 --output-dir "$W/enc/o_cls"
expect "finetune ner: a UTF-16LE CoNLL file" "enc/ner_le.txt: the text is UTF-16LE" \
  -- "$B" finetune ner $FT --train-file "$W/enc/ner_le.txt" --output-dir "$W/enc/o_ner"
expect "finetune squad: a UTF-16LE JSON file" "enc/sq_le.json: the text is UTF-16LE" \
  -- "$B" finetune squad $FT --train-file "$W/enc/sq_le.json" --doc-stride 4 --output-dir "$W/enc/o_sq"
mkst v16; $PY -c "import sys; t=open(sys.argv[1]).read(); open(sys.argv[2],'wb').write(b'\xff\xfe'+t.encode('utf-16-le'))" \
  "$W/model_init/vocab.txt" "$W/md/v16/vocab.txt"
expect "vocab.txt: UTF-16LE" "v16/vocab.txt: the text is UTF-16LE" -- "$B" embed --model "$W/md/v16" --text "w5 w6"
# a UTF-8 BOM is skipped: the same shards and tokens as without it
n=$((n + 1))
"$B" create-pretraining-data --input "$W/enc/corpus.txt" --output "$W/enc/plain.h5" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 2 > /dev/null 2>&1
"$B" create-pretraining-data --input "$W/enc/corpus_bom.txt" --output "$W/enc/bom.h5" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 2 > /dev/null 2> "$W/err.txt"; rc=$?
same_h5() {  # same_h5 A B: the same datasets (HDF5 files hold write times, so not cmp)
  $PY -c "import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
sys.exit(not (sorted(a) == sorted(b) and all(np.array_equal(a[k][()], b[k][()]) for k in a)))" "$1" "$2"
}
[ $rc -eq 0 ] && [ ! -s "$W/err.txt" ] && same_h5 "$W/enc/plain.h5" "$W/enc/bom.h5" && echo "ok   create-pretraining-data: a UTF-8 BOM is skipped silently (identical shard)" \
  || fail "create-pretraining-data with a UTF-8 BOM: exit $rc, shards differ or: $(tail -2 "$W/err.txt")"
mkst vbom; { printf '\357\273\277'; cat "$W/model_init/vocab.txt"; } > "$W/md/vbom/vocab.txt"
n=$((n + 1))
a=$(printf '\357\273\277[PAD] w5 w6\n' | "$B" tokenize --vocab "$W/md/vbom/vocab.txt" --tokens 2>&1); b=$(echo "[PAD] w5 w6" | "$B" tokenize --vocab "$W/model_init/vocab.txt" --tokens 2>&1)
[ "$a" = "$b" ] && [ "$(echo "[PAD]" | "$B" tokenize --vocab "$W/md/vbom/vocab.txt")" = "$(echo "[PAD]" | "$B" tokenize --vocab "$W/model_init/vocab.txt")" ] \
  && echo "ok   tokenize: a UTF-8 BOM on stdin and in vocab.txt is skipped ($a)" || fail "UTF-8 BOM: '$a' vs '$b'"
# a corpus line of 3 million words: create-pretraining-data used to drop the tokens of an overlong
# segment one at a time from the front of a vector, quadratic in the line's length (a line of 400k
# words took 4 s, one of 45 MB did not finish in 120 s; 3 million words would take over an hour).
# The truncation is linear now (the same random draws, the same output): seconds, so 60 s is a
# generous bound even on a slow shared 2-core machine, and the old code cannot meet it.
$PY -c "import sys; sys.stdout.write(' '.join('w%d' % (5 + i * 7 % 95) for i in range(3000000)) + '\n\nw5 w6 w7 w8.\nw9 w10 w11.\n')" > "$W/longline.txt"
n=$((n + 1))
t0=$(date +%s)
timeout 60 "$B" create-pretraining-data --input "$W/longline.txt" --output "$W/longline.h5" --vocab "$W/vocab.txt" --max-seq-length 16 \
  --dupe-factor 2 > /dev/null 2> "$W/err.txt"; rc=$?
[ $rc -eq 0 ] && [ -s "$W/longline.h5" ] && echo "ok   create-pretraining-data: a line of 3 million words in $(( $(date +%s) - t0 )) s (limit 60 s)" \
  || fail "create-pretraining-data on a line of 3 million words: exit $rc after $(( $(date +%s) - t0 )) s (124: over 60 s): $(tail -2 "$W/err.txt")"
rm -f "$W/longline.txt" "$W/longline.h5"
# --text "" (an empty variable) read stdin instead; a folder on stdin read nothing, exit 0
for c in classify tag embed fill-mask; do
  expect "$c --text ''" "--text is empty: give the text, or leave --text out to read JSON lines from stdin" \
    -- sh -c 'echo "{\"text\": \"w5\"}" | "$0" "$1" --model "$2" --max-seq-length 16 --text ""' "$B" "$c" "$W/cls_model"
done
expect "qa --question ''" "--question is empty" -- sh -c '"$0" qa --model "$1" --question "" --context "w5 w6" < /dev/null' "$B" "$W/qa_model"
expect "classify < a folder" "<stdin>: is a folder" -- sh -c '"$0" classify --model "$1" --max-seq-length 16 < "$2"' "$B" "$W/cls_model" "$W/enc"
expect "tokenize < a folder" "<stdin>: is a folder" -- sh -c '"$0" tokenize --vocab "$1" < "$2"' "$B" "$W/vocab.txt" "$W/enc"
expect "tokenize --input a folder" "enc: is a folder, not a file" -- "$B" tokenize --vocab "$W/vocab.txt" --input "$W/enc"
expect "embed --vocab a folder" "enc: is a folder, not a file" -- "$B" embed --model "$W/model_init" --vocab "$W/enc" --text "w5"

# ---- an output that is an input: refused before anything is written (the input was destroyed, exit 0)
mkdir -p "$W/io/corpus"
i=0; while [ $i -lt 60 ]; do echo "w$((i % 90 + 5)) w$((i % 7 + 5)) w$((i % 11 + 5)) w$((i % 13 + 5))"; [ $((i % 6)) -eq 5 ] && echo; i=$((i + 1)); done > "$W/io/corpus/a.txt"
cp "$W/io/corpus/a.txt" "$W/io/corpus.txt"; ln -sf corpus.txt "$W/io/link.txt"
cp -r "$W/model_init" "$W/io/model"
sums() { find "$W/io" -type f | sort | xargs md5sum | md5sum; }
before=$(sums)
expect "create-pretraining-data: --output the corpus file" "--output .*io/corpus.txt is the input --input .*io/corpus.txt; writing it would destroy the input" \
  -- "$B" create-pretraining-data --input "$W/io/corpus.txt" --output "$W/io/corpus.txt" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 1
expect "create-pretraining-data: --output a symbolic link to the corpus" "--output .*io/link.txt is the input --input .*io/corpus.txt" \
  -- "$B" create-pretraining-data --input "$W/io/corpus.txt" --output "$W/io/link.txt" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 1
expect "create-pretraining-data: --output the corpus folder" "--output .*io/corpus is the input --input .*io/corpus;" \
  -- "$B" create-pretraining-data --input "$W/io/corpus" --output "$W/io/corpus" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 1
expect "create-pretraining-data: --output inside the corpus folder" "--output .*io/corpus/h5 lies inside the input folder --input .*io/corpus" \
  -- "$B" create-pretraining-data --input "$W/io/corpus" --output "$W/io/corpus/h5" --vocab "$W/vocab.txt" --max-seq-length 16 --dupe-factor 1
expect "train-vocab: --output the corpus file" "--output .*io/corpus.txt is the input --input .*io/corpus.txt" \
  -- "$B" train-vocab --input "$W/io/corpus.txt" --output "$W/io/corpus.txt" --vocab-size 120
expect "train-vocab: --output inside an input folder" "--output .*io/corpus/vocab.txt lies inside the input folder --input .*io/corpus" \
  -- "$B" train-vocab --input "$W/io/corpus.txt,$W/io/corpus" --output "$W/io/corpus/vocab.txt" --vocab-size 120
expect "finetune: --output-dir the --init-checkpoint" "--output-dir .*io/model/ is the input --model .*io/model" \
  -- "$B" finetune classify --init-checkpoint "$W/io/model" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
     --max-steps 1 --output-dir "$W/io/model/" --threads 1 --mode train
expect "pretrain: --output-dir the --init-checkpoint" "--output-dir .*io/model is the input --model .*io/model" \
  -- "$B" pretrain --init-checkpoint "$W/io/model" --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/io/model" \
     --train-batch-size 8 --max-steps 1 --threads 1
expect "convert: --out the checkpoint" "--output-dir .*io/corpus.txt is the input checkpoint .*io/corpus.txt" \
  -- "$B" convert --from pt "$W/io/corpus.txt" --config "$W/model/config.json" --out "$W/io/corpus.txt"
[ "$(sums)" = "$before" ] && echo "ok   ... and every input is untouched" || fail "a refused output changed an input"

# ---- serve: a second server on a port in use fails at start-up (SO_REUSEPORT let it share the port)
if "$B" serve --help > /dev/null 2>&1; then
  rm -f "$W/serve1.out"
  "$B" serve --port 0 --model "$W/cls_model" --threads 1 --max-seq-length 16 > "$W/serve1.out" 2> "$W/serve1.err" &
  spid=$!
  k=0; while [ $k -lt 600 ] && ! grep -q "listening on" "$W/serve1.out" 2>/dev/null; do sleep 0.1; k=$((k + 1)); done
  port=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$W/serve1.out")
  if [ -n "$port" ]; then
    expect "serve: a second server on port $port (in use)" "serve: cannot bind 127.0.0.1:$port: address already in use" \
      -- timeout 30 "$B" serve --port "$port" --model "$W/cls_model" --threads 1 --max-seq-length 16
  else
    fail "serve: the first server did not start: $(tail -2 "$W/serve1.err")"
  fi
  kill "$spid" 2> /dev/null; wait "$spid" 2> /dev/null
fi

# ---- command line and output
expect_cli "--threads -1" "--threads: -1 is outside 0 \(all cores\)" -- "$B" tokenize --vocab "$W/vocab.txt" --threads -1
expect_cli "finetune --train-batch-size 0" "--train-batch-size: 0 is outside \[1, 1048576\]" -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --train-batch-size 0
expect_cli "--max-seq-length -1" "--max-seq-length: -1 is outside \[0, 1048576\]" -- "$B" embed --model "$W/model_init" --text "w5" --max-seq-length -1
expect_cli "--threads 10000" "--threads: 10000 is outside 0 \(all cores\) to [0-9]+" -- "$B" tokenize --vocab "$W/vocab.txt" --threads 10000
# whole numbers beyond 64 bits or not whole (CLI11 saturated 99999999999999999999 to 2^63-1 silently)
for v in 1e20 99999999999999999999 -99999999999999999999 2.5; do
  expect_cli "pretrain --max-steps $v" "--max-steps: ('$v' is (not a whole number|beyond a 64-bit integer)|$v is outside)" \
    -- "$B" pretrain --config "$W/model/config.json" --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/o_hp" --max-steps "$v"
  expect_cli "finetune --max-steps $v" "--max-steps: ('$v' is (not a whole number|beyond a 64-bit integer)|$v is outside)" \
    -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --output-dir "$W/o_hp" --max-steps "$v"
done
[ ! -e "$W/o_hp" ] || fail "a refused --max-steps created $W/o_hp"
n=$((n + 1))
echo "w5 w6" | "$B" tokenize --vocab "$W/vocab.txt" > /dev/full 2> "$W/err.txt"; rc=$?
[ $rc -eq 1 ] && grep -q "writing to standard output failed" "$W/err.txt" && echo "ok   stdout on a full device: $(cat "$W/err.txt")" \
  || fail "stdout on a full device: exit $rc: $(cat "$W/err.txt")"

# ---- a newcomer's first hour (issue 43): pretrain's safe defaults, CSV/JSON lines as people have them,
# errors that say what to do
expect "pretrain: no --config" "--config is required: a named config \(bert-tiny, bert-mini, .*electra-large\) or a config.json" \
  -- "$B" pretrain --vocab "$W/vocab.txt" --input-dir "$W/good" --output-dir "$W/o_nocfg" --max-steps 1 --threads 1
expect "pretrain: no --vocab" "--vocab is required: the vocab.txt the shards were made with" \
  -- "$B" pretrain --config "$W/model/config.json" --input-dir "$W/good" --output-dir "$W/o_novocab" --max-steps 1 --threads 1
head -n 50 "$W/vocab.txt" > "$W/vocab50.txt"
expect "pretrain: shards made with a larger vocabulary" \
  "good/a.h5: input_ids holds token id 9[0-9] \(row [0-9]+\) but the vocabulary \(.*vocab50.txt\) has 50 entries" \
  -- "$B" pretrain --config "$W/model/config.json" --vocab "$W/vocab50.txt" --input-dir "$W/good" --output-dir "$W/o_v50" \
     --max-steps 1 --threads 1
# resuming needs neither: the checkpoint's config.json and vocab.txt; every model directory has vocab.txt
rm -rf "$W/run_nocfg"; cp -r "$W/run" "$W/run_nocfg"
n=$((n + 1))
"$B" pretrain --input-dir "$W/good" --output-dir "$W/run_nocfg" --resume-from-checkpoint --max-steps 8 --train-batch-size 8 \
  --num-steps-per-checkpoint 2 --keep-checkpoints 1 --precision fp32 --threads 1 > "$W/out.txt" 2> "$W/err.txt"; rc=$?
[ $rc -eq 0 ] && grep -q "resuming from .*step_6" "$W/err.txt" && cmp -s "$W/run_nocfg/model/vocab.txt" "$W/vocab.txt" \
  && [ -s "$W/run_nocfg/model/tokenizer_config.json" ] && [ -s "$W/run_nocfg/checkpoints/step_8/vocab.txt" ] \
  && [ ! -e "$W/run_nocfg/checkpoints/step_6" ] \
  && echo "ok   pretrain --resume-from-checkpoint without --config/--vocab: the checkpoint's, vocab.txt in model/ and checkpoints/" \
  || fail "resume without --config/--vocab: exit $rc: $(tail -2 "$W/err.txt")"
expect "init-model: no --vocab" "init-model: --vocab is required" -- "$B" init-model --config "$W/model/config.json" --output "$W/o_initnv"
[ ! -e "$W/o_initnv" ] || fail "init-model without --vocab wrote $W/o_initnv"

# CSV with a header as Hugging Face writes it: columns by name or number, the header detected,
# string labels in config.json; JSON lines by key. The same data gives the same model bytes.
i=0; printf 'sentence,label\n' > "$W/hf.csv"; : > "$W/hf.jsonl"
while [ $i -lt 30 ]; do
  if [ $((i % 2)) -eq 0 ]; then l=positive; else l=negative; fi
  t="w$((i + 5)) w$((i % 7 + 5)), w$((i % 5 + 9))"
  printf '"%s",%s\n' "$t" "$l" >> "$W/hf.csv"; printf '{"text": "%s", "label": "%s", "id": %d}\n' "$t" "$l" $i >> "$W/hf.jsonl"
  i=$((i + 1))
done
sed -i '2s/^"w5/"it '"'"'s a charming w5/' "$W/hf.csv"; sed -i '1s/"w5/"it '"'"'s a charming w5/' "$W/hf.jsonl"
for c in "names:--label-column label --text-columns sentence" "numbers, --skip-header:--skip-header --label-column 1 --text-columns 0" \
         "numbers, header detected:--label-column 1 --text-column 0"; do
  n=$((n + 1)); d="$W/o_csv_$(echo "${c%%:*}" | tr -dc a-z)"; rm -rf "$d"
  # shellcheck disable=SC2086
  "$B" finetune classify $FT --train-file "$W/hf.csv" ${c#*:} --output-dir "$d" > /dev/null 2> "$W/err.txt"; rc=$?
  [ $rc -eq 0 ] && grep -q '"label2id": {' "$d/config.json" && grep -q '"negative": 0' "$d/config.json" \
    && cmp -s "$d/model.safetensors" "$W/o_csv_names/model.safetensors" && [ -s "$d/vocab.txt" ] \
    && echo "ok   classify CSV with a header, columns by ${c%%:*}: labels negative/positive in config.json, the same model" \
    || fail "classify CSV ${c%%:*}: exit $rc: $(tail -2 "$W/err.txt")"
done
grep -q "hf.csv:1: the first row (the file's columns: sentence,label) is read as a header" "$W/err.txt" \
  && echo "ok   ... the detected header is said" || fail "detected header not said: $(tail -2 "$W/err.txt")"
n=$((n + 1)); rm -rf "$W/o_jsonl"
"$B" finetune classify $FT --train-file "$W/hf.jsonl" --text-column text --label-column label --output-dir "$W/o_jsonl" > /dev/null 2> "$W/err.txt"; rc=$?
[ $rc -eq 0 ] && cmp -s "$W/o_jsonl/model.safetensors" "$W/o_csv_names/model.safetensors" \
  && echo "ok   classify JSON lines, columns by key: the same model as the CSV" || fail "classify JSON lines: exit $rc: $(tail -2 "$W/err.txt")"
# no column flags on Hugging Face's column names (run_glue's sentence/label): read by name, the same model
n=$((n + 1)); rm -rf "$W/o_csv_default"
"$B" finetune classify $FT --train-file "$W/hf.csv" --output-dir "$W/o_csv_default" > /dev/null 2> "$W/err.txt"; rc=$?
[ $rc -eq 0 ] && cmp -s "$W/o_csv_default/model.safetensors" "$W/o_csv_names/model.safetensors" \
  && grep -q "hf.csv: columns by their names: text sentence, label label" "$W/err.txt" \
  && echo "ok   classify CSV: no column flags on sentence,label reads them by name, said, the same model" \
  || fail "classify CSV with Hugging Face's column names: exit $rc: $(tail -2 "$W/err.txt")"
# names Hugging Face does not know: the default columns (label 0) meet a text column, and the error says the fix
sed '1s/.*/review,rating/' "$W/hf.csv" > "$W/hf_other.csv"
expect "classify CSV: the default columns on review,rating (labels are sentences)" \
  "hf_other.csv: column 0 has 30 distinct labels in 30 examples .*is it a text column\? the file's columns: review,rating" \
  -- "$B" finetune classify $FT --train-file "$W/hf_other.csv" --output-dir "$W/o_csv_other"
[ ! -e "$W/o_csv_other" ] || fail "the refused fine-tune wrote $W/o_csv_other"
expect "classify eval: unknown label, the file's columns and the fix" \
  "unknown label 'it 's a charming w5 w5, w9' in column 0 of .*hf_other.csv line 2 \(the model's labels: negative, positive\); the file's columns: review,rating .* pass --label-column rating" \
  -- "$B" finetune classify --init-checkpoint "$W/o_csv_names" --predict-file "$W/hf_other.csv" --max-seq-length 16 --threads 1 --mode eval
expect "classify CSV: a column name not in the header" \
  "--label-column 'labels' is not a column of the first row, .*the file's first row: sentence,label" \
  -- "$B" finetune classify $FT --train-file "$W/hf.csv" --label-column labels --text-columns sentence --output-dir "$W/o_csv_bad"
expect "classify JSON lines: a key not in the objects" "--text-columns 'sentence' is not a key of its JSON objects; the file's keys: text,label,id" \
  -- "$B" finetune classify $FT --train-file "$W/hf.jsonl" --label-column label --text-columns sentence --output-dir "$W/o_jl_bad"
[ ! -e "$W/o_csv_bad" ] && [ ! -e "$W/o_jl_bad" ] || fail "a refused fine-tune left its new --output-dir behind"

# a model of the wrong kind, a missing directory: what it is, and the command that makes the right one
expect "qa on a classifier" \
  "qa: '.*cls_model' is a BertForSequenceClassification \(config.json's architectures\); qa needs a question-answering model \(BertForQuestionAnswering\): make one with .bertcc finetune squad" \
  -- "$B" qa --model "$W/cls_model" --question "w5" --context "w6 w7"
expect "classify on a pre-training checkpoint" \
  "classify: '.*model_init' is a BertForPreTraining, a pre-training checkpoint \(config.json's architectures\); classify needs a sequence-classification model .*bertcc finetune classify --model .*model_init .*finetune glue" \
  -- "$B" classify --model "$W/model_init" --text "w5"
expect "tag on a classifier" "tag: '.*cls_model' is a BertForSequenceClassification .*tag needs a token-classification model .*bertcc finetune ner" \
  -- "$B" tag --model "$W/cls_model" --text "w5"
expect "fill-mask on a classifier" "fill-mask: '.*cls_model' is a BertForSequenceClassification .*needs a pre-training checkpoint" \
  -- "$B" fill-mask --model "$W/cls_model" --text "w5 [MASK]"
expect "finetune squad --mode eval on a classifier" "'.*cls_model' is a BertForSequenceClassification .*needs a question-answering model .*bertcc finetune squad" \
  -- "$B" finetune squad --init-checkpoint "$W/cls_model" --predict-file "$W/sq_bad.json" --max-seq-length 16 --threads 1 --mode eval
for c in classify qa tag embed; do
  if [ $c = qa ]; then a="--question w5 --context w6"; else a="--text w5"; fi
  # shellcheck disable=SC2086
  expect "$c: a missing model directory" "$c: model directory '.*no_such_model' does not exist" -- "$B" $c --model "$W/no_such_model" $a
done
expect "finetune: a missing --init-checkpoint" "finetune: model directory '.*no_such_model' does not exist" \
  -- "$B" finetune classify --init-checkpoint "$W/no_such_model" --train-file "$W/cls.tsv" --output-dir "$W/o_nomodel" --mode train

# ---- one run per output folder: a second run on a folder a live run holds is refused at once,
# naming the first (PID, host, start time); a lock left by a run that died is taken over
"$B" pretrain $PRE --max-steps 1000000 --input-dir "$W/good" --output-dir "$W/o_lock" > "$W/lock1.log" 2>&1 & lp=$!
i=0; while [ $i -lt 300 ] && ! grep -q "^pid $lp " "$W/o_lock/.bertcc.lock" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
expect "pretrain: a second run on the same --output-dir" \
  "--output-dir .*o_lock: another run is writing to this folder \(pid $lp on $(hostname), started 20[0-9-]+T[0-9:]+Z, bertcc pretrain\)" \
  -- "$B" pretrain $PRE --max-steps 4 --input-dir "$W/good" --output-dir "$W/o_lock"
expect "finetune into a folder a pretrain run holds" "another run is writing to this folder \(pid $lp " \
  -- "$B" finetune classify --init-checkpoint "$W/model_init" --train-file "$W/cls.tsv" --text-columns 1 --max-seq-length 16 \
     --max-steps 1 --output-dir "$W/o_lock" --threads 1 --mode train
mkdir -p "$W/corp"; printf 'w5 w6 w7.\nw8 w9.\n\nw10 w11.\nw12 w13.\n' > "$W/corp/a.txt"
expect "prep-corpus into a folder a pretrain run holds" "another run is writing to this folder \(pid $lp " \
  -- "$B" prep-corpus --input "$W/corp" --output-dir "$W/o_lock" --shards 1 --threads 1
kill -TERM $lp; wait $lp
[ ! -e "$W/o_lock/.bertcc.lock" ] && echo "ok   ... and the first run removed its lock when it ended" || fail "the lock file outlived its run"
[ -z "$(find "$W/o_lock" -name 'part-*')" ] && echo "ok   ... and the refused prep-corpus wrote nothing there" || fail "a refused prep-corpus wrote shards"
mkdir -p "$W/o_stale"; echo "pid 999999 on $(hostname), started 2020-01-01T00:00:00Z, bertcc pretrain" > "$W/o_stale/.bertcc.lock"
n=$((n + 1))
"$B" pretrain $PRE --max-steps 2 --input-dir "$W/good" --output-dir "$W/o_stale" > "$W/out.txt" 2> "$W/err.txt"; rc=$?
[ $rc -eq 0 ] && grep -q "taking over the lock of a run that ended without releasing it (pid 999999" "$W/err.txt" && [ ! -e "$W/o_stale/.bertcc.lock" ] \
  && echo "ok   a stale lock (its process gone) is taken over with a note" || fail "stale lock: exit $rc: $(tail -2 "$W/err.txt")"
fi

echo "bad input, part $PART: $n cases, $fails failed"
exit $fails
