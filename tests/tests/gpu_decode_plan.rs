//! Dispatches per decoded token (issue 15): the recorded decode step (one token, last logits) of a
//! random BitNet b1.58 model (A8 and a4.8) and of SmolLM2-135M stays within a per-layer budget,
//! checked on lavapipe in CI. The count is the one `tern bench --json` prints
//! (`dispatches_per_token`, `SessionReport::dispatches_per_token`).
//!
//! h-rope (issue 15): q/k/v as one GEMV over the stacked rows, RoPE fused with the f32/f16 KV
//! store (one dispatch for rope ×2 + store ×2), and no attention combine while the context is
//! within `SHORT_ATTENTION_KEYS` (the count below is at depth 0; past it one combine per layer
//! returns, `bitnet_long_context_plan_splits_attention`): measured (lavapipe) SmolLM2 273
//! (9 per layer; 183 and 213 past 128 keys since its float norms run in the ggml GEMVs'
//! prologue, `ggml_gemv.wgsl`), the random BitNet 25 (A8 and a4.8; 17 and 19 with the fused norm prologue).
//!
//! Budget: `PER_LAYER · n_layer + HEAD`, where HEAD (= 4) covers what runs once per step outside the
//! layers (embedding lookup, output norm, the head's GEMV, at most one more binding part of the
//! head). Before issue 15 a BitNet layer took 20 dispatches and a SmolLM2 layer 18 (607 and 543
//! per token with 30 layers); the issue asks for half (≤ 300 / ≤ 270). BitNet A8: 8 per layer since
//! h-pro (every ternary GEMV of an A8 model computes its input's RMSNorm + quantization in its
//! prologue by default, `ternary_gemv_dec_norm.wgsl`: the random model measures 17 = 2 · 8 + 1 on
//! lavapipe, its 160-column down projection is not the decode kernel's shape; the 2B4T shape 187
//! on an H100). a4.8: 10 until h-topk (issue 13), now 8 too: its norms fuse by default, the
//! attention output's TopK 50% input included (the decode GEMV's TopK prologue).
//! `GpuTuning::fuse_norm` (`TERN_GPU_FUSE_NORM`) picks which norms fuse: the tests here parse
//! each mode as the CLI does (`GpuTuning::from_lookup`) and pass it in `LoadOptions::gpu`.

use std::path::{Path, PathBuf};

use tern_engine::{Device, GpuTuning, LoadOptions, Model, Session};
use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_tests::{golden, nmse, scratch};

/// Dispatches outside the layers (see the module doc).
const HEAD: usize = 4;

/// The tuning the environment variable `var` set to `value` gives (`None`: unset, the defaults),
/// parsed as the CLI parses it.
fn tuning(var: &str, value: Option<&str>) -> GpuTuning {
    GpuTuning::from_lookup(|n| value.filter(|_| n == var).map(str::to_string)).unwrap()
}

fn open_gpu(path: &Path) -> Option<Model> {
    open_gpu_with(path, GpuTuning::default())
}

