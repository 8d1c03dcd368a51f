//! Per-token activation quantizers of BitNet b1.58 and a4.8: [`quantize_act_int8`],
//! [`quantize_act_int4`], [`topk50_int8`], dispatched by [`quantize_act`] on [`ActQuant`].
//!
//! Convention: every quantizer returns the multiplier `s` with `x_q = clamp(round(x · s))`, so the
//! activation is recovered as `x ≈ x_q / s` and a BitLinear output is
//! `y_r = (Σ_g scale_{r,g} · Σ_{c∈g} t_{r,c} · x_q[c]) / s` (integer inner sums, f32 afterwards).
//! `round` is round-half-to-even (`torch.round`, and bitnet.cpp's 1.5·2²³ trick in the default FP
//! rounding mode).
//!
//! ## Formulas and their sources
//! * **INT8 absmax** (b1.58; verified against HF `transformers/integrations/bitnet.py` `ActQuant`
//!   and bitnet.cpp, methods-and-formats §1.1): `s = 127 / max(max_j |x_j|, 1e-5)`,
//!   `x_q = clamp(round(x·s), -128, 127)`.
//! * **INT4 absmean** (a4.8, arXiv 2411.04965 §2): `β = mean_j |x_j|`,
//!   `s = √7 / max(β, 1e-5)`, `x_q = clamp(round(x·s), -8, 7)`. UNVERIFIED against the paper body:
//!   no stored copy of its method section was reachable, only captions; the BitNet v2 paper (same
//!   authors) describes the same absmean-with-√7 INT4 quantizer. The floor on β mirrors the INT8
//!   quantizer's `clamp(min=1e-5)` (the paper writes `β + ε`; the two differ only for rows whose mean
//!   magnitude is below 1e-5, which quantize to all zeros under both). If the paper says otherwise,
//!   only this function and its tests change.
//! * **TopK-50% then INT8** (a4.8 o_proj input, Table 4 "INT8 + TopK 50%"): keep the
//!   `k = n / 2` (rounded down) entries of largest `|x|`, zero the rest, then INT8 absmax as above.
//!   The absmax is that of the kept entries, which equals the row's absmax. **Tie rule**: entries are
//!   ranked by `|x|` descending, and among equal magnitudes the LOWER index ranks first — fully
//!   deterministic, unlike `torch.topk`, whose tie order is unspecified. NaN magnitudes rank last.

use std::cmp::Ordering;

use tern_format::ActQuant;

use crate::error::{check_len, Result};

/// Floor of the absmax / absmean statistic (HF `clamp(min=1e-5)`).
pub const ACT_EPS: f32 = 1e-5;

fn round_clamp(x: f32, lo: f32, hi: f32) -> i8 {
    // ok: the value is clamped to [-128, 127] before the cast (NaN casts to 0)
    x.round_ties_even().clamp(lo, hi) as i8
}

/// INT8 absmax quantization of one token. Writes `q` and returns the multiplier `s` (`x ≈ q / s`).
pub fn quantize_act_int8(x: &[f32], q: &mut [i8]) -> Result<f32> {
    check_len("quantize_act_int8", "q", q.len(), x.len())?;
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let s = 127.0 / amax.max(ACT_EPS);
    for (o, &v) in q.iter_mut().zip(x) {
        *o = round_clamp(v * s, -128.0, 127.0);
    }
    Ok(s)
}

/// INT4 absmean quantization of one token (values in `-8..=7`, stored one per `i8`). Returns `s`.
pub fn quantize_act_int4(x: &[f32], q: &mut [i8]) -> Result<f32> {
    check_len("quantize_act_int4", "q", q.len(), x.len())?;
    if x.is_empty() {
        return Ok(1.0);
    }
    let beta = x.iter().map(|v| v.abs()).sum::<f32>() / x.len() as f32;
    let s = 7.0f32.sqrt() / beta.max(ACT_EPS);
    for (o, &v) in q.iter_mut().zip(x) {
        *o = round_clamp(v * s, -8.0, 7.0);
    }
    Ok(s)
}

/// Indices of the `k` largest-magnitude entries under the tie rule of the module doc
/// (`|x|` descending, then index ascending).
pub fn topk_indices(x: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    let mag = |i: usize| x.get(i).map_or(f32::NAN, |v| v.abs());
    idx.sort_by(|&a, &b| {
        let (ma, mb) = (mag(a), mag(b));
        match (ma.is_nan(), mb.is_nan()) {
            (true, true) => a.cmp(&b),
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => mb
                .partial_cmp(&ma)
                .unwrap_or(Ordering::Equal)
                .then(a.cmp(&b)),
        }
    });
    idx.truncate(k);
    idx
}

/// TopK-50% sparsification then INT8 absmax, one token. Returns `s`; dropped entries are 0 in `q`.
pub fn topk50_int8(x: &[f32], q: &mut [i8]) -> Result<f32> {
    check_len("topk50_int8", "q", q.len(), x.len())?;
    let mut kept = vec![0.0f32; x.len()];
    for i in topk_indices(x, x.len() / 2) {
        if let (Some(d), Some(&v)) = (kept.get_mut(i), x.get(i)) {
            *d = v;
        }
    }
    quantize_act_int8(&kept, q)
}

