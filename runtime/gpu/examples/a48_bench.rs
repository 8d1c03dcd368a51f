//! BitNet a4.8 kernel micro-bench at 2B4T's shapes, random data (no model files):
//!
//! * the sparse ternary GEMV against the dense one (one token, INT8 activations) at 0, 50, 80 and
//!   90% zero inputs, for the down projection (2560 × 6912) and the attention output (2560 ×
//!   2560): dense GEMV, sparse kernel forced to its sparse walk, and with its switch at half the
//!   words;
//! * the ternary GEMV with INT4 against INT8 activations at one token (q/o, k/v, gate/up);
//! * the ternary GEMM with INT4 against INT8 activations at 512 tokens (q/o, k/v, gate/up, down);
//! * the a4.8 quantizers (fused with RMSNorm) against the INT8 one, one token and 512.
//!
//! Prints one JSON line. Timing: `iters` calls recorded into one encoder, then submit + wait.
//!
//! ```text
//! cargo run --release -p tern-gpu --example a48_bench [-- --quick]
//! ```

use std::time::Instant;

use tern_format::{ternary, FloatType, TernaryLayout};
use tern_gpu::kernels::{self, A48Quant, ActInt8, GemmTile};
use tern_gpu::{DevicePreference, GpuContext, TernaryWeight};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f32 {
        (self.next() % (1 << 24)) as f32 / (1 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() * 1.7 - 3.4
    }
}

fn per_call(
    ctx: &GpuContext,
    iters: usize,
    mut f: impl FnMut(&mut wgpu::CommandEncoder) -> tern_gpu::Result<()>,
) -> anyhow::Result<f64> {
    let mut enc = ctx.encoder();
    f(&mut enc)?;
    ctx.submit_wait(enc)?;
    let mut enc = ctx.encoder();
    for _ in 0..iters {
        f(&mut enc)?;
    }
    let t = Instant::now();
    ctx.submit_wait(enc)?;
    Ok(t.elapsed().as_secs_f64() / iters as f64)
}

fn weight(rng: &mut Rng, ctx: &GpuContext, rows: u64, cols: u64) -> anyhow::Result<TernaryWeight> {
    let l = TernaryLayout::Bits2;
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let bytes = ternary::pack(l, rows, cols, &trits, 0, FloatType::F32, &[0.02])?;
    Ok(TernaryWeight::upload(
        ctx,
        l,
        rows,
        cols,
        0,
        FloatType::F32,
        &bytes,
    )?)
}

