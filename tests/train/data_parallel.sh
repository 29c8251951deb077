#!/bin/sh
# Data parallelism over MPI (mpirun --oversubscribe -np 2 on any machine):
#  - 2 ranks x batch b = 1 rank x accumulation 2 x batch b, bit for bit (model bytes and every
#    logged loss), for pre-training (LAMB; fp32 and bf16 compute) and fine-tuning (GLUE MRPC,
#    whose last step of each epoch leaves rank 1 without examples);
#  - bf16/fp16 gradients on the wire: within their precision of the fp32 run;
#  - checkpoints move between world sizes: stopped at 2 ranks (SIGTERM to one rank only) and
#    resumed at 1, stopped at 1 and resumed at 2: both byte-identical to the uninterrupted run;
#  - faults: kill -9 of one rank ends the job with a message in bounded time and the run resumes;
#    a rank stopped (SIGSTOP) is reported by the others' watchdog, which ends the job; a fatal
#    error on one rank ends the job with that rank's message.
#   tests/train/data_parallel.sh BERTCC WORKDIR
set -u
B="$1"; W="$2"; S="$(dirname "$0")/../../../shared/data"; PY=/usr/bin/python3
TORCH_DIR="$(cd "$(dirname "$0")/../torch" && pwd)"
. "$(dirname "$0")/common.sh"
if ! command -v mpirun > /dev/null 2>&1; then echo "FAIL mpirun not found (Debian: openmpi-bin)"; exit 1; fi
if ! "$B" pretrain --help | grep -q -- "--allreduce-dtype"; then echo "FAIL no data-parallel flags"; exit 1; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI="mpirun --oversubscribe -np 2"
rm -rf "$W"; mkdir -p "$W"
use_fixture "$B" "$W"  # shared shards and vocabulary; tiny.json: 2 layers, hidden 64 (tests/fixture.sh)

# the logged losses of a run, one line per step ("step loss mlm nsp")
losses() { $PY - "$1" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line[5:])
    d = j["data"]
    if j["type"] == "LOG" and isinstance(j["step"], list) and "loss" in d:
        print(j["step"][1], repr(d["loss"]), repr(d.get("mlm_loss")), repr(d.get("nsp_loss")))
PYEOF
}
# the evaluation lines of a run
evals() { grep -o '"eval\.[a-z_]*": *[0-9.e-]*' "$1/dllogger.json"; }
same_model() {  # NAME DIR_A DIR_B
  if cmp -s "$2/model.safetensors" "$3/model.safetensors"; then echo "ok   $1: byte-identical models"
  else fail "$1: models differ ($2 vs $3)"; fi
}
same_losses() {  # NAME RUN_A RUN_B (output dirs with dllogger.json)
  losses "$2/dllogger.json" > "$W/la.txt"; losses "$3/dllogger.json" > "$W/lb.txt"
  if [ -s "$W/la.txt" ] && cmp -s "$W/la.txt" "$W/lb.txt"; then echo "ok   $1: identical losses at every step ($(wc -l < "$W/la.txt") steps)"
  else fail "$1: losses differ: $(diff "$W/la.txt" "$W/lb.txt" | head -4)"; fi
}

# (held-out evaluation on the training shards: what matters here is that its split over ranks changes nothing)
PT0="--config $FIX/tiny.json --vocab $FIX/vocab.txt --eval-dir $FIX/h5 --eval-batches 3 --learning-rate 1e-3 \
--warmup-proportion 0.25 --num-steps-per-checkpoint 2 --keep-checkpoints 8 --log-freq 1 --seed 7 --threads 1"
PT="$PT0 --input-dir $FIX/h5 --max-steps 8"
LONG="$PT0 --input-dir $FIX/h5 --max-steps 4000"
ONE="--train-batch-size 16 --gradient-accumulation-steps 2"
TWO="--train-batch-size 8 --gradient-accumulation-steps 1"

