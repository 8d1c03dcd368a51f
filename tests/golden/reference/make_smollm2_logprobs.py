#!/usr/bin/env python3
"""Compact llama.cpp golden log-probabilities for the reference forward pass.

Runs `llama-perplexity --kl-divergence-base` on a short excerpt and reduces its (large) log-prob
file to, per scored position: llama.cpp's top-K token ids and log-softmax values. The test feeds the
same tokens to tern-reference and compares (see PROVENANCE.md for the KL approximation).

usage: make_smollm2_logprobs.py GGUF OUT.json [--ctx 128] [--chunks 2] [--topk 32]
"""
import argparse, json, os, re, struct, subprocess, sys, tempfile

import numpy as np

LLAMA_BIN = os.environ.get("LLAMA_BIN", "/root/.cache/tern-llamacpp/bin")
TEXT = "/usr/share/common-licenses/GPL-3"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--topk", type=int, default=32)
    # llama.cpp's most precise CPU settings: f32 KV cache and no flash attention (its CPU flash
    # attention rounds Q to f16 and accumulates softmax·V in f16). This isolates the model semantics
    # from llama.cpp's own f16 rounding; pass --llama-args "" for its defaults.
    ap.add_argument("--llama-args", default="-fa off -ctk f32 -ctv f32")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        base = os.path.join(td, "base.kld")
        cmd = [f"{LLAMA_BIN}/llama-perplexity", "-m", a.gguf, "-f", TEXT, "-c", str(a.ctx),
               "--chunks", str(a.chunks), "-t", "2", "--kl-divergence-base", base] + a.llama_args.split()
        log = subprocess.run(cmd, check=True, capture_output=True, text=True)
        ppl = re.findall(r"PPL = [0-9.]+ \+/- [0-9.]+", log.stdout + log.stderr)
        raw = open(base, "rb").read()
    assert raw[:8] == b"_logits_", "not a llama-perplexity logits file"
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, 8)
    off = 20
    tokens = np.frombuffer(raw, dtype="<i4", count=n_ctx * n_chunk, offset=off).reshape(n_chunk, n_ctx)
    off += 4 * n_ctx * n_chunk
    nv = 2 * ((n_vocab + 1) // 2) + 4
    first = n_ctx // 2
    n_pos = n_ctx - 1 - first
    rows = np.frombuffer(raw, dtype="<u2", count=n_chunk * n_pos * nv, offset=off).reshape(n_chunk, n_pos, nv)
    chunks = []
    for c in range(n_chunk):
        positions = []
        for j in range(n_pos):
            r = rows[c, j]
            scale, min_lp = np.frombuffer(r[:4].tobytes(), dtype="<f4")
            q = r[4:4 + n_vocab].astype(np.float64)
            # log p_i = min_log_prob + scale * q_i  (q = 0: clipped at max - 16, see perplexity.cpp)
            lp = min_lp + scale * q
            top = np.argsort(-lp, kind="stable")[: a.topk]
            positions.append({"top_ids": [int(t) for t in top],
                              "top_logprobs": [round(float(lp[t]), 5) for t in top]})
        chunks.append({"tokens": [int(t) for t in tokens[c]], "first": first, "positions": positions})
    out = {
        "tool": "llama-perplexity --kl-divergence-base",
        "command": " ".join(os.path.basename(x) if x.startswith("/tmp") else x for x in cmd),
        "llama_ppl": ppl[-1] if ppl else None,
        "n_vocab": n_vocab, "n_ctx": n_ctx, "topk": a.topk,
        "note": "chunk tokens are fed from position 0 (add_bos is false for this model); positions[j] "
                "holds llama.cpp's log-softmax top-k at position first + j (predicting token first + j + 1)",
        "chunks": chunks,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {a.out}: {n_chunk} chunks x {n_pos} positions, top-{a.topk}")


if __name__ == "__main__":
    sys.exit(main())
