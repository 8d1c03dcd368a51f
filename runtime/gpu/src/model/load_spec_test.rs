//! [`GpuModel::load`]'s spec check comes first (a unit test of `load.rs`, in its own file to
//! keep that one short).

use super::*;

/// The loader checks the spec before it reads a tensor: an attention logit soft-cap (Gemma 2,
/// not in `GPU_CAPS`) is the typed refusal even for a file with no tensors, whose own spec gets as
/// far as the first missing tensor.
#[test]
fn load_refuses_an_unsupported_spec_first() {
    let Ok(ctx) = GpuContext::new(crate::DevicePreference::Auto) else {
        assert!(!crate::tuning::gpu_required());
        return;
    };
    let ctx = Arc::new(ctx);
    let hp = tern_format::HParams {
        n_vocab: 8,
        n_embd: 8,
        n_layer: 2,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 4,
        n_ff: 16,
        n_ctx_train: 64,
        rope_theta: 1e4,
        rope_dim: 4,
        rope_neox: false,
        rms_eps: 1e-5,
        ffn_act: tern_format::FfnAct::Silu,
        tied_embeddings: true,
        sub_norms: false,
    };
    let meta = tern_format::ModelMeta {
        arch: tern_format::Arch::Llama,
        hparams: hp,
        tokenizer: None,
        activations: tern_format::ActivationScheme::FLOAT,
        provenance: Default::default(),
        extra: Default::default(),
    };
    let path = std::env::temp_dir().join(format!("tern-gpu-spec-{}.tern", std::process::id()));
    tern_format::TernWriter::create(&path, meta.clone())
        .unwrap()
        .finish()
        .unwrap();
    let file = TernFile::open(&path).unwrap();
    let base = ModelSpec::from_meta(&meta).unwrap();
    let load = |spec| GpuModel::load_spec(ctx.clone(), &file, spec, Default::default());
    let e = load(base.clone()).unwrap_err();
    assert!(matches!(e, GpuError::BadModel(_)), "{e}");
    let mut spec = base;
    spec.layers[1].attn.logit_softcap = Some(50.0);
    let e = load(spec).unwrap_err();
    let _ = std::fs::remove_file(&path);
    match e {
        GpuError::Format(tern_format::FormatError::UnsupportedModel(u)) => {
            let f = tern_format::Feature::AttnSoftcap;
            assert_eq!((u.backend, u.feature, u.layer), ("GPU", f, Some(1)))
        }
        e => panic!("not the typed refusal: {e}"),
    }
}
