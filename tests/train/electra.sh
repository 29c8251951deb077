#!/bin/sh
# ELECTRA pre-training (bertcc pretrain --model-type electra) on a small corpus with dynamic masking:
#  - learns: held-out generator and discriminator losses fall between the first and last evaluation;
#  - writes discriminator/ (ElectraForPreTraining) and generator/ (ElectraForMaskedLM) whose shared
#    embeddings are equal, and the generator is the fraction of the discriminator asked for;
#  - bit-exact resume: kill -9 after a checkpoint and resume = the uninterrupted run (both models);
#    a damaged generator in the newest checkpoint makes resume fall back to the previous one;
#  - a BERT run pointed at the ELECTRA checkpoints refuses and changes nothing;
#  - with mpirun: 2 ranks x 1 micro-batch = 1 rank x 2 micro-batches, bit for bit (models, losses).
#   tests/train/electra.sh BERTCC WORKDIR [mpi|none]   (none: bertcc was built without MPI)
set -u
B="$1"; W="$2"; COMMS="${3:-mpi}"; PY=/usr/bin/python3
rm -rf "$W"; mkdir -p "$W"
. "$(dirname "$0")/common.sh"
use_fixture "$B" "$W"  # the shared corpus and vocabulary (tests/fixture.sh); dynamic-masking shards of its own
"$B" create-pretraining-data --input "$FIX/corpus/train" --output "$W/all" --vocab "$FIX/vocab.txt" --max-seq-length 64 \
  --max-predictions-per-seq 10 --dupe-factor 3 --dynamic-masking > /dev/null || fail data
cp "$FIX/vocab.txt" "$W/vocab.txt"
mkdir -p "$W/h5" "$W/eval"; mv "$W/all/part-00000.h5" "$W/h5/"; mv "$W/all/part-00001.h5" "$W/eval/"
cat > "$W/electra.json" <<'EOF'
{"model_type": "electra", "vocab_size": 400, "embedding_size": 32, "hidden_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 256, "max_position_embeddings": 64, "type_vocab_size": 2}
EOF
BASE="--model-type electra --config $W/electra.json --generator-hidden-size 0.5 --vocab $W/vocab.txt --input-dir $W/h5 \
--eval-dir $W/eval --eval-batches 4 --learning-rate 5e-3 --warmup-proportion 0.1 --num-steps-per-checkpoint 4 \
--keep-checkpoints 3 --log-freq 1 --seed 11"
ARGS="$BASE --eval-freq 10 --max-steps 40 --train-batch-size 32 --gradient-accumulation-steps 2"
"$B" pretrain $ARGS --output-dir "$W/straight" > "$W/straight.log" 2>&1 || fail "straight run: $(tail -3 "$W/straight.log")"

# ---- it learns, and writes two Hugging Face models
$PY - "$W/straight" <<'PYEOF' || fail "learning / output checks"
import json, struct, sys
import numpy as np
run = sys.argv[1]
def st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in h.items() if v["dtype"] == "F32"}
ev = [json.loads(l[5:])["data"] for l in open(run + "/dllogger.json") if '"eval.loss"' in l]
assert len(ev) == 4, f"{len(ev)} evaluations, expected 4 (steps 10, 20, 30, 40)"
first, last = ev[0], ev[-1]
for k in ("eval.generator_loss", "eval.discriminator_loss"):
    assert last[k] < first[k], f"{k} did not fall: {first[k]} -> {last[k]}"
    print(f"ok   held-out {k[5:]} {first[k]:.4f} (step 10) -> {last[k]:.4f} (step 40)")
