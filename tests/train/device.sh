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
#    with --zero1 too (moments sharded on the device; fp32, fp16, ELECTRA, a resume, fine-tuning);
#  - ELECTRA pre-training (bf16, fp16 with overflowing steps, 2 ranks): both models, both
#    optimizers' moments, every checkpoint and logged metric;
#  - dump-step (pre-training heads, ELECTRA's joint step): losses and every gradient;
#  - finetune glue (SST-2, STS-B regression, an ELECTRA classifier), ner, squad and SQuAD v2.0 with
#    ELECTRA's joint head (bf16) with dropout,
#    accumulation and checkpoints: models, metrics and prediction files; qa, classify, tag, embed
#    and fill-mask; serve (every text endpoint, KServe v2 with and without a head, the joint SQuAD
#    head's /v1/qa = bertcc qa) against serve on the cpu;
#  - refusals: what is not on the seam yet says so, and --device cuda without a GPU says why.
# A real GPU is checked against the CPU within tolerances by tests/cuda/run.sh (GPU machine).
#   tests/train/device.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"; PY=/usr/bin/python3
TORCH_DIR="$(cd "$(dirname "$0")/../torch" && pwd)"
. "$(dirname "$0")/common.sh"
D=cpu-staged
rm -rf "$W"; mkdir -p "$W"
use_fixture "$B" "$W"  # the shared shards and vocabulary; tiny.json: 2 layers, hidden 64 (tests/fixture.sh)

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

PT="--config $FIX/tiny.json --vocab $FIX/vocab.txt --input-dir $FIX/h5 --eval-dir $FIX/h5 --eval-batches 2 --learning-rate 1e-3 \
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

# --- ELECTRA: generator and discriminator on the device (shared embeddings copied there, the
# generator's embedding gradients added into the discriminator's there, one optimizer and one
# gradient norm over both), bf16 and fp16 with overflowing steps: every checkpoint file (both
# models, both optimizers' moments, trainer state), the final directories, every logged metric
electra_same() {  # NAME DIR_A DIR_B
  if diff -r -x dllogger.json -x tensorboard "$2" "$3" > "$W/ediff.txt"; then
    echo "ok   $1: discriminator, generator and every checkpoint (weights, moments) byte-identical"
  else fail "$1: $(head -3 "$W/ediff.txt")"; fi
  [ -s "$2/discriminator/model.safetensors" ] && [ -s "$2/generator/model.safetensors" ] && [ -d "$2/checkpoints/step_4/generator" ] \
    || fail "$1: discriminator/, generator/ or the step-4 checkpoint missing"
  losses "$2/dllogger.json" > "$W/la.txt"; losses "$3/dllogger.json" > "$W/lb.txt"
  if [ -s "$W/la.txt" ] && cmp -s "$W/la.txt" "$W/lb.txt"; then echo "ok   $1: identical losses and evaluations ($(wc -l < "$W/la.txt") lines)"
  else fail "$1: losses differ: $(diff "$W/la.txt" "$W/lb.txt" | head -4)"; fi
}
for prec in bf16 fp16; do
  X=""; [ $prec = fp16 ] && X="--init-loss-scale 1048576 --loss-scale-window 3"
  for dv in cpu $D; do
    "$B" pretrain $PT $ONE $X --model-type electra --precision $prec --device $dv --output-dir "$W/el_${dv}_$prec" \
      > "$W/el_${dv}_$prec.log" 2>&1 || fail "ELECTRA $prec on $dv: $(tail -3 "$W/el_${dv}_$prec.log")"
  done
  electra_same "ELECTRA pretrain $prec, $D vs cpu" "$W/el_cpu_$prec" "$W/el_${D}_$prec"
