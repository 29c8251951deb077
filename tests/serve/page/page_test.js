#!/usr/bin/env node
// The page bertcc serve shows at /, in headless Chromium (Debian's chromium, driven by
// playwright-core): it lists the models, answers a question with the answer highlighted in the
// context (checked against /v1/qa's character offsets), classifies a text (with its latency and a
// curl command that gets the same answer), refuses an empty context, fills [MASK]s and embeds. A screenshot of the
// answered question is written to OUT/page.png.
//   node page_test.js URL OUT
"use strict";
const fs = require("fs");
const path = require("path");
const { chromium } = require(path.join(__dirname, "node_modules", "playwright-core"));

async function main() {
  const [url, out] = process.argv.slice(2);
  const exe = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => fs.existsSync(p));
  if (!exe) throw new Error("chromium not found (Debian: chromium)");
  const browser = await chromium.launch({ executablePath: exe, args: ["--no-sandbox", "--headless=new"] });
  const fails = [];
  const check = (ok, what) => { console.log((ok ? "ok   " : "FAIL ") + what); if (!ok) fails.push(what); };
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(url);
    await page.waitForFunction(() => document.querySelectorAll("#model option").length > 0);
    const options = await page.$$eval("#model option", (os) => os.map((o) => o.value));
    check(options.length === 4, `model list: ${options.join(", ")}`);
    // Question answering: the highlighted span is the answer /v1/qa gives for the same input.
    await page.selectOption("#model", "squad");
    const question = "Where did Ada Lovelace live?";
    const context = "Ada Lovelace, the first programmer, lived in London with her mother.";
    await page.fill("#question", question);
    await page.fill("#context", context);
    await page.click("#go");
    await page.waitForSelector("#out b");
    const api = await page.evaluate(async (b) => (await fetch("/v1/qa", { method: "POST", body: JSON.stringify(b) })).json(),
      { model: "squad", question, context });
    const marked = await page.$eval("#answer", (m) => m.textContent).catch(() => null);
    check(api.start >= 0 && marked === [...context].slice(api.start, api.end).join("") && marked === api.answer,
      `question answered, "${marked}" highlighted at [${api.start}, ${api.end})`);
    await page.screenshot({ path: path.join(out, "page.png"), fullPage: true });
    // Classification: the label shown is the API's.
    await page.selectOption("#model", "sst");
    await page.fill("#text", "a gripping, beautifully shot film");
    await page.click("#go");
    await page.waitForSelector("#label");
    const label = await page.$eval("#label", (e) => e.textContent);
    const c = await page.evaluate(async () => (await fetch("/v1/classify", { method: "POST",
      body: JSON.stringify({ model: "sst", text: "a gripping, beautifully shot film" }) })).json());
    check(label === c.label, `text classified as ${label}`);
    // The request shown under the answer: its latency, and a curl command that gets the same answer.
    const req = await page.$eval("#req", (e) => e.textContent);
    const cmd = req.split("\n").find((l) => l.startsWith("curl -s "));
    const viaCurl = cmd ? JSON.parse(require("child_process").execSync(cmd, { shell: "/bin/sh" }).toString()) : {};
    check(/^answered in [0-9.]+ ms \(status 200\)/.test(req) && viaCurl.label === c.label
      && JSON.stringify(viaCurl.scores) === JSON.stringify(c.scores), `latency shown and the curl command shown answers the same: ${cmd}`);
    // Inputs checked before anything is sent: an empty context is refused with what to do.
    await page.selectOption("#model", "squad");
    await page.fill("#context", "");
    await page.click("#go");
    const refused = await page.$eval("#out", (e) => e.textContent);
    check(refused.startsWith("Paste a context"), `an empty context is refused on the page: ${refused}`);
    // Fill-mask: the candidates shown are the API's.
    await page.selectOption("#model", "mlm");
    await page.click("#go");
    await page.waitForFunction(() => document.querySelector("#out").textContent.startsWith("[MASK] 1:"));
    const shown = await page.$eval("#out", (e) => e.textContent);
    const fm = await page.evaluate(async () => (await fetch("/v1/fill-mask", { method: "POST",
      body: JSON.stringify({ model: "mlm", text: document.getElementById("text").value }) })).json());
    check(shown.includes(fm.masks[0][0].token), `[MASK] filled: ${shown.slice(0, 60)}`);
    // Embed: a task of the pre-training checkpoint besides fill-mask, picked in the task list.
    const mlmTasks = await page.$$eval("#task option", (os) => os.map((o) => o.value));
    await page.selectOption("#task", "embed");
    await page.click("#go");
    await page.waitForFunction(() => document.querySelector("#out").textContent.includes("-dimensional"));
    const emb = await page.$eval("#out", (e) => e.textContent);
    check(mlmTasks.join(",") === "fill-mask,embed" && /^[0-9]+-dimensional cls embedding/.test(emb), `embed from the page: ${emb.slice(0, 60)}`);
    check(errors.length === 0, `no page errors (${errors.join("; ")})`);
  } finally {
    await browser.close();
  }
  process.exit(fails.length ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(1); });
