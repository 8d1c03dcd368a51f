//! Issue 27: one architecture description, [`ModelSpec`], built once from the file and read by
//! both forward passes.
//!
//! * Tiny llama (f32, untied head) and BitNet (f32 weights, sub-norms, ReLU², A8) files: the spec
//!   each backend holds after loading is the one built from the file (the CPU always; the GPU
//!   where an adapter is, lavapipe in CI), and today's families need nothing beyond the
//!   backends' capabilities.
//! * Every feature outside a backend's capabilities, turned on in a spec, is refused by that
//!   backend's check (the one its loader runs before reading a tensor) with the typed
//!   `FormatError::UnsupportedModel` naming the feature and its layer.

use std::path::Path;

use tern_format::spec::{Activation, QkNorm, RopeScaling};
use tern_format::{
    ActivationScheme, Arch, Encoding, Feature, FfnAct, FormatError, HParams, ModelMeta, ModelSpec,
    Provenance, TernFile, TernWriter, Unsupported,
};
use tern_gpu::{GpuError, GpuModel};
use tern_reference::{Model, ReferenceError};

fn hparams(bitnet: bool) -> HParams {
    HParams {
        n_vocab: 32,
        n_embd: 32,
        n_layer: 4,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 8,
        n_ff: 64,
        n_ctx_train: 256,
        rope_theta: 10000.0,
        rope_dim: 8,
        rope_neox: bitnet,
        rms_eps: 1e-5,
        ffn_act: if bitnet { FfnAct::Relu2 } else { FfnAct::Silu },
        tied_embeddings: bitnet,
        sub_norms: bitnet,
    }
}

/// A tiny model of f32 tensors as `hparams(bitnet)` says, opened.
fn write_model(dir: &Path, bitnet: bool) -> TernFile {
    let hp = hparams(bitnet);
    let meta = ModelMeta {
        arch: if bitnet { Arch::Bitnet } else { Arch::Llama },
        hparams: hp.clone(),
        tokenizer: None,
        activations: if bitnet {
            ActivationScheme::A8
        } else {
            ActivationScheme::FLOAT
        },
        provenance: Provenance::default(),
        extra: Default::default(),
    };
    let path = dir.join(if bitnet { "bitnet.tern" } else { "llama.tern" });
    let mut w = TernWriter::create(&path, meta).unwrap();
    let mut seed = 0x9e37_79b9u32;
    let mut add = |w: &mut TernWriter, name: String, shape: &[u64]| {
        let n: u64 = shape.iter().product();
        let bytes: Vec<u8> = (0..n)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let x = if shape.len() == 1 {
                    1.0f32
                } else {
                    ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2
                };
                x.to_le_bytes()
            })
            .collect();
        w.add_tensor(&name, shape, Encoding::F32, &bytes).unwrap();
    };
    let (v, e, f) = (hp.n_vocab as u64, hp.n_embd as u64, hp.n_ff as u64);
    let q = (hp.n_head * hp.head_dim) as u64;
    let kv = (hp.n_head_kv * hp.head_dim) as u64;
    add(&mut w, "token_embd.weight".into(), &[v, e]);
    add(&mut w, "output_norm.weight".into(), &[e]);
    if !hp.tied_embeddings {
        add(&mut w, "output.weight".into(), &[v, e]);
    }
    for l in 0..hp.n_layer {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        add(&mut w, n("attn_norm"), &[e]);
        add(&mut w, n("attn_q"), &[q, e]);
        add(&mut w, n("attn_k"), &[kv, e]);
        add(&mut w, n("attn_v"), &[kv, e]);
        add(&mut w, n("attn_output"), &[e, q]);
        add(&mut w, n("ffn_norm"), &[e]);
        add(&mut w, n("ffn_gate"), &[f, e]);
        add(&mut w, n("ffn_up"), &[f, e]);
        add(&mut w, n("ffn_down"), &[e, f]);
        if hp.sub_norms {
            add(&mut w, n("attn_sub_norm"), &[q]);
            add(&mut w, n("ffn_sub_norm"), &[f]);
        }
    }
    w.finish().unwrap();
    TernFile::open(&path).unwrap()
}

/// Turn `f` on in layer 2 of `s` (or globally, or in every layer for RoPE scaling) with a value a
/// family uses; returns the layer it is reported at. Exhaustive: a new feature needs a case.
fn turn_on(s: &mut ModelSpec, f: Feature) -> Option<u32> {
    let l = &mut s.layers[2];
    match f {
        Feature::SubNormAttn => l.norms.sub_attn = true,
        Feature::SubNormFfn => l.norms.sub_ffn = true,
        Feature::Relu2 => l.ffn.act = Activation::Relu2,
        Feature::GeluTanh => l.ffn.act = Activation::GeluTanh,
        Feature::UngatedFfn => l.ffn.gated = false,
        Feature::PostAttnNorm => l.norms.post_attn = true,
        Feature::PostFfnNorm => l.norms.post_ffn = true,
        Feature::QkNorm => l.qk_norm = QkNorm::PerHeadRms,
        Feature::SlidingWindow => l.attn.sliding_window = Some(16),
        Feature::AttnSoftcap => l.attn.logit_softcap = Some(50.0),
        Feature::AttnBias => l.attn.bias.q = true,
        Feature::LayerRope => l.rope.theta = 1e6,
        Feature::LayerShapes => l.attn.n_head_kv = 4,
        Feature::RopeLinear | Feature::RopeLlama3 | Feature::RopeYarn => {
            let scaling = match f {
                Feature::RopeLinear => RopeScaling::Linear { factor: 8.0 },
                Feature::RopeLlama3 => RopeScaling::Llama3 {
                    factor: 8.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_context: 8192,
                },
                _ => RopeScaling::Yarn {
                    factor: 4.0,
                    original_context: 32768,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    attn_factor: 1.0,
                },
            };
            for l in &mut s.layers {
                l.rope.scaling = scaling;
            }
            return Some(0);
        }
        Feature::EmbedScale => {
            s.embed_scale = Some(32f32.sqrt());
            return None;
        }
        Feature::FinalSoftcap => {
            s.final_logit_softcap = Some(30.0);
            return None;
        }
    }
    Some(2)
}

