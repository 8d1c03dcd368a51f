// The body of fuzz target `gguf_parse`, shared by fuzz/fuzz_targets/gguf_parse.rs (via include!) and the
// stable corpus replay in tests/tests/fuzz_regressions.rs, so the two cannot drift apart.
use tern_format::{ggml, Encoding};
use tern_import::gguf::{GgmlType, GgufFile};

/// One fuzz input.
pub fn run(data: &[u8]) {
    let Ok(g) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let keys: Vec<String> = g.metadata().map(|(k, _)| k.to_string()).collect();
    for k in &keys {
        let _ = g.opt_u32(k);
        let _ = g.opt_f32(k);
        let _ = g.opt_str(k);
        let _ = g.opt_bool(k);
        let _ = g.get_str_array(k);
        let _ = g.get_i32_array(k);
        let _ = g.get_f32_array(k);
    }
    for t in g.tensors() {
        let _ = t.shape();
        let Ok(bytes) = g.tensor_bytes(t) else {
            continue;
        };
        let Ok(n) = usize::try_from(t.n_elements()) else {
            continue;
        };
        if let Some(bt) = t.ggml_type.block_type() {
            let _ = ggml::dequantize(bt, bytes, n);
            let _ = match bt {
                ggml::BlockType::Tq1_0 => ggml::tq1_0_to_trits(bytes, n).map(|_| ()),
                ggml::BlockType::Tq2_0 => ggml::tq2_0_to_trits(bytes, n).map(|_| ()),
                _ => Ok(()),
            };
            continue;
        }
        let shape = t.shape();
        let _ = match t.ggml_type {
            GgmlType::F32 => Encoding::F32.decode_f32(&shape, bytes).map(|_| ()),
            GgmlType::F16 => Encoding::F16.decode_f32(&shape, bytes).map(|_| ()),
            GgmlType::BF16 => Encoding::Bf16.decode_f32(&shape, bytes).map(|_| ()),
            GgmlType::I2_S => ggml::i2s_to_trits(bytes, n).map(|_| ()),
            _ => Ok(()),
        };
    }
}
