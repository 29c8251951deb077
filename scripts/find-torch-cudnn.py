#!/usr/bin/env python3
"""Prints the path of the libcudnn.so.9 PyTorch uses: the nvidia-cudnn wheel's lib folder (what
PyTorch's CUDA wheels load), else torch/lib (builds that carry their own). Exit 1 when neither has
one. scripts/gpu-visit.sh's cudnn steps point BERTCC_CUDNN_LIB at it.

--ld-path: prints instead the folders to add to LD_LIBRARY_PATH (colon-separated): libcudnn's,
and those of the NVIDIA wheels' libnvrtc (cuDNN's fused-attention engines compile their kernels at
run time and open libnvrtc.so.* and libnvrtc-builtins by name; PyTorch loads them itself on
import, a bertcc binary does not: without them no plan builds, "No valid engine configs")."""
import glob
import os
import sys

dirs = []
try:
    import nvidia.cudnn  # a namespace package in some wheels: __path__, not __file__
    dirs += [os.path.join(p, "lib") for p in nvidia.cudnn.__path__]
except ImportError:
    pass
torch_lib = None
try:
    import torch
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    dirs.append(torch_lib)
except ImportError:
    pass
cudnn = next((os.path.join(d, "libcudnn.so.9") for d in dirs if os.path.exists(os.path.join(d, "libcudnn.so.9"))), None)
if not cudnn:
    print("no libcudnn.so.9 in " + (", ".join(dirs) or "nvidia.cudnn or torch (neither importable)"), file=sys.stderr)
    sys.exit(1)
if "--ld-path" not in sys.argv[1:]:
    print(cudnn)
    sys.exit(0)
folders = [os.path.dirname(cudnn)]
roots = []
try:
    import nvidia  # the NVIDIA wheels' namespace: nvidia/cuda_nvrtc/lib, nvidia/cu13/lib, ...
    roots += list(nvidia.__path__)
except ImportError:
    pass
if torch_lib:
    roots.append(torch_lib)
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "**", "libnvrtc*.so*"), recursive=True)):
        d = os.path.dirname(lib)
        if d not in folders:
            folders.append(d)
if len(folders) == 1:
    print("find-torch-cudnn: no libnvrtc in the NVIDIA wheels or torch/lib (" + ", ".join(roots) +
          "): cuDNN's runtime-compiled engines will need it on the loader's path", file=sys.stderr)
print(":".join(folders))
