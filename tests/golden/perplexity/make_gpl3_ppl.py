#!/usr/bin/env python3
"""llama-perplexity's figures for SmolLM2 on GPL-3, whole file and per window.

Runs `llama-perplexity -m GGUF -f GPL-3 -c N -t 2 --ppl-output-type 1` (default settings otherwise),
which prints after each window k (1-based) the running `exp(mean NLL)`, the running mean NLL
`av_k` (6 decimals) and its uncertainty, over the scored positions so far (`n_pos = N - 1 - N/2`
per window). The per-window NLL sum follows as `av_k * k * n_pos - av_{k-1} * (k-1) * n_pos`
(rounding: at most 0.5e-6 * k * n_pos per term, i.e. < 2e-3 nats per window at k = 14, n_pos =
255; < 1e-5 nats per token). The token count comes from `llama-tokenize --no-parse-special`
(llama-perplexity tokenizes with add_special = true, parse_special = false).

usage: make_gpl3_ppl.py GGUF OUT.json [--ctx 512]
"""
import argparse, ast, json, os, re, subprocess

LLAMA_BIN = os.environ.get("LLAMA_BIN", "/root/.cache/tern-llamacpp/bin")
TEXT = "/usr/share/common-licenses/GPL-3"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=512)
    a = ap.parse_args()
    cmd = [f"{LLAMA_BIN}/llama-perplexity", "-m", a.gguf, "-f", TEXT, "-c", str(a.ctx), "-t", "2",
           "--ppl-output-type", "1"]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    log = r.stdout + r.stderr
    rows = re.findall(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", r.stdout, re.M)
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    assert rows and final, log[-2000:]
    n_pos = a.ctx - 1 - a.ctx // 2
    cum = [float(av) for _, _, av, _ in rows]
    sums = [cum[0] * n_pos] + [cum[k] * (k + 1) * n_pos - cum[k - 1] * k * n_pos
                               for k in range(1, len(cum))]
    tok = subprocess.run([f"{LLAMA_BIN}/llama-tokenize", "-m", a.gguf, "-f", TEXT, "--ids",
                          "--no-parse-special", "--log-disable"],
                         check=True, capture_output=True, text=True)
    tokens = len(ast.literal_eval(tok.stdout.strip().splitlines()[-1]))
    out = {
        "command": " ".join(cmd[:1] + ["-m", os.path.basename(a.gguf)] + cmd[3:]),
        "n_ctx": a.ctx,
        "tokens": tokens,
        "windows": len(rows),
        "scored_per_window": n_pos,
        "final_ppl": float(final.group(1)),
        "final_stderr": float(final.group(2)),
        "running_ppl": [float(p) for _, p, _, _ in rows],
        "running_mean_nll": cum,
        "window_nll_sum": [round(s, 6) for s in sums],
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"PPL {out['final_ppl']} +/- {out['final_stderr']}, {len(rows)} windows, {tokens} tokens")


if __name__ == "__main__":
    main()
