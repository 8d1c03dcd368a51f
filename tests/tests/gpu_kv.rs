//! The compressed KV cache on the GPU end to end (lavapipe in CI, `TERN_REQUIRE_GPU=1`), against
//! the CPU reference's cache (`tern_reference::KvCache`, the oracle of `tern_format::kv`):
//!
//! * SmolLM2-135M-Instruct, one perplexity window of 192 tokens scored in batches of 64 (KIVI
//!   with G = 16, R = 64, so blocks fill inside and across batches): the GPU's perplexity within
//!   0.1% of the CPU's in every KV format, and the same `kv_bytes_per_token`;
//! * decode after a prefill in a KIVI cache (greedy tokens GPU = CPU), truncation into a
//!   quantized block (the engine re-runs what the cache dropped) continuing exactly as a cache
//!   filled from scratch.

use std::path::PathBuf;

use tern_engine::{
    Device, Kivi, KvQuant, KvSpec, LoadOptions, Model, NoObserver, PerplexityOptions, Session,
};
use tern_import::pack::PackOptions;
use tern_tests::scratch;

fn smollm2() -> PathBuf {
    let path = scratch("gpu_kv_smollm2").join("smollm2.tern");
    if !path.exists() {
        tern_import::gguf_import::import_gguf(
            &tern_tests::smollm2_gguf(),
            &path,
            &PackOptions::default(),
            &mut |_, _, _| {},
        )
        .unwrap();
    }
    path
}

fn open_gpu(path: &std::path::Path) -> Option<Model> {
    let opts = LoadOptions {
        device: Device::Gpu,
        ..LoadOptions::default()
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(tern_engine::EngineError::Gpu(tern_gpu::GpuError::NoAdapter(e)))
            if !tern_tests::gpu_required("gpu_kv") =>
        {
            eprintln!("skipping: no GPU adapter{e}");
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

fn spec(quant: KvQuant) -> KvSpec {
    KvSpec {
        quant,
        kivi: Kivi {
            group: 16,
            residual: 64,
        },
        minicache: None,
    }
}

#[test]
fn smollm2_perplexity_gpu_equals_cpu_in_every_kv_format() {
    let path = smollm2();
    let Some(gpu) = open_gpu(&path) else { return };
    let cpu = Model::open(&path).unwrap();
    let c = 192;
    let tokens = text_tokens(&cpu, 2 * c);
    let t0 = std::time::Instant::now();
    for quant in KvQuant::ALL {
        let opts = PerplexityOptions {
            n_ctx: c,
            batch: 64,
            windows: Some(vec![0]),
            kv: spec(quant),
            ..PerplexityOptions::default()
        };
        let pc = cpu.perplexity(&tokens, &opts, &mut NoObserver).unwrap();
        let pg = gpu.perplexity(&tokens, &opts, &mut NoObserver).unwrap();
        let rel = (pg.ppl - pc.ppl).abs() / pc.ppl;
        eprintln!(
            "{}: perplexity CPU {:.4} GPU {:.4} (rel {rel:.2e}), kv_bytes_per_token CPU {:.1} \
             GPU {:.1}",
            quant.name(),
            pc.ppl,
            pg.ppl,
            pc.kv_bytes_per_token,
            pg.kv_bytes_per_token
        );
        assert!(rel <= 1e-3, "{}: GPU perplexity off by {rel}", quant.name());
        assert_eq!(
            pc.kv_bytes_per_token,
            pg.kv_bytes_per_token,
            "{}",
            quant.name()
        );
    }
    eprintln!("8 formats in {:.1} s", t0.elapsed().as_secs_f64());
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
    let kv = spec(KvQuant::Kivi4);
    let run = |m: &Model| {
        let mut s = Session::with_kv(m, 256, &kv).unwrap();
        let l = s.eval(&prompt).unwrap();
        let a = greedy(&mut s, l, 8);
        // back into the block [128, 192), not quantized yet (158 held): kept exactly; then into
        // the quantized block [64, 128): the cache keeps 64, the engine re-runs 64..100
        s.truncate(140);
        assert_eq!(s.history().len(), 140);
        let l = s.eval(&prompt[140..]).unwrap();
        let b = greedy(&mut s, l, 8);
        s.truncate(100);
        assert_eq!(s.history().len(), 100);
        let l = s.eval(&prompt[100..]).unwrap();
        let c = greedy(&mut s, l, 8);
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
