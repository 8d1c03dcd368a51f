//! Compressed KV caches (issue 14) on the real default model, on the CPU: every format runs and
//! stays close to the f32 cache, prefill equals decode where the format allows it, truncation and
//! cancellation restore the session, the context-full boundary, byte accounting, and a short
//! perplexity per mode with bounds from docs/measurements.md.

use std::sync::OnceLock;

use tern_engine::{
    EngineError, Kivi, KvOptions, KvQuant, KvSpec, MiniCacheMode, Model, NoObserver,
    PerplexityOptions, Session,
};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let gguf = tern_tests::smollm2_gguf();
        let out = tern_tests::scratch("kv_cache").join("smol.tern");
        tern_import::import_path(&gguf, &out, &Default::default(), &mut |_, _, _| {}).unwrap();
        Model::open(&out).unwrap()
    })
}

/// The spec of `--kv kv --minicache mc [--kv-group G --kv-window R]`, as the CLI maps them.
fn spec(kv: &str, mc: &str, gr: Option<(u32, u32)>) -> KvSpec {
    let minicache = if mc == "on" {
        MiniCacheMode::On
    } else {
        KvSpec::parse_minicache_explicit(mc)
            .unwrap()
            .map_or(MiniCacheMode::Off, MiniCacheMode::Custom)
    };
    KvOptions {
        format: KvQuant::parse(kv).unwrap(),
        kivi: gr.map_or(Kivi::default(), |(group, residual)| Kivi {
            group,
            residual,
        }),
        minicache,
    }
    .validate(&model().meta().hparams)
    .unwrap()
}

fn text_tokens(n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").unwrap();
    let ids = model().perplexity_tokens(&text).unwrap();
    ids[..n].to_vec()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv {
                (i, x)
            } else {
                (bi, bv)
            }
        })
        .0
}

const SMALL_KIVI: Option<(u32, u32)> = Some((8, 16));

#[test]
fn every_format_runs_close_to_f32_and_position_local_ones_equal_decode() {
    let m = model();
    let toks = text_tokens(48);
    let mut f32s = Session::new(m, 64).unwrap();
    let want = f32s.eval_all(&toks).unwrap();
    let nv = m.n_vocab();
    for (kv, mc) in [
        ("f16", "off"),
        ("q8", "off"),
        ("q4", "off"),
        ("q3", "off"),
        ("q2", "off"),
        ("a4", "off"),
        ("a3", "off"),
        ("f16", "on"),
        ("q4", "on"),
    ] {
        let sp = spec(kv, mc, SMALL_KIVI);
        let mut s = Session::with_kv(m, 64, &sp).unwrap();
        let got = s.eval_all(&toks).unwrap();
        let d = max_abs_diff(&got, &want);
        // The same most likely next token at most positions; a bounded logit change.
        let agree = (0..toks.len())
            .filter(|&i| argmax(&got[i * nv..(i + 1) * nv]) == argmax(&want[i * nv..(i + 1) * nv]))
            .count();
        eprintln!("{kv} minicache {mc}: max |Δlogit| {d:.3}, top-1 agreement {agree}/48");
        assert!(d > 0.0 || kv == "f16", "{kv}: no effect at all");
        assert!(got.iter().all(|v| v.is_finite()));
        let floor = match (kv, mc) {
            ("f16" | "q8", "off") => 46,
            (_, "on") => 20,
            // Absmax per head (a4/a3) is the weakest on SmolLM2's keys (outlier channels take
            // the head's scale); measured 35/48 (a4) and 2x/48 (a3) here.
            ("a4", _) => 30,
            ("q2" | "a3", _) => 20,
            _ => 36,
        };
        assert!(agree >= floor, "{kv}/{mc}: top-1 agreement {agree}/48");
        // Rows that depend only on their own position (f16, q8, a4, a3): a batched prefill
        // equals token-by-token decode bit for bit.
        if mc == "off" && !sp.quant.is_kivi() {
            let mut one = Session::with_kv(m, 64, &sp).unwrap();
            let mut rows = Vec::new();
            for &t in &toks {
                rows.extend(one.eval(&[t]).unwrap());
            }
            assert_eq!(rows, got, "{kv}: prefill vs decode");
        }
    }
}

