//! Timings of the kernels of `attn.rs` and `float_ops.rs` (attention decode/prefill, lm-head GEMV,
//! top-k, embedding lookup): `cargo run --release -p tern-gpu --example attn_bench [-- --quick]
//! [--kv f32,f16,q8,q4,q3,q2,a4,a3]` (attention over a cache in each KV format, filled by
//! `kv_store` from random rows; default f32).
//!
//! Each number is submit + wait of `iters` calls recorded into one `Plan` (one compute pass)
//! divided by `iters`, the best of 3 submissions (one warm-up first); the old attention kernel too. With `TERN_OLD_ATTENTION=path.wgsl`, attention is also timed with that shader (the
//! one-workgroup-per-(head, token) kernel this replaced: same parameter layout), for comparison.

use std::time::Instant;

use tern_format::FloatType;
use tern_gpu::kernels::EmbedTable;
use tern_gpu::kernels::{self, StepParams};
use tern_gpu::FloatWeight;
use tern_gpu::GgmlWeight;
use tern_gpu::{DevicePreference, GgmlType, GpuContext, KernelKey, Plan, Recorder};

fn per_call(
    ctx: &GpuContext,
    iters: usize,
    mut f: impl FnMut(&mut Plan) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    // All calls in one plan: one compute pass, so the time is the kernels' (plus barriers).
    let mut once = Plan::new();
    f(&mut once)?;
    let mut enc = ctx.encoder();
    once.encode(&mut enc);
    ctx.submit_wait(enc)?;
    let mut plan = Plan::new();
    for _ in 0..iters {
        f(&mut plan)?;
    }
    // best of 3 submissions (clocks ramp up on an idle GPU)
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let mut enc = ctx.encoder();
        plan.encode(&mut enc);
        let t = Instant::now();
        ctx.submit_wait(enc)?;
        best = best.min(t.elapsed().as_secs_f64() / iters as f64);
    }
    Ok(best)
}

