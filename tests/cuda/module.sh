#!/bin/sh
# The CUDA module (src/backend/cuda_module.h) in a build with the CUDA toolkit: the bertcc binary
# links no CUDA library and a process on the CPU maps none; --device cuda loads
# libbertcc_cuda.so beside the binary and ends in a CUDA backend or in the driver's reason there is
# none ("no usable CUDA device", which proves the module loaded and its symbols resolved), never on
# the CPU; a missing module is an error naming the file.
#   tests/cuda/module.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"
rm -rf "$W"; mkdir -p "$W"
fails=0
bad() { echo "FAIL $*"; fails=$((fails+1)); }
cuda_libs='libcudart|libcublas|libnccl|libcuda\.so'
needed=$(readelf -d "$B" | grep NEEDED)
if echo "$needed" | grep -qE "$cuda_libs"; then bad "the binary links CUDA libraries: $(echo "$needed" | grep -E "$cuda_libs" | tr -s ' ')"; else echo "ok   binary links no CUDA library"; fi
M="$(dirname "$B")/libbertcc_cuda.so"
readelf -d "$M" 2>/dev/null | grep NEEDED | grep -q libcublasLt && echo "ok   $M links cuBLASLt" || bad "$M is missing or does not link cuBLASLt"

# a process on the CPU (tokenize waiting on a fifo for its input) maps no CUDA library
printf '[UNK]\na\n' > "$W/vocab.txt"
mkfifo "$W/fifo"
"$B" tokenize --vocab "$W/vocab.txt" --input "$W/fifo" > /dev/null 2>&1 &
pid=$!
exec 9> "$W/fifo"
sleep 0.5
maps=$(grep -E "$cuda_libs|libbertcc_cuda" "/proc/$pid/maps" | awk '{print $6}' | sort -u | tr '\n' ' ')
exec 9>&-
wait $pid
[ -z "$maps" ] && echo "ok   tokenize maps no CUDA library" || bad "tokenize maps $maps"

# --device cuda: the module loads, and the run is on the GPU or refused with the driver's reason
probe() { "$@" bench train --config bert-tiny --batch 1 --seq 8 --steps 1 --device cuda > "$W/out" 2>&1; }
probe "$B"; rc=$?
if [ $rc -eq 0 ]; then
  grep -q "backend: cuda" "$W/out" && echo "ok   --device cuda runs on the GPU" || bad "--device cuda exit 0 without a CUDA backend: $(cat "$W/out")"
elif grep -q "no usable CUDA device" "$W/out"; then
  echo "ok   --device cuda loads the module: $(grep -o 'no usable CUDA device.*' "$W/out" | head -1)"
else
  bad "--device cuda (exit $rc): $(cat "$W/out")"
fi

# the binary without its module: an error naming the file, whatever the machine
mkdir -p "$W/bin"
cp "$B" "$W/bin/bertcc"
probe "$W/bin/bertcc"; rc=$?
[ $rc -ne 0 ] && grep -q "cannot load bertcc's CUDA module $W/bin/libbertcc_cuda.so: .*No such file" "$W/out" &&
  echo "ok   missing module: $(grep error "$W/out" | head -1)" || bad "missing module (exit $rc): $(cat "$W/out")"
# ... and BERTCC_CUDA_MODULE names the file to load instead
BERTCC_CUDA_MODULE="$M" probe "$W/bin/bertcc"; rc=$?
{ [ $rc -eq 0 ] || grep -q "no usable CUDA device" "$W/out"; } && echo "ok   BERTCC_CUDA_MODULE loads $M" ||
  bad "BERTCC_CUDA_MODULE=$M (exit $rc): $(cat "$W/out")"
BERTCC_CUDA_MODULE="$W/none.so" probe "$B"; rc=$?
[ $rc -ne 0 ] && grep -q "cannot load bertcc's CUDA module $W/none.so" "$W/out" && echo "ok   BERTCC_CUDA_MODULE missing: named" ||
  bad "BERTCC_CUDA_MODULE=$W/none.so (exit $rc): $(cat "$W/out")"
# a file that is not the module
cp "$(ldd "$B" | awk '/libz\.so|libbz2\.so/{print $3; exit}')" "$W/notmodule.so"
BERTCC_CUDA_MODULE="$W/notmodule.so" probe "$B"; rc=$?
[ $rc -ne 0 ] && grep -q "$W/notmodule.so is not bertcc's CUDA module" "$W/out" && echo "ok   not a module: named" ||
  bad "BERTCC_CUDA_MODULE=$W/notmodule.so (exit $rc): $(cat "$W/out")"
[ $fails -eq 0 ] && echo "all CUDA module checks passed"
exit $fails
