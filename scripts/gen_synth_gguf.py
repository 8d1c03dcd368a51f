#!/usr/bin/env python3
"""Random-weight F16 GGUF files shaped like real models, for speed runs (speed does not depend on
weight values). numpy only: a minimal GGUF v3 writer, so it runs where `gguf` is not installed
(the GPU machine). Quantize the result with llama-quantize (TQ2_0 / TQ1_0 / Q4_1 ...).

  python3 scripts/gen_synth_gguf.py OUT.gguf [--shape bitnet|smollm] [--layers N] [--tiny]

bitnet: BitNet-b1.58-2B4T shape (2560 hidden, 30 layers, 20/5 heads, 6912 FFN, 128256 vocab), arch
        "bitnet", with exactly the metadata of shared/tools/gen_bitnet_synth.py.
smollm: SmolLM2-135M shape (576 hidden, 30 layers, 9/3 heads, 1536 FFN, 49152 vocab), arch "llama",
        tied embeddings (no output.weight).
--tiny: 256 hidden, 2 layers, 4/2 heads, 512 FFN, 1024 vocab (dry runs). --layers overrides L.
--q4_1: layer matrices in ggml Q4_1 and the embedding in Q8_0 (as the PyPI SmolLM2 GGUF), written here
        (ggml-common.h's block_q4_1 {d, m, qs[16]} / block_q8_0 {d, qs[32]}, ggml-quants.c's reference
        quantizers), so no llama-quantize is needed on the device.
As gen_bitnet_synth.py, all layers share one set of random matrices (generation time; the values
do not matter for speed) and norms are ones. Weights ~ N(0, 0.02) in f16.
"""
import argparse, os, struct, sys, time
import numpy as np

SHAPES = {  # H, L, NH, NKV, FF, V
    'bitnet': (2560, 30, 20, 5, 6912, 128256),
    'smollm': (576, 30, 9, 3, 1536, 49152),
}
TINY = (256, 2, 4, 2, 512, 1024)
ALIGN = 32

ap = argparse.ArgumentParser()
ap.add_argument('out')
ap.add_argument('--shape', choices=sorted(SHAPES), default='bitnet')
ap.add_argument('--layers', type=int)
ap.add_argument('--tiny', action='store_true')
ap.add_argument('--q4_1', action='store_true')
a = ap.parse_args()
H, L, NH, NKV, FF, V = TINY if a.tiny else SHAPES[a.shape]
if a.layers: L = a.layers
HD = H // NH
t0 = time.time()

def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = []
def add(k, t, payload): kv.append(s(k) + struct.pack('<I', t) + payload)
def u32(k, v): add(k, 4, struct.pack('<I', v))
def f32(k, v): add(k, 6, struct.pack('<f', v))
def st(k, v): add(k, 8, s(v))
def arr(k, t, fmt, vals): add(k, 9, struct.pack('<IQ', t, len(vals)) + np.asarray(vals, fmt).tobytes())
def arr_str(k, vals): add(k, 9, struct.pack('<IQ', 8, len(vals)) + b''.join(s(x) for x in vals))

A = 'bitnet' if a.shape == 'bitnet' else 'llama'
st('general.architecture', A)
u32(f'{A}.context_length', 4096 if A == 'bitnet' else 8192)
u32(f'{A}.embedding_length', H); u32(f'{A}.block_count', L)
u32(f'{A}.feed_forward_length', FF); u32(f'{A}.attention.head_count', NH); u32(f'{A}.attention.head_count_kv', NKV)
f32(f'{A}.rope.freq_base', 500000.0 if A == 'bitnet' else 100000.0)
f32(f'{A}.attention.layer_norm_rms_epsilon', 1e-5); u32(f'{A}.rope.dimension_count', HD)
u32(f'{A}.vocab_size', V); u32('general.file_type', 3 if a.q4_1 else 1)
st('tokenizer.ggml.model', 'llama')
arr_str('tokenizer.ggml.tokens', [f'<t{i}>' for i in range(V)])
arr('tokenizer.ggml.scores', 6, '<f4', [0.0] * V)
arr('tokenizer.ggml.token_type', 5, '<i4', [3, 3, 3] + [1] * (V - 3))
u32('tokenizer.ggml.bos_token_id', 1); u32('tokenizer.ggml.eos_token_id', 2); u32('tokenizer.ggml.unknown_token_id', 0)

