#!/bin/sh
# Faults a long run meets: the disk filling up. A file-size limit (bash's ulimit -f, KiB) stands in
# for a full disk (writes fail with EFBIG as they would with ENOSPC), for:
#   * pre-training saving a checkpoint: exit non-zero with a message naming the file; the last good
#     checkpoint untouched; resuming from it without the limit reaches the model of an
#     uninterrupted run, byte for byte;
#   * create-pretraining-data and prep-corpus writing their outputs: exit non-zero naming the file,
#     no output file left under its final name.
#   tests/faults.sh BERTCC WORKDIR
set -u
BERTCC="$1"; WORK="$2"
rm -rf "$WORK"; mkdir -p "$WORK"
. "$(dirname "$0")/train/common.sh"
make_corpus "$BERTCC" "$WORK"
"$BERTCC" create-pretraining-data --input "$WORK/corpus/train" --output "$WORK/h5" --vocab "$WORK/vocab.txt" \
  --max-seq-length 64 --max-predictions-per-seq 10 --dupe-factor 2 > /dev/null || fail data
limited() {  # limited KIB CMD...: CMD under a file-size limit of KIB KiB
  kib=$1; shift
  bash -c 'ulimit -f "$0"; exec "$@"' "$kib" "$@"
}

# ---- checkpoint save on a full disk ----
ARGS="--config bert-mini --vocab $WORK/vocab.txt --input-dir $WORK/h5 --train-batch-size 16 --learning-rate 1e-3 \
--warmup-proportion 0.25 --num-steps-per-checkpoint 2 --keep-checkpoints 5 --precision fp32 --log-freq 1 --seed 3"
"$BERTCC" pretrain $ARGS --max-steps 6 --output-dir "$WORK/straight" > "$WORK/straight.log" 2>&1 || fail "straight run"
"$BERTCC" pretrain $ARGS --max-steps 6 --output-dir "$WORK/full" > /dev/null 2>&1 &
pid=$!
wait_for_dir "$WORK/full/checkpoints/step_2" $pid
kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null   # stop after a checkpoint (a stop checkpoint may follow)
last=$(ls -d "$WORK"/full/checkpoints/step_* | sort -t_ -k2 -n | tail -1)
before=$(cd "$last" && cat * | cksum)
# The model is ~20 MB: a 4 MiB limit lets the run resume and train, and makes the next save fail.
limited 4096 "$BERTCC" pretrain $ARGS --max-steps 6 --output-dir "$WORK/full" --resume-from-checkpoint > "$WORK/full.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "checkpoint save on a full disk: exit 0"
grep -q "File too large" "$WORK/full.log" && grep -q "safetensors" "$WORK/full.log" \
  && echo "ok   checkpoint save on a full disk: exit $rc, $(grep -o 'error: .*' "$WORK/full.log" | head -1 | cut -c1-150)" \
  || fail "checkpoint save on a full disk: no message naming the file: $(tail -3 "$WORK/full.log")"
after=$(cd "$last" && cat * | cksum)
[ "$before" = "$after" ] && echo "ok   last good checkpoint $(basename "$last") untouched" || fail "$(basename "$last") changed"
"$BERTCC" pretrain $ARGS --max-steps 6 --output-dir "$WORK/full" --resume-from-checkpoint > "$WORK/resume.log" 2>&1 \
  || fail "resume after the full disk: $(tail -3 "$WORK/resume.log")"
cmp -s "$WORK/straight/model/model.safetensors" "$WORK/full/model/model.safetensors" \
  && echo "ok   resumed after the full disk: model byte-identical to the uninterrupted run" \
  || fail "model after the full disk differs from the uninterrupted run"
left=$(find "$WORK/full" -name '*.tmp*' | head -3)
[ -z "$left" ] && echo "ok   no temporary files left" || fail "temporary files left: $left"

# ---- create-pretraining-data and prep-corpus on a full disk ----
limited 8 "$BERTCC" create-pretraining-data --input "$WORK/corpus/train" --output "$WORK/h5full" --vocab "$WORK/vocab.txt" \
  --max-seq-length 64 --max-predictions-per-seq 10 --dupe-factor 2 > "$WORK/cpd.log" 2>&1
rc=$?
finals=$(find "$WORK/h5full" -name '*.h5' 2>/dev/null | head -3)
[ $rc -ne 0 ] && grep -q "h5full" "$WORK/cpd.log" && [ -z "$finals" ] \
  && echo "ok   create-pretraining-data on a full disk: exit $rc, $(grep -o 'error: .*' "$WORK/cpd.log" | head -1 | cut -c1-150)" \
  || fail "create-pretraining-data on a full disk: exit $rc, outputs '$finals', $(tail -2 "$WORK/cpd.log")"
limited 1 "$BERTCC" prep-corpus --input "$WORK/text" --output "$WORK/corpusfull" --shards 2 > "$WORK/prep.log" 2>&1
rc=$?
finals=$(find "$WORK/corpusfull" -type f ! -name '*.tmp*' 2>/dev/null | head -3)
[ $rc -ne 0 ] && grep -q "corpusfull" "$WORK/prep.log" && [ -z "$finals" ] \
  && echo "ok   prep-corpus on a full disk: exit $rc, $(grep -o 'error: .*' "$WORK/prep.log" | head -1 | cut -c1-150)" \
  || fail "prep-corpus on a full disk: exit $rc, outputs '$finals', $(tail -2 "$WORK/prep.log")"
exit $fails
