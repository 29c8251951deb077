#!/usr/bin/env python3
"""bertcc export-onnx, run by ONNX Runtime (onnxruntime-node; with BERTCC_ORT=python, Python's
onnxruntime, as on the GPU machine), against bertcc.

  check_onnx.py BERTCC VOCAB WORKDIR

For a classifier, a QA model and a token classifier (bert-mini, random heads) and the BertModel
encoder: export (fp32), run the graph in ONNX Runtime on a padded batch of 4 rows of different
lengths, and compare with bertcc's own logits (bertcc serve --precision fp32, Triton protocol) on
every unpadded position: |ort - bertcc| <= 1e-4 * max(1, |bertcc|). The encoder's
last_hidden_state and pooler_output are compared with the PyTorch reference (tests/torch/
torch_bert.py, itself checked against bertcc to ~1e-6). fp16 and bf16 weight exports must be
about half the size and stay close (5e-2) to fp32. The int8 export (--precision int8) against
bertcc serve --precision int8 (1e-3). A GELU-tanh (gelu_new) model is exported too.
ELECTRA (narrower embeddings than the encoder): ElectraModel against PyTorch, ElectraForSequence-
Classification and ElectraForPreTraining against bertcc's dump-step; the joint SQuAD head's beam
search (start_top_log_probs ... cls_logits) against bertcc's (dump-step) and bertcc serve's Triton
outputs.
"""
import http.client
import json
import os
import subprocess
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "torch"))
import st  # noqa: E402
import torch_bert  # noqa: E402

bertcc, vocab, work = sys.argv[1:4]
subprocess.run([sys.executable, os.path.join(here, "..", "serve", "make_models.py"), bertcc, vocab, work], check=True,
               stdout=subprocess.DEVNULL)
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


def export(name, weights="fp32"):
    out = os.path.join(work, f"{name}_{weights}.onnx")
    r = subprocess.run([bertcc, "export-onnx", "--model", os.path.join(work, name), "--out", out, "--weights", weights],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"export-onnx {name} {weights}: {r.stdout.strip() or r.stderr.strip()}")
    return out


def ort(model, feeds):
    if os.environ.get("BERTCC_ORT") == "python":  # the GPU machine: Python's onnxruntime, no node
        import onnxruntime
        sess = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        res = sess.run(None, {x.name: np.array(feeds[x.name], dtype=np.int64) for x in sess.get_inputs()})
        return {x.name: np.asarray(r, dtype=np.float64) for x, r in zip(sess.get_outputs(), res)}
    i, o = os.path.join(work, "in.json"), os.path.join(work, "out.json")
    json.dump(feeds, open(i, "w"))
    subprocess.run(["node", os.path.join(here, "run_ort.js"), model, i, o], check=True)
    return {k: np.array(v["data"], dtype=np.float64).reshape(v["dims"]) for k, v in json.load(open(o)).items()}


rng = np.random.default_rng(11)
lens = [23, 9, 16, 4]
S = max(lens)
ids = np.zeros((4, S), dtype=np.int64)
mask = np.zeros((4, S), dtype=np.int64)
types = np.zeros((4, S), dtype=np.int64)
for r, L in enumerate(lens):
    ids[r, :L] = rng.integers(1000, 29000, L)
    ids[r, 0], ids[r, L - 1] = 101, 102
    mask[r, :L] = 1
    types[r, L // 2:L] = 1
feeds = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "token_type_ids": types.tolist()}

