#!/bin/sh
# Data-parallel throughput on this machine: pre-training steps of the same global batch run as
# 1 rank x T threads (accumulation W) and as W ranks x T/W threads (mpirun), with the gradient
# all-reduce overlapped with backward and not; prints seq/s (mean over the steps after the
# first two) and the time ranks waited for the all-reduce after backward.
#   bench/data_parallel.sh BERTCC [CONFIG] [WORLD] [THREADS] [MICRO] [STEPS]
# env: VOCAB (../shared/data's bert-base-uncased), PYTHON (/usr/bin/python3), WORK
set -eu
B="$1"; CONFIG="${2:-bert-base}"; NP="${3:-2}"; THREADS="${4:-$(nproc)}"; MICRO="${5:-8}"; STEPS="${6:-10}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/tmp/bertcc_dp_bench}"
VOCAB="${VOCAB:-$HERE/../shared/data/bert_vocab/bert-base-uncased-vocab.txt}"
PY="${PYTHON:-/usr/bin/python3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$WORK"; mkdir -p "$WORK/text"
i=0
while [ $i -lt 200 ]; do
  printf 'Document %d starts with a sentence about rivers and mountains.\nIt continues with trains, clocks, gardens and number %d.\nA third line closes paragraph %d of the benchmark text.\n' $i $((i * 13)) $i > "$WORK/text/d$i.txt"
  i=$((i + 1))
done
"$B" prep-corpus --input "$WORK/text" --output "$WORK/corpus" --shards 2 > /dev/null 2>&1
"$B" create-pretraining-data --input "$WORK/corpus/train" --output "$WORK/h5" --vocab "$VOCAB" --max-seq-length 128 \
  --max-predictions-per-seq 20 --dupe-factor 10 > /dev/null
P="--config $CONFIG --vocab $VOCAB --input-dir $WORK/h5 --max-steps $STEPS --learning-rate 1e-4 --num-steps-per-checkpoint 0 --log-freq 1 --precision bf16"
rate() {  # mean seq/s over steps 3.. and the mean all-reduce wait
  "$PY" - "$1" <<'PYEOF'
import json, sys
r, w = [], []
for line in open(sys.argv[1]):
    j = json.loads(line[5:])
    if j["type"] == "LOG" and isinstance(j["step"], list) and "seq_per_s" in j["data"] and j["step"][1] > 2:
        r.append(j["data"]["seq_per_s"]); w.append(j["data"].get("allreduce_wait_s", 0.0))
print(f"{sum(r)/len(r):.2f} {sum(w)/len(w):.3f}")
PYEOF
}
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $CONFIG, seq 128, bf16, global batch $((NP * MICRO)), $STEPS steps"
"$B" pretrain $P --train-batch-size $((NP * MICRO)) --gradient-accumulation-steps $NP --threads "$THREADS" --output-dir "$WORK/one" > /dev/null 2>&1
set -- $(rate "$WORK/one/dllogger.json"); one=$1
echo "1 rank x $THREADS threads (accumulation $NP):    $1 seq/s"
for v in "" "--no-allreduce-overlap"; do
  mpirun --oversubscribe --bind-to none -np "$NP" "$B" pretrain $P --train-batch-size "$MICRO" --threads $((THREADS / NP)) $v --output-dir "$WORK/many" > /dev/null 2>&1
  set -- $(rate "$WORK/many/dllogger.json")
  echo "$NP ranks x $((THREADS / NP)) threads ${v:-(overlap)}: $1 seq/s ($("$PY" -c "print(f'{$1/$one:.2f}')")x), all-reduce wait after backward $2 s/step"
  rm -rf "$WORK/many"
done
