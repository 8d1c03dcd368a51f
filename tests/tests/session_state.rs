//! Saving and restoring a session (`Session::save_state` / `restore_state`, the C ABI's
//! `tern_session_save`/`_restore`): a restored session continues with the same logits (bit for
//! bit) and the same greedy tokens as the session that was saved, on the CPU for every KV
//! format family (f32, f16, q8, KIVI with blocks quantized, a3, MiniCache) and on the GPU
//! (lavapipe in CI, `TERN_REQUIRE_GPU=1`); a state from another model spec, context or format
//! version, or with a flipped byte, is refused with its typed error and the session is unchanged.

use std::sync::OnceLock;

use tern_engine::{
    Device, EngineError, ErrorKind, GenerateOptions, Kivi, KvOptions, KvQuant, LoadOptions,
    MiniCacheMode, Model, SamplingParams, Session, SessionOptions, StateError,
};

fn packed() -> &'static std::path::PathBuf {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let gguf = tern_tests::smollm2_gguf();
        let out = tern_tests::scratch("session_state").join("smol.tern");
        tern_import::import_path(&gguf, &out, &Default::default(), &mut |_, _, _| {}).unwrap();
        out
    })
}

fn cpu_model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::open(packed()).unwrap())
}

fn opts(n_ctx: usize, format: KvQuant, kivi: Kivi, minicache: MiniCacheMode) -> SessionOptions {
    SessionOptions {
        n_ctx,
        kv: KvOptions {
            format,
            kivi,
            minicache,
        },
        ..Default::default()
    }
}

fn greedy(s: &mut Session<'_>, prompt: &[u32], n: usize) -> Vec<u32> {
    let o = GenerateOptions {
        max_tokens: n,
        ..Default::default()
    };
    s.generate(prompt, &SamplingParams::greedy(), &o, &mut |_| true)
        .unwrap()
        .tokens
}

/// Run a prompt and a few greedy tokens on `a`, save, then check that a new session restored
/// from the state gives the same logits for the next token and the same greedy continuation.
fn round_trip(m: &Model, o: &SessionOptions, prompt_len: usize, gen: usize) -> usize {
    let text = "The quick brown fox jumps over the lazy dog. Tern saves a session and restores it \
                into another one, which then continues exactly as the first would have. "
        .repeat(8);
    let ids = m.tokenize(&text, true).unwrap();
    let prompt = &ids[..prompt_len];
    let mut a = Session::with_options(m, o).unwrap();
    let first = greedy(&mut a, prompt, gen);
    assert_eq!(first.len(), gen);
    let state = a.save_state().unwrap();
    let held = a.history().to_vec();

    let mut b = Session::with_options(m, o).unwrap();
    b.restore_state(&state).unwrap();
    assert_eq!(b.history(), &held[..]);
    let next = [ids[prompt_len]];
    let la = a.eval(&next).unwrap();
    let lb = b.eval(&next).unwrap();
    assert!(
        la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()),
        "{:?}: logits after restore differ",
        o.kv
    );
    let ca = greedy(&mut a, &[ids[prompt_len + 1]], gen);
    let cb = greedy(&mut b, &[ids[prompt_len + 1]], gen);
    assert_eq!(
        ca, cb,
        "{:?}: greedy continuation after restore differs",
        o.kv
    );

    // The cache's contents are what was restored: a session that got only the history's
    // length (an empty cache) would not give these logits.
    let mut c = Session::with_options(m, o).unwrap();
    let lc = c.eval(&next).unwrap();
    assert_ne!(la, lc);
    state.len()
}

#[test]
fn cpu_restored_session_continues_identically_in_every_kv_family() {
    let m = cpu_model();
    let kivi = Kivi {
        group: 16,
        residual: 32,
    };
    let cases = [
        (KvQuant::F32, Kivi::default(), MiniCacheMode::Off),
        (KvQuant::F16, Kivi::default(), MiniCacheMode::Off),
        (KvQuant::Q8, Kivi::default(), MiniCacheMode::Off),
        // 70 prompt tokens + 6: two KIVI blocks of 32 quantized, the rest in the f16 window.
        (KvQuant::Kivi4, kivi, MiniCacheMode::Off),
        (KvQuant::Absmax3, Kivi::default(), MiniCacheMode::Off),
        (KvQuant::Rot4, Kivi::default(), MiniCacheMode::Off),
        (KvQuant::Q8, Kivi::default(), MiniCacheMode::On),
    ];
    for (q, k, mc) in cases {
        let o = opts(256, q, k, mc);
        let bytes = round_trip(m, &o, 70, 6);
        // Sparse: a short conversation in a 256-position cache saves less than the cache.
        let s = Session::with_options(m, &o).unwrap();
        let full = s.kv_bytes_per_token() as usize * 256;
        assert!(bytes < full, "{q:?}: state {bytes} B, cache {full} B");
        eprintln!("{q:?} {mc:?}: state {bytes} B for 82 tokens (cache {full} B)");
    }
}

