//! The KV-cache formats' quantizers and dequantizers, exactly as `tern_format::kv` specifies
//! them: one plain function per unit (a key group, a value row, an absmax row). The reference
//! `KvCache` stores through them and the GPU parity tests compare the GPU kernels with them.
//!
//! Conventions shared by every function here (the spec's): `round` is half away from zero
//! ([`round_away`]); scales and zero points are f16, rounded to nearest even from f32 and
//! saturated to ±65504 ([`f16_sat`]: a value whose scale would overflow f16 gets the largest
//! finite scale, never ±inf); codes are packed LSB-first into u32 words ([`put_code`],
//! [`get_code`]), `32 / bits` per word for 8/4/2 bits and 10 per word for 3 bits; a position's
//! codes start at a word boundary ([`words_per_row`]). q3r packs its rows densely
//! ([`row_words`], [`pack_put`], [`pack_get`]); the rotated formats rotate each head first
//! ([`rotate_heads`], [`unrotate_heads`]).

use half::f16;
use tern_format::kv::KvQuant;

use crate::error::{check_len, ReferenceError, Result};

/// f16 of `x`, round to nearest even, saturated to ±65504 (NaN stays NaN).
pub fn f16_sat(x: f32) -> f16 {
    f16::from_f32(x.clamp(-65504.0, 65504.0))
}

/// `x` rounded through f16 (the f16 format's store).
pub fn f16_round(x: f32) -> f32 {
    f16_sat(x).to_f32()
}

/// Half away from zero, spelled as the spec does: `sign(y)·floor(|y| + 0.5)`.
pub fn round_away(y: f32) -> f32 {
    let r = (y.abs() + 0.5).floor();
    if y < 0.0 {
        -r
    } else {
        r
    }
}

/// Codes per u32 word for `bits` (10 for 3 bits).
pub fn codes_per_word(bits: u32) -> usize {
    match bits {
        3 => 10,
        b => 32 / b.clamp(1, 32) as usize,
    }
}

/// u32 words one position's `values` codes take.
pub fn words_per_row(bits: u32, values: usize) -> usize {
    values.div_ceil(codes_per_word(bits))
}

/// Write code `i` (`bits` wide, masked) into LSB-first packed `words`; out of range does nothing.
pub fn put_code(words: &mut [u32], bits: u32, i: usize, code: u32) {
    let per = codes_per_word(bits);
    let mask = (1u32 << bits) - 1;
    let shift = bits * (i % per) as u32;
    if let Some(w) = words.get_mut(i / per) {
        *w = (*w & !(mask << shift)) | ((code & mask) << shift);
    }
}

/// Read code `i` from LSB-first packed `words` (0 when out of range).
pub fn get_code(words: &[u32], bits: u32, i: usize) -> u32 {
    let per = codes_per_word(bits);
    let mask = (1u32 << bits) - 1;
    let shift = bits * (i % per) as u32;
    words.get(i / per).map_or(0, |w| (w >> shift) & mask)
}

/// u32 words of one position's `values` codes in format `q` (q3r: `⌈3·values / 32⌉`, dense).
pub fn row_words(q: KvQuant, values: usize) -> usize {
    if q.dense() {
        (values * 3).div_ceil(32)
    } else {
        words_per_row(q.bits(), values)
    }
}

/// Write code `i` of a row in format `q` (q3r: bits `3i..3i+2` of the row's bit string, which
/// may cross a word boundary); out of range does nothing.
pub fn pack_put(q: KvQuant, words: &mut [u32], i: usize, code: u32) {
    if !q.dense() {
        return put_code(words, q.bits(), i, code);
    }
    let (bit, code) = (3 * i, code & 7);
    let (w, sh) = (bit / 32, (bit % 32) as u32);
    if let Some(x) = words.get_mut(w) {
        *x = (*x & !(7u32 << sh)) | (code << sh);
    }
    if sh > 29 {
        let hi = 32 - sh; // bits already written
        if let Some(x) = words.get_mut(w + 1) {
            *x = (*x & !(7u32 >> hi)) | (code >> hi);
        }
    }
}

/// Read code `i` of a row in format `q` (0 when out of range).
pub fn pack_get(q: KvQuant, words: &[u32], i: usize) -> u32 {
    if !q.dense() {
        return get_code(words, q.bits(), i);
    }
    let bit = 3 * i;
    let (w, sh) = (bit / 32, (bit % 32) as u32);
    let lo = words.get(w).map_or(0, |x| x >> sh);
    let hi = if sh > 29 {
        words.get(w + 1).map_or(0, |x| x << (32 - sh))
    } else {
        0
    };
    (lo | hi) & 7
}

