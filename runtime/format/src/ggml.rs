//! ggml quantized blocks (`ggml/src/ggml-common.h`) and their dequantization, bit-identical to
//! llama.cpp's `dequantize_row_*` (`ggml/src/ggml-quants.c`): each f16 scale is widened to f32
//! first, then every element is computed with the same operations in the same order, so tern and
//! llama.cpp produce the same f32 bits (checked against the vendored llama.cpp build by
//! `tests/tests/ggml_golden.rs`).
//!
//! Blocks are byte-packed with no padding and may start at any byte (an 18-byte Q4_0 block is not
//! 2-byte aligned inside a row of odd block count), so f16 fields are `[u8; 2]` and every struct has
//! alignment 1: a `&[u8]` of the right length always casts to a block slice.
//!
//! Also here: the trits of ggml's ternary types (TQ1_0, TQ2_0) and of bitnet.cpp's I2_S, in element
//! order, with their scales.

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::error::{FormatError, Result};

/// Elements of the 256-element super-block used by TQ1_0 and TQ2_0 (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// Q8_0: 32 elements, one f16 scale `d`, 32 `i8` quants; `x = q·d`. 8.5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// Q4_0: 32 elements, f16 `d`, 16 bytes of nibbles: byte `j` holds element `j` in its low nibble
/// and element `j + 16` in its high nibble; `x = (q − 8)·d`. 4.5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// Q4_1: 32 elements, f16 `d` and f16 min `m`, nibbles as Q4_0; `x = q·d + m`. 5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// TQ1_0: 256 ternary elements, 5 trits per byte in base-3 fixed point, then f16 `d` (last).
/// 1.6875 bits per weight.
///
/// * `qs[0..32]`: byte `m` holds elements `m + 32·n`, n = 0..5 (elements 0..160);
/// * `qs[32..48]`: byte `32 + m` holds elements `160 + m + 16·n`, n = 0..5 (160..240);
/// * `qh[0..4]`: byte `j` holds elements `240 + j + 4·n`, n = 0..4 (240..256; its 5th trit is 0).
///
/// A byte stores `ceil(v·256/243)` with `v = Σ_n c_n·3^(4−n)` and `c = t + 1`; trit `n` decodes as
/// `q = byte·3^n mod 256`, `c = (q·3) >> 8`. Every byte value decodes to digits in 0..=2.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTq1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockTq1_0>() == 54);

/// TQ2_0: 256 ternary elements as 2-bit codes `c = t + 1`, then f16 `d` (last). Element
/// `e = 128·h + 32·l + m` (h = 0..2, l = 0..4, m = 0..32) is in byte `32·h + m` at bits `2l..2l+2`;
/// `x = (c − 1)·d`. 2.0625 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTq2_0 {
    pub qs: [u8; 64],
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockTq2_0>() == 66);

fn f16_to_f32(d: [u8; 2]) -> f32 {
    f16::from_le_bytes(d).to_f32()
}

impl BlockQ8_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockQ4_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockQ4_1 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
    pub fn m(&self) -> f16 {
        f16::from_le_bytes(self.m)
    }
}
impl BlockTq1_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockTq2_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}

/// The ggml block types tern decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockType {
    Q8_0,
    Q4_0,
    Q4_1,
    Tq1_0,
    Tq2_0,
}

impl BlockType {
    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            BlockType::Tq1_0 | BlockType::Tq2_0 => QK_K,
            _ => 32,
        }
    }
    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockType::Q8_0 => 34,
            BlockType::Q4_0 => 18,
            BlockType::Q4_1 => 20,
            BlockType::Tq1_0 => 54,
            BlockType::Tq2_0 => 66,
        }
    }
    /// ggml's type name.
    pub fn name(self) -> &'static str {
        match self {
            BlockType::Q8_0 => "q8_0",
            BlockType::Q4_0 => "q4_0",
            BlockType::Q4_1 => "q4_1",
            BlockType::Tq1_0 => "tq1_0",
            BlockType::Tq2_0 => "tq2_0",
        }
    }
    /// Bytes of `n` elements; errors unless `n` is a whole number of blocks.
    pub fn bytes_for(self, n: usize) -> Result<usize> {
        let be = self.block_elems();
        if n % be != 0 {
            return Err(FormatError::BadShape {
                what: self.name().into(),
                detail: format!("{n} elements is not a multiple of the block size {be}"),
            });
        }
        (n / be)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| FormatError::out_of_range(self.name(), "size overflows"))
    }
}

