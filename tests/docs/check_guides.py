#!/usr/bin/env python3
"""Every command block of the guides runs (issue 43): README.md and docs/*.md.

    tests/docs/check_guides.py BERTCC WORK [GUIDE.md ...]

Each fenced ```sh / ```bash block is cut into commands (backslash continuations joined, comments
dropped) and each command runs, in order, in a scratch folder where the paths the guides use exist
at small size (made once, in WORK/world, from the test fixture and ../shared/data); each guide gets
its own copy of that folder. A ```console block holds `$ command` lines, each followed by the output
the guide shows: the command runs and every line shown must be in its output (the exit status must
be 0 unless a line shown says "error"). An untagged block with a `$ ` line is an error (tag it).

What the test changes in a command is in SIZES, CONFIGS and PATHS below: sizes and paths only, so
every subcommand and flag a guide shows is parsed and run by the binary under test. Beyond them:
`bertcc` and `build/bertcc` become BERTCC; an optional `[--flag value]` runs with the flag; of
alternatives `a|b|c` the first runs; `bertcc CMD ... --flag x` takes the flags of the block's last
`bertcc CMD` (the same subcommand) and this line's; `bertcc serve` starts in the background (the
block's other commands talk to it; SIGTERM at the block's end must give exit 0); curl gets
--fail-with-body.

A block that cannot run here is marked in the guide, right before it:
    <!-- not run in tests: REASON -->
The test prints, per guide, the blocks and commands run and the blocks skipped with their reasons,
and fails when an unmarked command fails or a block has no way to run (a `...` without a command
to continue). Each guide's commands and output are in WORK/run/GUIDE.log; a failed guide's scratch
folder is kept next to it. BERTCC_GUIDES_KEEP_WORLD=1 reuses (and keeps) the last run's WORK/world.
"""
import glob
import json
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(REPO, "..", "shared", "data")
PY = "/usr/bin/python3"

# ---- what the test changes (sizes and paths only) ----
# flag -> the value every command gets (sizes: steps, epochs, batches, sequence lengths)
SIZES = {
    "--max-steps": "2", "--num-train-epochs": "1", "--train-batch-size": "4",
    "--gradient-accumulation-steps": "2", "--batch-size": "2", "--steps": "1", "--max-seq-length": "64",
    "--doc-stride": "32", "--eval-freq": "2", "--num-steps-per-checkpoint": "1", "--phase1-end-step": "2",
    "--shards": "2", "--vocab-size": "400", "--dupe-factor": "1", "--num-steps": "5",
    "--max-predictions-per-seq": "10",
}
# sizes a command leaves at a default too large here: added when the guide does not give the flag
DEFAULTS = {("lr-find",): ["--num-steps", "5"], ("finetune",): ["--num-train-epochs", "1"]}
# model presets -> the fixture's 2-layer models (tiny.json: hidden 64, 2 heads, the fixture's vocabulary, 512
# positions as BERT's presets, so that the default --max-seq-length 384 of finetune squad fits)
CONFIGS = {r"bert-(tiny|mini|small|medium|base|large)": "tiny.json", r"electra-(small|base|large)": "electra-tiny.json"}
# placeholders and big files -> files of the scratch folder (the same name elsewhere is made at small size)
PATHS = {
    "MODEL_DIR": "run/model", "DIR": "run/model", "FILE": "words.txt", "FILE.h5": "batch.h5",
    "BATCH.safetensors": "qa.safetensors",
    ("--predict-file", "dev-v1.1.json"): "dev-v1.1.slice.json",  # dev-v1.1.json itself is the full set (eval)
}
CMD_TIMEOUT = 180
# what this machine lacks -> a block naming it is skipped with the reason (filled in by main and make_world)
MISSING = {}

MARK = re.compile(r"<!--\s*not run in tests:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")


def log(*a):
    print(*a, flush=True)


