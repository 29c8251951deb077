#!/bin/sh
# The NCCL device communicator on the GPU machine, without mpirun: one process with
# --allreduce-backend nccl (NCCL set up for one rank, the gradients reduced GPU to GPU after
# accumulation, in buckets started during backward) must give the bits of the same run without it,
# with small buckets and without overlap too; with a bf16 or fp16 wire it must
# run and stay within the rounding's reach of it. (Two ranks sharing one GPU go through the host: NCCL refuses a GPU per two ranks.)
# Exit 0 when both hold, 77 without a GPU or without NCCL in this build, 1 otherwise.
#   tests/cuda/nccl.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"
. "$(dirname "$0")/../train/common.sh"
rm -rf "$W"; mkdir -p "$W"
"$B" bench train --config bert-tiny --batch 1 --seq 8 --steps 1 --device cuda > /dev/null 2>&1 || { echo "SKIPPED: no usable CUDA device"; exit 77; }
make_corpus "$B" "$W"
"$B" create-pretraining-data --input "$W/corpus/train" --output "$W/h5" --vocab "$W/vocab.txt" --max-seq-length 64 \
  --max-predictions-per-seq 10 --dupe-factor 3 > /dev/null || fail data
PT="--config bert-mini --vocab $W/vocab.txt --input-dir $W/h5 --learning-rate 1e-3 --warmup-proportion 0.25 --log-freq 1 \
--seed 7 --max-steps 6 --train-batch-size 16 --gradient-accumulation-steps 2 --precision bf16 --device cuda"
"$B" pretrain $PT --output-dir "$W/plain" > "$W/plain.log" 2>&1 || fail "cuda run: $(tail -3 "$W/plain.log")"
"$B" pretrain $PT --allreduce-backend nccl --output-dir "$W/nccl" > "$W/nccl.log" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "built without NCCL" "$W/nccl.log"; then echo "SKIPPED: $(grep -m1 NCCL "$W/nccl.log")"; exit 77; fi
[ $rc -eq 0 ] || fail "nccl run: $(tail -3 "$W/nccl.log")"
grep -q "GPU to GPU by nccl" "$W/nccl.log" || fail "the nccl run does not say it reduces through NCCL: $(head -5 "$W/nccl.log")"
cmp -s "$W/plain/model/model.safetensors" "$W/nccl/model/model.safetensors" \
  && echo "ok   NCCL at world size 1: the model is byte-identical to the run without it" || fail "NCCL at world size 1 changed the model"
# The buckets go on NCCL's own stream during the last micro-batch's backward (each after an event
# on the default stream), joined before the optimizer: small buckets (one started at nearly every
# layer) and no overlap must give the same bytes.
grep -q "GPU to GPU by nccl, in buckets of 25 MB started during backward" "$W/nccl.log" \
  || fail "the nccl run does not say it reduces buckets during backward: $(grep reduced "$W/nccl.log")"
for v in "--bucket-cap-mb 0.25" "--no-allreduce-overlap"; do
  tag=$(echo "$v" | tr -cd 'a-z0-9')
  "$B" pretrain $PT --allreduce-backend nccl $v --output-dir "$W/nccl_$tag" > "$W/nccl_$tag.log" 2>&1 \
    || { fail "nccl $v: $(tail -3 "$W/nccl_$tag.log")"; continue; }
  cmp -s "$W/plain/model/model.safetensors" "$W/nccl_$tag/model/model.safetensors" \
    && echo "ok   NCCL at world size 1 $v: the model is byte-identical to the run without NCCL" || fail "NCCL $v changed the model"
done
grep -q "started during backward" "$W/nccl_noallreduceoverlap.log" && fail "--no-allreduce-overlap still says it overlaps"
# 16-bit gradients on the wire (rounded on the GPU, summed by NCCL in that format, widened): at
# world size 1 the sum is the rounding itself, so the run differs from the fp32 one by bf16/fp16
# gradient rounding only: it must say so and end within 2 % of its loss.
for wd in bf16 fp16; do
  "$B" pretrain $PT --allreduce-backend nccl --allreduce-dtype $wd --output-dir "$W/nccl_$wd" > "$W/nccl_$wd.log" 2>&1 \
    || { fail "nccl with a $wd wire: $(tail -3 "$W/nccl_$wd.log")"; continue; }
  grep -q "GPU to GPU by nccl, $wd on the wire" "$W/nccl_$wd.log" || fail "the $wd-wire run does not say so: $(head -5 "$W/nccl_$wd.log")"
  a=$(grep -o 'step 6/6 loss [0-9.]*' "$W/plain.log" | tail -1 | awk '{print $4}')
  b=$(grep -o 'step 6/6 loss [0-9.]*' "$W/nccl_$wd.log" | tail -1 | awk '{print $4}')
  awk -v a="$a" -v b="$b" 'BEGIN { d = (a > b ? a - b : b - a) / a; exit !(a != "" && b != "" && d < 0.02) }' \
    && echo "ok   NCCL with a $wd wire: final loss $b against $a in fp32" || fail "NCCL $wd wire: final loss $b against $a"
done
[ $fails -eq 0 ] && echo "PASS nccl" || { echo "$fails failure(s)"; exit 1; }