done
[ "$(grep -c "gradient overflow" "$W/el_${D}_fp16.log")" -gt 0 ] || fail "ELECTRA fp16 on $D: no overflowing step (the scale starts at 2^20)"

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
  # the staged device communicator takes NCCL's path: buckets started during the backward (the
  # model's hook), each downloaded, summed by MPI, uploaded
  grep -q "gradients reduced on the device by the staged communicator (buckets through mpi), in buckets of 25 MB started during backward" \
    "$W/dev_2r.log" || fail "2 ranks on $D: no bucketed device reduction announced: $(grep reduced "$W/dev_2r.log")"
  same_run "2 MPI ranks on $D vs 1 cpu rank x 2" "$W/cpu_1r" "$W/dev_2r"
  # many small buckets (a start at every layer's hook), none started during backward, and the
  # host path (each micro-batch's gradients down, GradSync, the sum up): the same bits
  for v in "--bucket-cap-mb 0.25" "--no-allreduce-overlap" "--allreduce-backend host"; do
    tag=$(echo "$v" | tr -cd 'a-z0-9')
    mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 --precision fp32 --device $D $v \
      --output-dir "$W/dev_2r_$tag" > "$W/dev_2r_$tag.log" 2>&1 || fail "2 ranks on $D $v: $(tail -5 "$W/dev_2r_$tag.log")"
    same_run "2 MPI ranks on $D $v vs 1 cpu rank x 2" "$W/cpu_1r" "$W/dev_2r_$tag"
  done
  grep -q "started during backward" "$W/dev_2r_noallreduceoverlap.log" && fail "--no-allreduce-overlap on $D still says it overlaps"
  grep -q "gradients reduced through the host (mpi)" "$W/dev_2r_allreducebackendhost.log" \
    || fail "--allreduce-backend host on $D: $(grep reduced "$W/dev_2r_allreducebackendhost.log")"
  # 2 ranks x accumulation 2 (the last micro-batch's ranges join the device's sum as the hook
  # reports them), with a bf16 wire: the device path gives the bits of the CPU's GradSync
  A2="--train-batch-size 16 --gradient-accumulation-steps 2 --precision bf16 --allreduce-dtype bf16 --bucket-cap-mb 0.5"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 $A2 --output-dir "$W/cpu_2ra" > "$W/cpu_2ra.log" 2>&1 || fail "cpu 2 ranks x 2: $(tail -3 "$W/cpu_2ra.log")"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 $A2 --device $D --output-dir "$W/dev_2ra" > "$W/dev_2ra.log" 2>&1 \
    || fail "2 ranks x 2 on $D: $(tail -3 "$W/dev_2ra.log")"
  grep -q "bf16 on the wire, in buckets of 0.5 MB started during backward" "$W/dev_2ra.log" \
    || fail "2 ranks x 2 on $D: $(grep reduced "$W/dev_2ra.log")"
  same_run "2 MPI ranks x accumulation 2, bf16 wire, on $D vs on cpu" "$W/cpu_2ra" "$W/dev_2ra"
  "$B" pretrain $PT1 $ONE --model-type electra --precision fp32 --output-dir "$W/el_cpu_1r" > "$W/el_cpu_1r.log" 2>&1 || fail "ELECTRA cpu 1 rank"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 --model-type electra --precision fp32 --device $D \
    --output-dir "$W/el_dev_2r" > "$W/el_dev_2r.log" 2>&1 || fail "ELECTRA 2 ranks on $D: $(tail -5 "$W/el_dev_2r.log")"
  electra_same "ELECTRA: 2 MPI ranks on $D vs 1 cpu rank x 2" "$W/el_cpu_1r" "$W/el_dev_2r"
  # ZeRO-1 on the device: each rank keeps its part's moments there, gradients reduce-scattered
  # through the host, its part updated by the backend's optimizer, parameters all-gathered; the
  # global norm from its downloaded part (the host's bits). fp32, fp16 (unscaling, skipped steps),
  # ELECTRA (two models' shards), a resume (the full moments cut to this rank's part, uploaded).
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 --precision fp32 --zero1 --device $D \
    --output-dir "$W/dev_2rz" > "$W/dev_2rz.log" 2>&1 || fail "--zero1, 2 ranks on $D: $(tail -5 "$W/dev_2rz.log")"
  grep -q "ZeRO-1: sharded over 2 ranks" "$W/dev_2rz.log" || fail "--zero1 on $D: moments not sharded: $(grep moments "$W/dev_2rz.log")"
  same_run "--zero1, 2 MPI ranks on $D vs 1 cpu rank x 2" "$W/cpu_1r" "$W/dev_2rz"
  X16="--init-loss-scale 1048576 --loss-scale-window 3"
  "$B" pretrain $PT1 $ONE $X16 --precision fp16 --output-dir "$W/cpu_1r16" > "$W/cpu_1r16.log" 2>&1 || fail "cpu 1 rank fp16"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 $X16 --precision fp16 --zero1 --device $D \
    --output-dir "$W/dev_2rz16" > "$W/dev_2rz16.log" 2>&1 || fail "--zero1 fp16, 2 ranks on $D: $(tail -5 "$W/dev_2rz16.log")"
  same_run "--zero1 fp16 (loss scaling, $(grep -c "gradient overflow" "$W/dev_2rz16.log") skipped steps), 2 MPI ranks on $D vs 1 cpu rank x 2" \
    "$W/cpu_1r16" "$W/dev_2rz16"
  R="$W/dev_2rz_resumed"; rm -rf "$R"; mkdir -p "$R/checkpoints"; cp -r "$W/dev_2rz/checkpoints/step_4" "$R/checkpoints/"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 --precision fp32 --zero1 --device $D \
    --output-dir "$R" --resume-from-checkpoint > "$R.log" 2>&1 || fail "--zero1 resume on $D: $(tail -5 "$R.log")"
  grep -q "resuming from .*step_4" "$R.log" || fail "--zero1 resume on $D: did not resume from step 4: $(head -5 "$R.log")"
  cmp -s "$W/cpu_1r/model/model.safetensors" "$R/model/model.safetensors" \
    && echo "ok   --zero1 on $D resumed from step 4: byte-identical to the uninterrupted run" \
    || fail "--zero1 on $D resumed from step 4: model differs"
  mpirun --oversubscribe -np 2 "$B" pretrain $PT1 --train-batch-size 8 --model-type electra --precision fp32 --zero1 --device $D \
    --output-dir "$W/el_dev_2rz" > "$W/el_dev_2rz.log" 2>&1 || fail "ELECTRA --zero1, 2 ranks on $D: $(tail -5 "$W/el_dev_2rz.log")"
  electra_same "ELECTRA --zero1: 2 MPI ranks on $D vs 1 cpu rank x 2" "$W/el_cpu_1r" "$W/el_dev_2rz"
