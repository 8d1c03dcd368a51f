//! Dot products of one row of ggml blocks (Q8_0, Q4_0, Q4_1; 32 elements per block) with
//! activations, in two flavours:
//!
//! * **f32 activations** ([`dot_q8_0_f32`], [`dot_q4_0_f32`], [`dot_q4_1_f32`]): the weights are
//!   dequantized block by block and multiplied with the f32 activations, f32 accumulation. This is
//!   the reference semantics ("dequantize, then an f32 dot").
//! * **llama.cpp style** ([`dot_q8_0_q8_0`], [`dot_q4_0_q8_0`], [`dot_q4_1_q8_1`]): the activations
//!   are first quantized per 32-block ([`quantize_row_q8_0`], [`quantize_row_q8_1`]), then integer
//!   block dots are scaled in f32. llama.cpp's CPU backend does this (`vec_dot_type` is Q8_0 for
//!   Q8_0 and Q4_0 and Q8_1 for Q4_1, `ggml-cpu/ggml-cpu.c`), so this flavour tracks its logits
//!   more closely.
//!
//! The activation quantizers follow the x86 AVX path of the vendored llama.cpp
//! (`ggml-cpu/arch/x86/quants.c: quantize_row_q8_0 / quantize_row_q8_1`), the one the prebuilt
//! binaries here run: `d = amax/127` stored as f16, multiplier `id = 127/amax` (0 for an all-zero
//! block), `q = round_half_even(x·id)`, and for Q8_1 `s = f16(d · Σq)` with `d` in f32. (The scalar
//! `_ref` versions use `1/d` and `roundf`; the results differ only in rare half-way cases.) Block
//! scale products are `(d_w · d_a) · Σ q_w q_a` (+ `m_w · s_a` for Q4_1), summed over blocks in f32.
//!
//! Block layouts (ggml `ggml-common.h`): Q8_0 = f16 d, i8 qs[32] (34 B); Q4_0 = f16 d, u8 qs[16]
//! (18 B; byte j holds element j in the low nibble and j+16 in the high one; x = (q−8)·d);
//! Q4_1 = f16 d, f16 m, u8 qs[16] (20 B; x = q·d + m).

use half::f16;
use tern_format::ggml::BlockType;

use crate::error::{ReferenceError, Result};

/// Elements per block of every type handled here (from the `tern_format::ggml` table).
pub const QK: usize = BlockType::Q8_0.block_elems();
const _: () = assert!(BlockType::Q4_0.block_elems() == QK && BlockType::Q4_1.block_elems() == QK);
/// Bytes per block, from the table.
pub(crate) const Q8_0_BYTES: usize = BlockType::Q8_0.block_bytes();
pub(crate) const Q4_0_BYTES: usize = BlockType::Q4_0.block_bytes();
pub(crate) const Q4_1_BYTES: usize = BlockType::Q4_1.block_bytes();

/// The little-endian f16 at byte `i` of a block (0 past its end; the block kernels read only
/// whole blocks). Also the x86 and ARM kernels' (`ggml_cpu.rs`).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    match (b.get(i), b.get(i + 1)) {
        (Some(&lo), Some(&hi)) => f16::from_le_bytes([lo, hi]).to_f32(),
        _ => 0.0,
    }
}

/// Bytes of one block of `bt` (Q8_0 34, Q4_0 18, Q4_1 20).
pub fn block_bytes(bt: BlockType) -> usize {
    bt.block_bytes()
}

/// Check that `blocks` is exactly the row of `bt` blocks that covers `n` activations (and that `bt`
/// is one of the 32-element types handled here).
pub fn check_row(bt: BlockType, blocks: &[u8], n: usize) -> Result<()> {
    if bt.block_elems() != QK {
        return Err(ReferenceError::shape(
            "ggml dot",
            format!("{bt:?} is not a {QK}-element block type"),
        ));
    }
    if n % QK != 0 || blocks.len() != n / QK * bt.block_bytes() {
        return Err(ReferenceError::shape(
            "ggml dot",
            format!(
                "{} bytes of {bt:?} blocks do not cover {n} activations",
                blocks.len()
            ),
        ));
    }
    Ok(())
}

