//! Parity of the attention family (`attn.rs`): KV-cache store (bit-exact copy at the step's
//! position) and causal GQA attention for decode and prefill against `tern_reference::attention`
//! (NMSE ≤ 1e-10: only the f32 summation order and `exp` differ, which gives ~1e-14; an indexing
//! or masking bug gives ≥ 1e-3). Shapes: the heads of SmolLM2 (9/3×64), BitNet 2B (20/5×128),
//! odd ones (4/4×18, 6/2×72), head groups larger than one workgroup's 4 heads (14/2×64, 8/1×256),
//! decode at p0 ∈ {0, 1, 37, 300, 4100} (one split and many), prefill of 1, 5 and 67 tokens after
//! a cached prefix, a cache much longer than the positions used (the recorded split count with a
//! short live context), decode at p0 ∈ {0, 1, 37, 300, 1000, 4000} in a 4100-position context
//! (2B4T's and SmolLM2's heads), the split counts of other adapters forced (128 chunks as on a
//! discrete GPU; odd counts), and one recorded `Plan` replayed at several positions by rewriting
//! only the step buffer.

use super::*;
use tern_gpu::kernels::StepParams;
use tern_gpu::Plan;

/// The f32 cache layout (`[n_ctx][n_kv·hd]` f32 per layer, keys and values).
pub(crate) fn f32_layout(
    n_kv: usize,
    hd: usize,
    n_ctx: usize,
) -> Result<tern_gpu::kernels::KvLayout, GpuError> {
    tern_gpu::kernels::KvLayout::new(
        tern_format::KvQuant::F32,
        tern_format::Kivi::default(),
        n_kv as u64,
        hd as u64,
        n_ctx as u64,
    )
}

pub(crate) fn step_buffer(ctx: &GpuContext, p0: u32, n: u32) -> wgpu::Buffer {
    let b = ctx
        .create_buffer(
            "step",
            std::mem::size_of::<StepParams>() as u64,
            wgpu::BufferUsages::UNIFORM
                | wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST,
        )
        .unwrap();
    write_step(ctx, &b, p0, n);
    b
}

pub(crate) fn write_step(ctx: &GpuContext, b: &wgpu::Buffer, p0: u32, n: u32) {
    let sp = StepParams {
        p0,
        n_tokens: n,
        ..StepParams::default()
    };
    ctx.write(b, bytemuck::bytes_of(&sp));
}

