#!/bin/sh
# The commands end to end on a real GPU (for the GPU machine): what tests/train/device.sh checks bit
# for bit through --device cpu-staged, here against the CPU within tolerances (other summation
# orders), plus what only a real device can show.
#  - Determinism: the same pre-training run twice on the GPU gives byte-identical models, step-4
#    checkpoints (weights, moments) and logged losses (fp32, bf16, fp16 with overflowing steps).
#  - Resume on the same GPU: the step-4 checkpoint resumed = the uninterrupted run, byte for byte
#    (BERT fp32/bf16/fp16, ELECTRA bf16).
#  - The GPU's run against the CPU's: every logged loss (training and held-out) within 1e-4
#    relative in fp32, 2e-2 in bf16/fp16; the fp32 model within 1e-3 of each tensor's largest value.
#  - Checkpoints move between devices: a CPU step-4 checkpoint resumed on the GPU and a GPU one
#    resumed on the CPU stay within the fp32 tolerances of the run they left.
#  - ELECTRA pre-training (generator, sampling, discriminator) on the GPU against the CPU.
#  - finetune glue (SST-2, STS-B, an ELECTRA classifier), ner, squad (fp32) and SQuAD v2.0 with
#    ELECTRA's joint head (bf16) on the GPU against the CPU: models, metrics, prediction files.
#  - qa, classify, tag, embed, fill-mask; serve (every endpoint, KServe v2) against the CPU's.
#  - 2 MPI ranks sharing the GPU (host-staged all-reduce) against 1 CPU rank x 2, and on a GPU the
#    model byte-identical to 1 GPU rank x accumulation 2; --allreduce-backend nccl and plain cuda
#    with more ranks than GPUs refused by name (if mpirun is here).
#  - --device cuda:N past the last GPU: refused by name, nothing written.
# Usage: tests/cuda/e2e.sh BERTCC WORKDIR [DEVICE]   (DEVICE: cuda, the default, or cpu-staged to check
#        this script where there is no GPU: then every comparison holds exactly). FT_DATA: the
#        fine-tuning cuts of make_ft_data (tests/train/common.sh); default: made from ../shared/data.
#        E2E_ONLY: a comma list of sections to run (pretrain, electra, mpi, finetune, past; default all),
#        for a short GPU visit that rechecks what failed. BERTCC_TEST_FIXTURE (make test's shared data,
#        tests/fixture.sh): its shards, vocabulary, fine-tuning cuts and models instead of making them;
#        E2E_CONFIG (default bert-mini) and E2E_THREADS (default 4): the pre-training model and threads.
# Exit 0 when all passed, 77 when the device is not usable here, 1 otherwise.
set -u
B="$1"; W="$2"; D="${3:-cuda}"
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/../train/common.sh"
C="$PY $HERE/close.py"
"$B" bench train --config bert-tiny --batch 1 --seq 8 --steps 1 --device "$D" > /dev/null 2>&1 \
  || { echo "SKIPPED: --device $D is not usable here: $("$B" bench train --config bert-tiny --batch 1 --seq 8 --steps 1 --device "$D" 2>&1 | tail -1)"; exit 77; }
rm -rf "$W"; mkdir -p "$W"
T0=$(date +%s)
want() { case ",${E2E_ONLY:-all}," in *",all,"*|*",$1,"*) return 0;; esac; return 1; }
check() {  # NAME COMMAND...: runs a close.py comparison, prefixes its line with NAME
  what=$1; shift
  out=$("$@" 2>&1); rc=$?
  case $out in ok*) echo "ok   $what: ${out#ok   }";; *) fail "$what: ${out#FAIL }";; esac
  return $rc
}
same_bytes() {  # NAME DIR_A DIR_B: final model, step-4 checkpoint, logged losses
  if cmp -s "$2/model/model.safetensors" "$3/model/model.safetensors" \
     && cmp -s "$2/checkpoints/step_4/optimizer.safetensors" "$3/checkpoints/step_4/optimizer.safetensors"; then
    $PY "$HERE/close.py" losses "$2/dllogger.json" "$3/dllogger.json" 0 > /dev/null \
      && echo "ok   $1: models, step-4 moments and every logged loss byte-identical" || fail "$1: logged losses differ"
  else fail "$1: models or step-4 moments differ"; fi
}

