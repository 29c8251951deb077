#!/usr/bin/python3
"""PyTorch peer for `bertcc bench infer --precision int8`: PyTorch's BERT dynamic-quantization
recipe, `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)` (per-tensor
int8 weights, activations quantized per call; embeddings, attention, LayerNorm, GELU in fp32),
on the weights of a bertcc model directory (model.safetensors), and the same module in fp32.

The module is tests/torch/torch_bert.encoder with its linear layers as nn.Linear (what
quantize_dynamic replaces); its fp32 output is checked against torch_bert.encoder (1e-5) and the
int8 output against fp32 (relative RMS error printed) before timing. Prints one JSON line per
precision like `bertcc bench infer`.
    peer_torch_int8.py MODEL_DIR [--batch 8] [--seq 128] [--threads N] [--steps 10] [--warmup 3]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import st  # noqa: E402
import torch_bert  # noqa: E402


class Encoder(nn.Module):
    def __init__(self, P, cfg):
        super().__init__()
        self.cfg = cfg
        self.P = {n: t for n, t in P.items() if not n.endswith(".weight") or t.dim() == 1 or "embeddings" in n}
        self.lin = nn.ModuleDict()
        for n, t in P.items():
            if n.endswith(".weight") and t.dim() == 2 and "embeddings" not in n and n.startswith("bert."):
                base = n[: -len(".weight")]
                m = nn.Linear(t.shape[1], t.shape[0])
                with torch.no_grad():
                    m.weight.copy_(t)
                    m.bias.copy_(P[base + ".bias"])
                self.lin[base.replace(".", "_")] = m

    def forward(self, input_ids, segment_ids, input_mask):
        P, cfg = self.P, self.cfg
        B, T = input_ids.shape
        C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
        HS = C // NH
        eps = cfg.get("layer_norm_eps", 1e-12)
        ln = lambda x, n: F.layer_norm(x, (C,), P[n + ".weight"], P[n + ".bias"], eps)
        lin = lambda x, n: self.lin[n.replace(".", "_")](x)
        pos = torch.arange(T)
        h = (F.embedding(input_ids, P["bert.embeddings.word_embeddings.weight"], padding_idx=0)
             + P["bert.embeddings.position_embeddings.weight"][pos][None]
             + F.embedding(segment_ids, P["bert.embeddings.token_type_embeddings.weight"]))
        h = ln(h, "bert.embeddings.LayerNorm")
        mask_add = ((1.0 - input_mask.to(h.dtype)) * -10000.0)[:, None, None, :]
        for l in range(cfg["num_hidden_layers"]):
            p = f"bert.encoder.layer.{l}."
            q = lin(h, p + "attention.self.query").view(B, T, NH, HS).transpose(1, 2)
            k = lin(h, p + "attention.self.key").view(B, T, NH, HS).transpose(1, 2)
            v = lin(h, p + "attention.self.value").view(B, T, NH, HS).transpose(1, 2)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HS) + mask_add, dim=-1)
            ctx = (a @ v).transpose(1, 2).reshape(B, T, C)
            h1 = ln(lin(ctx, p + "attention.output.dense") + h, p + "attention.output.LayerNorm")
            ff = lin(torch_bert.gelu(lin(h1, p + "intermediate.dense"), cfg.get("hidden_act", "gelu")),
                     p + "output.dense")
            h = ln(ff + h1, p + "output.LayerNorm")
        return h, torch.tanh(lin(h[:, 0], "bert.pooler.dense"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precisions", default="fp32,int8")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    P = {n: torch.from_numpy(a.copy()).float() for n, a in st.load(os.path.join(args.model, "model.safetensors")).items()
         if n.startswith("bert.")}
    B, T = args.batch, args.seq
    ids = torch.tensor([[101 if t == 0 else 1000 + (r * 31 + t * 17) % 20000 for t in range(T)] for r in range(B)])
    seg, mask = torch.zeros_like(ids), torch.ones_like(ids)
    fp32 = Encoder(P, cfg).eval()
    with torch.no_grad():
        ref = torch_bert.encoder(P, cfg, ids, seg, mask)[0]
        out32 = fp32(ids, seg, mask)[0]
    assert (out32 - ref).abs().max().item() < 1e-4, "nn.Linear module differs from torch_bert.encoder"
    engine = torch.backends.quantized.engine
    for prec in args.precisions.split(","):
        m = fp32 if prec == "fp32" else torch.ao.quantization.quantize_dynamic(fp32, {nn.Linear}, dtype=torch.qint8)
        with torch.no_grad():
            out = m(ids, seg, mask)[0]
            rel = ((out - out32).pow(2).mean().sqrt() / out32.pow(2).mean().sqrt()).item()
            for _ in range(args.warmup):
                m(ids, seg, mask)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                m(ids, seg, mask)
            sec = (time.perf_counter() - t0) / args.steps
        print(json.dumps({"peer": "pytorch " + torch.__version__, "precision": prec,
                          "quantized_engine": engine if prec == "int8" else None, "batch": B, "seq": T,
                          "threads": torch.get_num_threads(), "steps": args.steps, "step_ms": sec * 1e3,
                          "seq_per_s": B / sec, "rel_rms_vs_fp32": rel}))


if __name__ == "__main__":
    main()
