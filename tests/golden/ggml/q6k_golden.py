# sha256 of the f32 dequantization of every Q6_K tensor in the tiny llama-quantize outputs, computed
# by gguf-py's `gguf.quants.dequantize` (llama.cpp's own Python port of dequantize_row_q6_K, f32
# arithmetic in the same (d*scale)*q order). Usage: python3 q6k_golden.py > q6k.json
import hashlib, json, sys
import numpy as np, gguf
from gguf.quants import dequantize
out = {}
for f in ["tiny-tq2_0.gguf", "tiny-tq1_0.gguf"]:
    r = gguf.GGUFReader(f)
    for t in r.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.Q6_K:
            v = dequantize(t.data, t.tensor_type).astype(np.float32)
            out[f"{f}:{t.name}"] = {"n": int(v.size), "sha256": hashlib.sha256(v.tobytes()).hexdigest()}
json.dump(out, sys.stdout, indent=1)
