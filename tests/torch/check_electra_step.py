#!/usr/bin/python3
"""ELECTRA's discriminator (HF ElectraForPreTraining) and generator (ElectraForMaskedLM: masked-LM
head to embedding_size, gelu, LayerNorm, decoder tied to the word embeddings, generator_lm_head.bias)
against a PyTorch implementation written here
in float64: a random model whose embeddings (embedding_size 24) are narrower than the encoder
(hidden 36, so electra.embeddings_project is used), HF names (electra.*, discriminator_predictions.*),
a padded batch with replaced-token labels, `bertcc dump-step --head discriminator`; then the loss
(binary cross-entropy with logits over the tokens with attention mask 1, as HF), the logits and
every gradient. Tolerance as check_head_step.py: max |ours - ref| <= tol * max |ref| per tensor
(fp32 1e-4, bf16 3e-2). Also: a model whose embeddings are as wide as the encoder (no projection)
and one with wider embeddings than the encoder (a generator's shape). Non-zero exit on any mismatch."""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gradcheck  # noqa: E402
import st  # noqa: E402
import torch_bert  # noqa: E402


def shapes(cfg, head):
    V, E, C = cfg["vocab_size"], cfg["embedding_size"], cfg["hidden_size"]
    s = {"electra.embeddings.word_embeddings.weight": (V, E),
         "electra.embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], E),
         "electra.embeddings.token_type_embeddings.weight": (cfg["type_vocab_size"], E),
         "electra.embeddings.LayerNorm.weight": (E,), "electra.embeddings.LayerNorm.bias": (E,)}
    if E != C:
        s["electra.embeddings_project.weight"] = (C, E)
        s["electra.embeddings_project.bias"] = (C,)
    s.update(torch_bert.layer_shapes(cfg, "electra."))
    K = len(cfg.get("id2label", {})) or 2
    if head == "qa":
        s["qa_outputs.weight"], s["qa_outputs.bias"] = (2, C), (2,)
    elif head == "classify":  # ElectraClassificationHead
        s["classifier.dense.weight"], s["classifier.dense.bias"] = (C, C), (C,)
        s["classifier.out_proj.weight"], s["classifier.out_proj.bias"] = (K, C), (K,)
    elif head == "token":
        s["classifier.weight"], s["classifier.bias"] = (K, C), (K,)
    elif head == "discriminator":
        s["discriminator_predictions.dense.weight"] = (C, C)
        s["discriminator_predictions.dense.bias"] = (C,)
        s["discriminator_predictions.dense_prediction.weight"] = (1, C)
        s["discriminator_predictions.dense_prediction.bias"] = (1,)
    else:
        s["generator_predictions.dense.weight"] = (E, C)
        s["generator_predictions.dense.bias"] = (E,)
        s["generator_predictions.LayerNorm.weight"] = (E,)
        s["generator_predictions.LayerNorm.bias"] = (E,)
        s["generator_lm_head.bias"] = (V,)
    return s


def encode(P, cfg, ids, seg, mask, dropout=0.0):
    """HF ElectraModel.forward: the sequence output [B,T,C]; dropout (training) where HF applies it:
    after the embeddings' LayerNorm, on the attention probabilities and after both output denses."""
    B, T = ids.shape
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    HS = C // NH
    eps = cfg["layer_norm_eps"]
    # (bf16 autocast, as the bench peer runs it: LayerNorm in fp32, torch 1.13's CPU autocast does not)
    ln = lambda x, n: F.layer_norm(x.float() if x.dtype == torch.bfloat16 else x, (x.shape[-1],), P[n + ".weight"],
                                   P[n + ".bias"], eps)
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P[n + ".bias"])
    act = (lambda x: F.gelu(x)) if cfg["hidden_act"] == "gelu" else (
        lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3)))))
    e = "electra.embeddings."
    h = (F.embedding(ids, P[e + "word_embeddings.weight"], padding_idx=0)
         + P[e + "position_embeddings.weight"][torch.arange(T)][None]
         + F.embedding(seg, P[e + "token_type_embeddings.weight"]))
    drop = lambda x: F.dropout(x, dropout, dropout > 0)
    h = drop(ln(h, e + "LayerNorm"))
    if "electra.embeddings_project.weight" in P:
        h = lin(h, "electra.embeddings_project")
    mask_add = ((1.0 - mask.to(h.dtype)) * -10000.0)[:, None, None, :]
    for l in range(cfg["num_hidden_layers"]):
        p = f"electra.encoder.layer.{l}."
        q = lin(h, p + "attention.self.query").view(B, T, NH, HS).transpose(1, 2)
        k = lin(h, p + "attention.self.key").view(B, T, NH, HS).transpose(1, 2)
        v = lin(h, p + "attention.self.value").view(B, T, NH, HS).transpose(1, 2)
        a = drop(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HS) + mask_add, dim=-1))
        ctx = (a @ v).transpose(1, 2).reshape(B, T, C)
        h1 = ln(drop(lin(ctx, p + "attention.output.dense")) + h, p + "attention.output.LayerNorm")
        h = ln(drop(lin(act(lin(h1, p + "intermediate.dense")), p + "output.dense")) + h1, p + "output.LayerNorm")
    return h


