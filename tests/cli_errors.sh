#!/bin/sh
# CLI contract: every subcommand has --help; bad input gives a clear error naming the file or
# field and a non-zero exit; nothing half-written is left behind.
set -u
BERTCC="$1"; WORK="$2"
rm -rf "$WORK"; mkdir -p "$WORK"
fails=0
check() {  # check NAME EXPECTED_RC PATTERN -- command...
  name="$1"; want_rc="$2"; pattern="$3"; shift 4
  "$@" >"$WORK/out" 2>&1; rc=$?
  if [ "$want_rc" = "nonzero" ]; then [ $rc -ne 0 ] || { echo "FAIL $name: exit 0"; fails=$((fails+1)); return; }
  elif [ $rc -ne "$want_rc" ]; then echo "FAIL $name: exit $rc (want $want_rc)"; cat "$WORK/out"; fails=$((fails+1)); return; fi
  grep -q -- "$pattern" "$WORK/out" || { echo "FAIL $name: output lacks '$pattern':"; cat "$WORK/out"; fails=$((fails+1)); return; }
  echo "ok   $name"
}
check help 0 "dump-step" -- "$BERTCC" --help
check dump-help 0 "--precision" -- "$BERTCC" dump-step --help
check bench-help 0 "--seq" -- "$BERTCC" bench --help
check tokenize-help 0 "--do-lower-case" -- "$BERTCC" tokenize --help
for sub in "finetune glue" "finetune classify" "finetune ner" "finetune squad" "eval ner" qa classify tag; do
  # shellcheck disable=SC2086
  check "help-$sub" 0 "--" -- "$BERTCC" $sub --help
done
check ner-bad-tag nonzero "bad.conll:2: tag 'X-PER'" -- sh -c "printf 'a O\nb X-PER\n' > '$WORK/bad.conll'; '$BERTCC' eval ner --data '$WORK/bad.conll' --predictions '$WORK/bad.conll'"
printf "a\nb\n" > "$WORK/novocab.txt"
check vocab-no-unk nonzero "no \[UNK\] token" -- "$BERTCC" tokenize --vocab "$WORK/novocab.txt" --input "$WORK/novocab.txt"
printf "[UNK]\na\n" > "$WORK/okvocab.txt"
check ft-bad-csv nonzero "unterminated quoted field" -- sh -c "printf '1,\"abc\n' > '$WORK/bad.csv'; '$BERTCC' finetune classify --init-checkpoint '$WORK/m' --train-file '$WORK/bad.csv' --output-dir '$WORK/ftout' --vocab '$WORK/okvocab.txt'"
check tokenize-bad-bool nonzero "expected true or false" -- "$BERTCC" tokenize --vocab "$WORK/okvocab.txt" --input "$WORK/okvocab.txt" --do-lower-case maybe
check no-subcommand nonzero "subcommand" -- "$BERTCC"
check missing-model nonzero "$WORK/nope" -- "$BERTCC" dump-step --model "$WORK/nope" --batch x.h5 --out "$WORK/o.safetensors"
mkdir -p "$WORK/m"
printf '{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 3, "intermediate_size": 8}' > "$WORK/m/config.json"
check bad-config nonzero "num_attention_heads" -- "$BERTCC" dump-step --model "$WORK/m" --batch x.h5 --out "$WORK/o.safetensors"
printf '{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}' > "$WORK/m/config.json"
check no-weights nonzero "model.safetensors" -- "$BERTCC" dump-step --model "$WORK/m" --batch x.h5 --out "$WORK/o.safetensors"
check loss-scale-head nonzero "pre-training head only" -- "$BERTCC" dump-step --model "$WORK/m" --batch x.safetensors --head qa --loss-scale 8 --out "$WORK/o.safetensors"
printf 'garbage' > "$WORK/m/model.safetensors"
check bad-weights nonzero "model.safetensors" -- "$BERTCC" dump-step --model "$WORK/m" --batch x.h5 --out "$WORK/o.safetensors"
check bad-precision nonzero "precision" -- "$BERTCC" dump-step --model "$WORK/m" --batch x.h5 --out o --precision fp8
# --cuda-graphs: inference on a CUDA device only, said before anything runs
check graphs-on-cpu nonzero "cuda-graphs needs --device cuda" -- "$BERTCC" bench infer --config bert-tiny --batch 1 --seq 8 --steps 1 --cuda-graphs
check graphs-bench-train nonzero "records inference forwards only" -- "$BERTCC" bench train --config bert-tiny --cuda-graphs --device cuda
check graphs-not-on-pretrain 0 "absent" -- sh -c "'$BERTCC' pretrain --help | grep -q cuda-graphs || echo absent"
check bad-preset nonzero "bert-huge" -- "$BERTCC" bench train --config bert-huge --steps 1
check bench-padding nonzero "--padding: Value 1.2 not in range" -- "$BERTCC" bench infer --config bert-tiny --padding 1.2
# SIGTERM outside training ends the process by the signal (exit 143), as with no handler: bertcc
# blocks it in every thread and one signal thread re-raises it (bertcc/signals.h). A SIGINT that
# the launcher ignored (sh ignores it in background jobs) stays ignored.
mkfifo "$WORK/fifo"
"$BERTCC" tokenize --vocab "$WORK/okvocab.txt" --input "$WORK/fifo" > /dev/null 2>&1 &
pid=$!
exec 9> "$WORK/fifo"  # the writer end stays open: tokenize waits for its first line
sleep 0.5
kill -INT $pid
sleep 0.5
kill -0 $pid 2>/dev/null && echo "ok   an inherited-ignored SIGINT stays ignored" \
  || { echo "FAIL: an ignored SIGINT ended tokenize"; fails=$((fails+1)); }
kill -TERM $pid
n=0; while kill -0 $pid 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
if kill -0 $pid 2>/dev/null; then
  echo "FAIL: SIGTERM did not end a waiting tokenize in 10 s"; fails=$((fails+1)); kill -9 $pid
fi
wait $pid; rc=$?
exec 9>&-
[ $rc -eq 143 ] && echo "ok   SIGTERM ends a waiting tokenize with exit 143" \
  || { echo "FAIL: SIGTERM: exit $rc, wanted 143"; fails=$((fails+1)); }
[ ! -e "$WORK/o.safetensors" ] || { echo "FAIL: output written despite errors"; fails=$((fails+1)); }
ls "$WORK"/*.tmp.* >/dev/null 2>&1 && { echo "FAIL: temporary files left behind"; fails=$((fails+1)); }
[ $fails -eq 0 ] && echo "all CLI checks passed"
exit $fails
