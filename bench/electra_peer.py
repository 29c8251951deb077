#!/usr/bin/python3
"""PyTorch peer for `bertcc bench electra`: one ELECTRA pre-training step with the same shapes and
step definition. The generator (Google's size for the discriminator: hidden x 1/4, or 1/3 for
hidden 768; one head per 64; same depth) and the discriminator share word, position and token-type
embeddings and the embeddings' LayerNorm; forward with dropout 0.1, Gumbel-max sampling of the
masked positions (no gradient), generator MLM loss + 50 x discriminator loss, backward, LAMB over
both models (peer_torch.lamb_step: apex FusedLAMB semantics, one global gradient norm). The model is
tests/torch/check_electra_step.electra (HF's ElectraForPreTraining / ElectraForMaskedLM forward),
bf16 via torch.autocast on --device (cpu, or cuda on the GPU machine). transformers' ELECTRA classes are not installed on the CPU machines
(Debian's torch only); on the GPU machine they are. Prints one JSON line like `bertcc bench`."""
import argparse
import json
import os
import resource
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))
sys.path.insert(0, HERE)
import check_electra_step as ce  # noqa: E402
import peer_torch  # noqa: E402

SHARED = ["electra.embeddings." + n for n in ("word_embeddings.weight", "position_embeddings.weight",
                                               "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias")]
PRESETS = {"electra-small": (12, 128, 256, 4, 1024), "electra-base": (12, 768, 768, 12, 3072),
           "electra-large": (24, 1024, 1024, 16, 4096)}


def configs(name):
    L, E, H, NH, I = PRESETS[name]
    d = {"vocab_size": 30522, "embedding_size": E, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": NH,
         "intermediate_size": I, "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 2,
         "layer_norm_eps": 1e-12}
    gh = round(H * (1 / 3 if H == 768 else 0.25))
    g = dict(d, hidden_size=gh, num_attention_heads=max(1, gh // 64), intermediate_size=4 * gh)
    return d, g


def flops(d, g, B, T, M):  # bertcc's electra_forward_flops
    N, E, V = B * T, d["embedding_size"], d["vocab_size"]

    def enc(c):
        C, I = c["hidden_size"], c["intermediate_size"]
        f = c["num_hidden_layers"] * (2 * N * C * 3 * C + 4 * B * T * T * C + 2 * N * C * C + 4 * N * C * I)
        return f + (2 * N * E * C if E != C else 0)
    Cd, Cg = d["hidden_size"], g["hidden_size"]
    return enc(d) + 2 * N * Cd * Cd + 2 * N * Cd + enc(g) + 2 * M * (Cg * E + E * V)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="electra-small", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dcfg, gcfg = configs(args.config)
    B, T, V = args.batch, args.seq, dcfg["vocab_size"]
    P = max(1, (T * 20 + 64) // 128)

    def init(shapes):
        out = {}
        for n, s in shapes.items():
            t = torch.ones(s) if n.endswith("LayerNorm.weight") else torch.randn(s) * 0.02 if len(s) == 2 else torch.zeros(s)
            out[n] = t.to(dev).requires_grad_(True)
        return out
    Pd = init(ce.shapes(dcfg, "discriminator"))
    Pg = init(ce.shapes(gcfg, "generator"))
    for n in SHARED:
        Pg[n] = Pd[n]
    plist = list(Pd.values()) + [p for n, p in Pg.items() if n not in SHARED]
    names = list(Pd) + [n for n in Pg if n not in SHARED]
    wd_flags = [not ("bias" in n or "LayerNorm" in n) for n in names]
    m = [torch.zeros_like(p) for p in plist]
    v = [torch.zeros_like(p) for p in plist]
    ids = torch.randint(1, V, (B, T))
    seg = (torch.arange(T) >= T // 2).long().expand(B, T).contiguous()
    mask = torch.ones(B, T, dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    for b in range(B):
        labels[b, torch.randint(1, T, (P,))] = torch.randint(0, V, (P,))
    ids, seg, mask, labels = ids.to(dev), seg.to(dev), mask.to(dev), labels.to(dev)
    sel = labels != -100
    M = int(sel.sum())
    bf16 = args.precision == "bf16"
    state = {"step": 0}

    def step():
        for p in plist:
            p.grad = None
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            gen_loss, logits = ce.electra(Pg, gcfg, "generator", ids, seg, mask, labels, dropout=0.1)
            with torch.no_grad():  # Gumbel-max sampling
                u = torch.rand(logits.shape, device=dev).clamp_(1e-9, 1.0)
                sample = (logits.float() - torch.log(-torch.log(u))).argmax(-1)
            dids = ids.clone()
            dids[sel] = sample
            orig = torch.where(sel, labels, ids)
            dlab = (dids != orig).long()
            disc_loss, _ = ce.electra(Pd, dcfg, "discriminator", dids, seg, mask, dlab, dropout=0.1)
            loss = gen_loss + 50.0 * disc_loss
        loss.backward()
        state["step"] += 1
        with torch.no_grad():
            peer_torch.lamb_step(plist, [p.grad for p in plist], m, v, state["step"], 1e-4, wd_flags)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    print(json.dumps({"peer": "pytorch " + torch.__version__, "device": args.device, "mode": "electra",
                      "config": args.config,
                      "precision": args.precision, "batch": B, "seq": T, "generator_hidden_size": gcfg["hidden_size"],
                      "threads": torch.get_num_threads(), "steps": args.steps, "step_ms": mean * 1e3,
                      "seq_per_s": B / mean, "model_tflops": 3 * flops(dcfg, gcfg, B, T, M) / mean / 1e12,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
