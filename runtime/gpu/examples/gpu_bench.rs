//! GPU throughput of the NeuZip decoder and the ternary GEMV at BitNet b1.58 2B4T's shapes, on
//! random data (no model files). Prints one JSON line.
//!
//! ```text
//! cargo run --release -p tern-gpu --example gpu_bench            # full
//! cargo run --release -p tern-gpu --example gpu_bench -- --quick # fewer iterations (lavapipe)
//! ```
//!
//! Timing: every iteration is recorded into one command encoder first; the timed region is
//! `queue.submit` + `device.poll(wait)` of that encoder, so it covers the GPU work and the wait for
//! it, not the host-side encoding. (Per-pass timestamp queries are not used yet.) NeuZip GB/s count
//! decoded output bytes; GEMV GB/s count the packed weight bytes read per token.

use std::time::Instant;

use tern_format::{neuzip, ternary, FloatType, TernaryLayout};
use tern_gpu::ops;
use tern_gpu::{DevicePreference, GpuContext};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn normal(&mut self) -> f32 {
        (0..4)
            .map(|_| (self.next() % (1 << 24)) as f32 / (1 << 24) as f32)
            .sum::<f32>()
            * 1.7
            - 3.4
    }
}

fn timed(ctx: &GpuContext, enc: wgpu::CommandEncoder) -> anyhow::Result<f64> {
    let t = Instant::now();
    ctx.submit_wait(enc)?;
    Ok(t.elapsed().as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let ctx = GpuContext::new(DevicePreference::Auto)?;
    let mut rng = Rng(42);
    let mut fields = vec![
        format!("\"adapter\":{:?}", ctx.info.name),
        format!("\"backend\":{:?}", ctx.info.backend),
        format!("\"device_type\":{:?}", ctx.info.device_type),
        format!("\"driver\":{:?}", ctx.info.driver),
        "\"timing\":\"submit+wait of pre-recorded iterations\"".to_string(),
    ];

    // NeuZip decode: a bf16 6912 × 2560 weight (lossless), and an f32 2560 × 2560 one.
    for (name, dtype, k, rows, cols) in [
        (
            "neuzip_bf16_6912x2560",
            FloatType::Bf16,
            7u8,
            6912usize,
            2560usize,
        ),
        ("neuzip_f32_2560x2560", FloatType::F32, 23u8, 2560, 2560),
    ] {
        let (rows, iters) = if quick { (rows / 8, 2) } else { (rows, 20) };
        let vals: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.02).collect();
        let data: Vec<u8> = match dtype {
            FloatType::Bf16 => vals
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
            _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let blob = neuzip::encode(dtype, k, &data, cols)?;
        let t = ops::NeuzipTensor::upload(&ctx, &blob)?;
        let check = t.decode_to_host(&ctx)?;
        anyhow::ensure!(check == data, "{name}: GPU decode differs from the input");
        let mut enc = ctx.encoder();
        for _ in 0..iters {
            t.decode(&ctx, &mut enc)?;
        }
        let s = timed(&ctx, enc)? / iters as f64;
        let gbs = data.len() as f64 / s / 1e9;
        fields.push(format!(
            "\"{name}\":{{\"ms\":{:.3},\"decoded_gb_per_s\":{gbs:.2},\"ratio\":{:.3},\"blocks\":{},\"lanes\":{}}}",
            s * 1e3,
            blob.len() as f64 / data.len() as f64,
            t.plan.n_blocks,
            t.plan.lanes
        ));
    }

    // Ternary GEMV (1 token) and GEMM (8 tokens) with INT8 activations at 2B4T's shapes.
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
        for (rows, cols) in [(2560u64, 2560u64), (6912, 2560), (2560, 6912)] {
            for tokens in [1u64, 8] {
                let iters = if quick { 3 } else { 200 };
                let n = (rows * cols) as usize;
                let trits: Vec<i8> = (0..n).map(|_| (rng.next() % 3) as i8 - 1).collect();
                let bytes = ternary::pack(layout, rows, cols, &trits, 0, FloatType::F32, &[0.02])?;
                let w = ops::TernaryWeight::upload(
                    &ctx,
                    layout,
                    rows,
                    cols,
                    0,
                    FloatType::F32,
                    &bytes,
                )?;
                let x: Vec<u8> = (0..tokens * cols)
                    .flat_map(|_| rng.normal().to_le_bytes())
                    .collect();
                let xb = ctx.upload("x", &x)?;
                let y = ctx.zeroed("y", tokens * rows * 4)?;
                let mut enc = ctx.encoder();
                let a = ops::quantize_act_int8(&ctx, &mut enc, &xb, tokens, cols)?;
                ctx.submit_wait(enc)?;
                // Warm-up, then the timed GEMVs (the activations are quantized once).
                let mut enc = ctx.encoder();
                ops::ternary_gemv(&ctx, &mut enc, &w, &a, &y)?;
                ctx.submit_wait(enc)?;
                let mut enc = ctx.encoder();
                for _ in 0..iters {
                    ops::ternary_gemv(&ctx, &mut enc, &w, &a, &y)?;
                }
                let s = timed(&ctx, enc)? / iters as f64;
                let wbytes = (bytes.len() - 4) as f64;
                let l = match layout {
                    TernaryLayout::Bits2 => "2bit",
                    TernaryLayout::Base3 => "base3",
                };
                fields.push(format!(
                    "\"ternary_gemv_{l}_{rows}x{cols}_t{tokens}\":{{\"us\":{:.1},\"weight_gb_per_s\":{:.2},\"gops\":{:.1}}}",
                    s * 1e6,
                    wbytes / s / 1e9,
                    2.0 * (rows * cols * tokens) as f64 / s / 1e9
                ));
            }
        }
    }
    // Activation quantization alone, one token of 6912.
    {
        let iters = if quick { 3 } else { 500 };
        let x: Vec<u8> = (0..6912).flat_map(|_| rng.normal().to_le_bytes()).collect();
        let xb = ctx.upload("x", &x)?;
        let mut enc = ctx.encoder();
        for _ in 0..iters {
            ops::quantize_act_int8(&ctx, &mut enc, &xb, 1, 6912)?;
        }
        let s = timed(&ctx, enc)? / iters as f64;
        fields.push(format!("\"act_quant_int8_6912_us\":{:.1}", s * 1e6));
    }
    println!("{{{}}}", fields.join(","));
    Ok(())
}
