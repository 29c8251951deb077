#!/bin/sh
# demo.sh's failure path: a step that fails shows its own stderr and ends the demo with a non-zero
# exit, never a wrong result further on ("the two models differ") or "== done ==". bertcc, mpirun
# and the two download scripts are stand-ins (tests/demo/), so nothing is downloaded or trained:
# first the whole demo runs through, then each step fails in turn.
set -u
SRC="$1"; WORK="$2"
rm -rf "$WORK"; mkdir -p "$WORK/scripts" "$WORK/bin"
fails=0
cat > "$WORK/scripts/fetch-demo-corpus.sh" <<'STUB'
#!/bin/sh
[ "${DEMO_FAIL:-}" = fetch-corpus ] && { echo "fetch-demo-corpus: simulated failure of fetch-corpus (npm unreachable)" >&2; exit 7; }
echo "prep-corpus: 3 documents"
STUB
cat > "$WORK/scripts/fetch-demo-spam.sh" <<'STUB'
#!/bin/sh
[ "${DEMO_FAIL:-}" = fetch-spam ] && { echo "fetch-demo-spam: simulated failure of fetch-spam (npm unreachable)" >&2; exit 7; }
mkdir -p "$1" && for i in $(seq 40); do printf 'ham\tsubject %s\tbody\n' "$i"; done > "$1/train.tsv"
STUB
chmod +x "$WORK/scripts/"*.sh
cp "$SRC/tests/demo/fake-mpirun" "$WORK/bin/mpirun"
demo() {  # demo STEP: the demo with STEP failing ("none": nothing fails); its output in $WORK/log-STEP
  (cd "$WORK" && PATH="$WORK/bin:$PATH" DEMO_OUT="$WORK/out-$1" DEMO_FAIL="$1" \
    timeout 120 sh "$SRC/scripts/demo.sh" "$SRC/tests/demo/fake-bertcc") > "$WORK/log-$1" 2>&1
}
demo none; rc=$?
if [ $rc -eq 0 ] && grep -q "== done ==" "$WORK/log-none" && grep -q "byte-identical" "$WORK/log-none"; then
  echo "ok   the demo runs through with the stand-ins"
else
  echo "FAIL the demo with nothing failing: exit $rc"; tail -20 "$WORK/log-none"; fails=$((fails + 1))
fi
for step in fetch-corpus train-vocab tokenize create-pretraining-data init-model dump-step pretrain plot bench mpirun \
            fetch-spam finetune classify serve export-onnx; do
  demo "$step"; rc=$?
  log="$WORK/log-$step"
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL $step fails: the demo exits $rc"; tail -5 "$log"; fails=$((fails + 1))
  elif ! grep -q "simulated failure of $step" "$log"; then
    echo "FAIL $step fails: its stderr is not shown"; tail -5 "$log"; fails=$((fails + 1))
  elif grep -q "== done ==\|the two models differ" "$log"; then
    echo "FAIL $step fails: the demo goes on to a result"; tail -5 "$log"; fails=$((fails + 1))
  else
    echo "ok   $step fails: exit $rc, its error shown"
  fi
done
# The server is stopped on every path: nothing the stand-in serve started is left running.
sleep 0.5
if pgrep -f "$SRC/tests/demo/fake_serve.py" > /dev/null; then
  echo "FAIL a demo left its server running"; fails=$((fails + 1))
  pkill -f "$SRC/tests/demo/fake_serve.py"
fi
[ $fails -eq 0 ] && echo "demo_failure: all checks passed" || echo "demo_failure: $fails check(s) FAILED"
[ $fails -eq 0 ]