if [ -n "${BERTCC_TEST_FIXTURE:-}" ]; then
  use_fixture "$B" "$W"; V="$FIX/vocab.txt"; H5="$FIX/h5"; FT_DATA="${FT_DATA:-$FIX/ft}"
else
  FIX=""; V="$W/vocab.txt"; H5="$W/h5"
  make_corpus "$B" "$W"
  "$B" create-pretraining-data --input "$W/corpus/train" --output "$W/h5" --vocab "$W/vocab.txt" --max-seq-length 64 \
    --max-predictions-per-seq 10 --dupe-factor 3 > /dev/null || fail data
fi
TH="${E2E_THREADS:-4}"
PT="--config ${E2E_CONFIG:-bert-mini} --vocab $V --input-dir $H5 --eval-dir $H5 --eval-batches 2 --learning-rate 1e-3 \
--warmup-proportion 0.25 --num-steps-per-checkpoint 2 --keep-checkpoints 8 --log-freq 1 --seed 7 --threads $TH --max-steps 8 \
--train-batch-size 16 --gradient-accumulation-steps 2"
X16="--init-loss-scale 1048576 --loss-scale-window 3"  # fp16: overflowing steps, then the scale drops
resume() {  # SRC_DIR DST_DIR DEVICE ARGS...: SRC's step-4 checkpoint resumed on DEVICE in DST
  src=$1; dst=$2; dv=$3; shift 3
  rm -rf "$dst"; mkdir -p "$dst/checkpoints"; cp -r "$src/checkpoints/step_4" "$dst/checkpoints/"
  "$B" pretrain $PT "$@" --device "$dv" --output-dir "$dst" --resume-from-checkpoint > "$dst.log" 2>&1 \
    || { fail "resume of $src on $dv: $(tail -3 "$dst.log")"; return 1; }
  grep -q "resuming from .*step_4" "$dst.log" || { fail "$dst: did not resume from step 4: $(head -5 "$dst.log")"; return 1; }
}

cpu_fp32() {  # the CPU's fp32 pre-training run, which several sections compare against
  [ -f "$W/cpu_fp32/model/model.safetensors" ] && return 0
  "$B" pretrain $PT --precision fp32 --device cpu --output-dir "$W/cpu_fp32" > "$W/cpu_fp32.log" 2>&1 \
    || { fail "cpu fp32: $(tail -3 "$W/cpu_fp32.log")"; return 1; }
}

# --- BERT pre-training: GPU against CPU, determinism, resume
if want pretrain; then
for prec in fp32 bf16 fp16; do
  X=""; [ $prec = fp16 ] && X=$X16
  tol=2e-2; [ $prec = fp32 ] && tol=1e-4
  "$B" pretrain $PT $X --precision $prec --device cpu --output-dir "$W/cpu_$prec" > "$W/cpu_$prec.log" 2>&1 || fail "cpu $prec: $(tail -3 "$W/cpu_$prec.log")"
  for r in a b; do
    "$B" pretrain $PT $X --precision $prec --device "$D" --output-dir "$W/dev_${prec}_$r" > "$W/dev_${prec}_$r.log" 2>&1 \
      || fail "$D $prec: $(tail -3 "$W/dev_${prec}_$r.log")"
  done
  grep -q "backend: $D" "$W/dev_${prec}_a.log" || fail "$D $prec: the start-up line does not name the device: $(head -2 "$W/dev_${prec}_a.log")"
  check "pretrain $prec, $D against cpu: losses" $C losses "$W/dev_${prec}_a/dllogger.json" "$W/cpu_$prec/dllogger.json" $tol
  [ $prec = fp32 ] && check "pretrain fp32, $D against cpu: model" $C model "$W/dev_fp32_a/model/model.safetensors" "$W/cpu_fp32/model/model.safetensors" 1e-3
  same_bytes "pretrain $prec, two runs on $D" "$W/dev_${prec}_a" "$W/dev_${prec}_b"
  resume "$W/dev_${prec}_a" "$W/dev_${prec}_resumed" "$D" $X --precision $prec \
    && { cmp -s "$W/dev_${prec}_a/model/model.safetensors" "$W/dev_${prec}_resumed/model/model.safetensors" \
      && echo "ok   pretrain $prec on $D resumed from step 4: byte-identical to the uninterrupted run" \
      || fail "pretrain $prec on $D resumed from step 4: the model differs from the uninterrupted run: $(cmp \
        "$W/dev_${prec}_a/model/model.safetensors" "$W/dev_${prec}_resumed/model/model.safetensors" 2>&1)"; }
