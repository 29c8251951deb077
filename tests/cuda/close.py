#!/usr/bin/env python3
"""Numerical comparisons for tests/cuda/e2e.sh: a run on the GPU against the same run on the CPU,
where the bits differ (other summation orders) and only closeness can be asked. Each mode prints
one line with the largest difference found and exits 1 when it is over the tolerance.

  close.py losses A/dllogger.json B/dllogger.json RTOL [resumed]
      every logged loss (the keys holding "loss": loss, mlm_loss, generator_loss, eval.loss, ...) at
      every logged step of A within RTOL (relative) of B's; the same steps and keys must be logged
      (resumed: A, a run resumed from B's checkpoint, logs a part of B's steps).
  close.py json A.json B.json RTOL [ATOL]
      two JSON documents (or JSON Lines files, taken as lists) of the same structure (metrics,
      predictions, command outputs): strings, booleans and list lengths equal, numbers within
      ATOL + RTOL * |b|.
  close.py model A.safetensors B.safetensors RTOL
      the same tensors, each within RTOL of its own largest magnitude in B (max |a - b| / max |b|, with
      max |b| taken as at least 1e-3), the three largest differences named. Not held to RTOL, only
      reported and required finite: the tensors whose gradient is zero in exact arithmetic (the
      attention key bias: a shift of every score of a query; what adds one constant to every
      position's start or end logit of a span head: the heads' biases, the last encoder layer's
      LayerNorm bias under a linear span head (qa_outputs), the end LayerNorm bias of ELECTRA's
      joint head; softmax ignores all of them). Their gradient is rounding
      noise, which Adam's m / sqrt(v) turns into steps of up to the learning rate, of either sign,
      so on two devices, or with other thread counts on one CPU, they wander apart (fp32 SQuAD,
      H100 against CPU: 0.17 of qa_outputs.bias, 0.017 of the last LayerNorm bias; the CPU with 1
      thread against 2: 0.08 and 0.008; every other tensor within 1.4e-5 in both).
Needs only numpy."""
import json
import re
import struct
import sys

import numpy as np


def dll_losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("DLLL "):
                continue
            j = json.loads(line[5:])
            if j.get("type") != "LOG" or not isinstance(j.get("step"), list):
                continue
            for k, v in j["data"].items():
                if "loss" in k and "scale" not in k and isinstance(v, (int, float)):
                    out[(tuple(j["step"]), k)] = float(v)
    return out


def losses(a, b, rtol, resumed=False):
    la, lb = dll_losses(a), dll_losses(b)
    if not la:
        sys.exit(f"FAIL no losses logged in {a}")
    if (not set(la) <= set(lb)) if resumed else set(la) != set(lb):
        only = sorted(set(la) ^ set(lb))[:4]
        sys.exit(f"FAIL the runs log different steps or losses: {only}")
    worst, at = 0.0, None
    for key in sorted(la):
        x, y = la[key], lb[key]
        d = abs(x - y) / max(abs(y), 1e-30)
        if not np.isfinite(x) or d > worst:
            worst, at = (np.inf if not np.isfinite(x) else d), key
    msg = f"{len(la)} logged losses, largest relative difference {worst:.2e}" + (f" ({at[1]} at step {at[0][-1]})" if at else "")
    print(("ok   " if worst <= rtol else "FAIL ") + msg + f", tolerance {rtol:g}")
    return worst <= rtol


def load_json(path):
    text = open(path).read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def json_close(a, b, rtol, atol):
    worst = [0.0, ""]

    def walk(x, y, where):
        if isinstance(x, dict) and isinstance(y, dict):
            if set(x) != set(y):
                return f"{where}: keys {sorted(set(x) ^ set(y))[:4]} differ"
            for k in x:
                e = walk(x[k], y[k], f"{where}.{k}")
                if e:
                    return e
            return None
        if isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return f"{where}: {len(x)} vs {len(y)} items"
            for i, (p, q) in enumerate(zip(x, y)):
                e = walk(p, q, f"{where}[{i}]")
                if e:
                    return e
            return None
        if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            return None if x == y else f"{where}: {x!r} vs {y!r}"
        d = abs(x - y)
        if d > worst[0]:
            worst[0], worst[1] = d, where
        return None if d <= atol + rtol * abs(y) else f"{where}: {x!r} vs {y!r}"

    err = walk(load_json(a), load_json(b), "")
    if err:
        print(f"FAIL {err} (tolerance {atol:g} + {rtol:g} x |b|)")
        return False
    print(f"ok   same structure and strings, largest numeric difference {worst[0]:.2e}" + (f" at {worst[1]}" if worst[1] else ""))
    return True


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    kinds = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        if v["dtype"] == "BF16":
            raw = np.frombuffer(body[s:e], dtype=np.uint16).astype(np.uint32) << 16
            out[k] = raw.view(np.float32).reshape(v["shape"])
        else:
            out[k] = np.frombuffer(body[s:e], dtype=kinds[v["dtype"]]).reshape(v["shape"])
    return out


# tensors whose exact gradient is zero (see the docstring)
ZERO_GRADIENT = re.compile(r"(attention\.self\.key\.bias|qa_outputs\.bias|start_logits\.dense\.bias"
                           r"|end_logits\.dense_1\.bias|end_logits\.LayerNorm\.bias)$")


def zero_gradient(names):
    out = {k for k in names if ZERO_GRADIENT.search(k)}
    if any(k.endswith("qa_outputs.weight") for k in names):  # a linear span head on the last layer
        layers = [int(m.group(1)) for k in names for m in [re.search(r"encoder\.layer\.(\d+)\.", k)] if m]
        if layers:
            out |= {k for k in names if k.endswith(f"encoder.layer.{max(layers)}.output.LayerNorm.bias")}
    return out


def model(a, b, rtol):
    ta, tb = read_safetensors(a), read_safetensors(b)
    if set(ta) != set(tb):
        print(f"FAIL the files hold different tensors: {sorted(set(ta) ^ set(tb))[:4]}")
        return False
    held, free = [], []
    zero = zero_gradient(ta)
    for k in sorted(ta):
        x, y = ta[k].astype(np.float64), tb[k].astype(np.float64)
        if x.shape != y.shape:
            print(f"FAIL {k}: shape {x.shape} vs {y.shape}")
            return False
        d = float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(y))), 1e-3) if y.size else 0.0
        if not np.all(np.isfinite(x)):
            d = np.inf
        (free if k in zero and np.isfinite(d) else held).append((d, k))
    held.sort(reverse=True)
    free.sort(reverse=True)
    worst = held[0][0] if held else 0.0
    ok = worst <= rtol
    top = ", ".join(f"{k} {d:.2e}" for d, k in held[:3] if d > 0)
    print(("ok   " if ok else "FAIL ") + f"{len(held)} tensors, largest difference {worst:.2e} of the tensor's largest magnitude"
          + (f" ({top})" if top else "") + f", tolerance {rtol:g}"
          + (f"; {len(free)} with zero exact gradient not held to it (largest {free[0][1]} {free[0][0]:.2e})" if free else ""))
    return ok

if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "losses" and (len(sys.argv) == 5 or (len(sys.argv) == 6 and sys.argv[5] == "resumed")):
        ok = losses(sys.argv[2], sys.argv[3], float(sys.argv[4]), len(sys.argv) == 6)
    elif mode == "json" and len(sys.argv) in (5, 6):
        ok = json_close(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]) if len(sys.argv) == 6 else 0.0)
    elif mode == "model" and len(sys.argv) == 5:
        ok = model(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit(__doc__)
    sys.exit(0 if ok else 1)
