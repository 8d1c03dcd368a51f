#!/usr/bin/env python3
"""Compact golden of llama.cpp's next-token distributions over the whole GPL-3 text.

Runs `llama-perplexity --kl-divergence-base` (default settings: flash attention auto -> on, f16 KV
cache, c=512 windows, n_seq=4 batches of 2048) on the SmolLM2 Q4_1 GGUF and reduces its 350 MB
log-prob file to, per scored position: llama.cpp's top-K token ids, their log-probabilities (f16),
and the total probability of the top-K (f32), so a test can compute top-1 agreement exactly and a
tight lower bound of KL(llama.cpp || tern) (top-K outcomes + one bucket for the rest).

Output layout (little-endian), `smollm2_gpl3_c512_top16.bin`:
  magic  b"TERNKLD1"
  u32    n_ctx, n_vocab, n_chunk, first (= n_ctx/2), n_pos (= n_ctx - 1 - first), topk
  u32    tokens[n_chunk][n_ctx]
  per chunk, per position j (predicting token first + j + 1 from positions 0..first + j):
    u32  top_ids[topk]       (descending log-prob; ties by lower id)
    f16  top_logprobs[topk]
    f32  top_mass            (sum of exp(top_logprobs) before f16 rounding)

usage: make_gpl3_topk.py GGUF OUT.bin [--ctx 512] [--topk 16] [--base existing.kld]
"""
import argparse, os, re, struct, subprocess, sys, tempfile

import numpy as np

LLAMA_BIN = os.environ.get("LLAMA_BIN", "/root/.cache/tern-llamacpp/bin")
TEXT = "/usr/share/common-licenses/GPL-3"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--base", help="reuse a base file made by the same command")
    a = ap.parse_args()
    cmd = [f"{LLAMA_BIN}/llama-perplexity", "-m", a.gguf, "-f", TEXT, "-c", str(a.ctx), "-t", "2",
           "--kl-divergence-base", "BASE.kld"]
    with tempfile.TemporaryDirectory() as td:
        base = a.base
        if base is None:
            base = os.path.join(td, "base.kld")
            log = subprocess.run([base if x == "BASE.kld" else x for x in cmd], check=True,
                                 capture_output=True, text=True)
            print(re.findall(r"Final estimate: PPL = [0-9.]+ \+/- [0-9.]+", log.stdout + log.stderr))
        raw = open(base, "rb").read()
    assert raw[:8] == b"_logits_", "not a llama-perplexity logits file"
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, 8)
    off = 20
    tokens = np.frombuffer(raw, dtype="<i4", count=n_ctx * n_chunk, offset=off).reshape(n_chunk, n_ctx)
    off += 4 * n_ctx * n_chunk
    nv = 2 * ((n_vocab + 1) // 2) + 4
    first = n_ctx // 2
    n_pos = n_ctx - 1 - first
    rows = np.frombuffer(raw, dtype="<u2", count=n_chunk * n_pos * nv, offset=off).reshape(n_chunk * n_pos, nv)
    out = bytearray(b"TERNKLD1")
    out += struct.pack("<6I", n_ctx, n_vocab, n_chunk, first, n_pos, a.topk)
    out += tokens.astype("<u4").tobytes()
    for r in rows:
        scale, min_lp = np.frombuffer(r[:4].tobytes(), dtype="<f4")
        # log p_i = min_log_prob + scale * q_i (perplexity.cpp; q = 0 is clipped at max - 16)
        lp = min_lp.astype(np.float64) + scale.astype(np.float64) * r[4:4 + n_vocab].astype(np.float64)
        top = np.lexsort((np.arange(n_vocab), -lp))[: a.topk]
        out += top.astype("<u4").tobytes()
        out += lp[top].astype("<f2").tobytes()
        out += struct.pack("<f", float(np.exp(lp[top]).sum()))
    open(a.out, "wb").write(out)
    print(f"wrote {a.out}: {n_chunk} chunks x {n_pos} positions, top-{a.topk}, {len(out)} bytes")


if __name__ == "__main__":
    sys.exit(main())
