#!/usr/bin/env python3
"""Golden vectors for tern's NeuZip lossy rounding, computed independently of tern (numpy).

Input: rows 0..8 of SmolLM2-135M-Instruct's Q8_0 token embedding (token_embd.weight, 576 columns),
dequantized by gguf-py and rounded f32 -> bf16 (round to nearest even). Outputs, all raw
little-endian bf16:
  embd8_bf16.bin    the input (8 x 576)
  embd8_m3.bin      NeuZip lossy rounding keeping 3 mantissa bits
  embd8_m1.bin      ... 1 bit
  embd8_m0.bin      ... 0 bits
plus special values (specials_bf16.bin, specials_m{3,1,0}.bin): every bf16 exponent with a few
mantissas, both signs, inf (no NaN: k = 0 rejects NaN by design; NaN handling is unit-tested).

NeuZip rule (BorealisAI/neuzip cuda/kernels.cuh, methods-and-formats.md 3.1): m' = (m >> drop) +
bit(drop-1) of m; if m' overflows k bits, m' = 0 and the exponent goes up by one. tern's one
deviation: a finite value whose exponent would become 0xFF saturates to exponent 0xFE with all
kept mantissa bits set.

Usage: python3 make_golden.py /path/to/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import sys, os
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

here = os.path.dirname(os.path.abspath(__file__))

def f32_to_bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    r = np.where(nan, (u >> 16) | 0x40, r)
    return r.astype(np.uint16)

def neuzip_round(b, k):
    b = b.astype(np.uint32)
    sign, e, m = b & 0x8000, (b >> 7) & 0xFF, b & 0x7F
    drop = 7 - k
    m2 = (m >> drop) + ((m >> (drop - 1)) & 1)
    over = (m2 >> k) != 0
    m2 = np.where(over, 0, m2)
    e2 = np.where(over, e + 1, e)
    out = sign | (e2 << 7) | (m2 << drop)
    sat = sign | (0xFE << 7) | (((1 << k) - 1) << drop)
    special = e == 0xFF  # inf only here (mantissa 0): unchanged
    out = np.where(e2 == 0xFF, sat, out)
    out = np.where(special, b, out)
    return out.astype(np.uint16)

def main(path):
    r = GGUFReader(path)
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    cols = int(t.shape[0])
    assert cols == 576, cols
    raw = np.asarray(t.data)
    rows = dequantize(raw, t.tensor_type).reshape(-1, cols)[:8].astype(np.float32)
    b = f32_to_bf16(rows).reshape(-1)
    b.tofile(os.path.join(here, "embd8_bf16.bin"))
    for k in (3, 1, 0):
        neuzip_round(b, k).tofile(os.path.join(here, f"embd8_m{k}.bin"))
    sp = []
    for e in range(256):
        for m in (0, 1, 0x08, 0x10, 0x3F, 0x40, 0x48, 0x7F):
            if e == 0xFF and m != 0:
                continue
            sp.append((e << 7) | m)
    sp = np.array(sp + [s | 0x8000 for s in sp], dtype=np.uint16)
    sp.tofile(os.path.join(here, "specials_bf16.bin"))
    for k in (3, 1, 0):
        neuzip_round(sp, k).tofile(os.path.join(here, f"specials_m{k}.bin"))
    print(f"wrote {b.size} embedding values, {sp.size} specials")

if __name__ == "__main__":
    main(sys.argv[1])
