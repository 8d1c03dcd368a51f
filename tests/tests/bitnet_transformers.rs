//! tern's CPU reference forward on Hugging Face checkpoints imported with `tern_import::hf`, against
//! the logits transformers computed for the same tokens (`tests/golden/bitnet_hf`, made by
//! `make_golden.py`: float32, eager attention, BitNet's online / offline quantization applied by
//! transformers' `AutoBitLinear`).
//!
//! Score: NMSE = Σ(a−b)² / Σb² over all `[n_tokens, vocab]` logits, ≤ 1e-4. Both sides compute in
//! f32 from identical weights (bf16/f16 sources widen exactly; trits and scales are the same, see
//! `hf_import.rs`), so what remains is summation order — plus, for BitNet, an occasional int8
//! activation that rounds the other way at a .5 boundary, which moves one input of one row by one
//! quantization step (≤ 1/127 of the row's absmax), far below 1e-4 of the logits' energy.

use std::path::Path;

use serde_json::Value;
use tern_format::TernFile;
use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_reference::{KvCache, LogitsWanted, Model};
use tern_tests::{golden, nmse, scratch};

struct Golden {
    tokens: Vec<u32>,
    shape: [usize; 2],
    logits: Vec<f32>,
}

fn load_golden(name: &str) -> Golden {
    let path = golden(&format!("bitnet_hf/{name}.logits.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let tokens = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let s = v["shape"].as_array().unwrap();
    let shape = [
        s[0].as_u64().unwrap() as usize,
        s[1].as_u64().unwrap() as usize,
    ];
    let logits: Vec<f32> = v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(logits.len(), shape[0] * shape[1]);
    Golden {
        tokens,
        shape,
        logits,
    }
}

fn import(dir: &Path, name: &str, opts: &PackOptions) -> TernFile {
    let out = scratch(&format!("hf_fwd_{name}")).join("model.tern");
    import_hf_dir(dir, &out, opts, &mut |_, _, _| {}).expect("import");
    TernFile::open(&out).expect("open")
}

/// Prefill all tokens at once, and (a second cache) one token at a time: both must match.
fn check(name: &str, opts: &PackOptions) -> f64 {
    let g = load_golden(name);
    let file = import(&golden(&format!("bitnet_hf/{name}")), name, opts);
    let model = Model::load(&file).expect("load model");
    let mut cache = KvCache::new(&model, 64).unwrap();
    let logits = model
        .forward(&g.tokens, &mut cache, LogitsWanted::All)
        .expect("forward");
    assert_eq!(logits.len(), g.shape[0] * g.shape[1]);
    let e = nmse(&logits, &g.logits);
    let mut cache1 = KvCache::new(&model, 64).unwrap();
    let mut stepwise = Vec::new();
    for &t in &g.tokens {
        stepwise.extend(
            model
                .forward(&[t], &mut cache1, LogitsWanted::Last)
                .unwrap(),
        );
    }
    assert_eq!(
        stepwise, logits,
        "{name}: token-by-token decode differs from batched prefill"
    );
    // The argmax agrees wherever transformers' top logit is clear of the runner-up.
    let v = g.shape[1];
    for (i, (a, b)) in logits.chunks(v).zip(g.logits.chunks(v)).enumerate() {
        let top = |r: &[f32]| {
            r.iter()
                .enumerate()
                .fold((0, f32::MIN), |m, (j, &x)| if x > m.1 { (j, x) } else { m })
        };
        let (jb, xb) = top(b);
        let second = b
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != jb)
            .fold(f32::MIN, |m, (_, &x)| m.max(x));
        if xb - second > 1e-3 {
            assert_eq!(top(a).0, jb, "{name}: argmax of row {i}");
        }
    }
    println!("{name}: NMSE {e:.3e} over {:?}", g.shape);
    e
}

const TOL: f64 = 1e-4;

#[test]
fn bitnet_bf16_masters_tied_matches_transformers() {
    let e = check("tiny_a", &PackOptions::default());
    assert!(e <= TOL, "tiny_a NMSE {e:e} > {TOL:e}");
}

#[test]
fn bitnet_packed_offline_matches_transformers() {
    let e = check("tiny_a_packed", &PackOptions::default());
    assert!(e <= TOL, "tiny_a_packed NMSE {e:e} > {TOL:e}");
}

#[test]
fn bitnet_f32_masters_odd_sizes_matches_transformers() {
    let e = check("tiny_b", &PackOptions::default());
    assert!(e <= TOL, "tiny_b NMSE {e:e} > {TOL:e}");
}

/// The base-3 ternary layout decodes to the same trits: same logits bit for bit.
#[test]
fn bitnet_base3_layout_same_logits() {
    let g = load_golden("tiny_b");
    let run = |opts: &PackOptions, tag: &str| {
        let f = import(&golden("bitnet_hf/tiny_b"), tag, opts);
        let m = Model::load(&f).unwrap();
        let mut c = KvCache::new(&m, 16).unwrap();
        m.forward(&g.tokens, &mut c, LogitsWanted::All).unwrap()
    };
    let base3 = PackOptions {
        ternary: tern_format::TernaryLayout::Base3,
        ..PackOptions::default()
    };
    assert_eq!(run(&PackOptions::default(), "b3_ref"), run(&base3, "b3"));
}

/// A llama checkpoint (f16, tied, GQA 6:2, head_dim 8) through the same importer: checks NeoX
/// RoPE pairing on HF q/k weights and SwiGLU with float activations.
#[test]
fn llama_f16_matches_transformers() {
    let e = check("llama_tiny", &PackOptions::default());
    assert!(e <= TOL, "llama_tiny NMSE {e:e} > {TOL:e}");
}
