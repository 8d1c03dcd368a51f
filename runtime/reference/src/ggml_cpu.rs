//! Bit-exact emulation of llama.cpp's x86 CPU backend arithmetic (AVX2 + FMA + F16C build,
//! `GGML_NATIVE=OFF`, llamafile sgemm on), op by op, for [`crate::ForwardOptions::llama_cpp_like`].
//!
//! Why exact: llama.cpp quantizes every matmul input to 8-bit blocks. A difference in the last bit
//! of an activation flips the rounding of one quantized element now and then; each flip is an error
//! of a whole quantum, and the flips compound over 30 layers (SmolLM2 has activations of ~8000 in
//! the residual stream). Emulating the quantization alone is therefore worth nothing — measured:
//! the same top-1 agreement as plain f32 (94%); only an emulation that reproduces every rounding of
//! every op tracks llama.cpp. Each function names the ggml source it follows (vendored llama.cpp,
//! `ggml/src/ggml-cpu/`), and the operation order and fused multiply-adds are those of that code as
//! compiled by GCC `-O3 -mavx2 -mfma` (its default `-ffp-contract=fast` fuses some scalar `a*b + c`;
//! those sites were read from the disassembly and are marked "contracted").
//!
//! Vector lanes become small arrays; `f32::mul_add` is the fused multiply-add (exactly rounded on
//! every platform), so the results do not depend on the machine running tern.

use half::f16;

use crate::ggml_dot::{ActBlock, QK};

fn c(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// One lane of `ggml_v_expf` (vec.h, AVX2 + FMA): a degree-5 polynomial after range reduction by
/// `2^n`, with the overflow/underflow branches of the vector code.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let r = c(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(c(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x));
    let e = z.to_bits().wrapping_shl(23);
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let big = n.abs() > 126.0;
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6) * b);
    if !big {
        return k.mul_add(j, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// One lane of `ggml_v_silu`: `x / (1 + expf(0 − x))`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + expf(0.0 - x))
}

/// `ggml_vec_geglu_f32` with `GGML_GELU_FP16` (vec.h, the CPU backend's default): `gate` rounded
/// to f16 and looked up in the f16 GELU table (`ggml_table_gelu_f16[t] = f16(gelu_f32(f32(t)))`),
/// times `up`; 0 at `gate ≤ −10`, `gate · up` at `gate ≥ 10`.
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = if g <= -10.0 {
            0.0
        } else if g >= 10.0 {
            g * u
        } else {
            let t = half::f16::from_f32(g).to_f32();
            half::f16::from_f32(crate::kernels::gelu_tanh(t)).to_f32() * u
        };
    }
}

/// `ggml_vec_swiglu_f32` (AVX2 body; `n` a multiple of 8 there, the scalar tail uses libm `expf`).
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n8 = gate.len() / 8 * 8;
    for (i, ((o, &g), &u)) in out.iter_mut().zip(gate).zip(up).enumerate() {
        *o = if i < n8 {
            silu(g) * u
        } else {
            (g / (1.0 + (-g).exp())) * u
        };
    }
}

/// `hsum_float_8` (x86 quants.c) and sgemm's `hsum(__m256)`: fold the high half onto the low, then
/// `(l0 + l2) + (l1 + l3)`.
#[inline(always)]
pub fn hsum8(a: &[f32; 8]) -> f32 {
    let r = [a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]];
    let (s0, s1) = (r[0] + r[2], r[1] + r[3]);
    s0 + s1
}

/// `ggml_compute_forward_rms_norm_f32` (+ the weight multiply): the sum of `f32` squares in
/// double, `scale = 1 / sqrtf(mean + eps)`, `y = (x · scale) · w`. Rows of `w.len()`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len().max(1);
    for (xr, yr) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let mut sum = 0.0f64;
        for &v in xr {
            sum += (v * v) as f64;
        }
        let mean = (sum / n as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for ((y, &v), &wv) in yr.iter_mut().zip(xr).zip(w) {
            *y = (v * scale) * wv;
        }
    }
}

