#!/usr/bin/env python3
"""Greedy continuations of 10 prompts by llama.cpp (SmolLM2 Q4_1 GGUF), as token ids.

Builds greedy.cpp against the vendored llama.cpp build (static libs) and runs it per prompt.
usage: make_greedy.py GGUF OUT.json [--n 32]
"""
import argparse, json, os, subprocess, sys, tempfile

LLAMA = os.environ.get(
    "LLAMA_SRC", "/root/.cache/tern-llamacpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
HERE = os.path.dirname(os.path.abspath(__file__))

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "<|im_start|>user\nWhat is the largest planet in our solar system?<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Neil Armstrong",
    "To make a cup of tea, first",
    "The GNU General Public License is",
    "Photosynthesis is the process by which",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=32)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        exe = os.path.join(td, "greedy")
        b = f"{LLAMA}/build"
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe, os.path.join(HERE, "greedy.cpp"),
                        f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include", f"{b}/src/libllama.a",
                        f"{b}/ggml/src/libggml.a", f"{b}/ggml/src/libggml-cpu.a",
                        f"{b}/ggml/src/libggml-base.a", "-fopenmp", "-lpthread", "-ldl"], check=True)
        cases = []
        for p in PROMPTS:
            out = subprocess.run([exe, a.gguf, str(a.n), p], check=True, capture_output=True,
                                 text=True).stdout.splitlines()
            ids = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in out}
            cases.append({"prompt": p, "prompt_ids": ids["prompt"], "greedy_ids": ids["gen"]})
    json.dump({"tool": "greedy.cpp (libllama, vendored llama.cpp 0c1e570, CPU, default context "
                       "params: flash attention auto, f16 KV, n_ctx 4096, 2 threads)",
               "n_predict": a.n, "cases": cases}, open(a.out, "w"), indent=1)
    print(f"wrote {a.out}: {len(cases)} prompts")


if __name__ == "__main__":
    sys.exit(main())