assert last["eval.discriminator_accuracy"] > 0.5, last
steps = [json.loads(l[5:])["data"] for l in open(run + "/dllogger.json") if '"generator_loss"' in l and '"eval.' not in l]
assert len(steps) == 40 and all(0 <= s["replaced_fraction"] <= 1 for s in steps), len(steps)
d = json.load(open(run + "/discriminator/config.json"))
g = json.load(open(run + "/generator/config.json"))
assert d["architectures"] == ["ElectraForPreTraining"] and g["architectures"] == ["ElectraForMaskedLM"], (d, g)
assert d["model_type"] == g["model_type"] == "electra"
assert (d["hidden_size"], g["hidden_size"], g["embedding_size"], g["num_hidden_layers"]) == (64, 32, 32, 2), g
D, G = st(run + "/discriminator/model.safetensors"), st(run + "/generator/model.safetensors")
for n in ("word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight", "LayerNorm.weight"):
    assert np.array_equal(D["electra.embeddings." + n], G["electra.embeddings." + n]), n
assert "electra.embeddings_project.weight" in D and "generator_lm_head.bias" in G
assert "generator_lm_head.weight" not in G or np.array_equal(G["generator_lm_head.weight"], G["electra.embeddings.word_embeddings.weight"])
print("ok   discriminator/ and generator/ are HF ELECTRA models sharing their embeddings (generator hidden 32 of 64)")
PYEOF

same() {  # NAME DIR_A DIR_B: both models byte-identical
  if cmp -s "$2/discriminator/model.safetensors" "$3/discriminator/model.safetensors" \
     && cmp -s "$2/generator/model.safetensors" "$3/generator/model.safetensors"; then echo "ok   $1: byte-identical models"
  else fail "$1: models differ ($2 vs $3)"; fi
}

# ---- kill -9 at a random moment after the step-16 checkpoint, resume
"$B" pretrain $ARGS --output-dir "$W/resumed" > "$W/first.log" 2>&1 &
pid=$!
wait_for_dir "$W/resumed/checkpoints/step_16" $pid
sleep "0.$(od -An -N1 -tu1 /dev/urandom | tr -d ' ' | cut -c1)"
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
"$B" pretrain $ARGS --output-dir "$W/resumed" --resume-from-checkpoint > "$W/second.log" 2>&1 || fail "resume: $(tail -3 "$W/second.log")"
grep -q "resuming from" "$W/second.log" || fail "did not resume: $(tail -3 "$W/second.log")"
same "kill -9 + resume ($(grep -o 'resuming from [^ ]*' "$W/second.log" | sed "s|$W/||"))" "$W/straight" "$W/resumed"

# ---- a damaged generator in the newest checkpoint: fall back to the previous one
rm -rf "$W/resumed/discriminator" "$W/resumed/generator"
printf 'garbage' >> "$W/resumed/checkpoints/step_40/generator/model.safetensors"
"$B" pretrain $ARGS --output-dir "$W/resumed" --resume-from-checkpoint > "$W/third.log" 2>&1 || fail "resume after damage"
grep -q "skipping checkpoint .*step_40" "$W/third.log" || fail "damage not detected: $(tail -3 "$W/third.log")"
grep -q "resuming from .*step_36" "$W/third.log" || fail "did not fall back to step_36: $(tail -3 "$W/third.log")"
same "fallback after a damaged generator" "$W/straight" "$W/resumed"

# ---- a BERT run on ELECTRA checkpoints refuses, touching nothing
before=$(find "$W/straight/checkpoints" -type f -exec md5sum {} + | sort | md5sum)
"$B" pretrain --config bert-mini --vocab "$W/vocab.txt" --input-dir "$W/h5" --output-dir "$W/straight" --max-steps 2 \
  --train-batch-size 8 --resume-from-checkpoint > "$W/bert.log" 2>&1 && fail "a BERT run resumed ELECTRA checkpoints"
grep -q "holds an ELECTRA generator and discriminator" "$W/bert.log" || fail "no clear refusal: $(tail -2 "$W/bert.log")"
[ "$before" = "$(find "$W/straight/checkpoints" -type f -exec md5sum {} + | sort | md5sum)" ] \
  && echo "ok   a BERT run refuses ELECTRA checkpoints: $(grep -o 'holds an ELECTRA[^;]*' "$W/bert.log")" \
  || fail "the refused run changed the checkpoints"

