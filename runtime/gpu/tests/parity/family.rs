//! Parity of the model-family kernels (`family.rs`, issue 31) against `tern_reference`:
//!
//! * `bias_scale` — q/k/v biases (`kernels::add_bias`, rows of 1, 33, 1000 and a stacked
//!   q | k | v row) and the embedding scale (`x *= s`): bit-exact;
//! * `head_rmsnorm` — QK-norm, in place, of planar rows and of the heads inside stacked
//!   `[n][q | k | v]` rows (`kernels::rmsnorm` over rows of head_dim; head_dim 1, 18, 64, 128,
//!   256), NMSE ≤ 1e-6 as rmsnorm's, the words outside the heads untouched (bit-exact);
//! * GeGLU (`elementwise.wgsl` OP 3, alone and over gate/up pairs) against `kernels::geglu`,
//!   inputs up to ±60 (tanh saturates; no overflow to NaN): NMSE ≤ 1e-6;
//! * RoPE with a layer's frequencies (`RopeFreqs`: linear scaling, Llama 3's divisors from
//!   `llama3_rope_factors`, bit-exact with the reference's) against `kernels::rope_ext`, positions
//!   up to 131071: NMSE ≤ 1e-12 as plain RoPE's;
//! * sliding-window attention (`attention_windowed`) against `kernels::attention` over each
//!   query's window (the reference model's `first_key`): windows of 1, 4, 32, 512 and past the
//!   cache, decode and batches, Gemma 3's 4/1×256 heads and odd ones, forced split counts
//!   (1, 7, 128): NMSE ≤ 1e-10 as plain attention's.

use super::attn::{f32_layout, step_buffer};
use super::*;
use tern_gpu::kernels::{HeadRows, RopeFreqs};
use tern_reference::kernels as rk;

fn run_bias(
    ctx: &GpuContext,
    rng: &mut Rng,
    rows: usize,
    len: usize,
    scale: Option<f32>,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let n = rows * len;
    let x: Vec<f32> = (0..n).map(|_| rng.normal() * 4.0).collect();
    let b: Vec<f32> = (0..len).map(|_| rng.normal()).collect();
    let mut want = x.clone();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let bb = ctx.upload("b", &f32_bytes(&b)).map_err(e)?;
    let mut enc = ctx.encoder();
    match scale {
        Some(s) => {
            want.iter_mut().for_each(|v| *v *= s);
            kernels::bias_scale(ctx, &mut enc, &xb, None, s, n as u64).map_err(e)?;
        }
        None => {
            rk::add_bias(&mut want, &b).map_err(|e| e.to_string())?;
            let bias = Some((&bb, len as u64));
            kernels::bias_scale(ctx, &mut enc, &xb, bias, 1.0, n as u64).map_err(e)?;
        }
    }
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&xb, n).map_err(e)?;
    score("bias_scale", Check::Exact, &got, &want)
}

