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
//! * **INT4 absmean** (BitNet a4.8, arXiv 2411.04965 §2.1 eq. 7; per-token granularity from BitNet
//!   v2, arXiv 2504.18415 eq. 6, same authors): the paper's quantizer is
//!   `Q(x) = β/√7 · RoundClip(√7·x/(β+ε), −8, 7)` with `β = mean_j |x_j|`. Here
//!   `s = √7 / max(β, 1e-5)`, `x_q = clamp(round(x·s), -8, 7)`, `x ≈ x_q / s`, with `β`'s f32 sum in
//!   the fixed order of [`lane_tree_sum`] (so the GPU reproduces it bit for bit). The one difference
//!   is where ε goes: the same paper writes the INT8 quantizer with `γ + ε` too (eq. 3), and the
//!   authors' released code for that quantizer (HF `ActQuant`, bitnet.cpp, above) floors the
//!   statistic at 1e-5 and dequantizes with the same floored scale; no a4.8 code is public, so
//!   the INT4 quantizer follows that code's reading of `+ ε` (a relative change of ε/β in the
//!   scale; an all-zero row gives all-zero codes and a finite `s` either way).
//! * **TopK-50% then INT8** (a4.8 input of the attention output projection, after its sub-norm;
//!   eq. 1 and §3 "we set topK as 50% for the output projection of attention"): keep the
//!   `k = ⌊n / 2⌋` entries of largest `|x|`, zero the rest, then INT8 absmax as above (`γ = max|x|`:
//!   the max is always kept, so mask and absmax commute). The input of the FFN down projection is
//!   INT8 absmax only, no TopK (§2.3); its sparsity comes from ReLU² in `up(x) ⊙ ReLU²(gate(x))`.
//!   The paper's models are trained this way (A8 first, then ~5% more tokens with this scheme); no
//!   a4.8 weights are public.
//! * **TopK tie rule** (shared with the GPU kernel `act_quant_a48.wgsl`, which must select the same
//!   entries): every entry gets the key [`topk_key`] — `(bits of |x|) + 1` for a number (the order
//!   of the bit patterns of non-negative floats is the order of their values, and `+0`/`−0` are
//!   equal), `0` for NaN. Entries are ranked by key descending, then by index ascending (the LOWER
//!   index wins a tie). Equivalently, with `T` the key of the k-th ranked entry and `r = k − #{key
//!   > T}`: keep every entry with `key > T` and the first `r` entries (by index) with `key == T`.
//!   That second form is what the GPU computes (a radix select of `T` over the key bits, then a
//!   prefix count of the ties). `torch.topk`'s tie order is unspecified; this one is deterministic.

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

/// Lanes of [`lane_tree_sum`] (the GPU kernels' workgroup size).
pub const SUM_LANES: usize = 256;

/// An f32 sum in a fixed order that a 256-invocation GPU workgroup reproduces exactly: lane `l`
/// adds entries `l, l + 256, l + 512, …` in that order starting from `0.0`, then the 256 lane
/// sums are added pairwise (`p[i] += p[i + h]` for `h = 128, 64, …, 1`). The INT4 quantizer's
/// `β` is defined with this order, so that its rounding (and every code) is bit-exact between the
/// CPU and the GPU; it differs from a left-to-right sum only in the last bits.
pub fn lane_tree_sum(values: impl Iterator<Item = f32>) -> f32 {
    let mut p = [0.0f32; SUM_LANES];
    for (i, v) in values.enumerate() {
        if let Some(l) = p.get_mut(i % SUM_LANES) {
            *l += v;
        }
    }
    let mut h = SUM_LANES / 2;
    while h > 0 {
        for i in 0..h {
            let b = p.get(i + h).copied().unwrap_or(0.0);
            if let Some(a) = p.get_mut(i) {
                *a += b;
            }
        }
        h /= 2;
    }
    p[0]
}

/// INT4 absmean quantization of one token (values in `-8..=7`, stored one per `i8`). Returns `s`.
pub fn quantize_act_int4(x: &[f32], q: &mut [i8]) -> Result<f32> {
    check_len("quantize_act_int4", "q", q.len(), x.len())?;
    if x.is_empty() {
        return Ok(1.0);
    }
    let beta = lane_tree_sum(x.iter().map(|v| v.abs())) / x.len() as f32;
    let s = 7.0f32.sqrt() / beta.max(ACT_EPS);
    for (o, &v) in q.iter_mut().zip(x) {
        *o = round_clamp(v * s, -8.0, 7.0);
    }
    Ok(s)
}

/// The TopK ranking key of one value (module doc: `bits(|x|) + 1`, NaN `0`).
pub fn topk_key(v: f32) -> u32 {
    if v.is_nan() {
        0
    } else {
        (v.to_bits() & 0x7fff_ffff) + 1
    }
}

/// Indices of the `k` largest-magnitude entries under the tie rule of the module doc
/// ([`topk_key`] descending, then index ascending), in that rank order.
pub fn topk_indices(x: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<(u32, usize)> = x.iter().map(|&v| topk_key(v)).zip(0..).collect();
    idx.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    idx.truncate(k);
    idx.into_iter().map(|(_, i)| i).collect()
}

