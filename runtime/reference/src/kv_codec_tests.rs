use super::*;

/// A deterministic pseudo-random row in [-scale, scale].
fn row(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

#[test]
fn packing_round_trips_and_three_bits_use_ten_per_word() {
    for bits in [2u32, 3, 4, 8] {
        let n = 37;
        let mut w = vec![0u32; words_per_row(bits, n)];
        for i in 0..n {
            put_code(&mut w, bits, i, (i as u32 * 7 + 1) & ((1 << bits) - 1));
        }
        for i in 0..n {
            assert_eq!(
                get_code(&w, bits, i),
                (i as u32 * 7 + 1) & ((1 << bits) - 1)
            );
        }
    }
    assert_eq!(words_per_row(3, 192), 20);
    assert_eq!(words_per_row(4, 192), 24);
    let mut w = vec![0u32; 2];
    for i in 0..10 {
        put_code(&mut w, 3, i, 7);
    }
    // Ten 3-bit codes fill bits 0..30; bits 30-31 stay zero; the 11th code opens word 1.
    assert_eq!(w[0], (1 << 30) - 1);
    put_code(&mut w, 3, 10, 5);
    assert_eq!(w[1], 5);
}

#[test]
fn rounding_is_half_away_from_zero() {
    assert_eq!(round_away(2.5), 3.0);
    assert_eq!(round_away(-2.5), -3.0);
    assert_eq!(round_away(0.49), 0.0);
    assert_eq!(round_away(-0.5), -1.0);
    assert_eq!(round_away(0.0), 0.0);
}

#[test]
fn absmax_matches_the_formula_on_odd_heads() {
    for q in [KvQuant::Q8, KvQuant::Absmax4, KvQuant::Absmax3] {
        let (bits, qmax) = match q {
            KvQuant::Q8 => (8, 127),
            KvQuant::Absmax4 => (4, 7),
            _ => (3, 3),
        };
        let hd = 13;
        let x = row(3 * hd, 7, 2.0);
        let mut codes = vec![0u32; words_per_row(bits, x.len())];
        let mut scales = vec![f16::ZERO; 3];
        absmax_quantize_row(q, &x, hd, &mut codes, &mut scales).unwrap();
        let mut out = vec![0.0; x.len()];
        absmax_dequantize_row(q, &codes, &scales, hd, &mut out).unwrap();
        for h in 0..3 {
            let xh = &x[h * hd..(h + 1) * hd];
            let amax = xh.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let s = f16::from_f32(amax / qmax as f32).to_f32();
            assert_eq!(scales[h].to_f32(), s);
            for (j, &v) in xh.iter().enumerate() {
                let want = round_away(v / s).clamp(-qmax as f32, qmax as f32) * s;
                assert_eq!(out[h * hd + j], want, "{q:?} head {h} value {j}");
                assert!(
                    (out[h * hd + j] - v).abs() <= s * 0.5 + 1e-3 * amax,
                    "{q:?}"
                );
            }
        }
    }
}

#[test]
fn zero_rows_and_constant_groups_give_exact_values() {
    let hd = 8;
    let zeros = vec![0.0f32; 2 * hd];
    for q in [KvQuant::Q8, KvQuant::Absmax4, KvQuant::Absmax3] {
        let mut codes = vec![0u32; words_per_row(q.bits(), zeros.len())];
        let mut scales = vec![f16::ONE; 2];
        absmax_quantize_row(q, &zeros, hd, &mut codes, &mut scales).unwrap();
        assert!(scales.iter().all(|s| s.to_f32() == 0.0));
        let mut out = vec![1.0; zeros.len()];
        absmax_dequantize_row(q, &codes, &scales, hd, &mut out).unwrap();
        assert!(out.iter().all(|&v| v == 0.0), "{q:?}");
    }
    // KIVI: a constant group has s = 0, every code 0 and x̂ = m exactly (f16-representable).
    for q in [KvQuant::Kivi4, KvQuant::Kivi3, KvQuant::Kivi2] {
        let x = vec![0.75f32; 11];
        let mut codes = vec![0u32; words_per_row(q.bits(), 11)];
        let (mut s, mut m) = (vec![f16::ZERO; 3], vec![f16::ZERO; 3]);
        kivi_quantize_values(q, 4, &x, &mut codes, &mut s, &mut m).unwrap();
        assert!(s.iter().all(|v| v.to_f32() == 0.0));
        assert!(codes.iter().all(|&w| w == 0));
        let mut out = vec![0.0; 11];
        kivi_dequantize_values(q, 4, &codes, &s, &m, &mut out).unwrap();
        assert!(out.iter().all(|&v| v == 0.75));
        let zeros = vec![0.0f32; 5 * 6];
        let mut codes = vec![0u32; 5 * words_per_row(q.bits(), 6)];
        let (mut s, mut m) = (vec![f16::ONE; 6], vec![f16::ONE; 6]);
        kivi_quantize_keys(q, 6, &zeros, &mut codes, &mut s, &mut m).unwrap();
        let wpp = words_per_row(q.bits(), 6);
        for p in 0..5 {
            let mut out = vec![1.0; 6];
            kivi_dequantize_key(q, &codes[p * wpp..(p + 1) * wpp], &s, &m, &mut out).unwrap();
            assert!(out.iter().all(|&v| v == 0.0));
        }
    }
}

#[test]
fn kivi_values_follow_the_formula_with_a_short_last_group() {
    for q in [KvQuant::Kivi4, KvQuant::Kivi3, KvQuant::Kivi2] {
        let bits = q.bits();
        let (n, g) = (45, 32); // groups of 32 and 13
        let x = row(n, 3, 1.5);
        let mut codes = vec![0u32; words_per_row(bits, n)];
        let (mut s, mut m) = (vec![f16::ZERO; 2], vec![f16::ZERO; 2]);
        kivi_quantize_values(q, g, &x, &mut codes, &mut s, &mut m).unwrap();
        let mut out = vec![0.0; n];
        kivi_dequantize_values(q, g, &codes, &s, &m, &mut out).unwrap();
        for (gi, xg) in x.chunks(g).enumerate() {
            let lo = xg.iter().fold(f32::INFINITY, |a, &v| a.min(v));
            let hi = xg.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
            let levels = ((1 << bits) - 1) as f32;
            let (ss, mm) = (f16::from_f32((hi - lo) / levels), f16::from_f32(lo));
            assert_eq!((s[gi], m[gi]), (ss, mm));
            for (j, &v) in xg.iter().enumerate() {
                let c = round_away((v - mm.to_f32()) / ss.to_f32()).clamp(0.0, levels);
                assert_eq!(out[gi * g + j], c * ss.to_f32() + mm.to_f32());
                assert!((out[gi * g + j] - v).abs() <= ss.to_f32() * 0.5 + 2e-3);
            }
        }
    }
}

#[test]
fn kivi_keys_are_per_channel_over_the_group() {
    let q = KvQuant::Kivi3;
    let (g, r) = (7, 10); // odd sizes
    let mut x = row(g * r, 11, 1.0);
    // Channel 4 spans a much wider range than the others: only its own scale grows.
    for p in 0..g {
        x[p * r + 4] *= 100.0;
    }
    let wpp = words_per_row(3, r);
    let mut codes = vec![0u32; g * wpp];
    let (mut s, mut m) = (vec![f16::ZERO; r], vec![f16::ZERO; r]);
    kivi_quantize_keys(q, r, &x, &mut codes, &mut s, &mut m).unwrap();
    assert!(s[4].to_f32() > 20.0 * s[3].to_f32());
    for p in 0..g {
        let mut out = vec![0.0; r];
        kivi_dequantize_key(q, &codes[p * wpp..(p + 1) * wpp], &s, &m, &mut out).unwrap();
        for c in 0..r {
            let want = kivi_value(kivi_code(x[p * r + c], s[c], m[c], 3), s[c], m[c]);
            assert_eq!(out[c], want);
            assert!(
                (out[c] - x[p * r + c]).abs() <= s[c].to_f32() * 0.5 + 0.05 * s[c].to_f32() + 1e-3
            );
        }
    }
}

#[test]
fn a_huge_outlier_saturates_the_scale_instead_of_making_inf() {
    let hd = 4;
    let x = vec![1e30f32, 1.0, -2.0, 0.5];
    for q in [KvQuant::Q8, KvQuant::Absmax4, KvQuant::Absmax3] {
        let mut codes = vec![0u32; words_per_row(q.bits(), hd)];
        let mut scales = vec![f16::ZERO; 1];
        absmax_quantize_row(q, &x, hd, &mut codes, &mut scales).unwrap();
        assert_eq!(scales[0].to_f32(), 65504.0);
        let mut out = vec![0.0; hd];
        absmax_dequantize_row(q, &codes, &scales, hd, &mut out).unwrap();
        assert!(out.iter().all(|v| v.is_finite()), "{q:?}: {out:?}");
    }
    // A moderate outlier in a KIVI value group takes the group's resolution, not its finiteness.
    let mut v = row(32, 5, 0.1);
    v[9] = 500.0;
    let mut codes = vec![0u32; words_per_row(4, 32)];
    let (mut s, mut m) = (vec![f16::ZERO; 1], vec![f16::ZERO; 1]);
    kivi_quantize_values(KvQuant::Kivi4, 32, &v, &mut codes, &mut s, &mut m).unwrap();
    let mut out = vec![0.0; 32];
    kivi_dequantize_values(KvQuant::Kivi4, 32, &codes, &s, &m, &mut out).unwrap();
    assert!((out[9] - 500.0).abs() <= s[0].to_f32());
    assert!(out.iter().all(|v| v.is_finite()));
}

#[test]
fn wrong_formats_and_shapes_are_errors() {
    let mut codes = vec![0u32; 1];
    let mut s = vec![f16::ZERO; 1];
    let mut m = vec![f16::ZERO; 1];
    assert!(absmax_quantize_row(KvQuant::Kivi4, &[0.0; 4], 4, &mut codes, &mut s).is_err());
    assert!(absmax_quantize_row(KvQuant::Q8, &[0.0; 5], 4, &mut codes, &mut s).is_err());
    assert!(kivi_quantize_values(KvQuant::Q8, 4, &[0.0; 4], &mut codes, &mut s, &mut m).is_err());
    assert!(
        kivi_quantize_values(KvQuant::Kivi4, 0, &[0.0; 4], &mut codes, &mut s, &mut m).is_err()
    );
    assert!(kivi_quantize_keys(KvQuant::Kivi2, 3, &[0.0; 4], &mut codes, &mut s, &mut m).is_err());
}

#[test]
fn a3_keeps_position_zero_at_four_bits() {
    assert_eq!(absmax_format_at(KvQuant::Absmax3, 0), KvQuant::Absmax4);
    assert_eq!(absmax_format_at(KvQuant::Absmax3, 1), KvQuant::Absmax3);
    assert_eq!(absmax_format_at(KvQuant::Absmax4, 0), KvQuant::Absmax4);
    assert_eq!(absmax_format_at(KvQuant::Q8, 0), KvQuant::Q8);
    // The 4-bit row of position 0 is finer than the 3-bit rows: 15 levels against 7.
    let x = row(16, 9, 1.0);
    let err = |q: KvQuant| {
        let mut codes = vec![0u32; words_per_row(q.bits(), 16)];
        let mut s = vec![f16::ZERO; 1];
        absmax_quantize_row(q, &x, 16, &mut codes, &mut s).unwrap();
        let mut out = vec![0.0; 16];
        absmax_dequantize_row(q, &codes, &s, 16, &mut out).unwrap();
        x.iter()
            .zip(&out)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
    };
    assert!(
        err(absmax_format_at(KvQuant::Absmax3, 0)) < err(absmax_format_at(KvQuant::Absmax3, 1))
    );
}

#[test]
fn dense_three_bit_packing_round_trips_across_word_boundaries() {
    let q = KvQuant::Rot3;
    assert_eq!(row_words(q, 192), 18);
    assert_eq!(row_words(q, 32), 3);
    assert_eq!(row_words(q, 11), 2);
    assert_eq!(row_words(KvQuant::Kivi3, 192), 20);
    let n = 75;
    let mut w = vec![0u32; row_words(q, n)];
    let code = |i: usize| (i as u32 * 5 + 3) & 7;
    for i in 0..n {
        pack_put(q, &mut w, i, code(i));
    }
    for i in 0..n {
        assert_eq!(pack_get(q, &w, i), code(i), "code {i}");
    }
    // Rewriting a code in place (code 10 straddles words 0 and 1) leaves its neighbours.
    pack_put(q, &mut w, 10, 0);
    assert_eq!(pack_get(q, &w, 10), 0);
    assert_eq!(
        (pack_get(q, &w, 9), pack_get(q, &w, 11)),
        (code(9), code(11))
    );
    // All ones: 32 codes fill exactly 3 words.
    let mut w = vec![0u32; 3];
    for i in 0..32 {
        pack_put(q, &mut w, i, 7);
    }
    assert_eq!(w, vec![u32::MAX; 3]);
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// H is orthogonal: its columns (H applied to unit vectors) are orthonormal, `Hᵀ·H = I` to f32
/// rounding, and `(Hq)·(Hk) = q·k`.
#[test]
fn rotation_is_orthogonal_and_keeps_dot_products() {
    for d in [8usize, 64, 128] {
        let signs = rot_signs(d);
        assert!(signs.iter().all(|s| *s == 1.0 || *s == -1.0));
        assert!(signs.iter().any(|s| *s < 0.0) && signs.iter().any(|s| *s > 0.0));
        let cols: Vec<Vec<f32>> = (0..d)
            .map(|j| {
                let mut e = vec![0.0f32; d];
                e[j] = 1.0;
                rotate_heads(&mut e, d, &signs).unwrap();
                e
            })
            .collect();
        for i in 0..d {
            for j in 0..d {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!(
                    (dot(&cols[i], &cols[j]) - want).abs() < 1e-6,
                    "d {d} ({i},{j})"
                );
            }
        }
        // Two heads at once, each rotated on its own; the inverse brings both back.
        let x = row(2 * d, 7, 3.0);
        let mut y = x.clone();
        rotate_heads(&mut y, d, &signs).unwrap();
        let mut z = y.clone();
        unrotate_heads(&mut z, d, &signs).unwrap();
        for (a, b) in x.iter().zip(&z) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        let (q, k) = (row(d, 11, 2.0), row(d, 12, 5.0));
        let (mut hq, mut hk) = (q.clone(), k.clone());
        rotate_heads(&mut hq, d, &signs).unwrap();
        rotate_heads(&mut hk, d, &signs).unwrap();
        let (a, b) = (dot(&q, &k), dot(&hq, &hk));
        assert!((a - b).abs() < 1e-4 * (1.0 + a.abs()), "{a} vs {b}");
    }
    // For d = 64 the scale is exactly 1/8: a one-hot input gives ±0.125 everywhere.
    let signs = rot_signs(64);
    let mut e = vec![0.0f32; 64];
    e[0] = 1.0;
    rotate_heads(&mut e, 64, &signs).unwrap();
    assert!(e.iter().all(|v| v.abs() == 0.125));
    assert!(rotate_heads(&mut [0.0; 12], 6, &rot_signs(6)).is_err());
    assert!(rotate_heads(&mut [0.0; 12], 8, &signs).is_err());
}

/// The rotation removes an outlier channel's effect on the quantizer: a head with one channel
/// 40× the others loses much less at 3 bits per head-group after rotation.
#[test]
fn rotation_spreads_an_outlier() {
    let d = 64;
    let signs = rot_signs(d);
    let mut x = row(d, 21, 1.0);
    x[5] = 40.0;
    let err = |v: &[f32], q: KvQuant| {
        let mut codes = vec![0u32; row_words(q, d)];
        let (mut s, mut m) = (vec![f16::ZERO; 1], vec![f16::ZERO; 1]);
        kivi_quantize_values(q, d, v, &mut codes, &mut s, &mut m).unwrap();
        let mut out = vec![0.0; d];
        kivi_dequantize_values(q, d, &codes, &s, &m, &mut out).unwrap();
        out
    };
    let plain = err(&x, KvQuant::Kivi3);
    let mut hx = x.clone();
    rotate_heads(&mut hx, d, &signs).unwrap();
    let mut back = err(&hx, KvQuant::Rot3);
    unrotate_heads(&mut back, d, &signs).unwrap();
    let mse = |y: &[f32]| x.iter().zip(y).map(|(a, b)| (a - b).powi(2)).sum::<f32>();
    assert!(
        mse(&back) < 0.5 * mse(&plain),
        "{} vs {}",
        mse(&back),
        mse(&plain)
    );
}
