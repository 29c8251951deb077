#!/bin/bash
# One visit to the GPU machine, prepared here: everything the CUDA backend still has to prove, in
# order of priority, inside a time budget (device time is short: 15 minutes a session, machine
# start included, at most 10 minutes a command).
#
#   here:      scripts/gpu-visit.sh pack
#                builds .gpu/bundle.tar.xz (git-ignored): bertcc and its CUDA module libbertcc_cuda.so, test_cuda_kernels, test_cudnn_attention,
#                bertcc_cuda_attention_bench and bertcc_cuda_gemm_bench with the shared libraries the GPU machine lacks
#                (../shared/tools/device-bundle), the BERT vocabularies for the tokenizer check and
#                the fine-tuning cuts of ../shared/data for e2e.
#   device:    scripts/gpu-visit.sh run [SECONDS]          (device tool: carry [".gpu/bundle.tar.xz"])
#                unpacks the bundle and runs the steps below, each under `timeout`, never past
#                SECONDS in all (default 480); logs in $OUT/<step>.log, a summary table last.
#
# Steps: env (GPU, driver, Python packages) -> kernels (test_cuda_kernels: every kernel against the
# CPU's) -> cudacpu (dump-step on CUDA against the CPU, fp32/bf16/fp16, two models made at pack time;
# numpy only) -> attention (Tensor Core and fp32 attention against PyTorch's SDPA, same shapes) -> cudnn
# (cuDNN's fused attention from PyTorch's libcudnn: test_cudnn_attention, which saves cuDNN's
# description of the GPU in cudnn_deviceprop.json for plans built here and checks the inference
# forward, the training forward and the backward, with and without dropout, against float64; then the inference forward
# against bertcc's kernels and SDPA; on a failure the test again with cuDNN's log in cudnn_dbg.log) -> model
# (dump-step --device cuda against PyTorch in float64, fp32 and bf16) -> gemm (the layer's GEMMs against
# cuBLASLt's other answers and bf16 outputs) -> gemmtune (GEMMs tuned into $OUT/gemm_tuning.json, bench
# without and with it) -> bench (bench/gpu.sh, the
# performance goals' shapes, bf16, without the torch.compile peer) -> e2e (tests/cuda/e2e.sh: the commands end to
# end on the GPU against the CPU; determinism and resume bit-exact) -> nccl (the NCCL communicator at
# world size 1) -> hf (AutoTokenizer on bertcc's directories;
# transformers' ELECTRA on bertcc's pre-training output) -> sanitizer (compute-sanitizer memcheck and
# racecheck on the attention kernels). Named in STEPS only: profile (bench/cuda/profile.sh: GPU time
# per operation), stack (convert --from pt on the machine's torch, ONNX exports in Python's
# onnxruntime), electra (ELECTRA-small against its PyTorch peer on the GPU), electra_glue (ELECTRA-small
# against BERT of its shape at equal pre-training time, then GLUE), scaling (data-parallel CPU
# scaling on the 16 cores, all-reduce against MPI_Allreduce), serve_load (dynamic batching of serve
# --device cuda under 64 clients), compile (one shape against torch.compile), parity (learning on the
# GPU against the CPU: tests/cuda/parity.sh), graphs (bench infer with and without --cuda-graphs). Exit 0 when every step that ran passed or skipped.
set -u
cmd="${1:-}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1

