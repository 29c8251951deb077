#!/usr/bin/python3
"""One fine-tuning step of each head (QA, sequence classification, regression, token
classification) against tests/torch/torch_bert.py in float64, like check_dump_step.py: a random
model with HF names per architecture, a padded batch with ignored labels (QA positions beyond T,
token labels -100), `bertcc dump-step --head ...`, then the loss, the logits and every gradient.
Tolerance: max |ours - ref| <= tol * max |ref| per tensor (fp32 1e-4, bf16 3e-2); tensors whose true
gradient is exactly zero (key biases) are judged against the largest gradient. Non-zero exit on any
mismatch."""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gradcheck  # noqa: E402
import st  # noqa: E402
import torch_bert  # noqa: E402


def run_case(args, head, K, rng):
    cfg = {"vocab_size": 97, "hidden_size": 36, "num_hidden_layers": 2, "num_attention_heads": 3,
           "intermediate_size": 53, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 40, "type_vocab_size": 2,
           "initializer_range": 0.02, "layer_norm_eps": 1e-12, "model_type": "bert"}
    if head != "qa":
        cfg["id2label"] = {str(i): f"L{i}" for i in range(K)}
    shapes = torch_bert.head_shapes(cfg, head, K)
    params = gradcheck.random_params(shapes, rng)
    name = f"{head}{K}"
    wd = os.path.join(args.workdir, name)
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(os.path.join(wd, "model"))
    st.save(os.path.join(wd, "model", "model.safetensors"), params)
    with open(os.path.join(wd, "model", "config.json"), "w") as f:
        json.dump(cfg, f)

    B, T = 5, 19
    lengths = [19, 14, 7, 19, 11]
    ids = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.int64)
    seg = np.zeros((B, T), np.int64)
    for b, L in enumerate(lengths):
        ids[b, :L] = rng.integers(1, cfg["vocab_size"], L)
        mask[b, :L] = 1
        seg[b, rng.integers(2, L - 1):L] = 1
    batch = {"input_ids": ids, "segment_ids": seg, "input_mask": mask}
    tl = {}
    if head == "qa":
        sp = np.array([rng.integers(0, L) for L in lengths])
        ep = np.minimum(sp + rng.integers(0, 4, B), np.array(lengths) - 1)
        sp[2], ep[4] = T + 6, 25  # out of range: ignored (clamped to T), as HF
        batch["start_positions"], batch["end_positions"] = sp, ep
        tl = dict(start=torch.tensor(sp), end=torch.tensor(ep))
    elif head == "classify" and K == 1:
        y = rng.uniform(0, 5, B)
        batch["targets"] = y
        tl = dict(targets=torch.tensor(y))
    elif head == "classify":
        y = rng.integers(0, K, B)
        batch["labels"] = y
        tl = dict(labels=torch.tensor(y))
    else:
        y = rng.integers(0, K, (B, T))
        y[mask == 0] = -100
        y[rng.random((B, T)) < 0.3] = -100  # later sub-tokens
        batch["labels"] = y
        tl = dict(labels=torch.tensor(y))
    st.save(os.path.join(wd, "batch.safetensors"), {k: v.astype(np.float32) for k, v in batch.items()})
    out = os.path.join(wd, "step.safetensors")
    r = subprocess.run([args.bertcc, "dump-step", "--head", head, "--model", os.path.join(wd, "model"), "--batch",
                        os.path.join(wd, "batch.safetensors"), "--precision", args.precision, "--out", out],
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr)
        return [f"{name}: dump-step exited with {r.returncode}"]
    ours = st.load(out)

    P = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in params.items()}
    loss, logits = torch_bert.finetune_loss(P, cfg, head, torch.tensor(ids), torch.tensor(seg), torch.tensor(mask),
                                            **tl)
    loss.backward()
    tol = 1e-4 if args.precision == "fp32" else 3e-2
    fails, worst = [], 0.0
    rel = abs(float(ours["loss"][0]) - loss.item()) / max(abs(loss.item()), 1e-12)
    print(f"  {name}: loss ours {float(ours['loss'][0]):.7f} torch {loss.item():.7f} rel {rel:.2e}")
    if rel > tol:
        fails.append(f"{name} loss")
    ref_logits = logits.detach().numpy()
    if ours["logits"].shape != ref_logits.shape:
        return fails + [f"{name} logits shape {ours['logits'].shape} vs {ref_logits.shape}"]
    lerr = np.abs(ours["logits"] - ref_logits).max() / np.abs(ref_logits).max()
    if lerr > tol:
        fails.append(f"{name} logits (rel err {lerr:.2e})")
    # QA's final LayerNorm bias and qa_outputs.bias: each softmax row's gradient sums to zero.
    grad_failures, worst = gradcheck.compare_gradients(ours, P, tol, zero_rel=1e-6, label=f"{name} ")
    fails += grad_failures
    print(f"  {name}: logits rel err {lerr:.2e}, {len(params)} gradients, worst {worst:.2e} (tol {tol:g})")
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(77)
    fails = []
    for head, K in (("qa", 2), ("classify", 3), ("classify", 1), ("token", 5)):
        fails += run_case(args, head, K, rng)
    if fails:
        print("FAIL:", "; ".join(fails[:20]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
