#!/usr/bin/env python3
"""llama.cpp golden logits for BitNet models quantized to TQ2_0 by llama.cpp's own tools.

1. tiny: `SMALL=1 gen_bitnet_synth.py tiny-f16.gguf` (random BitNet-b1.58-2B4T-shaped model, 2
   layers, n_embd 256) then `llama-quantize --token-embedding-type f16 tiny-f16.gguf
   tiny-tq2_0-f16emb.gguf TQ2_0` (tern cannot import the default Q6_K embedding); committed.
2. 2B: /root/bench/synth-tq2-f16emb.gguf (the full-size one, made the same way; not committed).
Logits of TOKENS from logits.cpp (libllama). Tiny: all 8 positions as f32; 2B: positions 0, 3, 5, 7
as f16 (n_vocab 128256; f16 rounding adds NMSE ~1e-7, far below the test's tolerance).
usage: make_bitnet_golden.py [--big GGUF]
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np

LLAMA = os.environ.get(
    "LLAMA_SRC", "/root/.cache/tern-llamacpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
BIN = os.environ.get("LLAMA_BIN", "/root/.cache/tern-llamacpp/bin")
GEN = os.environ.get("GEN_BITNET", "/work/shared/tools/gen_bitnet_synth.py")
HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = [1, 17, 95, 3, 42, 42, 7, 63]
BIG_POS = [0, 3, 5, 7]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", default="/root/bench/synth-tq2-f16emb.gguf")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        exe = os.path.join(td, "logits")
        b = f"{LLAMA}/build"
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe, os.path.join(HERE, "logits.cpp"),
                        f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include", f"{b}/src/libllama.a",
                        f"{b}/ggml/src/libggml.a", f"{b}/ggml/src/libggml-cpu.a",
                        f"{b}/ggml/src/libggml-base.a", "-fopenmp", "-lpthread", "-ldl"], check=True)
        tiny = os.path.join(HERE, "tiny-tq2_0-f16emb.gguf")
        f16 = os.path.join(td, "tiny-f16.gguf")
        subprocess.run([sys.executable, GEN, f16], check=True, env={**os.environ, "SMALL": "1"})
        subprocess.run([f"{BIN}/llama-quantize", "--token-embedding-type", "f16", f16, tiny, "TQ2_0"],
                       check=True, capture_output=True)
        out = os.path.join(td, "tiny.f32")
        subprocess.run([exe, tiny, out] + [str(t) for t in TOKENS], check=True)
        np.fromfile(out, dtype="<f4").tofile(os.path.join(HERE, "tiny_logits_f32.bin"))
        if os.path.exists(a.big):
            out = os.path.join(td, "big.f32")
            subprocess.run([exe, a.big, out] + [str(t) for t in TOKENS], check=True)
            big = np.fromfile(out, dtype="<f4").reshape(len(TOKENS), -1)
            big[BIG_POS].astype("<f2").tofile(os.path.join(HERE, "synth2b_logits_f16.bin"))
    json.dump({"tokens": TOKENS, "tiny_positions": list(range(len(TOKENS))), "big_positions": BIG_POS,
               "big_gguf": a.big, "tool": "logits.cpp (libllama, vendored llama.cpp 0c1e570, CPU)"},
              open(os.path.join(HERE, "golden.json"), "w"), indent=1)
    print("done")


if __name__ == "__main__":
    sys.exit(main())
