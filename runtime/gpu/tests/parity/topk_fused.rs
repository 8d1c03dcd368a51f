//! Parity of the decode GEMV's fused TopK prologue (issue 13, h-topk: `ternary_gemv_dec_norm.wgsl`
//! ACT4 = 2, BitNet a4.8's attention-output input): RMSNorm + TopK 50% + INT8 computed by the GEMV
//! itself must give the separate passes' bits (`quantize_act_a48_into` with the norm, TopK50Int8,
//! then `ternary_gemv` and the epilogue) and the CPU's (the GPU's `rmsnorm` rows, then the
//! reference's TopK quantizer and ternary matmul; see parity/fused.rs for why that norm). Run by
//! `parity_a48` with both integer dot products. Shapes the decode kernel takes: odd row counts,
//! rows past the last whole 64 columns, the register path's limit (12 · 256 columns) and the
//! loop path past it, 2B4T's 2560; data: normal with an outlier, ties at the threshold (a small
//! set of values; keys ulps apart with copies: ties straddling the cut), a single huge outlier,
//! the threshold on a select bin boundary, and with several tokens an all-zero last row; f16 and
//! f32 scales.

use super::*;
use tern_gpu::kernels::{A48Quant, ActInt8, Epilogue, NormPrologue};

const EPS: f32 = 1e-5;

#[allow(clippy::too_many_arguments)]
fn run_topk_fused(
    ctx: &GpuContext,
    rng: &mut Rng,
    rows: usize,
    cols: usize,
    group: u32,
    tokens: usize,
    data: u32,
    st: FloatType,
    epi: Epilogue,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    // The case's own random stream (not the harness's shared one): tie data must straddle the
    // threshold whatever cases run before it (adding cases once shifted the shared stream until
    // the 5 × 50 case drew no straddling ties).
    let _ = rng;
    let seed = (rows as u64) << 40 ^ (cols as u64) << 20 ^ (tokens as u64) << 8 ^ u64::from(data);
    let rng = &mut Rng(0x7091_f05e ^ seed);
    let layout = TernaryLayout::Bits2;
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let ns = ternary::scale_count(rows as u64, cols as u64, group).unwrap() as usize;
    let scales: Vec<f32> = (0..ns).map(|_| 0.01 + rng.unit() * 0.5).collect();
    let bytes = ternary::pack(layout, rows as u64, cols as u64, &trits, group, st, &scales)
        .map_err(|e| e.to_string())?;
    let w = TernaryWeight::upload(ctx, layout, rows as u64, cols as u64, group, st, &bytes)
        .map_err(e)?;
    let x = a48::rows_of(rng, tokens, cols, data);
    // Ties need equal |y|: with tie data the norm weight is ±1 (|y| = |x| · r).
    let ties = matches!(data, 1 | 5);
    let nw: Vec<f32> = (0..cols)
        .map(|_| match (ties, rng.next() % 2) {
            (true, 0) => 1.0,
            (true, _) => -1.0,
            (false, _) => rng.normal(),
        })
        .collect();
    let y0: Vec<f32> = (0..tokens * rows).map(|_| rng.normal()).collect();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let nb = ctx.upload("norm", &f32_bytes(&nw)).map_err(e)?;
    let yb = (tokens * rows * 4) as u64;
    let proj = ctx.zeroed("proj", yb).map_err(e)?;
    let y0b = ctx.upload("y0", &f32_bytes(&y0)).map_err(e)?;
    let want_b = ctx.upload("want", &f32_bytes(&y0)).map_err(e)?;
    let got_b = ctx.upload("got", &f32_bytes(&y0)).map_err(e)?;
    let a = ActInt8::alloc(ctx, tokens as u64, cols as u64).map_err(e)?;
    if !kernels::dec_norm_fits(&w, &a, AUTO_PICK.0) {
        return Err("the decode kernel's fused variant does not take this shape".into());
    }
    // the separate passes
    let mut enc = ctx.encoder();
    let k = A48Quant::TopK50Int8;
    kernels::quantize_act_a48_into(ctx, &mut enc, &xb, Some((&nb, EPS)), k, &a).map_err(e)?;
    kernels::ternary_gemv(ctx, &mut enc, &w, &a, &proj).map_err(e)?;
    let n = (tokens * rows) as u64;
    if epi == Epilogue::Add {
        kernels::elementwise(ctx, &mut enc, EltOp::Add, &y0b, &proj, &want_b, n).map_err(e)?;
    } else {
        enc.copy_buffer_to_buffer(&proj, 0, &want_b, 0, yb);
    }
    ctx.submit_wait(enc).map_err(e)?;
    // the fused GEMV: its quantized buffers are not read (garbage there must not matter)
    let junk = vec![0xa5u8; a.q.size() as usize];
    ctx.queue.write_buffer(&a.q, 0, &junk);
    let norm = Some(NormPrologue {
        x: &xb,
        weight: &nb,
        eps: EPS,
        topk: true,
    });
    let mut enc = ctx.encoder();
    kernels::ternary_gemv_fused(ctx, &mut enc, &w, &a, norm, epi, &got_b, AUTO_PICK.0)
        .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&got_b, tokens * rows).map_err(e)?;
    let want = ctx.read_f32(&want_b, tokens * rows).map_err(e)?;
    let s = score("fused TopK vs separate passes", Check::Exact, &got, &want)?;
    // the CPU: the reference's TopK quantizer and matmul on the GPU norm's rows
    let normed_b = ctx
        .zeroed("normed", (tokens * cols * 4) as u64)
        .map_err(e)?;
    let (c, t) = (cols as u64, tokens as u64);
    let mut enc = ctx.encoder();
    kernels::rmsnorm(ctx, &mut enc, &xb, &nb, &normed_b, c, t, EPS).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let normed = ctx.read_f32(&normed_b, tokens * cols).map_err(e)?;
    let enc_t = Encoding::Ternary {
        layout,
        group,
        scale_type: st,
    };
    let m = Matrix::from_encoded("w", rows, cols, &enc_t, &bytes).map_err(|e| e.to_string())?;
    let mut cpu = vec![0f32; tokens * rows];
    m.matmul(
        &normed,
        ActQuant::Topk50Int8,
        &MatmulOptions::default(),
        &mut cpu,
    )
    .map_err(|e| e.to_string())?;
    if epi == Epilogue::Add {
        cpu.iter_mut().zip(&y0).for_each(|(c, y)| *c += y);
    }
    score("fused TopK vs CPU", Check::Exact, &got, &cpu)?;
    let straddle = (0..tokens)
        .filter(|&t| ties_straddle(&normed[t * cols..(t + 1) * cols]))
        .count();
    if ties && straddle == 0 {
        return Err("tie data without ties straddling the threshold".into());
    }
    Ok(format!(
        "{s}, ties straddle the threshold in {straddle} row(s)"
    ))
}

