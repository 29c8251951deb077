#!/usr/bin/env node
// Hugging Face tokenizers as the reference: builds a tokenizer.json for a vocab.txt
// (BertNormalizer + BertPreTokenizer + WordPiece, special tokens never split) and prints one line
// of ids per input line, without [CLS]/[SEP].
//   node hf_tokenize.js VOCAB LOWERCASE(true|false) INPUT OUTPUT [--time]
//   node hf_tokenize.js --dir MODEL_DIR INPUT OUTPUT [--special]  (the tokenizer.json bertcc wrote
//     there, and a check of its [CLS] A [SEP] B [SEP] template and tokenizer_config.json against it;
//     --special: each line encoded with addSpecialTokens, [CLS] ... [SEP] from that template)
// With --time, prints the encoding time (in-process, excluding file I/O) to stderr as JSON.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require(path.join(__dirname, "node_modules", "tokenizers"));

function buildTokenizerJson(vocabPath, lowercase) {
  const vocab = {};
  const lines = fs.readFileSync(vocabPath, "utf8").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  lines.forEach((tok, i) => { vocab[tok.trimEnd()] = i; });
  const added = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].filter((t) => t in vocab).map((t) => ({
    id: vocab[t], content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  return JSON.stringify({
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase },
    pre_tokenizer: { type: "BertPreTokenizer" }, post_processor: null, decoder: null,
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  });
}

// The directory's pair template and tokenizer_config.json: [CLS] A [SEP] B [SEP] with type ids 0/1,
// the specials' ids as in vocab.txt, do_lower_case equal to the normalizer's lowercase.
async function checkDir(tok, dir, lines) {
  const fail = (m) => { throw new Error(`${dir}: ${m}`); };
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const map = JSON.parse(fs.readFileSync(path.join(dir, "special_tokens_map.json"), "utf8"));
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const vocab = fs.readFileSync(path.join(dir, "vocab.txt"), "utf8").split("\n");
  if (cfg.do_lower_case !== tj.normalizer.lowercase) fail("do_lower_case differs from tokenizer.json");
  for (const k of ["cls_token", "sep_token", "pad_token", "unk_token", "mask_token"]) {
    if (map[k] !== cfg[k]) fail(`${k} differs between special_tokens_map.json and tokenizer_config.json`);
    const id = tok.tokenToId(map[k]);
    if (id !== vocab.indexOf(map[k])) fail(`${k} ${map[k]} has id ${id}, vocab.txt line ${vocab.indexOf(map[k])}`);
  }
  const cls = tok.tokenToId("[CLS]"), sep = tok.tokenToId("[SEP]");
  for (let i = 0; i + 1 < Math.min(lines.length, 500); i += 2) {
    const [a, b] = [lines[i], lines[i + 1]];
    const ea = await tok.encode(a, null, { addSpecialTokens: false }),
      eb = await tok.encode(b, null, { addSpecialTokens: false });
    const p = await tok.encode(a, b);
    const want = [cls, ...ea.getIds(), sep, ...eb.getIds(), sep];
    const types = [...Array(ea.getIds().length + 2).fill(0), ...Array(eb.getIds().length + 1).fill(1)];
    if (p.getIds().join() !== want.join() || p.getTypeIds().join() !== types.join())
      fail(`pair encoding of lines ${i + 1}/${i + 2} is not [CLS] A [SEP] B [SEP]`);
  }
}

async function main() {
  const [vocabPath, lower, input, output, timeFlag] = process.argv.slice(2);
  const fromDir = vocabPath === "--dir";
  const tok = fromDir ? Tokenizer.fromFile(path.join(lower, "tokenizer.json"))
                      : Tokenizer.fromString(buildTokenizerJson(vocabPath, lower === "true"));
  let lines = fs.readFileSync(input, "utf8").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const out = new Array(lines.length);
  const t0 = process.hrtime.bigint();
  const chunk = 4096;
  for (let i = 0; i < lines.length; i += chunk) {
    const encs = await tok.encodeBatch(lines.slice(i, i + chunk), { addSpecialTokens: fromDir && timeFlag === "--special" });
    encs.forEach((e, k) => { out[i + k] = e.getIds().join(" "); });
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  if (fromDir) await checkDir(tok, lower, lines);
  fs.writeFileSync(output, out.length ? out.join("\n") + "\n" : "");
  if (timeFlag === "--time") {
    const bytes = Buffer.byteLength(lines.join("\n"));
    process.stderr.write(JSON.stringify({ peer: "hf-tokenizers", lines: lines.length, bytes, seconds }) + "\n");
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
