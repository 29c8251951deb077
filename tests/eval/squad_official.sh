#!/bin/sh
# bertcc eval squad must print the official scripts' numbers to the last digit on BERT's
# leaderboard predictions (values from ../shared/data/SOURCES.md, computed with
# evaluate-v1.1.py / evaluate-v2.0.py).
set -u
BERTCC="$1"; D="$(cd "$(dirname "$0")/../../../shared/data/squad" && pwd)"
fails=0
v1=$("$BERTCC" eval squad --data "$D/v1.1/dev-v1.1.json" --predictions "$D/predictions/v1.1_dev_BERT_ensemble_GoogleAILanguage.json")
[ "$v1" = '{"exact_match":86.20624408703878,"f1":92.19557978351145}' ] && echo "ok   v1.1 dev: $v1" || { echo "FAIL v1.1: $v1"; fails=1; }
v2=$("$BERTCC" eval squad --data "$D/v2.0/dev-v2.0.first5articles.json" --predictions "$D/predictions/v2.0_dev_BERT_single_GoogleAILanguage.json")
want='{"exact":75.55081734186211,"f1":78.83251404548824,"total":1407,"HasAns_exact":70.35460992907801,"HasAns_f1":76.9040386695064,"HasAns_total":705,"NoAns_exact":80.76923076923077,"NoAns_f1":80.76923076923077,"NoAns_total":702}'
[ "$v2" = "$want" ] && echo "ok   v2.0 excerpt: $v2" || { echo "FAIL v2.0: $v2"; fails=1; }
"$BERTCC" eval squad --data "$D/v1.1/dev-v1.1.json" --predictions /nonexistent.json > /tmp/squad_err.$$ 2>&1 && { echo "FAIL missing file accepted"; fails=1; }
grep -q "/nonexistent.json" /tmp/squad_err.$$ || { echo "FAIL error does not name the file"; fails=1; }
rm -f /tmp/squad_err.$$
exit $fails
