//! The NeuZip section of `gpu_bench`: GPU decode of layout-1 and layout-2 blobs at several tensor
//! sizes and block sizes, checked bit for bit against the CPU decoder first.
//!
//! Timing: `iters` decodes (enough for ≥ 4 GB of decoded output, 3 to 400) are recorded into one
//! command encoder between two GPU timestamps (an empty compute pass writing one before the first
//! decode, another after the last), then submitted and waited for; three such runs after at least
//! 0.3 s of the same work as a warm-up (clocks ramped up from idle). GB/s count
//! decoded bytes per second of GPU time (timestamps; wall time of submit + wait where the adapter
//! has no `TIMESTAMP_QUERY`), median of the three runs, with the min and max run beside it.

use std::time::Instant;

use tern_format::encoding::full_mantissa_bits;
use tern_format::{neuzip, FloatType};
use tern_gpu::{kernels, FloatWeight, GpuContext, NeuzipTensor};

use super::Rng;

/// Seconds per iteration of `iters` calls of `f` recorded into one encoder: (GPU seconds between
/// timestamps before the first and after the last call when the adapter has TIMESTAMP_QUERY,
/// wall seconds of submit + wait).
pub fn gpu_time(
    ctx: &GpuContext,
    iters: usize,
    f: &mut dyn FnMut(&mut wgpu::CommandEncoder) -> tern_gpu::Result<()>,
) -> anyhow::Result<(Option<f64>, f64)> {
    let qs = ctx.info.timestamp_query.then(|| {
        ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bench timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        })
    });
    let mut enc = ctx.encoder();
    let stamp = |enc: &mut wgpu::CommandEncoder, q: &wgpu::QuerySet, i: u32| {
        let w = wgpu::ComputePassTimestampWrites {
            query_set: q,
            beginning_of_pass_write_index: (i == 0).then_some(0),
            end_of_pass_write_index: (i == 1).then_some(1),
        };
        drop(enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("bench timestamp"),
            timestamp_writes: Some(w),
        }));
    };
    if let Some(q) = &qs {
        stamp(&mut enc, q, 0);
    }
    for _ in 0..iters {
        f(&mut enc)?;
    }
    let resolve = match &qs {
        Some(q) => {
            stamp(&mut enc, q, 1);
            let r = ctx.create_buffer(
                "timestamps",
                16,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            )?;
            enc.resolve_query_set(q, 0..2, &r, 0);
            Some(r)
        }
        None => None,
    };
    let t = Instant::now();
    ctx.submit_wait(enc)?;
    let wall = t.elapsed().as_secs_f64() / iters as f64;
    let gpu = match resolve {
        Some(r) => {
            let b = ctx.read_bytes(&r, 0, 16)?;
            let tick = |i: usize| {
                let mut w = [0u8; 8];
                if let Some(s) = b.get(8 * i..8 * i + 8) {
                    w.copy_from_slice(s);
                }
                u64::from_le_bytes(w)
            };
            let ns = tick(1).saturating_sub(tick(0)) as f64
                * f64::from(ctx.queue.get_timestamp_period());
            (ns > 0.0).then_some(ns * 1e-9 / iters as f64)
        }
        None => None,
    };
    Ok((gpu, wall))
}

/// Three runs of [`gpu_time`] (after ≥ 0.3 s of warm-up): (median, min, max) seconds per iteration
/// (GPU time where available, else wall), and whether GPU timestamps were used.
fn runs(
    ctx: &GpuContext,
    iters: usize,
    f: &mut dyn FnMut(&mut wgpu::CommandEncoder) -> tern_gpu::Result<()>,
) -> anyhow::Result<([f64; 3], bool)> {
    // Warm-up: the same work for at least 0.3 s, so that the GPU's clocks have ramped up from idle
    // (the case's data were just encoded on the CPU).
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < 0.3 {
        gpu_time(ctx, iters, f)?;
    }
    let mut v = Vec::new();
    let mut stamped = true;
    for _ in 0..3 {
        let (g, w) = gpu_time(ctx, iters, f)?;
        stamped &= g.is_some();
        v.push(g.unwrap_or(w));
    }
    v.sort_by(f64::total_cmp);
    Ok(([v[1], v[0], v[2]], stamped))
}

