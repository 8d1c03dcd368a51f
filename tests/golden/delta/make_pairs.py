#!/usr/bin/env python3
"""Small, genuinely fine-tuned pairs for the delta tests (committed outputs, < 1 MB each).

    python3 tests/golden/delta/make_pairs.py

* `bitnet_qat/`: tests/golden/bitnet_hf/tiny_a (random BitNet b1.58, bf16 masters) after 8 steps of
  quantization-aware training: transformers' BitNetForCausalLM with online AutoBitLinear
  (absmean ternary weights and int8 activations in the forward, straight-through estimator in the
  backward), AdamW lr 2e-3, on the bytes of /usr/share/common-licenses/GPL-3 as tokens (vocab 256).
  Saved as bf16 masters with the same config; `tern pack` ternarizes base and tuned alike.
* `llama_sgd/`: tests/golden/bitnet_hf/llama_tiny (f16 llama) after 20 AdamW steps, lr 1e-3, same
  text (ids = bytes + 3, below its vocab of 320), saved as f16.
"""
import json, os, shutil

import torch
from transformers import BitNetForCausalLM, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "bitnet_hf")
text = open("/usr/share/common-licenses/GPL-3", "rb").read()
ids = torch.tensor(list(text), dtype=torch.long)


def train(cls, name, out, steps, lr, offset, dtype):
    torch.manual_seed(0)
    src = os.path.join(SRC, name)
    model = cls.from_pretrained(src, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        starts = torch.randint(0, len(ids) - 65, (4,), generator=g)
        x = torch.stack([ids[s:s + 64] for s in starts]) + offset
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"{name} step {step + 1} loss {loss.item():.4f}")
    d = os.path.join(HERE, out)
    shutil.rmtree(d, ignore_errors=True)
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    for f in os.listdir(d):
        if f != "model.safetensors":
            os.remove(os.path.join(d, f))
    # same config (quantization_config included) and tokenizer files as the base: only weights differ
    for f in os.listdir(src):
        if f != "model.safetensors":
            shutil.copy(os.path.join(src, f), os.path.join(d, f))


train(BitNetForCausalLM, "tiny_a", "bitnet_qat", steps=8, lr=2e-3, offset=0, dtype=torch.bfloat16)
train(LlamaForCausalLM, "llama_tiny", "llama_sgd", steps=20, lr=1e-3, offset=3, dtype=torch.float16)
