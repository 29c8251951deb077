#!/usr/bin/env node
// ONNX Runtime (CPU, onnxruntime-node) on a bertcc export.
//   node run_ort.js MODEL.onnx INPUTS.json OUTPUTS.json
//     INPUTS.json: {"input_ids": [[...], ...], "attention_mask": [[...]], "token_type_ids": [[...]]}
//     OUTPUTS.json: {NAME: {"dims": [...], "type": "float32"|"int64", "data": [...]}} for every graph output
//   node run_ort.js MODEL.onnx --bench BATCH SEQ THREADS STEPS
//     times STEPS runs on random ids (after 3 warm-up runs) with THREADS intra-op threads and
//     prints {"peer": "onnxruntime", "seq_per_s": ...} as JSON.
"use strict";
const fs = require("fs");
const path = require("path");
const ort = require(path.join(__dirname, "node_modules", "onnxruntime-node"));

const i64 = (rows) => new ort.Tensor("int64", BigInt64Array.from(rows.flat().map(BigInt)), [rows.length, rows[0].length]);

async function main() {
  const [model, a, b, ...rest] = process.argv.slice(2);
  if (a === "--bench") {
    const [B, S, T, N] = [b, ...rest].map(Number);
    const s = await ort.InferenceSession.create(model, { intraOpNumThreads: T, interOpNumThreads: 1,
      graphOptimizationLevel: "all", executionMode: "sequential" });
    const ids = Array.from({ length: B }, (_, r) => Array.from({ length: S }, (_, t) => (t === 0 ? 101 : 1000 + ((r * 31 + t * 17) % 20000))));
    const feeds = { input_ids: i64(ids), attention_mask: i64(ids.map((r) => r.map(() => 1))),
      token_type_ids: i64(ids.map((r) => r.map(() => 0))) };
    for (let k = 0; k < 3; ++k) await s.run(feeds);
    const t0 = process.hrtime.bigint();
    for (let k = 0; k < N; ++k) await s.run(feeds);
    const sec = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(JSON.stringify({ peer: "onnxruntime", version: ort.env.versions.common, batch: B, seq: S, threads: T,
      steps: N, step_ms: (sec / N) * 1000, seq_per_s: (B * N) / sec }));
    return;
  }
  const s = await ort.InferenceSession.create(model);
  const inp = JSON.parse(fs.readFileSync(a, "utf8"));
  const feeds = {};
  for (const name of s.inputNames) feeds[name] = i64(inp[name]);
  const res = await s.run(feeds);
  const out = {};
  for (const name of s.outputNames)  // int64 outputs (BigInt) as JSON numbers
    out[name] = { dims: res[name].dims, type: res[name].type, data: Array.from(res[name].data, Number) };
  fs.writeFileSync(b, JSON.stringify(out));
}
main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