# ---- the scratch world ----
def sh(cmd, cwd, what):
    r = subprocess.run(cmd, cwd=cwd, shell=isinstance(cmd, str), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"world: {what} failed ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def write_safetensors(path, tensors):
    import struct
    header, blobs, off = {}, [], 0
    for k, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *[float(v) for v in vals])
        header[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(b"".join(blobs))


def make_world(B, fix, W):
    """W/world: every path the guides name, at small size."""
    w = os.path.join(W, "world")
    if os.environ.get("BERTCC_GUIDES_KEEP_WORLD") and os.path.exists(os.path.join(w, "done")):
        return w  # (while editing a guide: the world of the last run)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    j = lambda *p: os.path.join(w, *p)
    ft = os.path.join(fix, "ft")
    # text, a Wikipedia dump, the corpus, the vocabulary, shards
    shutil.copytree(os.path.join(fix, "text"), j("books"))
    import bz2
    pages = "".join(
        f"<page><title>Town {i}</title><ns>0</ns><id>{i + 1}</id><revision><text xml:space=\"preserve\">"
        f"'''Town {i}''' is a small [[town|place]] near the river.{{{{cite web|url=x}}}} It has {i + 3} bridges "
        f"and a market. The harbour opened in {1800 + i}.\n\n== History ==\nThe first houses were built of stone. "
        f"Trains came later.</text></revision></page>\n" for i in range(6))
    with bz2.open(j("enwiki-latest-pages-articles.xml.bz2"), "wt") as f:
        f.write(f"<mediawiki>\n{pages}</mediawiki>\n")
    shutil.copytree(os.path.join(fix, "corpus"), j("corpus"))
    shutil.copy(os.path.join(fix, "vocab.txt"), j("vocab.txt"))
    with open(j("words.txt"), "w") as f:
        f.write("A third one, with number 7, ends the paragraph.\nTrains, clocks and gardens.\n")
    h5 = sorted(glob.glob(os.path.join(fix, "h5", "*.h5")))
    for d, files in (("hdf5/train", h5), ("hdf5/test", h5[-1:]), ("hdf5_512", h5), ("shards", h5),
                     ("held-out", h5[-1:])):
        os.makedirs(j(d))
        for p in files:
            shutil.copy(p, j(d, os.path.basename(p)))
    cfg = dict(json.load(open(os.path.join(fix, "tiny.json"))), max_position_embeddings=512)
    json.dump(cfg, open(j("tiny.json"), "w"))
    json.dump(dict(cfg, model_type="electra", embedding_size=32), open(j("electra-tiny.json"), "w"))
    # models: run/model (pre-trained: the fixture's tiny BERT, bert-base-uncased vocabulary), fine-tuned ones
    shutil.copytree(os.path.join(ft, "bert"), j("run", "model"))
    # fine-tuning data
    os.makedirs(j("glue", "SST-2"))
    os.makedirs(j("glue", "STS-B"))
    for t in ("train", "dev"):
        shutil.copy(os.path.join(ft, "sst", t + ".tsv"), j("glue", "SST-2", t + ".tsv"))
        shutil.copy(os.path.join(ft, "stsb", t + ".tsv"), j("glue", "STS-B", t + ".tsv"))
    with open(os.path.join(SHARED, "glue", "SST-2", "test.tsv")) as f:
        open(j("glue", "SST-2", "test.tsv"), "w").write("".join(f.readlines()[:9]))
    dev = [l.rstrip("\n").split("\t") for l in open(j("glue", "STS-B", "dev.tsv"))][1:]
    open(j("preds.tsv"), "w").write("".join(f"{min(5.0, float(r[-1]) * 0.8 + (i % 3) * 0.3):.3f}\n"
                                            for i, r in enumerate(dev)))
    # CSV: AG News rows under a header (label, sentence, description): by number and by name
    import csv
    rows = list(csv.reader(open(os.path.join(SHARED, "ag_news", "test.csv"), encoding="utf-8")))
    by = {c: [r for r in rows if r[0] == c] for c in "1234"}  # every class in every file
    pick = lambda a, b: [by[c][k] for k in range(a, b) for c in "1234"]
    for name, part in (("train.csv", pick(0, 8)), ("test.csv", pick(8, 12)), ("dev.csv", pick(12, 16))):
        with open(j(name), "w", newline="", encoding="utf-8") as f:
            wr = csv.writer(f)
            wr.writerow(["label", "sentence", "description"])
            wr.writerows(part)
    # CSV as Hugging Face's scripts take it: a text,label header, string labels (SST-2 dev sentences)
    sst = [l.rstrip("\n").split("\t") for l in open(os.path.join(SHARED, "glue", "SST-2", "dev.tsv"), encoding="utf-8")][1:]
    for name, part in (("reviews.csv", sst[:48]), ("reviews-test.csv", sst[48:64])):
        with open(j(name), "w", newline="", encoding="utf-8") as f:
            wr = csv.writer(f)
            wr.writerow(["text", "label"])
            wr.writerows([t, "positive" if y == "1" else "negative"] for t, y in part)
    os.makedirs(j("conll2003", "iob2"))
    shutil.copy(os.path.join(ft, "ner.txt"), j("conll2003", "iob2", "train.txt"))
    paras = open(os.path.join(SHARED, "conll2003", "iob2", "valid.txt")).read().split("\n\n")
    open(j("conll2003", "iob2", "valid.txt"), "w").write("\n\n".join(paras[:10]) + "\n")
    # SQuAD: a slice to train and predict on; the full v1.1 dev set and BERT's predictions to score
    shutil.copy(os.path.join(ft, "sq.json"), j("train-v1.1.json"))
    shutil.copy(os.path.join(ft, "sq.json"), j("dev-v1.1.slice.json"))
    shutil.copy(os.path.join(ft, "sq2.json"), j("train-v2.0.json"))
    shutil.copy(os.path.join(ft, "sq2.json"), j("dev-v2.0.json"))
    for src in ("squad/v1.1/dev-v1.1.json", "squad/v2.0/dev-v2.0.first5articles.json",
                "squad/predictions/v1.1_dev_BERT_ensemble_GoogleAILanguage.json",
                "squad/predictions/v2.0_dev_BERT_single_GoogleAILanguage.json"):
        os.symlink(os.path.abspath(os.path.join(SHARED, src)), j(os.path.basename(src)))
    preds, odds = {}, {}
    for name in ("dev-v1.1.slice.json", "dev-v2.0.json"):
        for a in json.load(open(j(name)))["data"]:
            for p in a["paragraphs"]:
                for i, q in enumerate(p["qas"]):
                    preds[q["id"]] = q["answers"][0]["text"] if q["answers"] and i % 3 else ""
                    odds[q["id"]] = 0.9 if i % 2 else 0.1
    json.dump(preds, open(j("predictions.json"), "w"))
    json.dump(odds, open(j("null_odds.json"), "w"))
    # fine-tuned models the inference, serving and export guides name
    common = ["--model", "run/model", "--num-train-epochs", "1", "--train-batch-size", "8", "--max-seq-length", "64"]
    sh([B, "finetune", "glue", "--task-name", "sst-2", "--data-dir", "glue/SST-2", "--output-dir", "out/sst2",
        "--mode", "train"] + common, w, "finetune glue")
    sh([B, "finetune", "ner", "--train-file", "conll2003/iob2/train.txt", "--output-dir", "out/ner",
        "--mode", "train"] + common, w, "finetune ner")
    sh([B, "finetune", "squad", "--train-file", "train-v1.1.json", "--output-dir", "out/squad", "--mode", "train",
        "--doc-stride", "32"] + common, w, "finetune squad")
    # batches: an NVIDIA HDF5 one, a QA one (bert-base-uncased ids), an ELECTRA one (the fixture's vocabulary)
    sh([B, "random-batch", "--model", "tiny.json", "--output", "batch.h5", "--batch-size", "2", "--max-seq-length",
        "32", "--max-predictions-per-seq", "4"], w, "random-batch")
    Bn, T = 2, 16
    ids, seg, mask = [], [], []
    for b in range(Bn):
        n = T - 3 * b
        r = [101] + [2000 + 7 * i for i in range(5)] + [102] + [3000 + 11 * i for i in range(n - 8)] + [102]
        ids += r + [0] * (T - n)
        seg += [0] * 7 + [1] * (n - 7) + [0] * (T - n)
        mask += [1] * n + [0] * (T - n)
    write_safetensors(j("qa.safetensors"), {"input_ids": ([Bn, T], ids), "segment_ids": ([Bn, T], seg),
                                            "input_mask": ([Bn, T], mask), "start_positions": ([Bn], [8, 9]),
                                            "end_positions": ([Bn], [9, 11])})
    vocab = [l.rstrip("\n") for l in open(j("vocab.txt"), encoding="utf-8")]
    eids = [(vocab.index("[CLS]") if i % T == 0 else 110 + (i * 7) % (len(vocab) - 110)) for i in range(Bn * T)]
    masked = [vocab.index("[MASK]") if i % 5 == 2 else t for i, t in enumerate(eids)]
    mlm = [t if i % 5 == 2 else -100 for i, t in enumerate(eids)]
    write_safetensors(j("b.safetensors"), {"input_ids": ([Bn, T], masked), "segment_ids": ([Bn, T], [0] * (Bn * T)),
                                           "input_mask": ([Bn, T], [1] * (Bn * T)), "mlm_labels": ([Bn, T], mlm)})
    # PyTorch checkpoints of the tiny model: Hugging Face's pytorch_model.bin (config.json and vocab.txt next
    # to it) and NVIDIA's {'model': ...} with bert_config.json
    sh([B, "init-model", "--config", "tiny.json", "--vocab", "vocab.txt", "--output", "pt-src", "--seed", "3"],
       w, "init-model")
    shutil.copy(j("pt-src", "config.json"), j("config.json"))
    json.dump(json.load(open(j("config.json"))), open(j("bert_config.json"), "w"))  # NVIDIA's name for it
    if subprocess.run([PY, "-c", "import torch, numpy"], capture_output=True).returncode != 0:
        MISSING[r"\.pt\b|\.bin\b"] = f"{PY} has no torch to write the PyTorch checkpoints"
    else:
        sh([PY, "-c", """
import json, struct, sys, collections, numpy as np, torch
raw = open('pt-src/model.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]; hdr = json.loads(raw[8:8 + n]); base = 8 + n
sd = collections.OrderedDict()
for k, v in hdr.items():
    if k == '__metadata__': continue
    a, b = v['data_offsets']
    sd[k] = torch.from_numpy(np.frombuffer(raw[base + a:base + b], dtype=np.float32).reshape(v['shape']).copy())
torch.save(sd, 'pytorch_model.bin')
torch.save({'model': collections.OrderedDict(('module.' + k, t) for k, t in sd.items()), 'epoch': 1}, 'ckpt_8601.pt')
"""], w, "torch.save of the tiny model")
    shutil.rmtree(j("pt-src"))
    open(j("done"), "w").write("ok\n")
    return w


# ---- reading the guides ----
def blocks(path):
    """(line, lang, lines, skip reason or None) for every fenced block"""
    L = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(L):
        m = FENCE.match(L[i])
        if not m:
            i += 1
            continue
        k = i + 1
        while k < len(L) and not L[k].startswith("```"):
            k += 1
        prev = next((L[p] for p in range(i - 1, -1, -1) if L[p].strip()), "")
        mk = MARK.search(prev)
        out.append((i + 1, m.group(1), L[i + 1:k], mk.group(1) if mk else None))
        i = k + 1
    return out


def unquoted_spans(s):
    """[(start, end, quoted)] segments of s split at shell quotes"""
    spans, i, start, q = [], 0, 0, None
    while i < len(s):
        c = s[i]
        if q is None and c in "'\"":
            if i > start:
                spans.append((start, i, False))
            q, start = c, i
        elif q is not None and c == q:
            spans.append((start, i + 1, True))
            q, start = None, i + 1
        i += 1
    if start < len(s):
        spans.append((start, len(s), q is not None))
    return spans


def map_unquoted(s, f):
    return "".join(s[a:b] if quoted else f(s[a:b]) for a, b, quoted in unquoted_spans(s))


def strip_comment(s):
    out = []
    for a, b, quoted in unquoted_spans(s):
        seg = s[a:b]
        if not quoted:
            m = re.search(r"(^|\s)#", seg)
            if m:
                out.append(seg[:m.start()])
                return "".join(out).rstrip()
        out.append(seg)
    return "".join(out).rstrip()


def commands(lines):
    cmds, cur = [], ""
    for ln in lines:
        if not cur and ln.strip().startswith("#"):
            continue
        if ln.rstrip().endswith("\\"):
            cur += ln.rstrip()[:-1] + " "
            continue
        cur += ln
        c = strip_comment(cur).strip()
        if c:
            cmds.append(c)
        cur = ""
    return cmds


# ---- rewriting one command ----
def cmd_key(toks):
    if len(toks) < 2:
        return None
    k = toks[:2]
    if toks[1] in ("finetune", "lr-find", "eval", "bench") and len(toks) > 2 and not toks[2].startswith("-"):
        k = toks[:3]
    return tuple(k)


def groups(args):
    """args -> [(flag or None, [values])] in order"""
    g = []
    for t in args:
        if t.startswith("--"):
            g.append((t, []))
        elif g and g[-1][0] is not None:
            g[-1][1].append(t)
        else:
            g.append((None, [t]))
    return g


def continue_previous(toks, last):
    """`bertcc CMD ... --x v` -> the previous `bertcc CMD`'s flags, then this line's (this line's win)"""
    key = cmd_key([t for t in toks if t != "..."])
    prev = last.get(key)
    if prev is None:
        return None
    n = len(key)
    mine = groups([t for t in toks[n:] if t != "..."])
    given = {f for f, _ in mine if f}
    merged = [(f, v) for f, v in groups(prev[n:]) if f not in given] + mine
    return list(key) + [t for f, v in merged for t in ([f] if f else []) + v]


def rewrite(toks, B, port):
    out, i = [], 0
    toks = [B if t in ("bertcc", "build/bertcc") and (k == 0 or "/" in t) else t for k, t in enumerate(toks)]
    # the repository's scripts run from the scratch folder
    toks = [os.path.join(REPO, t) if re.match(r"(scripts|tests|bench)/", t) and os.path.exists(os.path.join(REPO, t))
            else t for t in toks]
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t in SIZES and nxt is not None and not nxt.startswith("--"):
            out += [t, SIZES[t]]
            i += 2
            continue
        if t == "--config" and nxt is not None:
            for pat, rep in CONFIGS.items():
                if re.fullmatch(pat, nxt):
                    nxt = rep
            out += [t, nxt]
            i += 2
            continue
        if t == "--port" and nxt is not None:
            out += [t, str(port)]
            i += 2
            continue
        prevt = out[-1] if out else None
        if (prevt, t) in PATHS:
            t = PATHS[(prevt, t)]
        elif t in PATHS:
            t = PATHS[t]
        t = re.sub(r"^localhost:\d+", f"localhost:{port}", t)
        out.append(t)
        i += 1
    for key, add in DEFAULTS.items():
        if tuple(out[1:1 + len(key)]) == key and add[0] not in out:
            out += add
    if out and out[0] == "curl":
        out[1:1] = ["-S", "--fail-with-body", "--max-time", "60"]
    return out


def prepare(cmd, B, port, last):
    """the guide's command -> the shell command to run, or raise ValueError (no way to run)"""
    # optional [--flag value] runs with the flag; of alternatives a|b|c the first
    cmd = map_unquoted(cmd, lambda s: re.sub(r"\[(--[^\]]*)\]", r"\1", s))
    cmd = map_unquoted(cmd, lambda s: re.sub(r"(?<![\s|])\|[\w.|-]*(?=\s|$)", "", s))
    parts = [p.strip() for p in re.split(r"\s\|\s", cmd)]  # (unquoted pipes have spaces here)
    outs = []
    for p in parts:
        toks = shlex.split(p)
        if "..." in toks:
            full = continue_previous(toks, last)
            if full is None:
                raise ValueError(f"'...' with no earlier `{' '.join(cmd_key([t for t in toks if t != '...']) or toks[:2])}` in the block to continue")
            toks = full
        key = cmd_key(toks)
        if toks[0] in ("bertcc", "build/bertcc") and key:
            last[key] = toks
        outs.append(shlex.join(rewrite(toks, B, port)))
    return " | ".join(outs)


# ---- running ----
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_shell(c, cwd, logf, timeout=CMD_TIMEOUT):
    t0, r0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        r = subprocess.run(["bash", "-o", "pipefail", "-c", c], cwd=cwd, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, f"(timed out after {timeout} s)"
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    logf.write(f"$ {c}\n{out}\n[exit {rc}, {time.time() - t0:.1f} s, cpu {cpu:.1f} s]\n\n")
    logf.flush()
    return rc, out


def start_server(c, cwd, logf, port):
    c = re.sub(r"\s*('&'|&)\s*$", "", c)  # the guide's own `&` (quoted by shlex.join): this starts it in the background
    logf.write(f"$ {c} &\n")
    out = open(os.path.join(cwd, f"serve-{port}.log"), "w")
    p = subprocess.Popen(["bash", "-c", "exec " + c], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 120 and p.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return p, None
        except OSError:
            time.sleep(0.3)
    return p, f"serve did not become ready (exit {p.poll()}): " + open(out.name).read()[-800:]


def stop_server(p, cwd, logf, port):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -9
    text = open(os.path.join(cwd, f"serve-{port}.log")).read()
    logf.write(f"{text}\n[serve exit {rc}]\n\n")
    return rc, text


def run_guide(guide, B, world, W):
    name = os.path.relpath(guide, REPO)
    scratch = os.path.join(W, "run", name.replace("/", "_").replace(".md", ""))
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(world, scratch, symlinks=True)
    logf = open(scratch + ".log", "w")
    res = {"run": 0, "cmds": 0, "skipped": [], "fails": []}
    for line, lang, lines, skip in blocks(guide):
        where = f"{name}:{line}"
        if lang not in ("sh", "bash", "console"):
            if any(l.startswith("$ ") for l in lines) and not skip:
                res["fails"].append(f"{where}: an untagged block with `$ ` commands: tag it ```console (or mark it)")
            continue
        if skip:
            res["skipped"].append(f"{where}: {skip}")
            continue
        lack = [why for what, why in MISSING.items() if any(re.search(what, l) for l in lines)]
        if lack:
            res["skipped"].append(f"{where}: {lack[0]}")
            continue
        last, server, port = {}, None, free_port()
        logf.write(f"==== {where}\n")
        try:
            if lang == "console":
                steps, cur = [], None
                for l in lines:
                    if l.startswith("$ "):
                        cur = (l[2:], [])
                        steps.append(cur)
                    elif cur is not None and l.strip():
                        cur[1].append(l.strip())
                if not steps:
                    raise ValueError("a console block without `$ ` commands")
                for c, expect in steps:
                    rc, out = run_shell(prepare(c, B, port, last), scratch, logf)
                    res["cmds"] += 1
                    want_error = any("error" in e for e in expect)
                    missing = [e for e in expect if e not in out]
                    if (rc != 0) != want_error or missing:
                        res["fails"].append(f"{where}: `{c}` exit {rc}" + (f", output lacks {missing[0]!r}" if missing else "")
                                            + f"\n      {out.strip()[-600:]}")
            else:
                cmds = [prepare(c, B, port, last) for c in commands(lines)]  # every line prepared before any runs
                for orig, c in zip(commands(lines), cmds):
                    if shlex.split(c.split(" | ")[0])[1:2] == ["serve"]:
                        server, err = start_server(c, scratch, logf, port)
                        res["cmds"] += 1
                        if err:
                            res["fails"].append(f"{where}: `{orig}`: {err}")
                            break
                        continue
                    rc, out = run_shell(c, scratch, logf)
                    res["cmds"] += 1
                    if rc != 0:
                        res["fails"].append(f"{where}: `{orig}` exit {rc}\n      ran: {c}\n      {out.strip()[-800:]}")
                        break
            res["run"] += 1
        except ValueError as e:
            res["fails"].append(f"{where}: no way to run: {e}")
        finally:
            if server is not None:
                rc, text = stop_server(server, scratch, logf, port)
                if rc != 0:
                    res["fails"].append(f"{where}: serve exited {rc} on SIGTERM: {text[-400:]}")
    logf.close()
    if not res["fails"]:
        shutil.rmtree(scratch, ignore_errors=True)  # (hundreds of MB in all; a failed guide's folder stays)
    return res


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    B, W = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    guides = [os.path.abspath(g) for g in sys.argv[3:]] or (
        [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))))
    os.makedirs(W, exist_ok=True)
    shutil.rmtree(os.path.join(W, "run"), ignore_errors=True)  # the last run's logs and folders
    t0 = time.time()
    if not os.path.isdir(os.path.join(SHARED, "glue")):
        print(f"SKIPPED: {SHARED} not found (the guides' fine-tuning data)")
        sys.exit(77)
    fix = os.environ.get("BERTCC_TEST_FIXTURE", "")
    if not (fix and os.path.exists(os.path.join(fix, "done"))):
        fix = os.path.join(W, "fixture")
        if not os.path.exists(os.path.join(fix, "done")):
            sh(["sh", os.path.join(REPO, "tests", "fixture.sh"), B, fix], W, "tests/fixture.sh")
    if subprocess.run([B, "serve", "--help"], capture_output=True).returncode != 0:
        MISSING[r"^\s*bertcc serve\b"] = "this build has no serve (Boost.Beast missing at configure)"
    if not shutil.which("curl"):
        MISSING[r"^\s*curl\b"] = "curl is not installed"
    world = make_world(B, fix, W)
    log(f"scratch world in {world} ({time.time() - t0:.0f} s)")
    total = {"run": 0, "cmds": 0, "skipped": 0, "fails": 0}
    all_fails = []
    for g in guides:
        t1 = time.time()
        r = run_guide(g, B, world, W)
        name = os.path.relpath(g, REPO)
        log(f"{name}: {r['run']} block(s) run ({r['cmds']} commands), {len(r['skipped'])} skipped, "
            f"{len(r['fails'])} failed, {time.time() - t1:.0f} s")
        for s in r["skipped"]:
            log(f"   skipped {s}")
        for f in r["fails"]:
            log(f"   FAIL {f}")
        all_fails += r["fails"]
        for k in ("run", "cmds"):
            total[k] += r[k]
        total["skipped"] += len(r["skipped"])
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    log(f"guides: {total['run']} blocks run ({total['cmds']} commands), {total['skipped']} skipped, "
        f"{len(all_fails)} failed, {time.time() - t0:.0f} s ({ru.ru_utime + ru.ru_stime:.0f} s of CPU); "
        f"logs in {W}/run/*.log")
    if not all_fails and not os.environ.get("BERTCC_GUIDES_KEEP_WORLD"):
        shutil.rmtree(world, ignore_errors=True)
    sys.exit(1 if all_fails else 0)


if __name__ == "__main__":
    main()
