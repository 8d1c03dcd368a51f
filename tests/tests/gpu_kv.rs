//! The compressed KV cache on the GPU end to end (lavapipe in CI, `TERN_REQUIRE_GPU=1`), against
//! the CPU reference's cache (`tern_reference::KvCache`, the oracle of `tern_format::kv`):
//!
//! * a tiny random BitNet model (`tests/golden/bitnet_hf/tiny_a`: 2 layers, 2 kv heads × 16),
//!   two perplexity windows of 48 tokens in batches of 16 (KIVI G = 8, R = 16: blocks fill
//!   inside and across batches), every KV format with and without MiniCache (pair (0, 1)):
//!   perplexity within 0.1% of the CPU's (measured ≤ 7.1e-5), per-token log-probabilities
//!   within 1e-2 (measured ≤ 1e-6 in 15 of the 16 modes; 5.4e-3 in f16 + MiniCache, where
//!   the backends' 1e-7 differences in the merged directions flip an f16 rounding), the same
//!   `kv_bytes_per_token`;
//!   (SmolLM2's perplexity is not compared here: with KIVI at short windows it moves by up to
//!   10% between the CPU's own two numerics modes — docs/measurements.md — so a 0.1% bound
//!   between backends would test the model's sensitivity to rounding, not the cache; and
//!   lavapipe runs SmolLM2 at a few tokens per second);
//! * SmolLM2: decode after a 150-token prefill in a KIVI q4 cache (G = 16, R = 64; greedy
//!   tokens GPU = CPU), truncation into a quantized block (the engine re-runs what the cache
//!   dropped) continuing exactly as a cache filled from scratch;
//! * SmolLM2 at an 8,192-token context with MiniCache + q4 (ignored by default: too slow on
//!   lavapipe for CI, see the test).

use std::path::PathBuf;

use tern_engine::{
    Device, Kivi, KvQuant, KvSpec, LoadOptions, MiniCache, Model, NoObserver, PerplexityOptions,
    ScoreOptions, Session,
};
use tern_import::pack::PackOptions;
use tern_tests::scratch;

/// SmolLM2 packed once per process: the tests of this file run in parallel threads, and two
/// imports into the same path race (one's temporary file vanishes under the other). A failed
/// import is retried once into a fresh directory: a CI
/// rehearsal (2026-11-24) saw one transient `NotFound` here while the other tests of this file
/// packed their models, and the same import succeeded right after.
fn smollm2() -> PathBuf {
    static PACKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PACKED
        .get_or_init(|| {
            let import = |attempt: u32| {
                let path = scratch(&format!("gpu_kv_smollm2_{attempt}")).join("smollm2.tern");
                tern_import::gguf_import::import_gguf(
                    &tern_tests::smollm2_gguf(),
                    &path,
                    &PackOptions::default(),
                    &mut |_, _, _| {},
                )
                .map(|_| path)
            };
            import(0).unwrap_or_else(|e| {
                eprintln!("importing SmolLM2 failed ({e}); retrying once");
                import(1).unwrap()
            })
        })
        .clone()
}

