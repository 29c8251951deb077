#!/usr/bin/python3
"""Fine-tuning a bertcc pre-trained checkpoint vs the same architecture from random initialisation
on the real GLUE dev sets (SST-2, MRPC, CoLA, RTE, STS-B) and CoNLL-2003, several seeds each,
identical hyper-parameters for both. Prints per-task mean, min-max spread and wall time, and
writes every run's metrics as JSON lines.

  bench/finetune_compare.py --pretrained DIR --scratch DIR [--vocab V] [--seeds 1 2 3] [--jobs 2]
                            [--inits pretrained scratch] [--out DIR] [--names pretrained scratch]
                            [--device cpu|cuda]          (GLUE_DATA: the data root, default ../shared/data)

--names relabels the two models (e.g. `--names electra bert` to compare two pre-trained models;
--inits then takes those names).

Runs already in OUT/runs.jsonl are kept (a run of the same task, init and seed is replaced), so the
two halves can run at different times (--inits scratch, later --inits pretrained) and the table
covers both.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
# the data root (../shared/data, or a copy of its glue/ and conll2003/ elsewhere: GLUE_DATA)
SHARED = os.environ.get("GLUE_DATA") or os.path.join(HERE, "..", "..", "shared", "data")

# task -> (subcommand args, metric key, extra flags)
TASKS = {
    "sst-2": (["glue", "--task-name", "sst-2", "--data-dir", f"{SHARED}/glue/SST-2"], "acc", ["--max-steps", "600"]),
    "cola": (["glue", "--task-name", "cola", "--data-dir", f"{SHARED}/glue/CoLA"], "mcc", ["--num-train-epochs", "3"]),
    "mrpc": (["glue", "--task-name", "mrpc", "--data-dir", f"{SHARED}/glue/MRPC"], "acc_and_f1",
             ["--num-train-epochs", "3"]),
    "rte": (["glue", "--task-name", "rte", "--data-dir", f"{SHARED}/glue/RTE"], "acc", ["--num-train-epochs", "3"]),
    "sts-b": (["glue", "--task-name", "sts-b", "--data-dir", f"{SHARED}/glue/STS-B"], "corr",
              ["--num-train-epochs", "3"]),
    "conll": (["ner", "--train-file", f"{SHARED}/conll2003/iob2/train.txt", "--predict-file",
               f"{SHARED}/conll2003/iob2/valid.txt"], "f1", ["--num-train-epochs", "1"]),
}


def run(args, task, init, ckpt, seed):
    sub, key, extra = TASKS[task]
    out = os.path.join(args.out, f"{task}-{init}-{seed}")
    cmd = [args.bertcc, "finetune", *sub, "--init-checkpoint", ckpt, "--output-dir", out, "--mode", "train eval",
           "--seed", str(seed), "--threads", str(args.threads), "--learning-rate", args.lr, "--train-batch-size", "32",
           "--max-seq-length", "128", "--precision", args.precision, "--log-freq", "100000", "--device", args.device,
           *extra]
    if args.vocab:
        cmd += ["--vocab", args.vocab]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        raise SystemExit(f"FAIL {task} {init} {seed}: {r.stderr[-2000:]}")
    m = json.loads(r.stdout.strip().splitlines()[-1])
    rec = {"task": task, "init": init, "seed": seed, "metric": key, "value": m[key], "wall_s": wall, "metrics": m}
    print(json.dumps(rec), flush=True)
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", default=os.path.join(HERE, "..", "build", "bertcc"))
    ap.add_argument("--pretrained", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--vocab", default="")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--names", nargs=2, default=["pretrained", "scratch"], help="labels of --pretrained and --scratch")
    ap.add_argument("--inits", nargs="+", default=None, help="which of the two to run (default both)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", default="1e-4")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (every run on it)")
    ap.add_argument("--out", default="finetune-compare")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    A, Bn = args.names
    inits = args.inits or [A, Bn]
    assert all(i in (A, Bn) for i in inits), f"--inits must name {A} or {Bn}"
    jobs = [(t, i, c, s) for t in args.tasks for s in args.seeds
            for i, c in ((A, args.pretrained), (Bn, args.scratch)) if i in inits]
    path = os.path.join(args.out, "runs.jsonl")
    old = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    with ThreadPoolExecutor(args.jobs) as ex:
        new = list(ex.map(lambda j: run(args, *j), jobs))
    key = lambda r: (r["task"], r["init"], r["seed"])
    fresh = {key(r) for r in new}
    recs = [r for r in old if key(r) not in fresh] + new
    with open(path + ".tmp", "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    os.replace(path + ".tmp", path)
    heads = ("pre-trained (seeds)", "from scratch (seeds)") if (A, Bn) == ("pretrained", "scratch") else \
        (f"{A} (seeds)", f"{Bn} (seeds)")
    print(f"\n{'task':7s} {'metric':11s} {heads[0]:32s} {heads[1]:32s} {'gap':>7s} "
          f"{'spread':>7s} {'wall s/run':>10s}")
    for t in args.tasks:
        if any(not [r for r in recs if r["task"] == t and r["init"] == i] for i in (A, Bn)):
            continue
        row = {}
        for i in (A, Bn):
            v = [r["value"] for r in recs if r["task"] == t and r["init"] == i]
            w = [r["wall_s"] for r in recs if r["task"] == t and r["init"] == i]
            row[i] = (v, sum(v) / len(v), max(v) - min(v), sum(w) / len(w))
        gap = row[A][1] - row[Bn][1]
        spread = max(row[A][2], row[Bn][2])
        fmt = lambda x: f"{x[1]:.4f} [" + " ".join(f"{v:.3f}" for v in x[0]) + "]"
        print(f"{t:7s} {TASKS[t][1]:11s} {fmt(row[A]):32s} {fmt(row[Bn]):32s} {gap:7.4f} "
              f"{spread:7.4f} {row[A][3]:5.0f}/{row[Bn][3]:.0f}"
              + ("  gap > spread" if gap > spread else "  gap <= spread"))


if __name__ == "__main__":
    sys.exit(main())