# --- pre-training: 2 ranks x 8 == 1 rank x 2 x 8, fp32 and bf16 compute
for prec in fp32 bf16; do
  "$B" pretrain $PT $ONE --precision $prec --output-dir "$W/pt1_$prec" > "$W/pt1_$prec.log" 2>&1 || fail "1 rank ($prec): $(tail -3 "$W/pt1_$prec.log")"
  $MPI "$B" pretrain $PT $TWO --precision $prec --output-dir "$W/pt2_$prec" > "$W/pt2_$prec.log" 2>&1 || fail "2 ranks ($prec): $(tail -5 "$W/pt2_$prec.log")"
  grep -q "2 ranks (mpi)" "$W/pt2_$prec.log" || fail "2 ranks ($prec): not run as 2 MPI ranks: $(head -3 "$W/pt2_$prec.log")"
  same_model "pretrain $prec, 2 ranks vs 1 rank x 2 micro-batches" "$W/pt1_$prec/model" "$W/pt2_$prec/model"
  same_losses "pretrain $prec" "$W/pt1_$prec" "$W/pt2_$prec"
  evals "$W/pt1_$prec" > "$W/e1.txt"; evals "$W/pt2_$prec" > "$W/e2.txt"
  [ -s "$W/e1.txt" ] && cmp -s "$W/e1.txt" "$W/e2.txt" && echo "ok   pretrain $prec: held-out evaluation split over ranks = 1 rank ($(wc -l < "$W/e1.txt") values)" \
    || fail "pretrain $prec: evaluations differ: $(diff "$W/e1.txt" "$W/e2.txt" | head -4)"
done
# buckets: small ones (about 50, reduced while backward goes on) and no overlap at all change nothing
for v in "--bucket-cap-mb 0.25" "--no-allreduce-overlap"; do
  $MPI "$B" pretrain $PT $TWO --precision fp32 $v --output-dir "$W/pt2_b" > "$W/pt2_b.log" 2>&1 || fail "2 ranks $v: $(tail -3 "$W/pt2_b.log")"
  same_model "pretrain, 2 ranks with $v" "$W/pt1_fp32/model" "$W/pt2_b/model"
  rm -rf "$W/pt2_b"
done
# ZeRO-1: moments sharded, updated tensors all-gathered: the same model and (gathered) moments
$MPI "$B" pretrain $PT $TWO --precision fp32 --zero1 --output-dir "$W/zero1" > "$W/zero1.log" 2>&1 || fail "--zero1: $(tail -3 "$W/zero1.log")"
same_model "pretrain --zero1, 2 ranks" "$W/pt1_fp32/model" "$W/zero1/model"
cmp -s "$W/pt1_fp32/checkpoints/step_4/optimizer.safetensors" "$W/zero1/checkpoints/step_4/optimizer.safetensors" \
  && echo "ok   --zero1: checkpointed moments byte-identical; $(grep -o 'moments [0-9.]* MB on rank 0[^;]*' "$W/zero1.log")" \
  || fail "--zero1: checkpointed moments differ"
grep -q "gradients reduce-scattered" "$W/zero1.log" || fail "--zero1: gradients not reduce-scattered: $(grep moments "$W/zero1.log")"
# ... also with small buckets reduce-scattered during backward (buckets straddle the two parts)
$MPI "$B" pretrain $PT $TWO --precision fp32 --zero1 --bucket-cap-mb 0.25 --output-dir "$W/zero1_b" > "$W/zero1_b.log" 2>&1 || fail "--zero1 small buckets: $(tail -3 "$W/zero1_b.log")"
same_model "pretrain --zero1 with 0.25 MB buckets, 2 ranks" "$W/pt1_fp32/model" "$W/zero1_b/model"
rm -rf "$W/zero1_b"
# 2 ranks x 2 micro-batches vs 1 rank x 4: the sums group differently ((g0+g1)+(g2+g3) against
# ((g0+g1)+g2)+g3), so close, not equal: the whole model and each tensor within 1e-6 and 1e-5
# (relative L2). The attention key biases are left out of the per-tensor bound: their gradient is
# zero in exact arithmetic (a key bias shifts all of a query's scores equally), so Adam's normalised
# update turns pure rounding noise into steps of about the learning rate whatever the order (their
# relative difference is of order 1 here, every other tensor's below 1e-6).
"$B" pretrain $PT --train-batch-size 16 --gradient-accumulation-steps 4 --precision fp32 --output-dir "$W/pt1_a4" > "$W/pt1_a4.log" 2>&1 || fail "1 rank x 4"
$MPI "$B" pretrain $PT --train-batch-size 8 --gradient-accumulation-steps 2 --precision fp32 --output-dir "$W/pt2_a2" > "$W/pt2_a2.log" 2>&1 || fail "2 ranks x 2"
$PY - "$W/pt1_a4" "$W/pt2_a2" "$TORCH_DIR" <<'PYEOF' || fail "2 ranks x 2 micro-batches vs 1 rank x 4"
import sys
sys.path.insert(0, sys.argv[3])
import numpy as np, st
a, b = st.load(sys.argv[1] + "/model/model.safetensors"), st.load(sys.argv[2] + "/model/model.safetensors")
d2 = sum(float(np.sum((a[n].astype(np.float64) - b[n]) ** 2)) for n in a)
n2 = sum(float(np.sum(a[n].astype(np.float64) ** 2)) for n in a)
l2 = (d2 / n2) ** 0.5
rel, worst = max((float(np.linalg.norm(a[n].astype(np.float64) - b[n])) / max(float(np.linalg.norm(a[n])), 1e-30), n)
                 for n in a if not n.endswith("attention.self.key.bias"))
