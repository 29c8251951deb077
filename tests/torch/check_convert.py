#!/usr/bin/env python3
"""bertcc convert --from pt against files written by torch.save (this machine's torch).

  check_convert.py BERTCC WORKDIR VOCAB

1. an HF BertForPreTraining state dict (tied decoder weight and bias sharing storage, the int64
   position_ids buffer, one non-contiguous tensor), saved as save_pretrained(safe_serialization=
   False) does: torch.save(state_dict, 'pytorch_model.bin');
2. the same weights in fp16;
3. an NVIDIA DeepLearningExamples checkpoint: {'model': state dict with 'module.' names, dense_act,
   the vocabulary padded to a multiple of 8}, 'optimizer': a torch optimizer state dict, 'files',
   'epoch', 'data_loader': None};
4. a BertForSequenceClassification directory holding only pytorch_model.bin: `bertcc classify`
   reads it directly and prints what it prints for the converted directory;
5. hostile pickles: GLOBAL os.system (and posix.system as pickle writes it), a disallowed opcode,
   a truncated archive: refused with a message, nothing written, nothing run.
Every converted tensor must equal the original bit for bit (fp16 ones after the exact widening).
"""
import collections
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import st  # noqa: E402

bertcc, work, vocab = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def run(args, expect_ok=True):
    r = subprocess.run([bertcc] + args, capture_output=True, text=True)
    if (r.returncode == 0) != expect_ok:
        print(r.stdout, r.stderr)
    return r


# A reference model from bertcc itself (HF names), then turned into torch tensors.
ref = os.path.join(work, "ref")
run(["init-model", "--config", "bert-tiny", "--vocab", vocab, "--output", ref, "--seed", "7"])
w = st.load(os.path.join(ref, "model.safetensors"))
cfg = json.load(open(os.path.join(ref, "config.json")))
V = cfg["vocab_size"]


def hf_state_dict(dtype=torch.float32):
    sd = collections.OrderedDict()
    for k, a in w.items():
        sd[k] = torch.from_numpy(a.copy()).to(dtype)
    # HF ties the decoder to the word embeddings and its bias to cls.predictions.bias (same storage).
    sd["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"]
    sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"]
    sd["bert.embeddings.position_ids"] = torch.arange(cfg["max_position_embeddings"]).unsqueeze(0)
    # A non-contiguous tensor (a transposed view), as state dicts can hold.
    q = "bert.encoder.layer.0.attention.self.query.weight"
    sd[q] = sd[q].t().contiguous().t()
    assert not sd[q].is_contiguous()
    return sd


def same(out_dir, expect, label, rows=None):
    got = st.load(os.path.join(out_dir, "model.safetensors"))
    bad = [k for k in expect if not np.array_equal(got[k].view(np.uint32), expect[k].view(np.uint32))]
    missing = [k for k in expect if k not in got]
    check(not bad and not missing and len(got) == len(expect),
          f"{label}: {len(expect)} tensors equal bit for bit" + (f" (differ: {bad[:3]}, missing {missing[:3]})" if bad or missing else ""))


def setup_dir(name, obj, config=True, vocab_file=True):
    d = os.path.join(work, name)
    os.makedirs(d)
    torch.save(obj, os.path.join(d, "pytorch_model.bin"))
    if config:
        shutil.copy(os.path.join(ref, "config.json"), d)
    if vocab_file:
        shutil.copy(vocab, os.path.join(d, "vocab.txt"))
    return d


# 1. HF pytorch_model.bin (fp32)
d = setup_dir("hf", hf_state_dict())
out = os.path.join(work, "hf_out")
r = run(["convert", "--from", "pt", os.path.join(d, "pytorch_model.bin"), "--out", out])
check(r.returncode == 0, "HF pytorch_model.bin converts: " + r.stdout.strip())
same(out, w, "HF fp32")
check(all(os.path.exists(os.path.join(out, f)) for f in ["config.json", "vocab.txt", "tokenizer_config.json"]),
      "converted directory has config.json, vocab.txt, tokenizer files")