/// Whether some but not all entries with the TopK threshold's |y| are kept (the prologue's rank
/// path): the reference's rule, k = ⌊n/2⌋ largest |y|.
fn ties_straddle(y: &[f32]) -> bool {
    let k = y.len() / 2;
    let mut mags: Vec<u32> = y.iter().map(|v| v.abs().to_bits()).collect();
    mags.sort_unstable_by(|a, b| b.cmp(a));
    if k == 0 || k >= mags.len() {
        return false;
    }
    mags[k - 1] == mags[k]
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    use Epilogue::{Add, Store};
    use FloatType::{F16, F32};
    // (rows, cols, group, tokens, data, scale type, epilogue); data as parity/a48.rs's rows_of:
    // 0 normal + outlier, 1 ties (5 values), 2 one huge outlier, 5 keys ulps apart with copies,
    // 6 the threshold on a bin boundary; tokens > 1: the last row all zero
    let shapes: [(usize, usize, u32, usize, u32, FloatType, Epilogue); 10] = [
        (33, 2560, 0, 1, 0, F16, Add),
        (33, 2560, 128, 2, 1, F32, Add),
        (65, 3000, 0, 3, 5, F16, Store),
        (40, 3072, 128, 1, 1, F16, Store),
        (34, 3136, 448, 2, 0, F32, Add),
        (34, 3136, 0, 2, 1, F16, Store),
        (3, 64, 0, 2, 2, F32, Store),
        (5, 50, 0, 1, 5, F16, Add),
        (17, 1024, 0, 2, 6, F16, Add),
        (9, 512, 64, 1, 2, F16, Store),
    ];
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for (rows, cols, group, tokens, data, st, epi) in shapes {
        let name = format!(
            "fused decode TopK ternary {rows}×{cols} group {group} tokens {tokens} data {data} \
             {st:?} {epi:?}"
        );
        v.push((
            name,
            false,
            Box::new(move |c, r| run_topk_fused(c, r, rows, cols, group, tokens, data, st, epi)),
        ));
    }
    v
}
