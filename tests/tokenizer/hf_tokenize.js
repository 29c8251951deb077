#!/usr/bin/env node
// Hugging Face tokenizers as the reference: builds a tokenizer.json for a vocab.txt
// (BertNormalizer + BertPreTokenizer + WordPiece, special tokens never split) and prints one line
// of ids per input line, without [CLS]/[SEP].
//   node hf_tokenize.js VOCAB LOWERCASE(true|false) INPUT OUTPUT [--time]
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

async function main() {
  const [vocabPath, lower, input, output, timeFlag] = process.argv.slice(2);
  const tok = Tokenizer.fromString(buildTokenizerJson(vocabPath, lower === "true"));
  let lines = fs.readFileSync(input, "utf8").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const out = new Array(lines.length);
  const t0 = process.hrtime.bigint();
  const chunk = 4096;
  for (let i = 0; i < lines.length; i += chunk) {
    const encs = await tok.encodeBatch(lines.slice(i, i + chunk), { addSpecialTokens: false });
    encs.forEach((e, k) => { out[i + k] = e.getIds().join(" "); });
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  fs.writeFileSync(output, out.length ? out.join("\n") + "\n" : "");
  if (timeFlag === "--time") {
    const bytes = Buffer.byteLength(lines.join("\n"));
    process.stderr.write(JSON.stringify({ peer: "hf-tokenizers", lines: lines.length, bytes, seconds }) + "\n");
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