if [ "$cmd" = pack ]; then
  for b in bertcc libbertcc_cuda.so test_cuda_kernels test_cudnn_attention bertcc_cuda_attention_bench bertcc_cuda_gemm_bench; do
    [ -f "build/$b" ] || { echo "gpu-visit: build/$b is missing (build with the CUDA toolkit first)" >&2; exit 1; }
  done
  rm -rf .gpu/bundle .gpu/bundle.tar.xz
  bash ../shared/tools/device-bundle build/bertcc .gpu/bundle || exit 1
  # bertcc's CUDA module goes beside it (bertcc opens it from its own directory on --device cuda)
  cp build/libbertcc_cuda.so build/test_cuda_kernels build/test_cudnn_attention build/bertcc_cuda_attention_bench build/bertcc_cuda_gemm_bench .gpu/bundle/
  for b in libbertcc_cuda.so test_cuda_kernels test_cudnn_attention bertcc_cuda_attention_bench bertcc_cuda_gemm_bench; do  # their libraries are bertcc's or CUDA's
    missing=$(ldd "build/$b" | awk '/=> \//{print $3}' | while read -r l; do
      n=$(basename "$l"); case $n in libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda*|libcudart*|libcublas*|libnccl*) ;;
      *) [ -e ".gpu/bundle/lib/$n" ] || echo "$n" ;; esac; done)
    [ -z "$missing" ] || { echo "gpu-visit: $b needs libraries bertcc does not: $missing" >&2; exit 1; }
  done
  # built with -march=native here (an AMD EPYC lately), run on an Intel Xeon there: no AMD-only
  # instruction (SSE4a, CLZERO, MONITORX) may be in the binaries
  for b in bertcc libbertcc_cuda.so test_cuda_kernels test_cudnn_attention bertcc_cuda_attention_bench bertcc_cuda_gemm_bench; do
    n=$(objdump -d --no-show-raw-insn "build/$b" | grep -cE "[[:space:]](extrq|insertq|movntss|movntsd|clzero|monitorx|mwaitx)[[:space:]]")
    [ "$n" -eq 0 ] || { echo "gpu-visit: build/$b has $n AMD-only instructions: configure with -DBERTCC_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3" >&2; exit 1; }
  done
  # models and batches for the CUDA-against-CPU model check, made here so that it needs only numpy
  # there: the tiny odd-shaped model of check_dump_step.py (head size 12), and a small model with
  # head size 64 on a 16 x 128 batch (the Tensor Core attention's shared Philox draws)
  /usr/bin/python3 tests/torch/check_dump_step.py --bertcc build/bertcc --precision fp32 --workdir .gpu/bundle/tiny \
    > /dev/null || { echo "gpu-visit: check_dump_step.py failed here" >&2; exit 1; }
  mkdir -p .gpu/bundle/mini
  printf '%s' '{"vocab_size": 1000, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 256, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 128, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
    "model_type": "bert"}' > .gpu/bundle/mini/config.json
  /usr/bin/python3 -c 'print("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["w%d" % i for i in range(5, 1000)]))' \
    > .gpu/bundle/mini/vocab.txt  # vocab_size 1000 (init-model needs a vocabulary)
  build/bertcc init-model --config .gpu/bundle/mini/config.json --vocab .gpu/bundle/mini/vocab.txt \
    --output .gpu/bundle/mini/model --seed 3 > /dev/null &&
    build/bertcc random-batch --model .gpu/bundle/mini/model --output .gpu/bundle/mini/batch.h5 --batch 16 --seq 128 \
      --seed 4 > /dev/null || { echo "gpu-visit: could not make the bert-mini model and batch" >&2; exit 1; }
  mkdir -p .gpu/bundle/vocab
  cp ../shared/data/bert_vocab/bert-base-cased-vocab.txt ../shared/data/bert_vocab/bert-base-uncased-vocab.txt .gpu/bundle/vocab/ 2>/dev/null ||
    echo "gpu-visit: ../shared/data/bert_vocab not found: the AutoTokenizer step will be skipped" >&2
  # Open MPI's launcher, relocated (the GPU machine has no MPI): 2 ranks sharing the GPU in e2e,
  # the CPU scaling of the scaling step
  cp build/bertcc_allreduce_bench .gpu/bundle/ 2>/dev/null || true
  # wrk (Debian's, with its LuaJIT) for serve_load: Python's client threads share one interpreter
  # lock and limit the load they make (a mean batch of 5.7 of 32 with them)
  if command -v wrk > /dev/null; then
    bash ../shared/tools/device-bundle "$(command -v wrk)" .gpu/bundle > /dev/null || exit 1
  else
    echo "gpu-visit: no wrk here (Debian: wrk): serve_load will use Python clients" >&2
  fi
  sh scripts/mpi-bundle.sh .gpu/bundle || echo "gpu-visit: no Open MPI here: e2e's 2-rank case and scaling will not run" >&2
  # the fine-tuning cuts of ../shared/data for tests/cuda/e2e.sh (the GPU machine has no ../shared)
  ( . tests/train/common.sh; PY=/usr/bin/python3 make_ft_data ../shared/data .gpu/bundle/ftdata ) ||
    echo "gpu-visit: ../shared/data not found: e2e will not check fine-tuning" >&2
  # for the electra_glue and parity steps: make demo's corpus and vocabulary, GLUE's five dev/train sets
  if [ -d demo-out/corpus/train ] && [ -d ../shared/data/glue ]; then
    mkdir -p .gpu/bundle/demo .gpu/bundle/glue_data
    cp -r demo-out/corpus demo-out/vocab.txt .gpu/bundle/demo/ && cp -r ../shared/data/glue .gpu/bundle/glue_data/
  else
    echo "gpu-visit: no demo-out/corpus (make demo) or ../shared/data/glue: the electra_glue and parity steps will fail" >&2
  fi
  tar cJf .gpu/bundle.tar.xz -C .gpu bundle || exit 1
  rm -rf .gpu/bundle
  echo "gpu-visit: .gpu/bundle.tar.xz $(du -h .gpu/bundle.tar.xz | cut -f1) (carry it: the device call's limit is 64 MiB)"
  exit 0
