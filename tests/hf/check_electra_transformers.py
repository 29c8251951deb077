#!/usr/bin/env python3
"""transformers' ElectraForPreTraining / ElectraForMaskedLM load the directories `bertcc pretrain
--model-type electra` writes, and compute what bertcc computes.

  check_electra_transformers.py BERTCC WORKDIR

1. Random dynamic-masking shards (h5py) and a small ELECTRA (embedding 32 < hidden 64, a generator
   of hidden 16 with its own embeddings_project): `bertcc pretrain --model-type electra` for 3 steps
   writes discriminator/ and generator/.
2. from_pretrained on both with output_loading_info: no missing, unexpected or mismatched tensors
   (the generator's lm head tied to its word embeddings).
3. On a padded batch, fp32, dropout off: the discriminator's logits and the generator's logits at the
   masked positions against `bertcc dump-step --head discriminator|generator`, and the joint step
   (`dump-step --model-type electra`, a fixed Gumbel tensor) against the same step done with the
   transformers models: sampled tokens, generator loss, discriminator loss. Tolerance: max |ours -
   theirs| <= 1e-4 * max(1, max |theirs|).
Needs transformers (the GPU machine has it); exits 77 (skipped) without it.
"""
import json
import os
import subprocess
import sys

import numpy as np

try:
    import torch
    import torch.nn.functional as F
    from transformers import ElectraForMaskedLM, ElectraForPreTraining
except ImportError:
    print("skipped: transformers is not installed here")
    sys.exit(77)
import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402

bertcc, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(7)
V, S = 120, 24
vocab = os.path.join(work, "vocab.txt")
with open(vocab, "w") as f:
    f.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + "".join(f"w{i}\n" for i in range(5, V)))
os.makedirs(os.path.join(work, "h5"), exist_ok=True)
N = 64
lengths = rng.integers(8, S + 1, N)
ids = np.zeros((N, S), np.int32)
mask = np.zeros((N, S), np.int8)
seg = np.zeros((N, S), np.int8)
for r, L in enumerate(lengths):
    ids[r, :L] = rng.integers(5, V, L)
    ids[r, 0], ids[r, L // 2], ids[r, L - 1] = 2, 3, 3
    mask[r, :L] = 1
    seg[r, L // 2 + 1:L] = 1
with h5py.File(os.path.join(work, "h5", "part-0.h5"), "w") as f:
    for k, v in {"input_ids": ids, "input_mask": mask, "segment_ids": seg,
                 "next_sentence_labels": np.zeros(N, np.int8), "lengths": lengths.astype(np.int32)}.items():
        f.create_dataset(k, data=v)
cfg = {"model_type": "electra", "vocab_size": V, "embedding_size": 32, "hidden_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": S, "type_vocab_size": 2}
json.dump(cfg, open(os.path.join(work, "electra.json"), "w"))
run = os.path.join(work, "run")
subprocess.run([bertcc, "pretrain", "--model-type", "electra", "--config", os.path.join(work, "electra.json"),
                "--generator-hidden-size", "0.25", "--vocab", vocab, "--input-dir", os.path.join(work, "h5"),
                "--output-dir", run, "--train-batch-size", "16", "--max-steps", "3", "--learning-rate", "1e-2",
                "--num-steps-per-checkpoint", "0", "--precision", "fp32"], check=True, capture_output=True)
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


disc, dinfo = ElectraForPreTraining.from_pretrained(os.path.join(run, "discriminator"), output_loading_info=True)
gen, ginfo = ElectraForMaskedLM.from_pretrained(os.path.join(run, "generator"), output_loading_info=True)
for name, info in (("discriminator", dinfo), ("generator", ginfo)):
    bad = {k: v for k, v in info.items() if v}
    check(not bad, f"{name}: loaded by transformers with nothing missing or unexpected {bad if bad else ''}")
disc.eval()
gen.eval()

# a padded batch with BERT-style masking
B = 4
bl = [S, 17, 11, 20]
bids = np.zeros((B, S), np.int64)
bmask = np.zeros((B, S), np.int64)
bseg = np.zeros((B, S), np.int64)
for r, L in enumerate(bl):
    bids[r, :L] = rng.integers(5, V, L)
    bids[r, 0], bids[r, L - 1] = 2, 3
    bmask[r, :L] = 1
    bseg[r, L // 2:L] = 1
chosen = (rng.random((B, S)) < 0.25) & (bmask == 1)
chosen[:, 0] = False
orig = bids.copy()
bids[chosen] = 4
mlm = np.where(chosen, orig, -100)
M = int(chosen.sum())
gumbel = -np.log(-np.log(rng.uniform(1e-9, 1.0, (M, V))))
T = lambda a: torch.tensor(a)
with torch.no_grad():
    g_logits = gen(input_ids=T(bids), attention_mask=T(bmask), token_type_ids=T(bseg)).logits
    g_sel = g_logits[T(chosen)]
    sample = (g_sel.double() + T(gumbel)).argmax(-1).numpy()
    dids = orig.copy()
    dids[chosen] = sample
    dlab = (dids != orig).astype(np.int64)
    d_logits = disc(input_ids=T(dids), attention_mask=T(bmask), token_type_ids=T(bseg)).logits
    gen_loss = F.cross_entropy(g_sel, T(orig[chosen])).item()
    act = T(bmask).bool()
    disc_loss = F.binary_cross_entropy_with_logits(d_logits[act], T(dlab)[act].float()).item()


def close(a, b):
    return np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max())


def dump(args, batch):
    p = os.path.join(work, "batch.safetensors")
    st.save(p, {k: np.asarray(v).astype(np.float32) for k, v in batch.items()})
    out = os.path.join(work, "out.safetensors")
    subprocess.run([bertcc, "dump-step", *args, "--batch", p, "--precision", "fp32", "--out", out], check=True,
                   capture_output=True)
    return st.load(out)


base = {"input_ids": bids, "segment_ids": bseg, "input_mask": bmask}
o = dump(["--head", "generator", "--model", os.path.join(run, "generator")], dict(base, labels=mlm))
check(close(o["logits"].astype(np.float64), g_sel.double().numpy()), f"generator logits at {M} masked positions")
o = dump(["--head", "discriminator", "--model", os.path.join(run, "discriminator")],
         {"input_ids": dids, "segment_ids": bseg, "input_mask": bmask, "labels": dlab})
check(close(o["logits"].astype(np.float64).reshape(B, S)[bmask == 1], d_logits.double().numpy()[bmask == 1]),
      "discriminator logits")
o = dump(["--model-type", "electra", "--model", os.path.join(run, "discriminator"), "--generator",
          os.path.join(run, "generator")], dict(base, mlm_labels=mlm, gumbel=gumbel))
check(np.array_equal(o["sampled"].astype(np.int64), sample), "sampled tokens identical")
for k, ref in (("generator_loss", gen_loss), ("discriminator_loss", disc_loss)):
    check(abs(float(o[k][0]) - ref) <= 1e-4 * max(1.0, abs(ref)), f"{k}: bertcc {float(o[k][0]):.6f} transformers {ref:.6f}")
sys.exit(1 if fails else 0)