/// `tokens` rows of `cols` values with a `sparsity` fraction of zeros, uploaded.
fn rows(
    rng: &mut Rng,
    ctx: &GpuContext,
    tokens: u64,
    cols: u64,
    sparsity: f32,
) -> anyhow::Result<wgpu::Buffer> {
    let x: Vec<u8> = (0..tokens * cols)
        .flat_map(|_| {
            let v = if rng.unit() < sparsity {
                0.0
            } else {
                rng.normal()
            };
            v.to_le_bytes()
        })
        .collect();
    Ok(ctx.upload("x", &x)?)
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let ctx = GpuContext::new(DevicePreference::Auto)?;
    let mut rng = Rng(48);
    let mut fields = vec![
        format!("\"adapter\":{:?}", ctx.info.name),
        format!("\"packed_dot\":{}", ctx.info.packed_dot),
        format!("\"sparse_max_density\":{}", kernels::SPARSE_MAX_DENSITY),
    ];
    let iters = if quick { 3 } else { 300 };

    // Sparse vs dense GEMV, one token.
    for (name, r, c) in [
        ("down_2560x6912", 2560u64, 6912u64),
        ("attn_out_2560x2560", 2560, 2560),
    ] {
        let w = weight(&mut rng, &ctx, r, c)?;
        for sparsity in [0.0f32, 0.5, 0.8, 0.9] {
            let xb = rows(&mut rng, &ctx, 1, c, sparsity)?;
            let a = ActInt8::alloc(&ctx, 1, c)?;
            let mut enc = ctx.encoder();
            kernels::quantize_act_int8_into(&ctx, &mut enc, &xb, &a)?;
            ctx.submit_wait(enc)?;
            let q = ctx.read_bytes(&a.q, 0, c.div_ceil(4) * 4)?;
            let zero_words = q.chunks(4).filter(|w| w.iter().all(|&b| b == 0)).count() as f64
                / c.div_ceil(4) as f64;
            let y = ctx.zeroed("y", r * 4)?;
            let dense = per_call(&ctx, iters, |e| kernels::ternary_gemv(&ctx, e, &w, &a, &y))?;
            let sparse = per_call(&ctx, iters, |e| {
                kernels::ternary_gemv_sparse(&ctx, e, &w, &a, &y, 1.0)
            })?;
            let switched = per_call(&ctx, iters, |e| {
                kernels::ternary_gemv_sparse(&ctx, e, &w, &a, &y, 0.5)
            })?;
            fields.push(format!(
                "\"sparse_{name}_{}pct\":{{\"zero_words\":{zero_words:.3},\"dense_us\":{:.1},\"sparse_walk_us\":{:.1},\"switch_half_us\":{:.1}}}",
                (sparsity * 100.0) as u32,
                dense * 1e6,
                sparse * 1e6,
                switched * 1e6
            ));
        }
    }

    // GEMV, one token: INT4 vs INT8 activations (decode's q/k/v and gate/up inputs).
    for (name, r, c) in [
        ("q_o_2560x2560", 2560u64, 2560u64),
        ("k_v_640x2560", 640, 2560),
        ("gate_up_6912x2560", 6912, 2560),
    ] {
        let w = weight(&mut rng, &ctx, r, c)?;
        let xb = rows(&mut rng, &ctx, 1, c, 0.0)?;
        let a8 = ActInt8::alloc(&ctx, 1, c)?;
        let a4 = ActInt8::alloc(&ctx, 1, c)?.as_int4()?;
        let y = ctx.zeroed("y", r * 4)?;
        let mut enc = ctx.encoder();
        kernels::quantize_act_int8_into(&ctx, &mut enc, &xb, &a8)?;
        kernels::quantize_act_a48_into(&ctx, &mut enc, &xb, None, A48Quant::Int4Absmean, &a4)?;
        ctx.submit_wait(enc)?;
        let t8 = per_call(&ctx, iters, |e| kernels::ternary_gemv(&ctx, e, &w, &a8, &y))?;
        let t4 = per_call(&ctx, iters, |e| kernels::ternary_gemv(&ctx, e, &w, &a4, &y))?;
        fields.push(format!(
            "\"gemv_{name}_1t_us\":{{\"int8\":{:.1},\"int4\":{:.1}}}",
            t8 * 1e6,
            t4 * 1e6
        ));
    }

    // GEMM, 512 tokens: INT4 vs INT8 activations.
    let tokens = if quick { 64 } else { 512 };
    let giters = if quick { 2 } else { 20 };
    for (name, r, c) in [
        ("q_o_2560x2560", 2560u64, 2560u64),
        ("k_v_640x2560", 640, 2560),
        ("gate_up_6912x2560", 6912, 2560),
        ("down_2560x6912", 2560, 6912),
    ] {
        let w = weight(&mut rng, &ctx, r, c)?;
        let xb = rows(&mut rng, &ctx, tokens, c, 0.0)?;
        let a8 = ActInt8::alloc(&ctx, tokens, c)?;
        let a4 = a8.as_int4()?;
        let y = ctx.zeroed("y", tokens * r * 4)?;
        let mut enc = ctx.encoder();
        kernels::quantize_act_int8_into(&ctx, &mut enc, &xb, &a8)?;
        ctx.submit_wait(enc)?;
        let mut enc = ctx.encoder();
        kernels::quantize_act_a48_into(&ctx, &mut enc, &xb, None, A48Quant::Int4Absmean, &a4)?;
        ctx.submit_wait(enc)?;
        // Both tiles (64 × 32 and 64 × 64); `same_bits`: the two tiles' outputs are identical.
        let y2 = ctx.zeroed("y2", tokens * r * 4)?;
        for (tname, tile) in [("64x32", GemmTile::Narrow), ("64x64", GemmTile::Wide)] {
            let gemm = |e: &mut wgpu::CommandEncoder, a: &ActInt8, y: &wgpu::Buffer| {
                kernels::ternary_gemm_tiled(&ctx, e, &w, a, y, tile)
            };
            let t8 = per_call(&ctx, giters, |e| gemm(e, &a8, &y))?;
            let t4 = per_call(&ctx, giters, |e| gemm(e, &a4, &y))?;
            let mut same = true;
            for a in [&a8, &a4] {
                let mut enc = ctx.encoder();
                kernels::ternary_gemm_tiled(&ctx, &mut enc, &w, a, &y, GemmTile::Narrow)?;
                gemm(&mut enc, a, &y2)?;
                ctx.submit_wait(enc)?;
                let n = (tokens * r) as usize;
                let (p, q) = (ctx.read_f32(&y, n)?, ctx.read_f32(&y2, n)?);
                same &= p.iter().zip(&q).all(|(u, v)| u.to_bits() == v.to_bits());
            }
            let tops = |t: f64| 2.0 * (r * c * tokens) as f64 / t / 1e12;
            fields.push(format!(
                "\"gemm_{name}_{tokens}t_{tname}\":{{\"int8_ms\":{:.3},\"int4_ms\":{:.3},\"int8_tops\":{:.1},\"int4_tops\":{:.1},\"same_bits\":{same}}}",
                t8 * 1e3,
                t4 * 1e3,
                tops(t8),
                tops(t4)
            ));
        }
    }

    // Quantizers fused with RMSNorm, 2560 values (6912 for the down input's INT8).
    for n_tok in [1u64, tokens] {
        let n = 2560u64;
        let xb = rows(&mut rng, &ctx, n_tok, n, 0.0)?;
        let wb = rows(&mut rng, &ctx, 1, n, 0.0)?;
        let a8 = ActInt8::alloc(&ctx, n_tok, n)?;
        let a4 = a8.as_int4()?;
        let i8t = per_call(&ctx, iters.min(100), |e| {
            kernels::rmsnorm_quant_int8(&ctx, e, &xb, &wb, n, 1e-5, &a8)
        })?;
        let i4t = per_call(&ctx, iters.min(100), |e| {
            kernels::quantize_act_a48_into(
                &ctx,
                e,
                &xb,
                Some((&wb, 1e-5)),
                A48Quant::Int4Absmean,
                &a4,
            )
        })?;
        let tkt = per_call(&ctx, iters.min(100), |e| {
            kernels::quantize_act_a48_into(
                &ctx,
                e,
                &xb,
                Some((&wb, 1e-5)),
                A48Quant::TopK50Int8,
                &a8,
            )
        })?;
        fields.push(format!(
            "\"norm_quant_2560_{n_tok}t_us\":{{\"int8\":{:.1},\"int4\":{:.1},\"topk50_int8\":{:.1}}}",
            i8t * 1e6,
            i4t * 1e6,
            tkt * 1e6
        ));
    }
    println!("{{{}}}", fields.join(","));
    Ok(())
}
