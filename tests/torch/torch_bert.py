"""BERT for pre-training in plain PyTorch, written for bertcc's tests and peer benchmarks.

Parameters are a dict keyed by Hugging Face names (BertForPreTraining). The semantics follow
HF transformers: erf or tanh GELU by `hidden_act`, LayerNorm eps from the config, additive
padding mask (1 - mask) * -10000, padding_idx 0 on the word embeddings, MLM decoder tied to the
word embeddings plus `cls.predictions.bias`, NSP on tanh(pooler(h[:, 0])).
"""
import math

import torch
import torch.nn.functional as F


def layer_shapes(cfg, prefix="bert."):
    """The encoder layers' parameter shapes under `prefix` (bert. or electra.), in table order."""
    C, I = cfg["hidden_size"], cfg["intermediate_size"]
    s = {}
    for l in range(cfg["num_hidden_layers"]):
        p = f"{prefix}encoder.layer.{l}."
        for n in ("query", "key", "value"):
            s[p + f"attention.self.{n}.weight"] = (C, C)
            s[p + f"attention.self.{n}.bias"] = (C,)
        s[p + "attention.output.dense.weight"] = (C, C)
        s[p + "attention.output.dense.bias"] = (C,)
        s[p + "attention.output.LayerNorm.weight"] = (C,)
        s[p + "attention.output.LayerNorm.bias"] = (C,)
        s[p + "intermediate.dense.weight"] = (I, C)
        s[p + "intermediate.dense.bias"] = (I,)
        s[p + "output.dense.weight"] = (C, I)
        s[p + "output.dense.bias"] = (C,)
        s[p + "output.LayerNorm.weight"] = (C,)
        s[p + "output.LayerNorm.bias"] = (C,)
    return s


def param_shapes(cfg, heads=True):
    V, C = cfg["vocab_size"], cfg["hidden_size"]
    s = {
        "bert.embeddings.word_embeddings.weight": (V, C),
        "bert.embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], C),
        "bert.embeddings.token_type_embeddings.weight": (cfg["type_vocab_size"], C),
        "bert.embeddings.LayerNorm.weight": (C,),
        "bert.embeddings.LayerNorm.bias": (C,),
    }
    s.update(layer_shapes(cfg))
    s["bert.pooler.dense.weight"] = (C, C)
    s["bert.pooler.dense.bias"] = (C,)
    if heads:
        s["cls.predictions.transform.dense.weight"] = (C, C)
        s["cls.predictions.transform.dense.bias"] = (C,)
        s["cls.predictions.transform.LayerNorm.weight"] = (C,)
        s["cls.predictions.transform.LayerNorm.bias"] = (C,)
        s["cls.predictions.bias"] = (V,)
        s["cls.seq_relationship.weight"] = (2, C)
        s["cls.seq_relationship.bias"] = (2,)
    return s


def gelu(x, act):
    if act == "gelu":
        return F.gelu(x)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def encoder(P, cfg, input_ids, segment_ids, input_mask, dropout=0.0, training=False):
    B, T = input_ids.shape
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    HS = C // NH
    eps = cfg.get("layer_norm_eps", 1e-12)
    act = cfg.get("hidden_act", "gelu")
    # LayerNorm in fp32 (torch 1.13's CPU autocast leaves layer_norm to the input dtype)
    ln = lambda x, n: F.layer_norm(x.float(), (C,), P[n + ".weight"].float(), P[n + ".bias"].float(), eps).to(
        P[n + ".weight"].dtype)
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P[n + ".bias"])
    drop = lambda x: F.dropout(x, dropout, training)
    pos = torch.arange(T)
    h = (F.embedding(input_ids, P["bert.embeddings.word_embeddings.weight"], padding_idx=0)
         + P["bert.embeddings.position_embeddings.weight"][pos][None]
         + F.embedding(segment_ids, P["bert.embeddings.token_type_embeddings.weight"]))
    h = drop(ln(h, "bert.embeddings.LayerNorm"))
    mask_add = ((1.0 - input_mask.to(h.dtype)) * -10000.0)[:, None, None, :]
    for l in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{l}."
        q = lin(h, p + "attention.self.query").view(B, T, NH, HS).transpose(1, 2)
        k = lin(h, p + "attention.self.key").view(B, T, NH, HS).transpose(1, 2)
        v = lin(h, p + "attention.self.value").view(B, T, NH, HS).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(HS) + mask_add
        a = F.dropout(torch.softmax(s, dim=-1), cfg.get("attention_probs_dropout_prob", 0.0) if training else 0.0,
                      training)
        ctx = (a @ v).transpose(1, 2).reshape(B, T, C)
        h1 = ln(drop(lin(ctx, p + "attention.output.dense")) + h, p + "attention.output.LayerNorm")
        ff = lin(gelu(lin(h1, p + "intermediate.dense"), act), p + "output.dense")
        h = ln(drop(ff) + h1, p + "output.LayerNorm")
    pooled = torch.tanh(lin(h[:, 0], "bert.pooler.dense")) if "bert.pooler.dense.weight" in P else None
    return h, pooled