done
n16=$(grep -c "gradient overflow" "$W/dev_fp16_a.log")
[ "$n16" -gt 0 ] && [ "$n16" = "$(grep -c "gradient overflow" "$W/cpu_fp16.log")" ] \
  && echo "ok   fp16 on $D: $n16 overflowing step(s) skipped, as on the cpu" \
  || fail "fp16 on $D: $n16 overflowing steps, cpu $(grep -c "gradient overflow" "$W/cpu_fp16.log")"
# checkpoints across devices (fp32): continue within the tolerances of the run they left
resume "$W/cpu_fp32" "$W/cpu_to_dev" "$D" --precision fp32 \
  && check "cpu step-4 checkpoint resumed on $D, against the cpu run" $C model "$W/cpu_to_dev/model/model.safetensors" "$W/cpu_fp32/model/model.safetensors" 1e-3 \
  && check "cpu step-4 checkpoint resumed on $D: losses" $C losses "$W/cpu_to_dev/dllogger.json" "$W/cpu_fp32/dllogger.json" 1e-4 resumed
resume "$W/dev_fp32_a" "$W/dev_to_cpu" cpu --precision fp32 \
  && check "$D step-4 checkpoint resumed on cpu, against the $D run" $C model "$W/dev_to_cpu/model/model.safetensors" "$W/dev_fp32_a/model/model.safetensors" 1e-3 \
  && check "$D step-4 checkpoint resumed on cpu: losses" $C losses "$W/dev_to_cpu/dllogger.json" "$W/dev_fp32_a/dllogger.json" 1e-4 resumed
fi

# --- ELECTRA pre-training (bf16; fp32 for the model comparison)
if want electra; then
for prec in fp32 bf16; do
  tol=2e-2; [ $prec = fp32 ] && tol=1e-4
  "$B" pretrain $PT --model-type electra --precision $prec --device cpu --output-dir "$W/el_cpu_$prec" > "$W/el_cpu_$prec.log" 2>&1 \
    || fail "ELECTRA cpu $prec: $(tail -3 "$W/el_cpu_$prec.log")"
  "$B" pretrain $PT --model-type electra --precision $prec --device "$D" --output-dir "$W/el_dev_$prec" > "$W/el_dev_$prec.log" 2>&1 \
    || fail "ELECTRA $D $prec: $(tail -3 "$W/el_dev_$prec.log")"
  check "ELECTRA pretrain $prec, $D against cpu: generator and discriminator losses" \
    $C losses "$W/el_dev_$prec/dllogger.json" "$W/el_cpu_$prec/dllogger.json" $tol
done
check "ELECTRA pretrain fp32, $D against cpu: discriminator" \
  $C model "$W/el_dev_fp32/discriminator/model.safetensors" "$W/el_cpu_fp32/discriminator/model.safetensors" 1e-3
if resume "$W/el_dev_bf16" "$W/el_res" "$D" --model-type electra --precision bf16; then
  cmp -s "$W/el_dev_bf16/discriminator/model.safetensors" "$W/el_res/discriminator/model.safetensors" \
    && cmp -s "$W/el_dev_bf16/generator/model.safetensors" "$W/el_res/generator/model.safetensors" \
    && echo "ok   ELECTRA bf16 on $D resumed from step 4: discriminator and generator byte-identical to the uninterrupted run" \
    || fail "ELECTRA bf16 on $D resumed from step 4 differs from the uninterrupted run: $(for m in discriminator generator; do
         cmp "$W/el_dev_bf16/$m/model.safetensors" "$W/el_res/$m/model.safetensors" 2>&1; done | head -2)"
fi
fi