/// QK-norm of `n_heads` heads per token in rows of `stride` words from word `offset`
/// (`stride` 0: planar rows).
fn run_head_norm(
    ctx: &GpuContext,
    rng: &mut Rng,
    n_tokens: usize,
    n_heads: usize,
    hd: usize,
    stride: usize,
    offset: usize,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let rows = if stride == 0 {
        HeadRows::planar(hd as u64, n_heads as u64, n_tokens as u64)
    } else {
        HeadRows {
            head_dim: hd as u64,
            n_heads: n_heads as u64,
            n_tokens: n_tokens as u64,
            row_stride: stride as u64,
            offset: offset as u64,
        }
    };
    let (rs, off) = (rows.row_stride as usize, rows.offset as usize);
    let total = n_tokens * rs;
    let x: Vec<f32> = (0..total).map(|_| rng.normal() * 3.0).collect();
    let w: Vec<f32> = (0..hd).map(|_| rng.normal()).collect();
    let eps = 1e-6;
    let mut want = x.clone();
    for t in 0..n_tokens {
        let a = t * rs + off;
        let span = a..a + n_heads * hd;
        let src = x[span.clone()].to_vec();
        rk::rmsnorm(&src, &w, eps, &mut want[span]).map_err(|e| e.to_string())?;
    }
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let wb = ctx.upload("w", &f32_bytes(&w)).map_err(e)?;
    let mut enc = ctx.encoder();
    kernels::head_rmsnorm(ctx, &mut enc, &xb, &wb, rows, eps).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&xb, total).map_err(e)?;
    // outside the heads: untouched
    let outside = |v: &[f32]| -> Vec<f32> {
        v.iter()
            .enumerate()
            .filter(|(i, _)| {
                let c = i % rs;
                c < off || c >= off + n_heads * hd
            })
            .map(|(_, &x)| x)
            .collect()
    };
    score(
        "head_rmsnorm outside",
        Check::Exact,
        &outside(&got),
        &outside(&x),
    )?;
    score("head_rmsnorm", Check::Nmse(1e-6), &got, &want)
}

fn run_geglu(ctx: &GpuContext, rng: &mut Rng, n: usize, pairs: bool) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let mut a: Vec<f32> = (0..n).map(|_| rng.normal() * 3.0).collect();
    // saturated tanh both ways, and the largest inputs a GELU sees
    for (i, v) in [60.0, -60.0, 12.0, -12.0, 0.0, -0.0]
        .into_iter()
        .enumerate()
    {
        if let Some(x) = a.get_mut(i * 7) {
            *x = v;
        }
    }
    let b: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let mut want = vec![0f32; n];
    rk::geglu(&a, &b, &mut want).map_err(|e| e.to_string())?;
    let out = ctx.zeroed("out", (n * 4) as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    if pairs {
        let gu: Vec<f32> = a.iter().zip(&b).flat_map(|(&g, &u)| [g, u]).collect();
        let gb = ctx.upload("gu", &f32_bytes(&gu)).map_err(e)?;
        kernels::glu_pairs(ctx, &mut enc, EltOp::GeGlu, &gb, &out, n as u64).map_err(e)?;
        ctx.submit_wait(enc).map_err(e)?;
    } else {
        let ab = ctx.upload("a", &f32_bytes(&a)).map_err(e)?;
        let bb = ctx.upload("b", &f32_bytes(&b)).map_err(e)?;
        kernels::elementwise(ctx, &mut enc, EltOp::GeGlu, &ab, &bb, &out, n as u64).map_err(e)?;
        ctx.submit_wait(enc).map_err(e)?;
    }
    let got = ctx.read_f32(&out, n).map_err(e)?;
    score("geglu", Check::Nmse(1e-6), &got, &want)
}

/// How a RoPE case scales its frequencies.
#[derive(Clone, Copy, Debug)]
enum Scaling {
    Linear(f32),
    /// Llama 3.2's `rope_scaling` (factor 32, low 1, high 4, original 8192).
    Llama3,
    /// Divisors as a file stores them (`rope_freqs.weight`): arbitrary positive values.
    Factors,
}