/// Checks that `bytes` holds exactly the blocks of `n` elements.
fn check_len(bt: BlockType, bytes: &[u8], n: usize) -> Result<()> {
    let need = bt.bytes_for(n)?;
    if bytes.len() != need {
        return Err(FormatError::malformed(
            bt.name(),
            format!("{n} elements need {need} bytes, found {}", bytes.len()),
        ));
    }
    Ok(())
}

/// Dequantizes `n` elements (a whole number of blocks) into a new vector.
pub fn dequantize(bt: BlockType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    check_len(bt, bytes, n)?;
    let mut out = vec![0f32; n];
    dequantize_into(bt, bytes, &mut out)?;
    Ok(out)
}

/// Dequantizes `bytes` into `out`; `out.len()` is the element count and must be a whole number of
/// blocks matching `bytes.len()`.
pub fn dequantize_into(bt: BlockType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_len(bt, bytes, out.len())?;
    let be = bt.block_elems();
    // The casts cannot fail: every block struct has alignment 1 and check_len made the length a
    // whole number of blocks; map_err keeps the no-panic rule without an unwrap.
    let cast_err = |e: bytemuck::PodCastError| FormatError::malformed(bt.name(), format!("{e:?}"));
    match bt {
        BlockType::Q8_0 => {
            let blocks: &[BlockQ8_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                for (q, y) in b.qs.iter().zip(y) {
                    *y = *q as f32 * d;
                }
            }
        }
        BlockType::Q4_0 => {
            let blocks: &[BlockQ4_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                let (lo, hi) = y.split_at_mut(16);
                for ((q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
                    let x0 = (q & 0x0F) as i32 - 8;
                    let x1 = (q >> 4) as i32 - 8;
                    *y0 = x0 as f32 * d;
                    *y1 = x1 as f32 * d;
                }
            }
        }
        BlockType::Q4_1 => {
            let blocks: &[BlockQ4_1] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                let m = f16_to_f32(b.m);
                let (lo, hi) = y.split_at_mut(16);
                for ((q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
                    // llama.cpp: x0*d + m; q·d is exact in f32 (≤ 4 + 11 significant bits), so only
                    // the addition rounds, with or without a fused multiply-add
                    *y0 = (q & 0x0F) as f32 * d + m;
                    *y1 = (q >> 4) as f32 * d + m;
                }
            }
        }
        BlockType::Tq1_0 => {
            let blocks: &[BlockTq1_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            let mut codes = [0u8; QK_K];
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                tq1_0_block_codes(b, &mut codes);
                for (c, y) in codes.iter().zip(y) {
                    *y = (*c as i16 - 1) as f32 * d;
                }
            }
        }
        BlockType::Tq2_0 => {
            let blocks: &[BlockTq2_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            let mut codes = [0u8; QK_K];
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                tq2_0_block_codes(b, &mut codes);
                for (c, y) in codes.iter().zip(y) {
                    // code 3 is never written by ggml; llama.cpp dequantizes it as 2·d, and so do we
                    *y = (*c as i8 - 1) as f32 * d;
                }
            }
        }
    }
    Ok(())
}

/// Dequantizes row `row` of a row-major tensor of `cols` columns held in `bytes` (all rows) into
/// `out` (`cols` values): an embedding-table lookup.
pub fn dequantize_row(
    bt: BlockType,
    bytes: &[u8],
    cols: usize,
    row: usize,
    out: &mut [f32],
) -> Result<()> {
    if out.len() != cols {
        return Err(FormatError::InvalidArgument(format!(
            "output has {} values, the row has {cols}",
            out.len()
        )));
    }
    let row_bytes = bt.bytes_for(cols)?;
    let start = row.checked_mul(row_bytes);
    let slice = start
        .and_then(|s| bytes.get(s..s.checked_add(row_bytes)?))
        .ok_or_else(|| {
            FormatError::out_of_range(
                format!("{} row {row}", bt.name()),
                format!(
                    "{} bytes hold {} rows",
                    bytes.len(),
                    bytes.len() / row_bytes.max(1)
                ),
            )
        })?;
    dequantize_into(bt, slice, out)
}

/// The 256 codes (`t + 1`, in element order) of one TQ1_0 block, decoded as llama.cpp does.
fn tq1_0_block_codes(b: &BlockTq1_0, codes: &mut [u8; QK_K]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let digit = |byte: u8, n: usize| -> u8 {
        let q = byte.wrapping_mul(POW3[n % 5]);
        ((q as u16 * 3) >> 8) as u8
    };
    let (qs0, qs1) = b.qs.split_at(32);
    let mut k = 0;
    let mut put = |c: u8| {
        if let Some(slot) = codes.get_mut(k) {
            *slot = c;
        }
        k += 1;
    };
    for n in 0..5 {
        for &byte in qs0 {
            put(digit(byte, n));
        }
    }
    for n in 0..5 {
        for &byte in qs1 {
            put(digit(byte, n));
        }
    }
    for n in 0..4 {
        for &byte in &b.qh {
            put(digit(byte, n));
        }
    }
}

/// The 256 codes (`t + 1`, 0..=3, in element order) of one TQ2_0 block.
fn tq2_0_block_codes(b: &BlockTq2_0, codes: &mut [u8; QK_K]) {
    for (h, qs) in b.qs.chunks_exact(32).enumerate() {
        for l in 0..4 {
            for (m, &byte) in qs.iter().enumerate() {
                if let Some(slot) = codes.get_mut(128 * h + 32 * l + m) {
                    *slot = (byte >> (2 * l)) & 3;
                }
            }
        }
    }
}

/// The trits (in {-1, 0, 1}, element order) and per-256-block scales `d` of a TQ1_0 tensor of `n`
/// elements.
pub fn tq1_0_to_trits(bytes: &[u8], n: usize) -> Result<(Vec<i8>, Vec<f16>)> {
    check_len(BlockType::Tq1_0, bytes, n)?;
    let blocks: &[BlockTq1_0] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| FormatError::malformed("tq1_0", format!("{e:?}")))?;
    let mut trits = Vec::with_capacity(n);
    let mut scales = Vec::with_capacity(blocks.len());
    let mut codes = [0u8; QK_K];
    for b in blocks {
        tq1_0_block_codes(b, &mut codes);
        trits.extend(codes.iter().map(|&c| c as i8 - 1));
        scales.push(b.d());
    }
    Ok((trits, scales))
}

