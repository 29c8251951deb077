#!/usr/bin/python3
"""`bertcc eval ner` against a Python transcription of seqeval's default scoring (conlleval
chunking, micro average) on real CoNLL-2003 data with corrupted predictions, plus known answers:
seqeval's README example (F1 0.50) and the IOB1 and IOB2 copies of the dev set, which must hold
the same entities (F1 exactly 1); without --json, seqeval's classification report character for
character (its README's table, and the transcribed StringReporter on the corrupted sets).
Non-zero exit on any mismatch."""
import json
import os
import random
import subprocess
import sys


def entities(sents):
    seq = [t for s in sents for t in s + ["O"]] + ["O"]
    out, pt, ptype, begin = [], "O", "", 0
    for i, ch in enumerate(seq):
        tag = ch[0]
        typ = ch[1:].split("-", 1)[-1] or "_"
        end = (pt in "ES" or (pt in "BI" and tag in "BSO") or (pt not in "O." and ptype != typ))
        start = (tag in "BS" or (pt in "ESO" and tag in "EI") or (tag not in "O." and ptype != typ))
        if end:
            out.append((ptype, begin, i - 1))
        if start:
            begin = i
        pt, ptype = tag, typ
    return out


def metrics(gold, pred):
    g, p = set(entities(gold)), set(entities(pred))
    tp = len(g & p)
    pr = tp / len(p) if p else 0.0
    rc = tp / len(g) if g else 0.0
    f1 = 2 * pr * rc / (pr + rc) if pr + rc else 0.0
    return {"precision": pr, "recall": rc, "f1": f1}


def read(path):
    sents, cur = [], []
    for line in open(path, encoding="utf-8"):
        c = line.split()
        if not c or c[0] == "-DOCSTART-":
            if cur:
                sents.append(cur)
            cur = []
            continue
        cur.append((c[0], c[-1]))
    if cur:
        sents.append(cur)
    return sents


def write(path, sents, tags):
    with open(path, "w", encoding="utf-8") as f:
        for s, t in zip(sents, tags):
            for (w, _), tag in zip(s, t):
                f.write(f"{w} {tag}\n")
            f.write("\n")


def report(gold, pred, digits=2):
    """seqeval's classification_report (StringReporter), transcribed."""
    g, p = set(entities(gold)), set(entities(pred))
    types = sorted({t for t, _, _ in g} | {t for t, _, _ in p})
    width = max([len(t) for t in types] + [len("weighted avg"), digits])
    row_fmt = "{:>{width}s} " + " {:>9.{digits}f}" * 3 + " {:>9}"
    head = ("{:>{width}s} " + " {:>9}" * 4).format("", "precision", "recall", "f1-score", "support", width=width) + "\n\n"
    rows, ps, rs, fs, ns = [], [], [], [], []
    for t in types:
        gt, pt = {e for e in g if e[0] == t}, {e for e in p if e[0] == t}
        tp = len(gt & pt)
        pr = tp / len(pt) if pt else 0.0
        rc = tp / len(gt) if gt else 0.0
        f1 = 2 * pr * rc / (pr + rc) if pr + rc else 0.0
        ps.append(pr); rs.append(rc); fs.append(f1); ns.append(len(gt))
        rows.append(row_fmt.format(t, pr, rc, f1, len(gt), width=width, digits=digits))
    rows.append("")
    m, n = metrics(gold, pred), sum(ns)
    w = lambda v: sum(a * b for a, b in zip(v, ns)) / n if n else 0.0
    rows.append(row_fmt.format("micro avg", m["precision"], m["recall"], m["f1"], n, width=width, digits=digits))
    rows.append(row_fmt.format("macro avg", sum(ps) / len(ps), sum(rs) / len(rs), sum(fs) / len(fs), n, width=width, digits=digits))
    rows.append(row_fmt.format("weighted avg", w(ps), w(rs), w(fs), n, width=width, digits=digits))
    rows.append("")
    return head + "\n".join(rows)