#[allow(clippy::too_many_arguments)]
fn run_rope_freqs(
    ctx: &GpuContext,
    rng: &mut Rng,
    n_heads: usize,
    hd: usize,
    rd: usize,
    theta: f32,
    scaling: Scaling,
    neox: bool,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let positions: [u64; 6] = [0, 1, 7, 4095, 8191, 131071];
    let mut f = RopeFreqs::plain(rd as u64, theta);
    match scaling {
        Scaling::Linear(factor) => f.freq_scale = 1.0 / factor,
        Scaling::Llama3 => {
            let gpu = kernels::llama3_rope_factors(theta, rd, 32.0, 1.0, 4.0, 8192);
            let cpu = rk::llama3_rope_factors(theta, rd, 32.0, 1.0, 4.0, 8192);
            score("llama3 factors", Check::Exact, &gpu, &cpu)?;
            f.factors = Some(gpu);
        }
        Scaling::Factors => {
            f.factors = Some((0..rd / 2).map(|_| 0.5 + rng.unit() * 40.0).collect())
        }
    }
    let per = n_heads * hd;
    let x: Vec<f32> = (0..positions.len() * per).map(|_| rng.normal()).collect();
    let mut want = x.clone();
    for (t, &pos) in positions.iter().enumerate() {
        rk::rope_ext(
            &mut want[t * per..(t + 1) * per],
            n_heads,
            hd,
            rd,
            pos as usize,
            theta,
            neox,
            f.freq_scale,
            f.factors.as_deref(),
        )
        .map_err(|e| e.to_string())?;
    }
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let tb = ctx.upload("table", &f.table(&positions)).map_err(e)?;
    let mut enc = ctx.encoder();
    let (nh, n) = (n_heads as u64, positions.len() as u64);
    kernels::rope_with_table(ctx, &mut enc, &xb, &tb, nh, hd as u64, rd as u64, n, neox)
        .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&xb, x.len()).map_err(e)?;
    score("rope_freqs", Check::Nmse(1e-12), &got, &want)
}

/// `n` queries at positions `p0..p0+n` over a random f32 cache, each attending the last
/// `window` keys of its causal past, on the GPU (`split` key chunks, or the adapter's choice) and
/// in the reference.
#[allow(clippy::too_many_arguments)]
fn run_window(
    ctx: &GpuContext,
    rng: &mut Rng,
    p0: usize,
    n: usize,
    (n_head, n_kv, hd): (usize, usize, usize),
    window: usize,
    split: Option<u64>,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let n_ctx = p0 + n + 3;
    let row = n_kv * hd;
    let q_dim = n_head * hd;
    let kc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
    let vc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
    let q: Vec<f32> = (0..n * q_dim).map(|_| rng.normal()).collect();
    let kb = ctx.upload("k", &f32_bytes(&kc)).map_err(e)?;
    let vb = ctx.upload("v", &f32_bytes(&vc)).map_err(e)?;
    let qb = ctx.upload("q", &f32_bytes(&q)).map_err(e)?;
    let ob = ctx.zeroed("out", (n * q_dim * 4) as u64).map_err(e)?;
    let step = step_buffer(ctx, p0 as u32, n as u32);
    let l = f32_layout(n_kv, hd, n_ctx).map_err(e)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut enc = ctx.encoder();
    let (nn, nh) = (n as u64, n_head as u64);
    tern_gpu::kernels::attention_windowed(
        ctx,
        &mut enc,
        &l,
        &step,
        &qb,
        (&kb, &vb),
        &ob,
        nn,
        nh,
        scale,
        split,
        window as u64,
    )
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let want = reference_windowed(&q, (&kc, &vc), p0, n, (n_head, n_kv, hd), window)?;
    let got = ctx.read_f32(&ob, n * q_dim).map_err(e)?;
    score("windowed attention", Check::Nmse(1e-10), &got, &want)
}