fi

[ "$cmd" = run ] || { echo "usage: scripts/gpu-visit.sh pack | run [SECONDS] [STEP,STEP...]" >&2; exit 2; }
BUDGET="${2:-480}"
ONLY="${3:-}"  # a comma-separated list of steps to run (default: all but profile, stack, electra, compile)
OUT="${OUT:-$ROOT/gpu-visit-out}"
mkdir -p "$OUT"
[ -f .gpu/bundle.tar.xz ] || { echo "gpu-visit: .gpu/bundle.tar.xz is missing: run 'scripts/gpu-visit.sh pack' here first" >&2; exit 1; }
tar xJf .gpu/bundle.tar.xz -C .gpu || exit 1
# shellcheck disable=SC1091
. .gpu/bundle/env.sh
# shellcheck disable=SC1091
[ -f .gpu/bundle/mpi/env.sh ] && . .gpu/bundle/mpi/env.sh
B=.gpu/bundle
START=$(date +%s)
STATUS=0
: > "$OUT/summary.txt"

# step NAME MAX_SECONDS COMMAND: runs COMMAND (sh -c) under a timeout of MAX_SECONDS or the time
# left, logs to $OUT/NAME.log, records "NAME rc seconds" (rc 77 skipped, 124 timed out).
step() {
  name=$1; max=$2; shift 2
  if [ -n "$ONLY" ]; then
    case ",$ONLY," in *",$name,"*) ;; *) return ;; esac
  else
    case $name in profile|stack|electra|electra_glue|scaling|serve_load|compile|e2e_late|parity|graphs) return ;; esac  # asked for by name only
  fi
  left=$((BUDGET - ($(date +%s) - START)))
  [ "$left" -lt "$max" ] && max=$left
  if [ "$max" -lt 15 ]; then
    printf "%-10s %s\n" "$name" "not run: out of time" >> "$OUT/summary.txt"
    return
  fi
  t0=$(date +%s)
  timeout -k 5 "$max" sh -c "$*" > "$OUT/$name.log" 2>&1
  rc=$?
  dt=$(($(date +%s) - t0))
  case $rc in
    0) res=passed ;; 77) res=skipped ;; 124|137) res="timed out after ${max}s"; STATUS=1 ;; *) res="FAILED (exit $rc)"; STATUS=1 ;;
  esac
  printf "%-10s %-26s %4ss  %s\n" "$name" "$res" "$dt" "$OUT/$name.log" >> "$OUT/summary.txt"
}

