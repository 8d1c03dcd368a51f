//! GPU throughput of the NeuZip decoder, the ternary GEMV at BitNet b1.58 2B4T's shapes, and
//! prefill (GEMV vs tiled GEMM at 512 tokens, ternary at 2B4T's and ggml at SmolLM2's shapes, the
//! Q6_K head, the GEMV/GEMM crossover in tokens), and scoring (fused Cut-Cross-Entropy vs the
//! materialized logits at SmolLM2's and 2B4T's head shapes), and attention (decode at depth 512 and
//! 4096, a 512-token prefill; 2B4T's 20/5×128 heads and SmolLM2's 9/3×64), on random data (no
//! model files).
//! Prints one JSON line.
//!
//! ```text
//! cargo run --release -p tern-gpu --example gpu_bench            # full
//! cargo run --release -p tern-gpu --example gpu_bench -- --quick # fewer iterations, smaller (lavapipe)
//! cargo run --release -p tern-gpu --example gpu_bench -- --only prefill   # one section:
//!                                                  # neuzip | gemv | prefill | ggml_gemv | act | cce | attention
//!                                                  # tiles (only on request: the GEMM's tiles A/B)
//! ```
//!
//! Timing: every iteration is recorded into one command encoder first; the timed region is
//! `queue.submit` + `device.poll(wait)` of that encoder, so it covers the GPU work and the wait for
//! it, not the host-side encoding. NeuZip (gpu_bench/neuzip.rs) is timed with GPU timestamps around
//! many decodes and counts decoded output bytes; GEMV GB/s count the packed weight bytes read per
//! token.
//!
//! The kernel choices follow the `TERN_GPU_GEMV` / `TERN_GEMM_TILE` environment variables, read
//! here at the edge (`GpuTuning::from_env`), as `tern bench` follows them.

use std::time::Instant;

#[path = "gpu_bench/neuzip.rs"]
mod neuzip_bench;
#[path = "gpu_bench/tiles.rs"]
mod tiles;

use tern_format::{ternary, FloatType, TernaryLayout};
use tern_gpu::kernels;
use tern_gpu::kernels::cce::{self, Head};
use tern_gpu::FloatWeight;
use tern_gpu::{DevicePreference, GgmlType, GpuContext};
use tern_gpu::{GgmlWeight, GpuTuning, TernaryWeight};

/// The ternary GEMV with the kernel `tuning` picks (`TERN_GPU_GEMV`).
fn ternary_gemv(
    ctx: &GpuContext,
    enc: &mut wgpu::CommandEncoder,
    (w, a, y): (&TernaryWeight, &kernels::ActInt8, &wgpu::Buffer),
    tuning: &GpuTuning,
) -> tern_gpu::Result<()> {
    let store = kernels::Epilogue::Store;
    kernels::ternary_gemv_fused(ctx, enc, w, a, None, store, y, tuning.gemv)
}

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

/// Seconds per call of `f`: one warm-up submission, then `iters` calls recorded into one encoder
/// and timed as submit + wait.
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
    Ok(timed(ctx, enc)? / iters as f64)
}

fn layout_name(l: TernaryLayout) -> &'static str {
    match l {
        TernaryLayout::Bits2 => "2bit",
        TernaryLayout::Base3 => "base3",
    }
}

/// A random per-tensor-scale ternary weight and `tokens` rows of quantized activations.
fn ternary_operands(
    ctx: &GpuContext,
    rng: &mut Rng,
    layout: TernaryLayout,
    rows: u64,
    cols: u64,
    tokens: u64,
) -> anyhow::Result<(TernaryWeight, kernels::ActInt8)> {
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let bytes = ternary::pack(layout, rows, cols, &trits, 0, FloatType::F32, &[0.02])?;
    let w = TernaryWeight::upload(ctx, layout, rows, cols, 0, FloatType::F32, &bytes)?;
    let x: Vec<u8> = (0..tokens * cols)
        .flat_map(|_| rng.normal().to_le_bytes())
        .collect();
    let xb = ctx.upload("x", &x)?;
    let mut enc = ctx.encoder();
    let a = kernels::quantize_act_int8(ctx, &mut enc, &xb, tokens, cols)?;
    ctx.submit_wait(enc)?;
    Ok((w, a))
}