/// The rotated formats' signs `σ_0 .. σ_{d−1}` as ±1.0 (`tern_format::kv::rot_sign` with
/// `ROT_SEED`).
pub fn rot_signs(head_dim: usize) -> Vec<f32> {
    (0..head_dim as u32)
        .map(|i| {
            if tern_format::kv::rot_sign(tern_format::kv::ROT_SEED, i) {
                -1.0
            } else {
                1.0
            }
        })
        .collect()
}

/// The unnormalized Walsh–Hadamard butterflies of one head, `h = 1, 2, 4, …` (the spec's order).
fn fwht(x: &mut [f32]) {
    let d = x.len();
    let mut h = 1;
    while h < d {
        for j in 0..d {
            if j & h == 0 {
                if let (Some(&a), Some(&b)) = (x.get(j), x.get(j + h)) {
                    x[j] = a + b; // ok: j < d
                    x[j + h] = a - b; // ok: j + h < d (checked by the get)
                }
            }
        }
        h *= 2;
    }
}

fn check_rot(what: &'static str, len: usize, head_dim: usize, signs: &[f32]) -> Result<()> {
    if !head_dim.is_power_of_two() || len % head_dim != 0 {
        return Err(ReferenceError::shape(
            what,
            format!("{len} values are not whole heads of a power-of-two head_dim {head_dim}"),
        ));
    }
    check_len(what, "signs", signs.len(), head_dim)
}

/// `x ← H·x` for each head of `head_dim` values (`H = c·W·diag(σ)`, the spec's operation order:
/// signs, butterflies, scale).
pub fn rotate_heads(x: &mut [f32], head_dim: usize, signs: &[f32]) -> Result<()> {
    check_rot("KV rotation", x.len(), head_dim, signs)?;
    let c = tern_format::kv::rot_scale(head_dim as u32);
    for h in x.chunks_exact_mut(head_dim) {
        for (v, s) in h.iter_mut().zip(signs) {
            *v *= s;
        }
        fwht(h);
        for v in h.iter_mut() {
            *v *= c;
        }
    }
    Ok(())
}

/// `x ← Hᵀ·x` for each head (butterflies, scale, signs).
pub fn unrotate_heads(x: &mut [f32], head_dim: usize, signs: &[f32]) -> Result<()> {
    check_rot("KV inverse rotation", x.len(), head_dim, signs)?;
    let c = tern_format::kv::rot_scale(head_dim as u32);
    for h in x.chunks_exact_mut(head_dim) {
        fwht(h);
        for (v, s) in h.iter_mut().zip(signs) {
            *v = *v * c * s;
        }
    }
    Ok(())
}

/// The bits and the signedness of an absmax format: q8 stores `q` as an i8 byte (two's
/// complement), a4/a3 store `q + qmax` unsigned.
fn absmax_params(q: KvQuant) -> Result<(u32, i32, bool)> {
    match q {
        KvQuant::Q8 => Ok((8, 127, true)),
        KvQuant::Absmax4 => Ok((4, 7, false)),
        KvQuant::Absmax3 => Ok((3, 3, false)),
        o => Err(ReferenceError::shape(
            "absmax quantizer",
            format!("{} is not an absmax format (q8, a4, a3)", o.name()),
        )),
    }
}

fn check_heads(
    what: &'static str,
    x: usize,
    head_dim: usize,
    words: usize,
    bits: u32,
) -> Result<usize> {
    if head_dim == 0 || x % head_dim != 0 {
        return Err(ReferenceError::shape(
            what,
            format!("row of {x} values is not whole heads of {head_dim}"),
        ));
    }
    check_len(what, "codes", words, words_per_row(bits, x))?;
    Ok(x / head_dim)
}

