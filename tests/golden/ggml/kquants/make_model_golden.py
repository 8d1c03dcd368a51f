#!/usr/bin/env python3
"""llama.cpp golden logits for tiny llama-shaped models quantized by llama.cpp to the ggml block
types of issue 31 (tests/tests/kquants.rs `tiny_llama_*_matches_llama_cpp`).

1. `scripts/gen_synth_gguf.py --tiny --shape smollm tiny-f16.gguf` (arch llama, 256 hidden, 2
   layers, 4/2 heads, 512 FFN, 1024 vocab, tied embedding; random N(0, 0.02) f16 weights).
2. llama.cpp's quantizer (`quantize.cpp` here: `llama_model_quantize` with default parameters, no
   imatrix = llama-quantize's path) to each FTYPE below; committed as tiny-{name}.gguf.
3. Logits of TOKENS, all positions, from ../../bitnet_llamacpp/logits.cpp (libllama, CPU backend):
   tiny-{name}.logits.f32 ([n][1024] little-endian f32).
Also writes models.json: each file's tensor types as gguf-py reads them.
usage (from this directory): LLAMA_SRC=/work/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp python3 make_model_golden.py
"""
import collections, json, os, subprocess, sys, tempfile
import numpy as np
import gguf

LLAMA = os.environ.get("LLAMA_SRC", "/work/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../../../.."))
TOKENS = [1, 17, 95, 3, 42, 42, 7, 63]
# name: llama.h LLAMA_FTYPE_MOSTLY_*
FTYPES = {"q4_k_m": 15, "q3_k_m": 12, "q2_k": 10, "q5_0": 8, "q5_1": 9, "iq4_nl": 25}


def build(td, src, name):
    exe = os.path.join(td, name)
    b = f"{LLAMA}/build"
    subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe, src, f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include",
                    f"{b}/src/libllama.a", f"{b}/ggml/src/libggml.a", f"{b}/ggml/src/libggml-cpu.a",
                    f"{b}/ggml/src/libggml-base.a", "-fopenmp", "-lpthread", "-ldl"], check=True)
    return exe


def main():
    models = {}
    with tempfile.TemporaryDirectory() as td:
        quant = build(td, os.path.join(HERE, "quantize.cpp"), "quantize")
        logits = build(td, os.path.join(HERE, "../../bitnet_llamacpp/logits.cpp"), "logits")
        f16 = os.path.join(td, "tiny-f16.gguf")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gen_synth_gguf.py"), f16, "--tiny",
                        "--shape", "smollm"], check=True)
        for name, ft in FTYPES.items():
            out = os.path.join(HERE, f"tiny-{name}.gguf")
            subprocess.run([quant, f16, out, str(ft)], check=True, capture_output=True)
            lf = os.path.join(HERE, f"tiny-{name}.logits.f32")
            subprocess.run([logits, out, lf] + [str(t) for t in TOKENS], check=True)
            r = gguf.GGUFReader(out)
            models[name] = dict(collections.Counter(t.tensor_type.name for t in r.tensors))
    json.dump({"tokens": TOKENS, "models": models,
               "tool": "quantize.cpp + logits.cpp (libllama, vendored llama.cpp 0c1e570, CPU)"},
              open(os.path.join(HERE, "models.json"), "w"), indent=1)
    print(json.dumps(models))


if __name__ == "__main__":
    sys.exit(main())
