#!/usr/bin/python3
"""The joint SQuAD head (XLNet's PoolerStartLogits / PoolerEndLogits / PoolerAnswerClass, as NVIDIA's
TFElectraForQuestionAnswering with joint_head) against a PyTorch implementation written here in
float64, on an ELECTRA encoder with embedding_size < hidden_size.

A padded batch of [CLS] question [SEP] context [SEP] rows; NVIDIA's p_mask (question, [SEP]s and
padding masked; [CLS] and the context open); two rows answerable (start, end in the context), two
not (start = end = 0: answer class 1). `bertcc dump-step --head qa-joint` writes the loss
(CE(start) + CE(end | true start)) / 2 + 0.5 BCE(answer class), the start/end/class logits, every
gradient, and the beam search of a forward pass without positions (start_n_top 3, end_n_top 2,
different so that a transposed index shows). Compared: loss, logits at the open positions, every
gradient (max |ours - ref| <= tol * max |ref|: fp32 1e-4, bf16 3e-2), and the beams: fp32 the same
start and end positions with log-probabilities within 1e-4; bf16 each log-probability within 3e-2
of the reference's at the positions bertcc chose, and the answer-class logit within 3e-2."""
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_electra_step as ce  # noqa: E402
import gradcheck  # noqa: E402
import st  # noqa: E402

K1, K2 = 3, 2


def joint_shapes(cfg):
    s = ce.shapes(cfg, "none")
    for n in [k for k in s if k.startswith("generator_")]:
        del s[n]
    C = cfg["hidden_size"]
    s.update({"start_logits.dense.weight": (1, C), "start_logits.dense.bias": (1,),
              "end_logits.dense_0.weight": (C, 2 * C), "end_logits.dense_0.bias": (C,),
              "end_logits.LayerNorm.weight": (C,), "end_logits.LayerNorm.bias": (C,),
              "end_logits.dense_1.weight": (1, C), "end_logits.dense_1.bias": (1,),
              "answer_class.dense_0.weight": (C, 2 * C), "answer_class.dense_0.bias": (C,),
              "answer_class.dense_1.weight": (1, C)})
    return s


def p_mask(seg, mask):
    B, T = seg.shape
    p = np.ones((B, T))
    for b in range(B):
        last = int(np.flatnonzero(mask[b])[-1])
        for t in range(T):
            if t == 0 or (seg[b, t] == 1 and mask[b, t] == 1 and t != last):
                p[b, t] = 0
    return p


def head(P, cfg, h, pm):
    eps = cfg["layer_norm_eps"]
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P.get(n + ".bias"))
    s = lin(h, "start_logits.dense").squeeze(-1) * (1 - pm) - 1e30 * pm

    def end(hs):  # hs [B, C] -> end logits [B, T] given those start states
        x = torch.cat([h, hs[:, None, :].expand_as(h)], -1)
        y = F.layer_norm(torch.tanh(lin(x, "end_logits.dense_0")), (h.shape[-1],), P["end_logits.LayerNorm.weight"],
                         P["end_logits.LayerNorm.bias"], eps)
        return lin(y, "end_logits.dense_1").squeeze(-1) * (1 - pm) - 1e30 * pm

    def cls(hs):
        return F.linear(torch.tanh(lin(torch.cat([hs, h[:, 0]], -1), "answer_class.dense_0")),
                        P["answer_class.dense_1.weight"]).squeeze(-1)
    return s, end, cls


