#!/bin/sh
# int8 and fp32 inference against the peers, in one run on this machine: a random CONFIG
# (bert-base) exported by `bertcc export-onnx` and run by
#   ONNX Runtime fp32 (onnxruntime-node, all graph optimisations) on that export;
#   ONNX Runtime int8 dynamic: the same export with its linear MatMuls rewritten as ORT's
#     quantize_dynamic writes them (bench/ort_quantize_dynamic.py: DynamicQuantizeLinear uint8 per
#     tensor -> MatMulInteger with int8 per-tensor weights -> Cast -> Mul; ORT fuses it at load),
#     checked first against the fp32 graph's outputs on the same ids (relative RMS error < 5 %);
#   PyTorch fp32 and PyTorch `quantize_dynamic(model, {nn.Linear}, qint8)` on the same weights
#     (bench/peer_torch_int8.py);
#   bertcc `bench infer` fp32, bf16 and int8 (int8 skipped, with a note, where the binary lacks it);
#   then, with AVX2=1 (the default), all of them again as on an AVX2-only CPU (bench/as_avx2.sh:
#     every cpuid and xgetbv answers as an AVX2-only CPU's, so ORT's MLAS, PyTorch and oneDNN pick
#     their AVX2 kernels), bertcc as the binary BERTCC_AVX2 (default BERTCC; build one for an AVX2
#     CPU, e.g. cmake -DBERTCC_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=znver3, so that its own code has
#     no AVX-512 either). These "(AVX2 emulated)" rows estimate the ratios on an AVX2-only CPU; the
#     caches, clocks and ports stay this CPU's.
# Batch BATCH x sequence SEQ, THREADS threads each, STEPS timed steps after 3 warm-up steps.
# ROUNDS rounds (default 3), each running every peer once, back to back: a ratio is taken within
# a round (the two runs minutes apart at most, so a shared machine's drift in speed touches both)
# and the rounds' median is reported with their range.
# Prints one JSON line per run, then a table: median sequences/s over the rounds, ratio to bertcc
# fp32, the same-run GEMM probe (bertcc's oneDNN GEMM of the model's shapes, in the row's
# precision), then the issue's ratios with each round's.
#   bench/int8_peers.sh BERTCC [CONFIG] [BATCH] [SEQ] [THREADS] [STEPS]
#   env: WORK, AVX2 (1, the default: run the AVX2-emulated rows), BERTCC_AVX2, ROUNDS (3)
set -eu
B="$1"; CONFIG="${2:-bert-base}"; BATCH="${3:-8}"; SEQ="${4:-128}"; THREADS="${5:-2}"; STEPS="${6:-10}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/tmp/bertcc_int8_peers}"; AVX2="${AVX2:-1}"; BA="${BERTCC_AVX2:-$B}"; ROUNDS="${ROUNDS:-3}"; PY=/usr/bin/python3
case "$ROUNDS" in ''|*[!0-9]*|0) echo "int8_peers.sh: ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 1 ;; esac
[ -d "$HERE/tests/onnx/node_modules/onnxruntime-node" ] || { echo "int8_peers.sh: run scripts/install-deps.sh first" >&2; exit 1; }
"$PY" -c 'import onnx' 2> /dev/null || { echo "int8_peers.sh: Python's onnx package not found (Debian: python3-onnx)" >&2; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"
"$PY" -c 'import sys; print("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["w%d" % i for i in range(5, 30522)]))' > "$WORK/vocab.txt"
"$B" init-model --config "$CONFIG" --vocab "$WORK/vocab.txt" --output "$WORK/model" > /dev/null
"$B" export-onnx --model "$WORK/model" --out "$WORK/fp32.onnx" 2> /dev/null
"$PY" "$HERE/bench/ort_quantize_dynamic.py" "$WORK/fp32.onnx" "$WORK/int8.onnx"
# the rewritten graph against the fp32 graph on the same ids: the int8 peer computes the same model
"$PY" -c '
import json, random, sys
random.seed(1); B, T = 4, 64
ids = [[101] + [random.randrange(1000, 30000) for _ in range(T - 2)] + [102] for _ in range(B)]
json.dump({"input_ids": ids, "attention_mask": [[1] * T for _ in ids], "token_type_ids": [[0] * T for _ in ids]},
          open(sys.argv[1], "w"))' "$WORK/check_in.json"
for g in fp32 int8; do node "$HERE/tests/onnx/run_ort.js" "$WORK/$g.onnx" "$WORK/check_in.json" "$WORK/check_$g.json"; done
"$PY" - "$WORK/check_fp32.json" "$WORK/check_int8.json" <<'PY'
import json, math, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for name in a:
    x, y = a[name]["data"], b[name]["data"]
    rms = math.sqrt(sum(v * v for v in x) / len(x))
    err = math.sqrt(sum((u - v) ** 2 for u, v in zip(x, y)) / len(x))
    cos = sum(u * v for u, v in zip(x, y)) / math.sqrt(sum(u * u for u in x) * sum(v * v for v in y))
    print("ORT int8 graph vs fp32 graph, %s: relative RMS error %.4f, max |diff| %.4f, cosine %.5f" % (
        name, err / rms, max(abs(u - v) for u, v in zip(x, y)), cos))
    if not err / rms < 0.05:
        sys.exit("int8_peers.sh: the rewritten ORT graph is not close to the fp32 graph (%s)" % name)
PY
echo "int8_peers: $(lscpu | sed -n 's/^Model name: *//p'); $THREADS threads; $CONFIG batch $BATCH seq $SEQ; $STEPS steps; $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  flags: $(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|avx512_bf16|amx_bf16|amx_int8)$' | tr '\n' ' ')"
R="$WORK/results.jsonl"; : > "$R"
run() {  # label, then the command printing JSON (last line)
  label=$1; shift
  "$@" > "$WORK/out.txt" 2> "$WORK/err.txt" || { echo "$label: failed: $(tail -2 "$WORK/err.txt")"; return 0; }
  j=$(tail -1 "$WORK/out.txt")
  echo "$j"
  printf '%s\n' "$j" | "$PY" -c 'import json, sys; j = json.load(sys.stdin); j["label"] = sys.argv[1]; j["round"] = int(sys.argv[2]); print(json.dumps(j))' "$label" "$round" >> "$R"
}
isas="native"; [ "$AVX2" = 1 ] && isas="native AVX2"
for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS"
  for isa in $isas; do
    if [ $isa = AVX2 ]; then as="$HERE/bench/as_avx2.sh"; sfx=" (AVX2 emulated)"; bin="$BA"; else as=""; sfx=""; bin="$B"; fi
    run "ONNX Runtime fp32$sfx" $as node "$HERE/tests/onnx/run_ort.js" "$WORK/fp32.onnx" --bench "$BATCH" "$SEQ" "$THREADS" "$STEPS"
    run "ONNX Runtime int8 dynamic$sfx" $as node "$HERE/tests/onnx/run_ort.js" "$WORK/int8.onnx" --bench "$BATCH" "$SEQ" "$THREADS" "$STEPS"
    for p in fp32 bf16 int8; do
      run "bertcc $p$sfx" $as "$bin" bench infer --config "$CONFIG" --batch "$BATCH" --seq "$SEQ" --precision $p \
        --threads "$THREADS" --steps "$STEPS" --warmup 3
    done
    $as "$PY" "$HERE/bench/peer_torch_int8.py" "$WORK/model" --batch "$BATCH" --seq "$SEQ" --threads "$THREADS" --steps "$STEPS" \
      > "$WORK/torch.jsonl" 2> "$WORK/err.txt" || echo "PyTorch$sfx: failed: $(tail -2 "$WORK/err.txt")"
    cat "$WORK/torch.jsonl"
    "$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l); j["round"] = int(sys.argv[2])
    j["label"] = ("PyTorch fp32" if j["precision"] == "fp32" else "PyTorch quantize_dynamic int8 (%s)" % j["quantized_engine"]) + sys.argv[3]
    print(json.dumps(j))' "$WORK/torch.jsonl" "$round" "$sfx" >> "$R"
  done
done
"$PY" - "$R" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = collections.OrderedDict()  # label -> {round: row}
for r in rows:
    runs.setdefault(r["label"], {})[r["round"]] = r
med = lambda xs: statistics.median(xs)
rate = {k: med([r["seq_per_s"] for r in v.values()]) for k, v in runs.items()}
base = rate.get("bertcc fp32")
print("\n| inference | sequences/s (median of rounds) | vs bertcc fp32 | GEMM probe TFLOP/s (model TFLOP/s) |\n|---|---:|---:|---|")
for k, v in runs.items():
    probe = ""
    if all("gemm_probe_tflops" in r for r in v.values()):
        g, m = med([r["gemm_probe_tflops"] for r in v.values()]), med([r["model_tflops"] for r in v.values()])
        probe = "%.3f (%.3f, %.0f %%)" % (g, m, 100 * m / g)
    print("| %s | %.2f | %s | %s |" % (k, rate[k], "%.2f" % (rate[k] / base) if base else "", probe))
def ratio(a, b):
    if a in runs and b in runs:
        per = [runs[a][i]["seq_per_s"] / runs[b][i]["seq_per_s"] for i in sorted(runs[a]) if i in runs[b]]
        if per:
            print("%s / %s = %.2f (median of %d rounds; rounds: %s)" % (a, b, med(per), len(per), ", ".join("%.2f" % x for x in per)))
print()
for sfx in ("", " (AVX2 emulated)"):
    ratio("bertcc int8" + sfx, "ONNX Runtime int8 dynamic" + sfx)
    ratio("bertcc fp32" + sfx, "ONNX Runtime fp32" + sfx)
    torch_int8 = [k for k in runs if k.startswith("PyTorch quantize_dynamic") and ("emulated" in k) == bool(sfx)]
    if torch_int8:
        ratio("bertcc int8" + sfx, torch_int8[0])
    ratio("bertcc int8" + sfx, "bertcc fp32" + sfx)
PY
