#!/bin/sh
# The fp32 row kernel's AVX2 micro-tiles (src/kernels/gemm_rows.cpp, micro_avx2_y<R>) keep their
# 2R sums in ymm registers in a portable build: OBJ is that file compiled for generic x86-64
# (-march=x86-64, as BERTCC_NATIVE=OFF builds it), where the AVX2 micro-tiles are functions of their
# own, not inlined into a caller compiled for AVX2. There GCC once kept the sums in memory (72 to
# 144 ymm loads and stores on the stack in each of micro_avx2_y<3> to <6>), and fp32 inference on
# an AVX2 CPU took 2.1x as long as with them in registers (docs/performance.md, "The row kernel in
# a portable build"). Fails where any micro_avx2_y<R> moves a ymm register to or from the stack.
#   tests/codegen/row_kernel_registers.sh OBJ
set -eu
OBJ="$1"
command -v objdump > /dev/null || { echo "row_kernel_registers: FAIL: objdump not found (Debian: binutils)"; exit 1; }
export LC_ALL=C
objdump -d --no-show-raw-insn -C "$OBJ" | awk '
  /^[0-9a-f]+ <.*>:$/ {
    name = ""
    if (match($0, /micro_avx2_y<[0-9]+>/)) {
      name = substr($0, RSTART, RLENGTH)
      if (match($0, /\[clone [^]]*\]/)) name = name " " substr($0, RSTART, RLENGTH)
      seen[name] = 1; n[name] += 0
    }
    next
  }
  name != "" && /%ymm/ && /\(%(rsp|rbp)\)/ { n[name]++ }
  END {
    bad = 0; count = 0
    for (f in seen) { count++; printf "%s: %d ymm moves to or from the stack\n", f, n[f]; if (n[f] > 0) bad = 1 }
    if (count == 0) { print "row_kernel_registers: FAIL: no micro_avx2_y<R> in the object (inlined, renamed?)"; exit 1 }
    if (bad) { print "row_kernel_registers: FAIL: a micro-tile keeps its sums in memory"; exit 1 }
    print "row_kernel_registers: every micro-tile keeps its sums in registers"
  }'