fn fill(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

struct Old {
    pipeline: std::sync::Arc<wgpu::ComputePipeline>,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let no_attention = std::env::args().any(|a| a == "--no-attention");
    // --decode: decode cases only (p0 512, 4096, 16000), no prefill and no other kernels;
    // --shape NAME: only that attention shape (e.g. bitnet-2b)
    let decode = std::env::args().any(|a| a == "--decode");
    let only_shape = std::env::args().skip_while(|a| a != "--shape").nth(1);
    let ctx = GpuContext::new(DevicePreference::Auto)?;
    eprintln!("adapter: {} ({})", ctx.info.name, ctx.info.backend);
    let old = match std::env::var("TERN_OLD_ATTENTION") {
        Ok(path) => {
            let src = std::fs::read_to_string(path)?;
            let m = ctx
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("old attention"),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                });
            let pipeline = ctx
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("old attention"),
                    layout: None,
                    module: &m,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
            Some(Old {
                pipeline: std::sync::Arc::new(pipeline),
            })
        }
        Err(_) => None,
    };
    // TERN_BENCH_ITERS: calls per timed submission (software adapters: a few)
    let iters = std::env::var("TERN_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 3 } else { 100 });

    // ---- attention
    let heads: &[(&str, u64, u64, u64)] = if no_attention {
        &[]
    } else if quick {
        &[("smollm2", 9, 3, 64)]
    } else {
        &[
            ("smollm2-135m", 9, 3, 64),
            ("bitnet-2b", 20, 5, 128),
            ("llama-8b", 32, 8, 128),
        ]
    };
    let n_ctx: u64 = if quick { 1024 } else { 16384 };
    let formats: Vec<tern_format::KvQuant> =
        match std::env::args().skip_while(|a| a != "--kv").nth(1) {
            Some(list) => list
                .split(',')
                .map(tern_format::KvQuant::parse)
                .collect::<Result<_, _>>()?,
            None => vec![tern_format::KvQuant::F32],
        };
    let step = ctx.create_buffer(
        "step",
        16,
        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
    )?;
    println!("| attention | kv | p0 | tokens | old kernel µs | split 1 µs | auto µs (splits) | KV GB/s (auto) |");
    println!("|---|---|---|---|---|---|---|---|");
    for (&(name, nh, nkv, hd), &kvq) in heads
        .iter()
        .filter(|h| only_shape.as_deref().is_none_or(|s| s == h.0))
        .flat_map(|h| formats.iter().map(move |f| (h, f)))
    {
        let row = nkv * hd;
        let layout = kernels::KvLayout::new(kvq, Default::default(), nkv, hd, n_ctx)?;
        let kc = ctx.zeroed("k", layout.buffer_bytes(true))?;
        let vc = ctx.zeroed("v", layout.buffer_bytes(false))?;
        // fill the cache through the store, 512 positions a submission
        for (i, p0) in (0..n_ctx).step_by(512).enumerate() {
            let n = 512.min(n_ctx - p0);
            let src = ctx.upload("rows", &f32_bytes(&fill((n * row) as usize, 7 + i as u32)))?;
            ctx.write(
                &step,
                bytemuck::bytes_of(&StepParams {
                    p0: p0 as u32,
                    n_tokens: n as u32,
                    ..StepParams::default()
                }),
            );
            let mut enc = ctx.encoder();
            kernels::kv_store(&ctx, &mut enc, &layout, &step, &src, &kc, n, true)?;
            kernels::kv_store(&ctx, &mut enc, &layout, &step, &src, &vc, n, false)?;
            ctx.submit_wait(enc)?;
        }
        let max_tokens = if quick { 16 } else { 512 };
        let q = ctx.upload("q", &f32_bytes(&fill((max_tokens * nh * hd) as usize, 3)))?;
        let out = ctx.zeroed("out", max_tokens * nh * hd * 4)?;
        let cases: Vec<(u64, u64)> = if quick {
            vec![(100, 1), (900, 1), (0, 16)]
        } else if decode {
            vec![(512, 1), (4096, 1), (16000, 1)]
        } else {
            vec![(512, 1), (4096, 1), (16000, 1), (0, 512), (3584, 512)]
        };
        for (p0, n) in cases {
            ctx.write(
                &step,
                bytemuck::bytes_of(&StepParams {
                    p0: p0 as u32,
                    n_tokens: n as u32,
                    ..StepParams::default()
                }),
            );
            let scale = 1.0 / (hd as f32).sqrt();
            let run = |split: Option<u64>| {
                per_call(&ctx, iters, |enc| {
                    kernels::attention_with_split(
                        &ctx, enc, &layout, &step, &q, &kc, &vc, &out, n, nh, scale, split,
                    )?;
                    Ok(())
                })
            };
            let t_auto = run(None)?;
            let t_one = run(Some(1))?;
            let t_old = match &old {
                Some(o) if kvq == tern_format::KvQuant::F32 => {
                    let params: [u32; 8] = [
                        nh as u32,
                        nkv as u32,
                        hd as u32,
                        n_ctx as u32,
                        scale.to_bits(),
                        n as u32,
                        0,
                        0,
                    ];
                    let pb = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("old params"),
                        size: 32,
                        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    ctx.write(&pb, bytemuck::cast_slice(&params));
                    let layout = o.pipeline.get_bind_group_layout(0);
                    let bufs = [&pb, &step, &q, &kc, &vc, &out];
                    let entries: Vec<_> = bufs
                        .iter()
                        .enumerate()
                        .map(|(i, b)| wgpu::BindGroupEntry {
                            binding: i as u32,
                            resource: b.as_entire_binding(),
                        })
                        .collect();
                    let bg = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &layout,
                        entries: &entries,
                    });
                    let t = per_call(&ctx, iters, |enc| {
                        enc.record_dispatch(
                            KernelKey::Attention(tern_gpu::KvFormat::F32, tern_gpu::KvRole::Own),
                            &o.pipeline,
                            bg.clone(),
                            (nh as u32, n as u32, 1),
                        );
                        Ok(())
                    })?;
                    format!("{:.1}", t * 1e6)
                }
                _ => "-".into(),
            };
            // K and V bytes held (each read once per kv head by the auto kernel in decode)
            let held = (p0 + n).min(n_ctx);
            let kv_bytes = layout.layer_bytes_in_use_rows(held) as f64;
            let splits = kernels::attention_splits(&ctx, n, nh, nkv, n_ctx);
            println!(
                "| {name} {nh}/{nkv}×{hd} | {} | {p0} | {n} | {t_old} | {:.1} | {:.1} ({splits}) | {:.0} |",
                kvq.name(),
                t_one * 1e6,
                t_auto * 1e6,
                kv_bytes / t_auto / 1e9
            );
        }
    }

    if decode {
        return Ok(());
    }
    // ---- lm-head GEMV, top-k, embedding
    println!();
    println!("| kernel | shape | µs | GB/s |");
    println!("|---|---|---|---|");
    let heads: &[(u64, u64, FloatType)] = if quick {
        &[(4096, 576, FloatType::Bf16)]
    } else {
        &[
            (49152, 576, FloatType::Bf16),
            (49152, 576, FloatType::F32),
            (128256, 2560, FloatType::Bf16),
        ]
    };
    for &(rows, cols, dt) in heads {
        let n = (rows * cols) as usize;
        let vals = fill(n.min(1 << 24), 5);
        let mut bytes = Vec::with_capacity(n * dt.size());
        for i in 0..n {
            let v = vals[i % vals.len()];
            match dt {
                FloatType::F32 => bytes.extend_from_slice(&v.to_le_bytes()),
                FloatType::F16 => bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
                FloatType::Bf16 => bytes.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            }
        }
        let fw = FloatWeight::upload(&ctx, dt, rows, cols, &bytes)?;
        drop(bytes);
        let x = ctx.upload("x", &f32_bytes(&fill(cols as usize, 6)))?;
        let y = ctx.zeroed("y", rows * 4)?;
        let t = per_call(&ctx, iters, |enc| {
            kernels::float_gemv(&ctx, enc, &fw, &x, 1, &y)?;
            Ok(())
        })?;
        println!(
            "| float_gemv {dt:?} | {rows}×{cols} ({} parts) | {:.1} | {:.0} |",
            fw.parts().len(),
            t * 1e6,
            fw.bytes() as f64 / t / 1e9
        );
        for k in [40u32, 64] {
            let out = ctx.zeroed("topk", u64::from(k) * 8)?;
            let t = per_call(&ctx, iters, |enc| {
                kernels::topk(&ctx, enc, &y, rows, k, &out)?;
                Ok(())
            })?;
            println!(
                "| topk k={k} | n={rows} | {:.1} | {:.0} |",
                t * 1e6,
                (rows * 4) as f64 / t / 1e9
            );
        }
    }
    let (rows, cols) = (49152u64, 576u64);
    let blocks = (rows * cols / 32) as usize;
    let mut qb = Vec::with_capacity(blocks * 34);
    for b in 0..blocks {
        qb.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        qb.extend((0..32).map(|i| (b * 7 + i * 13) as u8));
    }
    let gw = GgmlWeight::upload(&ctx, GgmlType::Q8_0, rows, cols, &qb)?;
    for n in [1u64, 512] {
        let ids: Vec<u8> = (0..n)
            .flat_map(|i| ((i * 7919 % rows) as u32).to_le_bytes())
            .collect();
        let idb = ctx.upload("ids", &ids)?;
        let out = ctx.zeroed("emb", n * cols * 4)?;
        let t = per_call(&ctx, iters, |enc| {
            kernels::embed_rows(&ctx, enc, &EmbedTable::Ggml(&gw), &idb, n, &out)?;
            Ok(())
        })?;
        println!(
            "| embed_rows Q8_0 | {n} ids of {rows}×{cols} | {:.1} | {:.0} |",
            t * 1e6,
            (n * cols * 4) as f64 / t / 1e9
        );
    }
    Ok(())
}
