//! Gate/up as one weight of interleaved row pairs (issue 15, `tern_gpu::model::ternary_gate_up` /
//! `ggml_gate_up`, the default) against gate and up kept as stored (`TERN_GPU_GATE_UP=split`, the
//! graph before the change) end to end on the GPU: the same logits bit for bit, through a prefill
//! (the GEMM over the pairs + `glu_pairs`) and decode steps (one GEMV with the GLU epilogue), on the
//! random BitNet models (2-bit and base-3, A8 and a4.8) and SmolLM2-135M (Q4_1/Q8_0 ggml GEMVs).
//! The switch is `GpuTuning::gate_up` (`TERN_GPU_GATE_UP` at the CLI's edge), passed in
//! `LoadOptions::gpu`.

use std::path::{Path, PathBuf};

use tern_engine::{Device, GpuTuning, LoadOptions, Model, Session};
use tern_gpu::GateUpLayout;
use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_tests::{golden, scratch};

fn open_gpu(path: &Path, split: bool) -> Option<Model> {
    let gate_up = if split {
        GateUpLayout::Split
    } else {
        GateUpLayout::Paired
    };
    let opts = LoadOptions {
        device: Device::Gpu,
        max_memory: None,
        gpu: GpuTuning {
            gate_up,
            ..GpuTuning::default()
        },
        ..Default::default()
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(e)
            if matches!(e.backend_error(), Some(tern_gpu::GpuError::NoAdapter(_)))
                && !tern_tests::gpu_required("gpu_gate_up") =>
        {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("loading {} on the GPU: {e}", path.display()),
    }
}

/// Logits of a `prefill`-token prefill (≥ 4: the GEMM path), then of each further token
/// decoded, as bits.
fn run(m: &Model, tokens: &[u32], prefill: usize) -> Vec<u32> {
    let mut s = Session::new(m, 32).unwrap();
    let (pre, dec) = tokens.split_at(prefill);
    let mut out: Vec<u32> = s.eval(pre).unwrap().iter().map(|v| v.to_bits()).collect();
    for &t in dec {
        out.extend(s.eval(&[t]).unwrap().iter().map(|v| v.to_bits()));
    }
    out
}

/// `tokens`: the first `prefill` as one batch, the rest one at a time.
fn same_bits(name: &str, path: &Path, tokens: &[u32], prefill: usize) -> bool {
    let (Some(pairs), Some(split)) = (open_gpu(path, false), open_gpu(path, true)) else {
        return false;
    };
    let vocab = pairs.n_vocab() as u32;
    let toks: Vec<u32> = tokens.iter().map(|t| t % vocab).collect();
    let (a, b) = (run(&pairs, &toks, prefill), run(&split, &toks, prefill));
    let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    eprintln!("{name}: {} logits, {differ} differ", a.len());
    assert_eq!(a.len(), b.len());
    assert_eq!(differ, 0, "{name}: gate/up pairs change {differ} logits");
    true
}

fn bitnet(tag: &str, opts: &PackOptions) -> PathBuf {
    let out = scratch(&format!("gpu_gate_up_{tag}")).join("model.tern");
    import_hf_dir(&golden("bitnet_hf/tiny_a"), &out, opts, &mut |_, _, _| {}).expect("import");
    out
}

#[test]
fn gate_up_pairs_equal_split_bit_for_bit() {
    for (tag, acts) in [
        ("a8", None),
        ("a48", Some(tern_format::ActivationScheme::A4_8)),
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
            let path = bitnet(&format!("{tag}_{lt}"), &opts);
            let toks = [1, 17, 42, 5, 99, 3, 250, 7, 11];
            if !same_bits(&format!("bitnet {tag} {lt}"), &path, &toks, 6) {
                return;
            }
        }
    }
    let Some(home) = std::env::var_os("HOME") else {
        return;
    };
    let smol = Path::new(&home).join(".cache/tern/SmolLM2-135M-Instruct.tern");
    if smol.exists() {
        // lavapipe runs SmolLM2 at ~1 token/s: a 4-token prefill and one decoded token
        same_bits("smollm2-135m", &smol, &[1, 17, 42, 5, 99], 4);
    } else {
        tern_tests::skip_or_fail("gpu_gate_up", &format!("{} missing", smol.display()));
    }
}
