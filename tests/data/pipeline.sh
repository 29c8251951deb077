#!/bin/sh
# Data pipeline end to end on generated text (no network): prep-corpus -> train-vocab ->
# create-pretraining-data (masked and dynamic-masking) -> init-model -> dump-step; plus bad input.
set -u
BERTCC="$1"; WORK="$2"
rm -rf "$WORK"; mkdir -p "$WORK/in/a" "$WORK/in/b"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
i=0
while [ $i -lt 40 ]; do
  printf 'Document %d starts here. Mr. Smith met Dr. Jones in the U.S. capital.\nThey talked for %d.5 hours about science... Then they left!\n\n"Why?" she asked. Nobody knew.\n' $i $i > "$WORK/in/a/doc$i.txt"
  printf 'Another corpus, file %d.\r\nIt uses CRLF line endings.\r\n' $i > "$WORK/in/b/doc$i.txt"
  i=$((i + 1))
done
printf '\n\n   \n' > "$WORK/in/a/empty.txt"
printf 'Bad bytes \377\376 here. Still a sentence.\n' > "$WORK/in/b/bad.txt"
"$BERTCC" prep-corpus --input "$WORK/in/a,$WORK/in/b" --output "$WORK/corpus" --shards 3 --test-fraction 0.2 > "$WORK/prep.log" 2>&1 || fail "prep-corpus exit"
grep -q "81 documents" "$WORK/prep.log" || fail "prep-corpus document count: $(cat "$WORK/prep.log")"
grep -q "1 empty documents skipped" "$WORK/prep.log" || fail "empty document not reported"
grep -q "bad.txt: 2 invalid UTF-8" "$WORK/prep.log" || fail "invalid UTF-8 not reported with the file name"
[ "$(ls "$WORK/corpus/train" | wc -l)" = 3 ] || fail "train shard count"
find "$WORK/corpus" -name "*.tmp.*" | grep -q . && fail "temporary files left"
grep -qx "Mr. Smith met Dr. Jones in the U.S. capital." "$WORK/corpus/train/part-0000"*.txt || fail "sentence segmentation"
# Streaming (bounded-memory) path gives the same shards as whole-file reading.
"$BERTCC" prep-corpus --input "$WORK/in/a,$WORK/in/b" --output "$WORK/corpus_stream" --shards 3 --test-fraction 0.2 --stream-above-mb 0 > /dev/null 2>&1 || fail "streaming prep-corpus"
diff -r "$WORK/corpus" "$WORK/corpus_stream" > /dev/null || fail "streamed shards differ from in-memory shards"
"$BERTCC" train-vocab --input "$WORK/corpus/train" --output "$WORK/vocab.txt" --vocab-size 300 --min-frequency 1 > /dev/null || fail "train-vocab"
[ "$(wc -l < "$WORK/vocab.txt")" = 300 ] || fail "vocab size $(wc -l < "$WORK/vocab.txt")"
[ "$(sed -n 101p "$WORK/vocab.txt")" = "[UNK]" ] || fail "[UNK] not at id 100"
unk=$("$BERTCC" tokenize --vocab "$WORK/vocab.txt" --input "$WORK/corpus/train/part-00000.txt" --tokens | grep -c '\[UNK\]' || true)
[ "$unk" = 0 ] || fail "$unk lines with [UNK] on training text"
"$BERTCC" create-pretraining-data --input "$WORK/corpus/train" --output "$WORK/h5" --vocab "$WORK/vocab.txt" --max-seq-length 64 --max-predictions-per-seq 10 --dupe-factor 2 > /dev/null || fail "create-pretraining-data"
"$BERTCC" create-pretraining-data --input "$WORK/corpus/test/part-00000.txt" --output "$WORK/dyn.h5" --vocab "$WORK/vocab.txt" --max-seq-length 64 --dynamic-masking > /dev/null || fail "dynamic masking shards"
"$BERTCC" init-model --config bert-tiny --vocab "$WORK/vocab.txt" --output "$WORK/model" > /dev/null || fail "init-model"
"$BERTCC" dump-step --model "$WORK/model" --batch "$WORK/h5/part-00000.h5" --rows 8 --out "$WORK/step.safetensors" > "$WORK/step.log" 2>&1 || fail "dump-step on created data: $(cat "$WORK/step.log")"
# bad input
"$BERTCC" prep-corpus --input "$WORK/nope" --output "$WORK/x" > "$WORK/e1" 2>&1 && fail "missing input accepted"
grep -q "nope: no such file" "$WORK/e1" || fail "missing input message: $(cat "$WORK/e1")"
# Wikipedia: plain XML, bzip2, multi-stream bzip2 (two concatenated streams), truncated bzip2
WIKI="$(dirname "$0")/wiki_sample.xml"
cp "$WIKI" "$WORK/wiki.xml"
bzip2 -k -c "$WIKI" > "$WORK/wiki.xml.bz2"
head -c 800 "$WIKI" | bzip2 -c > "$WORK/multi.xml.bz2"; tail -c +801 "$WIKI" | bzip2 -c >> "$WORK/multi.xml.bz2"
for w in wiki.xml wiki.xml.bz2 multi.xml.bz2; do
  "$BERTCC" prep-corpus --input "$WORK/$w" --output "$WORK/wiki_$w" --shards 1 > "$WORK/w.log" 2>&1 || fail "prep-corpus $w: $(cat "$WORK/w.log")"
  grep -q "4 pages, 2 articles, 1 redirects and 1 non-article" "$WORK/w.log" || fail "wiki stats $w: $(cat "$WORK/w.log")"
  grep -q "1 documents" "$WORK/w.log" || fail "wiki documents $w: $(cat "$WORK/w.log")"
  grep -qx "Mr. Proudhon used it in 1840." "$WORK/wiki_$w/train/part-00000.txt" || fail "wiki sentences $w"
done
size=$(wc -c < "$WORK/wiki.xml.bz2"); head -c $((size / 2)) "$WORK/wiki.xml.bz2" > "$WORK/trunc.xml.bz2"
"$BERTCC" prep-corpus --input "$WORK/trunc.xml.bz2" --output "$WORK/x" > "$WORK/e2" 2>&1 && fail "truncated bz2 accepted"
grep -q "trunc.xml.bz2: truncated bzip2 data" "$WORK/e2" || fail "truncated bz2 message: $(cat "$WORK/e2")"
[ -z "$(find "$WORK/x" -type f 2>/dev/null)" ] || fail "files left after a failed run: $(find "$WORK/x" -type f)"
printf 'a\nb\n' > "$WORK/nospecial.txt"
"$BERTCC" create-pretraining-data --input "$WORK/corpus/test/part-00000.txt" --output "$WORK/y.h5" --vocab "$WORK/nospecial.txt" > "$WORK/e3" 2>&1 && fail "vocab without specials accepted"
grep -q "nospecial.txt: the vocabulary has no \[UNK\] token" "$WORK/e3" || fail "vocab message: $(cat "$WORK/e3")"
[ ! -e "$WORK/y.h5" ] || fail "output written despite error"
[ $fails -eq 0 ] && echo "data pipeline: all checks passed"
exit $fails
