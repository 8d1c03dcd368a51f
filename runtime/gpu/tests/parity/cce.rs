//! Parity of the fused Cut-Cross-Entropy scorer (`cce.rs`: `cce::score`) and its materialized
//! GPU counterpart (`cce::materialized_logprobs`) against the materialized reference computed
//! here: full `[n][n_vocab]` logits with the `tern-reference` `Matrix` (f32 activations, as the
//! GPU's), then `log softmax` in f64.
//!
//! Scoring: the largest absolute difference of the per-token log-probs, tolerance 1e-4. The GPU
//! sums each logit over `n_embd` in another f32 order than `dot_f32` (≈ 1e-7 · |z| · √n_embd
//! per logit, logits here have a spread of ~4 so ≲ 1e-6) and folds `exp` in f32 blockwise; the
//! log-sum-exp then differs by ~1e-6 and the table measures ≲ 1e-5. An indexing, masking or
//! merge bug moves a log-prob by ≥ ~1e-2.
//!
//! Shapes: n ∈ {1, 7, 17} (the 16-position variant, one or two blocks), {33, 69} (the 64-position
//! one) and {257, 300} (the 128-position one); none a multiple of the block, n_vocab ∈ {1, 300, 1017,
//! 49152} (partial tiles, partial 512-row vocab blocks), n_embd ∈ {32, 96, 576} (not multiples of
//! 64), targets including the first and last rows, a zero hidden row (log p = −ln V) and one
//! position whose target dominates (log p ≈ 0); Q8_0 / Q4_0 / Q4_1 / Q6_K and f32 / f16 / bf16
//! heads; `split` cases on the 64 KiB binding context (heads in up to 26 parts, and a scratch that
//! needs several position chunks).

use super::*;
use tern_gpu::kernels::cce::{self, Head};
use tern_gpu::FloatWeight;

pub(super) enum HeadKind {
    Ggml(GgmlType),
    Float(FloatType),
}

