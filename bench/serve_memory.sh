#!/bin/sh
# A server's resident memory by precision: `serve --precision P` on a bert-base-shaped model with
# random weights (tests/serve/make_models.py; MODEL: sst, the SST-2 classifier that
# bench/serve_sst2.sh serves, or base, BertForPreTraining, with the masked-LM decoder that
# fill-mask runs), its VmRSS once loaded, then after REQUESTS KServe v2
# requests of ROWS rows x TOKENS tokens each (the reply small: sst's logits, base's pooler_output
# alone; the forward the largest batch the server takes), and VmHWM, the peak since it started (the load's
# own peak included: what a container's memory limit must hold). Each precision's lines, then each
# against the first precision's.
#   bench/serve_memory.sh BERTCC [CONFIG]      env: MODEL (sst), PRECISIONS ("fp32 int8"), ROWS (32),
#                                               TOKENS (128), REQUESTS (2), THREADS (2), WORK, AS_AVX2 (0)
# AS_AVX2=1 runs each server as on an AVX2-only CPU (bench/as_avx2.sh; the memory read is the
# server's, not gdb's).
set -eu
B="$1"; CFG="${2:-bert-base}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${SHARED:-$HERE/../shared/data}"; [ -d "$SHARED" ] || SHARED="$HERE/../../shared/data"
WORK="${WORK:-/tmp/bertcc_serve_memory}"; PRECISIONS="${PRECISIONS:-fp32 int8}"; MODEL="${MODEL:-sst}"
case "$MODEL" in sst|base) ;; *) echo "serve_memory.sh: MODEL must be sst or base, not '$MODEL'" >&2; exit 2 ;; esac
ROWS="${ROWS:-32}"; TOKENS="${TOKENS:-128}"; REQUESTS="${REQUESTS:-2}"; THREADS="${THREADS:-2}"
case "${AS_AVX2:-0}" in
  1) set -- "$HERE/bench/as_avx2.sh" "$B" ;;
  0) set -- "$B" ;;
  *) echo "serve_memory.sh: AS_AVX2 must be 0 or 1, not '$AS_AVX2'" >&2; exit 2 ;;
esac
VOCAB="$SHARED/bert_vocab/bert-base-uncased-vocab.txt"; PY=/usr/bin/python3
[ -f "$VOCAB" ] || { echo "serve_memory.sh: $VOCAB not found" >&2; exit 1; }
mkdir -p "$WORK"
SERVE_TEST_CONFIG=$CFG "$PY" "$HERE/tests/serve/make_models.py" "$B" "$VOCAB" "$WORK/$CFG" > /dev/null
echo "serve_memory: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $CFG ($MODEL), --threads $THREADS, $REQUESTS requests of $ROWS x $TOKENS tokens ($([ "$MODEL" = base ] && echo pooler_output || echo logits))$([ "${AS_AVX2:-0}" = 1 ] && echo "; as on an AVX2-only CPU")"
first=""
for p in $PRECISIONS; do
  "$@" serve --model "$WORK/$CFG/$MODEL" --port 0 --threads "$THREADS" --precision "$p" > "$WORK/serve.out" 2> "$WORK/serve.err" &
  pid=$!
  port=""
  while [ -z "$port" ]; do
    kill -0 $pid 2>/dev/null || { echo "serve did not start: $(tail -3 "$WORK/serve.err")"; exit 1; }; sleep 0.2
    port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$WORK/serve.out" 2>/dev/null)
  done
  spid=$pid  # the server itself under a wrapper (gdb for AS_AVX2=1): the first child named bertcc
  while [ "$(cat /proc/$spid/comm 2>/dev/null)" != bertcc ]; do
    child=$(pgrep -P "$spid" | head -1)
    [ -n "$child" ] || { echo "serve_memory.sh: no process named bertcc under $B (pid $pid)" >&2; kill -TERM $pid; exit 1; }
    spid=$child
  done
  mib() { awk -v k="$1:" '$1 == k {printf "%.0f", $2 / 1024}' /proc/$spid/status; }
  loaded=$(mib VmRSS)
  "$PY" - "$port" "$ROWS" "$TOKENS" "$REQUESTS" "$MODEL" <<'PY'
import json, sys, urllib.request
port, rows, tokens, n = (int(a) for a in sys.argv[1:5])
model = sys.argv[5]
ids = ([101] + [2009 + i % 300 for i in range(tokens - 2)] + [102]) * rows
# base: pooler_output alone (its last_hidden_state would make a reply of rows x tokens x 768 values)
outputs = [{"name": "pooler_output"}] if model == "base" else []
body = json.dumps({"inputs": [{"name": "input_ids", "shape": [rows, tokens], "datatype": "INT64", "data": ids}],
                   **({"outputs": outputs} if outputs else {})}).encode()
for _ in range(n):
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", body,
                                                      {"Content-Type": "application/json"}), timeout=600)
    out = json.loads(r.read())["outputs"][0]
    assert out["shape"] == [rows, len(out["data"]) // rows], out["shape"]
PY
  after=$(mib VmRSS); peak=$(mib VmHWM)
  kill -TERM $pid; wait $pid || true
  if [ -z "$first" ]; then first=$p; f_loaded=$loaded; f_after=$after; f_peak=$peak; fi
  printf '%-5s RSS %5s MiB loaded, %5s MiB after the requests, %5s MiB peak' "$p" "$loaded" "$after" "$peak"
  [ "$p" = "$first" ] && echo || awk -v a="$loaded" -v b="$after" -v c="$peak" -v x="$f_loaded" -v y="$f_after" -v z="$f_peak" -v f="$first" \
    'BEGIN {printf "   (of %s: %.0f %%, %.0f %%, %.0f %%)\n", f, 100 * a / x, 100 * b / y, 100 * c / z}'
done