ok = l2 < 1e-6 and rel < 1e-5
print(f"{'ok  ' if ok else 'FAIL'} pretrain, 2 ranks x 2 micro-batches vs 1 rank x 4: model {l2:.1e} relative (L2, bound 1e-6); "
      f"largest tensor difference {rel:.1e} ({worst}, bound 1e-5)")
sys.exit(0 if ok else 1)
PYEOF
[ "$(ls "$W/pt2_fp32" | sort | tr '\n' ' ')" = "checkpoints dllogger.json model tensorboard " ] || fail "rank-0-only output: $(ls "$W/pt2_fp32")"
[ "$(grep -c '"step":"PARAMETER"' "$W/pt2_fp32/dllogger.json")" = 1 ] || fail "dllogger written by more than one rank"

# --- compressed all-reduce: bf16 / fp16 gradients on the wire stay within their precision
for d in bf16 fp16; do
  $MPI "$B" pretrain $PT $TWO --precision fp32 --allreduce-dtype $d --output-dir "$W/ar_$d" > "$W/ar_$d.log" 2>&1 || fail "allreduce $d: $(tail -3 "$W/ar_$d.log")"
  # ZeRO-1's reduce-scatter rounds its sums to the wire dtype as the all-reduce does: same bits
  $MPI "$B" pretrain $PT $TWO --precision fp32 --allreduce-dtype $d --zero1 --output-dir "$W/arz_$d" > "$W/arz_$d.log" 2>&1 || fail "allreduce $d --zero1: $(tail -3 "$W/arz_$d.log")"
  same_model "--allreduce-dtype $d --zero1 vs without --zero1" "$W/ar_$d/model" "$W/arz_$d/model"
  rm -rf "$W/arz_$d"
  $PY - "$W/pt1_fp32" "$W/ar_$d" "$d" "$TORCH_DIR" <<'PYEOF' || fail "allreduce $d out of tolerance"
import json, sys
sys.path.insert(0, sys.argv[4])
import numpy as np, st
a, b = st.load(sys.argv[1] + "/model/model.safetensors"), st.load(sys.argv[2] + "/model/model.safetensors")
num = sum(float(np.sum((a[n].astype(np.float64) - b[n]) ** 2)) for n in a)
den = sum(float(np.sum(a[n].astype(np.float64) ** 2)) for n in a)
def losses(p):
    out = []
    for line in open(p + "/dllogger.json"):
        j = json.loads(line[5:])
        if j["type"] == "LOG" and isinstance(j["step"], list) and "loss" in j["data"]:
            out.append(j["data"]["loss"])
    return np.array(out)
la, lb = losses(sys.argv[1]), losses(sys.argv[2])
rel, dl = (num / den) ** 0.5, float(np.max(np.abs(la - lb)))
same = all(np.array_equal(a[n], b[n]) for n in a)
print(f"ok   all-reduce in {sys.argv[3]}: weights {rel:.2e} relative (L2) from the fp32 run, losses within {dl:.1e}" if rel < 2e-3 and dl < 2e-2 and not same
      else f"FAIL all-reduce in {sys.argv[3]}: relative {rel:.2e}, loss {dl:.2e}, identical {same}")
