#!/usr/bin/env python3
"""Greedy continuations of 10 prompts by llama.cpp on the Gemma 3 270M Q4_K_M GGUF, as token ids:
../llamacpp_agreement/greedy.cpp (libllama: prompt in one batch, then one token per llama_decode,
argmax of the logits) built against the vendored llama.cpp build and run per prompt.

usage: make_gemma_greedy.py GGUF OUT.json [--n 32]   (LLAMA_SRC: the llama.cpp tree with build/)
"""
import argparse, json, os, subprocess, sys, tempfile

LLAMA = os.environ.get("LLAMA_SRC", "/work/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
HERE = os.path.dirname(os.path.abspath(__file__))

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "<start_of_turn>user\nWhat is the largest planet in our solar system?<end_of_turn>\n<start_of_turn>model\n",
    "In 1969, Neil Armstrong",
    "Le chat est assis sur",
    "The GNU General Public License is",
    "Photosynthesis is the process by which",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--build", default=None, help="llama.cpp build dir (default LLAMA_SRC/build)")
    a = ap.parse_args()
    b = a.build or f"{LLAMA}/build"
    libs = {}
    for name in ["libllama.a", "libggml.a", "libggml-cpu.a", "libggml-base.a"]:
        found = subprocess.run(["find", b, "-name", name], capture_output=True, text=True).stdout.split()
        libs[name] = found[0]
    with tempfile.TemporaryDirectory() as td:
        exe = os.path.join(td, "greedy")
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe,
                        os.path.join(HERE, "..", "llamacpp_agreement", "greedy.cpp"),
                        f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include", libs["libllama.a"],
                        libs["libggml.a"], libs["libggml-cpu.a"], libs["libggml-base.a"],
                        "-fopenmp", "-lpthread", "-ldl"], check=True)
        cases = []
        for p in PROMPTS:
            out = subprocess.run([exe, a.gguf, str(a.n), p], check=True, capture_output=True,
                                 text=True).stdout.splitlines()
            ids = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in out}
            cases.append({"prompt": p, "prompt_ids": ids["prompt"], "greedy_ids": ids["gen"]})
    json.dump({"tool": "greedy.cpp (libllama, vendored llama.cpp 0c1e570, CPU, default context "
                       "params: flash attention auto, f16 KV, 2 threads)",
               "n_predict": a.n, "cases": cases}, open(a.out, "w"), indent=1)
    print(f"wrote {a.out}: {len(cases)} prompts")


if __name__ == "__main__":
    sys.exit(main())
