#!/bin/sh
# The GPU test suite, for the GPU machine (it needs only the bundled binaries and the CUDA driver):
#   1. test_cuda_kernels: every CUDA kernel against the CPU kernel on random odd sizes;
#   2. the same under compute-sanitizer memcheck (all kernels) and racecheck (the kernels that share
#      memory between threads: attention, cross-entropy, optimizers, LayerNorm), when the toolkit's
#      compute-sanitizer is there.
# Exit 0 when everything passed, 77 when there is no GPU, 1 otherwise. Logs go to OUT.
#   tests/cuda/run.sh BIN_DIR OUT     (BIN_DIR holds test_cuda_kernels, e.g. build/ or a device bundle)
set -u
BIN="${1:?usage: tests/cuda/run.sh BIN_DIR OUT}"; OUT="${2:?usage: tests/cuda/run.sh BIN_DIR OUT}"
mkdir -p "$OUT"
T="$BIN/test_cuda_kernels"
"$T" > "$OUT/kernels.log" 2>&1; rc=$?
cat "$OUT/kernels.log"
[ $rc -eq 77 ] && exit 77
status=$rc
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$CS" ]; then
  echo "compute-sanitizer not found: memcheck and racecheck not run"
  exit $status
fi
"$CS" --tool memcheck --leak-check full --error-exitcode 3 "$T" > "$OUT/memcheck.log" 2>&1; m=$?
echo "memcheck: exit $m ($(grep -c 'Invalid\|Leaked' "$OUT/memcheck.log") reports; $OUT/memcheck.log)"
tail -3 "$OUT/memcheck.log"
[ $m -ne 0 ] && status=1
for f in attention xent optim layernorm; do
  "$CS" --tool racecheck --error-exitcode 3 "$T" --filter $f > "$OUT/racecheck_$f.log" 2>&1; r=$?
  echo "racecheck $f: exit $r"
  tail -2 "$OUT/racecheck_$f.log"
  [ $r -ne 0 ] && status=1
done
exit $status