/// Quantize one position's row `x` (`n_head_kv · head_dim` values) in absmax format `q` (q8,
/// a4, a3; pass `Absmax4` for the a3 cache's position 0): per head `s = f16(max|x| / qmax)`,
/// `q = clamp(round(x / s), −qmax, qmax)` (`s = 0` → 0). `codes`: `words_per_row(bits, len)`
/// words; `scales`: one per head.
pub fn absmax_quantize_row(
    q: KvQuant,
    x: &[f32],
    head_dim: usize,
    codes: &mut [u32],
    scales: &mut [f16],
) -> Result<()> {
    let (bits, qmax, signed) = absmax_params(q)?;
    let heads = check_heads("absmax quantizer", x.len(), head_dim, codes.len(), bits)?;
    check_len("absmax quantizer", "scales", scales.len(), heads)?;
    codes.fill(0);
    for (h, (xh, sc)) in x.chunks_exact(head_dim).zip(scales.iter_mut()).enumerate() {
        let amax = xh.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s16 = f16_sat(amax / qmax as f32);
        *sc = s16;
        let s = s16.to_f32();
        for (j, &v) in xh.iter().enumerate() {
            let qi = if s == 0.0 {
                0
            } else {
                (round_away(v / s) as i32).clamp(-qmax, qmax)
            };
            let code = if signed {
                (qi as u32) & 0xFF
            } else {
                (qi + qmax) as u32
            };
            put_code(codes, bits, h * head_dim + j, code);
        }
    }
    Ok(())
}

/// Dequantize one absmax row: `x̂ = q·s` (q8), `x̂ = (code − qmax)·s` (a4/a3).
pub fn absmax_dequantize_row(
    q: KvQuant,
    codes: &[u32],
    scales: &[f16],
    head_dim: usize,
    out: &mut [f32],
) -> Result<()> {
    let (bits, qmax, signed) = absmax_params(q)?;
    let heads = check_heads("absmax dequantizer", out.len(), head_dim, codes.len(), bits)?;
    check_len("absmax dequantizer", "scales", scales.len(), heads)?;
    for (h, (oh, sc)) in out.chunks_exact_mut(head_dim).zip(scales).enumerate() {
        let s = sc.to_f32();
        for (j, o) in oh.iter_mut().enumerate() {
            let c = get_code(codes, bits, h * head_dim + j);
            let qi = if signed {
                i32::from(c as u8 as i8)
            } else {
                c as i32 - qmax
            };
            *o = qi as f32 * s;
        }
    }
    Ok(())
}

/// The absmax format position `pos` is stored in: a3 keeps position 0 (the BOS token when the
/// model adds one) at 4 bits (BitNet a4.8's rule), in its own buffer; every other case is `q`.
pub fn absmax_format_at(q: KvQuant, pos: usize) -> KvQuant {
    if q == KvQuant::Absmax3 && pos == 0 {
        KvQuant::Absmax4
    } else {
        q
    }
}

fn kivi_bits(q: KvQuant) -> Result<u32> {
    if q.is_kivi() || q.is_rotated() {
        Ok(q.bits())
    } else {
        Err(ReferenceError::shape(
            "KIVI quantizer",
            format!(
                "{} is not a KIVI format (q4, q3, q2, q4r, q3r, q2r)",
                q.name()
            ),
        ))
    }
}

/// KIVI's `(s, m)` of a group with minimum `lo` and maximum `hi`: both f16 (saturated).
pub fn kivi_params(lo: f32, hi: f32, bits: u32) -> (f16, f16) {
    let levels = ((1u32 << bits) - 1) as f32;
    (f16_sat((hi - lo) / levels), f16_sat(lo))
}

/// KIVI's code of `x` with the stored `s`, `m`: `clamp(round((x − m)/s), 0, 2^B − 1)`, 0 when
/// `s = 0`.
pub fn kivi_code(x: f32, s: f16, m: f16, bits: u32) -> u32 {
    let s = s.to_f32();
    if s == 0.0 {
        return 0;
    }
    let top = ((1u32 << bits) - 1) as f32;
    round_away((x - m.to_f32()) / s).clamp(0.0, top) as u32
}

/// `x̂ = q·s + m`.
pub fn kivi_value(code: u32, s: f16, m: f16) -> f32 {
    code as f32 * s.to_f32() + m.to_f32()
}

/// Quantize one position's value row per token: groups of `group` consecutive channels (the
/// last may be shorter), one `(s, m)` each. `scales`/`mins`: `⌈len / group⌉` entries.
pub fn kivi_quantize_values(
    q: KvQuant,
    group: usize,
    x: &[f32],
    codes: &mut [u32],
    scales: &mut [f16],
    mins: &mut [f16],
) -> Result<()> {
    let bits = kivi_bits(q)?;
    let n_groups = check_groups("KIVI value quantizer", x.len(), group)?;
    check_len(
        "KIVI value quantizer",
        "codes",
        codes.len(),
        row_words(q, x.len()),
    )?;
    check_len("KIVI value quantizer", "scales", scales.len(), n_groups)?;
    check_len("KIVI value quantizer", "mins", mins.len(), n_groups)?;
    codes.fill(0);
    for (gi, ((xg, s), m)) in x
        .chunks(group)
        .zip(scales.iter_mut())
        .zip(mins.iter_mut())
        .enumerate()
    {
        let (lo, hi) = min_max(xg);
        (*s, *m) = kivi_params(lo, hi, bits);
        for (j, &v) in xg.iter().enumerate() {
            pack_put(q, codes, gi * group + j, kivi_code(v, *s, *m, bits));
        }
    }
    Ok(())
}