/// Dequantize one row of blocks into `out` (the plain definition the dots are tested against).
#[inline(always)]
pub fn dequantize_row(bt: BlockType, blocks: &[u8], out: &mut [f32]) -> Result<()> {
    check_row(bt, blocks, out.len())?;
    for (b, o) in blocks
        .chunks_exact(bt.block_bytes())
        .zip(out.chunks_exact_mut(QK))
    {
        match bt {
            BlockType::Q8_0 => {
                let d = f16_at(b, 0);
                for (v, &q) in o.iter_mut().zip(&b[2..]) {
                    *v = (q as i8) as f32 * d;
                }
            }
            BlockType::Q4_0 => {
                let d = f16_at(b, 0);
                let (lo, hi) = o.split_at_mut(QK / 2);
                for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[2..]) {
                    *l = ((q & 0x0f) as i32 - 8) as f32 * d;
                    *h = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
            BlockType::Q4_1 => {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                let (lo, hi) = o.split_at_mut(QK / 2);
                for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[4..]) {
                    *l = (q & 0x0f) as f32 * d + m;
                    *h = (q >> 4) as f32 * d + m;
                }
            }
            _ => {
                return Err(ReferenceError::shape(
                    "ggml dequantize_row",
                    format!("{bt:?} is not a 32-element block type"),
                ));
            }
        }
    }
    Ok(())
}

/// `Σ w·x` for a row of Q8_0 blocks and f32 activations: per block `d · Σ q_j x_j`.
pub fn dot_q8_0_f32(blocks: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for (b, xb) in blocks.chunks_exact(Q8_0_BYTES).zip(x.chunks_exact(QK)) {
        let mut s = 0.0f32;
        for (&q, &v) in b[2..].iter().zip(xb) {
            s += (q as i8) as f32 * v;
        }
        sum += f16_at(b, 0) * s;
    }
    sum
}

/// `Σ w·x` for a row of Q4_0 blocks and f32 activations: per block `d · Σ (q_j − 8) x_j`.
pub fn dot_q4_0_f32(blocks: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for (b, xb) in blocks.chunks_exact(Q4_0_BYTES).zip(x.chunks_exact(QK)) {
        let (xl, xh) = xb.split_at(QK / 2);
        let mut s = 0.0f32;
        for ((&q, &l), &h) in b[2..].iter().zip(xl).zip(xh) {
            s += ((q & 0x0f) as i32 - 8) as f32 * l + ((q >> 4) as i32 - 8) as f32 * h;
        }
        sum += f16_at(b, 0) * s;
    }
    sum
}

/// `Σ w·x` for a row of Q4_1 blocks and f32 activations: per block `d · Σ q_j x_j + m · Σ x_j`.
pub fn dot_q4_1_f32(blocks: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for (b, xb) in blocks.chunks_exact(Q4_1_BYTES).zip(x.chunks_exact(QK)) {
        let (xl, xh) = xb.split_at(QK / 2);
        let (mut s, mut sx) = (0.0f32, 0.0f32);
        for ((&q, &l), &h) in b[4..].iter().zip(xl).zip(xh) {
            s += (q & 0x0f) as f32 * l + (q >> 4) as f32 * h;
            sx += l + h;
        }
        sum += f16_at(b, 0) * s + f16_at(b, 2) * sx;
    }
    sum
}

/// One activation block quantized llama.cpp style. `s` is only meaningful for Q8_1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActBlock {
    /// Block scale, already rounded through f16.
    pub d: f32,
    /// Q8_1 only: `f16(d · Σ qs)`, rounded through f16.
    pub s: f32,
    pub qs: [i8; QK],
}

fn quantize_block(x: &[f32]) -> (ActBlock, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        // ok: |v·id| ≤ 127 up to rounding, and the clamp bounds the cast
        *q = (v * id).round_ties_even().clamp(-128.0, 127.0) as i8;
        sum += *q as i32;
    }
    let blk = ActBlock {
        d: f16::from_f32(d).to_f32(),
        s: f16::from_f32(d * sum as f32).to_f32(),
        qs,
    };
    (blk, sum)
}

/// Quantize activations to Q8_0 blocks (llama.cpp x86 `quantize_row_q8_0`). `x.len()` must be a
/// multiple of 32.
pub fn quantize_row_q8_0(x: &[f32]) -> Result<Vec<ActBlock>> {
    quantize_row_q8_1(x).map(|mut v| {
        v.iter_mut().for_each(|b| b.s = 0.0);
        v
    })
}

