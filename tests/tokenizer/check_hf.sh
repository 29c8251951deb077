#!/bin/sh
# bertcc tokenize vs Hugging Face tokenizers (npm, Rust) on every text in ../shared/data and on
# the hand-written adversarial file, for bert-base-uncased and bert-base-cased: every line must
# be identical. Usage: check_hf.sh BERTCC WORKDIR
set -eu
BERTCC="$1"; WORK="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="$HERE/../../../shared/data"
[ -d "$HERE/node_modules/tokenizers" ] || { echo "FAIL: tests/tokenizer/node_modules missing (run scripts/install-deps.sh)"; exit 1; }
[ -d "$DATA" ] || { echo "FAIL: $DATA not found"; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"
node "$HERE/extract_texts.js" "$DATA" "$WORK/texts.txt"
fails=0
for spec in uncased:true cased:false; do
  name=${spec%%:*}; lower=${spec##*:}
  vocab="$DATA/bert_vocab/bert-base-$name-vocab.txt"
  "$BERTCC" init-model --config bert-tiny --vocab "$vocab" --output "$WORK/model_$name" >/dev/null
  for input in "$WORK/texts.txt" "$HERE/adversarial.txt"; do
    base=$(basename "$input" .txt)
    node "$HERE/hf_tokenize.js" "$vocab" "$lower" "$input" "$WORK/hf_${name}_$base.txt"
    "$BERTCC" tokenize --vocab "$vocab" --input "$input" > "$WORK/ours_${name}_$base.txt" 2>/dev/null
    n=$(wc -l < "$WORK/hf_${name}_$base.txt")
    # The tokenizer files bertcc writes into a model directory (tokenizer.json for AutoTokenizer's
    # fast path) must give the same ids.
    node "$HERE/hf_tokenize.js" --dir "$WORK/model_$name" "$input" "$WORK/dir_${name}_$base.txt"
    if cmp -s "$WORK/hf_${name}_$base.txt" "$WORK/dir_${name}_$base.txt"; then
      echo "ok   $name $base: model directory's tokenizer.json gives the same $n lines"
    else
      echo "FAIL $name $base: the model directory's tokenizer.json differs; first:"
      diff "$WORK/hf_${name}_$base.txt" "$WORK/dir_${name}_$base.txt" | head -4
      fails=$((fails + 1))
    fi
    # With [CLS] ... [SEP] (tokenize --add-special-tokens; HF's add_special_tokens=True through the
    # model directory's template)
    node "$HERE/hf_tokenize.js" --dir "$WORK/model_$name" "$input" "$WORK/dirsp_${name}_$base.txt" --special
    "$BERTCC" tokenize --vocab "$vocab" --input "$input" --add-special-tokens > "$WORK/oursp_${name}_$base.txt" 2>/dev/null
    if cmp -s "$WORK/dirsp_${name}_$base.txt" "$WORK/oursp_${name}_$base.txt"; then
      echo "ok   $name $base: --add-special-tokens = add_special_tokens=True, $n lines"
    else
      echo "FAIL $name $base: --add-special-tokens differs from add_special_tokens=True; first:"
      diff "$WORK/dirsp_${name}_$base.txt" "$WORK/oursp_${name}_$base.txt" | head -4
      fails=$((fails + 1))
    fi
    if cmp -s "$WORK/hf_${name}_$base.txt" "$WORK/ours_${name}_$base.txt"; then
      echo "ok   $name $base: $n lines identical"
    else
      bad=$(diff "$WORK/hf_${name}_$base.txt" "$WORK/ours_${name}_$base.txt" | grep -c '^<' || true)
      echo "FAIL $name $base: $bad of $n lines differ; first:"
      diff "$WORK/hf_${name}_$base.txt" "$WORK/ours_${name}_$base.txt" | head -4
      fails=$((fails + 1))
    fi
  done
done
exit $fails