/// Reference attention of `n` queries at positions `p0..p0+n` over the host caches.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reference(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    p0: usize,
    n: usize,
    n_head: usize,
    n_kv: usize,
    hd: usize,
) -> Result<Vec<f32>, String> {
    let q_dim = n_head * hd;
    let mut want = vec![0.0f32; n * q_dim];
    for t in 0..n {
        tern_reference::attention(
            &q[t * q_dim..(t + 1) * q_dim],
            kc,
            vc,
            p0 + t + 1,
            n_head,
            n_kv,
            hd,
            &mut want[t * q_dim..(t + 1) * q_dim],
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(want)
}

/// Fill a cache of `p0 + n + extra` rows with random rows on the host, store `n` new rows on
/// the GPU, run attention for the `n` queries at positions `p0..p0+n`.
#[allow(clippy::too_many_arguments)]
fn run_attention(
    ctx: &GpuContext,
    rng: &mut Rng,
    p0: usize,
    n: usize,
    n_head: usize,
    n_kv: usize,
    hd: usize,
    extra: usize,
    split: Option<u64>,
) -> Result<String, String> {
    run_attention_with(
        ctx,
        rng,
        p0,
        (n, n_head, n_kv, hd),
        extra,
        Kernel::Pick(split),
    )
}

/// Which attention launcher a case calls.
#[derive(Clone, Copy)]
enum Kernel {
    /// `attention_with_split` (its choice for `None`, else that many key chunks).
    Pick(Option<u64>),
    /// `attention_prefill` (the query-tiled kernel, forced).
    Prefill,
}

fn run_attention_with(
    ctx: &GpuContext,
    rng: &mut Rng,
    p0: usize,
    (n, n_head, n_kv, hd): (usize, usize, usize, usize),
    extra: usize,
    kernel: Kernel,
) -> Result<String, String> {
    let n_ctx = p0 + n + extra;
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
    let (nn, nc) = (n as u64, n_ctx as u64);
    let l = f32_layout(n_kv, hd, n_ctx).map_err(e)?;
    let mut enc = ctx.encoder();
    tern_gpu::kernels::kv_store(ctx, &mut enc, &l, &step, &knb, &kb, nn, true).map_err(e)?;
    tern_gpu::kernels::kv_store(ctx, &mut enc, &l, &step, &vnb, &vb, nn, false).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut enc = ctx.encoder();
    let (nh, nk) = (n_head as u64, n_kv as u64);
    let splits = match kernel {
        Kernel::Pick(split) => {
            tern_gpu::kernels::attention_with_split(
                ctx, &mut enc, &l, &step, &qb, &kb, &vb, &ob, nn, nh, scale, split,
            )
            .map_err(e)?;
            split.unwrap_or_else(|| tern_gpu::kernels::attention_splits(ctx, nn, nh, nk, nc))
        }
        Kernel::Prefill => {
            tern_gpu::kernels::attention_prefill(
                ctx, &mut enc, &l, &step, &qb, &kb, &vb, &ob, nn, nh, scale,
            )
            .map_err(e)?;
            0
        }
    };
    let t0 = std::time::Instant::now();
    ctx.submit_wait(enc).map_err(e)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    // reference: store, then attend
    kc[p0 * row..(p0 + n) * row].copy_from_slice(&knew);
    vc[p0 * row..(p0 + n) * row].copy_from_slice(&vnew);
    let gk = ctx.read_f32(&kb, n_ctx * row).map_err(e)?;
    let gv = ctx.read_f32(&vb, n_ctx * row).map_err(e)?;
    score("kv_store k", Check::Exact, &gk, &kc)?;
    score("kv_store v", Check::Exact, &gv, &vc)?;
    let want = reference(&q, &kc, &vc, p0, n, n_head, n_kv, hd)?;
    let got = ctx.read_f32(&ob, n * q_dim).map_err(e)?;
    score("attention", Check::Nmse(1e-10), &got, &want).map(|s| match splits {
        0 => format!("kv bit-exact, {s}, prefill kernel, attention {ms:.1} ms"),
        _ => format!("kv bit-exact, {s}, {splits} splits, attention {ms:.1} ms"),
    })
}

/// One plan (kv_store ×2 + attention, recorded once for a cache of `n_ctx`) replayed at each
/// position of `p0s`, only the step buffer rewritten in between; the caches carry over.
fn run_plan_replay(
    ctx: &GpuContext,
    rng: &mut Rng,
    p0s: &[usize],
    n_head: usize,
    n_kv: usize,
    hd: usize,
    n_ctx: usize,
) -> Result<String, String> {
    let row = n_kv * hd;
    let q_dim = n_head * hd;
    let e = |e: GpuError| e.to_string();
    let mut kc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
    let mut vc: Vec<f32> = (0..n_ctx * row).map(|_| rng.normal()).collect();
    let kb = ctx.upload("k", &f32_bytes(&kc)).map_err(e)?;
    let vb = ctx.upload("v", &f32_bytes(&vc)).map_err(e)?;
    let knb = ctx.zeroed("knew", (row * 4) as u64).map_err(e)?;
    let vnb = ctx.zeroed("vnew", (row * 4) as u64).map_err(e)?;
    let qb = ctx.zeroed("q", (q_dim * 4) as u64).map_err(e)?;
    let ob = ctx.zeroed("out", (q_dim * 4) as u64).map_err(e)?;
    let step = step_buffer(ctx, 0, 1);
    let l = f32_layout(n_kv, hd, n_ctx).map_err(e)?;
    let mut plan = Plan::new();
    tern_gpu::kernels::kv_store(ctx, &mut plan, &l, &step, &knb, &kb, 1, true).map_err(e)?;
    tern_gpu::kernels::kv_store(ctx, &mut plan, &l, &step, &vnb, &vb, 1, false).map_err(e)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let nh = n_head as u64;
    tern_gpu::kernels::attention(ctx, &mut plan, &l, &step, &qb, &kb, &vb, &ob, 1, nh, scale)
        .map_err(e)?;
    let mut worst = 0.0f64;
    for &p0 in p0s {
        let knew: Vec<f32> = (0..row).map(|_| rng.normal()).collect();
        let vnew: Vec<f32> = (0..row).map(|_| rng.normal()).collect();
        let q: Vec<f32> = (0..q_dim).map(|_| rng.normal()).collect();
        ctx.write(&knb, &f32_bytes(&knew));
        ctx.write(&vnb, &f32_bytes(&vnew));
        ctx.write(&qb, &f32_bytes(&q));
        write_step(ctx, &step, p0 as u32, 1);
        let mut enc = ctx.encoder();
        plan.encode(&mut enc);
        ctx.submit_wait(enc).map_err(e)?;
        kc[p0 * row..(p0 + 1) * row].copy_from_slice(&knew);
        vc[p0 * row..(p0 + 1) * row].copy_from_slice(&vnew);
        let want = reference(&q, &kc, &vc, p0, 1, n_head, n_kv, hd)?;
        let got = ctx.read_f32(&ob, q_dim).map_err(e)?;
        score(
            &format!("replay at p0 = {p0}"),
            Check::Nmse(1e-10),
            &got,
            &want,
        )?;
        worst = worst.max(nmse(&got, &want));
    }
    Ok(format!(
        "{} positions, {} dispatches, worst nmse {worst:.2e}",
        p0s.len(),
        plan.dispatches()
    ))
}

/// A KV cache larger than one binding is a typed error naming the largest context that fits.
fn run_attention_too_large(ctx: &GpuContext, _rng: &mut Rng) -> Result<String, String> {
    let (n_head, n_kv, hd) = (4u64, 2u64, 64u64);
    let n_ctx = ctx.binding_limit() / (n_kv * hd * 4) + 1;
    let small = ctx.zeroed("small", 4096).map_err(|e| e.to_string())?;
    let step = step_buffer(ctx, 0, 1);
    let mut enc = ctx.encoder();
    // (run on the split context: a binding holds 64 KiB, so the cache is only ~64 KiB)
    let big = ctx
        .zeroed("big", n_ctx * n_kv * hd * 4)
        .map_err(|e| e.to_string())?;
    let l = f32_layout(n_kv as usize, hd as usize, n_ctx as usize).map_err(|e| e.to_string())?;
    let r = tern_gpu::kernels::attention(
        ctx, &mut enc, &l, &step, &small, &big, &big, &small, 1, n_head, 0.125,
    );
    match r {
        Err(GpuError::TooLarge { what, detail }) if detail.contains("at most") => {
            Ok(format!("TooLarge: {what}: {detail}"))
        }
        other => Err(format!("expected TooLarge, got {other:?}")),
    }
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let heads = [(9, 3, 64), (20, 5, 128), (4, 4, 18), (6, 2, 72)];
    for (nh, nkv, hd) in heads {
        for p0 in [0, 1, 37, 300] {
            v.push((
                format!("attention decode p0={p0} heads {nh}/{nkv}×{hd}"),
                false,
                Box::new(move |c, r| run_attention(c, r, p0, 1, nh, nkv, hd, 3, None)),
            ));
        }
        for (p0, n) in [(3, 1), (13, 5), (129, 67)] {
            v.push((
                format!("attention prefill p0={p0} n={n} heads {nh}/{nkv}×{hd}"),
                false,
                Box::new(move |c, r| run_attention(c, r, p0, n, nh, nkv, hd, 3, None)),
            ));
        }
    }
    for (p0, n, nh, nkv, hd, extra) in [
        (4100, 1, 9, 3, 64, 3),
        (77, 1, 14, 2, 64, 0),
        (5, 3, 8, 1, 256, 0),
        (200, 1, 8, 1, 256, 0),
        (0, 1, 9, 3, 64, 4000),
        (70, 1, 20, 5, 128, 1000),
    ] {
        v.push((
            format!(
                "attention p0={p0} n={n} heads {nh}/{nkv}×{hd} n_ctx={}",
                p0 + n + extra
            ),
            false,
            Box::new(move |c, r| run_attention(c, r, p0, n, nh, nkv, hd, extra, None)),
        ));
    }
    // Long decode in a 4100-position context (the split count recorded for it, the chunk length
    // following p0), for the heads of 2B4T and SmolLM2.
    for (nh, nkv, hd) in [(20, 5, 128), (9, 3, 64)] {
        for p0 in [0, 1, 37, 300, 1000, 4000] {
            v.push((
                format!("attention decode p0={p0} heads {nh}/{nkv}×{hd} n_ctx=4100"),
                false,
                Box::new(move |c, r| run_attention(c, r, p0, 1, nh, nkv, hd, 4099 - p0, None)),
            ));
        }
    }
    // The split counts a discrete GPU picks (up to 128 chunks, ≥ 32 keys each: at p0 = 4000
    // all 128 splits hold 31–32 keys, at 300 only 10 are non-empty) and other forced ones
    // (a chunk longer than one 64-key tile, prefill tokens with different chunk lengths).
    for (p0, n, nh, nkv, hd, n_ctx, split) in [
        (4000, 1, 20, 5, 128, 4100, 128),
        (300, 1, 20, 5, 128, 4100, 128),
        (0, 1, 20, 5, 128, 4100, 128),
        (4000, 1, 9, 3, 64, 4100, 128),
        (1000, 1, 9, 3, 64, 4100, 7),
        (700, 1, 8, 1, 256, 800, 5),
        (129, 67, 20, 5, 128, 200, 4),
        (13, 5, 9, 3, 64, 20, 128),
    ] {
        v.push((
            format!("attention p0={p0} n={n} heads {nh}/{nkv}×{hd} n_ctx={n_ctx} {split} splits"),
            false,
            Box::new(move |c, r| {
                run_attention(c, r, p0, n, nh, nkv, hd, n_ctx - p0 - n, Some(split))
            }),
        ));
    }
    // The query-tiled prefill kernel forced (attention_prefill.wgsl): 1 token (a partial tile),
    // 5 (a full and a partial tile), tiles straddling a 64-key tile edge (p0 = 60), a long batch
    // over a cached prefix, head groups of 3 (lanes past the group) and 8 (two head groups),
    // head_dim 32 (one token per value invocation, half of them idle), 96 (192 of 256 value
    // invocations), 16 and 48 (f16's 16-dim tail step in kv.rs), a cache longer than the
    // positions used.
    for (p0, n, nh, nkv, hd, extra) in [
        (0, 1, 9, 3, 64, 0),
        (0, 5, 20, 5, 128, 0),
        (60, 9, 9, 3, 64, 2),
        (129, 67, 20, 5, 128, 3),
        (0, 130, 20, 5, 128, 0),
        (7, 33, 16, 2, 64, 40),
        (3, 18, 4, 4, 32, 0),
        (70, 23, 6, 2, 96, 1),
        (0, 20, 4, 2, 16, 0),
        (5, 17, 6, 3, 48, 2),
    ] {
        v.push((
            format!(
                "attention prefill kernel p0={p0} n={n} heads {nh}/{nkv}×{hd} n_ctx={}",
                p0 + n + extra
            ),
            false,
            Box::new(move |c, r| {
                run_attention_with(c, r, p0, (n, nh, nkv, hd), extra, Kernel::Prefill)
            }),
        ));
    }
    v.push((
        "attention prefill kernel refuses head_dim 18 → shape error".into(),
        false,
        Box::new(
            |c, r| match run_attention_with(c, r, 0, (20, 4, 4, 18), 0, Kernel::Prefill) {
                Err(e) if e.contains("head_dim 18") => Ok(e),
                other => Err(format!(
                    "expected a shape error naming head_dim 18, got {other:?}"
                )),
            },
        ),
    ));
    v.push((
        "attention plan replayed at p0 = 0, 1, 2, 130, 129, 700 (n_ctx 1024)".into(),
        false,
        Box::new(|c, r| run_plan_replay(c, r, &[0, 1, 2, 130, 129, 700], 9, 3, 64, 1024)),
    ));
    v.push((
        "attention KV cache over the binding limit → TooLarge".into(),
        true,
        Box::new(run_attention_too_large),
    ));
    v
}
