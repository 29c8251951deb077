#!/usr/bin/env python3
"""AutoTokenizer.from_pretrained on model directories bertcc wrote gives bertcc's ids.

  check_autotokenizer.py BERTCC TEXTS WORKDIR VOCAB...

For each vocabulary: `bertcc init-model` writes a directory (vocab.txt, tokenizer_config.json,
special_tokens_map.json, tokenizer.json); transformers' AutoTokenizer loads it both fast
(tokenizer.json) and slow (BertTokenizer from tokenizer_config.json + vocab.txt), and every line of
TEXTS must give the ids `bertcc tokenize` prints. Needs transformers (the GPU machine has it);
exits 77 (skipped) without it.
"""
import os
import subprocess
import sys

try:
    from transformers import AutoTokenizer
except ImportError:
    print("skipped: transformers is not installed here")
    sys.exit(77)

bertcc, texts, work, *vocabs = sys.argv[1:]
os.makedirs(work, exist_ok=True)
# Lines that are not UTF-8 are read as npm tokenizers and bertcc read them: each invalid byte
# sequence becomes U+FFFD.
lines = open(texts, "rb").read().decode("utf-8", errors="replace").split("\n")
if lines and lines[-1] == "":
    lines.pop()
fails = 0
for vocab in vocabs:
    name = os.path.basename(vocab).replace(".txt", "")
    d = os.path.join(work, name)
    subprocess.run([bertcc, "init-model", "--config", "bert-tiny", "--vocab", vocab, "--output", d],
                   check=True, stdout=subprocess.DEVNULL)
    ours = subprocess.run([bertcc, "tokenize", "--vocab", vocab, "--input", texts], check=True,
                          capture_output=True, text=True).stdout.split("\n")
    for fast in (True, False):
        tok = AutoTokenizer.from_pretrained(d, use_fast=fast)
        bad = 0
        for i, line in enumerate(lines):
            ids = " ".join(map(str, tok(line, add_special_tokens=False)["input_ids"]))
            if ids != ours[i]:
                if bad < 3:
                    print(f"  line {i + 1}: hf {ids[:80]} | bertcc {ours[i][:80]}")
                bad += 1
        kind = "fast" if fast else "slow"
        print(f"{'ok  ' if bad == 0 else 'FAIL'} {name} {kind} ({type(tok).__name__}): "
              f"{len(lines) - bad}/{len(lines)} lines identical")
        fails += bad > 0
sys.exit(1 if fails else 0)