/// The selection of [`topk_indices`] in its threshold form (module doc): `(T, r)` such that an
/// entry is kept iff `key > T`, or `key == T` and fewer than `r` entries with `key == T` precede
/// it. `k == 0` gives `(u32::MAX, 0)`: nothing is kept.
pub fn topk_threshold(x: &[f32], k: usize) -> (u32, usize) {
    if k == 0 {
        return (u32::MAX, 0);
    }
    let mut keys: Vec<u32> = x.iter().map(|&v| topk_key(v)).collect();
    keys.sort_unstable_by(|a, b| b.cmp(a));
    let t = keys
        .get(k.min(keys.len()).saturating_sub(1))
        .copied()
        .unwrap_or(0);
    let above = keys.iter().filter(|&&v| v > t).count();
    (t, k.min(keys.len()) - above)
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
    fn topk_threshold_form_selects_the_same_entries() {
        // Many ties (values from a small set), both signs, zeros, NaN; odd and even lengths.
        let mut seed = 7u64;
        for n in [1usize, 2, 3, 7, 16, 33, 64, 257] {
            for round in 0..20 {
                let x: Vec<f32> = (0..n)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let r = (seed >> 33) % 11;
                        match r {
                            0 => 0.0,
                            1 => -0.0,
                            2 if round % 5 == 0 => f32::NAN,
                            _ => (r as f32 - 6.0) * 0.5,
                        }
                    })
                    .collect();
                for k in [0, n / 2, n] {
                    let mut want: Vec<usize> = topk_indices(&x, k);
                    want.sort_unstable();
                    let (t, r) = topk_threshold(&x, k);
                    let mut ties = 0;
                    let mut got = Vec::new();
                    for (i, &v) in x.iter().enumerate() {
                        let key = topk_key(v);
                        if key > t || (key == t && ties < r) {
                            got.push(i);
                        }
                        if key == t {
                            ties += 1;
                        }
                    }
                    assert_eq!(got, want, "n {n} k {k} x {x:?}");
                }
            }
        }
        // The key: ±0 equal, NaN below everything, order of magnitudes kept.
        assert_eq!(topk_key(0.0), topk_key(-0.0));
        assert!(topk_key(f32::NAN) < topk_key(0.0));
        assert!(topk_key(-2.0) > topk_key(1.5));
        assert!(topk_key(f32::INFINITY) > topk_key(f32::MAX));
    }

    #[test]
    fn ties_at_the_threshold_keep_the_lower_indices() {
        // n = 8, k = 4: one 9 and five 2s compete for four places: the 9 and the first three 2s.
        let x = [2.0, 0.5, -2.0, 9.0, 2.0, -2.0, 2.0, 0.0];
        let mut q = [0i8; 8];
        let s = topk50_int8(&x, &mut q).unwrap();
        assert_eq!(s, 127.0 / 9.0);
        // 2·127/9 = 28.2 → 28
        assert_eq!(q, [28, 0, -28, 127, 28, 0, 0, 0]);
    }

    #[test]
    fn a_single_huge_outlier() {
        // INT4: β is dominated by the outlier, every other entry rounds to 0, the outlier clamps.
        let mut x = vec![0.25f32; 64];
        x[17] = -3.0e30;
        let mut q = vec![9i8; 64];
        let s = quantize_act_int4(&x, &mut q).unwrap();
        assert!(s > 0.0 && s.is_finite());
        assert_eq!(q[17], -8);
        assert!(q.iter().enumerate().all(|(i, &v)| i == 17 || v == 0));
        // TopK + INT8: the outlier is kept (largest), its code is -127, the rest of the kept half
        // rounds to 0; the dropped half is 0.
        let s = topk50_int8(&x, &mut q).unwrap();
        assert_eq!(s, 127.0 / 3.0e30);
        assert_eq!(q[17], -127);
        assert!(q.iter().enumerate().all(|(i, &v)| i == 17 || v == 0));
        // f32::MAX: the mean stays finite (no overflow in the sum of one huge value).
        let mut x = vec![1.0f32; 9];
        x[0] = f32::MAX;
        let s = quantize_act_int4(&x, &mut q[..9]).unwrap();
        assert!(s > 0.0 && s.is_finite());
        assert_eq!(q[0], 7);
    }

    #[test]
    fn all_zero_rows_quantize_to_zero_with_finite_scales() {
        for n in [1usize, 5, 64] {
            let x = vec![0.0f32; n];
            let mut q = vec![3i8; n];
            for f in [quantize_act_int4, topk50_int8, quantize_act_int8] {
                q.iter_mut().for_each(|v| *v = 3);
                let s = f(&x, &mut q).unwrap();
                assert!(s.is_finite() && s > 0.0);
                assert!(q.iter().all(|&v| v == 0));
            }
        }
    }

    #[test]
    fn lane_tree_sum_order() {
        // ≤ 256 values: each lane holds one value, then the pairwise tree.
        assert_eq!(lane_tree_sum([1.0f32, 2.0, 3.0].into_iter()), 6.0);
        // 1e8 + 1 + ... : lane 0 gets 1e8 then 1.0 (lost: 1e8 + 1 = 1e8 in f32), lane 1 gets 1.0.
        let mut v = vec![0.0f32; 258];
        v[0] = 1e8;
        v[256] = 1.0;
        v[1] = 1.0;
        v[257] = 1.0;
        // lane 0: 1e8 + 1 → 1e8; lane 1: 1 + 1 = 2; tree: 1e8 + 2 = 100000002.
        assert_eq!(lane_tree_sum(v.iter().copied()), 100000002.0);
        assert_eq!(lane_tree_sum(std::iter::empty()), 0.0);
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let mut q = [0i8; 3];
        assert!(quantize_act_int8(&[1.0; 4], &mut q).is_err());
        assert!(quantize_act_int4(&[1.0; 4], &mut q).is_err());
        assert!(topk50_int8(&[1.0; 4], &mut q).is_err());
    }
}
