#!/bin/sh
# The device code paths without a GPU: `--device cpu-staged` runs the model, its gradients, the
# optimizer and its moments behind the backend's device interface (own allocations, every buffer
# argument checked to be one of them, weights and moments reaching the host only through
# downloads), with the CPU kernels. So each result must equal --device cpu bit for bit:
#  - pretrain (LAMB, fp32 / bf16 / fp16 with dynamic loss scaling, gradient accumulation on the
#    device, held-out evaluation): models, checkpointed moments and every logged loss;
#  - AdamW;
#  - checkpoints move between devices: a staged run's step-4 checkpoint resumed on the CPU and a
#    CPU checkpoint resumed staged reach the uninterrupted model byte for byte;
#  - 2 MPI ranks on the device (gradients accumulated and reduced through the host) = 1 CPU rank x 2;
#  - dump-step (pre-training and generator heads): losses and every gradient;
#  - refusals: what is not on the seam yet says so, and --device cuda without a GPU says why.
# The same script with DEVICE=cuda checks a real GPU against the CPU within tolerances (GPU machine).
#   tests/train/device.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"; PY=/usr/bin/python3
TORCH_DIR="$(cd "$(dirname "$0")/../torch" && pwd)"
. "$(dirname "$0")/common.sh"
D=cpu-staged
rm -rf "$W"; mkdir -p "$W"
make_corpus "$B" "$W"
"$B" create-pretraining-data --input "$W/corpus/train" --output "$W/h5" --vocab "$W/vocab.txt" --max-seq-length 64 \
  --max-predictions-per-seq 10 --dupe-factor 3 > /dev/null || fail data

losses() { $PY - "$1" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line[5:])
    d = j["data"]
    if j["type"] == "LOG" and isinstance(j["step"], list) and ("loss" in d or "eval.loss" in d):
        print(j["step"][1], repr(d.get("loss")), repr(d.get("eval.loss")), repr(d.get("eval.mlm_accuracy")))
PYEOF
}
same_run() {  # NAME DIR_A DIR_B: models, step-4 moments, logged losses and evaluations
  if cmp -s "$2/model/model.safetensors" "$3/model/model.safetensors"; then echo "ok   $1: byte-identical models"
  else fail "$1: models differ"; fi
  cmp -s "$2/checkpoints/step_4/optimizer.safetensors" "$3/checkpoints/step_4/optimizer.safetensors" \
    && cmp -s "$2/checkpoints/step_4/model.safetensors" "$3/checkpoints/step_4/model.safetensors" \
    && echo "ok   $1: step-4 checkpoints (weights, moments) byte-identical" || fail "$1: checkpoints differ"
  losses "$2/dllogger.json" > "$W/la.txt"; losses "$3/dllogger.json" > "$W/lb.txt"
  if [ -s "$W/la.txt" ] && cmp -s "$W/la.txt" "$W/lb.txt"; then echo "ok   $1: identical losses and evaluations ($(wc -l < "$W/la.txt") lines)"
  else fail "$1: losses differ: $(diff "$W/la.txt" "$W/lb.txt" | head -4)"; fi
}

PT="--config bert-mini --vocab $W/vocab.txt --input-dir $W/h5 --eval-dir $W/h5 --eval-batches 2 --learning-rate 1e-3 \
--warmup-proportion 0.25 --num-steps-per-checkpoint 2 --keep-checkpoints 8 --log-freq 1 --seed 7 --threads 2 --max-steps 8"
ONE="--train-batch-size 16 --gradient-accumulation-steps 2"
for prec in fp32 bf16 fp16; do
  X=""; [ $prec = fp16 ] && X="--init-loss-scale 1048576 --loss-scale-window 3"  # overflows, then scale changes
  "$B" pretrain $PT $ONE $X --precision $prec --output-dir "$W/cpu_$prec" > "$W/cpu_$prec.log" 2>&1 || fail "cpu $prec: $(tail -3 "$W/cpu_$prec.log")"
  "$B" pretrain $PT $ONE $X --precision $prec --device $D --output-dir "$W/dev_$prec" > "$W/dev_$prec.log" 2>&1 \
    || fail "$D $prec: $(tail -3 "$W/dev_$prec.log")"
  grep -q "backend: cpu-staged" "$W/dev_$prec.log" || fail "$D $prec: start-up line does not name the device"
  same_run "pretrain $prec, $D vs cpu" "$W/cpu_$prec" "$W/dev_$prec"
done
n16=$(grep -c "gradient overflow" "$W/dev_fp16.log")
[ "$n16" -gt 0 ] && [ "$n16" = "$(grep -c "gradient overflow" "$W/cpu_fp16.log")" ] \
  && echo "ok   fp16 on $D: $n16 overflowing step(s) skipped and the scale lowered, as on the cpu" \
  || fail "fp16 on $D: overflow steps $n16 (cpu: $(grep -c "gradient overflow" "$W/cpu_fp16.log")); the scale starts at 2^20 and must drop"
