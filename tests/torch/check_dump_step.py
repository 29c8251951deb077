#!/usr/bin/python3
"""Generates a random BERT (HF names) and a random NVIDIA-layout HDF5 batch, runs
`bertcc dump-step`, and compares losses and every gradient with tests/torch/torch_bert.py
computed in float64. Tolerance: max |ours - ref| <= tol * max |ref| per tensor
(fp32: 1e-4, bf16: 3e-2); tensors whose true gradient is exactly zero
(attention key biases) are judged against the model's largest gradient instead. Exits non-zero on any mismatch."""
import argparse
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gradcheck  # noqa: E402
import st  # noqa: E402
import torch_bert  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--legacy", action="store_true",
                    help="store LayerNorm as gamma/beta, F16 weights, decoder.weight/decoder.bias present")
    ap.add_argument("--act", default="gelu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cpu", help="bertcc's --device (cuda: the GPU backend)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    cfg = {"vocab_size": 101, "hidden_size": 36, "num_hidden_layers": 2, "num_attention_heads": 3,
           "intermediate_size": 53, "hidden_act": args.act, "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 40, "type_vocab_size": 2,
           "initializer_range": 0.02, "layer_norm_eps": 1e-12, "model_type": "bert"}
    shapes = torch_bert.param_shapes(cfg)
    params = {}
    for n, s in shapes.items():
        if n.endswith("LayerNorm.weight"):
            params[n] = (1.0 + 0.1 * rng.standard_normal(s)).astype(np.float32)
        elif len(s) == 2:
            params[n] = (0.15 * rng.standard_normal(s)).astype(np.float32)
        else:
            params[n] = (0.05 * rng.standard_normal(s)).astype(np.float32)

    model_dir = os.path.join(args.workdir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    if args.legacy:
        stored = {}
        for n, a in params.items():
            if n == "cls.predictions.bias":
                stored["cls.predictions.decoder.bias"] = a
                continue
            n2 = n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
            stored[n2] = a
        stored["cls.predictions.decoder.weight"] = params["bert.embeddings.word_embeddings.weight"]
        st.save(os.path.join(model_dir, "model.safetensors"), stored, dtype="F16")
        params = {n: a.astype(np.float16).astype(np.float32) for n, a in params.items()}
        cfg_g = {k: v for k, v in cfg.items() if k not in ("layer_norm_eps", "model_type")}
        with open(os.path.join(model_dir, "bert_config.json"), "w") as f:  # Google's file name
            json.dump(cfg_g, f)
    else:
        st.save(os.path.join(model_dir, "model.safetensors"), params)
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(cfg, f)

    # Batch: B rows of T tokens, some padded; masked positions end with zeros (NVIDIA layout).
    B, T, Pn = 5, 23, 7
    ids = np.zeros((B, T), np.int32)
    mask = np.zeros((B, T), np.int8)
    seg = np.zeros((B, T), np.int8)
    pos = np.zeros((B, Pn), np.int32)
    mids = np.zeros((B, Pn), np.int32)
    lengths = [23, 17, 9, 23, 12]
    for b, L in enumerate(lengths):
        ids[b, :L] = rng.integers(1, cfg["vocab_size"], L)
        mask[b, :L] = 1
        cut = rng.integers(2, L - 1)
        seg[b, cut:L] = 1
        npred = min(Pn, max(1, L // 3)) if b != 3 else Pn  # row 3: a full list, no terminating 0
        p = np.sort(rng.choice(np.arange(1, L), npred, replace=False))
        pos[b, :npred] = p
        mids[b, :npred] = rng.integers(0, cfg["vocab_size"], npred)
    nsp = rng.integers(0, 2, B).astype(np.int8)
    h5 = os.path.join(args.workdir, "batch.h5")
    with h5py.File(h5, "w") as f:
        f.create_dataset("input_ids", data=ids, dtype="i4", compression="gzip")
        f.create_dataset("input_mask", data=mask, dtype="i1", compression="gzip")
        f.create_dataset("segment_ids", data=seg, dtype="i1", compression="gzip")
        f.create_dataset("masked_lm_positions", data=pos, dtype="i4", compression="gzip")
        f.create_dataset("masked_lm_ids", data=mids, dtype="i4", compression="gzip")
        f.create_dataset("next_sentence_labels", data=nsp, dtype="i1", compression="gzip")

    out = os.path.join(args.workdir, "step.safetensors")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([args.bertcc, "dump-step", "--model", model_dir, "--batch", h5, "--precision",
                        args.precision, "--device", args.device, "--out", out], capture_output=True, text=True)
    print(r.stdout, r.stderr, end="")
    if r.returncode != 0:
        print("FAIL: bertcc dump-step exited with", r.returncode)
        return 1
    ours = st.load(out)

    P = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in params.items()}
    labels = torch_bert.nvidia_labels(torch.tensor(pos), torch.tensor(mids), T)
    loss, mlm, nspl = torch_bert.pretrain_loss(P, cfg, torch.tensor(ids, dtype=torch.long),
                                               torch.tensor(seg, dtype=torch.long), torch.tensor(mask),
                                               labels, torch.tensor(nsp, dtype=torch.long))
    loss.backward()

    tol = 1e-4 if args.precision == "fp32" else 3e-2
    failures, worst = [], 0.0
    expected = {"loss": loss.item(), "mlm_loss": mlm.item(), "nsp_loss": nspl.item()}
    for k, v in expected.items():
        got = float(ours[k][0])
        rel = abs(got - v) / max(abs(v), 1e-12)
        worst = max(worst, rel)
        print(f"{k:10s} ours {got:.7f} torch {v:.7f} rel {rel:.2e}")
        if rel > tol:
            failures.append(k)
    # Attention key biases have an exactly-zero true gradient (softmax is shift-invariant per row).
    grad_failures, grad_worst = gradcheck.compare_gradients(ours, P, tol, zero_rel=1e-9)
    failures += grad_failures
    worst = max(worst, grad_worst)
    print(f"{len(params)} gradients compared, worst relative error {worst:.2e}, tolerance {tol:g}")
    if failures:
        print("FAIL:", "; ".join(failures[:20]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