else
  echo "note: mpirun not found: the 2-rank device case not run"
fi

# --- dump-step: losses and every gradient
"$PY" "$TORCH_DIR/check_dump_step.py" --bertcc "$B" --workdir "$W/dump" > "$W/dump.log" 2>&1 || fail "check_dump_step: $(tail -3 "$W/dump.log")"
for prec in fp32 bf16 fp16; do
  for dv in cpu $D; do
    "$B" dump-step --model "$W/dump/model" --batch "$W/dump/batch.h5" --precision $prec --device $dv \
      --out "$W/dump_${dv}_$prec.safetensors" > /dev/null 2>&1 || fail "dump-step $dv $prec"
  done
  cmp -s "$W/dump_cpu_$prec.safetensors" "$W/dump_${D}_$prec.safetensors" \
    && echo "ok   dump-step $prec: losses and every gradient byte-identical on $D" || fail "dump-step $prec: $D differs from cpu"
done
# ELECTRA's step (generator, Gumbel sampling from its logits, discriminator, shared embeddings)
for dv in cpu $D; do
  "$PY" "$TORCH_DIR/check_electra_pretrain.py" --bertcc "$B" --device $dv --workdir "$W/edump_$dv" > "$W/edump_$dv.log" 2>&1 \
    || fail "check_electra_pretrain --device $dv: $(tail -3 "$W/edump_$dv.log")"