fn open_gpu_with(path: &Path, gpu: GpuTuning) -> Option<Model> {
    let opts = LoadOptions {
        device: Device::Gpu,
        max_memory: None,
        gpu,
        ..Default::default()
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(e)
            if matches!(e.backend_error(), Some(tern_gpu::GpuError::NoAdapter(_)))
                && !tern_tests::gpu_required("gpu_decode_plan") =>
        {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("loading {} on the GPU: {e}", path.display()),
    }
}

/// (dispatches per decoded token, layers) of `path` on the GPU under `gpu`.
fn dispatches(path: &Path, gpu: GpuTuning) -> Option<(usize, usize)> {
    let m = open_gpu_with(path, gpu)?;
    let layers = m.meta().hparams.n_layer as usize;
    let mut s = Session::new(&m, 1024).unwrap();
    let d = s.report().unwrap().dispatches_per_token.unwrap();
    Some((d, layers))
}

fn check(name: &str, path: &Path, per_layer: usize) {
    let Some((d, layers)) = dispatches(path, tuning("TERN_GPU_FUSE_NORM", None)) else {
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
    // q/k/v stacked + RoPE fused with the store (h-rope), gate/up pairs (h-cat), the q/k/v norm in
    // the GEMV's prologue (h-pro)
    check("bitnet 2bit a8", &bitnet("a8", &PackOptions::default()), 8);
    let a48 = PackOptions {
        activations: Some(tern_format::ActivationScheme::A4_8),
        ..PackOptions::default()
    };
    // a4.8 too since h-topk: its TopK input (the attention output's) fuses like the others
    check("bitnet 2bit a4.8", &bitnet("a48", &a48), 8);
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
    // the float norms in the ggml GEMVs' prologue: 6 per layer (norm-free q/k/v and gate/up
    // dispatches, RoPE + store, attention, o and down with the residual add in their epilogue)
    check("smollm2-135m", &path, 6);
    // past SHORT_ATTENTION_KEYS positions (TERN_GPU_ATTN_SHORT=0: every plan split, so the
    // count needs no long prefill on lavapipe): one combine more per layer, within the issue's
    // ≤ 270 (half of the 543 before issue 15)
    let long = dispatches(&path, tuning("TERN_GPU_ATTN_SHORT", Some("0")));
    let Some((d, layers)) = long else {
        return;
    };
    eprintln!("smollm2-135m, split attention: {d} dispatches per decoded token");
    assert!(d <= (7 * layers + HEAD).min(270), "split attention: {d}");
}

/// Past `SHORT_ATTENTION_KEYS` positions the session runs the plan whose attention is split:
/// one combine dispatch more per layer (on lavapipe too: a few splits), and the logits still
/// equal the CPU reference's (A8 bound of gpu_engine).
#[test]
fn bitnet_long_context_plan_splits_attention() {
    let path = bitnet("long", &PackOptions::default());
    let cpu = Model::open(&path).unwrap();
    let Some(gpu) = open_gpu(&path) else {
        return;
    };
    let layers = gpu.meta().hparams.n_layer as usize;
    let vocab = cpu.n_vocab() as u32;
    let n = tern_gpu::SHORT_ATTENTION_KEYS as u32 + 72;
    let toks: Vec<u32> = (0..n).map(|i| (i * 7 + 3) % vocab).collect();
    let (mut sc, mut sg) = (
        Session::new(&cpu, 1024).unwrap(),
        Session::new(&gpu, 1024).unwrap(),
    );
    let short = sg.report().unwrap().dispatches_per_token.unwrap();
    sc.eval(&toks).unwrap();
    sg.eval(&toks).unwrap();
    let long = sg.report().unwrap().dispatches_per_token.unwrap();
    eprintln!("bitnet: {short} dispatches per token at depth 0, {long} at depth {n}");
    assert_eq!(
        long,
        short + layers,
        "one combine per layer past the threshold"
    );
    let (want, got) = (sc.eval(&[5]).unwrap(), sg.eval(&[5]).unwrap());
    let e = nmse(&got, &want);
    assert!(e <= 1e-11, "decode at depth {n}: NMSE {e}");
}

/// NMSE of `a` against `b`.
/// The fused norm prologue end to end, in every `TERN_GPU_FUSE_NORM` mode (`0` none, `qkv`,
/// `attn`, `all`: the decode kernel's fused variant where it takes the shape; `1`: the wide kernel
/// elsewhere too; unset: `all`; `notopk`: `all` but a4.8's TopK input): token-by-token logits of the random BitNet models (A8 and a4.8,
/// 2-bit and base-3) against the CPU reference, with gpu_engine's bounds (A8 1e-11, a4.8 1e-6),
/// and on 2-bit fewer dispatches with every mode that fuses more (base-3 and the down projection's
/// 160 columns are not the decode kernel's shapes: only `1` fuses them).
#[test]
fn bitnet_fused_norm_decode_matches_cpu() {
    let tokens: Vec<u32> = vec![1, 17, 42, 5, 99, 3, 250, 7];
    for (tag, acts, bound) in [
        ("a8", None, 1e-11),
        ("a48", Some(tern_format::ActivationScheme::A4_8), 1e-6),
    ] {
        for (lt, layout) in [
            ("2bit", tern_format::TernaryLayout::Bits2),
            ("base3", tern_format::TernaryLayout::Base3),
        ] {
            let opts = PackOptions {
                ternary: layout,
                activations: acts,
                ..PackOptions::default()
            };
            let path = bitnet(&format!("fused_{tag}_{lt}"), &opts);
            let cpu = Model::open(&path).unwrap();
            let vocab = cpu.n_vocab() as u32;
            let toks: Vec<u32> = tokens.iter().map(|t| t % vocab).collect();
            let mut sc = Session::new(&cpu, 16).unwrap();
            let mut want = Vec::new();
            for &t in &toks {
                want.extend(sc.eval(&[t]).unwrap());
            }
            let mut counts = Vec::new();
            for mode in [
                Some("0"),
                Some("qkv"),
                Some("attn"),
                Some("all"),
                Some("1"),
                None,
                Some("notopk"),
            ] {
                let run = || -> Option<(f64, usize)> {
                    let gpu = open_gpu_with(&path, tuning("TERN_GPU_FUSE_NORM", mode))?;
                    let mut sg = Session::new(&gpu, 16).unwrap();
                    let mut got = Vec::new();
                    for &t in &toks {
                        got.extend(sg.eval(&[t]).unwrap());
                    }
                    let d = sg.report().unwrap().dispatches_per_token.unwrap();
                    Some((nmse(&got, &want), d))
                };
                let Some((e, d)) = run() else {
                    return;
                };
                let mode = mode.unwrap_or("default");
                eprintln!(
                    "fused norm {mode} {tag} {lt}: decode NMSE {e:.2e}, {d} dispatches per token"
                );
                assert!(e <= bound, "{mode} {tag} {lt}: NMSE {e}");
                counts.push(d);
            }
            assert!(
                counts[..5].windows(2).all(|w| w[1] <= w[0]),
                "{tag} {lt}: {counts:?}"
            );
            // the default: `all` (A8, and a4.8 since h-topk)
            assert_eq!(counts[5], counts[3], "{tag} {lt}: default {counts:?}");
            // `notopk`: `all` but a4.8's TopK input (the attention output), one dispatch more per
            // layer where the decode kernel takes it; nothing else differs
            if acts.is_some() && lt == "2bit" {
                assert!(
                    counts[6] > counts[3],
                    "{tag} {lt}: TopK not fused: {counts:?}"
                );
            } else {
                assert_eq!(counts[6], counts[3], "{tag} {lt}: {counts:?}");
            }
            assert!(
                counts[4] < counts[0],
                "{tag} {lt}: `1` fuses nothing: {counts:?}"
            );
            if lt == "2bit" {
                // each mode fuses more: q/k/v, then the attention output (A8), gate/up
                assert!(counts[1] < counts[0], "{tag} {lt}: {counts:?}");
                assert!(counts[3] < counts[2], "{tag} {lt}: {counts:?}");
            }
        }
    }
}