#[test]
fn kv_bytes_per_token_is_what_the_spec_counts() {
    let m = model();
    let hp = &m.meta().hparams;
    let toks = text_tokens(40);
    for kv in ["f32", "f16", "q8", "q4", "q3", "q2", "a4", "a3"] {
        let sp = spec(kv, "off", SMALL_KIVI);
        let mut s = Session::with_kv(m, 64, &sp).unwrap();
        s.eval(&toks).unwrap();
        let want = sp.bytes_held(hp, 40, 0) as f64 / 40.0;
        assert_eq!(s.kv_bytes_per_token(), want.round() as u64, "{kv}");
        assert_eq!(s.report().unwrap().kv_bytes_per_token, want.round() as u64);
    }
    // f16 is half of f32. q4 (KIVI, G = 8, R = 16) at 40 positions, per layer: 32 positions
    // quantized (K and V: 96 B of codes each) + 4 key groups × 192 channels × (s, m) + 32 value
    // rows × 24 groups × (s, m) + 8 window rows of K and V in f16 = 18 432 B (f16: 30 720 B).
    let b = |kv: &str| spec(kv, "off", SMALL_KIVI).bytes_held(hp, 40, 0);
    assert_eq!(b("f32"), 2 * b("f16"));
    assert_eq!(b("f16"), 30 * 30720);
    assert_eq!(
        b("q4"),
        30 * (2 * 32 * 96 + 4 * 192 * 4 + 32 * 24 * 4 + 2 * 8 * 384)
    );
}

#[test]
fn truncation_restores_the_session_in_compressed_formats() {
    let m = model();
    let toks = text_tokens(60);
    for kv in ["q4", "q2", "a3"] {
        for mc in ["off", "on"] {
            let sp = spec(kv, mc, SMALL_KIVI);
            let mut s = Session::with_kv(m, 64, &sp).unwrap();
            s.eval(&toks[..40]).unwrap();
            // 21 lies inside the quantized block 16..32: the CPU re-runs 16..21 itself.
            s.truncate(21);
            assert_eq!(s.history(), &toks[..21], "{kv}/{mc}");
            let after = s.eval(&toks[21..30]).unwrap();
            let mut fresh = Session::with_kv(m, 64, &sp).unwrap();
            fresh.eval(&toks[..21]).unwrap();
            let want = fresh.eval(&toks[21..30]).unwrap();
            assert!(after.iter().all(|v| v.is_finite()));
            if mc == "off" {
                // (MiniCache's first layers read their own batch unmerged, so its logits depend
                // on the batching more than the argmax survives.)
                assert_eq!(argmax(&after), argmax(&want), "{kv}/{mc}");
            }
            if kv == "a3" && mc == "off" {
                assert_eq!(after, want, "position-local rows: truncation is exact");
            }
            // A refused eval (too long for the context) leaves the session where it was.
            let len0 = s.history().len();
            let r = s.eval(&toks[..40]);
            assert!(matches!(r, Err(EngineError::PromptTooLong { .. })), "{r:?}");
            assert_eq!(s.history().len(), len0);
        }
    }
}

#[test]
fn a_cancelled_prefill_into_quantized_blocks_rolls_back_exactly() {
    let m = model();
    let toks = text_tokens(600);
    let sp = spec("q4", "off", Some((8, 16)));
    let mut s = Session::with_kv(m, 640, &sp).unwrap();
    s.eval(&toks[..10]).unwrap();
    let flag = s.cancel_handle();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let r = s.eval(&toks[10..600]);
    setter.join().unwrap();
    assert!(matches!(r, Err(EngineError::Cancelled)), "{r:?}");
    // Block 0..16 was quantized by the layers that ran; the session re-ran 0..10 to stay at 10.
    assert_eq!(s.history(), &toks[..10]);
    let after = s.eval(&toks[10..20]).unwrap();
    let mut fresh = Session::with_kv(m, 640, &sp).unwrap();
    fresh.eval(&toks[..10]).unwrap();
    assert_eq!(after, fresh.eval(&toks[10..20]).unwrap());
}

