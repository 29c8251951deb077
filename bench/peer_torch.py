#!/usr/bin/python3
"""PyTorch peer for `bertcc bench`: the same model shapes, data sizes and step definition.

train: forward (dropout on) + backward + LAMB (apex FusedLAMB semantics written with
torch._foreach ops); bf16 via torch.autocast("cpu", dtype=torch.bfloat16), fp32 master weights.
infer: BertModel forward under no_grad; bf16 uses bf16 weights.
Prints one JSON line like `bertcc bench`. Run with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import torch_bert  # noqa: E402

PRESETS = {"bert-tiny": (2, 128), "bert-mini": (4, 256), "bert-small": (4, 512), "bert-medium": (8, 512),
           "bert-base": (12, 768), "bert-large": (24, 1024)}


def config(name):
    if name in PRESETS:
        L, H = PRESETS[name]
        return {"vocab_size": 30522, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": H // 64,
                "intermediate_size": 4 * H, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
                "layer_norm_eps": 1e-12}
    with open(name) as f:
        return json.load(f)


def lamb_step(params, grads, m, v, step, lr, wd_flags, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    gnorm = torch.norm(torch.stack([torch.norm(g) for g in grads]))
    clip = 1.0 / max(1.0, gnorm.item())
    torch._foreach_mul_(grads, clip)
    torch._foreach_mul_(m, b1)
    torch._foreach_add_(m, grads, alpha=1 - b1)
    torch._foreach_mul_(v, b2)
    torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    denom = torch._foreach_sqrt(torch._foreach_div(v, bc2))
    torch._foreach_add_(denom, eps)
    upd = torch._foreach_div(torch._foreach_div(m, bc1), denom)
    for p, u, decay in zip(params, upd, wd_flags):
        if decay:
            u.add_(p, alpha=wd)
            wn, un = p.norm(), u.norm()
            ratio = (wn / un).item() if wn > 0 and un > 0 else 1.0
        else:
            ratio = 1.0
        p.sub_(u, alpha=lr * ratio)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "squad", "classify", "infer"])
    ap.add_argument("--config", default="bert-base")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lengths", default="",
                    help="squad, classify: comma-separated padded lengths, one timed step each (batches "
                         "padded per batch, as bertcc does); overrides --seq and --steps")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = config(args.config)
    B, T = args.batch, args.seq
    lengths = [int(x) for x in args.lengths.split(",") if x] if args.lengths else []
    if lengths:
        assert args.mode in ("squad", "classify"), "--lengths is for squad and classify modes"
        T = max(lengths)
        args.steps = len(lengths)
    P = max(1, (T * 20 + 64) // 128)
    # classify: HF BertForSequenceClassification's fine-tuning step (2 labels), as run_glue.py runs
    # it; otherwise the same step as squad's
    classify = args.mode == "classify"
    squad = args.mode == "squad" or classify
    train = args.mode == "train"
    shapes = (torch_bert.head_shapes(cfg, "classify" if classify else "qa", 2) if squad
              else torch_bert.param_shapes(cfg, heads=train))
    params = {}
    for n, s in shapes.items():
        if n.endswith("LayerNorm.weight"):
            t = torch.ones(s)
        elif len(s) == 2:
            t = torch.randn(s) * 0.02
        else:
            t = torch.zeros(s)
        params[n] = t.requires_grad_(train or squad)
    ids = torch.randint(1, cfg["vocab_size"], (B, T))
    seg = (torch.arange(T) >= T // 2).long().expand(B, T).contiguous()
    mask = torch.ones(B, T, dtype=torch.long)
    labels = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        pos = torch.randint(1, T, (P,))
        labels[b, pos] = torch.randint(0, cfg["vocab_size"], (P,))
    nsp = torch.randint(0, 2, (B,))
    cls_labels = torch.randint(0, 2, (B,))
    starts = torch.tensor([(b * 37) % T for b in range(B)])
    ends = torch.clamp(starts + 3, max=T - 1)
    bf16 = args.precision == "bf16"
    names = list(params)
    plist = [params[n] for n in names]
    wd_flags = [not ("bias" in n or "LayerNorm" in n) for n in names]
    m = [torch.zeros_like(p) for p in plist]
    v = [torch.zeros_like(p) for p in plist]
    state = {"step": 0}
    adamw = torch.optim.AdamW(plist, lr=3e-5, eps=1e-6, weight_decay=0.01) if squad else None
    if not train and bf16:
        params = {n: p.to(torch.bfloat16) for n, p in params.items()}

    def step(L=T):
        if train:
            for p in plist:
                p.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss, _, _ = torch_bert.pretrain_loss(params, cfg, ids, seg, mask, labels, nsp,
                                                      dropout=cfg["hidden_dropout_prob"], training=True)
            loss.backward()
            state["step"] += 1
            with torch.no_grad():
                lamb_step(plist, [p.grad for p in plist], m, v, state["step"], 1e-4, wd_flags)
        elif squad:  # HF BertForQuestionAnswering step: dropout, AdamW, clipping at 1.0
            adamw.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss, _ = torch_bert.finetune_loss(params, cfg, "classify" if classify else "qa",
                                                   ids[:, :L].contiguous(), seg[:, :L].contiguous(),
                                                   mask[:, :L].contiguous(), labels=cls_labels, start=starts % L,
                                                   end=ends % L, dropout=cfg["hidden_dropout_prob"], training=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(plist, 1.0)
            adamw.step()
        else:
            with torch.no_grad():
                torch_bert.encoder(params, cfg, ids, seg, mask)

    for _ in range(args.warmup):
        step()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(lengths[i] if lengths else T)
        times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    C, I, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    N = B * T
    M = int((labels != -1).sum())
    fwd = L * (2 * N * C * 3 * C + 4 * B * T * T * C + 2 * N * C * C + 4 * N * C * I) + 2 * B * C * C
    if train:
        fwd += 2 * M * C * C + 2 * M * C * V + 4 * B * C
    if squad and not classify:
        fwd -= 2 * B * C * C  # no pooler
    flops = 3 * fwd if train or squad else fwd
    out = {"peer": "pytorch " + torch.__version__, "mode": args.mode, "config": args.config,
           "precision": args.precision, "batch": B, "seq": T, "threads": torch.get_num_threads(),
           "steps": args.steps, "step_ms": mean * 1e3, "seq_per_s": B / mean, "model_tflops": flops / mean / 1e12,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if lengths:  # FLOPs above are for the longest length; report the mean padded length instead
        out.update({"seq": sum(lengths) / len(lengths), "lengths": lengths})
        del out["model_tflops"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