/// `ggml_compute_forward_rope_flt<float>` without scaling (freq_scale 1, no YaRN): the angle of
/// pair `i` is built by repeated `f32` multiplication `θ_i = θ_{i−1} · base^(−2/n_dims)` from
/// `θ_0 = pos`, `cosf`/`sinf` from libm, and the rotation is contracted by GCC as
/// `x0' = fma(x0, cos, −(x1·sin))`, `x1' = fma(x0, sin, x1·cos)`.
pub fn rope(
    x: &mut [f32],
    head_dim: usize,
    n_dims: usize,
    pos: usize,
    base: f32,
    neox: bool,
    cache: &mut Vec<(f32, f32)>,
) {
    rope_ext(x, head_dim, n_dims, pos, base, neox, 1.0, None, cache)
}

/// [`rope`] with `ggml_rope_cache_init`'s scaling (no YaRN ramp: `ext_factor` 0, `mscale` 1):
/// the angle of pair `i` is `freq_scale · (θ_i / factors[i])` (`rope_yarn`). `1.0` and `None`
/// give [`rope`] bit for bit (`θ/1` and `1·θ` are exact).
#[allow(clippy::too_many_arguments)]
pub fn rope_ext(
    x: &mut [f32],
    head_dim: usize,
    n_dims: usize,
    pos: usize,
    base: f32,
    neox: bool,
    freq_scale: f32,
    factors: Option<&[f32]>,
    cache: &mut Vec<(f32, f32)>,
) {
    let half = n_dims / 2;
    let theta_scale = base.powf(-2.0 / n_dims as f32);
    cache.clear();
    let mut theta = pos as f32;
    for i in 0..half {
        let ff = factors.and_then(|f| f.get(i)).copied().unwrap_or(1.0);
        let t = freq_scale * (theta / ff);
        cache.push((t.cos(), t.sin()));
        theta *= theta_scale;
    }
    let rot = |x0: f32, x1: f32, (cs, sn): (f32, f32)| {
        (x0.mul_add(cs, -(x1 * sn)), x0.mul_add(sn, x1 * cs))
    };
    for head in x.chunks_exact_mut(head_dim) {
        let Some(r) = head.get_mut(..n_dims) else {
            continue;
        };
        if neox {
            let (lo, hi) = r.split_at_mut(half);
            for ((a, b), &cs) in lo.iter_mut().zip(hi.iter_mut()).zip(cache.iter()) {
                (*a, *b) = rot(*a, *b, cs);
            }
        } else {
            for (p, &cs) in r.chunks_exact_mut(2).zip(cache.iter()) {
                if let [a, b] = p {
                    (*a, *b) = rot(*a, *b, cs);
                }
            }
        }
    }
}

/// The 8 lane sums of one 32-element integer block dot (`mul_sum_us8_pairs_float` /
/// sgemm's `updot`): lane `l` = `Σ_{j=4l}^{4l+3} w_j · a_j`, exact in i32, then converted to f32.
#[inline(always)]
fn lanes(w: &[i8], a: &[i8; QK]) -> [f32; 8] {
    let mut out = [0.0f32; 8];
    for ((o, w4), a4) in out.iter_mut().zip(w.chunks_exact(4)).zip(a.chunks_exact(4)) {
        let mut s = 0i32;
        for (&x, &y) in w4.iter().zip(a4) {
            s += x as i32 * y as i32;
        }
        *o = s as f32;
    }
    out
}

/// Q4_1 weights (unpacked: quants `q` 0..15, scales `d`, minimums `m`) · Q8_1 activations, as
/// `ggml_vec_dot_q4_1_q8_1` (arch/x86/quants.c, AVX2): per block `acc = fma(d_w·d_a, lanes, acc)`,
/// `summs = fma(m_w, s_a, summs)` (contracted), result `hsum8(acc) + summs`.
#[inline(always)]
pub fn dot_q4_1_q8_1(q: &[i8], d: &[f32], m: &[f32], act: &[ActBlock]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (((qb, &dw), &mw), a) in q.chunks_exact(QK).zip(d).zip(m).zip(act) {
        summs = mw.mul_add(a.s, summs);
        let dd = dw * a.d;
        let l = lanes(qb, &a.qs);
        for (s, v) in acc.iter_mut().zip(l) {
            *s = dd.mul_add(v, *s);
        }
    }
    hsum8(&acc) + summs
}

