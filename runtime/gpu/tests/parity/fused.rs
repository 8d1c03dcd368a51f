//! Parity of the fused kernels: `rmsnorm_quant_int8` against the reference RMSNorm followed by
//! the reference INT8 quantizer. The norm's f32 sum runs in a different order on the GPU (NMSE
//! ~1e-14 on its own), so the int8 codes are checked bit-exactly against the reference quantizer
//! applied to the GPU's unfused `rmsnorm` output (the arithmetic the fused kernel repeats), and the
//! scales within 1e-6 relative of the all-reference path.

use super::*;

fn run_rmsnorm_quant(
    ctx: &GpuContext,
    rng: &mut Rng,
    rows: usize,
    n: usize,
) -> Result<String, String> {
    let x = activations(rng, rows, n);
    let w: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let e = |e: GpuError| e.to_string();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let wb = ctx.upload("w", &f32_bytes(&w)).map_err(e)?;
    let yb = ctx.zeroed("y", (rows * n * 4) as u64).map_err(e)?;
    let a = kernels::ActInt8::alloc(ctx, rows as u64, n as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    kernels::rmsnorm(ctx, &mut enc, &xb, &wb, &yb, n as u64, rows as u64, 1e-6).map_err(e)?;
    kernels::rmsnorm_quant_int8(ctx, &mut enc, &xb, &wb, n as u64, 1e-6, &a).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let y = ctx.read_f32(&yb, rows * n).map_err(e)?;
    let q = ctx
        .read_bytes(&a.q, 0, u64::from(a.stride) * rows as u64 * 4)
        .map_err(e)?;
    let s = ctx.read_f32(&a.s, rows).map_err(e)?;
    let stride = a.stride as usize * 4;
    let mut ref_y = vec![0.0f32; rows * n];
    tern_reference::rmsnorm(&x, &w, 1e-6, &mut ref_y).map_err(|e| e.to_string())?;
    for r in 0..rows {
        let mut qr = vec![0i8; n];
        let sr = tern_reference::quantize_act_int8(&y[r * n..(r + 1) * n], &mut qr)
            .map_err(|e| e.to_string())?;
        let got: Vec<f32> = q[r * stride..r * stride + n]
            .iter()
            .map(|&b| f32::from(b as i8))
            .collect();
        let want: Vec<f32> = qr.iter().map(|&v| f32::from(v)).collect();
        score("rmsnorm_quant codes", Check::Exact, &got, &want)?;
        score("rmsnorm_quant scale", Check::Exact, &s[r..r + 1], &[sr])?;
        let mut q2 = vec![0i8; n];
        let s_ref = tern_reference::quantize_act_int8(&ref_y[r * n..(r + 1) * n], &mut q2)
            .map_err(|e| e.to_string())?;
        if ((s[r] - s_ref) / s_ref).abs() > 1e-6 {
            return Err(format!("row {r}: scale {} vs reference {s_ref}", s[r]));
        }
        if q[r * stride + n..(r + 1) * stride].iter().any(|&b| b != 0) {
            return Err(format!("row {r}: padding past {n} columns is not zero"));
        }
    }
    Ok("codes and scales bit-exact".into())
}

/// The GPU norm's own order on the CPU (rmsnorm.wgsl, rmsnorm_quant.wgsl): invocation `i` of 256
/// sums the squares of columns i, i + 256, … in increasing order; the 256 partial sums are added
/// as a halving tree; then `x · r · w`. The kernels' loads were restructured for latency (issue
/// 15) without changing this order: checked bit for bit against this.
fn tree_order_rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let n = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let mut partial = [0.0f32; 256];
        for (i, p) in partial.iter_mut().enumerate() {
            let mut ss = 0.0f32;
            for v in row.iter().skip(i).step_by(256) {
                ss += v * v;
            }
            *p = ss;
        }
        let mut st = 128;
        while st > 0 {
            for i in 0..st {
                partial[i] += partial[i + st];
            }
            st /= 2;
        }
        let r = 1.0 / (partial[0] / n as f32 + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, g)| v * r * g));
    }
    out
}

/// `rmsnorm` against [`tree_order_rmsnorm`] (bit-exact), then `rmsnorm_quant_int8` against the
/// reference INT8 quantizer over that (bit-exact codes and scales).
fn run_norm_order(
    ctx: &GpuContext,
    rng: &mut Rng,
    rows: usize,
    n: usize,
) -> Result<String, String> {
    let x = activations(rng, rows, n);
    let w: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let e = |e: GpuError| e.to_string();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let wb = ctx.upload("w", &f32_bytes(&w)).map_err(e)?;
    let yb = ctx.zeroed("y", (rows * n * 4) as u64).map_err(e)?;
    let a = kernels::ActInt8::alloc(ctx, rows as u64, n as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    kernels::rmsnorm(ctx, &mut enc, &xb, &wb, &yb, n as u64, rows as u64, 1e-6).map_err(e)?;
    kernels::rmsnorm_quant_int8(ctx, &mut enc, &xb, &wb, n as u64, 1e-6, &a).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let y = ctx.read_f32(&yb, rows * n).map_err(e)?;
    let want = tree_order_rmsnorm(&x, &w, 1e-6);
    score("rmsnorm (tree order)", Check::Exact, &y, &want)?;
    let q = ctx
        .read_bytes(&a.q, 0, u64::from(a.stride) * rows as u64 * 4)
        .map_err(e)?;
    let s = ctx.read_f32(&a.s, rows).map_err(e)?;
    let stride = a.stride as usize * 4;
    for r in 0..rows {
        let mut qr = vec![0i8; n];
        let sr = tern_reference::quantize_act_int8(&want[r * n..(r + 1) * n], &mut qr)
            .map_err(|e| e.to_string())?;
        let got: Vec<f32> = q[r * stride..r * stride + n]
            .iter()
            .map(|&b| f32::from(b as i8))
            .collect();
        let wq: Vec<f32> = qr.iter().map(|&v| f32::from(v)).collect();
        score("rmsnorm_quant codes (tree order)", Check::Exact, &got, &wq)?;
        score(
            "rmsnorm_quant scale (tree order)",
            Check::Exact,
            &s[r..r + 1],
            &[sr],
        )?;
    }
    Ok("norm and codes bit-exact with the tree-order CPU norm".into())
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    // around one trip of the unrolled loads (4 · 256 columns), the tails, several trips
    for (rows, n) in [
        (1, 7),
        (2, 255),
        (1, 1023),
        (1, 1025),
        (1, 2047),
        (1, 2049),
        (2, 2560),
        (1, 6912),
        (3, 4099),
    ] {
        v.push((
            format!("rmsnorm tree order {rows}×{n}"),
            false,
            Box::new(move |c, r| run_norm_order(c, r, rows, n)),
        ));
    }
    for (rows, n) in [(1, 1), (1, 31), (3, 257), (2, 2560), (1, 6912), (5, 1000)] {
        v.push((
            format!("rmsnorm_quant_int8 {rows}×{n}"),
            false,
            Box::new(move |c, r| run_rmsnorm_quant(c, r, rows, n)),
        ));
    }
    v
}
