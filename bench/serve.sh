#!/bin/sh
# bertcc serve under load on this machine: wrk with 64 connections for 30 s against /v1/classify
# (a ~20-word text) and /v2/models/NAME/infer (Triton protocol, 1 x 32 tokens), with dynamic
# batching (--max-batch-size 32) and without it (--max-batch-size 1), for a bert-mini- and a
# bert-base-shaped classifier (random weights). Prints requests/s, p50/p99 latency, errors and the
# mean batch size from /metrics. One wrk thread (WRK_THREADS): on a small machine wrk competes with
# the server.
# Without wrk (the GPU machine) or with LOADGEN=python, bench/serve_load.py drives the load instead
# (Python client threads; it prints JSON lines). env: DEVICE (serve --device, default cpu), VOCAB,
# PYTHON (/usr/bin/python3), WORK.
#   bench/serve.sh BERTCC [SECONDS] [CONNECTIONS] [CONFIGS]
set -eu
B="$1"; SECS="${2:-30}"; CONN="${3:-64}"; CONFIGS="${4:-bert-mini bert-base}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/tmp/bertcc_serve_bench}"
VOCAB="${VOCAB:-$HERE/../shared/data/bert_vocab/bert-base-uncased-vocab.txt}"
PY="${PYTHON:-/usr/bin/python3}"; DEVICE="${DEVICE:-cpu}"
LOADGEN="${LOADGEN:-wrk}"; WRK_THREADS="${WRK_THREADS:-1}"
command -v wrk > /dev/null || { LOADGEN=python; echo "serve bench: wrk not found (Debian: wrk): Python clients instead"; }
mkdir -p "$WORK"
cat > "$WORK/classify.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"text": "the movie was a complete waste of time and money, but the soundtrack was quite good"}'
wrk.headers["Content-Type"] = "application/json"
LUA
ids=101; i=1; while [ $i -lt 31 ]; do ids="$ids,$((2000 + i * 37))"; i=$((i + 1)); done; ids="$ids,102"
cat > "$WORK/infer.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"inputs": [{"name": "input_ids", "shape": [1, 32], "datatype": "INT64", "data": [$ids]}]}'
wrk.headers["Content-Type"] = "application/json"
LUA
echo "serve bench: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, --device $DEVICE; $LOADGEN$([ "$LOADGEN" = wrk ] && echo " ($WRK_THREADS threads)"), $CONN clients, ${SECS}s"
for cfg in $CONFIGS; do
  SERVE_TEST_CONFIG=$cfg "$PY" "$HERE/tests/serve/make_models.py" "$B" "$VOCAB" "$WORK/$cfg" > /dev/null
  for ep in classify infer; do
    for mb in 1 32; do
      "$B" serve --model "$WORK/$cfg/sst" --port 0 --max-batch-size $mb --device "$DEVICE" > "$WORK/serve.out" 2> "$WORK/serve.err" &
      pid=$!
      while ! grep -q listening "$WORK/serve.out" 2>/dev/null; do
        kill -0 $pid 2>/dev/null || { echo "serve did not start: $(tail -3 "$WORK/serve.err")"; exit 1; }; sleep 0.2
      done
      port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$WORK/serve.out")
      if [ "$LOADGEN" = python ]; then
        ep_path=/v1/classify; body=$(sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$WORK/$ep.lua")
        [ $ep = infer ] && ep_path=/v2/models/sst/infer
        printf '%-10s %-9s max-batch %-3s ' "$cfg" "$ep" "$mb"
        "$PY" "$HERE/bench/serve_load.py" "http://127.0.0.1:$port" "$ep_path" "$body" --clients "$CONN" --seconds "$SECS"
        kill -TERM $pid; wait $pid || true
        continue
      fi
      url="http://127.0.0.1:$port/v1/classify"; [ $ep = infer ] && url="http://127.0.0.1:$port/v2/models/sst/infer"
      wrk -t"$WRK_THREADS" -c"$CONN" -d"${SECS}s" --timeout 30s --latency -s "$WORK/$ep.lua" "$url" > "$WORK/wrk.txt" 2>&1
      metrics=$("$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$port/metrics")
      kill -TERM $pid; wait $pid || true
      rps=$(sed -n 's/^Requests\/sec: *//p' "$WORK/wrk.txt")
      p50=$(awk '$1 == "50%" {print $2}' "$WORK/wrk.txt"); p99=$(awk '$1 == "99%" {print $2}' "$WORK/wrk.txt")
      errs=$(sed -n 's/.*Non-2xx or 3xx responses: *//p; s/.*Socket errors: *//p' "$WORK/wrk.txt" | tr '\n' ' ')
      mean=$(printf '%s\n' "$metrics" | awk '/^bertcc_batch_size_sum/ {s=$2} /^bertcc_batch_size_count/ {c=$2} END {if (c) printf "%.1f", s/c}')
      printf '%-10s %-9s max-batch %-3s %9s req/s  p50 %9s  p99 %9s  mean batch %5s  errors: %s\n' \
        "$cfg" "$ep" "$mb" "$rps" "$p50" "$p99" "$mean" "${errs:-0}"
    done
  done
done
