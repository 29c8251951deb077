#!/bin/sh
# Single-threaded tokenization throughput: bertcc tokenize vs Hugging Face tokenizers (npm, Rust),
# same input, same run. HF is timed in-process around encodeBatch (file I/O excluded, rayon pinned
# to 1 thread); bertcc is timed as the whole command (start-up, reading, writing included).
# Usage: bench/tokenizer_bench.sh [BERTCC] [INPUT]   (default input: every text in ../shared/data)
set -eu
BERTCC="${1:-build/bertcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
T="$HERE/../tests/tokenizer"
WORK="${WORK:-/tmp/bertcc_tokbench}"; mkdir -p "$WORK"
INPUT="${2:-}"
if [ -z "$INPUT" ]; then INPUT="$WORK/texts.txt"; node "$T/extract_texts.js" "$HERE/../../shared/data" "$INPUT"; fi
VOCAB="${VOCAB:-$HERE/../../shared/data/bert_vocab/bert-base-uncased-vocab.txt}"
bytes=$(wc -c < "$INPUT")
hf_times=""; our_times=""
for rep in 1 2 3; do
  hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node "$T/hf_tokenize.js" "$VOCAB" true "$INPUT" "$WORK/hf.txt" --time 2>&1 >/dev/null | tail -1 | sed 's/.*"seconds":\([0-9.e-]*\).*/\1/')
  s=$(date +%s.%N); "$BERTCC" tokenize --vocab "$VOCAB" --input "$INPUT" --threads 1 > "$WORK/ours.txt" 2>/dev/null; e=$(date +%s.%N)
  hf_times="$hf_times $hf"; our_times="$our_times $(echo "$e - $s" | bc -l)"
done
cmp -s "$WORK/hf.txt" "$WORK/ours.txt" && same=identical || same=DIFFERENT
/usr/bin/python3 - "$bytes" "$hf_times" "$our_times" "$same" <<'PY'
import json, sys
b, same = int(sys.argv[1]), sys.argv[4]
hf, ours = min(map(float, sys.argv[2].split())), min(map(float, sys.argv[3].split()))
print(f"input {b/1e6:.1f} MB, 1 thread, best of 3: HF tokenizers {b/hf/1e6:.1f} MB/s, bertcc {b/ours/1e6:.1f} MB/s "
      f"-> {hf/ours:.2f}x; outputs {same}")
print(json.dumps({"bytes": b, "hf_seconds": hf, "bertcc_seconds": ours, "ratio": hf / ours, "outputs": same}))
PY