#[test]
fn a_full_context_is_a_typed_error_at_the_boundary() {
    let m = model();
    let toks = text_tokens(33);
    for (kv, mc) in [("q4", "off"), ("a3", "off"), ("q3", "on")] {
        let sp = spec(kv, mc, SMALL_KIVI);
        let mut s = Session::with_kv(m, 32, &sp).unwrap();
        s.eval(&toks[..31]).unwrap();
        s.eval(&toks[31..32]).unwrap(); // exactly full: 32 of 32
        assert_eq!(s.history().len(), 32);
        let r = s.eval(&toks[32..33]);
        assert!(
            matches!(
                r,
                Err(EngineError::PromptTooLong {
                    prompt: 33,
                    ctx: 32
                })
            ),
            "{kv}: {r:?}"
        );
        assert_eq!(s.history(), &toks[..32], "{kv}: unchanged");
        s.truncate(31);
        assert!(
            s.eval(&toks[32..33]).is_ok(),
            "{kv}: room again after a truncate"
        );
    }
}

/// A short perplexity per mode (`-c 256`, the first two windows of GPL-3) against bounds from
/// measured values: each bound is the value measured when this test was written (in the comment)
/// with a small margin, and the bytes per token are exact.
#[test]
fn short_perplexity_per_mode_stays_within_measured_bounds() {
    let m = model();
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").unwrap();
    let toks = m.perplexity_tokens(&text).unwrap();
    let run = |kv: &str, mc: &str| {
        let o = PerplexityOptions {
            n_ctx: 256,
            windows: Some(vec![0, 1]),
            kv: spec(kv, mc, None),
            ..Default::default()
        };
        let r = m.perplexity(&toks, &o, &mut NoObserver).unwrap();
        eprintln!(
            "{kv} minicache {mc}: ppl {:.4}, kv_bytes_per_token {:.1}",
            r.ppl_second_half, r.kv_bytes_per_token
        );
        (r.ppl_second_half, r.kv_bytes_per_token)
    };
    let (base, base_bytes) = run("f16", "off");
    // (mode, measured ppl ratio to f16 rounded up + margin, exact bytes/token at 255 positions)
    for (kv, mc, max_ratio) in BOUNDS {
        let (ppl, bytes) = run(kv, mc);
        assert!(
            ppl / base <= *max_ratio,
            "{kv}/{mc}: ppl {ppl} vs f16 {base}"
        );
        assert!(
            bytes < base_bytes || *kv == "f16",
            "{kv}/{mc}: {bytes} bytes/token"
        );
        let sp = spec(kv, mc, None);
        if sp.minicache.is_none() {
            let want = sp.bytes_held(&m.meta().hparams, 255, 0) as f64 / 255.0;
            assert_eq!(bytes, want, "{kv}");
        }
    }
}

/// Bounds on ppl(second half) / ppl(f16) at `-c 256`, windows 0-1 of GPL-3, default batch: each
/// is the value measured when the test was written (f16: 17.7589; `kv_sweep … 256 2 …`, see
/// docs/measurements.md) times 1.015 (the CPU reference is deterministic; the margin is for
/// future numerics changes elsewhere, not noise).
const BOUNDS: &[(&str, &str, f64)] = &[
    ("q8", "off", 1.018), // 17.8065: 1.0027
    ("q4", "off", 1.034), // 18.0875: 1.0185
    ("q3", "off", 1.083), // 18.9336: 1.0661
    ("q2", "off", 1.373), // 24.0214: 1.3526
    ("a4", "off", 1.428), // 24.9843: 1.4069
    ("a3", "off", 6.429), // 112.4729: 6.3333
    ("f16", "on", 1.036), // 18.1111: 1.0198
    ("q4", "on", 1.059),  // 18.5116: 1.0424
    ("q3", "on", 1.116),  // 19.5247: 1.0994
];