sys.exit(0 if rel < 2e-3 and dl < 2e-2 and not same else 1)
PYEOF
done

# --- SIGTERM to one rank: every rank finishes the step, rank 0 saves, all exit 0; then resume
# the checkpoint at the other world size.
wait_for() { n=0; while [ ! -d "$1" ] && [ $n -lt 6000 ]; do sleep 0.05; n=$((n + 1)); done; }
# The ranks' pids: bertcc processes only (mpirun's own command line matches the pattern too, and
# once pids wrap around pid_max its pid can be the largest: SIGSTOP then stopped mpirun, not a rank)
ranks_of() { for p in $(pgrep -f "bertcc pretrain .*--output-dir $1"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = bertcc ] && echo $p; done | sort -n; }
$MPI "$B" pretrain $PT $TWO --precision fp32 --output-dir "$W/term2" > "$W/term2a.log" 2>&1 &
job=$!
wait_for "$W/term2/checkpoints/step_2"
last=$(ranks_of "$W/term2" | tail -1)
[ -n "$last" ] && term_until_gone "$last"
wait $job; rc=$?
[ $rc -eq 0 ] || fail "SIGTERM to one of 2 ranks: exit code $rc: $(tail -3 "$W/term2a.log")"
if grep -q "stopped by signal after step" "$W/term2a.log"; then
  echo "ok   SIGTERM to one rank: all ranks stopped at the same step, exit 0 ($(grep -o 'stopped by signal after step [0-9]*' "$W/term2a.log"))"
else echo "note: the 2-rank run finished before SIGTERM arrived"; fi
# resumed with the 2-rank run's own flags: the accumulation adjusts to keep the global batch
"$B" pretrain $PT $TWO --precision fp32 --output-dir "$W/term2" --resume-from-checkpoint > "$W/term2b.log" 2>&1 || fail "resume 2 -> 1: $(tail -3 "$W/term2b.log")"
grep -q "resuming from" "$W/term2b.log" || fail "2 -> 1 did not resume"
grep -q "gradient accumulation set to 2" "$W/term2b.log" || fail "2 -> 1: accumulation not adjusted: $(cat "$W/term2b.log")"
same_model "checkpoint of 2 ranks resumed on 1 rank" "$W/pt1_fp32/model" "$W/term2/model"
same_losses "2 ranks -> 1 rank" "$W/pt1_fp32" "$W/term2"

"$B" pretrain $PT $ONE --precision fp32 --output-dir "$W/term1" > "$W/term1a.log" 2>&1 &
job=$!
wait_for "$W/term1/checkpoints/step_2"
term_until_gone $job; wait $job; rc=$?
[ $rc -eq 0 ] || fail "SIGTERM to 1 rank: exit code $rc"
$MPI "$B" pretrain $PT $ONE --precision fp32 --output-dir "$W/term1" --resume-from-checkpoint > "$W/term1b.log" 2>&1 || fail "resume 1 -> 2: $(tail -3 "$W/term1b.log")"
grep -q "resuming from" "$W/term1b.log" || fail "1 -> 2 did not resume"
grep -q "gradient accumulation set to 1" "$W/term1b.log" || fail "1 -> 2: accumulation not adjusted: $(cat "$W/term1b.log")"
same_model "checkpoint of 1 rank resumed on 2 ranks" "$W/pt1_fp32/model" "$W/term1/model"
same_losses "1 rank -> 2 ranks" "$W/pt1_fp32" "$W/term1"

# --- kill -9 of one rank: the job ends (bounded time, a message), nothing hangs; resume works
$MPI "$B" pretrain $LONG $TWO --precision fp32 --output-dir "$W/kill" > "$W/kill.log" 2>&1 &
job=$!
wait_for "$W/kill/checkpoints/step_4"
t0=$(date +%s)
kill -9 "$(ranks_of "$W/kill" | tail -1)"
n=0; while kill -0 $job 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
if kill -0 $job 2>/dev/null; then
  fail "kill -9 of one rank: the job still runs after 60 s"; kill -9 $job; pkill -9 -f "output-dir $W/kill"