#[test]
fn a_state_from_another_spec_context_or_version_or_with_a_flipped_byte_is_refused() {
    let m = cpu_model();
    let o = opts(128, KvQuant::F32, Kivi::default(), MiniCacheMode::Off);
    let mut a = Session::with_options(m, &o).unwrap();
    let ids = m.tokenize("Hello there, general Kenobi.", true).unwrap();
    greedy(&mut a, &ids, 3);
    let state = a.save_state().unwrap();

    let mut other_spec = Session::with_options(
        m,
        &opts(128, KvQuant::Q8, Kivi::default(), MiniCacheMode::Off),
    )
    .unwrap();
    let mut other_ctx = Session::with_options(
        m,
        &opts(64, KvQuant::F32, Kivi::default(), MiniCacheMode::Off),
    )
    .unwrap();
    for s in [&mut other_spec, &mut other_ctx] {
        greedy(s, &ids, 1);
        let before = s.history().to_vec();
        let e = s.restore_state(&state).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StateMismatch, "{e}");
        assert!(matches!(e, EngineError::State(StateError::Mismatch { .. })));
        assert_eq!(
            s.history(),
            &before[..],
            "unchanged after a refused restore"
        );
    }

    let mut b = Session::with_options(m, &o).unwrap();
    let mut flipped = state.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    let e = b.restore_state(&flipped).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadFile, "{e}");
    let e = b.restore_state(&state[..state.len() - 9]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadFile, "{e}");
    let e = b
        .restore_state(b"not a state at all, just some bytes")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadFile, "{e}");

    // A newer format version (checksum fixed up so that the version check is what refuses it).
    let mut newer = state[..state.len() - 8].to_vec();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&newer);
    newer.extend_from_slice(&sum.to_le_bytes());
    let e = b.restore_state(&newer).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(b.history().is_empty());

    // And the file variants.
    let path = tern_tests::scratch("session_state_file").join("chat.tstate");
    a.save_state_file(&path).unwrap();
    b.restore_state_file(&path).unwrap();
    assert_eq!(b.history(), a.history());
}

#[test]
fn gpu_restored_session_continues_identically() {
    let lo = LoadOptions {
        device: Device::Gpu,
        ..Default::default()
    };
    let m = match Model::open_with(packed(), &lo) {
        Ok(m) => m,
        Err(e) if !tern_tests::gpu_required("session_state") => {
            eprintln!("skipping: {e}");
            return;
        }
        Err(e) => panic!("GPU: {e}"),
    };
    // Short on purpose: lavapipe runs SmolLM2 at a few tokens per second (24 prompt tokens + 2
    // + 2: one KIVI block of 16 quantized, the rest in the window).
    let kivi = Kivi {
        group: 8,
        residual: 16,
    };
    // (q3r: the rotated formats' GPU store, densely packed 3-bit codes)
    for (q, k) in [
        (KvQuant::F32, Kivi::default()),
        (KvQuant::Kivi4, kivi),
        (KvQuant::Rot3, Kivi::default()),
    ] {
        round_trip(&m, &opts(128, q, k, MiniCacheMode::Off), 24, 2);
    }
    // A GPU state does not restore on the CPU (the storage is the backend's own).
    let o = opts(128, KvQuant::F32, Kivi::default(), MiniCacheMode::Off);
    let mut g = Session::with_options(&m, &o).unwrap();
    greedy(&mut g, &m.tokenize("Hello", true).unwrap(), 2);
    let state = g.save_state().unwrap();
    let mut c = Session::with_options(cpu_model(), &o).unwrap();
    let e = c.restore_state(&state).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StateMismatch, "{e}");
}