step env 30 "nvidia-smi; nvcc --version 2>/dev/null | tail -1; python3 -c \"
import importlib
for m in ('torch', 'transformers', 'tokenizers', 'h5py', 'numpy', 'onnxruntime'):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, 'missing:', e)
\"; lscpu | grep -E 'Model name|^CPU\\(s\\)'"
step kernels 150 "$B/test_cuda_kernels"
step cudacpu 150 "for m in tiny mini; do python3 tests/cuda/check_model.py $B/bertcc $B/\$m/model $B/\$m/batch.h5 $OUT/cudacpu_\$m || exit \$?; done"
step attention 180 "$B/bertcc_cuda_attention_bench --iters 20 && BERTCC_ATTENTION_SKIP_PADDING=0 $B/bertcc_cuda_attention_bench --iters 20 --precisions bf16 && $B/bertcc_cuda_attention_bench --iters 20 --precisions bf16 --dropout 0 && BERTCC_ATTENTION_FWD_MIN_BLOCKS=4 $B/bertcc_cuda_attention_bench --iters 20 --precisions bf16 && for k in 0 1; do BERTCC_ATTENTION_SKIP_PADDING=\$k $B/bertcc_cuda_attention_bench --iters 20 --precisions bf16 --padding 0.5 || exit 1; done && $B/bertcc_cuda_attention_bench --iters 20 --precisions bf16 --padding 0.5 --varlen && BERTCC_ATTENTION_FWD_MIN_BLOCKS=4 $B/bertcc_cuda_attention_bench --iters 20 --precisions bf16 --padding 0.5 --varlen && python3 bench/cuda/attention_peer.py --iters 20"
# gemm: the encoder layer's GEMMs as bertcc runs them, against cuBLASLt's other heuristic answers and
# bf16 outputs (bench/cuda/gemm_bench.cpp: is the GEMM time, two thirds of a step, the algorithm's or
# the fp32 outputs'?)
# BERTCC_CUDNN_LIB: PyTorch's libcudnn.so.9 (none: skipped). It opens its sub-libraries from its own
# folder (RUNPATH $ORIGIN); the folder on the loader's path too, should a wheel lack that
step cudnn 120 "L=\$(python3 scripts/find-torch-cudnn.py) || exit 77; P=\$(python3 scripts/find-torch-cudnn.py --ld-path); echo \"cuDNN \$L; added to LD_LIBRARY_PATH: \$P\"; export BERTCC_CUDNN_LIB=\$L LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}\$P; \
  $B/test_cudnn_attention --save-deviceprop $OUT/cudnn_deviceprop.json || { CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$OUT/cudnn_dbg.log $B/test_cudnn_attention > /dev/null; exit 1; }; \
  $B/bertcc_cuda_attention_bench --cudnn --precisions '' --iters 20 && python3 bench/cuda/attention_peer.py --precisions '' --infer --iters 20"
# cudnn_hook: BERTCC_ATTENTION=cudnn through the model: test_cuda_kernels' cuDNN
# group (the backend's padded attention with cuDNN against bertcc's kernels, bf16 hs 64/128, dropout
# 0.1/0, inference; fp32 bertcc's bits with the switch on), then bench train (bert-base 32 x 512) and
# infer (bert-large 64 x 384), bf16, --padded (random batches have no padding and would otherwise be
# packed: varlen attention, which cuDNN does not take here), without and with the switch.
step cudnn_hook 150 "L=\$(python3 scripts/find-torch-cudnn.py) || exit 77; P=\$(python3 scripts/find-torch-cudnn.py --ld-path); echo \"cuDNN \$L; added to LD_LIBRARY_PATH: \$P\"; export BERTCC_CUDNN_LIB=\$L LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}\$P; \
  BERTCC_ATTENTION=cudnn $B/test_cuda_kernels --filter attention_cudnn; k=\$?; \
  for a in bertcc cudnn; do echo \"== BERTCC_ATTENTION=\$a\"; \
    BERTCC_ATTENTION=\$a $B/bertcc bench train --device cuda --config bert-base --batch 32 --seq 512 --precision bf16 --padded --steps 5 --warmup 2 || exit 1; \
    BERTCC_ATTENTION=\$a $B/bertcc bench infer --device cuda --config bert-large --batch 64 --seq 384 --precision bf16 --padded --steps 5 --warmup 2 || exit 1; done; exit \$k"
