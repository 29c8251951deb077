#!/usr/bin/env python3
"""Prints the path of the libcudnn.so.9 PyTorch uses: the nvidia-cudnn wheel's lib folder (what
PyTorch's CUDA wheels load), else torch/lib (builds that carry their own). Exit 1 when neither has
one. scripts/gpu-visit.sh's cudnn step points BERTCC_CUDNN_LIB at it."""
import os
import sys

dirs = []
try:
    import nvidia.cudnn  # a namespace package in some wheels: __path__, not __file__
    dirs += [os.path.join(p, "lib") for p in nvidia.cudnn.__path__]
except ImportError:
    pass
try:
    import torch
    dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except ImportError:
    pass
for d in dirs:
    lib = os.path.join(d, "libcudnn.so.9")
    if os.path.exists(lib):
        print(lib)
        sys.exit(0)
print("no libcudnn.so.9 in " + (", ".join(dirs) or "nvidia.cudnn or torch (neither importable)"), file=sys.stderr)
sys.exit(1)