/// The trits (in {-1, 0, 1}, element order) and per-256-block scales `d` of a TQ2_0 tensor of `n`
/// elements. Code 3 (never written by ggml's quantizer) is a [`FormatError::Corrupt`] error.
pub fn tq2_0_to_trits(bytes: &[u8], n: usize) -> Result<(Vec<i8>, Vec<f16>)> {
    check_len(BlockType::Tq2_0, bytes, n)?;
    let blocks: &[BlockTq2_0] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| FormatError::malformed("tq2_0", format!("{e:?}")))?;
    let mut trits = Vec::with_capacity(n);
    let mut scales = Vec::with_capacity(blocks.len());
    let mut codes = [0u8; QK_K];
    for (i, b) in blocks.iter().enumerate() {
        tq2_0_block_codes(b, &mut codes);
        if let Some(e) = codes.iter().position(|&c| c == 3) {
            return Err(FormatError::corrupt(
                "tq2_0",
                format!("code 3 at element {}", i * QK_K + e),
            ));
        }
        trits.extend(codes.iter().map(|&c| c as i8 - 1));
        scales.push(b.d());
    }
    Ok((trits, scales))
}

/// Elements per I2_S block in bitnet.cpp's x86 layout (`QK_I2_S` with `ACT_PARALLEL`).
pub const I2S_BLOCK: usize = 128;

/// Bytes of an I2_S tensor of `n` elements: `n/4` code bytes, then a 32-byte tail whose first four
/// bytes are the f32 scale (bitnet.cpp's `ggml_nbytes` special case).
pub fn i2s_bytes(n: usize) -> usize {
    n / 4 + 32
}

/// The trits (in {-1, 0, 1}, element order) and the one f32 scale of a bitnet.cpp I2_S tensor of `n`
/// elements, x86 layout (`microsoft/BitNet: src/ggml-bitnet-mad.cpp`, `quantize_i2_s`): each 128
/// consecutive elements fill 32 bytes, element `j` of a block in byte `j % 32` at bit shift
/// `6 − 2·(j / 32)`; codes 0, 1, 2 are −1, 0, +1. Code 3 is never written by the quantizer, so it is
/// a [`FormatError::Corrupt`] error here rather than bitnet.cpp's silent 0: a file holding one was
/// not made by bitnet.cpp's x86 writer (or is damaged). `n` must be a multiple of 128; files made by
/// the ARM build (64-element blocks) cannot be told apart from the bytes and decode wrongly.
pub fn i2s_to_trits(bytes: &[u8], n: usize) -> Result<(Vec<i8>, f32)> {
    if n % I2S_BLOCK != 0 {
        return Err(FormatError::BadShape {
            what: "i2_s".into(),
            detail: format!("{n} elements is not a multiple of the {I2S_BLOCK}-element block"),
        });
    }
    if bytes.len() != i2s_bytes(n) {
        return Err(FormatError::malformed(
            "i2_s",
            format!(
                "{n} elements need {} bytes, found {}",
                i2s_bytes(n),
                bytes.len()
            ),
        ));
    }
    let (codes, tail) = bytes.split_at(n / 4);
    let scale = match tail.first_chunk::<4>() {
        Some(s) => f32::from_le_bytes(*s),
        None => return Err(FormatError::malformed("i2_s", "missing scale")),
    };
    let mut trits = vec![0i8; n];
    for (bi, (block, out)) in codes
        .chunks_exact(32)
        .zip(trits.chunks_exact_mut(I2S_BLOCK))
        .enumerate()
    {
        for (j, t) in out.iter_mut().enumerate() {
            let byte = block.get(j % 32).copied().unwrap_or(0);
            let c = (byte >> (6 - 2 * (j / 32))) & 3;
            if c == 3 {
                return Err(FormatError::corrupt(
                    "i2_s",
                    format!("code 3 at element {}", bi * I2S_BLOCK + j),
                ));
            }
            *t = c as i8 - 1;
        }
    }
    Ok((trits, scale))
}