/// `tern_reference::kernels::attention` of `n` queries at positions `p0..`, each over the last
/// `window` keys of its causal past (the reference model's `first_key`).
pub(crate) fn reference_windowed(
    q: &[f32],
    (kc, vc): (&[f32], &[f32]),
    p0: usize,
    n: usize,
    (n_head, n_kv, hd): (usize, usize, usize),
    window: usize,
) -> Result<Vec<f32>, String> {
    let (q_dim, row) = (n_head * hd, n_kv * hd);
    let mut want = vec![0.0f32; n * q_dim];
    for t in 0..n {
        let pos = p0 + t;
        let k0 = (pos + 1).saturating_sub(window);
        rk::attention(
            &q[t * q_dim..(t + 1) * q_dim],
            &kc[k0 * row..],
            &vc[k0 * row..],
            pos + 1 - k0,
            n_head,
            n_kv,
            hd,
            &mut want[t * q_dim..(t + 1) * q_dim],
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(want)
}

pub(crate) fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for (rows, len) in [(1, 1), (3, 33), (2, 1000), (5, 64 + 2 * 16)] {
        v.push((
            format!("family bias {rows}×{len}"),
            false,
            Box::new(move |x, r| run_bias(x, r, rows, len, None)),
        ));
    }
    for (n, s) in [(1, 25.298_222), (257, 8.0), (70000, 0.5)] {
        v.push((
            format!("family embed_scale {n} ×{s}"),
            false,
            Box::new(move |x, r| run_bias(x, r, n, 1, Some(s))),
        ));
    }
    // (tokens, heads, head_dim, row stride, offset): planar; the queries and the keys of
    // stacked q | k | v rows (Qwen 3: 16/8×128 → keys at 2048 of 4096; Gemma 3: 4/1×256)
    for (t, h, hd, stride, off) in [
        (1, 1, 1, 0, 0),
        (3, 5, 18, 0, 0),
        (2, 14, 64, 0, 0),
        (4, 4, 256, 0, 0),
        (3, 4, 256, 4 * 256 + 2 * 256, 0),
        (3, 1, 256, 4 * 256 + 2 * 256, 4 * 256),
        (2, 8, 128, 16 * 128 + 2 * 8 * 128, 16 * 128),
        (5, 3, 64, 7 * 64 + 5, 2 * 64 + 3),
    ] {
        v.push((
            format!("family head_rmsnorm {t}×{h}×{hd} stride {stride} offset {off}"),
            false,
            Box::new(move |x, r| run_head_norm(x, r, t, h, hd, stride, off)),
        ));
    }
    for n in [1, 257, 70000] {
        for pairs in [false, true] {
            v.push((
                format!("family geglu {n} pairs={pairs}"),
                false,
                Box::new(move |x, r| run_geglu(x, r, n, pairs)),
            ));
        }
    }
    for neox in [false, true] {
        for (h, hd, rd, theta, s) in [
            (4, 64, 64, 500_000.0, Scaling::Llama3),
            (3, 128, 128, 500_000.0, Scaling::Factors),
            (2, 64, 32, 10_000.0, Scaling::Factors),
            (4, 256, 256, 1_000_000.0, Scaling::Linear(8.0)),
            (1, 2, 2, 10_000.0, Scaling::Linear(4.0)),
        ] {
            v.push((
                format!("family rope_freqs neox={neox} {h}×{hd} rope_dim {rd} {s:?}"),
                false,
                Box::new(move |x, r| run_rope_freqs(x, r, h, hd, rd, theta, s, neox)),
            ));
        }
    }
    // (p0, tokens, heads, window, split)
    for (p0, n, heads, w, split) in [
        (0, 1, (4, 1, 256), 4, None),
        (3, 1, (4, 1, 256), 4, None),
        (37, 1, (4, 1, 256), 4, Some(7)),
        (300, 1, (4, 1, 256), 32, None),
        (300, 1, (4, 1, 256), 32, Some(128)),
        (600, 1, (4, 1, 256), 512, None),
        (600, 1, (4, 1, 256), 512, Some(1)),
        (10, 1, (6, 2, 72), 1, None),
        (0, 5, (4, 1, 256), 4, None),
        (2, 12, (4, 1, 256), 4, None),
        (30, 67, (14, 2, 64), 32, None),
        (30, 67, (8, 4, 32), 7, Some(3)),
        (5, 6, (4, 2, 16), 1000, None),
    ] {
        v.push((
            format!("family window p0 {p0} n {n} heads {heads:?} window {w} split {split:?}"),
            false,
            Box::new(move |x, r| run_window(x, r, p0, n, heads, w, split)),
        ));
    }
    v
}
