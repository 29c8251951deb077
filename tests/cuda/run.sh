#!/bin/sh
# The GPU test suite, for the GPU machine (the bundled binaries, the CUDA driver, Python with numpy;
# torch and h5py for the PyTorch comparison):
#   1. test_cuda_kernels: every CUDA kernel against the CPU kernel on random odd sizes;
#   2. the same under compute-sanitizer memcheck (all kernels) and racecheck (the kernels that share
#      memory between threads), when the toolkit's compute-sanitizer is there;
#   3. the model: tests/torch/check_dump_step.py --device cuda (fp32, bf16: against PyTorch in
#      float64), check_electra_pretrain.py and check_joint_qa.py --device cuda when torch and h5py
#      import, then tests/cuda/check_model.py (CUDA against CPU) on its
#      model and batch, or on MODEL_DATA (a directory with model/ and batch.h5 made elsewhere by
#      check_dump_step.py);
#   4. tests/cuda/nccl.sh: the NCCL communicator at world size 1 (no mpirun needed).
# Exit 0 when everything passed, 77 when there is no GPU, 1 otherwise. Logs go to OUT.
#   tests/cuda/run.sh BIN_DIR OUT     (BIN_DIR holds test_cuda_kernels and bertcc: build/ or a bundle)
set -u
BIN="${1:?usage: tests/cuda/run.sh BIN_DIR OUT}"; OUT="${2:?usage: tests/cuda/run.sh BIN_DIR OUT}"
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
T="$BIN/test_cuda_kernels"
"$T" > "$OUT/kernels.log" 2>&1; rc=$?
cat "$OUT/kernels.log"
[ $rc -eq 77 ] && exit 77
status=$rc
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$CS" ]; then
  echo "compute-sanitizer not found: memcheck and racecheck not run"
else
  "$CS" --tool memcheck --leak-check full --error-exitcode 3 "$T" > "$OUT/memcheck.log" 2>&1; m=$?
  echo "memcheck: exit $m ($OUT/memcheck.log)"; tail -3 "$OUT/memcheck.log"
  [ $m -ne 0 ] && status=1
  for f in attention xent optim layernorm gemm gumbel; do
    "$CS" --tool racecheck --error-exitcode 3 "$T" --filter $f > "$OUT/racecheck_$f.log" 2>&1; r=$?
    echo "racecheck $f: exit $r"; tail -2 "$OUT/racecheck_$f.log"
    [ $r -ne 0 ] && status=1
  done
fi
if [ -x "$BIN/bertcc" ]; then
  data="${MODEL_DATA:-}"
  if "$PY" -c "import torch, h5py" 2> /dev/null; then
    for p in fp32 bf16; do
      "$PY" "$HERE/../torch/check_dump_step.py" --bertcc "$BIN/bertcc" --precision $p --device cuda \
        --workdir "$OUT/torch_$p" > "$OUT/torch_$p.log" 2>&1; r=$?
      echo "check_dump_step --device cuda $p: exit $r"; tail -2 "$OUT/torch_$p.log"
      [ $r -ne 0 ] && status=1
    done
    data="$OUT/torch_fp32"
    for p in fp32 bf16; do  # ELECTRA's joint step (generator, sampling, discriminator, shared embeddings)
      "$PY" "$HERE/../torch/check_electra_pretrain.py" --bertcc "$BIN/bertcc" --precision $p --device cuda \
        --workdir "$OUT/electra_$p" > "$OUT/electra_$p.log" 2>&1; r=$?
      echo "check_electra_pretrain --device cuda $p: exit $r"; tail -2 "$OUT/electra_$p.log"
      [ $r -ne 0 ] && status=1
      "$PY" "$HERE/../torch/check_joint_qa.py" --bertcc "$BIN/bertcc" --precision $p --device cuda \
        --workdir "$OUT/joint_qa_$p" > "$OUT/joint_qa_$p.log" 2>&1; r=$?
      echo "check_joint_qa --device cuda $p: exit $r"; tail -2 "$OUT/joint_qa_$p.log"
      [ $r -ne 0 ] && status=1
    done
  fi
  sh "$HERE/nccl.sh" "$BIN/bertcc" "$OUT/nccl" > "$OUT/nccl.log" 2>&1; r=$?
  echo "nccl.sh: exit $r"; tail -4 "$OUT/nccl.log"
  [ $r -ne 0 ] && [ $r -ne 77 ] && status=1
  if [ -n "$data" ]; then
    "$PY" "$HERE/check_model.py" "$BIN/bertcc" "$data/model" "$data/batch.h5" "$OUT/model" > "$OUT/model.log" 2>&1; r=$?
    cat "$OUT/model.log"
    [ $r -ne 0 ] && status=1
  else
    echo "model checks not run: no torch+h5py here and no MODEL_DATA"
  fi
fi
exit $status