def electra(P, cfg, head, ids, seg, mask, labels, dropout=0.0):
    """HF ElectraFor{PreTraining,MaskedLM,QuestionAnswering,SequenceClassification,TokenClassification}.forward."""
    h = encode(P, cfg, ids, seg, mask, dropout)
    B, T = ids.shape
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P[n + ".bias"])
    eps = cfg["layer_norm_eps"]
    ln = lambda x, n: F.layer_norm(x.float() if x.dtype == torch.bfloat16 else x, (x.shape[-1],), P[n + ".weight"],
                                   P[n + ".bias"], eps)
    act = (lambda x: F.gelu(x)) if cfg["hidden_act"] == "gelu" else (
        lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3)))))
    if head == "qa":  # ElectraForQuestionAnswering: mean of start and end CE, positions clamped to T
        lg = lin(h, "qa_outputs")
        st_, en_ = lg[..., 0], lg[..., 1]
        sp, ep = labels[0].clamp(0, T), labels[1].clamp(0, T)
        loss = (F.cross_entropy(st_, sp, ignore_index=T) + F.cross_entropy(en_, ep, ignore_index=T)) / 2
        return loss, lg
    if head == "classify":  # ElectraClassificationHead: h[:, 0] -> dense -> gelu -> out_proj
        lg = lin(F.gelu(lin(h[:, 0], "classifier.dense")), "classifier.out_proj")
        return F.cross_entropy(lg, labels), lg
    if head == "token":
        lg = lin(h, "classifier")
        return F.cross_entropy(lg.view(-1, lg.shape[-1]), labels.view(-1), ignore_index=-100), lg
    if head == "generator":  # ElectraGeneratorPredictions (gelu, whatever hidden_act says) + tied lm head
        g = ln(F.gelu(lin(h, "generator_predictions.dense")), "generator_predictions.LayerNorm")
        logits = g @ P["electra.embeddings.word_embeddings.weight"].T + P["generator_lm_head.bias"]
        sel = labels.view(-1) != -100
        logits = logits.view(-1, logits.shape[-1])[sel]
        return F.cross_entropy(logits, labels.view(-1)[sel]), logits
    logits = lin(act(lin(h, "discriminator_predictions.dense")), "discriminator_predictions.dense_prediction").squeeze(-1)
    active = mask.view(-1) == 1
    loss = F.binary_cross_entropy_with_logits(logits.view(-1)[active], labels.view(-1)[active].to(logits.dtype))
    return loss, logits


