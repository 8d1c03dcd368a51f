#!/usr/bin/env python3
# Makes the ggml golden vectors of tests/tests/ggml_golden.rs with llama.cpp itself as the oracle.
# See PROVENANCE.md. Usage (from this directory):
#   LLAMA_CPP=/root/.cache/tern-llamacpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp \
#   LLAMA_BIN=/root/.cache/tern-llamacpp/bin TOOLS=/work/shared/tools python3 gen_golden.py
import ast, hashlib, json, os, struct, subprocess, sys, tempfile
import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
LL = os.environ.get("LLAMA_CPP", "/root/.cache/tern-llamacpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
BIN = os.environ.get("LLAMA_BIN", "/root/.cache/tern-llamacpp/bin")
TOOLS = os.environ.get("TOOLS", "/work/shared/tools")
OUT = os.path.join(HERE, "vectors")
os.makedirs(OUT, exist_ok=True)
tmp = tempfile.mkdtemp()

# 1. Build the oracle against the vendored build's ggml-base (quantize_row_*_ref, dequantize_row_*).
oracle = os.path.join(tmp, "ggml_oracle")
subprocess.run(["cc", "-O2", "-o", oracle, os.path.join(HERE, "ggml_oracle.c"), f"-I{LL}/ggml/include",
                f"{LL}/build/ggml/src/libggml-base.a", "-lm", "-lpthread", "-lstdc++", "-fopenmp"], check=True)

TYPES = {"q8_0": (8, 32, 34), "q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "tq1_0": (34, 256, 54), "tq2_0": (35, 256, 66)}
rng = np.random.default_rng(20261122)
cases = []

def q_input(rows, cols):
    # Normal rows with different scales; row 1 all zeros (d = 0); row 2 has an outlier; the last
    # row is all positive (Q4_1's min is then > 0).
    x = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(0.1) * (1 + np.arange(rows, dtype=np.float32)[:, None])
    x[1] = 0
    x[2, 5] = 7.5
    x[-1] = np.abs(x[-1]) + np.float32(0.25)
    return x

def tq_input(rows, cols):
    # Ternary-looking weights (so all three codes occur) with noise and per-block scale changes.
    t = rng.integers(-1, 2, size=(rows, cols)).astype(np.float32)
    scale = (0.02 + 0.05 * rng.random((rows, cols // 256, 1))).astype(np.float32)
    x = (t.reshape(rows, -1, 256) * scale).reshape(rows, cols)
    return (x + rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(0.004)).astype(np.float32)

for tname, rows, cols in [("q8_0", 5, 64), ("q4_0", 5, 64), ("q4_1", 5, 64), ("q8_0", 3, 96),
                          ("tq1_0", 3, 256), ("tq1_0", 7, 512), ("tq2_0", 3, 256), ("tq2_0", 7, 512)]:
    tid, be, bb = TYPES[tname]
    x = (tq_input if tname.startswith("tq") else q_input)(rows, cols)
    name = f"{tname}_{rows}x{cols}"
    base = os.path.join(OUT, name)
    x.tofile(base + ".in.f32")
    subprocess.run([oracle, "quant", str(tid), str(x.size), base + ".in.f32", base + ".blocks", base + ".deq.f32"], check=True)
    case = {"name": name, "type": tname, "ggml_type": tid, "rows": rows, "cols": cols}
    if tname.startswith("tq"):
        # Trits from llama.cpp's dequantized values divided by each block's d (f16, the last 2 bytes).
        blocks = np.fromfile(base + ".blocks", dtype=np.uint8).reshape(-1, bb)
        d = blocks[:, bb - 2:].copy().view(np.float16).reshape(-1).astype(np.float32)
        deq = np.fromfile(base + ".deq.f32", dtype=np.float32).reshape(-1, 256)
        assert (d != 0).all()
        t = deq / d[:, None]
        assert np.array_equal(t, np.round(t)) and np.abs(t).max() <= 1
        t.astype(np.int8).tofile(base + ".trits.i8")
        d.astype(np.float16).tofile(base + ".d.f16")
    cases.append(case)

# 2. I2_S: packed by pack_i2s() of the shared tool gen_i2s_synth.py (taken from the file itself, not
#    copied), which follows bitnet.cpp's quantize_i2_s x86 layout. Upstream llama.cpp has no I2_S.
src = open(os.path.join(TOOLS, "gen_i2s_synth.py")).read()
fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "pack_i2s")
ns = {"np": np, "struct": struct}
exec(compile(ast.Module(body=[fn], type_ignores=[]), "gen_i2s_synth.py", "exec"), ns)
for rows, cols in [(3, 256), (2, 384)]:
    trits = rng.integers(-1, 2, size=rows * cols).astype(np.int8)
    scale = float(np.float32(0.0123))
    name = f"i2_s_{rows}x{cols}"
    base = os.path.join(OUT, name)
    open(base + ".blocks", "wb").write(ns["pack_i2s"](trits, scale))
    trits.tofile(base + ".trits.i8")
    cases.append({"name": name, "type": "i2_s", "ggml_type": 36, "rows": rows, "cols": cols, "scale": scale})

json.dump({"cases": cases}, open(os.path.join(OUT, "cases.json"), "w"), indent=1)

# 3. Real GGUFs made by llama.cpp's tools: the tiny BitNet-shaped model quantized to TQ2_0 and TQ1_0.
#    Record every tensor as gguf-py sees it, plus the sha256 of llama.cpp's dequantization of the
#    TQ tensors.
f16 = os.path.join(tmp, "tiny.gguf")
subprocess.run([sys.executable, os.path.join(TOOLS, "gen_bitnet_synth.py"), f16], check=True, env=dict(os.environ, SMALL="1"))
for q in ["TQ2_0", "TQ1_0"]:
    out = os.path.join(HERE, f"tiny-{q.lower()}.gguf")
    subprocess.run([os.path.join(BIN, "llama-quantize"), f16, out, q], check=True, capture_output=True)
    r = gguf.GGUFReader(out)
    recs = []
    for t in r.tensors:
        raw = bytes(r.data[t.data_offset: t.data_offset + t.n_bytes])
        rec = {"name": t.name, "type": int(t.tensor_type), "ne": [int(v) for v in t.shape],
               "offset": int(t.data_offset) - int(r.data_offset), "n_bytes": int(t.n_bytes),
               "sha256": hashlib.sha256(raw).hexdigest()}
        if int(t.tensor_type) in (34, 35):
            rb = os.path.join(tmp, "t.blocks"); rd = os.path.join(tmp, "t.deq")
            open(rb, "wb").write(raw)
            subprocess.run([oracle, "dequant", str(int(t.tensor_type)), str(int(t.n_elements)), rb, rd], check=True)
            rec["deq_sha256"] = hashlib.sha256(open(rd, "rb").read()).hexdigest()
        recs.append(rec)
    with open(os.path.join(HERE, f"tiny-{q.lower()}.json"), "w") as f:
        f.write('{"data_offset": %d, "alignment": %d, "tensors": [\n' % (r.data_offset, r.alignment))
        f.write(",\n".join(json.dumps(x) for x in recs) + "\n]}\n")
print("ok", len(cases), "cases")
