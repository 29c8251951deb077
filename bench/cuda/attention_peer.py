#!/usr/bin/env python3
"""PyTorch's peer for bench/cuda/attention_bench.cpp: torch.nn.functional.scaled_dot_product_attention
(whichever backend PyTorch picks for an additive mask and dropout; the one it picked is printed) on the
same shapes and inputs' layout, forward and backward, one JSON line per (shape, precision).
--infer: also the inference forward (bf16, no dropout, no grad) as bertcc_cuda_attention_bench --cudnn
times it, by whichever backend PyTorch picks (torch-sdpa-infer) and by its cuDNN backend
(torch-cudnn-infer, where this PyTorch has it and takes the mask).
   attention_peer.py [--shapes B,T,NH,HS;...] [--iters N] [--dropout P] [--precisions fp32,bf16,fp16] [--infer]"""
import argparse
import json
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIPPED: no torch")
    sys.exit(77)


def mean_ms(iters, f):
    """One call's mean time over `iters` calls queued back to back between two events: the same
    method as bertcc_cuda_attention_bench."""
    f()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        f()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16,512,16,64;64,128,16,64;128,128,12,64;8,512,8,128")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--infer", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device for torch")
        sys.exit(77)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", file=sys.stderr)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for shape in a.shapes.split(";"):
        B, T, NH, HS = (int(x) for x in shape.split(","))
        g = torch.Generator(device="cuda").manual_seed(1)
        for pn in [p for p in a.precisions.split(",") if p]:  # none: --infer alone
            d = dt[pn]
            # as BERT: q, k, v [B, NH, T, HS] views of one [B, T, 3C] projection
            qkv = (torch.rand(B, T, 3, NH, HS, device="cuda", generator=g) * 2 - 1).to(d).requires_grad_()
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
            mask = torch.zeros(B, 1, 1, T, device="cuda", dtype=d)
            for b in range(1, B, 2):
                mask[b, ..., T - T // 8:] = -10000.0
            dout = torch.rand(B, NH, T, HS, device="cuda", dtype=d, generator=g) * 2 - 1

            def fwd():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=a.dropout)

            with torch.no_grad():
                f = mean_ms(a.iters, fwd)
            out = fwd()

            def bwd():
                torch.autograd.grad(out, qkv, dout, retain_graph=True)

            bw = mean_ms(a.iters, bwd)
            flop = 4.0 * B * NH * T * T * HS
            print(json.dumps({"impl": "torch-sdpa", "precision": pn, "B": B, "T": T, "NH": NH, "HS": HS,
                              "dropout": a.dropout, "fwd_ms": round(f, 4), "bwd_ms": round(bw, 4),
                              "fwd_tflops": round(flop / f * 1e-9, 2), "bwd_tflops": round(2.5 * flop / bw * 1e-9, 2)}),
                  flush=True)
            del qkv, q, k, v, out
        if a.infer:
            infer(B, T, NH, HS, a.iters, g)


def infer(B, T, NH, HS, iters, g):
    """The inference forward in bf16 without dropout, padded keys masked as in training."""
    qkv = (torch.rand(B, T, 3, NH, HS, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    mask = torch.zeros(B, 1, 1, T, device="cuda", dtype=torch.bfloat16)
    for b in range(1, B, 2):
        mask[b, ..., T - T // 8:] = -10000.0
    flop = 4.0 * B * NH * T * T * HS
    forms = [("torch-sdpa-infer", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        forms.append(("torch-cudnn-infer", SDPBackend.CUDNN_ATTENTION))
    except (ImportError, AttributeError) as e:
        print(f"torch-cudnn-infer: not in this PyTorch ({e})", file=sys.stderr)
    for name, backend in forms:
        def fwd():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        try:
            with torch.no_grad():
                if backend is None:
                    f = mean_ms(iters, fwd)
                else:
                    with sdpa_kernel(backend):
                        f = mean_ms(iters, fwd)
        except RuntimeError as e:
            print(f"{name} B{B} T{T} NH{NH} HS{HS}: {str(e).splitlines()[0]}", file=sys.stderr)
            continue
        print(json.dumps({"impl": name, "precision": "bf16", "B": B, "T": T, "NH": NH, "HS": HS, "dropout": 0.0,
                          "fwd_ms": round(f, 4), "fwd_tflops": round(flop / f * 1e-9, 2)}), flush=True)


if __name__ == "__main__":
    main()
