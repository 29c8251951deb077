#!/bin/sh
# bertcc serve on real sentences, unpadded (the default) against --padded: wrk sends
# SST-2's dev sentences (872, one per request, cycling) to /v1/classify with CONN connections for
# SECS seconds; the dynamic batcher (--max-batch-size 32) puts requests of different lengths in
# one batch, which unpadded execution computes without the padding. A bert-base-shaped classifier
# with random weights (tests/serve/make_models.py). Each mode runs ROUNDS times, alternating, so
# that both see the same machine. Prints requests/s, p50/p99 latency, errors, the mean batch and
# the server's resident memory (VmRSS once loaded, before any request, and at the end; VmHWM, its peak
# since it started, the load's included).
# AS_AVX2=1 runs each server as on an AVX2-only CPU (bench/as_avx2.sh; BERTCC then best built for an
# AVX2 CPU, as in bench/int8_peers.sh); the memory read is the server's, not gdb's.
# MODES: the server variants compared, "unpadded padded" by default; a precision (fp32, bf16, int8,
# auto) runs `serve --precision P`, so MODES="fp32 int8" compares int8 serving with fp32.
#   bench/serve_sst2.sh BERTCC [SECS] [CONN] [CONFIG]      env: MODES, ROUNDS (2), WRK_THREADS (1), WORK, AS_AVX2 (0)
set -eu
B="$1"; SECS="${2:-30}"; CONN="${3:-64}"; CFG="${4:-bert-base}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${SHARED:-$HERE/../shared/data}"; [ -d "$SHARED" ] || SHARED="$HERE/../../shared/data"  # a worktree one level deeper
WORK="${WORK:-/tmp/bertcc_serve_sst2}"; ROUNDS="${ROUNDS:-2}"; WRK_THREADS="${WRK_THREADS:-1}"
MODES="${MODES:-unpadded padded}"
case "${AS_AVX2:-0}" in  # from here on "$@" is the server's command
  1) set -- "$HERE/bench/as_avx2.sh" "$B" ;;
  0) set -- "$B" ;;
  *) echo "serve_sst2.sh: AS_AVX2 must be 0 or 1, not '$AS_AVX2'" >&2; exit 2 ;;
esac
VOCAB="$SHARED/bert_vocab/bert-base-uncased-vocab.txt"; PY=/usr/bin/python3
command -v wrk > /dev/null || { echo "serve_sst2.sh: wrk not found (Debian: wrk)" >&2; exit 1; }
[ -f "$SHARED/glue/SST-2/dev.tsv" ] || { echo "serve_sst2.sh: $SHARED/glue/SST-2/dev.tsv not found" >&2; exit 1; }
mkdir -p "$WORK"
# the sentences as Lua strings, one request body each, taken in turn by each connection
"$PY" - "$SHARED/glue/SST-2/dev.tsv" "$WORK/sst2.lua" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1], encoding="utf-8")][1:]
bodies = [json.dumps({"text": r[0]}) for r in rows]
with open(sys.argv[2], "w") as f:
    f.write("bodies = {\n" + ",\n".join("  [==[" + b + "]==]" for b in bodies) + "\n}\n")
    f.write('''counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, bodies[(counter % #bodies) + 1])
end
''')
PY
SERVE_TEST_CONFIG=$CFG "$PY" "$HERE/tests/serve/make_models.py" "$B" "$VOCAB" "$WORK/$CFG" > /dev/null
echo "serve_sst2: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $CFG, SST-2 dev sentences, wrk $WRK_THREADS thread(s), $CONN connections, ${SECS}s, --max-batch-size 32$([ "${AS_AVX2:-0}" = 1 ] && echo "; every server as on an AVX2-only CPU (bench/as_avx2.sh)")"
r=1
while [ $r -le "$ROUNDS" ]; do
  for mode in $MODES; do
    case $mode in
      unpadded) flag="" ;;
      padded) flag="--padded" ;;
      fp32|bf16|int8|auto) flag="--precision $mode" ;;
      *) echo "serve_sst2.sh: unknown mode '$mode' in MODES (unpadded, padded, fp32, bf16, int8, auto)" >&2; exit 2 ;;
    esac
    "$@" serve --model "$WORK/$CFG/sst" --port 0 --max-batch-size 32 $flag > "$WORK/serve.out" 2> "$WORK/serve.err" &
    pid=$!
    port=""  # the whole "listening on http://127.0.0.1:PORT" line, not a part written so far
    while [ -z "$port" ]; do
      kill -0 $pid 2>/dev/null || { echo "serve did not start: $(tail -3 "$WORK/serve.err")"; exit 1; }; sleep 0.2
      port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$WORK/serve.out" 2>/dev/null)
    done
    # the server's own memory: under AS_AVX2=1 (gdb runs it) or any wrapper, the first process down
    # the line of children that is named bertcc
    spid=$pid
    while [ "$(cat /proc/$spid/comm 2>/dev/null)" != bertcc ]; do
      child=$(pgrep -P "$spid" | head -1)
      [ -n "$child" ] || { echo "serve_sst2.sh: no process named bertcc under $B (pid $pid)" >&2; kill -TERM $pid; exit 1; }
      spid=$child
    done
    rss=$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' /proc/$spid/status)
    wrk -t"$WRK_THREADS" -c"$CONN" -d"${SECS}s" --timeout 30s --latency -s "$WORK/sst2.lua" \
      "http://127.0.0.1:$port/v1/classify" > "$WORK/wrk.txt" 2>&1
    metrics=$("$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
      "http://127.0.0.1:$port/metrics")
    hwm=$(awk '/^VmHWM/ {printf "%.0f", $2 / 1024}' /proc/$spid/status)
    rss_end=$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' /proc/$spid/status)
    kill -TERM $pid; wait $pid || true
    rps=$(sed -n 's/^Requests\/sec: *//p' "$WORK/wrk.txt")
    p50=$(awk '$1 == "50%" {print $2}' "$WORK/wrk.txt"); p99=$(awk '$1 == "99%" {print $2}' "$WORK/wrk.txt")
    errs=$(sed -n 's/.*Non-2xx or 3xx responses: *//p; s/.*Socket errors: *//p' "$WORK/wrk.txt" | tr '\n' ' ')
    mean=$(printf '%s\n' "$metrics" | awk '/^bertcc_batch_size_sum/ {s=$2} /^bertcc_batch_size_count/ {c=$2} END {if (c) printf "%.1f", s/c}')
    printf 'round %s %-8s %9s req/s  p50 %9s  p99 %9s  mean batch %5s  RSS %5s MiB loaded, %5s at the end, %5s peak  errors: %s\n' \
      "$r" "$mode" "$rps" "$p50" "$p99" "$mean" "$rss" "$rss_end" "$hwm" "${errs:-0}"
  done
  r=$((r + 1))
done
