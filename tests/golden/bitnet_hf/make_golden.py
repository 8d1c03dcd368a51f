#!/usr/bin/env python3
"""Small random Hugging Face checkpoints + transformers' logits, for tern's HF importer and forward.

Writes, next to this script:
  tiny_a/         BitNet, bf16 master weights, tied embeddings, hidden 64 (online quantization)
  tiny_a_packed/  the same model in transformers' offline form: uint8 packed trits (pack_weights)
                  + bf16 weight_scale, quantized from tiny_a's masters with transformers' WeightQuant
  tiny_b/         BitNet, f32 master weights, untied lm_head, sizes that are not multiples of 32
                  (hidden 72, head_dim 18, intermediate 100, vocab 300), GQA 4:2
  llama_tiny/     llama, f16 weights, tied, with a small byte-level BPE tokenizer.json
                  (Digits + ByteLevel pre-tokenizer, as SmolLM's) and tokenizer_config.json
  <name>.logits.json  {"tokens": [...], "shape": [n, vocab], "logits": [...row-major f32...]}
                  from transformers' forward in float32 (eager attention)
  trits.json      transformers' ternarization of two tiny_b tensors (WeightQuant formula)

BitNet directories carry quantization_config
  {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"|"offline"}
so that loading them with from_pretrained applies BitNet's quantization (AutoBitLinear: absmax
int8 activations per token, absmean ternary weights).

Run: python3 tests/golden/bitnet_hf/make_golden.py
"""

import codecs
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import BitNetConfig, BitNetForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.integrations.bitnet import AutoBitLinear, pack_weights

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = [1, 17, 42, 7, 99, 3, 250, 18, 64, 5, 128, 33]
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

ONLINE = {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"}
OFFLINE = {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "offline"}


def randomize_norms(model, gen):
    """Norm weights start at 1; make them matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))


def save_dir(model, name, dtype, quant=None, extra_files=()):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    keep = {"config.json", "model.safetensors", *extra_files}
    for f in os.listdir(d):
        if f not in keep:
            os.remove(os.path.join(d, f))
    cfg = json.load(open(os.path.join(d, "config.json")))
    if quant is not None:
        cfg["quantization_config"] = quant
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    return d


def golden_logits(cls, d, name):
    model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    # transformers 5.23 leaves offline-unpacked BitNet weights in the checkpoint dtype (bf16), which
    # F.linear refuses to mix with f32 activations; the values are exactly -1/0/+1 (and bf16 scales),
    # so casting to f32 changes nothing but the arithmetic precision.
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.data = t.data.float()
    model.eval()
    if cls is BitNetForCausalLM:
        q = json.load(open(os.path.join(d, "config.json")))["quantization_config"]
        lin = [m for m in model.modules() if isinstance(m, AutoBitLinear)]
        assert len(lin) == 7 * model.config.num_hidden_layers, "transformers did not apply BitNet quantization"
        assert all(m.online_quant == (q["quantization_mode"] == "online") for m in lin)
        if q["quantization_mode"] == "offline":
            assert all(set(m.weight.unique().tolist()) <= {-1.0, 0.0, 1.0} for m in lin)
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS])).logits[0].float()
    out = {"tokens": TOKENS, "shape": list(logits.shape), "logits": [float(x) for x in logits.flatten()]}
    json.dump(out, open(os.path.join(HERE, f"{name}.logits.json"), "w"))
    print(f"{name}: logits {tuple(logits.shape)}, |logits| max {logits.abs().max():.4f}")
    return logits


def weight_quant(w):
    """transformers' WeightQuant (integrations/bitnet.py), split into trits and the dequant scale."""
    w = w.float()
    scale = 1.0 / w.abs().mean().clamp_(min=1e-5)
    trits = (w * scale).round().clamp(-1, 1)
    return trits, scale


def make_packed(src, name):
    """tiny_a's masters → transformers' offline form (pack_weights + weight_scale)."""
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sd = load_file(os.path.join(src, "model.safetensors"))
    out = {}
    for k, v in sd.items():
        if k.endswith(".weight") and k.split(".")[-2] in LINEARS:
            trits, scale = weight_quant(v)
            out[k] = pack_weights(trits.clone())
            out[k[: -len(".weight")] + ".weight_scale"] = (1.0 / scale).reshape(1).to(torch.bfloat16)
        else:
            out[k] = v
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["quantization_config"] = OFFLINE
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    return d


def bitnet(name, seed, dtype, **kw):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = BitNetConfig(hidden_act="relu2", num_hidden_layers=2, bos_token_id=1, eos_token_id=2, **kw)
    model = BitNetForCausalLM(cfg)
    randomize_norms(model, gen)
    return save_dir(model, name, dtype, ONLINE)


def tiny_tokenizer(d):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    import contextlib, io

    with contextlib.redirect_stdout(io.StringIO()):
        import this
    text = codecs.decode(this.s, "rot13").splitlines()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text, trainer)
    tok.save(os.path.join(d, "tokenizer.json"))
    tc = {
        "add_bos_token": False,
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
    }
    json.dump(tc, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
    samples = ["Beautiful is better than ugly.", "Hello world! 123", "  multiple   spaces\n"]
    return tok.get_vocab_size(), {s: tok.encode(s).ids for s in samples}


def llama(name, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        vocab_size=320,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    model = LlamaForCausalLM(cfg)
    randomize_norms(model, gen)
    d = save_dir(model, name, torch.float16, None, extra_files=("tokenizer.json", "tokenizer_config.json"))
    n, samples = tiny_tokenizer(d)
    assert n <= 320
    return d, samples


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}")
    a = bitnet(
        "tiny_a",
        1,
        torch.bfloat16,
        hidden_size=64,
        intermediate_size=160,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    b = bitnet(
        "tiny_b",
        2,
        torch.float32,
        hidden_size=72,
        intermediate_size=100,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=300,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    ap = make_packed(a, "tiny_a_packed")
    la = golden_logits(BitNetForCausalLM, a, "tiny_a")
    lap = golden_logits(BitNetForCausalLM, ap, "tiny_a_packed")
    golden_logits(BitNetForCausalLM, b, "tiny_b")
    print(f"tiny_a vs tiny_a_packed (bf16 weight_scale): max |diff| {(la - lap).abs().max():.3e}")
    l, samples = llama("llama_tiny", 3)
    golden_logits(LlamaForCausalLM, l, "llama_tiny")

    sd = load_file(os.path.join(b, "model.safetensors"))
    trits = {}
    for k in ("model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.down_proj.weight"):
        t, s = weight_quant(sd[k])
        trits[k] = {"shape": list(t.shape), "alpha": float(1.0 / s), "trits": [int(x) for x in t.flatten()]}
    json.dump({"tokenizer_samples": samples, "ternarized": trits}, open(os.path.join(HERE, "trits.json"), "w"))
    for d in (a, ap, b, l):
        print(d, sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)), "bytes")


if __name__ == "__main__":
    main()