/// Quantize activations to Q8_1 blocks (llama.cpp x86 `quantize_row_q8_1`: Q8_0 plus `s`).
pub fn quantize_row_q8_1(x: &[f32]) -> Result<Vec<ActBlock>> {
    if x.len() % QK != 0 {
        return Err(ReferenceError::shape(
            "quantize_row_q8",
            format!("{} activations are not whole blocks of {QK}", x.len()),
        ));
    }
    Ok(x.chunks_exact(QK).map(|c| quantize_block(c).0).collect())
}

/// Q8_0 weights · Q8_0 activations (llama.cpp `ggml_vec_dot_q8_0_q8_0`).
pub fn dot_q8_0_q8_0(blocks: &[u8], act: &[ActBlock]) -> f32 {
    let mut sum = 0.0f32;
    for (b, a) in blocks.chunks_exact(Q8_0_BYTES).zip(act) {
        let mut si = 0i32;
        for (&q, &y) in b[2..].iter().zip(&a.qs) {
            si += (q as i8) as i32 * y as i32;
        }
        sum += (f16_at(b, 0) * a.d) * si as f32;
    }
    sum
}

/// Q4_0 weights · Q8_0 activations (llama.cpp `ggml_vec_dot_q4_0_q8_0`).
pub fn dot_q4_0_q8_0(blocks: &[u8], act: &[ActBlock]) -> f32 {
    let mut sum = 0.0f32;
    for (b, a) in blocks.chunks_exact(Q4_0_BYTES).zip(act) {
        let (yl, yh) = a.qs.split_at(QK / 2);
        let mut si = 0i32;
        for ((&q, &l), &h) in b[2..].iter().zip(yl).zip(yh) {
            si += ((q & 0x0f) as i32 - 8) * l as i32 + ((q >> 4) as i32 - 8) * h as i32;
        }
        sum += (f16_at(b, 0) * a.d) * si as f32;
    }
    sum
}

/// Q4_1 weights · Q8_1 activations (llama.cpp `ggml_vec_dot_q4_1_q8_1`):
/// per block `(d_w·d_a)·Σ q_w q_a + m_w·s_a`.
pub fn dot_q4_1_q8_1(blocks: &[u8], act: &[ActBlock]) -> f32 {
    let mut sum = 0.0f32;
    for (b, a) in blocks.chunks_exact(Q4_1_BYTES).zip(act) {
        let (yl, yh) = a.qs.split_at(QK / 2);
        let mut si = 0i32;
        for ((&q, &l), &h) in b[4..].iter().zip(yl).zip(yh) {
            si += (q & 0x0f) as i32 * l as i32 + (q >> 4) as i32 * h as i32;
        }
        sum += (f16_at(b, 0) * a.d) * si as f32 + f16_at(b, 2) * a.s;
    }
    sum
}

/// Unpack one row of blocks into integer quants `q` (Q4_0: `nibble − 8`, Q4_1: `nibble`, Q8_0:
/// as stored), per-block scales `d` and, for Q4_1, per-block minimums `m` (the matmul decodes each
/// row once and reuses it for every token). Malformed input leaves zeros.
#[inline(always)]
pub fn unpack_row(
    bt: BlockType,
    blocks: &[u8],
    q: &mut Vec<i8>,
    d: &mut Vec<f32>,
    m: &mut Vec<f32>,
) {
    let bb = bt.block_bytes();
    let nb = blocks.len() / bb;
    q.clear();
    q.resize(nb * QK, 0);
    d.clear();
    m.clear();
    for (b, qb) in blocks.chunks_exact(bb).zip(q.chunks_exact_mut(QK)) {
        d.push(f16_at(b, 0));
        match bt {
            BlockType::Q8_0 => {
                for (o, &v) in qb.iter_mut().zip(&b[2..]) {
                    *o = v as i8;
                }
            }
            BlockType::Q4_0 | BlockType::Q4_1 => {
                let (off, bias) = if bt == BlockType::Q4_1 {
                    (4, 0)
                } else {
                    (2, 8)
                };
                if bt == BlockType::Q4_1 {
                    m.push(f16_at(b, 2));
                }
                let (lo, hi) = qb.split_at_mut(QK / 2);
                for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[off..]) {
                    // ok: nibbles are 0..=15, minus a bias of 0 or 8, fit in i8
                    *l = ((v & 0x0f) as i32 - bias) as i8;
                    *h = ((v >> 4) as i32 - bias) as i8;
                }
            }
            _ => {}
        }
    }
}