# ---- data parallel: 2 ranks x 16 = 1 rank x 2 x 16, bit for bit
if [ "$COMMS" = mpi ]; then
  command -v mpirun > /dev/null 2>&1 || fail "mpirun not found (Debian: openmpi-bin)"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  DP="$BASE --eval-freq 4 --max-steps 8 --threads 1"
  "$B" pretrain $DP --train-batch-size 32 --gradient-accumulation-steps 2 --output-dir "$W/dp1" > "$W/dp1.log" 2>&1 \
    || fail "1 rank: $(tail -3 "$W/dp1.log")"
  mpirun --oversubscribe -np 2 "$B" pretrain $DP --train-batch-size 16 --gradient-accumulation-steps 1 \
    --output-dir "$W/dp2" > "$W/dp2.log" 2>&1 || fail "2 ranks: $(tail -5 "$W/dp2.log")"
  grep -q "2 ranks (mpi)" "$W/dp2.log" || fail "not run as 2 MPI ranks: $(head -3 "$W/dp2.log")"
  same "2 ranks vs 1 rank x 2 micro-batches" "$W/dp1" "$W/dp2"
  grep -o '"[a-z_.]*loss[a-z_]*":[0-9.e-]*' "$W/dp1/dllogger.json" > "$W/l1.txt"
  grep -o '"[a-z_.]*loss[a-z_]*":[0-9.e-]*' "$W/dp2/dllogger.json" > "$W/l2.txt"
  [ -s "$W/l1.txt" ] && cmp -s "$W/l1.txt" "$W/l2.txt" && echo "ok   2 ranks: identical logged losses ($(wc -l < "$W/l1.txt") values, evaluations included)" \
    || fail "2 ranks: logged losses differ: $(diff "$W/l1.txt" "$W/l2.txt" | head -4)"
  # --zero1: each model's moments split over the 2 ranks; the same bits as unsharded, checkpoints
  # hold the full moments, and resuming one re-splits them
  mpirun --oversubscribe -np 2 "$B" pretrain $DP --train-batch-size 16 --gradient-accumulation-steps 1 --zero1 \
    --output-dir "$W/dp2z" > "$W/dp2z.log" 2>&1 || fail "2 ranks --zero1: $(tail -5 "$W/dp2z.log")"
  grep -q "ZeRO-1: sharded over 2 ranks" "$W/dp2z.log" || fail "--zero1 not in effect: $(grep moments "$W/dp2z.log")"
  same "2 ranks --zero1 vs 1 rank" "$W/dp1" "$W/dp2z"
  ok=1
  for step in 4 8; do for part in discriminator generator; do
    cmp -s "$W/dp1/checkpoints/step_$step/$part/optimizer.safetensors" "$W/dp2z/checkpoints/step_$step/$part/optimizer.safetensors" \
      || { ok=0; fail "--zero1: the $part's moments at step $step differ"; }
  done; done
  [ $ok = 1 ] && echo "ok   --zero1: checkpointed moments of both models byte-identical ($(grep -o 'moments [0-9.]* MB on rank 0[^;]*' "$W/dp2z.log"))"
  rm -rf "$W/dp2z/checkpoints/step_8" "$W/dp2z/discriminator" "$W/dp2z/generator"
  mpirun --oversubscribe -np 2 "$B" pretrain $DP --train-batch-size 16 --gradient-accumulation-steps 1 --zero1 \
    --output-dir "$W/dp2z" --resume-from-checkpoint > "$W/dp2z2.log" 2>&1 || fail "2 ranks --zero1 resume: $(tail -5 "$W/dp2z2.log")"
  grep -q "resuming from .*step_4" "$W/dp2z2.log" || fail "--zero1: did not resume from step_4: $(tail -3 "$W/dp2z2.log")"
  same "2 ranks --zero1 resumed from step 4 vs 1 rank" "$W/dp1" "$W/dp2z"
else
  echo "note: bertcc was built without MPI: the data-parallel check is skipped"
fi
[ $fails -eq 0 ] && echo "electra pre-training: all checks passed"
exit $fails
