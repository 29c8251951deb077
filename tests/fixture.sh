#!/bin/sh
# The data the training and device tests share, made once per test run (ctest's fixture
# test_data, FIXTURES_SETUP) instead of once in every script. Scripts read it and never write it.
#   tests/fixture.sh BERTCC DIR
# DIR/corpus, DIR/vocab.txt   60 short documents in 2 train shards, a 400-piece WordPiece vocabulary
# DIR/h5                      masked-LM/NSP shards from them (seq 64, 10 predictions, dupe factor 3)
# DIR/tiny.json               the smallest BERT that exercises every path: 2 layers, hidden 64, 2 heads
#                             of 32, intermediate 128, this vocabulary (issue 38: identity checks run on it)
# with ../shared/data (the fine-tuning checks; skipped without it, as the scripts say):
# DIR/ft/...                  make_ft_data's small cuts (tests/train/common.sh)
# DIR/ft/bert, DIR/ft/electra randomly initialised BERT and ELECTRA of tiny.json's size with the
#                             bert-base-uncased vocabulary (seed 1)
# DIR/done                    written last: a fixture without it is incomplete.
set -u
B="$1"; F="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/train/common.sh"
rm -rf "$F"; mkdir -p "$F"
make_corpus "$B" "$F"
"$B" create-pretraining-data --input "$F/corpus/train" --output "$F/h5" --vocab "$F/vocab.txt" --max-seq-length 64 \
  --max-predictions-per-seq 10 --dupe-factor 3 > /dev/null || fail "create-pretraining-data"
cat > "$F/tiny.json" <<'EOF'
{"model_type": "bert", "vocab_size": 400, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 128, "max_position_embeddings": 128, "type_vocab_size": 2}
EOF
S="$HERE/../../shared/data"
if PY=/usr/bin/python3 make_ft_data "$S" "$F/ft" small; then
  cat > "$F/ft/bert.json" <<'EOF'
{"model_type": "bert", "vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 128, "max_position_embeddings": 128, "type_vocab_size": 2}
EOF
  cat > "$F/ft/electra.json" <<'EOF'
{"model_type": "electra", "vocab_size": 30522, "embedding_size": 32, "hidden_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 128, "type_vocab_size": 2}
EOF
  for m in bert electra; do
    "$B" init-model --config "$F/ft/$m.json" --vocab "$F/ft/uncased_vocab.txt" --output "$F/ft/$m" --seed 1 > /dev/null 2>&1 \
      || fail "init-model $m"
  done
else
  echo "note: ../shared/data not found: no fine-tuning data in the fixture"
fi
[ "$fails" -eq 0 ] || { echo "fixture: $fails failure(s)"; exit 1; }
date > "$F/done"
echo "fixture in $F: $(ls "$F" | tr '\n' ' ')"
