//! Dispatches per decoded token (issue 15): the recorded decode step (one token, last logits) of a
//! random BitNet b1.58 model (A8 and a4.8) and of SmolLM2-135M stays within a per-layer budget,
//! checked on lavapipe in CI. The count is the one `tern bench --json` prints
//! (`dispatches_per_token`, `SessionReport::dispatches_per_token`).
//!
//! Budget: `PER_LAYER · n_layer + HEAD`, where HEAD (= 4) covers what runs once per step outside the
//! layers (embedding lookup, output norm, the head's GEMV, at most one more binding part of the
//! head). Before issue 15 a BitNet layer took 20 dispatches and a SmolLM2 layer 18 (607 and 543
//! per token with 30 layers); the issue asks for half (≤ 300 / ≤ 270). Measured now
//! (lavapipe, this commit): the 2-layer random BitNet 27 (A8) and 29 (a4.8) per token, SmolLM2
//! 423 (14 per layer; 543 before) — the norm and its
//! quantization run in the ternary GEMV's prologue, the residual adds and the GLU in the GEMVs'
//! epilogues. What remains above 10: RoPE as two passes of its own (fused into the KV store and
//! attention on the KV branch), q/k/v and gate/up as separate GEMVs, and (SmolLM2) the two float
//! RMSNorms. The bounds below are those measured counts, so any regression fails; tighten them as
//! those land.

use std::path::{Path, PathBuf};

use tern_engine::{Device, LoadOptions, Model, Session};
use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_tests::{golden, scratch};

/// Dispatches outside the layers (see the module doc).
const HEAD: usize = 4;

fn open_gpu(path: &Path) -> Option<Model> {
    let opts = LoadOptions {
        device: Device::Gpu,
        max_memory: None,
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(tern_engine::EngineError::Gpu(tern_gpu::GpuError::NoAdapter(e)))
            if !tern_tests::gpu_required("gpu_decode_plan") =>
        {
            eprintln!("skipping: no GPU adapter{e}");
            None
        }
        Err(e) => panic!("loading {} on the GPU: {e}", path.display()),
    }
}

/// (dispatches per decoded token, layers) of `path` on the GPU.
fn dispatches(path: &Path) -> Option<(usize, usize)> {
    let m = open_gpu(path)?;
    let layers = m.meta().hparams.n_layer as usize;
    let mut s = Session::new(&m, 1024).unwrap();
    let d = s.report().unwrap().dispatches_per_token.unwrap();
    Some((d, layers))
}

fn check(name: &str, path: &Path, per_layer: usize) {
    let Some((d, layers)) = dispatches(path) else {
        return;
    };
    let bound = per_layer * layers + HEAD;
    eprintln!(
        "{name}: {d} dispatches per decoded token, {layers} layers ({:.1} per layer), bound {bound}",
        d as f64 / layers as f64
    );
    assert!(d <= bound, "{name}: {d} dispatches per token > {bound}");
}

fn bitnet(tag: &str, opts: &PackOptions) -> PathBuf {
    let out = scratch(&format!("gpu_decode_plan_{tag}")).join("model.tern");
    import_hf_dir(&golden("bitnet_hf/tiny_a"), &out, opts, &mut |_, _, _| {}).expect("import");
    out
}

#[test]
fn bitnet_decode_dispatches() {
    check("bitnet 2bit a8", &bitnet("a8", &PackOptions::default()), 13);
    let a48 = PackOptions {
        activations: Some(tern_format::ActivationScheme::A4_8),
        ..PackOptions::default()
    };
    check("bitnet 2bit a4.8", &bitnet("a48", &a48), 14);
}

#[test]
fn smollm2_decode_dispatches() {
    let Some(home) = std::env::var_os("HOME") else {
        tern_tests::skip_or_fail("gpu_decode_plan", "no HOME");
        return;
    };
    let path = Path::new(&home).join(".cache/tern/SmolLM2-135M-Instruct.tern");
    if !path.exists() {
        let why = format!("{} missing", path.display());
        tern_tests::skip_or_fail("gpu_decode_plan", &why);
        return;
    }
    check("smollm2-135m", &path, 14);
}