# 2. fp16 weights: widened exactly
d = setup_dir("hf16", hf_state_dict(torch.float16))
out = os.path.join(work, "hf16_out")
r = run(["convert", "--from", "pt", os.path.join(d, "pytorch_model.bin"), "--out", out])
check(r.returncode == 0, "fp16 pytorch_model.bin converts")
same(out, {k: a.astype(np.float16).astype(np.float32) for k, a in w.items()}, "HF fp16 (widened)")

# 3. NVIDIA DeepLearningExamples checkpoint
pad = (V + 7) // 8 * 8 + (8 if V % 8 == 0 else 0)  # strictly padded, as NVIDIA's 30522 -> 30528
nv = collections.OrderedDict()
for k, a in w.items():
    t = torch.from_numpy(a.copy())
    if k in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):
        extra = torch.randn((pad - V,) + tuple(t.shape[1:]))
        t = torch.cat([t, extra])
    k = k.replace("intermediate.dense.", "intermediate.dense_act.").replace("pooler.dense.", "pooler.dense_act.")
    k = k.replace("transform.dense.", "transform.dense_act.")
    nv["module." + k] = t
nv["module.cls.predictions.decoder.weight"] = nv["module.bert.embeddings.word_embeddings.weight"]
opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-4, betas=(0.9, 0.999))
opt.state[opt.param_groups[0]["params"][0]] = {"step": 3, "exp_avg": torch.ones(3), "exp_avg_sq": torch.ones(3)}
ckpt = {"model": nv, "optimizer": opt.state_dict(), "master params": [torch.zeros(2)], "files": [0, "a.hdf5"],
        "epoch": 2, "data_loader": None}