fn cpu_refusal(spec: &ModelSpec) -> Option<Unsupported> {
    match Model::check_spec(spec) {
        Ok(()) => None,
        Err(ReferenceError::Format(FormatError::UnsupportedModel(u))) => Some(u),
        Err(e) => panic!("not the typed refusal: {e:?}"),
    }
}

fn gpu_refusal(spec: &ModelSpec) -> Option<Unsupported> {
    match GpuModel::check_spec(spec) {
        Ok(()) => None,
        Err(GpuError::Format(FormatError::UnsupportedModel(u))) => Some(u),
        Err(e) => panic!("not the typed refusal: {e:?}"),
    }
}

/// The spec each backend holds is the file's; today's families pass both backends' checks.
#[test]
fn both_backends_hold_the_files_spec() {
    let dir = tern_tests::scratch("model_spec_hold");
    for bitnet in [false, true] {
        let file = write_model(&dir, bitnet);
        let spec = ModelSpec::from_file(&file).unwrap();
        assert_eq!(spec, ModelSpec::from_meta(file.meta()).unwrap());
        assert_eq!(spec.layers.len(), 4);
        assert_eq!(spec.tied_head, bitnet);
        let l = spec.layers[3];
        assert_eq!(l.norms.sub_attn && l.norms.sub_ffn, bitnet);
        assert_eq!(
            l.ffn.act,
            if bitnet {
                Activation::Relu2
            } else {
                Activation::Silu
            }
        );
        assert_eq!((l.rope.theta, l.rope.dim, l.rope.neox()), (1e4, 8, bitnet));
        let used: Vec<Feature> = spec.features().into_iter().map(|(_, f)| f).collect();
        if bitnet {
            assert!(used.contains(&Feature::Relu2) && used.contains(&Feature::SubNormFfn));
        } else {
            assert!(used.is_empty(), "{used:?}");
        }
        assert_eq!(cpu_refusal(&spec), None);
        assert_eq!(gpu_refusal(&spec), None);

        let cpu = Model::load(&file).unwrap();
        assert_eq!(cpu.spec(), &spec);
    }
    // The GPU loader on the llama file (f32 weights with float inputs have GPU kernels).
    let file = write_model(&dir, false);
    let ctx = match tern_gpu::GpuContext::new(tern_gpu::DevicePreference::Gpu) {
        Ok(c) => c,
        Err(e) => {
            return tern_tests::skip_gpu_or_fail(
                "both_backends_hold_the_files_spec",
                &e.to_string(),
            )
        }
    };
    let gpu = GpuModel::load(std::sync::Arc::new(ctx), &file, Default::default()).unwrap();
    assert_eq!(gpu.spec(), &ModelSpec::from_file(&file).unwrap());
}

/// Every feature a backend lacks, turned on alone, is refused by its check with the typed error
/// naming the feature and its layer; the ones it has pass (`CPU_CAPS`, `GPU_CAPS`: BitNet's
/// sub-norms and ReLU² and, since issue 31, the Gemma 3 / Qwen 2/3 / Llama 3 features; the GPU
/// lacks only the final logit soft-cap of those).
#[test]
fn both_backends_refuse_an_unsupported_feature() {
    let dir = tern_tests::scratch("model_spec_refuse");
    let file = write_model(&dir, false);
    let base = ModelSpec::from_file(&file).unwrap();
    // What each backend implements today (issue 31 added the Gemma/Qwen/Llama 3 features to both):
    // those are accepted, every other feature refused.
    let cpu_today = tern_reference::model::CPU_CAPS.features;
    let gpu_today = tern_gpu::model::GPU_CAPS.features;
    for f in gpu_today {
        assert!(
            cpu_today.contains(f),
            "the GPU has {f:?}, the CPU reference not"
        );
    }
    for f in Feature::ALL {
        let mut spec = base.clone();
        let layer = turn_on(&mut spec, f);
        for (backend, refusal, today) in [
            ("CPU", cpu_refusal(&spec), cpu_today),
            ("GPU", gpu_refusal(&spec), gpu_today),
        ] {
            if today.contains(&f) {
                assert_eq!(refusal, None, "{backend} {f:?}");
                continue;
            }
            let u = refusal.unwrap_or_else(|| panic!("{backend} accepted {f:?}"));
            assert_eq!(
                u,
                Unsupported {
                    backend,
                    feature: f,
                    layer
                }
            );
            let msg = FormatError::from(u).to_string();
            assert!(
                msg.contains(f.describe()) && msg.contains(backend),
                "unclear: {msg}"
            );
        }
    }
}
