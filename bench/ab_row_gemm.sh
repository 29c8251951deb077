#!/bin/sh
# The fp32 row kernel (src/kernels/gemm_rows.cpp: what AVX2 CPUs run for fp32 linear layers) at
# two revisions, A against B, in one process: each copy compiled into its own namespace, both
# called in turn on bert-base's four linear layers, best of ROUNDS x 5 calls each. With warm
# weights (one copy, in cache) and cold ones (12 copies used in turn, streamed from memory as the
# model streams its layers'). Two binaries run one after the other on a shared machine differ by
# more than a few per cent from one minute to the next; calls interleaved in one process share
# that drift. Exit 1 where A's and B's outputs are not the same bits.
#   bench/ab_row_gemm.sh REV_A [REV_B]     (a git revision; REV_B by default the working tree)
#   env: THREADS (2), ROUNDS (6), ROWS (1024: batch 8 x 128), CXX (g++),
#        CXXFLAGS (-O3 -march=native; -march=znver3 for an AVX2 CPU's code on a newer one)
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then echo "usage: bench/ab_row_gemm.sh REV_A [REV_B]" >&2; exit 2; fi
HERE="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
F=src/kernels/gemm_rows.cpp
git -C "$HERE" show "$1:$F" > "$WORK/a.cpp" || { echo "ab_row_gemm.sh: no $F at $1" >&2; exit 1; }
if [ $# -eq 2 ]; then
  git -C "$HERE" show "$2:$F" > "$WORK/b.cpp" || { echo "ab_row_gemm.sh: no $F at $2" >&2; exit 1; }
else
  cp "$HERE/$F" "$WORK/b.cpp"
fi
CXX="${CXX:-g++}"; CXXFLAGS="${CXXFLAGS:--O3 -march=native}"
for v in a b; do
  sed "s/^namespace bertcc::kernels {/namespace bertcc::kernels::ab_$v {/" "$WORK/$v.cpp" > "$WORK/${v}_ns.cpp"
  grep -q "^namespace bertcc::kernels::ab_$v {" "$WORK/${v}_ns.cpp" || { echo "ab_row_gemm.sh: $v: no 'namespace bertcc::kernels {' line" >&2; exit 1; }
  # shellcheck disable=SC2086
  $CXX -std=c++17 $CXXFLAGS -fopenmp -I"$HERE/include" -I"$HERE/src" -c "$WORK/${v}_ns.cpp" -o "$WORK/$v.o"
done
# shellcheck disable=SC2086
$CXX -std=c++17 $CXXFLAGS -fopenmp "$HERE/bench/ab/row_gemm_ab.cpp" "$WORK/a.o" "$WORK/b.o" -o "$WORK/ab"
echo "ab_row_gemm: A $1, B ${2:-working tree}; $(lscpu | sed -n 's/^Model name: *//p'); CXXFLAGS $CXXFLAGS"
OMP_NUM_THREADS="${THREADS:-2}" "$WORK/ab" "${ROWS:-1024}" "${ROUNDS:-6}"
