"""Minimal safetensors reader/writer (numpy), so tests need no extra Python packages."""
import json
import struct

import numpy as np

_DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I8": np.int8, "I64": np.int64}


def save(path, tensors, dtype="F32"):
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, arr in tensors.items():
        if dtype == "BF16":
            a32 = np.ascontiguousarray(arr, dtype=np.float32)
            u = a32.view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            raw = u.tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=_DT[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (len(h) + 8) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        raw = data[base + b:base + e]
        if meta["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_DT[meta["dtype"]])
        out[name] = arr.reshape(meta["shape"]).copy()
    return out