/// The llama.cpp block dot on an unpacked row: `Σ_b (d_b · d_a) · Σ q·q_a (+ m_b · s_a)`, the same
/// arithmetic as [`dot_q8_0_q8_0`] / [`dot_q4_0_q8_0`] / [`dot_q4_1_q8_1`].
pub fn dot_unpacked_q8(q: &[i8], d: &[f32], m: Option<&[f32]>, act: &[ActBlock]) -> f32 {
    let mut sum = 0.0f32;
    for (i, ((qb, &db), a)) in q.chunks_exact(QK).zip(d).zip(act).enumerate() {
        let si: i32 = qb
            .iter()
            .zip(&a.qs)
            .map(|(&x, &y)| x as i32 * y as i32)
            .sum();
        sum += match m.and_then(|m| m.get(i)) {
            Some(mb) => (db * a.d) * si as f32 + mb * a.s,
            None => (db * a.d) * si as f32,
        };
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random row of blocks (valid f16 scales, arbitrary quants).
    pub(crate) fn random_blocks(bt: BlockType, n_blocks: usize, seed: u64) -> Vec<u8> {
        let mut st = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = || {
            st = st
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (st >> 33) as u32
        };
        let mut out = Vec::new();
        for _ in 0..n_blocks {
            let d = f16::from_f32(0.001 + (next() % 1000) as f32 * 1e-5).to_le_bytes();
            out.extend_from_slice(&d);
            if bt == BlockType::Q4_1 {
                out.extend_from_slice(
                    &f16::from_f32(-((next() % 100) as f32) * 1e-3).to_le_bytes(),
                );
            }
            let nq = bt.block_bytes() - out.len() % bt.block_bytes();
            for _ in 0..nq {
                out.push(next() as u8);
            }
        }
        out
    }

    fn acts(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 2654435761usize % 1000) as f32 / 500.0 - 1.0) * (1.0 + (i % 7) as f32))
            .collect()
    }

    #[test]
    fn q4_0_nibble_order_hand_computed() {
        // d = 1; byte j = j | (15-j)<<4 → elem j = j-8, elem j+16 = 15-j-8
        let mut b = f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let mut out = [0.0; 32];
        dequantize_row(BlockType::Q4_0, &b, &mut out).unwrap();
        assert_eq!(out[0], -8.0);
        assert_eq!(out[15], 7.0);
        assert_eq!(out[16], 7.0);
        assert_eq!(out[31], -8.0);
        // Q4_1: d = 0.5, m = -1: elem = q·0.5 − 1
        let mut b = f16::from_f32(0.5).to_le_bytes().to_vec();
        b.extend(f16::from_f32(-1.0).to_le_bytes());
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        dequantize_row(BlockType::Q4_1, &b, &mut out).unwrap();
        assert_eq!(out[0], -1.0);
        assert_eq!(out[1], -0.5);
        assert_eq!(out[16], 6.5);
    }

    #[test]
    fn f32_dots_match_dequantize_then_dot() {
        for bt in [BlockType::Q8_0, BlockType::Q4_0, BlockType::Q4_1] {
            for nb in [1, 3, 18] {
                let blocks = random_blocks(bt, nb, nb as u64);
                let x = acts(nb * QK);
                let mut w = vec![0.0; nb * QK];
                dequantize_row(bt, &blocks, &mut w).unwrap();
                let want: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                let got = match bt {
                    BlockType::Q8_0 => dot_q8_0_f32(&blocks, &x),
                    BlockType::Q4_0 => dot_q4_0_f32(&blocks, &x),
                    _ => dot_q4_1_f32(&blocks, &x),
                };
                let scale: f64 = w
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * scale,
                    "{bt:?} nb{nb}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn q8_dots_match_dequantized_activations() {
        // The integer dots must equal the f32 dot of the dequantized weights with the dequantized
        // activations (q·d, plus the Q8_1 sum term), up to f32 rounding.
        for bt in [BlockType::Q8_0, BlockType::Q4_0, BlockType::Q4_1] {
            let nb = 9;
            let blocks = random_blocks(bt, nb, 7);
            let x = acts(nb * QK);
            let a = if bt == BlockType::Q4_1 {
                quantize_row_q8_1(&x).unwrap()
            } else {
                quantize_row_q8_0(&x).unwrap()
            };
            let xq: Vec<f32> = a
                .iter()
                .flat_map(|b| b.qs.iter().map(move |&q| q as f32 * b.d))
                .collect();
            let mut w = vec![0.0; nb * QK];
            dequantize_row(bt, &blocks, &mut w).unwrap();
            let (got, want) = match bt {
                BlockType::Q8_0 => (
                    dot_q8_0_q8_0(&blocks, &a),
                    w.iter()
                        .zip(&xq)
                        .map(|(p, q)| (*p * *q) as f64)
                        .sum::<f64>(),
                ),
                BlockType::Q4_0 => (
                    dot_q4_0_q8_0(&blocks, &a),
                    w.iter()
                        .zip(&xq)
                        .map(|(p, q)| (*p * *q) as f64)
                        .sum::<f64>(),
                ),
                _ => {
                    // Q4_1: Σ (q d + m) y_q d_y = d d_y Σ q y_q + m Σ y  with Σ y ≈ s (f16)
                    let mut want = 0.0f64;
                    for (i, blk) in a.iter().enumerate() {
                        let wb = &w[i * QK..(i + 1) * QK];
                        let m = f16_at(&blocks[i * Q4_1_BYTES..], 2) as f64;
                        let dot: f64 = wb
                            .iter()
                            .zip(&blk.qs)
                            .map(|(p, &q)| (*p as f64 - m) * q as f64 * blk.d as f64)
                            .sum();
                        want += dot + m * blk.s as f64;
                    }
                    (dot_q4_1_q8_1(&blocks, &a), want)
                }
            };
            let mag: f64 = w.iter().zip(&xq).map(|(p, q)| (*p * *q).abs() as f64).sum();
            assert!(
                (got as f64 - want).abs() <= 1e-4 * mag,
                "{bt:?}: {got} vs {want}"
            );
            // and close to the f32-activation dot (activation quantization error only)
            let exact: f64 = w.iter().zip(&x).map(|(p, q)| (*p * *q) as f64).sum();
            assert!(
                (got as f64 - exact).abs() <= 2e-2 * mag,
                "{bt:?}: {got} vs exact {exact}"
            );
        }
    }

    #[test]
    fn unpacked_dots_equal_block_dots() {
        for bt in [BlockType::Q8_0, BlockType::Q4_0, BlockType::Q4_1] {
            let blocks = random_blocks(bt, 6, 11);
            let x = acts(6 * QK);
            let a = if bt == BlockType::Q4_1 {
                quantize_row_q8_1(&x).unwrap()
            } else {
                quantize_row_q8_0(&x).unwrap()
            };
            let (mut q, mut d, mut m) = (Vec::new(), Vec::new(), Vec::new());
            unpack_row(bt, &blocks, &mut q, &mut d, &mut m);
            let got = dot_unpacked_q8(
                &q,
                &d,
                if bt == BlockType::Q4_1 {
                    Some(&m)
                } else {
                    None
                },
                &a,
            );
            let want = match bt {
                BlockType::Q8_0 => dot_q8_0_q8_0(&blocks, &a),
                BlockType::Q4_0 => dot_q4_0_q8_0(&blocks, &a),
                _ => dot_q4_1_q8_1(&blocks, &a),
            };
            assert_eq!(got, want, "{bt:?}");
        }
    }

    #[test]
    fn q8_1_block_hand_computed() {
        // amax = 127 → d = 1 (exact in f16), id = 1; 0.5 → 0 (half to even), 1.5 → 2, -2.5 → -2
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = 1.5;
        x[3] = -2.5;
        let b = quantize_row_q8_1(&x).unwrap();
        assert_eq!(b[0].d, 1.0);
        assert_eq!(&b[0].qs[..4], &[127, 0, 2, -2]);
        assert_eq!(b[0].s, 127.0);
        let z = quantize_row_q8_1(&[0.0; 32]).unwrap();
        assert_eq!(z[0].qs, [0; 32]);
        assert_eq!(z[0].d, 0.0);
        assert!(quantize_row_q8_0(&[0.0; 31]).is_err());
    }

    #[test]
    fn matches_format_crate_dequantize() {
        // Cross-check the block reader here against tern-format's decoder (written independently).
        for bt in [BlockType::Q8_0, BlockType::Q4_0, BlockType::Q4_1] {
            let blocks = random_blocks(bt, 4, 3);
            let mut mine = vec![0.0; 4 * QK];
            dequantize_row(bt, &blocks, &mut mine).unwrap();
            match tern_format::ggml::dequantize(bt, &blocks, 4 * QK) {
                Ok(theirs) => assert_eq!(mine, theirs, "{bt:?}"),
                Err(e) => eprintln!("tern_format::ggml::dequantize not available yet: {e}"),
            }
        }
    }
}
