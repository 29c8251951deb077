// The page served at / : pick a loaded model and one of its tasks, ask a question about a context
// (the answer is highlighted in the context), classify / tag a text, fill its [MASK]s or embed it;
// empty inputs are refused before anything is sent, and each answer comes with its latency and the
// curl command that sends the same request. Plain HTML and JavaScript, no external files.
#pragma once

namespace bertcc::serve {

inline constexpr const char* kPageHtml = R"PAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bertcc serve</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}
textarea,input,select{width:100%;box-sizing:border-box;font:inherit;padding:.4rem;margin:.2rem 0 .8rem}
textarea{height:8rem} button{font:inherit;padding:.4rem 1.2rem} mark{background:#ffe066;padding:0 .1rem}
#out{white-space:pre-wrap;border:1px solid #ccc;padding:.8rem;min-height:2rem} .ent{background:#cde;border-radius:3px;padding:0 .2rem}
.err{color:#b00} #req{white-space:pre-wrap;font:13px/1.4 monospace;background:#f6f6f6;padding:.6rem;margin-top:.6rem}
</style></head><body>
<h1>bertcc serve</h1>
<label>Model <select id="model"></select></label>
<label>Task <select id="task"></select></label>
<div id="qa"><label>Question <input id="question" value="What does bertcc do?"></label>
<label>Context <textarea id="context">bertcc is one native C++ engine that pre-trains and fine-tunes BERT models and serves them over HTTP.</textarea></label></div>
<div id="txt" hidden><label>Text <textarea id="text">The engine was written in Berlin by Ada Lovelace for Siemens.</textarea></label></div>
<button id="go">Run</button>
<h3>Result</h3><div id="out"></div><div id="req" hidden></div>
<script>
const $ = (id) => document.getElementById(id);
let models = [];
const esc = (s) => s.replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
function current() {
  const m = models.find((x) => x.name === $("model").value);
  return m && {name: m.name, task: $("task").value || m.task};
}
function tasks() {  // the chosen model's tasks, its main one first (a pre-training checkpoint: fill-mask, embed)
  const m = models.find((x) => x.name === $("model").value);
  $("task").innerHTML = (m ? (m.tasks || [m.task]) : []).map((t) => '<option value="' + esc(t) + '">' + esc(t) + "</option>").join("");
  show();
}
function show() {
  const m = current(); $("qa").hidden = !m || m.task !== "qa"; $("txt").hidden = !m || m.task === "qa";
  if (m && m.task === "fill-mask" && !$("text").value.includes("[MASK]")) $("text").value = "The capital of France is [MASK].";
}
const fail = (msg) => { $("out").innerHTML = '<span class="err">' + esc(msg) + "</span>"; };
async function run() {
  const m = current(); if (!m) return;
  // Inputs checked here, before anything is sent: an empty context has no answer to find.
  if (m.task === "qa" && !$("question").value.trim()) return fail("Type a question.");
  if (m.task === "qa" && !$("context").value.trim()) return fail("Paste a context: the passage that holds the answer.");
  if (m.task !== "qa" && !$("text").value.trim()) return fail("Type a text.");
  if (m.task === "fill-mask" && !$("text").value.includes("[MASK]")) return fail("Put [MASK] where a word should be predicted.");
  const body = m.task === "qa" ? {model: m.name, question: $("question").value, context: $("context").value}
                               : {model: m.name, text: $("text").value};
  $("out").textContent = "…"; $("req").hidden = true;
  const t0 = performance.now();
  const r = await fetch("/v1/" + m.task, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const j = await r.json();
  const ms = performance.now() - t0;
  // The same request from a shell (single quotes in the JSON written as '\'').
  $("req").textContent = "answered in " + ms.toFixed(1) + " ms (status " + r.status + ")\n\ncurl -s " + location.origin +
    "/v1/" + m.task + " -H 'Content-Type: application/json' -d '" + JSON.stringify(body).replace(/'/g, "'\\''") + "'";
  $("req").hidden = false;
  if (!r.ok) { $("out").innerHTML = '<span class="err">' + esc(j.error || r.statusText) + "</span>"; return; }
  if (m.task === "qa") {
    const c = [...$("context").value];  // offsets count characters (code points)
    const ans = j.start < 0 ? "(no answer)" : j.answer;
    $("out").innerHTML = "<b>" + esc(ans) + "</b> (score " + j.score.toFixed(3) + ")<br><br>" +
      (j.start < 0 ? esc(c.join("")) : esc(c.slice(0, j.start).join("")) + '<mark id="answer">' +
       esc(c.slice(j.start, j.end).join("")) + "</mark>" + esc(c.slice(j.end).join("")));
  } else if (m.task === "classify") {
    $("out").innerHTML = "<b id=\"label\">" + esc(String(j.label ?? j.score)) + "</b>" +
      (j.scores ? "<br>" + Object.entries(j.scores).map(([k, v]) => esc(k) + ": " + v.toFixed(3)).join("<br>") : "");
  } else if (m.task === "fill-mask") {
    $("out").innerHTML = j.masks.map((c, i) => "[MASK] " + (i + 1) + ": " +
      c.map((x) => "<b>" + esc(x.token) + "</b> " + x.score.toFixed(3)).join(", ")).join("<br>");
  } else if (m.task === "embed") {
    $("out").textContent = j.embedding.length + "-dimensional " + j.pooling + " embedding: [" +
      j.embedding.slice(0, 6).map((v) => v.toFixed(4)).join(", ") + ", …]";
  } else {
    const c = [...$("text").value]; let html = "", at = 0;
    for (const e of j.entities) { html += esc(c.slice(at, e.start).join("")) + '<span class="ent">' +
      esc(c.slice(e.start, e.end).join("")) + " <small>" + esc(e.type) + "</small></span>"; at = e.end; }
    $("out").innerHTML = html + esc(c.slice(at).join(""));
  }
}
fetch("/v1/models").then((r) => r.json()).then((j) => {
  models = j.models;
  $("model").innerHTML = models.map((m) => '<option value="' + esc(m.name) + '">' + esc(m.name) + " (" + m.task + ")</option>").join("");
  tasks();
});
$("model").onchange = tasks; $("task").onchange = show; $("go").onclick = run;
</script></body></html>
)PAGE";

}  // namespace bertcc::serve
