#!/usr/bin/python3
"""One ELECTRA pre-training step (`bertcc dump-step --model-type electra`) against PyTorch in float64.

A discriminator (embedding_size 24 < hidden 36: embeddings_project) and a smaller generator (hidden
12 < embedding_size: its own embeddings_project) sharing word, position and token-type embeddings
and the embeddings' LayerNorm (the generator directory's own copies are ignored: bertcc copies the
discriminator's in); a padded batch masked BERT-style (80 % [MASK], 10 % random, 10 % kept); a fixed
Gumbel noise tensor in the batch file, so the sampling is reproducible (one position is forced to
sample its original token, which must count as original). Compared: the sampled tokens (fp32:
exactly), the generator and discriminator losses, the discriminator logits, and every gradient of
generator MLM loss + 50 x discriminator loss (shared embeddings: both models' contributions, under
the discriminator; the generator's copies get none). Tolerance per tensor: max |ours - ref| <=
tol * max |ref| (fp32 1e-4, bf16 3e-2). In bf16 the reference samples what bertcc sampled (logits
differ in the last bits, so near-ties may flip) and at least 90 % must agree with its own sampling."""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_electra_step as ce  # noqa: E402
import gradcheck  # noqa: E402
import st  # noqa: E402

SHARED = ["electra.embeddings.word_embeddings.weight", "electra.embeddings.position_embeddings.weight",
          "electra.embeddings.token_type_embeddings.weight", "electra.embeddings.LayerNorm.weight",
          "electra.embeddings.LayerNorm.bias"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cpu", help="bertcc's --device (cuda on the GPU machine)")
    args = ap.parse_args()
    rng = np.random.default_rng(23)
    base = {"model_type": "electra", "vocab_size": 89, "embedding_size": 24, "num_hidden_layers": 2,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 40, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12}
    dcfg = dict(base, architectures=["ElectraForPreTraining"], hidden_size=36, num_attention_heads=3,
                intermediate_size=47)
    gcfg = dict(base, architectures=["ElectraForMaskedLM"], hidden_size=12, num_attention_heads=3,
                intermediate_size=19)
    dp = gradcheck.random_params(ce.shapes(dcfg, "discriminator"), rng, matrix_scale=0.2)
    gp = gradcheck.random_params(ce.shapes(gcfg, "generator"), rng, matrix_scale=0.2)
    shutil.rmtree(args.workdir, ignore_errors=True)
    for name, cfg, params in (("disc", dcfg, dp), ("gen", gcfg, gp)):
        os.makedirs(os.path.join(args.workdir, name))
        st.save(os.path.join(args.workdir, name, "model.safetensors"), params)
        json.dump(cfg, open(os.path.join(args.workdir, name, "config.json"), "w"))

    V, B, T = base["vocab_size"], 4, 18
    lengths = [18, 13, 7, 16]
    MASK = 4
    orig = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.int64)
    seg = np.zeros((B, T), np.int64)
    for b, L in enumerate(lengths):
        orig[b, :L] = rng.integers(5, V, L)
        mask[b, :L] = 1
        seg[b, rng.integers(2, L - 1):L] = 1
    chosen = (rng.random((B, T)) < 0.3) & (mask == 1)
    ids = orig.copy()
    r = rng.random((B, T))
    ids[chosen & (r < 0.8)] = MASK
    rand = chosen & (r >= 0.8) & (r < 0.9)
    ids[rand] = rng.integers(5, V, rand.sum())
    labels = np.where(chosen, orig, -100)
    M = int(chosen.sum())
    gumbel = -np.log(-np.log(rng.uniform(1e-9, 1.0, (M, V))))
    first = np.flatnonzero(chosen.ravel())[0]
    gumbel[0, orig.ravel()[first]] += 60.0  # this position samples its original token
    st.save(os.path.join(args.workdir, "batch.safetensors"),
            {"input_ids": ids.astype(np.float32), "segment_ids": seg.astype(np.float32),
             "input_mask": mask.astype(np.float32), "mlm_labels": labels.astype(np.float32),
             "gumbel": gumbel.astype(np.float32)})
    out = os.path.join(args.workdir, "step.safetensors")
    res = subprocess.run([args.bertcc, "dump-step", "--model-type", "electra", "--model",
                          os.path.join(args.workdir, "disc"), "--generator", os.path.join(args.workdir, "gen"),
                          "--batch", os.path.join(args.workdir, "batch.safetensors"), "--precision", args.precision,
                          "--device", args.device, "--out", out], capture_output=True, text=True)
    print(res.stdout, end="")
    if res.returncode != 0:
        print(res.stderr)
        return 1
    ours = st.load(out)

    # ---- the reference ----
    Pd = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in dp.items()}
    Pg = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in gp.items()}
    for n in SHARED:
        Pg[n] = Pd[n]  # shared embeddings: the same tensors
    tl = lambda a: torch.tensor(a)
    gen_loss, gen_logits = ce.electra(Pg, gcfg, "generator", tl(ids), tl(seg), tl(mask), tl(labels))
    own_sample = (gen_logits.detach() + torch.tensor(gumbel)).argmax(-1).numpy()
    our_sample = ours["sampled"].astype(np.int64)
    agree = float((own_sample == our_sample).mean())
    fails = []
    tol = 1e-4 if args.precision == "fp32" else 3e-2
    if (args.precision == "fp32" and agree < 1.0) or agree < 0.9:
        fails.append(f"sampled tokens agree on {agree:.0%}")
    sample = own_sample if args.precision == "fp32" else our_sample
    dids = orig.copy().ravel()
    pos = np.flatnonzero(chosen.ravel())
    dids[pos] = sample
    dlabels = np.zeros(B * T, np.int64)
    dlabels[pos] = sample != orig.ravel()[pos]
    if dlabels[first] != 0:
        fails.append("the forced sample of the original token did not count as original")
    disc_loss, disc_logits = ce.electra(Pd, dcfg, "discriminator", tl(dids.reshape(B, T)), tl(seg), tl(mask),
                                        tl(dlabels.reshape(B, T)))
    total = gen_loss + 50.0 * disc_loss
    total.backward()
    print(f"  sampled: {M} masked, {int(dlabels.sum())} replaced, agreement {agree:.0%}")
    for key, ref in (("generator_loss", gen_loss), ("discriminator_loss", disc_loss), ("loss", total)):
        rel = abs(float(ours[key][0]) - ref.item()) / abs(ref.item())
        print(f"  {key}: ours {float(ours[key][0]):.7f} torch {ref.item():.7f} rel {rel:.2e}")
        if rel > tol:
            fails.append(key)
    lerr = np.abs(ours["discriminator_logits"] - disc_logits.detach().numpy()).max() / disc_logits.abs().max().item()
    if lerr > tol:
        fails.append(f"discriminator logits (rel err {lerr:.2e})")
    own = {n: Pg[n] for n in Pg if n not in SHARED}
    og = {"grad." + n: ours["grad.generator." + n] for n in own}
    f1, w1 = gradcheck.compare_gradients(og, own, tol, zero_rel=1e-6, label="generator ")
    od = {"grad." + n: ours["grad.discriminator." + n] for n in Pd}
    f2, w2 = gradcheck.compare_gradients(od, Pd, tol, zero_rel=1e-6, label="discriminator ")
    zero = all(np.all(ours["grad.generator." + n] == 0) for n in SHARED)
    if not zero:
        fails.append("the generator's copies of the shared embeddings got a gradient")
    fails += f1 + f2
    print(f"  logits rel err {lerr:.2e}; generator {len(own)} gradients worst {w1:.2e}; discriminator {len(Pd)} "
          f"gradients (shared embeddings included) worst {w2:.2e} (tol {tol:g})")
    if fails:
        print("FAIL:", "; ".join(fails[:20]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
