#!/bin/sh
# Tuned GEMMs on the GPU machine (src/cuda/gemm_tuning.h), gpu-visit's gemmtune step:
#  1. bertcc_cuda_gemm_bench --tune: the encoder layer's products at BERT-base and BERT-large widths,
#     8192 tokens (seq 128 x 64, seq 512 x 16), the first answer against the tuned one per product;
#  2. `bench train` and `bench infer` tune the model's own GEMMs into the same file
#     (BERTCC_GEMM_TUNE=1: its heads and alignments are the bench's only by chance);
#  3. each bench again without the file and with it, one shape each.
# The file is OUTDIR/gemm_tuning.json, kept for later runs (BERTCC_GEMM_TUNING=FILE). About 70 s on
# an H200 by estimate (not yet run): tuning about 25 s, four timed bench runs of about 10 s.
# Usage: bench/cuda/gemm_tune.sh BERTCC GEMM_BENCH OUTDIR
set -u
B="$1"; GB="$2"; OUT="$3"
T="$OUT/gemm_tuning.json"
mkdir -p "$OUT" && rm -f "$T"
"$GB" --tune "$T" --tokens 8192 --hidden 768 --intermediate 3072 || exit 1
"$GB" --tune "$T" --tokens 8192 --hidden 1024 --intermediate 4096 || exit 1
# bench LABEL FILE TUNE STEPS MODE BATCH SEQ: one bert-large bench run (bf16), its last line labelled
bench() {
  label=$1; file=$2; tune=$3; steps=$4
  BERTCC_GEMM_TUNING="$file" BERTCC_GEMM_TUNE="$tune" "$B" bench "$5" --config bert-large --batch "$6" --seq "$7" \
    --device cuda --precision bf16 --steps "$steps" --warmup 2 > "$OUT/gemm_tune_bench.out" ||
    { echo "gemm_tune: bench $label failed" >&2; exit 1; }
  echo "$label $(tail -1 "$OUT/gemm_tune_bench.out")"
}
bench "tune train" "$T" 1 1 train 64 128
bench "tune infer" "$T" 1 1 infer 64 384
for run in 1 2; do  # twice each, alternating: the spread between runs is the noise
  bench "train heuristic $run" "" 0 8 train 64 128
  bench "train tuned $run" "$T" 0 8 train 64 128
done
bench "infer heuristic" "" 0 8 infer 64 384
bench "infer tuned" "$T" 0 8 infer 64 384
python3 - "$T" <<'PY' || true
import json, sys
t = json.load(open(sys.argv[1]))
g = t["gemms"]
print(f"{sys.argv[1]}: {len(g)} GEMMs on {t['device']['name']}, cuBLASLt {t['device']['cublaslt_version']}; "
      f"{sum(e['rank'] != 0 for e in g)} not the first answer, {sum(e['rejected'] for e in g)} answers rejected")
PY
