#!/usr/bin/python3
"""The unlabelled text of the fine-tuning tasks' training splits (GLUE SST-2, CoLA, MRPC, RTE,
STS-B; CoNLL-2003 train), in the input format of `bertcc create-pretraining-data` (one sentence
per line, a blank line between documents), for task-adaptive pre-training (Gururangan et al.
2020, "Don't Stop Pretraining"). Labels and dev/test splits are not read.

Documents: a CoNLL-2003 article (-DOCSTART- to -DOCSTART-, one line per sentence); an MRPC, RTE
or STS-B pair (two lines); an SST-2 or CoLA sentence (one line: its NSP pairs are all random
ones, as create_pretraining_data does for a one-sentence document).

  bench/task_text.py --data ../shared/data --out task_text.txt
"""
import argparse
import os


def tsv_rows(path, header):
    with open(path, encoding="utf-8-sig") as f:
        lines = f.read().split("\n")
    rows = [ln.split("\t") for ln in lines if ln]
    return rows[1:] if header else rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the shared data folder (glue/, conll2003/)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    docs = []
    glue = os.path.join(a.data, "glue")
    docs += [[r[0]] for r in tsv_rows(os.path.join(glue, "SST-2", "train.tsv"), True)]
    docs += [[r[3]] for r in tsv_rows(os.path.join(glue, "CoLA", "train.tsv"), False)]
    docs += [[r[3], r[4]] for r in tsv_rows(os.path.join(glue, "MRPC", "train.tsv"), True)]
    docs += [[r[1], r[2]] for r in tsv_rows(os.path.join(glue, "RTE", "train.tsv"), True)]
    docs += [[r[7], r[8]] for r in tsv_rows(os.path.join(glue, "STS-B", "train.tsv"), True)]
    doc, sent = [], []
    with open(os.path.join(a.data, "conll2003", "iob2", "train.txt"), encoding="utf-8") as f:
        for ln in f:
            w = ln.split()
            if not w or w[0] == "-DOCSTART-":
                if sent:
                    doc.append(" ".join(sent))
                    sent = []
                if w and doc:
                    docs.append(doc)
                    doc = []
            else:
                sent.append(w[0])
    if sent:
        doc.append(" ".join(sent))
    if doc:
        docs.append(doc)
    docs = [[s.strip() for s in d if s.strip()] for d in docs]
    docs = [d for d in docs if d]
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(d) for d in docs) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(docs)} documents, {sum(len(d) for d in docs)} lines")


if __name__ == "__main__":
    main()