/// Q8_0 (or Q4_0 as `nibble − 8`) weights · Q8_0 activations as llamafile's `tinyBLAS_Q0_AVX`
/// (every tile shape does the same per-output arithmetic): `acc = fma(d_w·d_a, lanes, acc)`,
/// result `hsum8(acc)`.
#[inline(always)]
pub fn dot_q8_0_q8_0_tinyblas(q: &[i8], d: &[f32], act: &[ActBlock]) -> f32 {
    let mut acc = [0.0f32; 8];
    for ((qb, &dw), a) in q.chunks_exact(QK).zip(d).zip(act) {
        let dd = dw * a.d;
        let l = lanes(qb, &a.qs);
        for (s, v) in acc.iter_mut().zip(l) {
            *s = dd.mul_add(v, *s);
        }
    }
    hsum8(&acc)
}

/// KV tile of the CPU flash-attention kernels (`GGML_FA_TILE_KV`, and `GGML_FA_TILE_Q`: query
/// batches of at least this many rows take the tiled kernel).
pub const FA_TILE: usize = 64;

/// One query row of `ggml_compute_forward_flash_attn_ext_tiled` (ops.cpp), the kernel llama.cpp
/// runs for batches of ≥ 64 query rows with an f16 or f32 KV cache. `k`, `v`: the kv head's rows
/// for positions `0..n_kv` (already rounded through the cache type), row stride `stride`.
///
/// Per 64-position tile: scores `fma`-accumulated over `d` (simd_gemm), times `scale`; online
/// softmax with `ggml_v_expf` and a double sum per 8 lanes; `o += p·v` `fma`-accumulated over the
/// tile's positions in order; finally `o · (1/S)`.
#[allow(clippy::too_many_arguments)]
pub fn attn_row_tiled(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    n_kv: usize,
    scale: f32,
    out: &mut [f32],
) {
    let dk = q.len();
    let dv = out.len();
    let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    let mut kq = [0.0f32; FA_TILE];
    let mut t0 = 0;
    while t0 < n_kv {
        let nt = FA_TILE.min(n_kv - t0);
        for (tk, slot) in kq.iter_mut().enumerate() {
            *slot = if tk < nt {
                let p = t0 + tk;
                let kr = k
                    .get(p * stride + off..p * stride + off + dk)
                    .unwrap_or_default();
                let mut acc = 0.0f32;
                for (&qd, &kd) in q.iter().zip(kr) {
                    acc = qd.mul_add(kd, acc);
                }
                acc * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        let mut tile_max = f32::NEG_INFINITY;
        for &x in kq.iter() {
            tile_max = tile_max.max(x);
        }
        let m_new = m.max(tile_max);
        if m_new > m {
            let ms = (m - m_new).exp();
            for o in out.iter_mut() {
                *o *= ms;
            }
            s *= ms;
        }
        m = m_new;
        let mut sum = 0.0f64;
        for g in kq.chunks_exact_mut(8) {
            let mut e = [0.0f32; 8];
            for (ei, x) in e.iter_mut().zip(g.iter_mut()) {
                *x = expf(*x - m_new);
                *ei = *x;
            }
            sum += hsum8(&e) as f64;
        }
        s = (s as f64 + sum) as f32;
        for (tk, &p) in kq.iter().enumerate().take(nt) {
            let pos = t0 + tk;
            let vr = v
                .get(pos * stride + off..pos * stride + off + dv)
                .unwrap_or_default();
            for (o, &vd) in out.iter_mut().zip(vr) {
                *o = p.mul_add(vd, *o);
            }
        }
        t0 += FA_TILE;
    }
    let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

crate::simd::multiversion! {
    /// A block of consecutive query rows of one head through [`attn_row_tiled`]'s arithmetic, with
    /// each K tile transposed once for the whole block (llama.cpp packs `K_f32[d][kv]` the same way)
    /// so the score chains run 64 positions side by side. Row `r` of `q` (stride `q_stride`, head
    /// offset `q_off`) sits at position `pos0 + r` and sees positions `0..=pos0 + r`; `out` is
    /// `[rows][head_dim]`. Results are bit-identical to [`attn_row_tiled`] row by row.
    pub fn attn_block_tiled(
        q: &[f32],
        q_stride: usize,
        q_off: usize,
        pos0: usize,
        k: &[f32],
        v: &[f32],
        stride: usize,
        off: usize,
        head_dim: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        attn_block_tiled_impl(q, q_stride, q_off, pos0, k, v, stride, off, head_dim, scale, out)
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attn_block_tiled_impl(
    q: &[f32],
    q_stride: usize,
    q_off: usize,
    pos0: usize,
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    hd: usize,
    scale: f32,
    out: &mut [f32],
) {
    let rows = out.len() / hd.max(1);
    if rows == 0 || hd == 0 {
        return;
    }
    let mut m = vec![f32::NEG_INFINITY; rows];
    let mut s = vec![0.0f32; rows];
    out.fill(0.0);
    let last = pos0 + rows - 1;
    let mut kt = vec![0.0f32; hd * FA_TILE];
    let mut t0 = 0;
    while t0 <= last {
        let nt = FA_TILE.min(last + 1 - t0);
        // transpose the tile: kt[d][tk]
        kt.fill(0.0);
        for tk in 0..nt {
            let p = t0 + tk;
            let kr = k
                .get(p * stride + off..p * stride + off + hd)
                .unwrap_or_default();
            for (d, &kv) in kr.iter().enumerate() {
                if let Some(slot) = kt.get_mut(d * FA_TILE + tk) {
                    *slot = kv;
                }
            }
        }
        for r in 0..rows {
            let pr = pos0 + r;
            if t0 > pr {
                continue;
            }
            let valid = FA_TILE.min(pr + 1 - t0);
            let qr = q
                .get(r * q_stride + q_off..r * q_stride + q_off + hd)
                .unwrap_or_default();
            let mut kq = [0.0f32; FA_TILE];
            for (&qd, ktd) in qr.iter().zip(kt.chunks_exact(FA_TILE)) {
                for (acc, &kv) in kq.iter_mut().zip(ktd) {
                    *acc = qd.mul_add(kv, *acc);
                }
            }
            for (tk, x) in kq.iter_mut().enumerate() {
                *x = if tk < valid {
                    *x * scale
                } else {
                    f32::NEG_INFINITY
                };
            }
            let mut tile_max = f32::NEG_INFINITY;
            for &x in kq.iter() {
                tile_max = tile_max.max(x);
            }
            let (Some(mr), Some(sr)) = (m.get_mut(r), s.get_mut(r)) else {
                continue;
            };
            let orow = out.get_mut(r * hd..(r + 1) * hd).unwrap_or_default();
            let m_new = mr.max(tile_max);
            if m_new > *mr {
                let ms = (*mr - m_new).exp();
                for o in orow.iter_mut() {
                    *o *= ms;
                }
                *sr *= ms;
            }
            *mr = m_new;
            let mut sum = 0.0f64;
            for g in kq.chunks_exact_mut(8) {
                let mut e = [0.0f32; 8];
                for (ei, x) in e.iter_mut().zip(g.iter_mut()) {
                    *x = expf(*x - m_new);
                    *ei = *x;
                }
                sum += hsum8(&e) as f64;
            }
            *sr = (*sr as f64 + sum) as f32;
            for (tk, &p) in kq.iter().enumerate().take(valid) {
                let pos = t0 + tk;
                let vr = v
                    .get(pos * stride + off..pos * stride + off + hd)
                    .unwrap_or_default();
                for (o, &vd) in orow.iter_mut().zip(vr) {
                    *o = p.mul_add(vd, *o);
                }
            }
        }
        t0 += FA_TILE;
    }
    for (orow, &sr) in out.chunks_exact_mut(hd).zip(&s) {
        let inv = if sr == 0.0 { 0.0 } else { 1.0 / sr };
        for o in orow.iter_mut() {
            *o *= inv;
        }
    }
}

/// `ggml_vec_dot_f16` (vec.cpp, AVX2 + F16C): four 8-lane accumulators over steps of 32 elements
/// (`sum[j] = fma(x, y, sum[j])`), reduced as `GGML_F32x8_REDUCE` ((0+2)+(1+3) lane-wise, then the
/// 8 lanes), plus a scalar double tail.
#[inline(always)]
pub fn dot_f16(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let np = n / 32 * 32;
    let mut acc = [[0.0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, s) in a.iter_mut().enumerate() {
                let idx = i + j * 8 + l;
                if let (Some(&xv), Some(&yv)) = (x.get(idx), y.get(idx)) {
                    *s = xv.mul_add(yv, *s);
                }
            }
        }
    }
    let mut r = [0.0f32; 8];
    for (l, o) in r.iter_mut().enumerate() {
        let a02 = acc[0][l] + acc[2][l];
        let a13 = acc[1][l] + acc[3][l];
        *o = a02 + a13;
    }
    // _mm256 reduce: t = lo + hi (4 lanes), then hadd, hadd
    let t = [r[0] + r[4], r[1] + r[5], r[2] + r[6], r[3] + r[7]];
    let h = [t[0] + t[1], t[2] + t[3]];
    let mut sumf = (h[0] + h[1]) as f64;
    for i in np..n {
        if let (Some(&xv), Some(&yv)) = (x.get(i), y.get(i)) {
            sumf += (xv * yv) as f64;
        }
    }
    sumf as f32
}

#[inline(always)]
fn f16r(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

crate::simd::multiversion! {
    /// One query row of `ggml_compute_forward_flash_attn_ext_f16_one_chunk` (batches of < 64 query
    /// rows, f16 KV cache): Q rounded to f16, scores by [`dot_f16`], online softmax with libm `expf`
    /// and the output accumulated in **f16** (`ggml_vec_mad_f16` / `ggml_vec_scale_f16` round every
    /// update), `S = fma(S, ms, vs)` (contracted); finally `o · (1/S)` in f32.
    pub fn attn_row_one_chunk(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        stride: usize,
        off: usize,
        n_kv: usize,
        scale: f32,
        out: &mut [f32],
        qh: &mut Vec<f32>,
    ) {
        attn_row_one_chunk_impl(q, k, v, stride, off, n_kv, scale, out, qh)
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attn_row_one_chunk_impl(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    n_kv: usize,
    scale: f32,
    out: &mut [f32],
    qh: &mut Vec<f32>,
) {
    let dk = q.len();
    let dv = out.len();
    qh.clear();
    qh.extend(q.iter().map(|&x| f16r(x)));
    let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    for p in 0..n_kv {
        let kr = k
            .get(p * stride + off..p * stride + off + dk)
            .unwrap_or_default();
        let sc = dot_f16(kr, qh) * scale;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if sc > m {
            let m_old = m;
            m = sc;
            ms = (m_old - m).exp();
            for o in out.iter_mut() {
                *o = f16r(*o * ms);
            }
        } else {
            vs = (sc - m).exp();
        }
        let vr = v
            .get(p * stride + off..p * stride + off + dv)
            .unwrap_or_default();
        for (o, &vd) in out.iter_mut().zip(vr) {
            *o = f16r(vd.mul_add(vs, *o));
        }
        s = s.mul_add(ms, vs);
    }
    let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// The two hot block dots written with AVX2 intrinsics on the packed blocks (no unpacking), the
/// same instructions as ggml's: integer lane sums are exact and the float steps are the same
/// operations in the same order, so they return the same bits as [`dot_q4_1_q8_1`] and
/// [`dot_q8_0_q8_0_tinyblas`] (tests check it).
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// The Q4_1 · Q8_1, Q8_0 · Q8_0 and Q4_0 · Q8_0 block dots with NEON on the packed blocks (no
/// unpacking). The 8 integer lane sums of [`lanes`] are exactly the lanes of two `sdot`s (one per
/// 16 weights) — or of `smull` + pairwise adds without the dot-product extension — and the float
/// steps are [`dot_q4_1_q8_1`]'s and [`dot_q8_0_q8_0_tinyblas`]'s operations in their order
/// (`fma(d_w·d_a, lane, acc)` per lane, the `summs` chain, then [`hsum8`]), so every path returns
/// the same bits as the plain functions on the unpacked row (tests check it).
#[cfg(target_arch = "aarch64")]
pub(crate) mod arm;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml_dot::{quantize_row_q8_0, quantize_row_q8_1, unpack_row};
    use tern_format::ggml::BlockType;

    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut st = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        move || {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            (st >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    fn blocks(bt: BlockType, nb: usize, seed: u64) -> Vec<u8> {
        let mut r = rng(seed);
        let mut out = Vec::new();
        for _ in 0..nb {
            out.extend(f16::from_f32(0.01 + 0.02 * r().abs()).to_le_bytes());
            if bt == BlockType::Q4_1 {
                out.extend(f16::from_f32(-0.1 * r().abs()).to_le_bytes());
            }
            let nq = if bt == BlockType::Q8_0 { 32 } else { 16 };
            for _ in 0..nq {
                out.push(((r() + 1.0) * 127.9) as u8);
            }
        }
        out
    }

    #[test]
    fn expf_is_close_to_libm_and_handles_the_ends() {
        let mut r = rng(1);
        for _ in 0..10_000 {
            let x = r() * 80.0;
            let (a, b) = (expf(x), x.exp());
            assert!((a - b).abs() <= 4.0 * f32::EPSILON * b, "{x}: {a} vs {b}");
        }
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(0.0), 1.0);
        assert_eq!(expf(-200.0), 0.0);
        assert!(expf(200.0).is_infinite());
        assert!((silu(1.0) - 1.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-6);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn intrinsic_block_dots_equal_the_scalar_emulation() {
        if !crate::simd::avx2_fma() {
            eprintln!("no AVX2/FMA here: nothing to compare");
            return;
        }
        for seed in 0..20u64 {
            let nb = 1 + seed as usize % 20;
            let mut r = rng(seed + 100);
            let x: Vec<f32> = (0..nb * QK)
                .map(|i| r() * (1.0 + (i % 5) as f32 * 3.0))
                .collect();
            let (mut q, mut d, mut m) = (Vec::new(), Vec::new(), Vec::new());
            let b = blocks(BlockType::Q4_1, nb, seed);
            let a = quantize_row_q8_1(&x).unwrap();
            unpack_row(BlockType::Q4_1, &b, &mut q, &mut d, &mut m);
            // SAFETY: AVX2 + FMA checked above.
            let fast = unsafe { x86::dot_q4_1_q8_1(&b, &a) };
            assert_eq!(fast.to_bits(), dot_q4_1_q8_1(&q, &d, &m, &a).to_bits());
            let b = blocks(BlockType::Q8_0, nb, seed);
            let a = quantize_row_q8_0(&x).unwrap();
            unpack_row(BlockType::Q8_0, &b, &mut q, &mut d, &mut m);
            // SAFETY: AVX2 + FMA checked above.
            let fast = unsafe { x86::dot_q8_0_q8_0(&b, &a) };
            assert_eq!(fast.to_bits(), dot_q8_0_q8_0_tinyblas(&q, &d, &a).to_bits());
        }
    }

    /// The NEON and `sdot` block dots equal the plain emulation bit for bit (Q4_1 · Q8_1, Q8_0 ·
    /// Q8_0, Q4_0 · Q8_0) over a table of block counts, with ordinary values and with the extreme
    /// quants (−128 / 127 weights, nibbles 0 and 15, activations ±127).
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_block_dots_equal_the_scalar_emulation() {
        let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        let mut checked = 0;
        for (case, nb) in [1usize, 2, 3, 5, 7, 8, 9, 17, 33, 64]
            .into_iter()
            .enumerate()
        {
            for extreme in [false, true] {
                let seed = case as u64 * 2 + u64::from(extreme);
                let mut r = rng(seed + 300);
                let x: Vec<f32> = (0..nb * QK)
                    .map(|i| match (extreme, i % 3) {
                        (true, 0) => -1.0e4,
                        (true, _) => 1.0e4,
                        _ => r() * (1.0 + (i % 5) as f32 * 3.0),
                    })
                    .collect();
                for bt in [BlockType::Q4_1, BlockType::Q8_0, BlockType::Q4_0] {
                    let mut b = blocks(bt, nb, seed);
                    if extreme {
                        let off = if bt == BlockType::Q4_1 { 4 } else { 2 };
                        for blk in b.chunks_exact_mut(bt.block_bytes()) {
                            for (i, v) in blk[off..].iter_mut().enumerate() {
                                *v = if i % 2 == 0 { 0x80 } else { 0x7f };
                                if bt != BlockType::Q8_0 && i % 4 == 1 {
                                    *v = 0xf0;
                                }
                            }
                        }
                    }
                    let a = if bt == BlockType::Q4_1 {
                        quantize_row_q8_1(&x).unwrap()
                    } else {
                        quantize_row_q8_0(&x).unwrap()
                    };
                    let (mut q, mut d, mut m) = (Vec::new(), Vec::new(), Vec::new());
                    unpack_row(bt, &b, &mut q, &mut d, &mut m);
                    let want = if bt == BlockType::Q4_1 {
                        dot_q4_1_q8_1(&q, &d, &m, &a)
                    } else {
                        dot_q8_0_q8_0_tinyblas(&q, &d, &a)
                    };
                    // SAFETY: NEON is part of every AArch64 target's baseline.
                    let neon = unsafe { arm::dot_neon(bt, &b, &a) };
                    let what = format!("{bt:?}, {nb} blocks, extreme {extreme}");
                    assert_eq!(neon.to_bits(), want.to_bits(), "neon: {what}");
                    if dotprod {
                        // SAFETY: dotprod checked above.
                        let sd = unsafe { arm::dot_dotprod(bt, &b, &a) };
                        assert_eq!(sd.to_bits(), want.to_bits(), "neon-dotprod: {what}");
                    }
                    checked += 1;
                }
            }
        }
        eprintln!("{checked} block-dot cases bit-equal to scalar (neon; neon-dotprod: {dotprod})");
    }

    #[test]
    fn block_attention_equals_row_attention_bitwise() {
        let (hd, n_head_kv, n) = (16, 2, 150);
        let stride = hd * n_head_kv;
        let mut r = rng(7);
        let k: Vec<f32> = (0..n * stride).map(|_| f16r(r())).collect();
        let v: Vec<f32> = (0..n * stride).map(|_| f16r(r())).collect();
        let q: Vec<f32> = (0..n * hd).map(|_| r() * 3.0).collect();
        let pos0 = 70; // rows at positions 70..150 cross tiles 1 and 2
        let rows = n - pos0;
        let mut blk = vec![0.0; rows * hd];
        let qb = &q[pos0 * hd..];
        attn_block_tiled(qb, hd, 0, pos0, &k, &v, stride, hd, hd, 0.25, &mut blk);
        for (i, got) in blk.chunks_exact(hd).enumerate() {
            let mut want = vec![0.0; hd];
            let qr = &qb[i * hd..(i + 1) * hd];
            attn_row_tiled(qr, &k, &v, stride, hd, pos0 + i + 1, 0.25, &mut want);
            assert_eq!(got, &want[..], "row {i}");
        }
        // one-chunk kernel: a convex combination of the v rows (f16 accumulation noise only)
        let mut o = vec![0.0; hd];
        attn_row_one_chunk(
            &q[..hd],
            &k,
            &v,
            stride,
            0,
            1,
            0.25,
            &mut o,
            &mut Vec::new(),
        );
        assert_eq!(&o[..], &v[..hd]);
    }
}