def pretrain_loss(P, cfg, input_ids, segment_ids, input_mask, mlm_labels, nsp_labels, dropout=0.0,
                  training=False):
    """mlm_labels: [B,T] with -1 where ignored. Returns (loss, mlm_loss, nsp_loss)."""
    C = cfg["hidden_size"]
    eps = cfg.get("layer_norm_eps", 1e-12)
    act = cfg.get("hidden_act", "gelu")
    h, pooled = encoder(P, cfg, input_ids, segment_ids, input_mask, dropout, training)
    sel = mlm_labels.reshape(-1) != -1
    hm = h.reshape(-1, C)[sel]
    t = gelu(F.linear(hm, P["cls.predictions.transform.dense.weight"], P["cls.predictions.transform.dense.bias"]),
             act)
    t = F.layer_norm(t.float(), (C,), P["cls.predictions.transform.LayerNorm.weight"].float(),
                     P["cls.predictions.transform.LayerNorm.bias"].float(), eps).to(
                         P["cls.predictions.transform.LayerNorm.weight"].dtype)
    logits = F.linear(t, P["bert.embeddings.word_embeddings.weight"], P["cls.predictions.bias"])
    mlm = F.cross_entropy(logits.float(), mlm_labels.reshape(-1)[sel])
    nsp_logits = F.linear(pooled, P["cls.seq_relationship.weight"], P["cls.seq_relationship.bias"])
    nsp = F.cross_entropy(nsp_logits.float(), nsp_labels)
    return mlm + nsp, mlm, nsp


def nvidia_labels(positions, ids, T):
    """NVIDIA's loader: positions end at the first 0 entry; labels -1 elsewhere."""
    B, Pn = positions.shape
    labels = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        for k in range(Pn):
            if positions[b, k] == 0:
                break
            labels[b, positions[b, k]] = int(ids[b, k])
    return labels


def head_shapes(cfg, head, num_labels):
    """HF parameter shapes of BertForQuestionAnswering / SequenceClassification / TokenClassification."""
    s = param_shapes(cfg, heads=False)
    C = cfg["hidden_size"]
    if head in ("qa", "token"):  # add_pooling_layer=False
        del s["bert.pooler.dense.weight"], s["bert.pooler.dense.bias"]
    if head == "qa":
        s["qa_outputs.weight"] = (2, C)
        s["qa_outputs.bias"] = (2,)
    else:
        s["classifier.weight"] = (num_labels, C)
        s["classifier.bias"] = (num_labels,)
    return s


def finetune_loss(P, cfg, head, input_ids, segment_ids, input_mask, labels=None, targets=None, start=None, end=None,
                  dropout=0.0, training=False):
    """HF's losses: QA mean of start/end CE (positions clamped to T = ignored); sequence CE or MSE
    (num_labels 1); token CE over labels != -100. Returns (loss, logits)."""
    h, pooled = encoder(P, cfg, input_ids, segment_ids, input_mask, dropout, training)
    T = input_ids.shape[1]
    if head == "qa":
        logits = F.linear(h, P["qa_outputs.weight"], P["qa_outputs.bias"])
        s_log, e_log = logits[..., 0], logits[..., 1]
        sp, ep = start.clamp(0, T), end.clamp(0, T)
        loss = (F.cross_entropy(s_log, sp, ignore_index=T) + F.cross_entropy(e_log, ep, ignore_index=T)) / 2
        return loss, logits
    if head == "classify":
        logits = F.linear(pooled, P["classifier.weight"], P["classifier.bias"])
        if logits.shape[-1] == 1:
            return F.mse_loss(logits.squeeze(-1), targets), logits
        return F.cross_entropy(logits, labels), logits
    logits = F.linear(h, P["classifier.weight"], P["classifier.bias"])
    K = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, K), labels.reshape(-1), ignore_index=-100), logits