def run(bertcc, gold, pred, table=False):
    r = subprocess.run([bertcc, "eval", "ner", "--data", gold, "--predictions", pred] + ([] if table else ["--json"]),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: bertcc eval ner: {r.stderr}")
    return r.stdout if table else json.loads(r.stdout)


def main():
    bertcc, shared, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    fails = []
    # seqeval README example
    yt = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    yp = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    words = [[(f"w{i}", t) for i, t in enumerate(s)] for s in yt]
    write(f"{work}/g.txt", words, yt)
    write(f"{work}/p.txt", words, yp)
    got = run(bertcc, f"{work}/g.txt", f"{work}/p.txt")
    if abs(got["f1"] - 0.5) > 1e-12 or abs(metrics(yt, yp)["f1"] - 0.5) > 1e-12:
        fails.append(f"README example f1 {got['f1']}")
    # without --json: seqeval's classification report, character for character (its README's)
    table = run(bertcc, f"{work}/g.txt", f"{work}/p.txt", table=True)
    readme = ("              precision    recall  f1-score   support\n\n"
              "        MISC       0.00      0.00      0.00         1\n"
              "         PER       1.00      1.00      1.00         1\n\n"
              "   micro avg       0.50      0.50      0.50         2\n"
              "   macro avg       0.50      0.50      0.50         2\n"
              "weighted avg       0.50      0.50      0.50         2\n")
    if table != readme or report(yt, yp) != readme:
        fails.append(f"classification report:\n{table}\nexpected:\n{readme}")
    # IOB1 and IOB2 copies of the dev set: identical entities
    iob1 = read(f"{shared}/conll2003/iob1_original/eng.testa")
    iob2 = read(f"{shared}/conll2003/iob2/valid.txt")
    write(f"{work}/dev_iob1.txt", iob1, [[t for _, t in s] for s in iob1])
    got = run(bertcc, f"{shared}/conll2003/iob2/valid.txt", f"{work}/dev_iob1.txt")
    print(f"IOB2 gold vs IOB1 copy of dev: f1 {got['f1']} over {got['entities']} entities")
    if got["f1"] != 1.0 or got["entities"] != 5942:
        fails.append(f"IOB1 vs IOB2 dev: f1 {got['f1']}, entities {got['entities']} (expected 1.0, 5942)")
    # corrupted predictions on both schemes
    rnd = random.Random(5)
    types = ["PER", "ORG", "LOC", "MISC"]
    for name, sents, path in (("iob2", iob2, f"{shared}/conll2003/iob2/valid.txt"),
                              ("iob1", iob1, f"{shared}/conll2003/iob1_original/eng.testa")):
        for rate in (0.02, 0.1, 0.3):
            gold = [[t for _, t in s] for s in sents]
            pred = []
            for s in gold:
                q = []
                for t in s:
                    r = rnd.random()
                    if r < rate / 3:
                        t = "O"
                    elif r < 2 * rate / 3:
                        t = rnd.choice("BI") + "-" + rnd.choice(types)
                    elif r < rate and t != "O":
                        t = t[0] + "-" + rnd.choice(types)
                    q.append(t)
                pred.append(q)
            write(f"{work}/pred.txt", sents, pred)
            got = run(bertcc, path, f"{work}/pred.txt")
            ref = metrics(gold, pred)
            err = max(abs(got[k] - ref[k]) for k in ref)
            print(f"{name} corruption {rate}: f1 {got['f1']:.12f} ref {ref['f1']:.12f} |diff| {err:.1e}")
            if err > 1e-9:
                fails.append(f"{name} {rate}: {got} vs {ref}")
            table, want = run(bertcc, path, f"{work}/pred.txt", table=True), report(gold, pred, 2)
            if table != want:
                fails.append(f"{name} {rate}: classification report\n{table}\nvs seqeval's\n{want}")
    if fails:
        print("FAIL:", "; ".join(fails))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