step gemm 90 "$B/bertcc_cuda_gemm_bench --iters 10"
step model 150 "python3 -c 'import torch, h5py' || exit 77; for p in fp32 bf16; do python3 tests/torch/check_dump_step.py --bertcc $B/bertcc --precision \$p --device cuda --workdir $OUT/model_\$p || exit 1; done"
# gemmtune: GEMMs tuned, not guessed (bench/cuda/gemm_tune.sh): the layer's products
# and the model's own GEMMs tuned into $OUT/gemm_tuning.json, then bench train (bert-large 64 x 128)
# and infer (64 x 384) without the file and with it. About 70 s by estimate; 90 at most
step gemmtune 90 "sh bench/cuda/gemm_tune.sh $B/bertcc $B/bertcc_cuda_gemm_bench $OUT"
step bench 300 "ERRLOG=$OUT/bench.err COMPILE=0 STEPS=10 sh bench/gpu.sh $B/bertcc"
# e2e: the commands end to end on the GPU against the CPU (pretrain, resume, checkpoints across
# devices, ELECTRA, finetune every head, inference commands, serve), determinism and resume bit-exact
step e2e 360 "FT_DATA=$B/ftdata sh tests/cuda/e2e.sh $B/bertcc $OUT/e2e cuda"
# e2e_late (by name only): e2e's last sections alone (fine-tuning every head, inference, serve, a
# GPU past the last refused), for a call whose budget ends before e2e's 360 s do
step e2e_late 300 "E2E_ONLY=finetune,past FT_DATA=$B/ftdata sh tests/cuda/e2e.sh $B/bertcc $OUT/e2e_late cuda"
# nccl: the NCCL communicator at world size 1 (tests/cuda/nccl.sh: the same bytes as without it, in buckets
# during backward, small buckets, no overlap; 16-bit wires)
step nccl 160 "sh tests/cuda/nccl.sh $B/bertcc $OUT/nccl"
step hf 120 "python3 tests/hf/check_autotokenizer.py $B/bertcc tests/tokenizer/adversarial.txt $OUT/autotok $B/vocab/bert-base-uncased-vocab.txt $B/vocab/bert-base-cased-vocab.txt; a=\$?; python3 tests/hf/check_electra_transformers.py $B/bertcc $OUT/electra_hf; e=\$?; echo autotokenizer \$a electra \$e; [ \$a -eq 0 ] || [ \$a -eq 77 ] || exit 1; [ \$e -eq 0 ] || [ \$e -eq 77 ] || exit 1"
# stack: the GPU machine's Python stack on bertcc's files, no GPU needed: `convert --from pt` on
# torch 2.11's files, the ONNX exports in Python's onnxruntime
step stack 150 "python3 tests/torch/check_convert.py $B/bertcc $OUT/convert $B/vocab/bert-base-uncased-vocab.txt && BERTCC_ORT=python python3 tests/onnx/check_onnx.py $B/bertcc $B/vocab/bert-base-uncased-vocab.txt $OUT/onnx"
# electra: ELECTRA-small pre-training against the PyTorch peer, both on the GPU
step electra 150 "DEVICE=cuda PYTHON=python3 OUT=$OUT/electra.jsonl sh bench/electra_peer.sh $B/bertcc"
# graphs: bench infer with and without --cuda-graphs (bf16): one launch per forward instead of one per
# kernel, where launches matter (batch 1) and where they should not (BERT-large 64 x 384)
step graphs 150 "for c in 'bert-base 1 128' 'bert-base 8 128' 'bert-large 64 384'; do set -- \$c; for g in '' --cuda-graphs; do \
$B/bertcc bench infer --config \$1 --batch \$2 --seq \$3 --precision bf16 --device cuda --steps 20 --warmup 3 \$g | tail -1 || exit 1; done; done"
# parity: the learning checks (tests/cuda/parity.sh): bert-mini pre-trained 300 steps on the demo
# corpus on the GPU and on the CPU (mean loss of the last 50 steps within 1 %, bf16 and fp32), kill -9
# and resume on the GPU (byte-identical), SST-2 from one checkpoint on both (dev accuracy within 0.5
# points, fp32 and bf16); the CPU runs on the machine's 16 cores
step parity 420 "THREADS=16 PYTHON=python3 sh tests/cuda/parity.sh $B/bertcc $OUT/parity $B/demo/corpus $B/demo/vocab.txt \
$B/glue_data/glue/SST-2 cuda"
# electra_glue: ELECTRA against BERT at a GPU's budget: ELECTRA-small (12 layers, hidden 256,
# embedding 128, generator 1/4) against a BERT of its shape, 150 s of pre-training each on the demo
# corpus, then MRPC, RTE, CoLA and STS-B with 3 seeds each (bench/electra_vs_bert.sh); about 8 minutes
step electra_glue 540 "CORPUS=$B/demo/corpus VOCAB=$B/demo/vocab.txt GLUE_DATA=$B/glue_data DEVICE=cuda PYTHON=python3 \
LAYERS=12 EMB=128 BATCH=128 BUDGET=150 JOBS=4 THREADS=4 OUT=$OUT/electra_glue sh bench/electra_vs_bert.sh $B/bertcc"
# scaling: the CPU scaling on the machine's 16 cores: bert-base seq 128 bf16, 1 rank x 16
# threads against 2/4/8 ranks x 16/ranks threads (bench/data_parallel.sh), and bertcc's all-reduce
# against MPI_Allreduce at 2, 4 and 8 ranks
step scaling 400 "for np in 2 4 8; do VOCAB=$B/vocab/bert-base-uncased-vocab.txt PYTHON=python3 WORK=/tmp/dp_\$np \
sh bench/data_parallel.sh $B/bertcc bert-base \$np 16 8 8 || exit 1; done; for np in 2 4 8; do \
mpirun --bind-to none -np \$np $B/bertcc_allreduce_bench --mb 1,25,418 --iters 5 || exit 1; done"
# serve_load: dynamic batching on the GPU: serve --device cuda with a bert-base classifier,
# 64 connections for 15 s on /v1/classify and /v2 infer, --max-batch-size 1 against 32; the load from
# the bundle's wrk (4 threads), else from Python clients
step serve_load 150 "PATH=$B:\$PATH DEVICE=cuda WRK_THREADS=4 VOCAB=$B/vocab/bert-base-uncased-vocab.txt PYTHON=python3 \
WORK=/tmp/serve_load sh bench/serve.sh $B/bertcc 15 64 bert-base"
# compile: one shape against transformers + torch.compile (compiling takes minutes)
step compile 300 "CASES='train bert-large 64 128' STEPS=10 sh bench/gpu.sh $B/bertcc"
# profile: where a bert-large training step's GPU time goes (bench/cuda/profile.sh; Nsight Systems)
step profile 200 "sh bench/cuda/profile.sh $B/bertcc $OUT/profile && sh bench/cuda/profile.sh $B/bertcc $OUT/profile512 train --config bert-large --batch 16 --seq 512 --precision bf16"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$CS" ]; then
  step sanitizer 150 "$CS --tool memcheck --error-exitcode 3 $B/test_cuda_kernels --filter attention && $CS --tool racecheck --error-exitcode 3 $B/test_cuda_kernels --filter attention"