/// (name, dtype, mantissa bits kept, rows, cols, layout, block symbols; 0 = the layout's default)
type Case = (&'static str, FloatType, u8, usize, usize, u8, u32);

/// Layout 1 (the original names) and layout 2 (`neuzip_v2_*`; `b4096`: 4096-symbol blocks): a
/// bf16 2560 × 2560, 6912 × 2560 and 13824 × 2560 weight (lossless; the last one's 71 MB of output
/// do not fit an H100's 50 MB L2), an f32 2560 × 2560 one, a lossy-3 bf16 one, and 2B4T head-sized
/// bf16 ones (128256 × 2560; full runs only: the last two).
const CASES: &[Case] = &[
    (
        "neuzip_bf16_6912x2560",
        FloatType::Bf16,
        7,
        6912,
        2560,
        1,
        0,
    ),
    ("neuzip_f32_2560x2560", FloatType::F32, 23, 2560, 2560, 1, 0),
    (
        "neuzip_v2_bf16_2560x2560",
        FloatType::Bf16,
        7,
        2560,
        2560,
        2,
        0,
    ),
    (
        "neuzip_v2_bf16_6912x2560",
        FloatType::Bf16,
        7,
        6912,
        2560,
        2,
        0,
    ),
    (
        "neuzip_v2_f32_2560x2560",
        FloatType::F32,
        23,
        2560,
        2560,
        2,
        0,
    ),
    (
        "neuzip_v2b4096_bf16_6912x2560",
        FloatType::Bf16,
        7,
        6912,
        2560,
        2,
        4096,
    ),
    (
        "neuzip_v2_bf16_k3_6912x2560",
        FloatType::Bf16,
        3,
        6912,
        2560,
        2,
        0,
    ),
    (
        "neuzip_v2_bf16_13824x2560",
        FloatType::Bf16,
        7,
        13824,
        2560,
        2,
        0,
    ),
    (
        "neuzip_v2_bf16_128256x2560",
        FloatType::Bf16,
        7,
        128256,
        2560,
        2,
        0,
    ),
    (
        "neuzip_v2b4096_bf16_128256x2560",
        FloatType::Bf16,
        7,
        128256,
        2560,
        2,
        4096,
    ),
];

/// The JSON fields of every NeuZip case (`quick`: rows / 8, no head-sized cases).
pub fn bench(ctx: &GpuContext, rng: &mut Rng, quick: bool) -> anyhow::Result<Vec<String>> {
    let mut fields = Vec::new();
    let n_cases = if quick { CASES.len() - 2 } else { CASES.len() };
    // TERN_BENCH_NEUZIP=a,b runs only the cases whose name contains one of the parts.
    let only = std::env::var("TERN_BENCH_NEUZIP").unwrap_or_default();
    let picked = |name: &str| only.is_empty() || only.split(',').any(|p| name.contains(p));
    for &(name, dtype, k, rows, cols, layout, block) in CASES.iter().take(n_cases) {
        if !picked(name) {
            continue;
        }
        let t_case = Instant::now();
        let rows = if quick { rows / 8 } else { rows };
        let vals: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.02).collect();
        let data: Vec<u8> = match dtype {
            FloatType::Bf16 => vals
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
            _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        drop(vals);
        let blob = match (layout, block) {
            (2, 0) => neuzip::encode_v2(dtype, k, &data, cols)?,
            (2, b) => neuzip::encode_v2_with(
                dtype,
                k,
                &data,
                cols,
                neuzip::Params {
                    lanes: 32,
                    block_symbols: b,
                },
            )?,
            _ => neuzip::encode(dtype, k, &data, cols)?,
        };
        let t0 = Instant::now();
        let want_out = if k == full_mantissa_bits(dtype) {
            data.clone()
        } else {
            neuzip::decode(&blob)?
        };
        let cpu_s = if k == full_mantissa_bits(dtype) {
            // Lossless: time the CPU decode too (the oracle's speed, for the record).
            let t = Instant::now();
            anyhow::ensure!(neuzip::decode(&blob)? == data, "{name}: CPU round trip");
            t.elapsed().as_secs_f64()
        } else {
            t0.elapsed().as_secs_f64()
        };
        let t = NeuzipTensor::upload(ctx, &blob)?;
        let check = t.decode_to_host(ctx)?;
        anyhow::ensure!(
            check == want_out,
            "{name}: GPU decode differs from the CPU's"
        );
        drop((check, want_out));
        let bytes = data.len() as f64;
        let iters = if quick {
            2
        } else {
            ((4e9 / bytes).ceil() as usize).clamp(3, 400)
        };
        let ([med, lo, hi], stamped) = runs(ctx, iters, &mut |enc| t.decode(ctx, enc))?;
        t.check_status(ctx)?;
        let gbs = |s: f64| bytes / s / 1e9;
        // A matrix kept compressed, one token: the fused decode + GEMV against the just-in-time
        // way (decode, then the float GEMV over the decoded chunks) and the float GEMV alone
        // (decoded at load).
        let mut fused = String::new();
        if rows > 100_000 {
            // Just in time: chunk by chunk into one 32 MiB scratch (the output stays in L2).
            let tc = NeuzipTensor::upload_compressed(ctx, &blob, 32 << 20)?;
            let scratch = ctx.zeroed("jit scratch", tc.max_chunk_output_bytes())?;
            let ([s, _, _], _) = runs(ctx, iters, &mut |enc| {
                for c in 0..tc.chunks() {
                    tc.decode_chunk_into(ctx, enc, c, &scratch)?;
                }
                Ok(())
            })?;
            tc.check_status(ctx)?;
            fused = format!(
                ",\"jit_scratch32m_decoded_gb_per_s\":{:.2},\"jit_scratch32m_chunks\":{}",
                bytes / s / 1e9,
                tc.chunks()
            );
        }
        if layout == 2 && dtype == FloatType::Bf16 && block == 0 {
            let x: Vec<u8> = (0..cols).flat_map(|_| rng.normal().to_le_bytes()).collect();
            let xb = ctx.upload("x", &x)?;
            let yb = ctx.zeroed("y", rows as u64 * 4)?;
            let tc = NeuzipTensor::upload_compressed(ctx, &blob, u64::MAX)?;
            let fw = FloatWeight::from_parts(
                dtype,
                rows as u64,
                cols as u64,
                t.float_parts(cols as u64)?,
            )?;
            let it = iters.min(50);
            let (f_s, _) = runs(ctx, it, &mut |enc| {
                tc.fused_gemv(ctx, enc, &xb, 1, &yb, rows as u64)
            })?;
            let (j_s, _) = runs(ctx, it, &mut |enc| {
                t.decode(ctx, enc)?;
                kernels::float_matmul(ctx, enc, &fw, &xb, 1, &yb)
            })?;
            let (r_s, _) = runs(ctx, it, &mut |enc| {
                kernels::float_matmul(ctx, enc, &fw, &xb, 1, &yb)
            })?;
            tc.check_status(ctx)?;
            fused += &format!(
                ",\"fused_gemv_ms\":{:.3},\"jit_decode_gemv_ms\":{:.3},\"decoded_gemv_ms\":{:.3},\"fused_compressed_gb_per_s\":{:.1}",
                f_s[0] * 1e3,
                j_s[0] * 1e3,
                r_s[0] * 1e3,
                blob.len() as f64 / f_s[0] / 1e9
            );
        }
        fields.push(format!(
            "\"{name}\":{{\"ms\":{:.4},\"decoded_gb_per_s\":{:.2},\"decoded_gb_per_s_min\":{:.2},\"decoded_gb_per_s_max\":{:.2},\"timing\":\"{}\",\"iters\":{iters},\"decoded_bytes\":{},\"cpu_decode_gb_per_s\":{:.2},\"ratio\":{:.4},\"blocks\":{},\"lanes\":{},\"layout\":{},\"block_len\":{},\"chunks\":{}{fused}}}",
            med * 1e3,
            gbs(med),
            gbs(hi),
            gbs(lo),
            if stamped { "gpu_timestamps" } else { "wall_submit_wait" },
            data.len(),
            bytes / cpu_s / 1e9,
            blob.len() as f64 / bytes,
            t.plan.n_blocks,
            t.plan.lanes,
            t.plan.version,
            t.plan.block_len,
            t.chunks()
        ));
        // Progress on stderr (what a run cut short by a timeout still leaves).
        eprintln!(
            "{} ({:.1} s)",
            fields.last().map_or("", String::as_str),
            t_case.elapsed().as_secs_f64()
        );
    }
    Ok(fields)
}