# --- two MPI ranks sharing the device (gradients through the host) = one CPU rank x 2. Plain
# "cuda" is one GPU per rank (cuda:<local rank>), so sharing names the GPU: cuda:0; NCCL cannot
# run two ranks on one GPU, so auto sums through the host (said at start-up) and nccl is refused.
if want mpi && command -v mpirun > /dev/null 2>&1 && cpu_fp32; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
  P2=$(echo "$PT" | sed 's/--train-batch-size 16 --gradient-accumulation-steps 2/--train-batch-size 8/; s/--threads [0-9]*/--threads 2/')
  D0=$D; [ "$D" = cuda ] && D0=cuda:0
  errs() { grep -v "^\[\|^-\+$\|MPI_ABORT\|MPI_COMM_WORLD\|^You may\|^exactly when\|^NOTE\|^with errorcode\|^$" "$1" | head -3; }
  mpirun --oversubscribe -np 2 "$B" pretrain $P2 --precision fp32 --device "$D0" --output-dir "$W/dev_2r" > "$W/dev_2r.log" 2>&1 \
    || fail "2 ranks on $D0: $(errs "$W/dev_2r.log")"
  grep -q "2 ranks (mpi)" "$W/dev_2r.log" || fail "2 ranks on $D0: not run as 2 MPI ranks"
  check "2 MPI ranks on $D0 against 1 cpu rank x 2: losses" $C losses "$W/dev_2r/dllogger.json" "$W/cpu_fp32/dllogger.json" 1e-4
  check "2 MPI ranks on $D0 against 1 cpu rank x 2: model" $C model "$W/dev_2r/model/model.safetensors" "$W/cpu_fp32/model/model.safetensors" 1e-3
  if [ "$D" = cuda ]; then
    # the equivalence on the GPU itself: the host sums the two ranks' micro-batch gradients in the
    # order the single rank's device accumulation does, so the bytes must match (the CPU's differ
    # with the thread count, so cpu-staged is held to the tolerance above only)
    [ -f "$W/dev_fp32_a/model/model.safetensors" ] || "$B" pretrain $PT --precision fp32 --device "$D" \
      --output-dir "$W/dev_fp32_a" > "$W/dev_fp32_a.log" 2>&1 || fail "$D fp32: $(tail -3 "$W/dev_fp32_a.log")"
    if cmp -s "$W/dev_2r/model/model.safetensors" "$W/dev_fp32_a/model/model.safetensors" \
       && $PY "$HERE/close.py" losses "$W/dev_2r/dllogger.json" "$W/dev_fp32_a/dllogger.json" 1e-6 > /dev/null; then
      echo "ok   2 MPI ranks on cuda:0 = 1 rank x accumulation 2 on cuda: model byte-identical, every logged loss within 1e-6 (evaluation sums by rank)"
    else
      fail "2 MPI ranks on cuda:0 against 1 rank x accumulation 2 on cuda: not byte-identical: $($C model \
        "$W/dev_2r/model/model.safetensors" "$W/dev_fp32_a/model/model.safetensors" 1e-6)"
    fi
    grep -q "share one GPU.*through the mpi communicator on the host" "$W/dev_2r.log" \
      && echo "ok   2 ranks on cuda:0: $(grep -m1 "share one GPU" "$W/dev_2r.log" | cut -c1-150)" \
      || fail "2 ranks on cuda:0: start-up does not say that the gradients go through the host: $(head -4 "$W/dev_2r.log")"
    mpirun --oversubscribe -np 2 "$B" pretrain $P2 --precision fp32 --device cuda:0 --allreduce-backend nccl \
      --output-dir "$W/dev_2r_nccl" > "$W/dev_2r_nccl.log" 2>&1 \
      && fail "2 ranks on cuda:0 with --allreduce-backend nccl: succeeded" \
      || { grep -q "NCCL needs one GPU per rank" "$W/dev_2r_nccl.log" && [ ! -e "$W/dev_2r_nccl/checkpoints" ] \
        && echo "ok   2 ranks on cuda:0 with --allreduce-backend nccl refused: $(grep -m1 "NCCL needs" "$W/dev_2r_nccl.log" | cut -c1-150)" \
        || fail "2 ranks on cuda:0 with --allreduce-backend nccl: $(errs "$W/dev_2r_nccl.log")"; }
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "$n" = 1 ]; then  # plain cuda, 2 ranks, 1 GPU: rank 1 has no cuda:1, said with the mapping
      mpirun --oversubscribe -np 2 "$B" pretrain $P2 --precision fp32 --device cuda --output-dir "$W/dev_2r_plain" > "$W/dev_2r_plain.log" 2>&1 \
        && fail "2 ranks on 1 GPU with --device cuda: succeeded" \
        || { grep -q "one GPU per rank, local rank 1 -> --device cuda:1" "$W/dev_2r_plain.log" \
          && echo "ok   2 ranks on 1 GPU with --device cuda refused: $(grep -m1 "local rank 1" "$W/dev_2r_plain.log" | cut -c1-160)" \
          || fail "2 ranks on 1 GPU with --device cuda: $(errs "$W/dev_2r_plain.log")"; }
    fi
  fi