/// Dequantize one position's value row.
pub fn kivi_dequantize_values(
    q: KvQuant,
    group: usize,
    codes: &[u32],
    scales: &[f16],
    mins: &[f16],
    out: &mut [f32],
) -> Result<()> {
    kivi_bits(q)?;
    let n_groups = check_groups("KIVI value dequantizer", out.len(), group)?;
    check_len(
        "KIVI value dequantizer",
        "codes",
        codes.len(),
        row_words(q, out.len()),
    )?;
    check_len("KIVI value dequantizer", "scales", scales.len(), n_groups)?;
    check_len("KIVI value dequantizer", "mins", mins.len(), n_groups)?;
    for (i, o) in out.iter_mut().enumerate() {
        let (s, m) = (scales.get(i / group), mins.get(i / group));
        *o = kivi_value(
            pack_get(q, codes, i),
            *s.unwrap_or(&f16::ZERO),
            *m.unwrap_or(&f16::ZERO),
        );
    }
    Ok(())
}

/// Quantize a group of key rows per channel: `x` holds `g` consecutive positions of `row`
/// values; each channel gets one `(s, m)` over the group (`scales`/`mins`: `row` entries);
/// `codes` holds the `g` positions' codes, `words_per_row(bits, row)` words each.
pub fn kivi_quantize_keys(
    q: KvQuant,
    row: usize,
    x: &[f32],
    codes: &mut [u32],
    scales: &mut [f16],
    mins: &mut [f16],
) -> Result<()> {
    let bits = kivi_bits(q)?;
    if row == 0 || x.len() % row != 0 {
        return Err(ReferenceError::shape(
            "KIVI key quantizer",
            format!("{} values are not whole rows of {row}", x.len()),
        ));
    }
    let g = x.len() / row;
    let wpp = row_words(q, row);
    check_len("KIVI key quantizer", "codes", codes.len(), g * wpp)?;
    check_len("KIVI key quantizer", "scales", scales.len(), row)?;
    check_len("KIVI key quantizer", "mins", mins.len(), row)?;
    codes.fill(0);
    for (c, (s, m)) in scales.iter_mut().zip(mins.iter_mut()).enumerate() {
        let mut lo = f32::INFINITY;
        let mut hi = f32::NEG_INFINITY;
        for p in 0..g {
            let v = x.get(p * row + c).copied().unwrap_or(0.0);
            lo = lo.min(v);
            hi = hi.max(v);
        }
        (*s, *m) = kivi_params(lo, hi, bits);
        for p in 0..g {
            let v = x.get(p * row + c).copied().unwrap_or(0.0);
            if let Some(w) = codes.get_mut(p * wpp..(p + 1) * wpp) {
                pack_put(q, w, c, kivi_code(v, *s, *m, bits));
            }
        }
    }
    Ok(())
}

/// Dequantize one position's key row from its codes and its group's per-channel `(s, m)`.
pub fn kivi_dequantize_key(
    q: KvQuant,
    codes: &[u32],
    scales: &[f16],
    mins: &[f16],
    out: &mut [f32],
) -> Result<()> {
    kivi_bits(q)?;
    check_len(
        "KIVI key dequantizer",
        "codes",
        codes.len(),
        row_words(q, out.len()),
    )?;
    check_len("KIVI key dequantizer", "scales", scales.len(), out.len())?;
    check_len("KIVI key dequantizer", "mins", mins.len(), out.len())?;
    for (i, ((o, s), m)) in out.iter_mut().zip(scales).zip(mins).enumerate() {
        *o = kivi_value(pack_get(q, codes, i), *s, *m);
    }
    Ok(())
}

fn check_groups(what: &'static str, len: usize, group: usize) -> Result<usize> {
    if group == 0 {
        return Err(ReferenceError::shape(what, "group size 0"));
    }
    Ok(len.div_ceil(group))
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

#[cfg(test)]
#[path = "kv_codec_tests.rs"]
mod tests;
