#!/usr/bin/python3
"""The model on the CUDA backend against the same model on the CPU: `bertcc dump-step` on one
pre-training batch with --device cpu and --device cuda, fp32, bf16 and fp16; the losses and every
gradient compared (max |cuda - cpu| <= tol * max |cpu| per tensor; fp32 1e-4, bf16 3e-2: the two
backends sum in different orders; bf16 and fp16 (1e-2) round GEMM operands). Needs numpy only: the model
directory and the HDF5 batch are made beforehand (tests/torch/check_dump_step.py --workdir W writes
W/model and W/batch.h5). Exit 0 passed, 77 no GPU, 1 failed.
  check_model.py BERTCC MODEL_DIR BATCH.h5 WORKDIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    bertcc, model, batch, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    failures = []
    for prec, tol in (("fp32", 1e-4), ("bf16", 3e-2), ("fp16", 1e-2)):
        outs = {}
        for dev in ("cpu", "cuda"):
            out = os.path.join(work, f"{dev}_{prec}.safetensors")
            # fp16 with a loss scale, as fp16 training runs: unscaled, the attention's small score
            # gradients fall below fp16's normal range, and the two backends' (equally valid)
            # roundings of those subnormals differ by more than the tolerance
            extra = ["--loss-scale", "1024"] if prec == "fp16" else []
            r = subprocess.run([bertcc, "dump-step", "--model", model, "--batch", batch, "--precision", prec,
                                "--device", dev, "--out", out] + extra, capture_output=True, text=True)
            print(r.stdout.strip(), "|", r.stderr.strip().splitlines()[0] if r.stderr.strip() else "")
            if r.returncode != 0:
                if dev == "cuda" and ("no usable CUDA device" in r.stderr or "no CUDA device" in r.stderr):
                    print("SKIPPED:", r.stderr.strip())
                    return 77
                print(r.stderr)
                return 1
            outs[dev] = st.load(out)
        a, b = outs["cpu"], outs["cuda"]
        if set(a) != set(b):
            failures.append(f"{prec}: tensor names differ")
            continue
        worst, worst_name = 0.0, ""
        for name in sorted(a):
            x, y = a[name].astype(np.float64), b[name].astype(np.float64)
            scale = max(np.abs(x).max(), 1e-30)
            if name.endswith("attention.self.key.bias"):
                # exactly zero in exact arithmetic (softmax is shift-invariant per row): what is
                # left is rounding noise, judged against the model's largest gradient
                scale = max(scale, max(np.abs(v).max() for k, v in a.items() if k.startswith("grad.")))
            err = np.abs(x - y).max() / scale
            if not np.isfinite(y).all() or err > tol:
                failures.append(f"{prec} {name}: {err:.2e}")
            if err > worst:
                worst, worst_name = err, name
        print(f"{prec}: {len(a)} tensors, worst relative difference {worst:.2e} ({worst_name}), tolerance {tol:g}")
    if failures:
        print("FAIL:", "; ".join(failures[:20]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