fn open_gpu(path: &std::path::Path) -> Option<Model> {
    let opts = LoadOptions {
        device: Device::Gpu,
        ..LoadOptions::default()
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(e)
            if matches!(e.backend_error(), Some(tern_gpu::GpuError::NoAdapter(_)))
                && !tern_tests::gpu_required("gpu_kv") =>
        {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("loading {} on the GPU: {e}", path.display()),
    }
}

/// Tokens of a real text (the GPL-3 when the system has it, else the golden prompts' text).
fn text_tokens(m: &Model, n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")
        .unwrap_or_else(|_| "The quick brown fox jumps over the lazy dog. ".repeat(200));
    let t = m.perplexity_tokens(&text).unwrap();
    t[..n.min(t.len())].to_vec()
}

fn tiny() -> PathBuf {
    tiny_in("gpu_kv_tiny")
}

/// The tiny model packed into its own scratch directory (tests run in parallel threads: one
/// directory per test, so that no two imports write the same file).
fn tiny_in(dir: &str) -> PathBuf {
    let path = scratch(dir).join("model.tern");
    tern_import::hf::import_hf_dir(
        &tern_tests::golden("bitnet_hf/tiny_a"),
        &path,
        &PackOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    path
}

/// Every KV format, alone and with MiniCache over layers (0, 1) (the rotated formats alone:
/// MiniCache over a rotated cache runs on the CPU only).
fn modes(kivi: Kivi, mc: MiniCache) -> Vec<KvSpec> {
    KvQuant::ALL
        .into_iter()
        .flat_map(|quant| {
            [None, Some(mc)].map(|minicache| KvSpec {
                quant,
                kivi,
                minicache,
            })
        })
        .filter(|s| !(s.quant.is_rotated() && s.minicache.is_some()))
        .collect()
}

fn name(s: &KvSpec) -> String {
    format!(
        "{}{}",
        s.quant.name(),
        if s.minicache.is_some() {
            "+minicache"
        } else {
            ""
        }
    )
}

#[test]
fn tiny_model_gpu_equals_cpu_in_every_kv_mode() {
    let path = tiny();
    let Some(gpu) = open_gpu(&path) else { return };
    let cpu = Model::open(&path).unwrap();
    let c = 48;
    let tokens: Vec<u32> = (0..2 * c as u32).map(|i| (i * 7919 + 13) % 256).collect();
    let kivi = Kivi {
        group: 8,
        residual: 16,
    };
    let mc = MiniCache {
        start_layer: 0,
        t: 0.5,
        gamma: 0.25,
    };
    let t0 = std::time::Instant::now();
    let mut ppls = Vec::new();
    let mut bad: Vec<String> = Vec::new();
    for kv in modes(kivi, mc) {
        let opts = PerplexityOptions {
            n_ctx: c,
            batch: 16,
            kv,
            ..PerplexityOptions::default()
        };
        let pc = cpu.perplexity(&tokens, &opts, &mut NoObserver).unwrap();
        let pg = gpu.perplexity(&tokens, &opts, &mut NoObserver).unwrap();
        let rel = (pg.ppl - pc.ppl).abs() / pc.ppl;
        let so = ScoreOptions {
            batch: 16,
            kv,
            ..ScoreOptions::default()
        };
        let lc = cpu.score_with(&tokens[..c], &so, &mut NoObserver).unwrap();
        let lg = gpu.score_with(&tokens[..c], &so, &mut NoObserver).unwrap();
        let d = lc
            .iter()
            .zip(&lg)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!(
            "{}: perplexity CPU {:.5} GPU {:.5} (rel {rel:.1e}), max |Δ log p| {d:.1e}, \
             kv_bytes_per_token CPU {:.1} GPU {:.1}",
            name(&kv),
            pc.ppl,
            pg.ppl,
            pc.kv_bytes_per_token,
            pg.kv_bytes_per_token
        );
        if rel > 1e-3 || d > 1e-2 || pc.kv_bytes_per_token != pg.kv_bytes_per_token {
            bad.push(name(&kv));
        }
        ppls.push(pg.ppl);
    }
    assert!(bad.is_empty(), "GPU differs from the CPU in {bad:?}");
    // the formats are really applied: they do not all give the f32 cache's perplexity
    assert!(
        ppls.iter().filter(|&&p| p != ppls[0]).count() >= 12,
        "{ppls:?}"
    );
    eprintln!(
        "{} modes in {:.1} s",
        ppls.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// Decode one token at a time (issue 14, h-kvr: RoPE fused with the store of every format of a
/// layer of its own, one dispatch): in every quantized format the GPU's log p of a fixed token
/// sequence over 40 steps is the CPU's within 1e-2 (KIVI G = 8, R = 16: key groups and value
/// rows leave the window inside the fused dispatch at steps 16 and 32), and the decode step
/// takes as many dispatches as with the f16 cache (before the fusion: 4 more per layer), plus the
/// absmax formats' scales pass (one per layer).
#[test]
fn tiny_model_decode_fuses_rope_with_every_kv_store() {
    let path = tiny_in("gpu_kv_tiny_decode");
    let Some(gpu) = open_gpu(&path) else { return };
    let cpu = Model::open(&path).unwrap();
    let n_layer = cpu.meta().hparams.n_layer as usize;
    let tokens: Vec<u32> = (0..41u32).map(|i| (i * 7919 + 13) % 256).collect();
    let kivi = Kivi {
        group: 8,
        residual: 16,
    };
    let logp = |l: &[f32], t: u32| -> f32 {
        let m = l.iter().copied().fold(f32::MIN, f32::max);
        let z: f32 = l.iter().map(|x| (x - m).exp()).sum();
        l[t as usize] - m - z.ln()
    };
    let mut f16_dispatches = None;
    let mut bad = Vec::new();
    for quant in KvQuant::ALL.into_iter().filter(|&q| q != KvQuant::F32) {
        let kv = KvSpec {
            quant,
            kivi,
            minicache: None,
        };
        let mut sc = Session::with_kv(&cpu, 64, &kv).unwrap();
        let mut sg = Session::with_kv(&gpu, 64, &kv).unwrap();
        let mut worst = 0.0f32;
        for w in tokens.windows(2) {
            let (lc, lg) = (sc.eval(&w[..1]).unwrap(), sg.eval(&w[..1]).unwrap());
            worst = worst.max((logp(&lc, w[1]) - logp(&lg, w[1])).abs());
        }
        let d = sg.report().unwrap().dispatches_per_token.unwrap();
        eprintln!(
            "{}: max |Δ log p| {worst:.1e} over 40 decode steps, {d} dispatches per token",
            quant.name()
        );
        // absmax formats (q8, a4, a3): one scales pass per layer before the fused store
        // (rope_kv.wgsl PASS 1: each head's absmax once, not once per code word)
        let extra = if quant.is_absmax() { n_layer } else { 0 };
        let want = *f16_dispatches.get_or_insert(d) + extra;
        if worst > 1e-2 || d != want {
            bad.push(format!("{} (|Δ| {worst:.1e}, {d} vs {want})", quant.name()));
        }
    }
    assert!(bad.is_empty(), "decode GPU vs CPU / dispatches: {bad:?}");
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy continuation of `s` for `n` tokens from `logits`.
fn greedy(s: &mut Session<'_>, logits: Vec<f32>, n: usize) -> Vec<u32> {
    let mut logits = logits;
    let mut out = Vec::new();
    for _ in 0..n {
        let t = argmax(&logits);
        out.push(t);
        logits = s.eval(&[t]).unwrap();
    }
    out
}

#[test]
fn kivi_decode_and_truncation_on_the_gpu_match_the_cpu() {
    let path = smollm2();
    let Some(gpu) = open_gpu(&path) else { return };
    let cpu = Model::open(&path).unwrap();
    let prompt = text_tokens(&cpu, 150);
    let kv = KvSpec {
        quant: KvQuant::Kivi4,
        kivi: Kivi {
            group: 16,
            residual: 64,
        },
        minicache: None,
    };
    let run = |m: &Model| {
        let mut s = Session::with_kv(m, 256, &kv).unwrap();
        let l = s.eval(&prompt).unwrap();
        let a = greedy(&mut s, l, 4);
        // back into the block [128, 192), not quantized yet (154 held): kept exactly; then into
        // the quantized block [64, 128): the cache keeps 64, the engine re-runs 64..100
        s.truncate(140);
        assert_eq!(s.history().len(), 140);
        let l = s.eval(&prompt[140..]).unwrap();
        let b = greedy(&mut s, l, 4);
        s.truncate(100);
        assert_eq!(s.history().len(), 100);
        let l = s.eval(&prompt[100..]).unwrap();
        let c = greedy(&mut s, l, 4);
        (a, b, c)
    };
    let (ga, gb, gc) = run(&gpu);
    let (ca, cb, cc) = run(&cpu);
    eprintln!("GPU {ga:?} {gb:?} {gc:?}\nCPU {ca:?} {cb:?} {cc:?}");
    // a truncated and refilled cache continues as the first fill did
    assert_eq!(ga, gb);
    assert_eq!(ga, gc);
    assert_eq!(ga, ca, "greedy tokens GPU vs CPU (q4, G16/R64)");
    assert_eq!((cb, cc), (ca.clone(), ca));
}

/// The rotated formats on SmolLM2 (issue 28: q4r and q3r; the store rotating keys and values per
/// head, attention rotating the queries and each head's output back), end to end through the
/// engine's sessions (prefill batch, then decode through the fused RoPE + store):
///
/// * on each backend, a truncation (any length is kept: there is no window) followed by the same
///   tokens continues exactly as the first fill (same greedy tokens);
/// * GPU against CPU, teacher-forced on the CPU's greedy continuation of a 64-token prompt: the
///   largest |Δ logit| of the GPU from the CPU over the 6 steps is at most 3 × the CPU's own
///   under rounding-level perturbations of its keys and values (`KvCache::set_input_jitter`,
///   1e-6, 3 seeds) — the method of the perplexity gap test below; the top tokens are reported.
///
/// Why not "GPU greedy tokens = CPU greedy tokens": the rotated per-token quantizer is chaotic on
/// SmolLM2 (its first token's huge rows make a whole row's codes move with its minimum), so
/// K and V ~1e-6 apart — the backends' matmuls sum in other orders — already move logits by
/// several units: the CPU's own q4r perplexity moves by ~25 % under that jitter
/// (`smollm2_gpu_cpu_gap_is_within_the_cpus_own_rounding_noise`), and on this prompt the
/// greedy tokens part after 2 steps (measured: GPU [260, 9768, 654, …], CPU [260, 9768, 1694, …]).
/// With the same keys and values in, the GPU's store is the CPU's bit for bit and its attention
/// within NMSE 1e-13 (`parity_kv_real_smollm2` on SmolLM2's own rows, `parity.rs`).
#[test]
fn rotated_decode_and_truncation_on_the_gpu_match_the_cpu() {
    let path = smollm2();
    let Some(gpu) = open_gpu(&path) else { return };
    let cpu = Model::open(&path).unwrap();
    let prompt = text_tokens(&cpu, 64);
    let file = tern_format::TernFile::open(&path).unwrap();
    let hp = file.meta().hparams.clone();
    let vocab = hp.n_vocab as usize;
    let reference = tern_reference::Model::load(&file).unwrap();
    let steps = 6;
    let mut failures = Vec::new();
    for quant in [KvQuant::Rot4, KvQuant::Rot3] {
        let kv = KvSpec {
            quant,
            ..KvSpec::default()
        };
        let run = |m: &Model| {
            let mut s = Session::with_kv(m, 128, &kv).unwrap();
            let l = s.eval(&prompt).unwrap();
            let a = greedy(&mut s, l, steps);
            s.truncate(41);
            assert_eq!(s.history().len(), 41);
            let l = s.eval(&prompt[41..]).unwrap();
            let b = greedy(&mut s, l, steps);
            (a, b, s.kv_bytes_per_token())
        };
        let t0 = std::time::Instant::now();
        let (ga, gb, gbytes) = run(&gpu);
        let tg = t0.elapsed().as_secs_f64();
        let (ca, cb, cbytes) = run(&cpu);
        assert_eq!(
            ga,
            gb,
            "{}: truncated and refilled on the GPU",
            quant.name()
        );
        assert_eq!(
            cb,
            ca,
            "{}: truncated and refilled on the CPU",
            quant.name()
        );
        assert_eq!(gbytes, cbytes);
        // the CPU's logits at each step of its greedy continuation, plain and with its keys and
        // values jittered at rounding level
        let mut seq = prompt.clone();
        seq.extend_from_slice(&ca[..steps - 1]);
        let rows = |jitter: Option<u32>| -> Vec<Vec<f32>> {
            let mut cache = tern_reference::KvCache::for_spec(&hp, seq.len(), &kv).unwrap();
            if let Some(seed) = jitter {
                cache.set_input_jitter(1e-6, seed);
            }
            let l = reference
                .forward(&seq, &mut cache, tern_reference::LogitsWanted::All)
                .unwrap();
            (prompt.len() - 1..seq.len())
                .map(|i| l[i * vocab..(i + 1) * vocab].to_vec())
                .collect()
        };
        let dist = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max)
        };
        let plain = rows(None);
        let mut noise = 0.0f32;
        let mut allowed: Vec<Vec<u32>> = plain.iter().map(|r| vec![argmax(r)]).collect();
        for seed in 1..=3 {
            for ((r, p), set) in rows(Some(seed)).iter().zip(&plain).zip(&mut allowed) {
                noise = noise.max(dist(r, p));
                if !set.contains(&argmax(r)) {
                    set.push(argmax(r));
                }
            }
        }
        // the GPU teacher-forced on the CPU's tokens (decode steps after the prefill)
        let mut s = Session::with_kv(&gpu, 128, &kv).unwrap();
        let mut l = s.eval(&prompt).unwrap();
        let (mut gtops, mut gap) = (Vec::new(), 0.0f32);
        for (i, (&t, p)) in ca.iter().zip(&plain).enumerate() {
            gtops.push(argmax(&l));
            gap = gap.max(dist(&l, p));
            if i + 1 < steps {
                l = s.eval(&[t]).unwrap();
            }
        }
        let same = gtops.iter().zip(&ca).filter(|(a, b)| a == b).count();
        eprintln!(
            "{}: GPU greedy {ga:?} ({tg:.1} s), CPU greedy {ca:?}; teacher-forced: GPU tops \
             {gtops:?} ({same}/{steps} = the CPU's), the CPU's own under jitter {allowed:?}; \
             max |Δ logit| GPU vs CPU {gap:.2}, CPU jittered vs CPU {noise:.2}; kv bytes/token \
             {gbytes}",
            quant.name()
        );
        if gap > 3.0 * noise.max(0.1) {
            failures.push(format!(
                "{}: max |Δ logit| {gap:.2} > 3 × the CPU's own {noise:.2}",
                quant.name()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// An 8,192-token context on SmolLM2 on the GPU (lavapipe in CI) with a compressed cache
/// (MiniCache + KIVI q4, the defaults): ~2,000 tokens of a real text repeated to fill 8,188
/// positions, then 4 greedy tokens, which must continue the repetition — SmolLM2 copies a
/// repeated text, which needs attention thousands of positions back through the quantized and
/// merged cache. The cache must take at most a third of f16's bytes per token.
///
/// Not in the default run: an 8k prefill is ~3.6 TFLOP of attention alone, and lavapipe had not
/// finished it after 30 minutes on the shared 2-core development machine (issue 14's report);
/// run it with `cargo test --release -p tern-tests --test gpu_kv -- --ignored` where a GPU or
/// a dedicated CPU is available.
#[test]
#[ignore = "an 8,192-token prefill on lavapipe takes more than CI's budget; see the doc comment"]
fn smollm2_8192_context_with_a_compressed_cache() {
    let path = smollm2();
    let Some(gpu) = open_gpu(&path) else { return };
    let n_ctx = 8192;
    let unit = text_tokens(&gpu, 2100);
    let unit = &unit[1..]; // without BOS
    let mut prompt = vec![*text_tokens(&gpu, 1).first().unwrap()];
    while prompt.len() + unit.len() < n_ctx - 4 {
        prompt.extend_from_slice(unit);
    }
    let head = n_ctx - 4 - prompt.len();
    prompt.extend_from_slice(&unit[..head]);
    let want = &unit[head..head + 4];
    let kv = KvSpec {
        quant: KvQuant::Kivi4,
        kivi: Kivi::default(),
        minicache: Some(tern_engine::minicache_on(30)),
    };
    let t0 = std::time::Instant::now();
    let mut s = Session::with_kv(&gpu, n_ctx, &kv).unwrap();
    let l = s.eval(&prompt).unwrap();
    let tp = t0.elapsed().as_secs_f64();
    let got = greedy(&mut s, l, 4);
    let per = s.kv_bytes_per_token();
    let f16 = 2 * 30 * 3 * 64 * 2;
    eprintln!(
        "8192-token context, MiniCache + q4: prefill of {} tokens {tp:.1} s, 4 tokens {:.1} s; \
         generated {got:?}, the text continues {want:?}; kv_bytes_per_token {per} (f16: {f16})",
        prompt.len(),
        t0.elapsed().as_secs_f64() - tp
    );
    assert_eq!(s.history().len(), n_ctx);
    assert_eq!(
        got, want,
        "the repeated text is not continued at 8k context"
    );
    assert!(per * 3 <= f16, "{per} bytes per token");
}

/// Perplexity of `tokens[1..]` from `[n−1][vocab]` logits of `tokens[..n−1]`.
fn ppl_of(logits: &[f32], tokens: &[u32], vocab: usize) -> f64 {
    let n = tokens.len() - 1;
    let mut nll = 0.0f64;
    for (i, l) in logits.chunks_exact(vocab).take(n).enumerate() {
        let m = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let lse = l.iter().map(|&x| f64::from(x - m).exp()).sum::<f64>().ln() + f64::from(m);
        nll += lse - f64::from(l[tokens[i + 1] as usize]);
    }
    (nll / n as f64).exp()
}

/// SmolLM2 end to end, GPU against CPU, in every compressed mode (issue 14: at `-c 2048` the
/// backends' perplexities differed by −0.4 … +1.8 % in the quantized modes, 0.003 % in f16).
///
/// The cause is not a cache bug (`parity_kv_real_smollm2` in the GPU parity harness stores
/// SmolLM2's real rows bit-exactly in every format): the two backends compute K and V in another
/// summation order, ~1e-6 apart, and a quantizer turns a value that sits near a rounding
/// boundary into codes one step apart; after that the forward passes diverge (activation
/// quantization, later layers, later positions) and a quantized mode's perplexity moves by
/// percents. The CPU alone shows the same spread: its own keys and values perturbed by
/// ±5e-7 relative (`KvCache::set_input_jitter`, a few f32 ulps) move its perplexity as much as
/// the GPU does. So a bound of 0.1 % on the backends' perplexities cannot hold in these modes
/// for any two implementations that are not bit-identical in every kernel up to K and V
/// (docs/measurements.md, "GPU/CPU gap").
///
/// What this test asserts, on GPL-3's first 64 tokens in one batch (KIVI G = 16, R = 32 so that
/// both blocks quantize; the GPU through the fused scorer, as `tern perplexity` runs it): f16
/// within 0.1 %; q8 and MiniCache + q4 (the absmax and KIVI stores and readers and the
/// merged pairs) GPU within the CPU's own noise band: |GPU − CPU| ≤ max(0.1 %, 3 × the largest
/// |CPU(jittered) − CPU| over three jitter seeds). A store, dequantization or attention bug
/// shifts the perplexity systematically and beyond that band (e.g. a scale off by an f16 step
/// everywhere, a wrong window row); noise does not. Measured on the loaded 2-core machine
/// (lavapipe; GPU bound: ~30–50 s per mode, pipeline compiles included): f16 gap 0.034 %;
/// q8 0.84 % (noise 1.56 %); q4 0.10 % (3.0 %); q3 0.35 % (6.8 %); q2 8.6 % (13.6 %); a4 8.3 %
/// (21.3 %); a3 7.4 % (12.4 %); MiniCache + q4 0.28 % (1.9 %). q4, a4, q3, q2 and a3 are in
/// `smollm2_gpu_cpu_gap_low_bit_modes`
/// (ignored by default: CI time).
#[test]
fn smollm2_gpu_cpu_gap_is_within_the_cpus_own_rounding_noise() {
    gap_within_noise(&[
        (KvQuant::F16, false),
        (KvQuant::Q8, false),
        (KvQuant::Kivi4, true),
        (KvQuant::Rot4, false),
    ]);
}

/// [`smollm2_gpu_cpu_gap_is_within_the_cpus_own_rounding_noise`] for q4, a4, q3, q2 and a3 (~4 min more
/// on lavapipe: over CI's budget). `cargo test --release -p tern-tests --test gpu_kv -- --ignored
/// smollm2_gpu_cpu_gap_low_bit_modes`.
#[test]
#[ignore = "five more GPU perplexity runs on lavapipe: over CI's time budget"]
fn smollm2_gpu_cpu_gap_low_bit_modes() {
    gap_within_noise(&[
        (KvQuant::Kivi4, false),
        (KvQuant::Absmax4, false),
        (KvQuant::Kivi3, false),
        (KvQuant::Kivi2, false),
        (KvQuant::Absmax3, false),
        (KvQuant::Rot3, false),
        (KvQuant::Rot2, false),
    ]);
}

/// The check of the two tests above for `(format, MiniCache on)` modes.
fn gap_within_noise(list: &[(KvQuant, bool)]) {
    let path = smollm2();
    let ctx = match tern_gpu::GpuContext::new(tern_gpu::DevicePreference::Gpu) {
        Ok(c) => std::sync::Arc::new(c),
        Err(e) if !tern_tests::gpu_required("gpu_kv") => return eprintln!("skipping: {e}"),
        Err(e) => panic!("{e}"),
    };
    let tokens = text_tokens(&Model::open(&path).unwrap(), 64);
    let file = tern_format::TernFile::open(&path).unwrap();
    let hp = file.meta().hparams.clone();
    let vocab = hp.n_vocab as usize;
    let cpu = tern_reference::Model::load(&file).unwrap();
    let gpu =
        std::sync::Arc::new(tern_gpu::GpuModel::load(ctx, &file, Default::default()).unwrap());
    let n = tokens.len();
    let input = &tokens[..n - 1];
    let kivi = Kivi {
        group: 16,
        residual: 32,
    };
    let spec = |quant, minicache| KvSpec {
        quant,
        kivi,
        minicache,
    };
    let mc = Some(tern_engine::minicache_on(hp.n_layer));
    let modes: Vec<KvSpec> = list
        .iter()
        .map(|&(q, on)| spec(q, if on { mc } else { None }))
        .collect();
    let cpu_ppl = |kv: &KvSpec, jitter: Option<u32>| {
        let mut cache = tern_reference::KvCache::for_spec(&hp, n, kv).unwrap();
        if let Some(seed) = jitter {
            cache.set_input_jitter(1e-6, seed);
        }
        let l = cpu
            .forward(input, &mut cache, tern_reference::LogitsWanted::All)
            .unwrap();
        ppl_of(&l, &tokens, vocab)
    };
    let mut failures = Vec::new();
    for kv in &modes {
        let t0 = std::time::Instant::now();
        let c = cpu_ppl(kv, None);
        let tc = t0.elapsed().as_secs_f64();
        let mut s = tern_gpu::GpuSession::new(gpu.clone(), n as u64, n as u64, kv).unwrap();
        // the fused scorer, as `tern perplexity` runs it (no logits materialized)
        let lp = s.score(&tokens).unwrap();
        let g = (-lp.iter().map(|&x| f64::from(x)).sum::<f64>() / lp.len() as f64).exp();
        let tg = t0.elapsed().as_secs_f64() - tc;
        let gap = (g - c).abs() / c;
        let (noise, bound) = if kv.quant == KvQuant::F16 {
            (0.0, 1e-3)
        } else {
            let noise = (1..=3)
                .map(|seed| (cpu_ppl(kv, Some(seed)) - c).abs() / c)
                .fold(0.0f64, f64::max);
            (noise, (3.0 * noise).max(1e-3))
        };
        eprintln!(
            "{:>10}: CPU {c:.4} GPU {g:.4} gap {:.3}% CPU noise {:.3}% bound {:.3}% \
             ({tc:.1} s CPU, {tg:.1} s GPU)",
            name(kv),
            100.0 * gap,
            100.0 * noise,
            100.0 * bound
        );
        if gap > bound {
            failures.push(format!("{}: gap {gap:.2e} > {bound:.2e}", name(kv)));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}