/// Dequantizes an I2_S tensor: `trit as f32 · scale` (bitnet.cpp's dequantization).
pub fn i2s_dequantize(bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let (trits, scale) = i2s_to_trits(bytes, n)?;
    Ok(trits.into_iter().map(|t| t as f32 * scale).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tq1_0_all_bytes_decode_to_digits() {
        // Every byte value decodes to 5 digits in 0..=2; the encoding of a digit tuple round-trips.
        for v in 0..243u32 {
            let byte = ((v * 256).div_ceil(243)) as u8;
            let mut rebuilt = 0u32;
            for n in 0..5 {
                let q = byte.wrapping_mul([1u8, 3, 9, 27, 81][n]);
                let c = ((q as u16 * 3) >> 8) as u32;
                assert!(c <= 2);
                rebuilt = rebuilt * 3 + c;
            }
            assert_eq!(rebuilt, v);
        }
    }

    #[test]
    fn lengths_are_checked() {
        assert!(dequantize(BlockType::Q8_0, &[0; 33], 32).is_err());
        assert!(dequantize(BlockType::Q8_0, &[0; 34], 31).is_err());
        assert!(dequantize(BlockType::Q8_0, &[0; 34], 32).is_ok());
        assert!(i2s_to_trits(&[0; 63], 128).is_err());
        assert!(i2s_to_trits(&[0x55; 64], 128).is_ok());
        assert!(i2s_to_trits(&[0xff; 64], 128).is_err());
        let mut out = [0f32; 32];
        assert!(dequantize_row(BlockType::Q8_0, &[0; 68], 32, 2, &mut out).is_err());
        assert!(dequantize_row(BlockType::Q8_0, &[0; 68], 32, 1, &mut out).is_ok());
    }
}

// ------------------------------------------------------------------------------------------------
// Q6_K: kept as it is when imported (llama-quantize gives ternary models q6_K token embeddings by
// default), dequantized exactly as llama.cpp's `dequantize_row_q6_K`.

/// Elements per Q6_K super-block.
pub const Q6_K_ELEMS: usize = 256;
/// Bytes per Q6_K super-block: `ql[128]` (low 4 bits), `qh[64]` (high 2 bits), `scales[16]` (i8),
/// `d` (f16, last). 6.5625 bits per weight.
pub const Q6_K_BYTES: usize = 210;

/// ggml's `block_q6_K` (byte-packed, alignment 1).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [i8; 16],
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == Q6_K_BYTES);

/// Dequantize `out.len()` elements of Q6_K blocks (a whole number of 256-element blocks).
pub fn dequantize_q6_k_into(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if out.len() % Q6_K_ELEMS != 0 || bytes.len() != out.len() / Q6_K_ELEMS * Q6_K_BYTES {
        return Err(FormatError::malformed(
            "q6_K",
            format!(
                "{} bytes for {} elements (256 elements per 210-byte block)",
                bytes.len(),
                out.len()
            ),
        ));
    }
    let blocks: &[BlockQ6K] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| FormatError::malformed("q6_K", format!("{e:?}")))?;
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(Q6_K_ELEMS)) {
        let d = f16_to_f32(b.d);
        for half in 0..2 {
            let ql = &b.ql[half * 64..half * 64 + 64];
            let qh = &b.qh[half * 32..half * 32 + 32];
            let sc = &b.scales[half * 8..half * 8 + 8];
            let y = &mut y[half * 128..half * 128 + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                // Same evaluation order as C: (d * sc) * q, in f32.
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
    Ok(())
}