else
  wait $job; rc=$?
  [ $rc -ne 0 ] && echo "ok   kill -9 of one rank: job ended in $(( $(date +%s) - t0 )) s with exit $rc: $(grep -m1 -o 'process rank [0-9]* .*signal [0-9]*.*' "$W/kill.log" | head -c 100)" \
    || fail "kill -9 of one rank: exit code 0"
fi
pgrep -f "output-dir $W/kill" > /dev/null && fail "ranks left running after kill -9: $(pgrep -af "output-dir $W/kill")"
"$B" pretrain $LONG $ONE --precision fp32 --output-dir "$W/kill" --resume-from-checkpoint > "$W/kill2.log" 2>&1 &
job=$!
# until it says where it resumed (the killed run may have written step_8 already), then stop it
n=0; while ! grep -q "resuming from" "$W/kill2.log" 2>/dev/null && kill -0 $job 2>/dev/null && [ $n -lt 6000 ]; do sleep 0.05; n=$((n + 1)); done
kill -TERM $job; wait $job
grep -q "resuming from" "$W/kill2.log" && echo "ok   resumed after kill -9: $(grep -o 'resuming from [^ ]*' "$W/kill2.log" | sed "s|$W/||")" \
  || fail "no resume after kill -9: $(tail -3 "$W/kill2.log")"

# --- a rank that stops progressing (SIGSTOP): the other's watchdog reports it and ends the job
$MPI "$B" pretrain $LONG $TWO --precision fp32 --watchdog-timeout 3 --output-dir "$W/hang" > "$W/hang.log" 2>&1 &
job=$!
wait_for "$W/hang/checkpoints/step_2"
stopped=$(ranks_of "$W/hang" | tail -1)
kill -STOP "$stopped"
n=0; while kill -0 $job 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
if kill -0 $job 2>/dev/null; then
  fail "hung rank: the job still runs after 60 s"; kill -9 $job
else
  wait $job; rc=$?
  grep -q "made no progress for" "$W/hang.log" && [ $rc -ne 0 ] \
    && echo "ok   hung rank: watchdog ended the job (exit $rc): $(grep -m1 -o 'rank [0-9] of 2 made no progress[^;]*' "$W/hang.log")" \
    || fail "hung rank: no watchdog message (exit $rc): $(tail -3 "$W/hang.log")"
fi
kill -CONT "$stopped" 2>/dev/null; kill -9 "$stopped" 2>/dev/null
pkill -9 -f "output-dir $W/hang" 2>/dev/null

# --- a fatal error on one rank only ends the job with that rank's message
mpirun --oversubscribe -np 1 "$B" pretrain $PT $TWO --output-dir "$W/err" : \
  -np 1 "$B" pretrain $PT0 --max-steps 8 $TWO --output-dir "$W/err" --input-dir "$W/no-such-shards" > "$W/err.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "error (rank 1 of 2): $W/no-such-shards: not a folder" "$W/err.log" \
  && echo "ok   an error on rank 1 ends the job (exit $rc) with its message" || fail "rank error: exit $rc: $(grep -v '^$' "$W/err.log" | head -5)"