def run_case(args, name, head, E, C, act, rng):
    arch = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM", "qa": "ElectraForQuestionAnswering",
            "classify": "ElectraForSequenceClassification", "token": "ElectraForTokenClassification"}[head]
    cfg = {"model_type": "electra", "architectures": [arch], "vocab_size": 89, "embedding_size": E,
           "hidden_size": C, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 47,
           "hidden_act": act, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
           "max_position_embeddings": 40, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12}
    if head in ("classify", "token"):
        cfg["id2label"] = {str(i): f"L{i}" for i in range(3 if head == "classify" else 5)}
    params = gradcheck.random_params(shapes(cfg, head), rng)
    wd = os.path.join(args.workdir, name)
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(os.path.join(wd, "model"))
    st.save(os.path.join(wd, "model", "model.safetensors"), params)
    json.dump(cfg, open(os.path.join(wd, "model", "config.json"), "w"))
    B, T = 4, 17
    lengths = [17, 12, 6, 15]
    ids = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.int64)
    seg = np.zeros((B, T), np.int64)
    for b, L in enumerate(lengths):
        ids[b, :L] = rng.integers(1, cfg["vocab_size"], L)
        mask[b, :L] = 1
        seg[b, rng.integers(2, L - 1):L] = 1
    batch = {"input_ids": ids, "segment_ids": seg, "input_mask": mask}
    if head == "discriminator":
        labels = (rng.random((B, T)) < 0.3).astype(np.int64)
        labels[mask == 0] = 0
    elif head == "generator":  # masked positions get their original ids; the rest -100
        labels = np.where((rng.random((B, T)) < 0.3) & (mask == 1), rng.integers(0, cfg["vocab_size"], (B, T)), -100)
    elif head == "qa":
        sp = np.array([rng.integers(0, L) for L in lengths])
        ep = np.minimum(sp + rng.integers(0, 4, B), np.array(lengths) - 1)
        sp[2] = T + 5  # out of range: ignored, as HF
        batch["start_positions"], batch["end_positions"] = sp, ep
        labels = np.stack([sp, ep])
    elif head == "classify":
        labels = rng.integers(0, 3, B)
    else:
        labels = np.where(mask == 1, rng.integers(0, 5, (B, T)), -100)
    if head != "qa":
        batch["labels"] = labels
    st.save(os.path.join(wd, "batch.safetensors"), {k: v.astype(np.float32) for k, v in batch.items()})
    out = os.path.join(wd, "step.safetensors")
    r = subprocess.run([args.bertcc, "dump-step", "--head", head, "--model", os.path.join(wd, "model"),
                        "--batch", os.path.join(wd, "batch.safetensors"), "--precision", args.precision, "--out", out],
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr)
        return [f"{name}: dump-step exited with {r.returncode}"]
    ours = st.load(out)
    P = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in params.items()}
    loss, logits = electra(P, cfg, head, torch.tensor(ids), torch.tensor(seg), torch.tensor(mask), torch.tensor(labels))
    loss.backward()
    tol = 1e-4 if args.precision == "fp32" else 3e-2
    fails = []
    rel = abs(float(ours["loss"][0]) - loss.item()) / abs(loss.item())
    print(f"  {name}: loss ours {float(ours['loss'][0]):.7f} torch {loss.item():.7f} rel {rel:.2e}")
    if rel > tol:
        fails.append(f"{name} loss")
    ref = logits.detach().numpy()
    got = ours["logits"].reshape(ref.shape)  # QA: [B, T, 2] both
    lerr = np.abs(got - ref).max() / np.abs(ref).max()
    if lerr > tol:
        fails.append(f"{name} logits (rel err {lerr:.2e})")
    grad_failures, worst = gradcheck.compare_gradients(ours, P, tol, zero_rel=1e-6, label=f"{name} ")
    print(f"  {name}: logits rel err {lerr:.2e}, {len(params)} gradients, worst {worst:.2e} (tol {tol:g})")
    return fails + grad_failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(13)
    fails = []
    for name, head, E, C, act in (("narrow_embeddings", "discriminator", 24, 36, "gelu"),
                                  ("same_width", "discriminator", 36, 36, "gelu"),
                                  ("wide_embeddings", "discriminator", 48, 36, "gelu_new"),
                                  # a generator narrower than its embeddings, as Google's (hidden = 1/4 or 1/3)
                                  ("generator_small", "generator", 24, 12, "gelu"),
                                  ("generator_gelu_new", "generator", 24, 36, "gelu_new"),
                                  # fine-tuning heads on an ELECTRA encoder (narrow embeddings)
                                  ("electra_qa", "qa", 24, 36, "gelu"),
                                  ("electra_classify", "classify", 24, 36, "gelu"),
                                  ("electra_token", "token", 24, 36, "gelu")):
        fails += run_case(args, name, head, E, C, act, rng)
    if fails:
        print("FAIL:", "; ".join(fails[:20]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
