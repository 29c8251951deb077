# Shared by the training test scripts (sourced): failure counting and a small corpus.
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# make_corpus BERTCC WORK: 60 short documents -> $WORK/corpus (2 train shards) + $WORK/vocab.txt (400 pieces)
make_corpus() {
  mkdir -p "$2/text"
  i=0
  while [ $i -lt 60 ]; do
    printf 'Sentence one of document %d is here. The second sentence follows it closely.\nA third one, with number %d, ends the paragraph. Then a fourth line appears about trains, clocks and gardens.\n' $i $((i * 7)) > "$2/text/d$i.txt"
    i=$((i + 1))
  done
  "$1" prep-corpus --input "$2/text" --output "$2/corpus" --shards 2 > /dev/null 2>&1 || fail prep-corpus
  "$1" train-vocab --input "$2/corpus/train" --output "$2/vocab.txt" --vocab-size 400 --min-frequency 1 > /dev/null || fail train-vocab
}