from concurrent.futures import ThreadPoolExecutor
POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
SEEDS = iter(np.random.SeedSequence(0).spawn(1 << 16))
def r(rows, cols):
    """rows x cols f16 ~ N(0, 0.02): chunks of ~4M values, one generator each, filled on all cores
    (numpy's generators release the GIL); the result does not depend on the number of cores."""
    out = np.empty((rows, cols), np.float16)
    step = max(1, (1 << 22) // cols)
    def fill(i, seed):
        blk = np.random.Generator(np.random.PCG64(seed)).standard_normal((min(step, rows - i), cols), dtype=np.float32)
        blk *= 0.02
        out[i:i + step] = blk
    list(POOL.map(lambda a: fill(*a), [(i, next(SEEDS)) for i in range(0, rows, step)]))
    return out
ones = lambda n: np.ones(n, np.float32)

tensors = []  # (name, ne (ggml order: fastest first), ggml type, array)
def T(name, arr_, t=None, ne=None):
    tensors.append((name, ne or list(arr_.shape[::-1]), t if t is not None else (1 if arr_.dtype == np.float16 else 0), arr_))
def q4_1(x):
    """ggml quantize_row_q4_1_ref: per 32 values d = (max - min) / 15, m = min, q = round((x - m) / d)
    clamped to 15; byte j = q[j] | q[j + 16] << 4. Returns (raw block bytes, ne)."""
    rows, cols = x.shape
    b = x.astype(np.float32).reshape(-1, 32)
    mn, mx = b.min(1), b.max(1)
    d = (mx - mn) / 15
    inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
    q = np.minimum(np.floor((b - mn[:, None]) * inv[:, None] + 0.5), 15).astype(np.uint8)
    blk = np.zeros((b.shape[0], 20), np.uint8)
    blk[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    blk[:, 2:4] = mn.astype(np.float16).view(np.uint8).reshape(-1, 2)
    blk[:, 4:] = q[:, :16] | (q[:, 16:] << 4)
    return blk.reshape(-1), [cols, rows]
def q8_0(x):
    """ggml quantize_row_q8_0_ref: per 32 values d = amax / 127, q = round(x / d)."""
    rows, cols = x.shape
    b = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(b).max(1) / 127
    inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
    q = np.round(b * inv[:, None]).astype(np.int8)
    blk = np.zeros((b.shape[0], 34), np.uint8)
    blk[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    blk[:, 2:] = q.view(np.uint8)
    return blk.reshape(-1), [cols, rows]
if a.q4_1:
    def M(x): data, ne = q4_1(x); return (data, 3, ne)
else:
    def M(x): return (x, None, None)
def TM(name, m): T(name, m[0], m[1], m[2])
if a.q4_1:
    e, ne = q8_0(r(V, H)); T('token_embd.weight', e, 8, ne)
else:
    T('token_embd.weight', r(V, H))
T('output_norm.weight', ones(H))
q, k, v_, o = (M(x) for x in (r(H, H), r(NKV * HD, H), r(NKV * HD, H), r(H, H)))
g, u, d = (M(x) for x in (r(FF, H), r(FF, H), r(H, FF)))
if A == 'bitnet': v_ = k  # as gen_bitnet_synth.py
for i in range(L):
    p = f'blk.{i}.'
    T(p + 'attn_norm.weight', ones(H))
    if A == 'bitnet': T(p + 'attn_sub_norm.weight', ones(H))
    TM(p + 'attn_q.weight', q); TM(p + 'attn_k.weight', k); TM(p + 'attn_v.weight', v_); TM(p + 'attn_output.weight', o)
    T(p + 'ffn_norm.weight', ones(H))
    if A == 'bitnet': T(p + 'ffn_sub_norm.weight', ones(FF))
    TM(p + 'ffn_gate.weight', g); TM(p + 'ffn_up.weight', u); TM(p + 'ffn_down.weight', d)

pad = lambda x: (ALIGN - x % ALIGN) % ALIGN
infos = b''; off = 0
for name, ne, t, data in tensors:
    infos += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', x) for x in ne) + struct.pack('<IQ', t, off)
    off += data.nbytes + pad(data.nbytes)
head = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kv)) + b''.join(kv) + infos
tmp = a.out + '.part'
with open(tmp, 'wb', buffering=1 << 24) as f:
    f.write(head); f.write(bytes(pad(len(head))))
    for name, ne, t, data in tensors:
        f.write(memoryview(np.ascontiguousarray(data)).cast('B')); f.write(bytes(pad(data.nbytes)))
os.replace(tmp, a.out)
print(f'wrote {a.out}: {A} H={H} L={L} heads={NH}/{NKV} FF={FF} V={V}, {os.path.getsize(a.out) / 2**20:.1f} MiB in {time.time() - t0:.1f} s')
