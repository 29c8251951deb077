#!/usr/bin/python3
"""`bertcc create-pretraining-data` vs a Python transcription of Google's create_pretraining_data.py
(NVIDIA's copy) driven by CPython's own `random` module. Tokenization comes from `bertcc tokenize`
on the lines exactly as Python reads them (universal newlines), so this checks the instance
algorithm and its random choices: every HDF5 dataset must be identical.
Usage: check_create_pretraining.py --bertcc BIN --workdir DIR --vocab VOCAB --squad DEV.json"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

import h5py
import numpy as np


def make_corpus(squad_path, out_a, out_b):
    with open(squad_path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    docs = []
    for art in data:
        for p in art["paragraphs"]:
            sents = [s for s in re.split(r"(?<=[.!?])\s+", p["context"].strip()) if s]
            docs.append(sents)
            if len(docs) >= 240:
                break
        if len(docs) >= 240:
            break
    edge = [
        ["A single-sentence document."],
        ["word " * 300],  # one sentence longer than any max_seq_length
        ["\x01\x02", "Only the line above is control characters.", "\u00a0\u3000 leading odd spaces."],
    ]
    half = len(docs) // 2
    with open(out_a, "w", encoding="utf-8", newline="") as f:
        for i, d in enumerate(docs[:half] + edge):
            sep = "\r\n" if i % 7 == 3 else "\n"  # some CRLF documents
            f.write(sep.join(d) + sep + ("\t\n" if i % 5 == 1 else "\n"))  # some whitespace-only separators
        f.write("Mac line one.\rMac line two.\r\n\nThe last document of file A has no trailing blank line.\n")
    with open(out_b, "w", encoding="utf-8", newline="") as f:
        f.write("This sentence continues file A's last document.\n\n")
        for d in docs[half:]:
            f.write("\n".join(d) + "\n\n")


def truncate_seq_pair(a, b, max_num_tokens, rng):
    while len(a) + len(b) > max_num_tokens:
        t = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del t[0]
        else:
            t.pop()


def masked_lm(tokens, prob, max_pred, vocab, wwm, rng, cls, sep, mask):
    cand = []
    for i, t in enumerate(tokens):
        if t == cls or t == sep:
            continue
        if wwm and len(cand) >= 1 and vocab[t].startswith("##"):
            cand[-1].append(i)
        else:
            cand.append([i])
    rng.shuffle(cand)
    out = list(tokens)
    num = min(max_pred, max(1, int(round(len(tokens) * prob))))
    lms, covered = [], set()
    for s in cand:
        if len(lms) >= num:
            break
        if len(lms) + len(s) > num:
            continue
        if any(i in covered for i in s):
            continue
        for i in s:
            covered.add(i)
            if rng.random() < 0.8:
                m = mask
            elif rng.random() < 0.5:
                m = tokens[i]
            else:
                m = rng.randint(0, len(vocab) - 1)
            out[i] = m
            lms.append((i, tokens[i]))
    lms.sort()
    return out, [i for i, _ in lms], [l for _, l in lms]


def from_document(docs, di, o, vocab, rng, ids):
    doc = docs[di]
    max_num = o["max_seq"] - 3
    target = max_num
    if rng.random() < o["short"]:
        target = rng.randint(2, max_num)
    out, chunk, cur, i = [], [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        cur += len(doc[i])
        if i == len(doc) - 1 or cur >= target:
            if chunk:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                b = []
                if len(chunk) == 1 or rng.random() < 0.5:
                    rnd = True
                    tb = target - len(a)
                    for _ in range(10):
                        rdi = rng.randint(0, len(docs) - 1)
                        if rdi != di:
                            break
                    rd = docs[rdi]
                    for j in range(rng.randint(0, len(rd) - 1), len(rd)):
                        b.extend(rd[j])
                        if len(b) >= tb:
                            break
                    i -= len(chunk) - a_end
                else:
                    rnd = False
                    for j in range(a_end, len(chunk)):
                        b.extend(chunk[j])
                truncate_seq_pair(a, b, max_num, rng)
                assert a and b
                tokens = [ids["[CLS]"]] + a + [ids["[SEP]"]] + b + [ids["[SEP]"]]
                seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
                tokens, pos, lab = masked_lm(tokens, o["prob"], o["pred"], vocab, o["wwm"], rng, ids["[CLS]"],
                                             ids["[SEP]"], ids["[MASK]"])
                out.append((tokens, seg, rnd, pos, lab))
            chunk, cur = [], 0
        i += 1
    return out


def reference(files, o, vocab, bertcc, work):
    ids = {t: i for i, t in enumerate(vocab)}
    lines = []
    for f in files:  # Python's own line reading, as Google's script does
        with open(f, encoding="utf-8", errors="ignore") as r:
            lines.extend(l.rstrip("\n") for l in r)
    tmp = os.path.join(work, "lines.txt")
    with open(tmp, "w", encoding="utf-8", newline="\n") as w:
        w.write("\n".join(lines) + "\n")
    tok = subprocess.run([bertcc, "tokenize", "--vocab", o["vocab"], "--input", tmp], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    docs = [[]]
    for k, line in enumerate(lines):
        if not line.strip():
            docs.append([])
            continue
        t = [int(x) for x in tok[k].split()]
        if t:
            docs[-1].append(t)
    docs = [d for d in docs if d]
    rng = random.Random(o["seed"])
    rng.shuffle(docs)
    inst = []
    for _ in range(o["dupe"]):
        for di in range(len(docs)):
            inst.extend(from_document(docs, di, o, vocab, rng, ids))
    rng.shuffle(inst)
    N, S, P = len(inst), o["max_seq"], o["pred"]
    arr = {k: np.zeros((N, S), np.int64) for k in ("input_ids", "input_mask", "segment_ids")}
    arr["masked_lm_positions"] = np.zeros((N, P), np.int64)
    arr["masked_lm_ids"] = np.zeros((N, P), np.int64)
    arr["next_sentence_labels"] = np.zeros((N,), np.int64)
    for r, (tokens, seg, rnd, pos, lab) in enumerate(inst):
        arr["input_ids"][r, :len(tokens)] = tokens
        arr["input_mask"][r, :len(tokens)] = 1
        arr["segment_ids"][r, :len(seg)] = seg
        arr["masked_lm_positions"][r, :len(pos)] = pos
        arr["masked_lm_ids"][r, :len(lab)] = lab
        arr["next_sentence_labels"][r] = int(rnd)
    return arr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--squad", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    a, b = os.path.join(args.workdir, "a.txt"), os.path.join(args.workdir, "b.txt")
    make_corpus(args.squad, a, b)
    with open(args.vocab, encoding="utf-8") as f:
        vocab = [l.rstrip() for l in f.read().split("\n") if l]
    runs = [
        dict(seed=12345, dupe=3, max_seq=128, pred=20, prob=0.15, short=0.1, wwm=False),
        dict(seed=7, dupe=2, max_seq=32, pred=5, prob=0.15, short=0.1, wwm=True),
        dict(seed=2**33 + 1, dupe=1, max_seq=64, pred=12, prob=0.2, short=0.5, wwm=False),
    ]
    fails = 0
    for k, o in enumerate(runs):
        o["vocab"] = args.vocab
        out = os.path.join(args.workdir, f"ours_{k}.h5")
        cmd = [args.bertcc, "create-pretraining-data", "--input", f"{a},{b}", "--output", out, "--vocab", args.vocab,
               "--max-seq-length", str(o["max_seq"]), "--max-predictions-per-seq", str(o["pred"]),
               "--masked-lm-prob", str(o["prob"]), "--short-seq-prob", str(o["short"]), "--dupe-factor",
               str(o["dupe"]), "--random-seed", str(o["seed"])] + (["--whole-word-mask"] if o["wwm"] else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(r.stdout.strip(), r.stderr.strip())
        if r.returncode != 0:
            print("FAIL: bertcc exited with", r.returncode)
            return 1
        ref = reference([a, b], o, vocab, args.bertcc, args.workdir)
        with h5py.File(out, "r") as f:
            for name, want in ref.items():
                got = f[name][()]
                same = got.shape == want.shape and np.array_equal(got.astype(np.int64), want)
                if not same:
                    fails += 1
                    print(f"FAIL run {k} {name}: shape {got.shape} vs {want.shape}")
            dt = {n: f[n].dtype.str for n in f}
        print(f"run {k}: {ref['input_ids'].shape[0]} instances, random-next {ref['next_sentence_labels'].mean():.3f}, "
              f"dtypes {dt}")
    print("OK" if not fails else f"{fails} mismatches")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