done
cmp -s "$W/edump_cpu/step.safetensors" "$W/edump_$D/step.safetensors" \
  && echo "ok   dump-step --model-type electra: losses, sampled tokens, logits and every gradient byte-identical on $D" \
  || fail "dump-step --model-type electra: $D differs from cpu"
# ELECTRA's joint SQuAD head (training on the device, the logits' losses on the host; beams on the host)
for prec in fp32 bf16; do
  for dv in cpu $D; do
    "$PY" "$TORCH_DIR/check_joint_qa.py" --bertcc "$B" --precision $prec --device $dv --workdir "$W/jdump_${dv}_$prec" \
      > "$W/jdump_${dv}_$prec.log" 2>&1 || fail "check_joint_qa $prec --device $dv: $(tail -3 "$W/jdump_${dv}_$prec.log")"
  done
  cmp -s "$W/jdump_cpu_$prec/step.safetensors" "$W/jdump_${D}_$prec/step.safetensors" \
    && echo "ok   dump-step --head qa-joint $prec: losses, logits, beams and every gradient byte-identical on $D" \
    || fail "dump-step --head qa-joint $prec: $D differs from cpu"
done

# --- fine-tuning every head on real data (../shared/data), with dropout, accumulation 2 and a
# checkpoint, then inference: the same bytes on the device as on the cpu
# (the fixture's small cuts and its BERT and ELECTRA of tiny.json's size, bert-base-uncased vocabulary)
if [ -f "$FIX/ft/sq.json" ]; then
  F="$FIX/ft"
  PREC=fp32
  FT="--learning-rate 2e-3 --threads 2 --train-batch-size 8 --gradient-accumulation-steps 2 --log-freq 1000 \
--max-seq-length 64 --num-train-epochs 2 --num-steps-per-checkpoint 3 --seed 5"
  ft_case() {  # NAME OUTPUT_FILES ARGS...: trains on cpu and on the device, compares
    name=$1; files=$2; shift 2
    for dv in cpu $D; do
      "$B" finetune "$@" $FT --precision $PREC --device $dv --output-dir "$W/ft_${name}_$dv" > "$W/ft_${name}_$dv.out" 2> "$W/ft_${name}_$dv.err" \
        || fail "finetune $name on $dv: $(tail -3 "$W/ft_${name}_$dv.err")"
    done
    bad=""
    for f in model.safetensors eval_metrics.json $files; do
      cmp -s "$W/ft_${name}_cpu/$f" "$W/ft_${name}_$D/$f" || bad="$bad $f"
    done
    ls "$W/ft_${name}_$D/checkpoints" > /dev/null 2>&1 || bad="$bad checkpoints/"
    [ -z "$bad" ] && echo "ok   finetune $name on $D: model, metrics$( [ -n "$files" ] && echo ", $files") byte-identical to cpu ($(head -c 90 "$W/ft_${name}_cpu/eval_metrics.json" | tr -d '\n '))" \
      || fail "finetune $name on $D differs from cpu:$bad"
  }
  ft_case sst2 "" glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert"
  if command -v mpirun > /dev/null 2>&1; then  # ZeRO-1 fine-tuning on the device, 2 ranks = 1 cpu rank x 2
    FT1=$(echo "$FT" | sed 's/--threads 2/--threads 1/')
    "$B" finetune glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert" $FT1 --precision $PREC \
      --output-dir "$W/ftz_cpu" > "$W/ftz_cpu.out" 2> "$W/ftz_cpu.err" || fail "finetune sst-2 cpu 1 thread: $(tail -3 "$W/ftz_cpu.err")"
    mpirun --oversubscribe -np 2 "$B" finetune glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert" \
      $(echo "$FT1" | sed 's/--train-batch-size 8 --gradient-accumulation-steps 2/--train-batch-size 4/') --precision $PREC \
      --zero1 --device $D --output-dir "$W/ftz_dev" > "$W/ftz_dev.out" 2> "$W/ftz_dev.err" || fail "finetune --zero1 on $D: $(tail -3 "$W/ftz_dev.err")"
    cmp -s "$W/ftz_cpu/model.safetensors" "$W/ftz_dev/model.safetensors" && cmp -s "$W/ftz_cpu/eval_metrics.json" "$W/ftz_dev/eval_metrics.json" \
      && cmp -s "$W/ftz_cpu/checkpoints/step_3/optimizer.safetensors" "$W/ftz_dev/checkpoints/step_3/optimizer.safetensors" \
      && grep -q "ZeRO-1: sharded over 2 ranks" "$W/ftz_dev.err" \
      && echo "ok   finetune sst-2 --zero1, 2 MPI ranks on $D: model, metrics, step-3 moments byte-identical to 1 cpu rank x 2" \
      || fail "finetune sst-2 --zero1, 2 ranks on $D differs from 1 cpu rank x 2: $(ls "$W/ftz_dev" "$W/ftz_dev/checkpoints" 2>&1 | tr '\n' ' ')"
    # without ZeRO-1: the staged communicator's buckets, started during the backward of the
    # classification head and the encoder (small buckets: several per step)
    mpirun --oversubscribe -np 2 "$B" finetune glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/bert" \
      $(echo "$FT1" | sed 's/--train-batch-size 8 --gradient-accumulation-steps 2/--train-batch-size 4/') --precision $PREC \
      --bucket-cap-mb 0.1 --device $D --output-dir "$W/ftb_dev" > "$W/ftb_dev.out" 2> "$W/ftb_dev.err" || fail "finetune 2 ranks on $D: $(tail -3 "$W/ftb_dev.err")"
    cmp -s "$W/ftz_cpu/model.safetensors" "$W/ftb_dev/model.safetensors" && cmp -s "$W/ftz_cpu/eval_metrics.json" "$W/ftb_dev/eval_metrics.json" \
      && cmp -s "$W/ftz_cpu/checkpoints/step_3/optimizer.safetensors" "$W/ftb_dev/checkpoints/step_3/optimizer.safetensors" \
      && echo "ok   finetune sst-2, 2 MPI ranks on $D (buckets during backward): model, metrics, step-3 moments byte-identical to 1 cpu rank x 2" \
      || fail "finetune sst-2, 2 ranks on $D (buckets during backward) differs from 1 cpu rank x 2"
  fi
  ft_case stsb "" glue --task-name sts-b --data-dir "$F/stsb" --init-checkpoint "$F/bert"
  ft_case electra_sst2 "" glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$F/electra"
  ft_case ner "predictions.txt" ner --train-file "$F/ner.txt" --predict-file "$F/ner.txt" --init-checkpoint "$F/bert" \
    --mode "train eval prediction"
  ft_case squad "predictions.json" squad --train-file "$F/sq.json" --predict-file "$F/sq.json" --doc-stride 32 --init-checkpoint "$F/bert"
  # SQuAD v2.0 with ELECTRA's joint head (trained on the device, its beam search on the host), bf16
  PREC=bf16
  ft_case squad2_joint "predictions.json null_odds.json nbest_predictions.json" squad --train-file "$F/sq2.json" \
    --predict-file "$F/sq2.json" --doc-stride 32 --init-checkpoint "$F/electra" --version-2-with-negative
  PREC=fp32
  grep -q "joint head" "$W/ft_squad2_joint_$D.err" || fail "squad2_joint: not ELECTRA's joint head: $(head -3 "$W/ft_squad2_joint_$D.err")"
  # inference commands on the device
  q="$($PY -c "import json;print(json.load(open('$F/sq.json'))['data'][0]['paragraphs'][0]['qas'][0]['question'])")"
  c="$($PY -c "import json;print(json.load(open('$F/sq.json'))['data'][0]['paragraphs'][0]['context'])")"
  # (bf16: on a device the encoder's matrices are there in bf16 alone, use_backend_for_inference)
  for prec in fp32 bf16; do
  for cmd in "qa --model $W/ft_squad_cpu" "qa --model $W/ft_squad2_joint_cpu" "classify --model $W/ft_sst2_cpu" "tag --model $W/ft_ner_cpu"; do
    set -- $cmd
    case $1 in qa) set -- "$@" --question "$q" --context "$c";; classify) set -- "$@" --text "a gorgeous, witty film";; tag) set -- "$@" --text "John lives in Berlin";; esac
    "$B" "$@" --precision $prec --device cpu > "$W/inf_cpu.txt" 2>/dev/null || fail "$1 $prec on cpu"
    "$B" "$@" --precision $prec --device $D > "$W/inf_dev.txt" 2>/dev/null || fail "$1 $prec on $D"
    [ -s "$W/inf_cpu.txt" ] && cmp -s "$W/inf_cpu.txt" "$W/inf_dev.txt" && echo "ok   $1 $prec on $D: $(head -c 100 "$W/inf_dev.txt")" \
      || fail "$1 $prec on $D: $(cat "$W/inf_dev.txt") vs cpu $(cat "$W/inf_cpu.txt")"
  done
  # embed and fill-mask with the pre-trained model (BertForPreTraining), batched from stdin
  for cmd in embed fill-mask; do
    printf '{"text": "sentence one of [MASK] is here."}\n{"text": "then a fourth [MASK] appears about trains", "text_pair": "a third one"}\n' > "$W/inf_in.jsonl"
    "$B" $cmd --model "$W/cpu_fp32/model" --precision $prec --device cpu < "$W/inf_in.jsonl" > "$W/inf_cpu.txt" 2>/dev/null || fail "$cmd $prec on cpu"
    "$B" $cmd --model "$W/cpu_fp32/model" --precision $prec --device $D < "$W/inf_in.jsonl" > "$W/inf_dev.txt" 2>/dev/null || fail "$cmd $prec on $D"
    [ "$(wc -l < "$W/inf_cpu.txt")" = 2 ] && cmp -s "$W/inf_cpu.txt" "$W/inf_dev.txt" && echo "ok   $cmd $prec on $D: $(head -c 100 "$W/inf_dev.txt")" \
      || fail "$cmd $prec on $D: $(head -c 300 "$W/inf_dev.txt") vs cpu $(head -c 300 "$W/inf_cpu.txt")"
  done
  done
  # serve --device: every text endpoint and a KServe v2 request, the same bodies as serve on the cpu
  serve_same_on "$B" "$D" "$W"
  PRECISION=bf16 serve_same_on "$B" "$D" "$W"