/// Random ggml blocks (finite f16 scales) for `rows × cols`, uploaded.
fn ggml_weight(
    ctx: &GpuContext,
    rng: &mut Rng,
    q: GgmlType,
    rows: u64,
    cols: u64,
) -> anyhow::Result<GgmlWeight> {
    let n_blocks = rows * cols / q.block_elems() as u64;
    let mut b = Vec::with_capacity((n_blocks * q.block_bytes() as u64) as usize);
    for _ in 0..n_blocks {
        let d = half::f16::from_f32(0.0005 + (rng.next() % 1000) as f32 * 1e-5).to_le_bytes();
        if q == GgmlType::Q6K {
            b.extend((0..208).map(|_| rng.next() as u8));
            b.extend_from_slice(&d);
            continue;
        }
        b.extend_from_slice(&d);
        if q == GgmlType::Q4_1 {
            b.extend_from_slice(&half::f16::from_f32(-0.1).to_le_bytes());
        }
        let nq = if q == GgmlType::Q8_0 { 32 } else { 16 };
        b.extend((0..nq).map(|_| rng.next() as u8));
    }
    Ok(GgmlWeight::upload(ctx, q, rows, cols, &b)?)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let want = |section: &str| only.as_deref().is_none_or(|o| o == section);
    let tuning = GpuTuning::from_env()?;
    let ctx = GpuContext::new(DevicePreference::Auto)?;
    let mut rng = Rng(42);
    let mut fields = vec![
        format!("\"adapter\":{:?}", ctx.info.name),
        format!("\"backend\":{:?}", ctx.info.backend),
        format!("\"device_type\":{:?}", ctx.info.device_type),
        format!("\"driver\":{:?}", ctx.info.driver),
        "\"timing\":\"submit+wait of pre-recorded iterations\"".to_string(),
    ];

    // NeuZip decode (gpu_bench/neuzip.rs).
    if want("neuzip") {
        fields.extend(neuzip_bench::bench(&ctx, &mut rng, quick)?);
    }

    // Ternary GEMV (1 token) and GEMM (8 tokens) with INT8 activations at 2B4T's shapes.
    let gemv_layouts = if want("gemv") { 2 } else { 0 };
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3]
        .into_iter()
        .take(gemv_layouts)
    {
        for (rows, cols) in [(2560u64, 2560u64), (6912, 2560), (2560, 6912)] {
            for tokens in [1u64, 8] {
                let iters = if quick { 3 } else { 200 };
                let n = (rows * cols) as usize;
                let trits: Vec<i8> = (0..n).map(|_| (rng.next() % 3) as i8 - 1).collect();
                let bytes = ternary::pack(layout, rows, cols, &trits, 0, FloatType::F32, &[0.02])?;
                let w = TernaryWeight::upload(&ctx, layout, rows, cols, 0, FloatType::F32, &bytes)?;
                let x: Vec<u8> = (0..tokens * cols)
                    .flat_map(|_| rng.normal().to_le_bytes())
                    .collect();
                let xb = ctx.upload("x", &x)?;
                let y = ctx.zeroed("y", tokens * rows * 4)?;
                let mut enc = ctx.encoder();
                let a = kernels::quantize_act_int8(&ctx, &mut enc, &xb, tokens, cols)?;
                ctx.submit_wait(enc)?;
                // Warm-up, then the timed GEMVs (the activations are quantized once).
                let mut enc = ctx.encoder();
                ternary_gemv(&ctx, &mut enc, (&w, &a, &y), &tuning)?;
                ctx.submit_wait(enc)?;
                let mut enc = ctx.encoder();
                for _ in 0..iters {
                    ternary_gemv(&ctx, &mut enc, (&w, &a, &y), &tuning)?;
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
    if want("prefill") {
        prefill(&ctx, &mut rng, (quick, &tuning), &mut fields)?;
    }
    // Only on request (`--only tiles`): the ternary GEMM's three tiles side by side.
    if only.as_deref() == Some("tiles") {
        tiles::tiles(&ctx, &mut rng, (quick, &tuning), &mut fields)?;
    }
    if want("ggml_gemv") {
        ggml_gemv_section(&ctx, &mut rng, quick, &mut fields)?;
    }
    // Activation quantization alone, one token of 6912.
    if want("act") {
        let iters = if quick { 3 } else { 500 };
        let x: Vec<u8> = (0..6912).flat_map(|_| rng.normal().to_le_bytes()).collect();
        let xb = ctx.upload("x", &x)?;
        let mut enc = ctx.encoder();
        for _ in 0..iters {
            kernels::quantize_act_int8(&ctx, &mut enc, &xb, 1, 6912)?;
        }
        let s = timed(&ctx, enc)? / iters as f64;
        fields.push(format!("\"act_quant_int8_6912_us\":{:.1}", s * 1e6));
    }
    if want("cce") {
        cce_section(&ctx, &mut rng, quick, &mut fields)?;
    }
    if want("attention") {
        attention_section(&ctx, &mut rng, quick, &mut fields)?;
    }
    println!("{{{}}}", fields.join(","));
    Ok(())
}

/// The ggml GEMV at one token (decode): Q8_0 and Q4_1 at SmolLM2-135M's shapes (q/o, k/v,
/// gate/up, down, the 49152 × 576 head) and 2B4T's, Q6_K at 2B4T's and its 128256 × 2560 head;
/// µs per call and weight bytes read per second.
fn ggml_gemv_section(
    ctx: &GpuContext,
    rng: &mut Rng,
    quick: bool,
    fields: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (shrink, iters) = if quick { (16u64, 2) } else { (1, 200) };
    let small: &[(u64, u64)] = &[
        (576, 576),
        (192, 576),
        (1536, 576),
        (576, 1536),
        (49152, 576),
        (2560, 2560),
        (6912, 2560),
    ];
    let q6: &[(u64, u64)] = &[(2560, 2560), (6912, 2560), (2560, 6912), (128256, 2560)];
    let cases = [GgmlType::Q8_0, GgmlType::Q4_1]
        .iter()
        .flat_map(|&q| small.iter().map(move |&s| (q, s)))
        .chain(q6.iter().map(|&s| (GgmlType::Q6K, s)));
    for (q, (rows, cols)) in cases {
        let rows = (rows / shrink).max(1);
        let w = ggml_weight(ctx, rng, q, rows, cols)?;
        let x: Vec<u8> = (0..cols).flat_map(|_| rng.normal().to_le_bytes()).collect();
        let xb = ctx.upload("x", &x)?;
        let y = ctx.zeroed("y", rows * 4)?;
        let t = per_call(ctx, iters, |e| kernels::ggml_gemv(ctx, e, &w, &xb, 1, &y))?;
        let bytes = rows * cols / q.block_elems() as u64 * q.block_bytes() as u64;
        fields.push(format!(
            "\"gemv_{}_{rows}x{cols}\":{{\"us\":{:.2},\"weight_gb_per_s\":{:.1}}}",
            q.name().to_lowercase(),
            t * 1e6,
            bytes as f64 / t / 1e9
        ));
    }
    Ok(())
}

/// Scoring `n` positions: the fused CCE scorer (`cce::score`) against the materialized path
/// (GEMV/GEMM to `[n][n_vocab]` logits in binding-sized chunks, then a log-softmax per row), on
/// the same operands; both must agree to 1e-3. SmolLM2-135M's head (49152 × 576 Q8_0) and
/// 2B4T's (128256 × 2560, Q8_0 and bf16 = 656 MB in 6 parts) at 512 and 4096 positions.
/// `--quick` (lavapipe): 16 and 64 positions, heads with a sixteenth of the rows.
fn cce_section(
    ctx: &GpuContext,
    rng: &mut Rng,
    quick: bool,
    fields: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (ns, shrink, iters): (&[u64], u64, usize) = if quick {
        (&[16, 64], 16, 1)
    } else {
        (&[512, 4096], 1, 3)
    };
    let shapes: [(&str, u64, u64, Option<FloatType>); 3] = [
        ("smollm2_q8_0", 49152, 576, None),
        ("bitnet2b_q8_0", 128256, 2560, None),
        ("bitnet2b_bf16", 128256, 2560, Some(FloatType::Bf16)),
    ];
    for (name, vocab, d, float) in shapes {
        let vocab = vocab / shrink;
        let (gw, fw) = match float {
            None => (Some(ggml_weight(ctx, rng, GgmlType::Q8_0, vocab, d)?), None),
            Some(t) => {
                let b: Vec<u8> = (0..vocab * d)
                    .flat_map(|_| half::bf16::from_f32(rng.normal() * 0.02).to_le_bytes())
                    .collect();
                (None, Some(FloatWeight::upload(ctx, t, vocab, d, &b)?))
            }
        };
        let (head, parts) = match (&gw, &fw) {
            (Some(w), _) => (Head::Ggml(w), w.parts()),
            (_, Some(w)) => (Head::Float(w), w.parts().len()),
            _ => anyhow::bail!("no head"),
        };
        for &n in ns {
            let x: Vec<u8> = (0..n * d)
                .flat_map(|_| rng.normal().to_le_bytes())
                .collect();
            let xb = ctx.upload("hidden", &x)?;
            let t: Vec<u8> = (0..n)
                .flat_map(|_| ((rng.next() % vocab) as u32).to_le_bytes())
                .collect();
            let tb = ctx.upload("targets", &t)?;
            let o1 = ctx.zeroed("fused", n * 4)?;
            let o2 = ctx.zeroed("materialized", n * 4)?;
            let t1 = per_call(ctx, iters, |e| cce::score(ctx, e, &xb, n, head, &tb, &o1))?;
            let t2 = per_call(ctx, iters, |e| {
                cce::materialized_logprobs(ctx, e, &xb, n, head, &tb, &o2)
            })?;
            let (a, b) = (
                ctx.read_f32(&o1, n as usize)?,
                ctx.read_f32(&o2, n as usize)?,
            );
            let diff = a
                .iter()
                .zip(&b)
                .map(|(u, v)| f64::from(u - v).abs())
                .fold(0.0, f64::max);
            anyhow::ensure!(
                diff <= 1e-3 && a.iter().all(|v| v.is_finite()),
                "{name} n {n}: fused and materialized log-probs differ by {diff:.2e}"
            );
            let flop = 2.0 * (n * vocab * d) as f64;
            fields.push(format!(
                "\"cce_{name}_{vocab}x{d}_n{n}\":{{\"fused_ms\":{:.3},\"materialized_ms\":{:.3},\"speedup\":{:.2},\"fused_gflops\":{:.0},\"fused_scratch_bytes\":{},\"logits_bytes\":{},\"head_parts\":{parts},\"max_abs_diff\":{diff:.1e}}}",
                t1 * 1e3,
                t2 * 1e3,
                t2 / t1,
                flop / t1 / 1e9,
                cce::scratch_bytes(ctx, n, head)?,
                n * vocab * 4,
            ));
        }
    }
    Ok(())
}

/// Attention (`kernels::attention`, one layer) over an f32 KV cache of `n_ctx` positions: decode (one
/// query token) at depth 512 and 4096 and a 512-token prefill from position 0, for 2B4T's heads
/// (20/5×128) and SmolLM2's (9/3×64). The decode outputs are checked against
/// `tern_reference::attention` (NMSE ≤ 1e-10). `kv_gb_per_s` counts the K and V rows read once
/// (2 · n_kv · n_head_kv · head_dim · 4 bytes); `x30_ms` is 30 layers' worth; decode is also
/// timed with the key chunk count forced to 1, 8, 32, 64 and 128 (`forced_splits_us`), prefill
/// also with the query-tiled kernel (`tiled_kernel_us`: attention_prefill.wgsl). `--quick`
/// (lavapipe): depth 128 and 900, a 64-token prefill, 3 iterations.
fn attention_section(
    ctx: &GpuContext,
    rng: &mut Rng,
    quick: bool,
    fields: &mut Vec<String>,
) -> anyhow::Result<()> {
    use tern_gpu::kernels::{self, StepParams};
    let (n_ctx, depths, prefill, iters): (u64, &[u64], u64, usize) = if quick {
        (1024, &[128, 900], 64, 3)
    } else {
        (4608, &[512, 4096], 512, 100)
    };
    let step = ctx.create_buffer(
        "step",
        std::mem::size_of::<StepParams>() as u64,
        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
    )?;
    let set_step = |p0: u64, n: u64| {
        ctx.write(
            &step,
            bytemuck::bytes_of(&StepParams {
                p0: p0 as u32,
                n_tokens: n as u32,
                ..StepParams::default()
            }),
        )
    };
    for (name, nh, nkv, hd) in [("bitnet2b", 20u64, 5u64, 128u64), ("smollm2", 9, 3, 64)] {
        let row = nkv * hd;
        let q_dim = nh * hd;
        let kc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
        let vc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
        let q: Vec<f32> = (0..prefill * q_dim).map(|_| rng.normal()).collect();
        let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let kb = ctx.upload("k", &bytes(&kc))?;
        let vb = ctx.upload("v", &bytes(&vc))?;
        let qb = ctx.upload("q", &bytes(&q))?;
        let ob = ctx.zeroed("out", prefill * q_dim * 4)?;
        let scale = 1.0 / (hd as f32).sqrt();
        let layout = kernels::KvLayout::new(
            tern_format::KvQuant::F32,
            Default::default(),
            nkv,
            hd,
            n_ctx,
        )?;
        let mut cases: Vec<(u64, u64)> = depths.iter().map(|&d| (d, 1)).collect();
        cases.push((0, prefill));
        for (p0, n) in cases {
            set_step(p0, n);
            let it = if n > 1 { iters.div_ceil(10) } else { iters };
            let t = per_call(ctx, it, |e| {
                kernels::attention(ctx, e, &layout, &step, &qb, &kb, &vb, &ob, n, nh, scale)
            })?;
            let check;
            if n == 1 {
                // The same decode with the key chunk count forced (tuning the automatic choice).
                let mut sweep = Vec::new();
                for split in [1u64, 8, 32, 64, 128] {
                    let ts = per_call(ctx, it, |e| {
                        kernels::attention_with_split(
                            ctx,
                            e,
                            &layout,
                            &step,
                            &qb,
                            &kb,
                            &vb,
                            &ob,
                            n,
                            nh,
                            scale,
                            Some(split),
                        )
                    })?;
                    sweep.push(format!("\"{split}\":{:.1}", ts * 1e6));
                }
                let splits = format!(",\"forced_splits_us\":{{{}}}", sweep.join(","));
                let got = ctx.read_f32(&ob, q_dim as usize)?;
                let mut want = vec![0.0f32; q_dim as usize];
                tern_reference::attention(
                    &q[..q_dim as usize],
                    &kc,
                    &vc,
                    (p0 + 1) as usize,
                    nh as usize,
                    nkv as usize,
                    hd as usize,
                    &mut want,
                )?;
                let err: f64 = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| f64::from(a - b).powi(2))
                    .sum();
                let den: f64 = want.iter().map(|b| f64::from(*b).powi(2)).sum();
                let nmse = err / den.max(1e-30);
                anyhow::ensure!(nmse <= 1e-10, "attention {name} p0 {p0}: nmse {nmse:.2e}");
                check = format!("{splits},\"nmse\":{nmse:.1e}");
            } else {
                // the query-tiled kernel (attention_prefill.wgsl, opt-in) on the same batch
                let ts = per_call(ctx, it, |e| {
                    kernels::attention_prefill(
                        ctx, e, &layout, &step, &qb, &kb, &vb, &ob, n, nh, scale,
                    )
                })?;
                check = format!(",\"tiled_kernel_us\":{:.1}", ts * 1e6);
            }
            // K and V rows read once per kv head: all positions up to the last token's.
            let kv_bytes = 2 * (p0 + n) * row * 4;
            let kind = if n == 1 { "decode" } else { "prefill" };
            fields.push(format!(
                "\"attention_{name}_{nh}x{nkv}x{hd}_{kind}_p{p0}_n{n}\":{{\"us\":{:.1},\"x30_ms\":{:.3},\"kv_gb_per_s\":{:.1},\"splits\":{},\"n_ctx\":{n_ctx}{check}}}",
                t * 1e6,
                t * 30.0 * 1e3,
                kv_bytes as f64 / t / 1e9,
                kernels::attention_splits(ctx, n, nh, nkv, n_ctx),
            ));
        }
    }
    Ok(())
}

/// Prefill: the GEMV (tokens on grid y, weights re-read per token) against the tiled GEMM on the
/// same operands, which must agree (bit for bit on ternary). `--quick`: 64 tokens, rows / 8.
fn prefill(
    ctx: &GpuContext,
    rng: &mut Rng,
    (quick, tuning): (bool, &GpuTuning),
    fields: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (tokens, shrink, iters) = if quick {
        (64u64, 8u64, 1)
    } else {
        (512, 1, 10)
    };
    let entry = |name: String, work: f64, gemv: f64, gemm: f64| -> String {
        format!(
            "\"{name}\":{{\"gemv_ms\":{:.3},\"gemm_ms\":{:.3},\"speedup\":{:.2},\"gemm_gops\":{:.1}}}",
            gemv * 1e3,
            gemm * 1e3,
            gemv / gemm,
            2.0 * work / gemm / 1e9
        )
    };
    // Ternary with INT8 activations at 2B4T's shapes (q/o, k/v, gate/up, down).
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
        for (rows, cols) in [(2560u64, 2560u64), (640, 2560), (6912, 2560), (2560, 6912)] {
            let rows = rows / shrink;
            let (w, a) = ternary_operands(ctx, rng, layout, rows, cols, tokens)?;
            let y1 = ctx.zeroed("y", tokens * rows * 4)?;
            let y2 = ctx.zeroed("y", tokens * rows * 4)?;
            let t1 = per_call(ctx, iters, |e| ternary_gemv(ctx, e, (&w, &a, &y1), tuning))?;
            let tile = tuning.gemm_tile;
            let t2 = per_call(ctx, iters, |e| {
                kernels::ternary_gemm(ctx, e, &w, &a, &y2, tile)
            })?;
            let n = (tokens * rows) as usize;
            anyhow::ensure!(
                ctx.read_bytes(&y1, 0, n as u64 * 4)? == ctx.read_bytes(&y2, 0, n as u64 * 4)?,
                "ternary GEMM differs from the GEMV"
            );
            let name = format!(
                "prefill_ternary_{}_{rows}x{cols}_t{tokens}",
                layout_name(layout)
            );
            fields.push(entry(name, (rows * cols * tokens) as f64, t1, t2));
        }
    }
    // ggml at SmolLM2-135M's shapes (q/o, k/v, gate/up, down).
    for q in [GgmlType::Q8_0, GgmlType::Q4_1] {
        for (rows, cols) in [(576u64, 576u64), (192, 576), (1536, 576), (576, 1536)] {
            let w = ggml_weight(ctx, rng, q, rows, cols)?;
            let x: Vec<u8> = (0..tokens * cols)
                .flat_map(|_| rng.normal().to_le_bytes())
                .collect();
            let xb = ctx.upload("x", &x)?;
            let y1 = ctx.zeroed("y", tokens * rows * 4)?;
            let y2 = ctx.zeroed("y", tokens * rows * 4)?;
            let t1 = per_call(ctx, iters, |e| {
                kernels::ggml_gemv(ctx, e, &w, &xb, tokens, &y1)
            })?;
            let t2 = per_call(ctx, iters, |e| {
                kernels::ggml_gemm(ctx, e, &w, &xb, tokens, &y2)
            })?;
            let n = (tokens * rows) as usize;
            let (a, b) = (ctx.read_f32(&y1, n)?, ctx.read_f32(&y2, n)?);
            let err: f64 = a
                .iter()
                .zip(&b)
                .map(|(u, v)| f64::from(u - v).powi(2))
                .sum();
            let den: f64 = a.iter().map(|u| f64::from(*u).powi(2)).sum();
            anyhow::ensure!(err <= 1e-10 * den, "ggml GEMM differs from the GEMV");
            let name = format!("prefill_ggml_{q:?}_{rows}x{cols}_t{tokens}").to_lowercase();
            fields.push(entry(name, (rows * cols * tokens) as f64, t1, t2));
        }
    }
    // The Q6_K head of 2B4T (128256 × 2560): one token by the GEMV, 64 by both.
    {
        let (rows, cols, nt) = (128256 / shrink, 2560u64, 64u64);
        let w = ggml_weight(ctx, rng, GgmlType::Q6K, rows, cols)?;
        let x: Vec<u8> = (0..nt * cols)
            .flat_map(|_| rng.normal().to_le_bytes())
            .collect();
        let xb = ctx.upload("x", &x)?;
        let y = ctx.zeroed("y", nt * rows * 4)?;
        let t1 = per_call(ctx, iters, |e| kernels::ggml_gemv(ctx, e, &w, &xb, 1, &y))?;
        fields.push(format!(
            "\"head_q6_k_{rows}x{cols}_t1_gemv\":{{\"ms\":{:.3},\"weight_gb_per_s\":{:.1}}}",
            t1 * 1e3,
            (rows * cols / 256 * 210) as f64 / t1 / 1e9
        ));
        let t1 = per_call(ctx, iters, |e| kernels::ggml_gemv(ctx, e, &w, &xb, nt, &y))?;
        let t2 = per_call(ctx, iters, |e| kernels::ggml_gemm(ctx, e, &w, &xb, nt, &y))?;
        fields.push(entry(
            format!("head_q6_k_{rows}x{cols}_t{nt}"),
            (rows * cols * nt) as f64,
            t1,
            t2,
        ));
    }
    // Where the GEMM starts to win (kernels::GEMM_MIN_TOKENS): 2bit 6912 × 2560 by token count.
    {
        let (rows, cols) = (6912 / shrink, 2560u64);
        let counts: &[u64] = if quick {
            &[1, 4, 16]
        } else {
            &[1, 2, 4, 8, 16, 32, 64]
        };
        let mut pts = Vec::new();
        for &nt in counts {
            let (w, a) = ternary_operands(ctx, rng, TernaryLayout::Bits2, rows, cols, nt)?;
            let y = ctx.zeroed("y", nt * rows * 4)?;
            let it = if quick { 1 } else { 50 };
            let t1 = per_call(ctx, it, |e| ternary_gemv(ctx, e, (&w, &a, &y), tuning))?;
            let tile = tuning.gemm_tile;
            let t2 = per_call(ctx, it, |e| kernels::ternary_gemm(ctx, e, &w, &a, &y, tile))?;
            pts.push(format!(
                "\"t{nt}\":{{\"gemv_us\":{:.1},\"gemm_us\":{:.1}}}",
                t1 * 1e6,
                t2 * 1e6
            ));
        }
        fields.push(format!(
            "\"gemm_crossover_2bit_{rows}x{cols}\":{{{}}}",
            pts.join(",")
        ));
    }
    Ok(())
}
