#!/bin/sh
# Where the GPU time of `bertcc bench` goes, by kernel: Nsight Systems' kernel and memory-copy
# summaries of a few training steps, the top rows printed; where the machine has no nsys, bertcc's
# own per-operation timers (BERTCC_CUDA_PROFILE=1, src/cuda/op_timer.h).
#   bench/cuda/profile.sh BERTCC OUTDIR [bench arguments...]
#   (default: train --config bert-large --batch 64 --seq 128 --precision bf16)
set -u
B="$1"; O="$2"; shift 2
[ $# -gt 0 ] || set -- train --config bert-large --batch 64 --seq 128 --precision bf16
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
mkdir -p "$O"
if [ -z "$NSYS" ]; then  # no Nsight here: bertcc's own per-operation CUDA event timers
  echo "no nsys on this machine: BERTCC_CUDA_PROFILE=1 (CUDA events per backend operation)"
  BERTCC_CUDA_PROFILE=1 "$B" bench "$@" --device cuda --steps 5 --warmup 2
  exit $?
fi
"$NSYS" profile -o "$O/prof" --force-overwrite true -t cuda "$B" bench "$@" --device cuda --steps 5 --warmup 2 || exit 1
"$NSYS" stats -r cuda_gpu_kern_sum,cuda_gpu_mem_time_sum -f csv -o "$O/prof" "$O/prof.nsys-rep" > /dev/null || exit 1
rm -f "$O/prof.nsys-rep" "$O/prof.sqlite"
python3 - "$O" <<'PY'
import csv, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/prof_*.csv")):
    rows = list(csv.DictReader(open(f)))
    total = sum(float(r.get("Total Time (ns)") or 0) for r in rows)
    print(f"== {f}: {total / 1e6:.1f} ms in {len(rows)} rows")
    for r in rows[:45]:
        name = (r.get("Name") or r.get("Operation") or "")[:140]
        print(f"{float(r.get('Time (%)') or 0):6.2f}% {float(r.get('Total Time (ns)') or 0) / 1e6:9.3f} ms "
              f"{r.get('Instances', ''):>6s}  {name}")
PY