else
  printf "%-10s %s\n" sanitizer "not run: no compute-sanitizer" >> "$OUT/summary.txt"
fi

echo "== kernel failures"; grep -h "FAIL\|ERROR" "$OUT/kernels.log" 2>/dev/null | head -20
echo "== attention (ms, TFLOP/s)"
python3 - "$OUT/attention.log" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    print(f"{r['impl']:10s} {r['precision']:5s} B{r['B']} T{r['T']} NH{r['NH']} HS{r['HS']} pad {r.get('padding', 0.125):.2f}: fwd {r['fwd_ms']:.3f} ms "
          f"({r['fwd_tflops']:.1f}), bwd {r['bwd_ms']:.3f} ms ({r['bwd_tflops']:.1f})")
PY
echo "== cudnn (forward, training forward and backward against float64; inference forward, bf16: ms, TFLOP/s, max |cudnn - bertcc|)"
grep -hE "^(libcudnn|ok|FAIL|SKIPPED|cudnnCreate|device prop|plan from)|unavailable|differ" "$OUT/cudnn.log" 2>/dev/null |
  grep -vE "^ok   .* graph B=" | head -32  # the descriptor checks that passed are the CPU machine's too
python3 - "$OUT/cudnn.log" <<'PY' 2>/dev/null
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        d = f", diff {r['max_abs_diff']:.3g}" if "max_abs_diff" in r else ""
        print(f"{r['impl']:17s} B{r['B']} T{r['T']} NH{r['NH']} HS{r['HS']}: fwd {r['fwd_ms']:.3f} ms ({r['fwd_tflops']:.1f}){d}")