# bertcc's logits through the Triton protocol of bertcc serve (fp32).
srv = subprocess.Popen([bertcc, "serve", "--port", "0", "--precision", "fp32", "--model", os.path.join(work, "sst"),
                        "--model", os.path.join(work, "squad"), "--model", os.path.join(work, "ner")],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = int(srv.stdout.readline().strip().rsplit(":", 1)[1])


def ours(model):
    body = {"inputs": [{"name": n, "shape": [4, S], "datatype": "INT64", "data": np.array(v).ravel().tolist()}
                       for n, v in feeds.items()]}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", f"/v2/models/{model}/infer", body=json.dumps(body))
    j = json.loads(c.getresponse().read())
    return {o["name"]: np.array(o["data"], dtype=np.float64).reshape(o["shape"]) for o in j["outputs"]}


def compare(label, a, b, valid, peer="bertcc"):
    d = np.abs(a - b)[valid] / np.maximum(1.0, np.abs(b)[valid])
    check(d.max() <= 1e-4, f"{label}: ONNX Runtime vs {peer}, max rel. difference {d.max():.2e} over {valid.sum()} values")


valid_tok = mask.astype(bool)
for name, outs in [("sst", ["logits"]), ("squad", ["start_logits", "end_logits"]), ("ner", ["logits"])]:
    path = export(name)
    got, want = ort(path, feeds), ours(name)
    for o in outs:
        check(got[o].shape == want[o].shape, f"{name} {o}: shape {list(got[o].shape)}")
        v = np.ones(want[o].shape, dtype=bool) if name == "sst" else (
            valid_tok if want[o].ndim == 2 else np.repeat(valid_tok[:, :, None], want[o].shape[2], 2))
        compare(f"{name} {o}", got[o], want[o], v)
srv.terminate()
srv.wait()

# int8 (export-onnx --precision int8: the activations quantized per row as bertcc does it, x times
# the inverse scale rounded, MatMulInteger s8 x s8, the attention's two products as MatMulInteger
# with P from bertcc's exp table, the word embeddings' int8 rows) against bertcc serve --precision
# int8. The two rescale the int32 sums in a different order (bertcc: one fma of the sum with the
# product of the scales; the graph: a Mul and an Add), and their LayerNorm and GELU differ in the
# last bits, so one value within that of a rounding tie (an activation's int8 step, or P's table
# step of 1/128 of a logit) lands one step away: the sequence it is in then moves by as much as
# int8's own difference from fp32 on these small random models (seen: one or two of the 4
# sequences of a batch; 0.10 to 0.54 of int8's difference). So: the median difference at float
# rounding (<= 1e-5 relative; seen 3e-7 to 1.4e-6: most sequences keep their bits but the last)
# and the largest at most int8's own difference from fp32. A wrong quantization in the file (a
# table, a scale, a bound) moves every sequence, and the median with them.
# Both activation widths (--int8-activation-bits: 8, and 7 as auto picks on AVX2-only CPUs), each
# exported and served with the same flag.
for bits in ["8", "7"]:
    srv = subprocess.Popen([bertcc, "serve", "--port", "0", "--precision", "int8", "--int8-activation-bits", bits,
                            "--model", os.path.join(work, "sst"), "--model", os.path.join(work, "squad"),
                            "--model", os.path.join(work, "ner")],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(srv.stdout.readline().strip().rsplit(":", 1)[1])
    for name, outs in [("sst", ["logits"]), ("squad", ["start_logits", "end_logits"]), ("ner", ["logits"])]:
        path = os.path.join(work, f"{name}_int8_{bits}.onnx")
        r = subprocess.run([bertcc, "export-onnx", "--model", os.path.join(work, name), "--out", path, "--precision",
                            "int8", "--int8-activation-bits", bits], capture_output=True, text=True)
        check(r.returncode == 0 and f"{bits}-bit activations" in r.stdout,
              f"export-onnx {name} --precision int8 --int8-activation-bits {bits}: "
              f"{r.stdout.strip() or r.stderr.strip()}")
        got, want = ort(path, feeds), ours(name)
        f32 = ort(os.path.join(work, f"{name}_fp32.onnx"), feeds)
        for o in outs:
            v = np.ones(want[o].shape, dtype=bool) if name == "sst" else (
                valid_tok if want[o].ndim == 2 else np.repeat(valid_tok[:, :, None], want[o].shape[2], 2))
            dd = (np.abs(got[o] - want[o]) / np.maximum(1.0, np.abs(want[o])))[v]
            d, med = dd.max(), np.median(dd)
            q = (np.abs(f32[o] - want[o]) / np.maximum(1.0, np.abs(want[o])))[v].max()
            check(got[o].shape == want[o].shape and med <= 1e-5 and d <= q,
                  f"{name} {o} int8, {bits}-bit activations: ONNX Runtime vs bertcc rel. difference median {med:.1e} "
                  f"(<= 1e-5), max {d:.2e} (<= int8 vs fp32's {q:.2e}); "
                  f"{100 * (dd <= 1e-5).mean():.0f} % of values within 1e-5")
    srv.terminate()
    srv.wait()

# 16-bit weights: half the file, close to fp32.
f32 = os.path.join(work, "sst_fp32.onnx")
base_logits = ort(f32, feeds)["logits"]
for w in ["fp16", "bf16"]:
    p = export("sst", w)
    ratio = os.path.getsize(p) / os.path.getsize(f32)
    d = np.abs(ort(p, feeds)["logits"] - base_logits).max()
    check(0.45 < ratio < 0.55 and d < 5e-2, f"sst {w} weights: {ratio:.2f} of the fp32 size, max |difference| {d:.1e}")


# The encoder (BertModel) against the PyTorch reference, for gelu and gelu_new.
def encoder_check(name):
    d = os.path.join(work, name)
    path = export(name)
    got = ort(path, feeds)
    cfg = json.load(open(os.path.join(d, "config.json")))
    P = {k: torch.from_numpy(v.copy()) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
    with torch.no_grad():
        h, pooled = torch_bert.encoder(P, cfg, torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(mask))
    compare(f"{name} last_hidden_state", got["last_hidden_state"], h.double().numpy(),
            np.repeat(valid_tok[:, :, None], h.shape[2], 2), "PyTorch")
    compare(f"{name} pooler_output", got["pooler_output"], pooled.double().numpy(),
            np.ones(pooled.shape, dtype=bool), "PyTorch")


encoder_check("base")
# gelu_new: the same weights with the tanh GELU.
gn = os.path.join(work, "base_gelu_new")
os.makedirs(gn, exist_ok=True)
for f in os.listdir(os.path.join(work, "base")):
    if f != "config.json":
        os.link(os.path.join(work, "base", f), os.path.join(gn, f)) if not os.path.exists(os.path.join(gn, f)) else None
cfg = json.load(open(os.path.join(work, "base", "config.json")))
cfg["hidden_act"] = "gelu_new"
json.dump(cfg, open(os.path.join(gn, "config.json"), "w"))
encoder_check("base_gelu_new")

# hidden_size 1 (one head of 1): ONNX Runtime's LayerNormalization kernel refuses a normalized
# size of 1 ("Size of X.shape[axis:] must be larger than 1"; ONNX itself allows it), so the export
# writes those layer norms from primitives. Over one value x - mean is exactly 0, so every layer
# norm's output is its bias: last_hidden_state is the last bias at every position and the pooler
# tanh(w * bias + b), exactly. (PyTorch's layer_norm is not a reference here: its variance
# rounding, divided by sqrt(1e-12), leaves ~1e-4 of noise.) Random weights: init-model's layer
# norms would make every output 0.
h1 = os.path.join(work, "hidden1")
h1cfg = os.path.join(work, "hidden1.json")
json.dump({"vocab_size": 30522, "hidden_size": 1, "num_hidden_layers": 2, "num_attention_heads": 1,
           "intermediate_size": 3, "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu"},
          open(h1cfg, "w"))
subprocess.run([bertcc, "init-model", "--config", h1cfg, "--vocab", vocab, "--output", h1, "--seed", "4"], check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
hrng = np.random.default_rng(8)
w1 = {k: (hrng.standard_normal(v.shape) * 0.5).astype(np.float32)
      for k, v in st.load(os.path.join(h1, "model.safetensors")).items() if k.startswith("bert.")}
st.save(os.path.join(h1, "model.safetensors"), w1)
c1 = dict(json.load(open(os.path.join(h1, "config.json"))), architectures=["BertModel"])
json.dump(c1, open(os.path.join(h1, "config.json"), "w"))
got = ort(export("hidden1"), feeds)
last = float(w1["bert.encoder.layer.1.output.LayerNorm.bias"][0])
pooled = np.tanh(np.float32(w1["bert.pooler.dense.weight"][0, 0]) * np.float32(last) + w1["bert.pooler.dense.bias"][0])
compare("hidden1 last_hidden_state", got["last_hidden_state"], np.full((4, S, 1), last),
        np.repeat(valid_tok[:, :, None], 1, 2), "its last layer norm's bias")
compare("hidden1 pooler_output", got["pooler_output"], np.full((4, 1), float(pooled)), np.ones((4, 1), dtype=bool),
        "tanh(w * bias + b)")


# ELECTRA (embedding_size 24 < hidden 36: embeddings_project; no pooler): the encoder against the
# PyTorch reference, ElectraClassificationHead and ElectraForPreTraining against bertcc (dump-step,
# fp32, dropout off) on the same padded batch.
import check_electra_step as ce  # noqa: E402
import gradcheck  # noqa: E402

V = 30522
ecfg = {"model_type": "electra", "vocab_size": V, "embedding_size": 24, "hidden_size": 36, "num_hidden_layers": 2,
        "num_attention_heads": 3, "intermediate_size": 47, "hidden_act": "gelu_new", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12}
erng = np.random.default_rng(3)
batch = {"input_ids": ids, "segment_ids": types, "input_mask": mask}
for name, head, arch in [("electra", "none", "ElectraModel"), ("electra_cls", "classify", "ElectraForSequenceClassification"),
                         ("electra_disc", "discriminator", "ElectraForPreTraining")]:
    cfg = dict(ecfg, architectures=[arch])
    if head == "classify":
        cfg["id2label"] = {"0": "a", "1": "b", "2": "c"}
    shapes = {k: v for k, v in ce.shapes(cfg, head).items() if not k.startswith("generator_")}
    params = gradcheck.random_params(shapes, erng)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    st.save(os.path.join(d, "model.safetensors"), params)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    got = ort(export(name), feeds)
    if head == "none":
        P = {k: torch.from_numpy(v.astype(np.float64)) for k, v in params.items()}
        with torch.no_grad():
            h = ce.encode(P, cfg, torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(mask))
        check(set(got) == {"last_hidden_state"}, f"{name}: outputs {sorted(got)} (no pooler_output)")
        compare(f"{name} last_hidden_state", got["last_hidden_state"], h.numpy(),
                np.repeat(valid_tok[:, :, None], h.shape[2], 2), "PyTorch")
        continue
    b = dict(batch, labels=erng.integers(0, 3, 4) if head == "classify" else (erng.random(ids.shape) < 0.2).astype(np.int64))
    st.save(os.path.join(work, f"{name}_batch.safetensors"), {k: np.asarray(v).astype(np.float32) for k, v in b.items()})
    out = os.path.join(work, f"{name}_step.safetensors")
    subprocess.run([bertcc, "dump-step", "--head", head, "--model", d, "--batch", os.path.join(work, f"{name}_batch.safetensors"),
                    "--precision", "fp32", "--out", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    want = st.load(out)["logits"].astype(np.float64).reshape(got["logits"].shape)
    compare(f"{name} logits", got["logits"], want, np.ones(want.shape, bool) if head == "classify" else valid_tok)

# ELECTRA's joint SQuAD head (beam search; start_n_top 3 != end_n_top 2 so that a transposed index
# shows): the graph's start_top_log_probs / start_top_index / end_top_log_probs / end_top_index /
# cls_logits against bertcc's beam search (dump-step's "beam", fp32) and against bertcc serve's
# Triton outputs (JSON and the binary extension), indices exactly, values within 1e-4.
import check_joint_qa as cj  # noqa: E402

K1, K2 = 3, 2
jcfg = dict(ecfg, architectures=["ElectraForQuestionAnsweringJoint"], start_n_top=K1, end_n_top=K2)
jd = os.path.join(work, "electra_joint")
os.makedirs(jd, exist_ok=True)
st.save(os.path.join(jd, "model.safetensors"), gradcheck.random_params(cj.joint_shapes(jcfg), erng))
json.dump(jcfg, open(os.path.join(jd, "config.json"), "w"))
with open(os.path.join(work, "base", "vocab.txt")) as src, open(os.path.join(jd, "vocab.txt"), "w") as dst:
    dst.write(src.read())
got = ort(export("electra_joint"), feeds)
names = ["start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits"]
check(sorted(got) == sorted(names) and got["start_top_index"].shape == (4, K1) and got["end_top_index"].shape == (4, K1 * K2)
      and got["cls_logits"].shape == (4,), f"electra_joint: outputs {[(n, list(got[n].shape)) for n in sorted(got)]}")
jb = dict(batch, start_positions=np.zeros(4, np.int64), end_positions=np.zeros(4, np.int64))
st.save(os.path.join(work, "joint_batch.safetensors"), {k: np.asarray(v).astype(np.float32) for k, v in jb.items()})
out = os.path.join(work, "joint_step.safetensors")
subprocess.run([bertcc, "dump-step", "--head", "qa-joint", "--model", jd, "--batch", os.path.join(work, "joint_batch.safetensors"),
                "--precision", "fp32", "--out", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
beam = st.load(out)["beam"].astype(np.float64)
want = {"start_top_log_probs": beam[:, :K1], "start_top_index": beam[:, K1:2 * K1],
        "end_top_log_probs": beam[:, 2 * K1:2 * K1 + K1 * K2], "end_top_index": beam[:, 2 * K1 + K1 * K2:2 * K1 + 2 * K1 * K2],
        "cls_logits": beam[:, -1]}


def joint_compare(who, got, want):
    for n in names:
        if n.endswith("_index"):
            check(np.array_equal(got[n], want[n]), f"electra_joint {n}: {who} = bertcc's beam search {got[n].astype(int).tolist()}")
        else:
            d = (np.abs(got[n] - want[n]) / np.maximum(1.0, np.abs(want[n]))).max()
            check(d <= 1e-4, f"electra_joint {n}: {who} vs bertcc's beam search, max rel. difference {d:.2e}")


joint_compare("ONNX Runtime", got, want)
srv = subprocess.Popen([bertcc, "serve", "--port", "0", "--precision", "fp32", "--model", jd],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = int(srv.stdout.readline().strip().rsplit(":", 1)[1])
served = ours("electra_joint")
joint_compare("bertcc serve (Triton protocol)", served, want)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
c.request("GET", "/v2/models/electra_joint")
meta = json.loads(c.getresponse().read())
check([(o["name"], o["datatype"], o["shape"]) for o in meta["outputs"]] ==
      [("start_top_log_probs", "FP32", [-1, K1]), ("start_top_index", "INT64", [-1, K1]),
       ("end_top_log_probs", "FP32", [-1, K1 * K2]), ("end_top_index", "INT64", [-1, K1 * K2]), ("cls_logits", "FP32", [-1])],
      f"electra_joint metadata outputs: {[(o['name'], o['datatype'], o['shape']) for o in meta['outputs']]}")
# the binary extension carries the INT64 indices as 8-byte little-endian integers
body = json.dumps({"inputs": [{"name": n, "shape": [4, S], "datatype": "INT64", "data": np.array(v).ravel().tolist()}
                              for n, v in feeds.items()],
                   "outputs": [{"name": "end_top_index", "parameters": {"binary_data": True}}]})
c.request("POST", "/v2/models/electra_joint/infer", body=body)
r = c.getresponse()
raw = r.read()
hl = int(r.getheader("Inference-Header-Content-Length"))
hdr = json.loads(raw[:hl])
bin_idx = np.frombuffer(raw[hl:], dtype="<i8").reshape(4, K1 * K2)
check(hdr["outputs"][0]["datatype"] == "INT64" and hdr["outputs"][0]["parameters"]["binary_data_size"] == 4 * K1 * K2 * 8
      and np.array_equal(bin_idx, want["end_top_index"]), "electra_joint end_top_index as binary INT64")
# a row shorter than the beam is refused by name
short = {"inputs": [{"name": "input_ids", "shape": [1, 2], "datatype": "INT64", "data": [101, 102]}]}
c.request("POST", "/v2/models/electra_joint/infer", body=json.dumps(short))
r = c.getresponse()
msg = json.loads(r.read()).get("error", "")
check(r.status == 400 and "fewer than the joint head's beam" in msg, f"electra_joint 2-token row: {r.status} {msg}")
srv.terminate()
srv.wait()
sys.exit(1 if fails else 0)