/// Quantize one token as `scheme` says. `ActQuant::None` is not a quantizer: it returns `None`.
pub fn quantize_act(scheme: ActQuant, x: &[f32], q: &mut [i8]) -> Result<Option<f32>> {
    Ok(match scheme {
        ActQuant::None => None,
        ActQuant::Int8 => Some(quantize_act_int8(x, q)?),
        ActQuant::Int4 => Some(quantize_act_int4(x, q)?),
        ActQuant::Topk50Int8 => Some(topk50_int8(x, q)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_hand_computed() {
        // amax = 2 → s = 63.5; 1.0·63.5 = 63.5 → 64 (half to even), -2 → -127, 0.5 → 31.75 → 32
        let x = [1.0, -2.0, 0.5, 0.0];
        let mut q = [0i8; 4];
        let s = quantize_act_int8(&x, &mut q).unwrap();
        assert_eq!(s, 63.5);
        assert_eq!(q, [64, -127, 32, 0]);
        // half-to-even: amax 127 → s = 1; 2.5 → 2, 3.5 → 4, -0.5 → 0
        let x = [127.0, 2.5, 3.5, -0.5];
        let s = quantize_act_int8(&x, &mut q).unwrap();
        assert_eq!(s, 1.0);
        assert_eq!(q, [127, 2, 4, 0]);
    }

    #[test]
    fn int8_all_zero_row() {
        let x = [0.0f32; 5];
        let mut q = [1i8; 5];
        let s = quantize_act_int8(&x, &mut q).unwrap();
        assert_eq!(s, 127.0 / 1e-5);
        assert_eq!(q, [0; 5]);
    }

    #[test]
    fn int4_hand_computed() {
        // β = mean|x| = (1 + 1 + 2 + 4)/4 = 2 → s = √7/2 ≈ 1.3228756
        // 1·s = 1.32 → 1; -1 → -1; 2·s = 2.65 → 3; 4·s = 5.29 → 5
        let x = [1.0, -1.0, 2.0, 4.0];
        let mut q = [0i8; 4];
        let s = quantize_act_int4(&x, &mut q).unwrap();
        assert!((s - 7f32.sqrt() / 2.0).abs() < 1e-7);
        assert_eq!(q, [1, -1, 3, 5]);
        // outlier: β = (100 + 3·1)/4 = 25.75, s = 0.10275; 100·s = 10.3 → clamp 7; -100 → -8; 1·s → 0
        let x = [100.0, 1.0, 1.0, 1.0];
        quantize_act_int4(&x, &mut q).unwrap();
        assert_eq!(q, [7, 0, 0, 0]);
        let x = [-100.0, 1.0, 1.0, 1.0];
        quantize_act_int4(&x, &mut q).unwrap();
        assert_eq!(q, [-8, 0, 0, 0]);
        // all zero
        let x = [0.0; 4];
        let s = quantize_act_int4(&x, &mut q).unwrap();
        assert_eq!(q, [0; 4]);
        assert_eq!(s, 7f32.sqrt() / 1e-5);
    }

    #[test]
    fn topk_ties_lower_index_wins() {
        // magnitudes [1, 3, 3, 1, 2, 3]; k = 3 keeps the three 3s
        let x = [1.0, -3.0, 3.0, 1.0, 2.0, 3.0];
        assert_eq!(topk_indices(&x, 3), vec![1, 2, 5]);
        // k = 3 of [2, 2, 2, 2, 2, 2]: the first three
        assert_eq!(topk_indices(&[2.0; 6], 3), vec![0, 1, 2]);
        // tie across the threshold: [5, 1, 1, 1] k = 2 → 0 then index 1 (first of the ties)
        assert_eq!(topk_indices(&[5.0, -1.0, 1.0, 1.0], 2), vec![0, 1]);
        // NaN ranks last
        assert_eq!(topk_indices(&[f32::NAN, 1.0, 0.5, 0.0], 2), vec![1, 2]);
    }

    #[test]
    fn topk50_int8_hand_computed() {
        // n = 6 → k = 3: keep -3 (idx1), 3 (idx2), 3 (idx5); amax 3 → s = 127/3
        let x = [1.0, -3.0, 3.0, 1.0, 2.0, 3.0];
        let mut q = [9i8; 6];
        let s = topk50_int8(&x, &mut q).unwrap();
        assert_eq!(s, 127.0 / 3.0);
        assert_eq!(q, [0, -127, 127, 0, 0, 127]);
        // odd n = 5 → k = 2; outlier 50 dominates the scale: 2·127/50 = 5.08 → 5
        let x = [0.1, 50.0, -2.0, 0.2, 1.0];
        let mut q = [9i8; 5];
        let s = topk50_int8(&x, &mut q).unwrap();
        assert_eq!(s, 127.0 / 50.0);
        assert_eq!(q, [0, 127, -5, 0, 0]);
        // all zero: nothing survives, no NaN
        let mut q = [9i8; 4];
        topk50_int8(&[0.0; 4], &mut q).unwrap();
        assert_eq!(q, [0; 4]);
        // deterministic across calls
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 11) as f32) - 5.0).collect();
        let mut a = vec![0i8; 64];
        let mut b = vec![0i8; 64];
        topk50_int8(&x, &mut a).unwrap();
        topk50_int8(&x, &mut b).unwrap();
        assert_eq!(a, b);
        // exactly half survive: every kept |x| ≥ 3 here, far above the rounding threshold
        assert_eq!(a.iter().filter(|v| **v != 0).count(), 32);
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let mut q = [0i8; 3];
        assert!(quantize_act_int8(&[1.0; 4], &mut q).is_err());
        assert!(quantize_act_int4(&[1.0; 4], &mut q).is_err());
        assert!(topk50_int8(&[1.0; 4], &mut q).is_err());
    }
}