# --- fine-tuning (GLUE MRPC, 100 training pairs, batch 16: each epoch ends with a 4-example step)
# the fixture's BERT of tiny.json's size with the bert-base-uncased vocabulary
if [ -d "$FIX/ft/bert" ]; then ln -s "$FIX/ft/bert" "$W/tiny"; else fail "no fine-tuning model in the fixture (../shared/data missing?)"; fi
mkdir -p "$W/mrpc"; head -101 "$S/glue/MRPC/train.tsv" > "$W/mrpc/train.tsv"; head -41 "$S/glue/MRPC/dev.tsv" > "$W/mrpc/dev.tsv"
FT="--task-name mrpc --data-dir $W/mrpc --init-checkpoint $W/tiny --learning-rate 1e-3 --max-seq-length 64 \
--num-train-epochs 3 --seed 5 --log-freq 1 --mode train,eval --threads 1 --precision fp32 --eval-batch-size 8"
"$B" finetune glue $FT $ONE --output-dir "$W/ft1" > "$W/ft1.out" 2> "$W/ft1.err" || fail "finetune 1 rank: $(tail -3 "$W/ft1.err")"
$MPI "$B" finetune glue $FT $TWO --bucket-cap-mb 1 --output-dir "$W/ft2" > "$W/ft2.out" 2> "$W/ft2.err" || fail "finetune 2 ranks: $(tail -3 "$W/ft2.err")"
same_model "finetune MRPC, 2 ranks vs 1 rank x 2 micro-batches" "$W/ft1" "$W/ft2"
$MPI "$B" finetune glue $FT $TWO --zero1 --output-dir "$W/ft2z" > /dev/null 2> "$W/ft2z.err" || fail "finetune --zero1: $(tail -3 "$W/ft2z.err")"
same_model "finetune MRPC --zero1, 2 ranks" "$W/ft1" "$W/ft2z"
same_losses "finetune MRPC" "$W/ft1" "$W/ft2"
cmp -s "$W/ft1.out" "$W/ft2.out" && [ "$(wc -l < "$W/ft2.out")" = 1 ] \
  && echo "ok   finetune: distributed evaluation = 1 process: $(cat "$W/ft2.out")" || fail "finetune eval: $(cat "$W/ft1.out") vs $(cat "$W/ft2.out")"
grep '"EVAL"' "$W/ft1/dllogger.json" | cut -d'{' -f3 > "$W/fe1.txt"; grep '"EVAL"' "$W/ft2/dllogger.json" | cut -d'{' -f3 > "$W/fe2.txt"
[ "$(wc -l < "$W/fe1.txt")" = 3 ] && cmp -s "$W/fe1.txt" "$W/fe2.txt" && echo "ok   finetune: per-epoch evaluations identical" || fail "finetune per-epoch evaluations differ"

# --- the other fine-tuning tasks: NER (CoNLL-2003, 24 sentences) and SQuAD v1.1 (one paragraph), with
# predictions written by rank 0 from the gathered logits
awk 'BEGIN{n=0} /^$/{n++} n<=24{print}' "$S/conll2003/iob2/train.txt" > "$W/ner.txt"
$PY - "$S/squad/v1.1/dev-v1.1.json" "$W/sq.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); a = d["data"][0]; a["paragraphs"] = a["paragraphs"][:1]
json.dump({"version": "1.1", "data": [a]}, open(sys.argv[2], "w"))
PYEOF
FT2="--init-checkpoint $W/tiny --learning-rate 1e-3 --num-train-epochs 2 --seed 5 --log-freq 1 --threads 1 --precision fp32 --eval-batch-size 4"
for task in ner squad; do
  case $task in
    ner) args="--train-file $W/ner.txt --predict-file $W/ner.txt --max-seq-length 64 --mode train,eval,prediction"; pred=predictions.txt ;;
    squad) args="--train-file $W/sq.json --predict-file $W/sq.json --max-seq-length 96 --doc-stride 48"; pred=predictions.json ;;
  esac
  "$B" finetune $task $args $FT2 $ONE --output-dir "$W/${task}1" > "$W/${task}1.out" 2> "$W/${task}1.err" || fail "$task 1 rank: $(tail -3 "$W/${task}1.err")"
  $MPI "$B" finetune $task $args $FT2 $TWO --output-dir "$W/${task}2" > "$W/${task}2.out" 2> "$W/${task}2.err" || fail "$task 2 ranks: $(tail -3 "$W/${task}2.err")"
  same_model "finetune $task, 2 ranks vs 1 rank x 2 micro-batches" "$W/${task}1" "$W/${task}2"
  cmp -s "$W/${task}1.out" "$W/${task}2.out" && cmp -s "$W/${task}1/$pred" "$W/${task}2/$pred" \
    && echo "ok   finetune $task: same metrics and $pred as 1 process: $(cut -c1-90 "$W/${task}2.out")" \
    || fail "finetune $task: metrics or $pred differ: $(cat "$W/${task}1.out") vs $(cat "$W/${task}2.out")"
done

[ $fails -eq 0 ] && echo "data parallel: all checks passed"
exit $fails
