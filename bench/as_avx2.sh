#!/bin/sh
# Run a command as it would run on an AVX2-only x86 CPU (AVX2 + FMA; no AVX-512, AVX-VNNI,
# AVX512-BF16 or AMX), on a CPU that has more: an emulation for benchmarks, so that bertcc and its
# peers (ONNX Runtime's MLAS, PyTorch's FBGEMM and oneDNN, oneDNN under bertcc) all pick the kernels
# an AVX2-only CPU would run, on the same cores in the same run.
#   bench/as_avx2.sh CMD [ARGS...]
# Under gdb (bench/as_avx2_cpu.py), every cpuid and xgetbv the program and its libraries execute
# answers as an AVX2-only CPU's, so oneDNN finds AVX2 by itself (ONEDNN_MAX_CPU_ISA is not set);
# glibc's string functions follow GLIBC_TUNABLES. What it cannot change: code compiled for the
# host (-march=native) keeps the host's instructions: build bertcc for an AVX2 CPU (cmake
# -DBERTCC_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=znver3) to compare like with like. The CPU's caches,
# clocks and execution ports stay this CPU's: the ratios between engines are the estimate, not the
# speeds. AS_AVX2_VERBOSE=1 prints, on stderr, where the breakpoints went and how many answers
# it gave. Exit status: the program's; 125 where the breakpoints could not all be placed.
set -eu
[ $# -ge 1 ] || { echo "usage: bench/as_avx2.sh CMD [ARGS...]" >&2; exit 2; }
command -v gdb > /dev/null || { echo "as_avx2.sh: gdb not found (Debian: gdb)" >&2; exit 1; }
command -v objdump > /dev/null || { echo "as_avx2.sh: objdump not found (Debian: binutils)" >&2; exit 1; }
HERE="$(cd "$(dirname "$0")" && pwd)"
cmd="$(command -v "$1")" || { echo "as_avx2.sh: $1: command not found" >&2; exit 127; }
shift
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX512ER,-AVX512PF,-AVX_VNNI"
exec gdb -q -nx -batch-silent -x "$HERE/as_avx2_cpu.py" --args "$cmd" "$@"