else
  echo "note: ../shared/data not found: fine-tuning on the device not checked"
fi

# --- what is not on the seam yet is refused by name; a missing GPU is said
expect_fail() {  # NAME PATTERN COMMAND...
  name=$1; pat=$2; shift 2
  if "$@" > "$W/x.log" 2>&1; then fail "$name: succeeded"
  elif grep -q -- "$pat" "$W/x.log"; then echo "ok   $name: $(grep -m1 -- "$pat" "$W/x.log" | cut -c1-150)"
  else fail "$name: message lacks '$pat': $(head -3 "$W/x.log")"; fi
}
expect_fail "--allreduce-backend nccl on $D" "allreduce-backend nccl reduces GPU buffers" \
  "$B" pretrain $PT $ONE --allreduce-backend nccl --device $D --output-dir "$W/x_nccl"
expect_fail "--device tpu" "is not cpu, cuda, cuda:N or cpu-staged" "$B" pretrain $PT $ONE --device tpu --output-dir "$W/x_tpu"
if [ ! -e /dev/nvidia0 ]; then
  expect_fail "--device cuda without a GPU" "cuda" "$B" pretrain $PT $ONE --device cuda --output-dir "$W/x_cuda"
  grep -qi "driver\|device\|without the CUDA kernels" "$W/x.log" || fail "--device cuda: the reason is not said: $(cat "$W/x.log")"
  [ -e "$W/x_cuda/checkpoints" ] && fail "--device cuda: a checkpoint folder was written before the error"
fi
[ $fails -eq 0 ] && echo "PASS device (cpu-staged)" || { echo "$fails failure(s)"; exit 1; }
