#!/bin/sh
# Phase 1 (seq 64) then phase 2 (seq 128, more predictions) from phase 1's last checkpoint, as
# NVIDIA runs them: global step names continue from --phase1-end-step, the schedule restarts
# (warm-up from 0), and a phase-2 run interrupted with kill -9 resumes to the identical model.
set -u
BERTCC="$1"; WORK="$2"
rm -rf "$WORK"; mkdir -p "$WORK"
. "$(dirname "$0")/common.sh"
use_fixture "$BERTCC" "$WORK"  # shared corpus, vocabulary and seq-64 shards; tiny.json (tests/fixture.sh)
ln -s "$FIX/h5" "$WORK/h5_64"
"$BERTCC" create-pretraining-data --input "$FIX/corpus/train" --output "$WORK/h5_128" --vocab "$FIX/vocab.txt" --max-seq-length 128 --max-predictions-per-seq 20 --dupe-factor 3 > /dev/null || fail data128
COMMON="--config $FIX/tiny.json --vocab $FIX/vocab.txt --train-batch-size 16 --learning-rate 1e-3 --num-steps-per-checkpoint 2 --keep-checkpoints 10 --log-freq 1 --seed 3 --precision fp32"
"$BERTCC" pretrain $COMMON --input-dir "$WORK/h5_64" --max-steps 6 --warmup-proportion 0.5 --output-dir "$WORK/a" > "$WORK/p1.log" 2>&1 || fail "phase 1: $(tail -2 "$WORK/p1.log")"
cp -r "$WORK/a" "$WORK/b"
P2="$COMMON --input-dir $WORK/h5_128 --max-steps 6 --warmup-proportion 0.5 --phase2 --phase1-end-step 6 --resume-from-checkpoint"
"$BERTCC" pretrain $P2 --output-dir "$WORK/a" > "$WORK/p2a.log" 2>&1 || fail "phase 2: $(tail -2 "$WORK/p2a.log")"
grep -q "phase 2 starts after phase-1 step 6" "$WORK/p2a.log" || fail "phase 2 did not start from step 6: $(head -5 "$WORK/p2a.log")"
for s in 8 10 12; do [ -d "$WORK/a/checkpoints/step_$s" ] || fail "missing phase-2 checkpoint step_$s"; done
grep '"step":\[[0-9]*,7\]' "$WORK/a/dllogger.json" | grep -q '"learning_rate":0\.0[,}]' || fail "phase-2 schedule did not restart at lr 0: $(grep '"step":\[[0-9]*,7\]' "$WORK/a/dllogger.json")"
grep -q '"phase": *2' "$WORK/a/checkpoints/step_12/trainer_state.json" || fail "checkpoint not marked phase 2"
# Interrupted phase 2: kill -9 after step_8, then resume inside phase 2.
"$BERTCC" pretrain $P2 --output-dir "$WORK/b" > "$WORK/p2b.log" 2>&1 &
pid=$!
# wait for step_8 while the run lives (no fixed time limit: a loaded machine can take minutes)
wait_for_dir "$WORK/b/checkpoints/step_8" $pid
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
[ -d "$WORK/b/checkpoints/step_8" ] || fail "the interrupted phase-2 run wrote no step_8: $(tail -2 "$WORK/p2b.log")"
"$BERTCC" pretrain $P2 --output-dir "$WORK/b" > "$WORK/p2c.log" 2>&1 || fail "phase-2 resume: $(tail -2 "$WORK/p2c.log")"
grep -q "phase 2, step" "$WORK/p2c.log" || fail "did not resume a phase-2 checkpoint: $(head -3 "$WORK/p2c.log")"
cmp -s "$WORK/a/model/model.safetensors" "$WORK/b/model/model.safetensors" && echo "ok   phase 2 with kill -9 + resume is byte-identical" || fail "phase-2 resume differs"
"$BERTCC" pretrain $COMMON --input-dir "$WORK/h5_64" --max-steps 6 --resume-from-checkpoint --output-dir "$WORK/a" > "$WORK/p3.log" 2>&1 && fail "phase-2 checkpoint resumed without --phase2"
grep -q "add --phase2" "$WORK/p3.log" || fail "message for a missing --phase2: $(tail -2 "$WORK/p3.log")"
[ $fails -eq 0 ] && echo "phase 2: all checks passed"
exit $fails
