//! The rANS core of NeuZip: frequency quantization, the decode table, one lane's encoder and the
//! scalar per-lane decoder that the WGSL kernel mirrors step for step.
//!
//! Parameters (methods-and-formats.md §3.5, after DietGPU): probabilities quantized to
//! `2^PROB_BITS = 2048`, state `x: u32` kept in `[RANS_L, 2^31) = [2^15, 2^31)`, renormalization by
//! whole 16-bit words. With `x ≥ 2^15` and `pdf ≥ 1` one word read always restores the range, and
//! `pdf·(x >> 11) + 2047 < 2^31` never overflows a `u32`.

use crate::error::{FormatError, Result};

/// Probability precision: frequencies sum to `2^PROB_BITS`.
pub const PROB_BITS: u32 = 11;
/// `2^PROB_BITS`: the sum of all frequencies and the number of decode-table entries.
pub const PROB_SCALE: u32 = 1 << PROB_BITS;
/// Entries of the decode table (`2048 × u32` = 8 KiB, half of WebGPU's guaranteed 16 KiB of
/// workgroup memory).
pub const LUT_SIZE: usize = PROB_SCALE as usize;
/// Lower bound of the normalized state interval `[RANS_L, 2^31)`. It is also every lane's
/// initial encoder state, so a correct decode of a whole lane ends exactly on `RANS_L`.
pub const RANS_L: u32 = 1 << 15;
/// Exclusive upper bound of the state.
pub const RANS_MAX: u32 = 1 << 31;

const CODEC: &str = "neuzip rANS";

/// One decode-table entry, DietGPU's packing: `(s − cdf) << 20 | pdf << 8 | sym` for slot `s`.
#[inline]
pub fn lut_entry(slot: u32, cdf: u32, pdf: u32, sym: u8) -> u32 {
    ((slot - cdf) << 20) | (pdf << 8) | u32::from(sym)
}

/// Build the 2048-entry decode table from `(symbol, pdf)` pairs in increasing symbol order
/// (cdf = running sum in that order). The pairs must be validated (pdfs sum to 2048).
pub fn build_lut(table: &[(u8, u32)]) -> Result<Box<[u32; LUT_SIZE]>> {
    let mut lut = Box::new([0u32; LUT_SIZE]);
    let mut cdf = 0u32;
    for &(sym, pdf) in table {
        let end = cdf
            .checked_add(pdf)
            .filter(|&e| e <= PROB_SCALE && pdf >= 1)
            .ok_or_else(|| FormatError::corrupt(CODEC, "frequency table does not sum to 2048"))?;
        for slot in cdf..end {
            // ok: slot < end ≤ PROB_SCALE = LUT_SIZE
            lut[slot as usize] = lut_entry(slot, cdf, pdf, sym);
        }
        cdf = end;
    }
    if cdf != PROB_SCALE && !table.is_empty() {
        return Err(FormatError::corrupt(
            CODEC,
            format!("frequency table sums to {cdf}, not 2048"),
        ));
    }
    Ok(lut)
}

/// Quantize symbol counts to frequencies summing to 2048, deterministically: every present symbol
/// gets `pdf ≥ 1`. Start from `max(1, round_half_up(c·2048/total))`, then move single units where
/// they cost the fewest bits (integer cross-multiplied comparisons of `c/(2·pdf ∓ 1)`, the first
/// order cost `c·ln(pdf/(pdf−1)) ≈ c/(pdf − ½)`; ties go to the lower symbol). Returns
/// `(symbol, pdf)` for the present symbols in increasing order; empty when all counts are zero.
pub fn quantize(counts: &[u64]) -> Vec<(u8, u32)> {
    let total: u128 = counts.iter().map(|&c| u128::from(c)).sum();
    let mut out: Vec<(u8, u32, u64)> = Vec::new();
    if total == 0 {
        return Vec::new();
    }
    for (s, &c) in counts.iter().enumerate().take(256) {
        if c > 0 {
            let scaled = (u128::from(c) * u128::from(PROB_SCALE) * 2 + total) / (2 * total);
            let pdf = scaled.clamp(1, u128::from(PROB_SCALE)) as u32; // ok: clamped to ≤ 2048
            out.push((s as u8, pdf, c)); // ok: s < 256 by take(256)
        }
    }
    let mut sum: u32 = out.iter().map(|e| e.1).sum();
    // Too much mass: take a unit from the symbol whose loss is smallest, c/(2p−1) minimal.
    while sum > PROB_SCALE {
        let mut best: Option<usize> = None;
        for (i, e) in out.iter().enumerate() {
            if e.1 <= 1 {
                continue;
            }
            let better = match best.and_then(|b| out.get(b)) {
                None => true,
                Some(b) => {
                    u128::from(e.2) * u128::from(2 * b.1 - 1)
                        < u128::from(b.2) * u128::from(2 * e.1 - 1)
                }
            };
            if better {
                best = Some(i);
            }
        }
        // Some pdf > 1 always exists here: at most 256 symbols, and 256 < 2048 < sum.
        match best.and_then(|b| out.get_mut(b)) {
            Some(e) => e.1 -= 1,
            None => break,
        }
        sum -= 1;
    }
    // Too little: give a unit to the symbol whose gain is largest, c/(2p+1) maximal.
    while sum < PROB_SCALE {
        let mut best: Option<usize> = None;
        for (i, e) in out.iter().enumerate() {
            let better = match best.and_then(|b| out.get(b)) {
                None => true,
                Some(b) => {
                    u128::from(e.2) * u128::from(2 * b.1 + 1)
                        > u128::from(b.2) * u128::from(2 * e.1 + 1)
                }
            };
            if better {
                best = Some(i);
            }
        }
        match best.and_then(|b| out.get_mut(b)) {
            Some(e) => e.1 += 1,
            None => break,
        }
        sum += 1;
    }
    out.into_iter().map(|(s, p, _)| (s, p)).collect()
}

