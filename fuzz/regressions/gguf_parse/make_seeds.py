# Seed corpus for fuzz/fuzz_targets/gguf_parse.rs: small GGUFs covering every metadata value type
# and every tensor type tern decodes, written by llama.cpp's gguf-py (plus a hand-written bitnet-25
# I2_S file, since gguf-py has no type 36). Usage: python3 make_seeds.py   (writes next to itself)
import os, struct
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(1)

def raw(w, name, ty, ne, nbytes):
    data = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    if ty in (T.Q8_0, T.Q4_0, T.Q4_1):  # keep the f16 scales finite: d = 0x2c00-ish
        blk = {T.Q8_0: 34, T.Q4_0: 18, T.Q4_1: 20}[ty]
        data.reshape(-1, blk)[:, 1] = 0x2c
        if ty == T.Q4_1:
            data.reshape(-1, blk)[:, 3] = 0x2c
    if ty in (T.TQ1_0, T.TQ2_0):
        blk = {T.TQ1_0: 54, T.TQ2_0: 66}[ty]
        data.reshape(-1, blk)[:, blk - 1] = 0x2c
        if ty == T.TQ2_0:  # codes 0..2 only (3 is never written)
            c = rng.integers(0, 3, size=(nbytes // blk, 64, 4), dtype=np.uint8)
            data.reshape(-1, blk)[:, :64] = c[..., 0] | c[..., 1] << 2 | c[..., 2] << 4 | c[..., 3] << 6
    # gguf-py takes the byte shape in PyTorch order with the last dim in bytes
    w.add_tensor(name, data.reshape(list(reversed(ne[1:])) + [-1]) if len(ne) > 1 else data, raw_dtype=ty)

w = gguf.GGUFWriter(os.path.join(HERE, "all_types.gguf"), "llama")
w.add_uint8("t.u8", 7); w.add_int8("t.i8", -7); w.add_uint16("t.u16", 700); w.add_int16("t.i16", -700)
w.add_uint32("t.u32", 70000); w.add_int32("t.i32", -70000); w.add_float32("t.f32", 0.5); w.add_bool("t.bool", True)
w.add_string("t.str", "héllo"); w.add_uint64("t.u64", 1 << 40); w.add_int64("t.i64", -(1 << 40)); w.add_float64("t.f64", 0.25)
w.add_array("t.arr_i32", [1, 2, 3]); w.add_array("t.arr_str", ["a", "bc", ""]); w.add_array("t.arr_f32", [0.5, 1.5])
w.add_array("t.arr_empty", [])
w.add_uint32("llama.block_count", 1)
w.add_tensor("f32", np.arange(4, dtype=np.float32))
w.add_tensor("f16", np.arange(6, dtype=np.float16).reshape(2, 3))
raw(w, "q8_0", T.Q8_0, [64, 2], 34 * 4)
raw(w, "q4_0", T.Q4_0, [32], 18)
raw(w, "q4_1", T.Q4_1, [32, 3], 20 * 3)
raw(w, "tq1_0", T.TQ1_0, [256], 54)
raw(w, "tq2_0", T.TQ2_0, [256, 2], 66 * 2)
raw(w, "bf16", T.BF16, [5], 10)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

w = gguf.GGUFWriter(os.path.join(HERE, "no_tensors.gguf"), "llama")
w.add_string("general.name", "empty"); w.add_uint32("general.alignment", 64)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

# bitnet-25 with one I2_S tensor (type 36): 128 elements → 32 code bytes + 32-byte tail (f32 scale)
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = s("general.architecture") + struct.pack('<I', 8) + s("bitnet-25")
codes = bytes(int(a) << 6 | int(b) << 4 | int(c) << 2 | int(d) for a, b, c, d in rng.integers(0, 3, size=(32, 4)))
data = codes + struct.pack('<f', 0.02) + bytes(28)
info = s("w") + struct.pack('<I', 2) + struct.pack('<QQ', 64, 2) + struct.pack('<IQ', 36, 0)
head = b"GGUF" + struct.pack('<IQQ', 3, 1, 1) + kv + info
head += bytes((32 - len(head) % 32) % 32)
open(os.path.join(HERE, "bitnet25_i2s.gguf"), "wb").write(head + data)

full = open(os.path.join(HERE, "all_types.gguf"), "rb").read()
open(os.path.join(HERE, "truncated.gguf"), "wb").write(full[: len(full) // 2])
open(os.path.join(HERE, "big_endian_version.gguf"), "wb").write(full[:4] + struct.pack('>I', 3) + full[8:200])
print("ok")
