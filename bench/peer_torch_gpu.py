#!/usr/bin/env python3
"""The GPU peer of `bertcc bench --device cuda`: Hugging Face transformers on the same GPU, same
shapes, random data, as the issue's baseline was measured: attn_implementation="sdpa", bf16
autocast (or fp32), fused AdamW for training (LAMB is not in PyTorch), eager or torch.compile.
  train: BertForPreTraining forward + backward + optimizer step, MLM labels on `--max-pred`
         positions per sequence and NSP labels (as bertcc's bench);
  squad: BertForQuestionAnswering fine-tuning step (dropout on): forward + backward with start and end
         positions (bertcc's bench squad spans) + fused AdamW;
  infer: BertModel forward under torch.inference_mode.
Prints one JSON line: seq_per_s, step_ms, model_tflops (GEMM FLOPs as bertcc counts them),
peak_gpu_mem_mb (max_memory_allocated: tensors only, as bertcc's figure counts its own buffers),
gpu_mem_used_mb (the device's memory in use at the end, context included: cudaMemGetInfo), gpu, torch and transformers versions. For the GPU machine (torch 2.x +
transformers); bench/gpu.sh runs it next to bertcc in one command.
  peer_torch_gpu.py train|squad|infer --config bert-base --batch 64 --seq 128 --precision bf16 [--compile]
                    [--padding F]"""
import argparse
import json
import time

import torch

PRESETS = {  # hidden, layers, heads, intermediate (bertcc's presets)
    "bert-tiny": (128, 2, 2, 512), "bert-mini": (256, 4, 4, 1024), "bert-small": (512, 4, 8, 2048),
    "bert-medium": (512, 8, 8, 2048), "bert-base": (768, 12, 12, 3072), "bert-large": (1024, 24, 16, 4096)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "squad", "infer"])
    ap.add_argument("--config", default="bert-base")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-pred", type=int, default=-1)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--padding", type=float, default=0.0,
                    help="fraction of every other sequence that is padding (attention_mask 0), as bertcc bench --padding")
    a = ap.parse_args()
    import transformers
    from transformers import BertConfig, BertForPreTraining, BertForQuestionAnswering, BertModel

    C, L, NH, I = PRESETS[a.config]
    V = 30522
    cfg = BertConfig(vocab_size=V, hidden_size=C, num_hidden_layers=L, num_attention_heads=NH, intermediate_size=I,
                     max_position_embeddings=max(512, a.seq), attn_implementation="sdpa")
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as bertcc without --allow-tf32
    torch.backends.cudnn.allow_tf32 = False
    B, T = a.batch, a.seq
    P = a.max_pred if a.max_pred > 0 else max(1, (T * 20 + 64) // 128)
    g = torch.Generator(device="cpu").manual_seed(2)
    ids = torch.randint(5, V, (B, T), generator=g).to(dev)
    seg = torch.zeros(B, T, dtype=torch.long, device=dev)
    seg[:, T // 2:] = 1
    mask = torch.ones(B, T, dtype=torch.long, device=dev)
    # bertcc bench's real lengths: odd sequences end in floor(padding T) padding tokens (at least 2 real)
    lens = [T if b % 2 == 0 or a.padding <= 0 else max(2, T - int(a.padding * T)) for b in range(B)]
    for b in range(B):
        mask[b, lens[b]:] = 0
        ids[b, lens[b]:] = 0
        seg[b, lens[b]:] = 0
    train, squad = a.mode == "train", a.mode == "squad"
    model = (BertForPreTraining(cfg) if train else BertForQuestionAnswering(cfg) if squad else BertModel(cfg)).to(dev)
    if squad:  # bertcc's bench squad spans: start (37 r) mod T, end start + 3 (at most T - 1)
        starts = torch.tensor([(r * 37) % lens[r] for r in range(B)], device=dev)
        ends = torch.minimum(starts + 3, torch.tensor(lens, device=dev) - 1)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=True)
        model.train()
    elif train:
        labels = torch.full((B, T), -100, dtype=torch.long)
        for b in range(B):
            pos = torch.randperm(lens[b] - 1, generator=g)[:P] + 1
            labels[b, pos] = torch.randint(5, V, (len(pos),), generator=g)
        labels = labels.to(dev)
        nsp = torch.randint(0, 2, (B,), generator=g).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        model.train()
    else:
        model.eval()
    fwd = torch.compile(model) if a.compile else model
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    amp = torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None)
    # fp16 trains as NVIDIA's recipe and AMP do: a dynamic loss scale, unscaled before the step
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")

    # the labels of the training step: pre-training's masked tokens and NSP, or SQuAD's spans
    targets = (dict(labels=labels, next_sentence_label=nsp) if train
               else dict(start_positions=starts, end_positions=ends) if squad else {})

    def step():
        if train or squad:
            opt.zero_grad(set_to_none=True)
            with amp:
                out = fwd(input_ids=ids, token_type_ids=seg, attention_mask=mask, **targets)
            scaler.scale(out.loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            with torch.inference_mode(), amp:
                fwd(input_ids=ids, token_type_ids=seg, attention_mask=mask)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    N = B * T
    per_layer = 2 * N * C * 3 * C + 2 * 2 * B * T * T * C + 2 * N * C * C + 2 * 2 * N * C * I
    f = per_layer * L + 2.0 * B * C * C
    if train:
        f = 3 * (f + 2.0 * B * P * C * C + 2.0 * B * P * C * V + 2.0 * B * C * 2)
    elif squad:  # as bertcc counts it: three times the encoder's forward
        f = 3 * f
    print(json.dumps({"peer": "transformers" + (" + torch.compile" if a.compile else " eager"), "mode": a.mode,
                      "config": a.config, "precision": a.precision, "batch": B, "seq": T, "padding": a.padding,
                      "steps": a.steps,
                      "step_ms": mean * 1e3, "seq_per_s": B / mean, "model_tflops": f / mean / 1e12,
                      "peak_gpu_mem_mb": torch.cuda.max_memory_allocated() / 2**20,
                      "gpu_mem_used_mb": (lambda fb: (fb[1] - fb[0]) / 2**20)(torch.cuda.mem_get_info()),
                      "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
