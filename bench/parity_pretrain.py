#!/usr/bin/python3
"""Learning parity: `bertcc pretrain` vs the same model, LAMB (apex FusedLAMB semantics) and
NVIDIA poly warm-up schedule in PyTorch (Debian torch), same initial weights (bertcc init-model),
same data in the same order (a port of bertcc's loader order: Philox4x32 + splitmix64 shuffles),
same hyperparameters. Dropout masks differ (each framework's own RNG).
Prints the mean loss of the last 50 steps for both and their relative difference.
Usage: parity_pretrain.py --bertcc BIN --shards DIR --vocab VOCAB --workdir DIR [--steps 300]
       [--batch 32] [--lr 2e-3] [--warmup 0.1] [--precision fp32|bf16] [--seed 1] [--threads 2]"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import st  # noqa: E402
import torch_bert  # noqa: E402

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def philox(c, k):
    c0, c1, c2, c3 = c
    k0, k1 = k
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


class Rng:  # bertcc::Rng::next_u32 (sequential stream, counter word 2 = 1)
    def __init__(self, seed):
        self.seed, self.off = seed & M64, 0

    def next_u32(self):
        i = self.off
        self.off += 1
        b = i >> 2
        return philox((b & M32, b >> 32, 1, 0), (self.seed & M32, self.seed >> 32))[i & 3]


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def shuffle(v, seed):
    r = Rng(mix(seed))
    for i in range(len(v), 1, -1):
        j = r.next_u32() % i
        v[i - 1], v[j] = v[j], v[i - 1]


def batches(paths, B, seed):
    """bertcc's PretrainLoader order: shards per epoch, rows per (epoch, shard), drop_last."""
    data = []
    for p in paths:
        with h5py.File(p, "r") as f:
            data.append({k: f[k][()].astype(np.int64) for k in f})
    epoch = 0
    while True:
        order = list(range(len(paths)))
        shuffle(order, seed ^ mix(epoch))
        for pos in range(len(order)):
            d = data[order[pos]]
            n = d["input_ids"].shape[0]
            rows = list(range(n))
            shuffle(rows, seed ^ mix((epoch * 1000003 + pos + 1) & M64))
            for r0 in range(0, n - B + 1, B):
                idx = rows[r0:r0 + B]
                yield {k: d[k][idx] for k in d}
        epoch += 1


def poly_lr(base, step, total, warmup):
    p = step / total
    return base * p / warmup if p < warmup else base * max(0.0, 1 - p) ** 0.5


def lamb(params, names, m, v, step, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    grads = [p.grad for p in params]
    gnorm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
    clip = 1.0 / gnorm if gnorm > 1.0 else 1.0
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    for p, g, mm, vv, n in zip(params, grads, m, v, names):
        g = g * clip
        mm.mul_(b1).add_(g, alpha=1 - b1)
        vv.mul_(b2).addcmul_(g, g, value=1 - b2)
        decay = not ("bias" in n or "LayerNorm" in n)
        u = (mm / bc1) / ((vv / bc2).sqrt() + eps)
        ratio = 1.0
        if decay:
            u = u + wd * p
            wn, un = p.norm().item(), u.norm().item()
            ratio = wn / un if wn > 0 and un > 0 else 1.0
        p.sub_(u, alpha=lr * ratio)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=float, default=0.1)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    init = os.path.join(a.workdir, "init")
    subprocess.run([a.bertcc, "init-model", "--config", "bert-mini", "--vocab", a.vocab, "--output", init, "--seed",
                    str(a.seed)], check=True, capture_output=True)
    out = os.path.join(a.workdir, "bertcc_" + a.precision)
    subprocess.run(["rm", "-rf", out], check=True)
    t0 = time.time()
    subprocess.run([a.bertcc, "pretrain", "--init-checkpoint", init, "--vocab", a.vocab, "--input-dir", a.shards,
                    "--output-dir", out, "--train-batch-size", str(a.batch), "--max-steps", str(a.steps),
                    "--learning-rate", str(a.lr), "--warmup-proportion", str(a.warmup), "--precision", a.precision,
                    "--seed", str(a.seed), "--log-freq", "1", "--num-steps-per-checkpoint", "0", "--threads",
                    str(a.threads)], check=True, capture_output=True)
    t_ours = time.time() - t0
    ours = [json.loads(l[5:])["data"]["loss"] for l in open(os.path.join(out, "dllogger.json"))
            if l.startswith("DLLL ") and '"type":"LOG"' in l and '"PARAMETER"' not in l]

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    cfg = json.load(open(os.path.join(init, "config.json")))
    w = st.load(os.path.join(init, "model.safetensors"))
    P = {n: torch.tensor(x, dtype=torch.float32, requires_grad=True) for n, x in w.items()}
    names = list(P)
    params = [P[n] for n in names]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    it = batches(sorted(glob.glob(os.path.join(a.shards, "*.h5"))), a.batch, a.seed)
    theirs = []
    t0 = time.time()
    for step in range(a.steps):
        b = next(it)
        T = b["input_ids"].shape[1]
        labels = torch_bert.nvidia_labels(torch.tensor(b["masked_lm_positions"]), torch.tensor(b["masked_lm_ids"]), T)
        for p in params:
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss, _, _ = torch_bert.pretrain_loss(P, cfg, torch.tensor(b["input_ids"]), torch.tensor(b["segment_ids"]),
                                                  torch.tensor(b["input_mask"]), labels,
                                                  torch.tensor(b["next_sentence_labels"]),
                                                  dropout=cfg["hidden_dropout_prob"], training=True)
        loss.backward()
        with torch.no_grad():
            lamb(params, names, m, v, step + 1, poly_lr(a.lr, step, a.steps, a.warmup))
        theirs.append(loss.item())
    t_theirs = time.time() - t0
    k = min(50, a.steps)
    mo, mt = float(np.mean(ours[-k:])), float(np.mean(theirs[-k:]))
    res = {"precision": a.precision, "steps": a.steps, "batch": a.batch, "first_loss_bertcc": ours[0],
           "first_loss_torch": theirs[0], f"last{k}_mean_loss_bertcc": mo, f"last{k}_mean_loss_torch": mt,
           "relative_difference": abs(mo - mt) / mt, "seconds_bertcc": t_ours, "seconds_torch": t_theirs}
    print(json.dumps(res))
    return 0 if abs(mo - mt) / mt <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