elif want mpi; then
  echo "note: mpirun not found: 2 ranks sharing the device not run"
fi

# --- fine-tuning every head on real data, then inference and serve
S="$HERE/../../../shared/data"
if ! want finetune; then :
elif cpu_fp32 && { [ -n "${FT_DATA:-}" ] || make_ft_data "$S" "$W/ftdata"; }; then
  F="${FT_DATA:-$W/ftdata}"
  if [ -n "$FIX" ] && [ -d "$FIX/ft/bert" ]; then  # the fixture's BERT and ELECTRA (tiny.json's size)
    ln -s "$FIX/ft/bert" "$W/tiny"; ln -s "$FIX/ft/electra" "$W/etiny"
  else
    "$B" init-model --config bert-tiny --vocab "$F/uncased_vocab.txt" --output "$W/tiny" --seed 1 > /dev/null 2>&1 || fail init-model
    printf '{"model_type": "electra", "vocab_size": 30522, "embedding_size": 64, "hidden_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}\n' > "$W/electra.json"
    "$B" init-model --config "$W/electra.json" --vocab "$F/uncased_vocab.txt" --output "$W/etiny" --seed 1 > /dev/null 2>&1 || fail "init-model electra"
  fi
  FT="--learning-rate 2e-3 --threads $TH --train-batch-size 8 --gradient-accumulation-steps 2 --log-freq 1000 \
--max-seq-length 64 --num-train-epochs 2 --num-steps-per-checkpoint 3 --seed 5"
  ft_case() {  # NAME PRECISION JSON_FILES ARGS...: trains on cpu and on the device, compares
    name=$1; prec=$2; files=$3; shift 3
    for dv in cpu "$D"; do
      "$B" finetune "$@" $FT --precision $prec --device "$dv" --output-dir "$W/ft_${name}_$dv" > "$W/ft_${name}_$dv.out" 2> "$W/ft_${name}_$dv.err" \
        || { fail "finetune $name on $dv: $(tail -3 "$W/ft_${name}_$dv.err")"; return; }
    done
    mt=1e-3; [ "$prec" = fp32 ] || mt=5e-2
    check "finetune $name ($prec) on $D against cpu: model" $C model "$W/ft_${name}_$D/model.safetensors" "$W/ft_${name}_cpu/model.safetensors" $mt
    check "finetune $name on $D: eval metrics ($(head -c 80 "$W/ft_${name}_cpu/eval_metrics.json" | tr -d '\n '))" \
      $C json "$W/ft_${name}_$D/eval_metrics.json" "$W/ft_${name}_cpu/eval_metrics.json" 0 0.07
    for f in $files; do
      check "finetune $name on $D: $f" $C json "$W/ft_${name}_$D/$f" "$W/ft_${name}_cpu/$f" 2e-2 1e-3
    done
  }
  ft_case sst2 fp32 "" glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$W/tiny"
  ft_case stsb fp32 "" glue --task-name sts-b --data-dir "$F/stsb" --init-checkpoint "$W/tiny"
  ft_case electra_sst2 fp32 "" glue --task-name sst-2 --data-dir "$F/sst" --init-checkpoint "$W/etiny"
  ft_case ner fp32 "" ner --train-file "$F/ner.txt" --predict-file "$F/ner.txt" --init-checkpoint "$W/tiny" --mode "train eval prediction"
  if [ -f "$W/ft_ner_cpu/predictions.txt" ]; then
    nl=$(diff "$W/ft_ner_cpu/predictions.txt" "$W/ft_ner_$D/predictions.txt" | grep -c '^<')
    [ "$nl" -le 2 ] && echo "ok   finetune ner on $D: $nl of $(wc -l < "$W/ft_ner_cpu/predictions.txt") predicted lines differ from cpu (at most 2)" \
      || fail "finetune ner on $D: $nl predicted lines differ from cpu"
  fi
  ft_case squad fp32 "predictions.json" squad --train-file "$F/sq.json" --predict-file "$F/sq.json" --doc-stride 32 --init-checkpoint "$W/tiny"
  ft_case squad2_joint bf16 "null_odds.json" squad --train-file "$F/sq2.json" \
    --predict-file "$F/sq2.json" --doc-stride 32 --init-checkpoint "$W/etiny" --version-2-with-negative
  grep -q "joint head" "$W/ft_squad2_joint_$D.err" || fail "squad2_joint: not ELECTRA's joint head: $(head -3 "$W/ft_squad2_joint_$D.err")"
  # inference commands: the same answers, labels and tags; scores and vectors within 1e-3
  q="$($PY -c "import json;print(json.load(open('$F/sq.json'))['data'][0]['paragraphs'][0]['qas'][0]['question'])")"
  c="$($PY -c "import json;print(json.load(open('$F/sq.json'))['data'][0]['paragraphs'][0]['context'])")"
  printf '{"text": "sentence one of [MASK] is here."}\n{"text": "then a fourth [MASK] appears about trains", "text_pair": "a third one"}\n' > "$W/inf_in.jsonl"
  for cmd in "qa --model $W/ft_squad_cpu" "qa --model $W/ft_squad2_joint_cpu" "classify --model $W/ft_sst2_cpu" \
             "tag --model $W/ft_ner_cpu" "embed --model $W/cpu_fp32/model" "fill-mask --model $W/cpu_fp32/model"; do
    set -- $cmd
    case $1 in qa) set -- "$@" --question "$q" --context "$c";; classify) set -- "$@" --text "a gorgeous, witty film";;
      tag) set -- "$@" --text "John lives in Berlin";; esac
    for dv in cpu "$D"; do
      "$B" "$@" --precision fp32 --device "$dv" < "$W/inf_in.jsonl" > "$W/inf_$dv.txt" 2> "$W/inf_$dv.err" || fail "$1 on $dv: $(tail -2 "$W/inf_$dv.err")"
    done
    check "$1 on $D against cpu ($(head -c 70 "$W/inf_cpu.txt"))" $C json "$W/inf_$D.txt" "$W/inf_cpu.txt" 1e-3 1e-4
  done
  serve_same_on "$B" "$D" "$W" 1e-3
  # --cuda-graphs (cuda only): each line's shape runs, is recorded, then replayed twice; the output
  # must be byte-identical to the same lines without graphs
  if [ "$D" = cuda ]; then
    for i in 1 2 3 4; do printf '{"text": "a gorgeous, witty film"}\n{"text": "John lives in Berlin and works for the United Nations"}\n'; done > "$W/graphs_in.jsonl"
    for cmd in "classify --model $W/ft_sst2_cpu" "tag --model $W/ft_ner_cpu"; do
      set -- $cmd
      for g in off on; do
        x=""; [ $g = on ] && x=--cuda-graphs
        "$B" "$@" --precision bf16 --device cuda --batch-size 1 $x < "$W/graphs_in.jsonl" > "$W/graphs_$g.txt" 2> "$W/graphs_$g.err" \
          || fail "$1 --cuda-graphs $g: $(tail -2 "$W/graphs_$g.err")"
      done
      if [ -s "$W/graphs_off.txt" ] && cmp -s "$W/graphs_off.txt" "$W/graphs_on.txt"; then
        echo "ok   $1 with --cuda-graphs on cuda: the same bytes as without ($(wc -l < "$W/graphs_on.txt") lines, 2 shapes run 4 times each)"
      else
        fail "$1 with --cuda-graphs on cuda: the output differs from the run without graphs"
      fi
    done
  fi
else
  echo "note: ../shared/data not found and no FT_DATA: fine-tuning on $D not checked"
fi

# --- a GPU past the last one is refused by name, before anything is written
if [ "$D" = cuda ] && want past; then
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$n" -gt 0 ]; then
    if "$B" pretrain $PT --device "cuda:$n" --output-dir "$W/x_past" > "$W/x_past.log" 2>&1; then fail "--device cuda:$n ($n GPUs): succeeded"
    elif grep -q "cuda:$n" "$W/x_past.log" && [ ! -e "$W/x_past/checkpoints" ]; then echo "ok   --device cuda:$n with $n GPU(s): $(grep -m1 "cuda:$n" "$W/x_past.log" | cut -c1-140)"
    else fail "--device cuda:$n with $n GPU(s): $(head -3 "$W/x_past.log")"; fi
  fi
fi
echo "e2e on $D: $(( $(date +%s) - T0 )) s"
[ $fails -eq 0 ] && echo "PASS e2e ($D)" || { echo "$fails failure(s)"; exit 1; }