# AdamW, no accumulation
"$B" pretrain $PT --train-batch-size 8 --optimizer adamw --precision fp32 --output-dir "$W/cpu_adamw" > "$W/cpu_adamw.log" 2>&1 || fail "cpu adamw"
"$B" pretrain $PT --train-batch-size 8 --optimizer adamw --precision fp32 --device $D --output-dir "$W/dev_adamw" > "$W/dev_adamw.log" 2>&1 \
  || fail "$D adamw: $(tail -3 "$W/dev_adamw.log")"
same_run "pretrain adamw, $D vs cpu" "$W/cpu_adamw" "$W/dev_adamw"

# --- checkpoints across devices: keep step 4 of one device's run, resume on the other
for pair in "cpu $D" "$D cpu"; do
  set -- $pair
  from=$1; to=$2; src="$W/cpu_fp32"; [ "$from" = $D ] && src="$W/dev_fp32"
  R="$W/resume_$from"; rm -rf "$R"; mkdir -p "$R/checkpoints"
  cp -r "$src/checkpoints/step_4" "$R/checkpoints/"
  "$B" pretrain $PT $ONE --precision fp32 --device "$to" --output-dir "$R" --resume-from-checkpoint > "$R.log" 2>&1 \
    || fail "resume $from -> $to: $(tail -3 "$R.log")"
  grep -q "resuming from .*step_4" "$R.log" || fail "resume $from -> $to: did not resume from step 4: $(head -5 "$R.log")"
  cmp -s "$W/cpu_fp32/model/model.safetensors" "$R/model/model.safetensors" \
    && echo "ok   checkpoint of a $from run resumed on $to: byte-identical to the uninterrupted run" \
    || fail "checkpoint of a $from run resumed on $to: model differs"
done

# --- two ranks on the device (host-staged all-reduce) = one CPU rank x 2 micro-batches
if command -v mpirun > /dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
  PT1=$(echo "$PT" | sed 's/--threads 2/--threads 1/')
  "$B" pretrain $PT1 $ONE --precision fp32 --output-dir "$W/cpu_1r" > "$W/cpu_1r.log" 2>&1 || fail "cpu 1 rank"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 --precision fp32 --device $D \
    --output-dir "$W/dev_2r" > "$W/dev_2r.log" 2>&1 || fail "2 ranks on $D: $(tail -5 "$W/dev_2r.log")"
  grep -q "2 ranks (mpi)" "$W/dev_2r.log" || fail "2 ranks on $D: not run as 2 MPI ranks"
  same_run "2 MPI ranks on $D vs 1 cpu rank x 2" "$W/cpu_1r" "$W/dev_2r"
else
  echo "note: mpirun not found: the 2-rank device case not run"
fi

# --- dump-step: losses and every gradient
"$PY" "$TORCH_DIR/check_dump_step.py" --bertcc "$B" --workdir "$W/dump" > "$W/dump.log" 2>&1 || fail "check_dump_step: $(tail -3 "$W/dump.log")"
for prec in fp32 bf16; do
  for dv in cpu $D; do
    "$B" dump-step --model "$W/dump/model" --batch "$W/dump/batch.h5" --precision $prec --device $dv \
      --out "$W/dump_${dv}_$prec.safetensors" > /dev/null 2>&1 || fail "dump-step $dv $prec"
  done
  cmp -s "$W/dump_cpu_$prec.safetensors" "$W/dump_${D}_$prec.safetensors" \
    && echo "ok   dump-step $prec: losses and every gradient byte-identical on $D" || fail "dump-step $prec: $D differs from cpu"
done

# --- what is not on the seam yet is refused by name; a missing GPU is said
expect_fail() {  # NAME PATTERN COMMAND...
  name=$1; pat=$2; shift 2
  if "$@" > "$W/x.log" 2>&1; then fail "$name: succeeded"
  elif grep -q -- "$pat" "$W/x.log"; then echo "ok   $name: $(grep -m1 -- "$pat" "$W/x.log" | cut -c1-150)"
  else fail "$name: message lacks '$pat': $(head -3 "$W/x.log")"; fi
}
expect_fail "ELECTRA pre-training on $D" "ELECTRA pre-training runs on the CPU only" \
  "$B" pretrain $PT $ONE --model-type electra --device $D --output-dir "$W/x_electra"
expect_fail "--zero1 on $D" "zero1 runs on the CPU only" "$B" pretrain $PT $ONE --zero1 --device $D --output-dir "$W/x_zero1"
expect_fail "--device tpu" "is not cpu, cuda, cuda:N or cpu-staged" "$B" pretrain $PT $ONE --device tpu --output-dir "$W/x_tpu"
if [ ! -e /dev/nvidia0 ]; then
  expect_fail "--device cuda without a GPU" "cuda" "$B" pretrain $PT $ONE --device cuda --output-dir "$W/x_cuda"
  grep -qi "driver\|device\|without the CUDA kernels" "$W/x.log" || fail "--device cuda: the reason is not said: $(cat "$W/x.log")"
  [ -e "$W/x_cuda/checkpoints" ] && fail "--device cuda: a checkpoint folder was written before the error"
fi
[ $fails -eq 0 ] && echo "PASS device (cpu-staged)" || { echo "$fails failure(s)"; exit 1; }