def main():
    args = gradcheck.step_args()
    rng = np.random.default_rng(5)
    cfg = {"model_type": "electra", "architectures": ["ElectraForQuestionAnsweringJoint"], "vocab_size": 89,
           "embedding_size": 24, "hidden_size": 36, "num_hidden_layers": 2, "num_attention_heads": 3,
           "intermediate_size": 47, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 40, "type_vocab_size": 2,
           "initializer_range": 0.02, "layer_norm_eps": 1e-12, "start_n_top": K1, "end_n_top": K2}
    params = gradcheck.random_params(joint_shapes(cfg), rng)
    wd = args.workdir
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(os.path.join(wd, "model"))
    st.save(os.path.join(wd, "model", "model.safetensors"), params)
    json.dump(cfg, open(os.path.join(wd, "model", "config.json"), "w"))
    B, T = 4, 18
    lengths, qlen = [18, 13, 11, 16], [5, 4, 6, 3]  # qlen: [CLS] + question + [SEP]
    ids = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.int64)
    seg = np.zeros((B, T), np.int64)
    for b, L in enumerate(lengths):
        ids[b, :L] = rng.integers(5, cfg["vocab_size"], L)
        ids[b, 0], ids[b, qlen[b] - 1], ids[b, L - 1] = 2, 3, 3
        mask[b, :L] = 1
        seg[b, qlen[b]:L] = 1
    sp = np.array([qlen[0] + 2, 0, qlen[2] + 1, 0])
    ep = np.array([qlen[0] + 5, 0, qlen[2] + 1, 0])
    batch = {"input_ids": ids, "segment_ids": seg, "input_mask": mask, "start_positions": sp, "end_positions": ep}
    st.save(os.path.join(wd, "batch.safetensors"), {k: v.astype(np.float32) for k, v in batch.items()})
    out = os.path.join(wd, "step.safetensors")
    if gradcheck.dump_step(args.bertcc, ["--head", "qa-joint", "--model", os.path.join(wd, "model"), "--batch",
                                         os.path.join(wd, "batch.safetensors"), "--precision", args.precision, "--device", args.device], out):
        return 1
    ours = st.load(out)

    P = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in params.items()}
    pm = torch.tensor(p_mask(seg, mask))
    h = ce.encode(P, cfg, torch.tensor(ids), torch.tensor(seg), torch.tensor(mask))
    s, end, cls = head(P, cfg, h, pm)
    spt, ept = torch.tensor(sp), torch.tensor(ep)
    hs = h[torch.arange(B), spt]
    e, c = end(hs), cls(hs)
    imp = torch.tensor(((sp == 0) & (ep == 0)).astype(np.float64))
    loss = (F.cross_entropy(s, spt) + F.cross_entropy(e, ept)) / 2 + 0.5 * F.binary_cross_entropy_with_logits(c, imp)
    loss.backward()
    tol = 1e-4 if args.precision == "fp32" else 3e-2
    fails = []
    rel = abs(float(ours["loss"][0]) - loss.item()) / abs(loss.item())
    print(f"  loss ours {float(ours['loss'][0]):.7f} torch {loss.item():.7f} rel {rel:.2e}")
    if rel > tol:
        fails.append("loss")
    open_ = pm.numpy() == 0
    for key, ref in (("start_logits", s), ("end_logits", e), ("cls_logits", c)):
        ref = ref.detach().numpy()
        got = ours[key].astype(np.float64)
        sel = open_ if key != "cls_logits" else np.ones(B, bool)
        err = np.abs(got[sel] - ref[sel]).max() / np.abs(ref[sel]).max()
        if key != "cls_logits" and not np.all(got[~open_] <= -1e29):
            fails.append(f"{key}: masked positions are not -1e30")
        print(f"  {key}: rel err {err:.2e}")
        if err > tol:
            fails.append(f"{key} (rel err {err:.2e})")
    gf, worst = gradcheck.compare_gradients(ours, P, tol, zero_rel=1e-6)
    fails += gf
    print(f"  {len(P)} gradients, worst rel err {worst:.2e} (tol {tol:g})")

    # ---- beam search ----
    with torch.no_grad():
        beam = ours["beam"].astype(np.float64)
        assert beam.shape == (B, 2 * K1 + 2 * K1 * K2 + 1), beam.shape
        slp = torch.log_softmax(s, -1)
        worst_b = 0.0
        for b in range(B):
            o = beam[b]
            r_top = torch.topk(slp[b], K1).indices.numpy()
            got_st = o[K1:2 * K1].astype(np.int64)
            if args.precision == "fp32" and not np.array_equal(got_st, r_top):
                fails.append(f"row {b}: start beam {got_st} vs reference {r_top}")
            for i in range(K1):
                err = abs(o[i] - slp[b, got_st[i]].item())
                hs_i = h[b:b + 1, got_st[i]].expand(B, -1)
                elp = torch.log_softmax(end(hs_i)[b], -1)
                got_en = o[2 * K1 + K1 * K2 + i * K2:2 * K1 + K1 * K2 + (i + 1) * K2].astype(np.int64)
                r_en = torch.topk(elp, K2).indices.numpy()
                if args.precision == "fp32" and not np.array_equal(got_en, r_en):
                    fails.append(f"row {b} start {got_st[i]}: end beam {got_en} vs reference {r_en}")
                for j in range(K2):
                    err = max(err, abs(o[2 * K1 + i * K2 + j] - elp[got_en[j]].item()))
                worst_b = max(worst_b, err)
            p = torch.softmax(s[b], -1)
            cref = cls((p[:, None] * h[b]).sum(0, keepdim=True).expand(B, -1))[b].item()
            worst_b = max(worst_b, abs(o[-1] - cref) / max(1.0, abs(cref)))
        print(f"  beams: {B} rows x {K1} starts x {K2} ends, worst log-prob / class error {worst_b:.2e}")
        if worst_b > (1e-4 if args.precision == "fp32" else 3e-2):
            fails.append(f"beam values (worst error {worst_b:.2e})")
    if fails:
        print("FAIL " + "; ".join(fails))
        return 1
    print(f"joint QA head ({args.precision}): loss, logits, gradients and beams agree with PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