/// Encode one lane: the symbols `syms` (in decode order) with `enc[sym] = (pdf, cdf)`. Runs the
/// symbols backwards from the initial state `RANS_L`, pushing 16-bit words; returns the final
/// state and appends the lane's words to `out` in the order the decoder reads them (forward).
/// At most one word is emitted per symbol.
pub fn encode_lane(
    syms: impl DoubleEndedIterator<Item = u8>,
    enc: &[(u32, u32); 256],
    out: &mut Vec<u16>,
) -> u32 {
    let first = out.len();
    let mut x = RANS_L;
    for s in syms.rev() {
        let (pdf, cdf) = enc[usize::from(s)];
        // Renormalize so the encode below lands back in [2^15, 2^31).
        if x >= pdf << (31 - PROB_BITS) {
            out.push(x as u16); // ok: low 16 bits, truncation intended
            x >>= 16;
        }
        x = ((x / pdf) << PROB_BITS) + (x % pdf) + cdf;
    }
    // ok: first ≤ out.len()
    out[first..].reverse();
    x
}

/// The scalar per-lane decoder, written exactly as the WGSL kernel runs it (one invocation = one
/// lane). `words` is the u16 word section (little-endian bytes); the lane reads words
/// `word_begin..word_end` forward. It decodes `count` symbols, calling `emit(t, sym)` for the
/// lane's `t`-th symbol (block position `lane + t·lanes`), and returns the state and the word
/// index where it stopped. Reading past `word_end` is a corrupt stream.
///
/// WGSL, per step:
/// ```text
/// let e = lut[x & 0x7ffu];
/// sym = e & 0xffu;
/// x = ((e >> 8u) & 0xfffu) * (x >> 11u) + (e >> 20u);
/// if (x < 0x8000u) { x = (x << 16u) | word(k); k = k + 1u; }
/// // word(k) = (words[k >> 1u] >> ((k & 1u) * 16u)) & 0xffffu
/// ```
pub fn decode_lane(
    lut: &[u32; LUT_SIZE],
    state: u32,
    words: &[u8],
    word_begin: usize,
    word_end: usize,
    count: usize,
    mut emit: impl FnMut(usize, u8),
) -> Result<(u32, usize)> {
    let mut x = state;
    let mut k = word_begin;
    for t in 0..count {
        let e = lut[(x & (PROB_SCALE - 1)) as usize];
        emit(t, e as u8); // ok: low byte is the symbol
        x = ((e >> 8) & 0xFFF) * (x >> PROB_BITS) + (e >> 20);
        if x < RANS_L {
            if k >= word_end {
                return Err(FormatError::corrupt(
                    CODEC,
                    "a lane reads past the end of its words",
                ));
            }
            let w = match words.get(2 * k..2 * k + 2) {
                Some(&[a, b]) => u16::from_le_bytes([a, b]),
                _ => {
                    return Err(FormatError::corrupt(
                        CODEC,
                        "word index outside the word section",
                    ))
                }
            };
            x = (x << 16) | u32::from(w);
            k += 1;
        }
    }
    Ok((x, k))
}
