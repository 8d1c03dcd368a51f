//! Parity of the attention family (`attn.rs`, `float_ops.rs`): KV-cache store (bit-exact copy at
//! the step's position), causal GQA attention for decode and prefill against
//! `tern_reference::attention`, and the f32/f16/bf16 GEMV against plain f32 dots of the decoded
//! rows (including a matrix split across bindings).

use super::*;
use tern_gpu::attn::{self, StepParams};
use tern_gpu::float_ops::{self, FloatWeight};

fn step_buffer(ctx: &GpuContext, p0: u32, n: u32) -> wgpu::Buffer {
    let b = ctx
        .create_buffer(
            "step",
            std::mem::size_of::<StepParams>() as u64,
            wgpu::BufferUsages::UNIFORM
                | wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST,
        )
        .unwrap();
    let sp = StepParams {
        p0,
        n_tokens: n,
        _pad: [0; 2],
    };
    ctx.write(&b, bytemuck::bytes_of(&sp));
    b
}

/// Fill a cache with `p0` random rows on the host, store `n` new rows on the GPU, run attention
/// for the `n` queries at positions `p0..p0+n`.
fn run_attention(
    ctx: &GpuContext,
    rng: &mut Rng,
    p0: usize,
    n: usize,
    n_head: usize,
    n_kv: usize,
    hd: usize,
) -> Result<String, String> {
    let n_ctx = p0 + n + 3;
    let row = n_kv * hd;
    let q_dim = n_head * hd;
    let mut kc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
    let mut vc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
    let knew: Vec<f32> = (0..n * row).map(|_| rng.normal()).collect();
    let vnew: Vec<f32> = (0..n * row).map(|_| rng.normal()).collect();
    let q: Vec<f32> = (0..n * q_dim).map(|_| rng.normal()).collect();
    let e = |e: GpuError| e.to_string();
    let kb = ctx.upload("k", &f32_bytes(&kc)).map_err(e)?;
    let vb = ctx.upload("v", &f32_bytes(&vc)).map_err(e)?;
    let knb = ctx.upload("knew", &f32_bytes(&knew)).map_err(e)?;
    let vnb = ctx.upload("vnew", &f32_bytes(&vnew)).map_err(e)?;
    let qb = ctx.upload("q", &f32_bytes(&q)).map_err(e)?;
    let ob = ctx.zeroed("out", (n * q_dim * 4) as u64).map_err(e)?;
    let step = step_buffer(ctx, p0 as u32, n as u32);
    let mut enc = ctx.encoder();
    let (nn, r, nc) = (n as u64, row as u64, n_ctx as u64);
    attn::kv_store(ctx, &mut enc, &step, &knb, &kb, nn, r, nc).map_err(e)?;
    attn::kv_store(ctx, &mut enc, &step, &vnb, &vb, nn, r, nc).map_err(e)?;
    let scale = 1.0 / (hd as f32).sqrt();
    attn::attention(
        ctx,
        &mut enc,
        &step,
        &qb,
        &kb,
        &vb,
        &ob,
        nn,
        n_head as u64,
        n_kv as u64,
        hd as u64,
        nc,
        scale,
    )
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    // reference: store, then attend
    kc[p0 * row..(p0 + n) * row].copy_from_slice(&knew);
    vc[p0 * row..(p0 + n) * row].copy_from_slice(&vnew);
    let gk = ctx.read_f32(&kb, n_ctx * row).map_err(e)?;
    let gv = ctx.read_f32(&vb, n_ctx * row).map_err(e)?;
    score("kv_store k", Check::Exact, &gk, &kc)?;
    score("kv_store v", Check::Exact, &gv, &vc)?;
    let mut want = vec![0.0f32; n * q_dim];
    for t in 0..n {
        tern_reference::attention(
            &q[t * q_dim..(t + 1) * q_dim],
            &kc,
            &vc,
            p0 + t + 1,
            n_head,
            n_kv,
            hd,
            &mut want[t * q_dim..(t + 1) * q_dim],
        )
        .map_err(|e| e.to_string())?;
    }
    let got = ctx.read_f32(&ob, n * q_dim).map_err(e)?;
    score("attention", Check::Nmse(1e-10), &got, &want).map(|s| format!("kv bit-exact, {s}"))
}

fn run_float_gemv(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    rows: usize,
    cols: usize,
    tokens: usize,
) -> Result<String, String> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    let bytes = to_dtype(dtype, &w);
    // the reference multiplies the values the GPU sees (rounded to the dtype)
    let enc_ = Encoding::from(dtype);
    let wd = enc_
        .decode_f32(&[rows as u64, cols as u64], &bytes)
        .map_err(|e| e.to_string())?;
    let x = activations(rng, tokens, cols);
    let e = |e: GpuError| e.to_string();
    let fw = FloatWeight::upload(ctx, dtype, rows as u64, cols as u64, &bytes).map_err(e)?;
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let yb = ctx.zeroed("y", (tokens * rows * 4) as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    float_ops::float_gemv(ctx, &mut enc, &fw, &xb, tokens as u64, &yb).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&yb, tokens * rows).map_err(e)?;
    let mut want = vec![0.0f32; tokens * rows];
    for t in 0..tokens {
        for r in 0..rows {
            want[t * rows + r] = wd[r * cols..(r + 1) * cols]
                .iter()
                .zip(&x[t * cols..(t + 1) * cols])
                .map(|(a, b)| a * b)
                .sum();
        }
    }
    score("float_gemv", Check::Nmse(1e-10), &got, &want)
        .map(|s| format!("{s}, {} parts", fw.parts().len()))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for (p0, n, nh, nkv, hd) in [
        (0, 1, 9, 3, 64),
        (1, 1, 9, 3, 64),
        (37, 1, 20, 5, 128),
        (300, 1, 9, 3, 64),
        (0, 5, 4, 4, 18),
        (13, 67, 6, 2, 72),
        (129, 3, 20, 5, 128),
    ] {
        v.push((
            format!("attention p0={p0} n={n} heads {nh}/{nkv}×{hd}"),
            false,
            Box::new(move |c, r| run_attention(c, r, p0, n, nh, nkv, hd)),
        ));
    }
    for dt in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
        for (rows, cols, tokens, split) in [
            (1, 1, 1, false),
            (33, 31, 2, false),
            (257, 576, 1, false),
            (70, 2560, 3, false),
            (300, 100, 2, true),
            (700, 100, 1, true),
        ] {
            v.push((
                format!("float_gemv {dt:?} {rows}×{cols}×{tokens}"),
                split,
                Box::new(move |c, r| run_float_gemv(c, r, dt, rows, cols, tokens)),
            ));
        }
    }
    v
}
