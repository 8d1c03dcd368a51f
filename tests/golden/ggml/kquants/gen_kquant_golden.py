#!/usr/bin/env python3
# Golden vectors of the ggml block types Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K (and Q6_K) for
# tests/tests/kquants.rs, with llama.cpp itself as the oracle: ../ggml_oracle.c linked against the
# vendored build's libggml-base.a (`ggml_get_type_traits(t)->from_float_ref` = quantize_row_*_ref
# and `->to_float` = dequantize_row_*, ggml/src/ggml-quants.c). Cross-checked against gguf-py's
# numpy dequantizers (gguf.quants.dequantize). See ../PROVENANCE.md. Usage (from this directory):
#   LLAMA_CPP=/work/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp python3 gen_kquant_golden.py
import json, os, subprocess, tempfile
import numpy as np
import gguf
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
LL = os.environ.get("LLAMA_CPP", "/work/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
tmp = tempfile.mkdtemp()
oracle = os.path.join(tmp, "ggml_oracle")
subprocess.run(["cc", "-O2", "-o", oracle, os.path.join(HERE, "..", "ggml_oracle.c"), f"-I{LL}/ggml/include",
                f"{LL}/build/ggml/src/libggml-base.a", "-lm", "-lpthread", "-lstdc++", "-fopenmp"], check=True)

# name: (ggml type id, block elements, block bytes, byte offsets of the f16 fields)
TYPES = {
    "q5_0": (6, 32, 22, [0]),
    "q5_1": (7, 32, 24, [0, 2]),
    "q2_k": (10, 256, 84, [80, 82]),
    "q3_k": (11, 256, 110, [108]),
    "q4_k": (12, 256, 144, [0, 2]),
    "q5_k": (13, 256, 176, [0, 2]),
    "q6_k": (14, 256, 210, [208]),
    "iq4_nl": (20, 32, 18, [0]),
}
GGUF_T = {"q5_0": "Q5_0", "q5_1": "Q5_1", "q2_k": "Q2_K", "q3_k": "Q3_K", "q4_k": "Q4_K",
          "q5_k": "Q5_K", "q6_k": "Q6_K", "iq4_nl": "IQ4_NL"}
rng = np.random.default_rng(20261127)
cases = []

def q_input(rows, cols):
    # Normal rows with different scales; row 1 all zeros; row 2 an outlier; the last row all
    # positive (the mins of Q5_1 / Q2_K / Q4_K / Q5_K are then > 0).
    x = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(0.1) * (1 + np.arange(rows, dtype=np.float32)[:, None])
    x[1] = 0
    x[2, 5] = 7.5
    x[-1] = np.abs(x[-1]) + np.float32(0.25)
    return x

def raw_blocks(t, rows, cols):
    # Random bytes (every scale / min / high-bit pattern occurs) with finite f16 fields.
    tid, be, bb, f16s = TYPES[t]
    nb = rows * cols // be
    b = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in f16s:
        v = (rng.standard_normal(nb) * 0.01).astype(np.float16)
        b[:, o:o + 2] = v.view(np.uint8).reshape(nb, 2)
    return b.reshape(-1)

for t, (tid, be, bb, _) in TYPES.items():
    # odd shapes: an odd number of rows and of blocks per row
    shapes = [(5, 3 * be), (3, be)] if be == 256 else [(5, 96), (7, 160)]
    for rows, cols in shapes:
        name = f"{t}_{rows}x{cols}"
        base = os.path.join(HERE, name)
        x = q_input(rows, cols)
        x.tofile(tmp + "/in.f32")
        subprocess.run([oracle, "quant", str(tid), str(x.size), tmp + "/in.f32", base + ".blocks", base + ".deq.f32"], check=True)
        cases.append({"name": name, "type": t, "rows": rows, "cols": cols})
    rows, cols = (3, 2 * be) if be == 256 else (3, 7 * be)
    name = f"{t}_raw_{rows}x{cols}"
    base = os.path.join(HERE, name)
    raw_blocks(t, rows, cols).tofile(base + ".blocks")
    subprocess.run([oracle, "dequant", str(tid), str(rows * cols), base + ".blocks", base + ".deq.f32"], check=True)
    cases.append({"name": name, "type": t, "rows": rows, "cols": cols})

# Cross-check: gguf-py's numpy port gives the same bits as llama.cpp for every case.
for c in cases:
    base = os.path.join(HERE, c["name"])
    blocks = np.fromfile(base + ".blocks", dtype=np.uint8).reshape(c["rows"], -1)
    want = np.fromfile(base + ".deq.f32", dtype=np.float32)
    got = dequantize(blocks, getattr(gguf.GGMLQuantizationType, GGUF_T[c["type"]])).astype(np.float32).reshape(-1)
    c["gguf_py_bit_identical"] = bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))

json.dump({"cases": cases}, open(os.path.join(HERE, "cases.json"), "w"), indent=1)
print(json.dumps([(c["name"], c["gguf_py_bit_identical"]) for c in cases]))
