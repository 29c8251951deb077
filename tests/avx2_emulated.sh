#!/bin/sh
# The unit tests, and bertcc's start-up choices, as on an AVX2-only CPU (no AVX-512, AVX-VNNI,
# AVX512-BF16 or AMX), whatever CPU runs them: bench/as_avx2.sh answers every cpuid and xgetbv as
# such a CPU's, so oneDNN, bertcc's kernel choice and --precision auto all take the AVX2 paths (the
# batch-invariance tests then run on bertcc's row kernel, as on an AVX2-only machine). On an
# AVX2-only CPU it is a second run of the unit tests. Skipped (exit 77, said) where gdb is missing
# or ptrace is not permitted.
#   tests/avx2_emulated.sh BERTCC BERTCC_TESTS WORK
set -eu
B="$1"; T="$2"; WORK="$3"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
command -v gdb > /dev/null || { echo "avx2_emulated: SKIPPED: gdb not found (Debian: gdb)"; exit 77; }
command -v objdump > /dev/null || { echo "avx2_emulated: SKIPPED: objdump not found (Debian: binutils)"; exit 77; }
export LC_ALL=C
unset ONEDNN_MAX_CPU_ISA  # the emulation alone must bring oneDNN to AVX2
# LeakSanitizer cannot run under ptrace (a sanitized build's ctest)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
gdb -q -nx -batch -ex 'python import gdb' > "$WORK.probe" 2>&1 ||
  { echo "avx2_emulated: SKIPPED: this gdb has no Python (Debian: gdb, not gdb-minimal)"; exit 77; }
gdb -q -nx -batch -ex run --args /bin/true > "$WORK.probe" 2>&1 || true
grep -q "exited normally" "$WORK.probe" || {
  echo "avx2_emulated: SKIPPED: gdb cannot run a program here (ptrace not permitted?): $(tail -1 "$WORK.probe")"
  exit 77
}
rm -rf "$WORK"; mkdir -p "$WORK"
export XDG_CACHE_HOME="$WORK/cache"  # where as_avx2 keeps each library's cpuid/xgetbv addresses
fail() { echo "avx2_emulated: FAIL: $*"; exit 1; }

# the start-up lines: oneDNN held to AVX2, fp32 for --precision auto, the AVX2 int8 kernel and
# its 7-bit activations (--int8-activation-bits auto)
AS_AVX2_VERBOSE=1 "$HERE/bench/as_avx2.sh" "$B" bench infer --config bert-tiny --batch 1 --seq 8 --steps 1 \
  --warmup 0 --threads 1 > "$WORK/auto.txt" 2>&1 || fail "bench infer under the emulation: $(tail -3 "$WORK/auto.txt")"
n=$(sed -n 's/^as_avx2: \([0-9]*\) cpuid\/xgetbv answers given.*/\1/p' "$WORK/auto.txt")
[ "${n:-0}" -gt 0 ] || fail "no cpuid or xgetbv answer was given by the emulation: $(grep as_avx2 "$WORK/auto.txt")"
grep -q "backend: cpu, oneDNN ISA avx2," "$WORK/auto.txt" || fail "oneDNN does not run AVX2: $(grep backend "$WORK/auto.txt")"
grep -q "precision auto: fp32 (this CPU has neither AVX512-BF16 nor AMX-BF16" "$WORK/auto.txt" ||
  fail "--precision auto did not choose fp32: $(grep precision "$WORK/auto.txt")"
"$HERE/bench/as_avx2.sh" "$B" bench infer --config bert-tiny --precision int8 --batch 1 --seq 8 --steps 1 \
  --warmup 0 --threads 1 > "$WORK/int8.txt" 2>&1 || fail "bench infer --precision int8: $(tail -3 "$WORK/int8.txt")"
grep -q "no VNNI: bertcc's AVX2 int8 kernel" "$WORK/int8.txt" || fail "int8 kernel: $(grep backend "$WORK/int8.txt")"
grep -q "7-bit activations per row \[auto" "$WORK/int8.txt" || fail "int8 activations (auto: 7 bits on AVX2): $(grep backend "$WORK/int8.txt")"
# export-onnx --precision int8 writes 8-bit activations whatever the host (auto is the file's, not this
# machine's), and 7 where asked
{ printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; seq -f 'w%g' 5 99; } > "$WORK/vocab.txt"
"$B" init-model --config bert-tiny --vocab "$WORK/vocab.txt" --output "$WORK/tiny" > /dev/null || fail "init-model"
for bits in auto 7; do
  "$HERE/bench/as_avx2.sh" "$B" export-onnx --model "$WORK/tiny" --out "$WORK/tiny.onnx" --precision int8 \
    --int8-activation-bits $bits > "$WORK/export.txt" 2>&1 || fail "export-onnx int8 ($bits): $(tail -3 "$WORK/export.txt")"
  want=8; [ $bits = 7 ] && want=7
  grep -q "int8 encoder, $want-bit activations" "$WORK/export.txt" ||
    fail "export-onnx --int8-activation-bits $bits did not write $want-bit activations: $(tail -1 "$WORK/export.txt")"
done
echo "avx2_emulated: $n cpuid/xgetbv answers given by the emulation; start-up lines as on an AVX2-only CPU:"
grep -h -E "^(backend|precision auto)" "$WORK/auto.txt" "$WORK/int8.txt" | sed 's/^/  /'

# every unit test
"$HERE/bench/as_avx2.sh" "$T" > "$WORK/unit.txt" 2>&1 || { tail -30 "$WORK/unit.txt"; fail "unit tests under the emulation"; }
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$WORK/unit.txt" || true
grep -q "^\[  PASSED  \]" "$WORK/unit.txt" || fail "no PASSED line"
! grep -q "^\[  FAILED  \]" "$WORK/unit.txt" || fail "unit tests failed"
echo "avx2_emulated: OK"
