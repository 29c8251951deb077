#!/usr/bin/python3
"""`bertcc eval glue` vs reference formulas in numpy on the real GLUE dev sets in ../shared/data:
the files are read here independently (csv.QUOTE_NONE, utf-8-sig), predictions are made by
perturbing the gold labels deterministically, and every metric must agree to 1e-9."""
import csv
import json
import math
import os
import subprocess
import sys

import numpy as np

BERTCC = sys.argv[1]
WORK = sys.argv[2]
GLUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data", "glue")
os.makedirs(WORK, exist_ok=True)
csv.field_size_limit(1 << 30)
TASKS = {"CoLA": (False, 1, ["0", "1"]), "SST-2": (True, 1, ["0", "1"]), "MRPC": (True, 0, ["0", "1"]),
         "RTE": (True, 3, ["entailment", "not_entailment"]), "STS-B": (True, 9, None)}


def rank(v):
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


fails = 0
for task, (header, col, classes) in TASKS.items():
    with open(os.path.join(GLUE, task, "dev.tsv"), encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if header:
        rows = rows[1:]
    gold = [r[col] for r in rows if r]
    if classes:
        pred = [classes[1 - classes.index(g)] if i % 5 == 0 or i % 7 == 3 else g for i, g in enumerate(gold)]
    else:
        pred = ["%.6f" % (float(g) + 0.7 * math.sin(i)) for i, g in enumerate(gold)]
    pf = os.path.join(WORK, task + ".txt")
    with open(pf, "w") as f:
        f.write("index\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(pred)))
    r = subprocess.run([BERTCC, "eval", "glue", "--task-name", task, "--data", os.path.join(GLUE, task, "dev.tsv"),
                        "--predictions", pf], capture_output=True, text=True)
    if r.returncode:
        print("FAIL", task, r.stderr.strip())
        fails += 1
        continue
    ours = json.loads(r.stdout)
    if classes:
        g = np.array([c == classes[-1] if task == "RTE" else c == "1" for c in gold], dtype=float)
        p = np.array([c == classes[-1] if task == "RTE" else c == "1" for c in pred], dtype=float)
        acc = float(np.mean(np.array(gold) == np.array(pred)))
        tp, tn = float(np.sum(p * g)), float(np.sum((1 - p) * (1 - g)))
        fp, fn = float(np.sum(p * (1 - g))), float(np.sum((1 - p) * g))
        ref = {}
        if task == "CoLA":
            ref["mcc"] = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        else:
            ref["acc"] = acc
        if task == "MRPC":
            ref["f1"] = 2 * tp / (2 * tp + fp + fn)
    else:
        g = np.array([float(x) for x in gold])
        p = np.array([float(x) for x in pred])
        ref = {"pearson": float(np.corrcoef(p, g)[0, 1]), "spearman": float(np.corrcoef(rank(p), rank(g))[0, 1])}
    for k, v in ref.items():
        if abs(ours[k] - v) > 1e-9:
            print(f"FAIL {task} {k}: bertcc {ours[k]!r} reference {v!r}")
            fails += 1
    print(f"{'ok  ' if not fails else '    '} {task} ({len(gold)} dev examples): " +
          ", ".join(f"{k} {ours[k]:.12f} (ref {v:.12f})" for k, v in ref.items()))
sys.exit(1 if fails else 0)
