"""Gradient comparison, random test parameters and the dump-step call shared by the check_*.py scripts."""
import argparse
import os
import subprocess

import numpy as np


def step_args():
    """--bertcc, --precision (fp32), --workdir, --device (cpu): the arguments of a dump-step check."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bertcc", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cpu", help="bertcc's --device (cuda on the GPU machine)")
    return ap.parse_args()


def dump_step(bertcc, args, out):
    """Runs `bertcc dump-step ARGS --out OUT`, prints its stdout (and stderr on failure); returns
    the exit code."""
    r = subprocess.run([bertcc, "dump-step", *args, "--out", out], capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr)
    return r.returncode


def compare_gradients(ours, P, tol, zero_rel, label=""):
    """ours: tensors from `bertcc dump-step` ("grad.<HF name>"); P: float64 torch parameters with
    .grad. Each tensor passes when max |ours - ref| <= tol * max |ref|. A tensor whose true gradient
    is exactly zero (max |ref| <= zero_rel * the largest gradient of the model, e.g. attention key
    biases, or sums that cancel) holds only rounding noise and is judged against the model's
    largest gradient. Returns (failures, worst relative error)."""
    got_names = set(k[5:] for k in ours if k.startswith("grad."))
    if got_names != set(P):
        return [f"{label}gradient names differ: {sorted(got_names ^ set(P))[:10]}"], float("inf")
    gmax = max(float(P[n].grad.abs().max()) for n in P)
    failures, worst = [], 0.0
    for n in P:
        ref = P[n].grad.numpy()
        got = ours["grad." + n].astype(np.float64)
        true_zero = np.abs(ref).max() <= zero_rel * gmax
        err = np.abs(got - ref).max() / (gmax if true_zero else np.abs(ref).max())
        worst = max(worst, err)
        if err > tol or not np.isfinite(err):
            failures.append(f"{label}{n} (rel err {err:.2e})")
        if os.environ.get("VERBOSE"):
            print(f"  {label}{n:60s} {err:.2e}")
    return failures, worst


def random_params(shapes, rng, matrix_scale=0.15):
    """float32 parameters for {name: shape}, drawn in order: LayerNorm weights 1 + N(0, 0.1),
    matrices N(0, matrix_scale), other vectors N(0, 0.05)."""
    out = {}
    for n, s in shapes.items():
        if n.endswith("LayerNorm.weight"):
            out[n] = (1.0 + 0.1 * rng.standard_normal(s)).astype(np.float32)
        elif len(s) == 2:
            out[n] = (matrix_scale * rng.standard_normal(s)).astype(np.float32)
        else:
            out[n] = (0.05 * rng.standard_normal(s)).astype(np.float32)
    return out
