// The body of fuzz target `hf_config`, shared by fuzz/fuzz_targets/hf_config.rs (via include!)
// and the stable corpus replay in tests/tests/fuzz_regressions.rs.
//
// The input is a `config.json` for the tiny Llama checkpoint of tests/golden/bitnet_hf/llama_tiny
// (its safetensors and tokenizer files are linked into a private directory): every size read from
// it must be checked against the tensors present and tern's maxima before anything is sized from
// it. A first byte < 0x80 makes the input a list of (key, value) edits applied to the real
// config (structure-aware: the fields that size things, set to absurd or odd values); otherwise
// the rest is the raw file. Nothing may panic, abort, hang or exceed the RSS limit.

const KEYS: [&str; 12] = [
    "vocab_size",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rope_theta",
    "rms_norm_eps",
    "max_position_embeddings",
    "bos_token_id",
    "tie_word_embeddings",
];

const VALUES: [&str; 14] = [
    "0",
    "1",
    "2",
    "320",
    "4294967295",
    "4294967296",
    "4000000",
    "1e39",
    "-1",
    "1e-50",
    "null",
    "\"x\"",
    "[1, 2]",
    "true",
];

fn golden_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/bitnet_hf/llama_tiny")
}

/// The config.json text `data` describes.
pub fn config(data: &[u8]) -> String {
    match data.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            let base = std::fs::read_to_string(golden_dir().join("config.json")).unwrap_or_default();
            let mut v: serde_json::Value =
                serde_json::from_str(&base).unwrap_or(serde_json::Value::Null);
            for pair in rest.chunks(2) {
                let k = KEYS[usize::from(pair[0]) % KEYS.len()];
                let x = VALUES[usize::from(pair.get(1).copied().unwrap_or(0)) % VALUES.len()];
                if let (Some(obj), Ok(val)) = (v.as_object_mut(), serde_json::from_str(x)) {
                    obj.insert(k.to_string(), val);
                }
            }
            v.to_string()
        }
        Some((_, rest)) => String::from_utf8_lossy(rest).into_owned(),
        None => String::new(),
    }
}

/// Read the model directory's metadata with `data`'s config.json; errors are fine.
pub fn run(data: &[u8]) {
    thread_local! {
        static DIR: std::path::PathBuf = {
            let d = std::env::temp_dir().join(format!("tern-fuzz-hf-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&d);
            for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
                let _ = std::fs::copy(golden_dir().join(f), d.join(f));
            }
            d
        };
    }
    DIR.with(|d| {
        if std::fs::write(d.join("config.json"), config(data)).is_ok() {
            let _ = tern_import::hf::hf_meta(d, &tern_import::PackOptions::default());
        }
    });
}
