#!/usr/bin/env node
// Every text in ../shared/data that a BERT model would tokenize, one per line (inner newlines
// become spaces): GLUE sentences, SQuAD contexts and questions (v1.1 dev, v2.0 excerpt), CoNLL-2003
// sentences (tokens joined by spaces), AG News titles and descriptions.
//   node extract_texts.js SHARED_DATA_DIR OUTPUT
"use strict";
const fs = require("fs");
const path = require("path");
const [root, output] = process.argv.slice(2);
const texts = [];
const add = (t) => { if (t !== undefined && t !== null) texts.push(String(t).replace(/[\r\n]+/g, " ")); };
const tsv = (f) => fs.readFileSync(f, "utf8").split("\n").filter((l) => l.length).map((l) => l.split("\t"));

const glue = path.join(root, "glue");
for (const [task, file, cols, header] of [
  ["SST-2", "dev.tsv", [0], true], ["SST-2", "train.tsv", [0], true], ["MRPC", "dev.tsv", [3, 4], true],
  ["MRPC", "train.tsv", [3, 4], true], ["CoLA", "dev.tsv", [3], false], ["CoLA", "train.tsv", [3], false],
  ["RTE", "dev.tsv", [1, 2], true], ["RTE", "train.tsv", [1, 2], true], ["STS-B", "dev.tsv", [7, 8], true],
  ["STS-B", "train.tsv", [7, 8], true]]) {
  const f = path.join(glue, task, file);
  if (!fs.existsSync(f)) continue;
  tsv(f).slice(header ? 1 : 0).forEach((r) => cols.forEach((c) => add(r[c])));
}
const squadDir = path.join(root, "squad");
const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? walk(path.join(d, e.name)) : [path.join(d, e.name)]);
for (const f of walk(squadDir).filter((f) => f.endsWith(".json"))) {
  let j;
  try { j = JSON.parse(fs.readFileSync(f, "utf8")); } catch (e) { continue; }
  if (!j || !Array.isArray(j.data)) continue;
  for (const art of j.data) for (const p of art.paragraphs || []) {
    add(p.context);
    for (const qa of p.qas || []) add(qa.question);
  }
}
for (const f of walk(path.join(root, "conll2003"))) {
  let words = [];
  for (const line of fs.readFileSync(f, "utf8").split("\n")) {
    const t = line.trim();
    if (!t || t.startsWith("-DOCSTART-")) { if (words.length) add(words.join(" ")); words = []; continue; }
    words.push(t.split(/\s+/)[0]);
  }
  if (words.length) add(words.join(" "));
}
const ag = path.join(root, "ag_news", "test.csv");
if (fs.existsSync(ag)) {
  // RFC 4180 CSV: "label","title","description" with "" escapes.
  const s = fs.readFileSync(ag, "utf8");
  let field = "", row = [], q = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (q) {
      if (c === '"' && s[i + 1] === '"') { field += '"'; i++; } else if (c === '"') q = false; else field += c;
    } else if (c === '"') q = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n") { row.push(field); field = ""; if (row.length >= 3) { add(row[1]); add(row[2]); } row = []; }
    else if (c !== "\r") field += c;
  }
}
fs.writeFileSync(output, texts.join("\n") + "\n");
console.error(`extract_texts: ${texts.length} texts -> ${output}`);
