#!/bin/sh
# Bit-exact resume: N steps straight vs N/2-ish steps, kill -9 at a random moment, resume to N:
# the final model.safetensors must be byte-identical. Then a corrupted newest checkpoint must be
# skipped (with a warning) in favour of the previous one, again reaching the identical model.
set -u
BERTCC="$1"; WORK="$2"; PRECISION="${3:-fp32}"; EXTRA="${4:-}"
rm -rf "$WORK"; mkdir -p "$WORK"
. "$(dirname "$0")/common.sh"
use_fixture "$BERTCC" "$WORK"  # shared shards and vocabulary; tiny.json: 2 layers, hidden 64 (tests/fixture.sh)
ARGS="--config $FIX/tiny.json --vocab $FIX/vocab.txt --input-dir $FIX/h5 --train-batch-size 32 --gradient-accumulation-steps 2 --max-steps 16 --learning-rate 1e-3 --warmup-proportion 0.25 --num-steps-per-checkpoint 2 --keep-checkpoints 3 --precision $PRECISION --log-freq 4 --seed 7 $EXTRA"
"$BERTCC" pretrain $ARGS --output-dir "$WORK/straight" > "$WORK/straight.log" 2>&1 || fail "straight run: $(tail -3 "$WORK/straight.log")"
# Interrupted run: kill -9 at a random moment after the step-8 checkpoint appears (within 0-90 ms:
# the tiny model's remaining 8 steps take a few hundred ms).
"$BERTCC" pretrain $ARGS --output-dir "$WORK/resumed" > "$WORK/first.log" 2>&1 &
pid=$!
wait_for_dir "$WORK/resumed/checkpoints/step_8" $pid
sleep "0.0$(od -An -N1 -tu1 /dev/urandom | tr -d ' ' | cut -c1)"
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
[ -f "$WORK/resumed/model/model.safetensors" ] && echo "note: the first run finished before the kill"
"$BERTCC" pretrain $ARGS --output-dir "$WORK/resumed" --resume-from-checkpoint > "$WORK/second.log" 2>&1 || fail "resume: $(tail -3 "$WORK/second.log")"
grep -q "resuming from" "$WORK/second.log" || fail "did not resume: $(cat "$WORK/second.log")"
cmp -s "$WORK/straight/model/model.safetensors" "$WORK/resumed/model/model.safetensors" \
  && echo "ok   resumed run is byte-identical ($(grep -o 'resuming from [^ ]*' "$WORK/second.log"))" \
  || fail "resumed model differs from the uninterrupted one"
# Corrupt the newest checkpoint (step_16): resume must fall back to step_14 and reach the same model.
rm -rf "$WORK/resumed/model"
printf 'garbage' >> "$WORK/resumed/checkpoints/step_16/model.safetensors"
"$BERTCC" pretrain $ARGS --output-dir "$WORK/resumed" --resume-from-checkpoint > "$WORK/third.log" 2>&1 || fail "resume after corruption"
grep -q "skipping checkpoint .*step_16" "$WORK/third.log" || fail "corruption not detected: $(cat "$WORK/third.log")"
grep -q "resuming from .*step_14" "$WORK/third.log" || fail "did not fall back to step_14"
cmp -s "$WORK/straight/model/model.safetensors" "$WORK/resumed/model/model.safetensors" \
  && echo "ok   fallback after a corrupt checkpoint is byte-identical" || fail "model after fallback differs"
# SIGTERM: finish the current step, save a checkpoint, exit 0; resuming reaches the same model.
# Not one SIGTERM but one every 5 ms until the process is gone: however many arrive, and on
# whichever thread, none may disturb the step in flight. (A SIGTERM handler once ran on the thread
# it landed on; inside oneDNN's JIT GEMM, which points rsp into the heap, its frame corrupted the
# heap: 5 of 5 such runs crashed, and about 1 in 16 single-SIGTERM runs.)
"$BERTCC" pretrain $ARGS --output-dir "$WORK/term" > "$WORK/term1.log" 2>&1 &
pid=$!
wait_for_dir "$WORK/term/checkpoints/step_4" $pid
term_until_gone $pid
wait $pid; rc=$?
[ $rc -eq 0 ] || fail "SIGTERM exit code $rc after $sent SIGTERMs: $(tail -2 "$WORK/term1.log")"
if grep -q "stopped by signal after step" "$WORK/term1.log"; then
  grep -q "stopped by signal after step .*(to resume: the same command with --resume-from-checkpoint)" "$WORK/term1.log" \
    || fail "the stop line does not say how to resume: $(grep 'stopped by signal' "$WORK/term1.log")"
else echo "note: the run finished before SIGTERM arrived"; fi
"$BERTCC" pretrain $ARGS --output-dir "$WORK/term" --resume-from-checkpoint > "$WORK/term2.log" 2>&1 || fail "resume after SIGTERM"
cmp -s "$WORK/straight/model/model.safetensors" "$WORK/term/model/model.safetensors" \
  && echo "ok   SIGTERM + resume is byte-identical ($(grep -o 'stopped by signal after step [0-9]*' "$WORK/term1.log"))" \
  || fail "model after SIGTERM + resume differs"
[ "$(ls "$WORK/straight/checkpoints" | wc -l)" = 3 ] || fail "keep-checkpoints: $(ls "$WORK/straight/checkpoints")"
grep -q '"step":\[[0-9]*,16\]' "$WORK/straight/dllogger.json" || fail "dllogger line for step 16 missing"
ev=$(ls "$WORK/straight/tensorboard"/events.out.tfevents.* | head -1)
/usr/bin/python3 "$(dirname "$0")/read_events.py" "$ev" > "$WORK/events.txt" || fail "TensorBoard event file corrupt"
grep -q "^train/loss 16 " "$WORK/events.txt" || fail "TensorBoard: no train/loss at step 16: $(tail -3 "$WORK/events.txt")"
if [ "$PRECISION" = fp16 ]; then  # forced overflow: steps skipped, scale halved and regrown
  grep -q "gradient overflow" "$WORK/straight.log" || fail "fp16: no overflow despite the huge initial scale"
  last=$(grep '"step":\[[0-9]*,16\]' "$WORK/straight/dllogger.json")
  echo "$last" | grep -q '"skipped_steps":[1-9]' || fail "fp16: skipped steps not logged: $last"
  echo "$last" | grep -q '"loss":[0-9]' || fail "fp16: final loss not finite: $last"
  echo "ok   fp16 overflow handling: $(grep -c 'gradient overflow' "$WORK/straight.log") skipped step(s), final $(echo "$last" | grep -o '"loss_scale":[0-9.e+]*')"
fi
[ $fails -eq 0 ] && echo "resume ($PRECISION): all checks passed"
exit $fails
