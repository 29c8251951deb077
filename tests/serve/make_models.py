#!/usr/bin/env python3
"""Small fine-tuned-shaped models for the server tests: a randomly initialised BERT (bertcc
init-model) given each head (classifier, qa_outputs, token classifier) with random weights.

  make_models.py BERTCC VOCAB OUTDIR  ->  OUTDIR/{sst,squad,ner}
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "torch"))
import st  # noqa: E402

bertcc, vocab, out = sys.argv[1:4]
base = os.path.join(out, "base")
shutil.rmtree(out, ignore_errors=True)
subprocess.run([bertcc, "init-model", "--config", os.environ.get("SERVE_TEST_CONFIG", "bert-mini"), "--vocab", vocab, "--output", base, "--seed", "3"],
               check=True, stdout=subprocess.DEVNULL)
w = st.load(os.path.join(base, "model.safetensors"))
cfg = json.load(open(os.path.join(base, "config.json")))
H = cfg["hidden_size"]
rng = np.random.default_rng(5)
specs = {
    "sst": ("BertForSequenceClassification", ["negative", "positive"], "classifier", True),
    "squad": ("BertForQuestionAnswering", None, "qa_outputs", False),
    "ner": ("BertForTokenClassification", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"], "classifier", False),
}
for name, (arch, labels, head, pooler) in specs.items():
    d = os.path.join(out, name)
    os.makedirs(d)
    t = {k: v for k, v in w.items() if k.startswith("bert.") and (pooler or not k.startswith("bert.pooler."))}
    K = 2 if labels is None else len(labels)
    t[head + ".weight"] = (rng.standard_normal((K, H)) * 0.5).astype(np.float32)
    t[head + ".bias"] = (rng.standard_normal(K) * 0.1).astype(np.float32)
    st.save(os.path.join(d, "model.safetensors"), t)
    c = dict(cfg, architectures=[arch])
    if labels:
        c["id2label"] = {str(i): l for i, l in enumerate(labels)}
        c["label2id"] = {l: i for i, l in enumerate(labels)}
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    for f in ["vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"]:
        shutil.copy(os.path.join(base, f), d)
print("models in", out)