d = os.path.join(work, "nvidia")
os.makedirs(d)
torch.save(ckpt, os.path.join(d, "ckpt_100.pt"))
bert_config = {k: cfg[k] for k in ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                   "intermediate_size", "hidden_act", "hidden_dropout_prob",
                                   "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                                   "initializer_range"]}
json.dump(bert_config, open(os.path.join(d, "bert_config.json"), "w"))
out = os.path.join(work, "nvidia_out")
r = run(["convert", "--from", "pt", os.path.join(d, "ckpt_100.pt"), "--out", out, "--vocab", vocab])
check(r.returncode == 0 and "from 'model'" in r.stdout, "NVIDIA {'model': ...} checkpoint converts: " + r.stdout.strip())
check("trimmed" in r.stderr, "NVIDIA's padded vocabulary trimmed (noted)")
same(out, w, "NVIDIA (module., dense_act, padded vocabulary)")

# 4. A directory holding only pytorch_model.bin loads directly (classification model).
cls = collections.OrderedDict((k, torch.from_numpy(a.copy())) for k, a in w.items() if not k.startswith("cls."))
cls["classifier.weight"] = torch.randn(3, cfg["hidden_size"]) * 0.5
cls["classifier.bias"] = torch.tensor([0.1, -0.2, 0.3])
cls_cfg = dict(cfg, architectures=["BertForSequenceClassification"],
               id2label={"0": "neg", "1": "neu", "2": "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2})
d = setup_dir("cls_pt", cls, config=False)
json.dump(cls_cfg, open(os.path.join(d, "config.json"), "w"))
out = os.path.join(work, "cls_out")
r = run(["convert", "--from", "pt", os.path.join(d, "pytorch_model.bin"), "--out", out])
check(r.returncode == 0 and "BertForSequenceClassification" in r.stdout, "classifier checkpoint converts: " + r.stdout.strip())
texts = ["the cat sat on the mat", "a completely different sentence, with punctuation!"]
direct = run(["classify", "--model", d, "--precision", "fp32", "--text", texts[0], "--text-pair", texts[1]])
conv = run(["classify", "--model", out, "--precision", "fp32", "--text", texts[0], "--text-pair", texts[1]])
check(direct.returncode == 0 and direct.stdout == conv.stdout and direct.stdout.strip(),
      "classify reads a pytorch_model.bin-only directory: " + direct.stdout.strip())

# 5. Hostile and broken files: refused, nothing written, nothing run.
marker = os.path.join(work, "PWNED")


def zip_with_pickle(path, pkl):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/version", "3\n")


evil = [
    ("os.system", b"cos\nsystem\n(S'touch " + marker.encode() + b"'\ntR."),
    ("posix.system", b"\x80\x02cposix\nsystem\nq\x00X\x05\x00\x00\x00touchq\x01\x85q\x02Rq\x03."),
    ("builtins.eval", b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01cbuiltins\neval\nq\x02X\x04\x00\x00\x001+1\x85Rs."),
]
for name, pkl in evil:
    f = os.path.join(work, "evil_" + name.replace(".", "_") + ".pt")
    zip_with_pickle(f, pkl)
    o = os.path.join(work, "evil_out")
    r = run(["convert", "--from", "pt", f, "--out", o, "--config", os.path.join(ref, "config.json")], expect_ok=False)
    check(r.returncode != 0 and f"'{name}'" in r.stderr and "refused" in r.stderr and not os.path.exists(o)
          and not os.path.exists(marker), f"GLOBAL {name} refused: " + r.stderr.strip()[:160])
# A real pickle via torch.save of an object with __reduce__ (what an attacker would ship).


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + marker,))


f = os.path.join(work, "evil_reduce.pt")
torch.save({"bert.embeddings.word_embeddings.weight": Evil()}, f)
r = run(["convert", "--from", "pt", f, "--out", os.path.join(work, "evil_out"), "--config",
         os.path.join(ref, "config.json")], expect_ok=False)
check(r.returncode != 0 and "refused" in r.stderr and not os.path.exists(marker),
      "torch.save of an object whose __reduce__ is os.system refused: " + r.stderr.strip()[:160])
# INST ('i') builds an object by name: not an allowed opcode.
f = os.path.join(work, "evil_inst.pt")
zip_with_pickle(f, b"(X\x01\x00\x00\x00xios\nsystem\n.")
r = run(["convert", "--from", "pt", f, "--out", os.path.join(work, "evil_out"), "--config",
         os.path.join(ref, "config.json")], expect_ok=False)
check(r.returncode != 0 and "opcode 0x69" in r.stderr and "not allowed" in r.stderr, "INST opcode refused: " + r.stderr.strip()[:160])
# Truncated archive.
good = open(os.path.join(work, "hf", "pytorch_model.bin"), "rb").read()
f = os.path.join(work, "truncated.bin")
open(f, "wb").write(good[: len(good) // 2])
r = run(["convert", "--from", "pt", f, "--out", os.path.join(work, "trunc_out"), "--config",
         os.path.join(ref, "config.json")], expect_ok=False)
check(r.returncode != 0 and "truncated.bin" in r.stderr and not os.path.exists(os.path.join(work, "trunc_out")),
      "truncated checkpoint: " + r.stderr.strip()[:160])
# A compressed archive (not what torch.save writes).
f = os.path.join(work, "deflated.bin")
with zipfile.ZipFile(os.path.join(work, "hf", "pytorch_model.bin")) as zin, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        zout.writestr(item.filename, zin.read(item.filename))
r = run(["convert", "--from", "pt", f, "--out", os.path.join(work, "defl_out"), "--config",
         os.path.join(ref, "config.json")], expect_ok=False)
check(r.returncode != 0 and "compressed" in r.stderr, "deflated archive: " + r.stderr.strip()[:160])
leftovers = [p for p in os.listdir(work) if ".tmp." in p]
check(not leftovers, f"no temporary directories left ({leftovers})")
sys.exit(1 if fails else 0)
