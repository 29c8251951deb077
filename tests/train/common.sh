# Shared by the training test scripts (sourced): failure counting and a small corpus.
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# wait_for_dir DIR PID: until DIR exists, PID has ended or 600 s have passed (no fixed step time: a
# loaded machine can take minutes)
wait_for_dir() {
  _n=0
  while [ ! -d "$1" ] && kill -0 "$2" 2>/dev/null && [ $_n -lt 12000 ]; do sleep 0.05; _n=$((_n + 1)); done
}
# term_until_gone PID: one SIGTERM every 5 ms until PID is gone (at most 4000; the count in $sent).
# However many arrive, none may disturb the step in flight.
term_until_gone() {
  sent=0
  while kill -TERM "$1" 2>/dev/null && [ $sent -lt 4000 ]; do sent=$((sent + 1)); sleep 0.005; done
}

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

# serve_same_on BERTCC DEVICE W [RTOL]: serve --device DEVICE against serve on the cpu with the models
# device.sh and e2e.sh fine-tune under W (tests/serve/same_on_device.py: the same bodies, or with RTOL
# the same structure and strings and numbers within RTOL); needs PY.
serve_same_on() {
  if "$1" serve --help > /dev/null 2>&1; then
    RTOL="${4:-}" "$PY" "$(dirname "$0")/../serve/same_on_device.py" "$1" "$2" "$3/ft_sst2_cpu" "$3/ft_squad_cpu" \
      "$3/ft_ner_cpu" "$3/cpu_fp32/model" "$3/ft_squad2_joint_cpu" > "$3/serve.log" 2>&1 \
      || fail "serve on $2: $(grep -v '^ok' "$3/serve.log" | head -5)"
    grep '^ok' "$3/serve.log"
  else
    echo "note: this build has no serve (cpp-httplib missing): serve --device not checked"
  fi
}

# make_ft_data SHARED_DATA OUT [small]: small fine-tuning sets cut from ../shared/data (the real files),
# for the device checks: OUT/sst (SST-2: 48 train, 32 dev), OUT/stsb (32, 16), OUT/ner.txt (CoNLL-2003,
# 25 sentences), OUT/sq.json (SQuAD v1.1 dev, first article, 2 paragraphs), OUT/sq2.json (SQuAD v2.0,
# the same cut), OUT/uncased_vocab.txt (bert-base-uncased). "small" (the test fixture, whose checks are
# identities): SST-2 24 train and 16 dev, STS-B 16 and 8, 12 CoNLL sentences, SQuAD v1.1 the first
# paragraph's first 8 questions, v2.0 the first paragraph (9 questions, 4 of them unanswerable).
# Returns 1 when SHARED_DATA lacks them.
make_ft_data() {
  [ -d "$1/glue" ] || return 1
  mkdir -p "$2/sst" "$2/stsb"
  n1=49; n2=33; n3=33; n4=17; n5=24; paras=2; qs=0
  [ "${3:-}" = small ] && { n1=25; n2=17; n3=17; n4=9; n5=12; paras=1; qs=8; }
  head -$n1 "$1/glue/SST-2/train.tsv" > "$2/sst/train.tsv"; head -$n2 "$1/glue/SST-2/dev.tsv" > "$2/sst/dev.tsv"
  head -$n3 "$1/glue/STS-B/train.tsv" > "$2/stsb/train.tsv"; head -$n4 "$1/glue/STS-B/dev.tsv" > "$2/stsb/dev.tsv"
  awk -v last=$n5 'BEGIN{n=0} /^$/{n++} n<=last{print}' "$1/conll2003/iob2/train.txt" > "$2/ner.txt"
  cp "$1/bert_vocab/bert-base-uncased-vocab.txt" "$2/uncased_vocab.txt"
  "${PY:-python3}" - "$1/squad/v1.1/dev-v1.1.json" "$2/sq.json" "$1/squad/v2.0/dev-v2.0.first5articles.json" "$2/sq2.json" $paras $qs <<'PYEOF'
import json, sys
paras, qs = int(sys.argv[5]), int(sys.argv[6])
for src, dst, version in ((sys.argv[1], sys.argv[2], "1.1"), (sys.argv[3], sys.argv[4], "v2.0")):
    d = json.load(open(src)); a = d["data"][0]; a["paragraphs"] = a["paragraphs"][:paras]
    if qs and version == "1.1":
        for p in a["paragraphs"]:
            p["qas"] = p["qas"][:qs]
    json.dump({"version": version, "data": [a]}, open(dst, "w"))
PYEOF
}

# use_fixture BERTCC WORK: FIX = the shared test data (tests/fixture.sh): ctest's, named by
# BERTCC_TEST_FIXTURE, or, when a script runs alone, made under WORK/fixture
use_fixture() {
  if [ -n "${BERTCC_TEST_FIXTURE:-}" ] && [ -f "$BERTCC_TEST_FIXTURE/done" ]; then
    FIX="$BERTCC_TEST_FIXTURE"
  else
    FIX="$2/fixture"
    sh "$(cd "$(dirname "$0")/.." && pwd)/fixture.sh" "$1" "$FIX" > "$2/fixture.log" 2>&1 || fail "fixture: $(tail -3 "$2/fixture.log")"
  fi
}