/// f64 log-softmax of the reference's f32 logits at each target.
fn reference_logprobs(logits: &[f32], vocab: usize, targets: &[u32]) -> Vec<f64> {
    targets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let row = &logits[i * vocab..(i + 1) * vocab];
            let m = row
                .iter()
                .fold(f64::NEG_INFINITY, |a, &z| a.max(f64::from(z)));
            let s: f64 = row.iter().map(|&z| (f64::from(z) - m).exp()).sum();
            f64::from(row[t as usize]) - m - s.ln()
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_cce(
    ctx: &GpuContext,
    rng: &mut Rng,
    kind: &HeadKind,
    n: usize,
    vocab: usize,
    d: usize,
    materialized: bool,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    // Head bytes, its reference matrix, and the GPU weight.
    let (m, gw, fw) = match *kind {
        HeadKind::Ggml(q) => {
            let be = q.block_elems();
            let bytes = random_blocks(rng, q, vocab * d / be);
            let m = Matrix::from_encoded("head", vocab, d, &ggml_encoding(q), &bytes)
                .map_err(|e| e.to_string())?;
            let w = GgmlWeight::upload(ctx, q, vocab as u64, d as u64, &bytes).map_err(e)?;
            (m, Some(w), None)
        }
        HeadKind::Float(t) => {
            let vals: Vec<f32> = (0..vocab * d).map(|_| rng.normal() * 0.05).collect();
            let bytes = to_dtype(t, &vals);
            let m = Matrix::from_encoded("head", vocab, d, &Encoding::from(t), &bytes)
                .map_err(|e| e.to_string())?;
            let w = FloatWeight::upload(ctx, t, vocab as u64, d as u64, &bytes).map_err(e)?;
            (m, None, Some(w))
        }
    };
    let head = match (&gw, &fw) {
        (Some(w), _) => Head::Ggml(w),
        (_, Some(w)) => Head::Float(w),
        _ => return Err("no head".into()),
    };
    let parts = match (&gw, &fw) {
        (Some(w), _) => w.parts(),
        (_, Some(w)) => w.parts().len(),
        _ => 0,
    };
    // Hidden states scaled so the logits spread by ~4 (as a real model's do).
    let mut row = vec![0f32; d];
    let mut ss = 0f64;
    let sample = vocab.min(64);
    for r in 0..sample {
        m.row_f32(r, &mut row).map_err(|e| e.to_string())?;
        ss += row
            .iter()
            .map(|&w| f64::from(w) * f64::from(w))
            .sum::<f64>();
    }
    let w_rms = (ss / (sample * d) as f64).sqrt().max(1e-6);
    let scale = (4.0 / (w_rms * (d as f64).sqrt())) as f32;
    let mut hidden: Vec<f32> = (0..n * d).map(|_| rng.normal() * scale).collect();
    let mut targets: Vec<u32> = (0..n).map(|_| (rng.next() % vocab as u64) as u32).collect();
    targets[0] = 0;
    if n > 1 {
        targets[n - 1] = (vocab - 1) as u32;
        hidden[(n - 1) * d..].iter_mut().for_each(|v| *v = 0.0);
    }
    if n > 2 {
        // Position 1: the hidden state points along its target row (a dominant logit).
        m.row_f32(targets[1] as usize, &mut row)
            .map_err(|e| e.to_string())?;
        let k = 30.0 / row.iter().map(|w| w * w).sum::<f32>().max(1e-6);
        for (h, w) in hidden[d..2 * d].iter_mut().zip(&row) {
            *h = w * k;
        }
    }
    let mut logits = vec![0f32; n * vocab];
    m.matmul(
        &hidden,
        ActQuant::None,
        &MatmulOptions::default(),
        &mut logits,
    )
    .map_err(|e| e.to_string())?;
    let want = reference_logprobs(&logits, vocab, &targets);

    let hb = ctx.upload("hidden", &f32_bytes(&hidden)).map_err(e)?;
    let tb = ctx
        .upload(
            "targets",
            &targets
                .iter()
                .flat_map(|t| t.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
        .map_err(e)?;
    let ob = ctx.zeroed("out", (n * 4) as u64).map_err(e)?;
    let t0 = std::time::Instant::now();
    let mut enc = ctx.encoder();
    if materialized {
        cce::materialized_logprobs(ctx, &mut enc, &hb, n as u64, head, &tb, &ob).map_err(e)?;
    } else {
        cce::score(ctx, &mut enc, &hb, n as u64, head, &tb, &ob).map_err(e)?;
    }
    ctx.submit_wait(enc).map_err(e)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let got = ctx.read_f32(&ob, n).map_err(e)?;
    let mut worst = (0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let diff = (f64::from(g) - w).abs();
        if diff.is_nan() || diff > worst.0 {
            worst = (if diff.is_nan() { f64::INFINITY } else { diff }, i);
        }
    }
    let chunks = if materialized {
        String::new()
    } else {
        let sb = cce::scratch_bytes(ctx, n as u64, head).map_err(e)?;
        format!(", scratch {sb} B")
    };
    let msg = format!(
        "max |Δ log p| {:.2e} (at {}: gpu {} vs {:.6}), {parts} part(s){chunks}, {ms:.1} ms",
        worst.0, worst.1, got[worst.1], want[worst.1]
    );
    if worst.0 <= 1e-4 {
        Ok(msg)
    } else {
        Err(msg)
    }
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    use GgmlType::*;
    let table: [(HeadKind, usize, usize, usize, bool); 20] = [
        (HeadKind::Ggml(Q8_0), 1, 1, 32, false),
        (HeadKind::Ggml(Q8_0), 7, 300, 96, false),
        (HeadKind::Ggml(Q4_0), 17, 300, 64, false),
        (HeadKind::Ggml(Q8_0), 33, 1017, 96, false),
        (HeadKind::Ggml(Q4_1), 300, 1017, 64, false),
        (HeadKind::Float(FloatType::F16), 257, 300, 40, false),
        (HeadKind::Ggml(Q4_1), 69, 1017, 32, false),
        (HeadKind::Ggml(Q8_0), 69, 1017, 576, false),
        (HeadKind::Ggml(Q4_0), 69, 300, 96, false),
        (HeadKind::Ggml(Q8_0), 7, 49152, 576, false),
        (HeadKind::Ggml(Q4_1), 1, 49152, 96, false),
        (HeadKind::Ggml(Q6K), 7, 1017, 256, false),
        (HeadKind::Float(FloatType::F32), 7, 1017, 96, false),
        (HeadKind::Float(FloatType::Bf16), 69, 300, 33, false),
        (HeadKind::Float(FloatType::F16), 1, 1, 1, false),
        // split: 64 KiB bindings
        (HeadKind::Ggml(Q8_0), 69, 1017, 96, true),
        (HeadKind::Ggml(Q4_1), 7, 49152, 32, true),
        (HeadKind::Ggml(Q8_0), 300, 49152, 32, true),
        (HeadKind::Float(FloatType::Bf16), 69, 1017, 96, true),
        (HeadKind::Float(FloatType::F32), 7, 1017, 576, true),
    ];
    for (kind, n, vocab, d, split) in table {
        let name = match &kind {
            HeadKind::Ggml(q) => format!("{q:?}"),
            HeadKind::Float(t) => format!("{t:?}"),
        };
        let kind = std::sync::Arc::new(kind);
        let k2 = std::sync::Arc::clone(&kind);
        let s = if split { " split" } else { "" };
        v.push((
            format!("cce {name} n {n} vocab {vocab} d {d}{s}"),
            split,
            Box::new(move |x, r| run_cce(x, r, &kind, n, vocab, d, false)),
        ));
        // The materialized GPU path on a few of the shapes (it is the benchmark's baseline).
        // (A 49152-entry logit row does not fit a 64 KiB binding: a typed error, not a case.)
        if n > 1 && vocab == 1017 {
            v.push((
                format!("cce materialized {name} n {n} vocab {vocab} d {d}{s}"),
                split,
                Box::new(move |x, r| run_cce(x, r, &k2, n, vocab, d, true)),
            ));
        }
    }
    v
}