PY
echo "== cudnn_hook (BERTCC_ATTENTION=cudnn in the model: the checks, then seq/s without / with, --padded)"
grep -hE "^attention cudnn|FAIL|ERROR|^attention B=" "$OUT/cudnn_hook.log" 2>/dev/null | head -24
python3 - "$OUT/cudnn_hook.log" <<'PY' 2>/dev/null
import json, sys
impl, res = None, {}
for l in open(sys.argv[1]):
    if l.startswith("== BERTCC_ATTENTION="): impl = l.split("=")[-1].strip()
    elif l.startswith("{") and impl:
        r = json.loads(l)
        res.setdefault((r.get("mode", "?"), r.get("batch", r.get("B")), r.get("seq")), {})[impl] = r["seq_per_s"]
for k, v in res.items():
    a, c = v.get("bertcc"), v.get("cudnn")
    ratio = f"{c / a:.3f}x" if a and c else "-"
    print(f"{k[0]:6s} B{k[1]} T{k[2]}: bertcc {a} seq/s, cudnn {c} seq/s ({ratio})")
PY
echo "== gemm (ms as bertcc runs it / best heuristic answer / bf16 output)"
python3 - "$OUT/gemm.log" <<'PY' 2>/dev/null
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if "product" in r and "ms" in r:
        print(f"{r['tokens']:6d} {r['product']:24s} {r['ms']:.3f} ({r['tflops']:.0f} TFLOP/s) / {r['best_ms']:.3f} (answer {r['best_answer']} of {r['answers']}) / {r['bf16_out_ms']:.3f}")
    elif "layer_ms" in r or "probe_tflops" in r:
        print(r)
PY
echo "== gemmtune (first answer / tuned ms per product; bench seq/s without / with the file)"
python3 - "$OUT/gemmtune.log" <<'PY' 2>/dev/null
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{") and "layer_first_ms" in l:
        print(l.strip())
    elif l.startswith("{") and "first_ms" in l:
        r = json.loads(l)
        print(f"{r['tokens']:6d} {r['product']:34s} {r['first_ms']:.3f} / {r['tuned_ms']:.3f} ms ({r['first_tflops']:.0f} / {r['tuned_tflops']:.0f} TFLOP/s, answer {r['answer']} of {r['answers']})")
    elif l.startswith(("train ", "infer ")) and "{" in l:
        tag, _, j = l.partition("{")
        r = json.loads("{" + j)
        print(f"{tag.strip():20s} {r['seq_per_s']:.1f} seq/s")
    elif "GEMMs on" in l:
        print(l.strip())
PY
echo "== bench"; grep -E "^(mode|train|squad|infer)" "$OUT/bench.log" 2>/dev/null
echo "== e2e"; grep -E "^(FAIL|PASS|e2e)" "$OUT/e2e.log" 2>/dev/null | head -20
echo "== graphs (bench infer, bf16: ms per forward without / with --cuda-graphs)"
python3 - "$OUT/graphs.log" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    print(f"{r['config']:10s} {r['batch']:3d} x {r['seq']:3d}  graphs {'on ' if r.get('cuda_graphs') else 'off'}  {r['step_ms']:.3f} ms  {r['seq_per_s']:.0f} seq/s")
PY
echo "== parity"; grep -E "^(ok|FAIL|parity)" "$OUT/parity.log" 2>/dev/null
echo "== model"; grep -hiE "worst|fail|mismatch|ok" "$OUT/model.log" 2>/dev/null | tail -6
echo "== summary (budget ${BUDGET}s, used $(($(date +%s) - START))s)"; cat "$OUT/summary.txt"
exit $STATUS
