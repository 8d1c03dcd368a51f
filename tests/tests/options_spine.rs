//! The options spine (issue 27): `Model::open_with` applies every `LoadOptions` field and records
//! the source, so `Model::reopen_on` works for every way of opening (an activation override
//! included); `SessionOptions` are checked once, and the session report reads back what a
//! session really uses.

use tern_engine::{
    BackendKind, CpuThreads, Device, Kivi, KvOptions, KvQuant, LoadOptions, MiniCache,
    MiniCacheMode, Model, Numerics, Session, SessionOptions,
};
use tern_format::ActivationScheme;
use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_tests::{golden, scratch};

/// A random BitNet model packed with the file's own activation scheme (a8), packed once for
/// all the tests of this file.
fn bitnet() -> std::path::PathBuf {
    static P: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let out = scratch("options_spine_tiny_a").join("model.tern");
        import_hf_dir(
            &golden("bitnet_hf/tiny_a"),
            &out,
            &PackOptions::default(),
            &mut |_, _, _| {},
        )
        .unwrap();
        out
    })
    .clone()
}

/// Logits of every position of `tokens` and 6 greedy tokens after them.
fn logits_and_greedy(m: &Model, tokens: &[u32]) -> (Vec<f32>, Vec<u32>) {
    let mut s = Session::new(m, 64).unwrap();
    let all = s.eval_all(tokens).unwrap();
    let n = m.n_vocab();
    let mut last = all[all.len() - n..].to_vec();
    let mut out = Vec::new();
    for _ in 0..6 {
        let t = tern_engine::sampler::argmax(&last).unwrap() as u32;
        out.push(t);
        last = s.eval(&[t]).unwrap();
    }
    (all, out)
}

#[test]
fn reopen_on_keeps_an_activation_override() {
    let path = bitnet();
    let file_scheme = tern_format::TernFile::open(&path)
        .unwrap()
        .meta()
        .activations;
    assert_ne!(
        file_scheme,
        ActivationScheme::A4_8,
        "the test needs another file scheme"
    );
    let opts = LoadOptions {
        device: Device::Cpu,
        activations: Some(ActivationScheme::A4_8),
        cpu_threads: CpuThreads::Caller,
        ..Default::default()
    };
    let m = Model::open_with(&path, &opts).unwrap();
    assert_eq!(m.meta().activations, ActivationScheme::A4_8);
    let vocab = m.n_vocab() as u32;
    let toks: Vec<u32> = [1u32, 17, 42, 5, 99, 3, 250, 7]
        .iter()
        .map(|t| t % vocab)
        .collect();
    let (want, want_greedy) = logits_and_greedy(&m, &toks);

    // The override changes the numbers (so keeping it is observable) ...
    let plain = Model::open_with(
        &path,
        &LoadOptions {
            device: Device::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    let (other, _) = logits_and_greedy(&plain, &toks);
    assert_ne!(
        other, want,
        "a4.8 and the file's scheme give the same logits"
    );

    // ... and the reopened model keeps it: the same logits and greedy tokens, bit for bit.
    let again = m.reopen_on(Device::Cpu).unwrap();
    assert_eq!(again.meta().activations, ActivationScheme::A4_8);
    assert_eq!(again.load_options(), m.load_options());
    let (got, got_greedy) = logits_and_greedy(&again, &toks);
    assert_eq!(got, want);
    assert_eq!(got_greedy, want_greedy);
}

#[test]
fn from_file_with_refuses_path_options() {
    let path = bitnet();
    let file = tern_format::TernFile::open(&path).unwrap();
    for opts in [
        LoadOptions {
            activations: Some(ActivationScheme::A8),
            ..Default::default()
        },
        LoadOptions {
            delta: Some("x.ternd".into()),
            ..Default::default()
        },
    ] {
        let e = Model::from_file_with(&file, &opts).err().unwrap();
        assert!(e.to_string().contains("open_with"), "{e}");
    }
    let m = Model::from_file_with(&file, &LoadOptions::default()).unwrap();
    assert!(m.reopen_on(Device::Cpu).is_err());
}

#[test]
fn session_options_are_checked_once_and_read_back() {
    let path = bitnet();
    let m = Model::open_with(
        &path,
        &LoadOptions {
            max_memory: Some(1 << 30),
            ..Default::default()
        },
    )
    .unwrap();
    let hp = m.meta().hparams.clone();
    for format in KvQuant::ALL {
        let o = SessionOptions {
            n_ctx: 32,
            kv: KvOptions {
                format,
                kivi: Kivi {
                    group: 16,
                    residual: 32,
                },
                minicache: MiniCacheMode::Off,
            },
            ..Default::default()
        };
        let mut s = Session::with_options(&m, &o).unwrap();
        let r = s.report().unwrap();
        assert_eq!(r.backend, BackendKind::Cpu);
        assert_eq!(r.max_memory, Some(1 << 30));
        assert_eq!(r.n_ctx, 32);
        assert_eq!(r.kv.quant, format);
        assert_eq!((r.kv.kivi.group, r.kv.kivi.residual), (16, 32));
        assert_eq!(r.kv.minicache, None);
        assert_eq!(r.numerics, Numerics::Model);
        assert_eq!(s.options().kv(), &r.kv);
    }
    // n_ctx 0: the training context, capped.
    let s = Session::with_options(&m, &SessionOptions::default()).unwrap();
    assert_eq!(
        s.n_ctx(),
        (hp.n_ctx_train as usize).min(Session::DEFAULT_MAX_CTX)
    );
    // MiniCache `on` is resolved for the model's depth; numerics read back.
    if hp.n_layer >= 2 {
        let o = SessionOptions {
            n_ctx: 16,
            kv: KvOptions {
                minicache: MiniCacheMode::On,
                ..Default::default()
            },
            numerics: Numerics::LlamaCpp,
            ..Default::default()
        };
        let mut s = Session::with_options(&m, &o).unwrap();
        let r = s.report().unwrap();
        assert_eq!(r.kv.minicache, Some(tern_engine::minicache_on(hp.n_layer)));
        assert_eq!(r.numerics, Numerics::LlamaCpp);
    }
    // Bad values: typed errors, before anything is allocated.
    let bad = |kv: KvOptions| SessionOptions {
        n_ctx: 16,
        kv,
        ..Default::default()
    };
    for (o, needle) in [
        (
            bad(KvOptions {
                format: KvQuant::Kivi4,
                kivi: Kivi {
                    group: 32,
                    residual: 40,
                },
                ..Default::default()
            }),
            "window",
        ),
        (
            bad(KvOptions {
                minicache: MiniCacheMode::Custom(MiniCache {
                    start_layer: hp.n_layer,
                    t: 0.5,
                    gamma: 0.5,
                }),
                ..Default::default()
            }),
            "start layer",
        ),
        (
            bad(KvOptions {
                minicache: MiniCacheMode::Custom(MiniCache {
                    start_layer: 0,
                    t: f32::NAN,
                    gamma: 0.5,
                }),
                ..Default::default()
            }),
            "MiniCache",
        ),
        (
            SessionOptions {
                n_ctx: usize::MAX / 2,
                ..Default::default()
            },
            "more than can be addressed",
        ),
        (
            SessionOptions {
                sampling: tern_engine::SamplingParams {
                    top_p: 0.0,
                    ..Default::default()
                },
                ..Default::default()
            },
            "top_p",
        ),
    ] {
        assert!(o.validate(&hp).is_err(), "{o:?}");
        let e = Session::with_options(&m, &o).err().unwrap();
        assert!(
            matches!(e, tern_engine::EngineError::InvalidArgument(_)),
            "{e:?}"
        );
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}
