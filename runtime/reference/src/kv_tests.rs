use super::*;
use crate::kv_codec::{
    absmax_dequantize_row, absmax_format_at, absmax_quantize_row, f16_round, words_per_row,
};
use tern_format::kv::{Kivi, KvQuant};

fn hp(n_layer: u32) -> HParams {
    HParams {
        n_vocab: 10,
        n_embd: 24,
        n_layer,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 6,
        n_ff: 8,
        n_ctx_train: 4096,
        rope_theta: 1e4,
        rope_dim: 6,
        rope_neox: true,
        rms_eps: 1e-5,
        ffn_act: tern_format::meta::FfnAct::Silu,
        tied_embeddings: true,
        sub_norms: false,
    }
}

fn rows(n: usize, row: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(747_796_405).wrapping_add(1);
    (0..n * row)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32 - 0.5) * 4.0
        })
        .collect()
}

fn spec(quant: KvQuant, kivi: Kivi) -> KvSpec {
    KvSpec {
        quant,
        kivi,
        minicache: None,
    }
}

/// Fill a one-layer cache with `data` in `batches`, as the forward pass does.
fn fill(c: &mut KvCache, data: &(Vec<f32>, Vec<f32>), batches: &[usize]) {
    let row = c.row;
    let mut p = c.len;
    for &b in batches {
        let (k, v) = (
            &data.0[p * row..(p + b) * row],
            &data.1[p * row..(p + b) * row],
        );
        for l in 0..c.n_layer {
            c.write_own(l, p, k, v).unwrap();
        }
        p += b;
        c.len = p;
    }
}

fn read_all(c: &KvCache, layer: usize) -> Vec<f32> {
    let row = c.row;
    let mut out = Vec::new();
    for p in 0..c.len {
        let (mut k, mut v) = (vec![0.0; row], vec![0.0; row]);
        c.read(layer, p, None, &mut k, &mut v).unwrap();
        out.extend(k);
        out.extend(v);
    }
    out
}

#[test]
fn every_format_reads_back_what_its_codec_says() {
    let h = hp(1);
    let row = 12;
    let n = 70;
    let data = (rows(n, row, 1), rows(n, row, 2));
    let kivi = Kivi {
        group: 4,
        residual: 16,
    };
    // The rotated formats need a power-of-two head_dim: `rotated_formats_store_…` below.
    for q in KvQuant::ALL.into_iter().filter(|q| !q.is_rotated()) {
        let mut c = KvCache::for_spec(&h, 80, &spec(q, kivi)).unwrap();
        fill(&mut c, &data, &[1, 9, 30, 30]);
        for p in 0..n {
            let (mut k, mut v) = (vec![0.0; row], vec![0.0; row]);
            c.read(0, p, None, &mut k, &mut v).unwrap();
            let (xk, xv) = (
                &data.0[p * row..(p + 1) * row],
                &data.1[p * row..(p + 1) * row],
            );
            match q {
                KvQuant::F32 => assert_eq!((&k[..], &v[..]), (xk, xv)),
                KvQuant::F16 => {
                    assert!(k.iter().zip(xk).all(|(a, b)| *a == f16_round(*b)));
                    assert!(v.iter().zip(xv).all(|(a, b)| *a == f16_round(*b)));
                }
                KvQuant::Q8 | KvQuant::Absmax4 | KvQuant::Absmax3 => {
                    let f = absmax_format_at(q, p);
                    for (x, got) in [(xk, &k), (xv, &v)] {
                        let mut codes = vec![0u32; words_per_row(f.bits(), row)];
                        let mut s = vec![half::f16::ZERO; 2];
                        absmax_quantize_row(f, x, 6, &mut codes, &mut s).unwrap();
                        let mut want = vec![0.0; row];
                        absmax_dequantize_row(f, &codes, &s, 6, &mut want).unwrap();
                        assert_eq!(got, &want, "{q:?} at {p}");
                    }
                }
                _ => {
                    let tol = match q.bits() {
                        4 => 0.16,
                        3 => 0.33,
                        _ => 0.7,
                    };
                    if p >= 64 {
                        // The window (positions ≥ R·⌊70/R⌋ = 64) is f16.
                        assert!(k.iter().zip(xk).all(|(a, b)| *a == f16_round(*b)));
                    } else {
                        assert!(
                            k.iter().zip(xk).all(|(a, b)| (a - b).abs() < tol),
                            "{q:?} {p}"
                        );
                        assert!(
                            v.iter().zip(xv).all(|(a, b)| (a - b).abs() < tol),
                            "{q:?} {p}"
                        );
                        assert!(k.iter().zip(xk).any(|(a, b)| a != b));
                    }
                }
            }
        }
        assert_eq!(c.bytes_in_use(), q.layer_bytes(&h, kivi, n as u64), "{q:?}");
    }
}

#[test]
fn bytes_per_token_follow_the_formats() {
    let h = hp(3);
    let n_ctx = 64;
    let f32c = KvCache::for_spec(&h, n_ctx, &KvSpec::f32()).unwrap();
    assert_eq!(f32c.bytes_per_token(), 3 * 2 * 12 * 4);
    let f16c = KvCache::for_spec(&h, n_ctx, &spec(KvQuant::F16, Kivi::default())).unwrap();
    assert_eq!(f16c.kv_bytes_per_token(), 3.0 * 2.0 * 12.0 * 2.0);
    assert_eq!(f16c.bytes(), n_ctx * 3 * 2 * 12 * 2);
    let q4 = KvCache::for_spec(&h, n_ctx, &spec(KvQuant::Absmax4, Kivi::default())).unwrap();
    // 12 codes in 2 words + 2 f16 scales = 12 bytes per row, K and V, 3 layers.
    assert_eq!(q4.kv_bytes_per_token(), 3.0 * 2.0 * 12.0);
}

#[test]
fn kivi_truncation_keeps_exact_points_and_refills_bit_identically() {
    let h = hp(2);
    let row = 12;
    let kivi = Kivi {
        group: 4,
        residual: 16,
    };
    let data = (rows(64, row, 5), rows(64, row, 6));
    for q in [KvQuant::Kivi4, KvQuant::Kivi3, KvQuant::Kivi2] {
        let s = spec(q, kivi);
        let mut c = KvCache::for_spec(&h, 64, &s).unwrap();
        fill(&mut c, &data, &[40]); // blocks 0..32 quantized, 32..40 in the window
        let mut probe = c.clone();
        assert_eq!(probe.truncate(36), 36, "inside the open block: exact");
        assert_eq!(probe.truncate(32), 32, "a block boundary: exact");
        let mut probe = c.clone();
        assert_eq!(
            probe.truncate(20),
            16,
            "inside a quantized block: its start"
        );
        assert_eq!(probe.truncate(100), 16);
        // Re-running the lost positions gives exactly a cache filled from scratch.
        let kept = c.truncate(21);
        assert_eq!(kept, 16);
        fill(&mut c, &data, &[5, 20]);
        let mut fresh = KvCache::for_spec(&h, 64, &s).unwrap();
        fill(&mut fresh, &data, &[41]);
        for l in 0..2 {
            assert_eq!(read_all(&c, l), read_all(&fresh, l), "{q:?}");
        }
        assert_eq!(c.bytes_in_use(), fresh.bytes_in_use());
    }
}

#[test]
fn a_pass_that_failed_half_way_is_truncated_by_what_it_wrote() {
    let h = hp(2);
    let row = 12;
    let kivi = Kivi {
        group: 4,
        residual: 16,
    };
    let data = (rows(64, row, 7), rows(64, row, 8));
    let s = spec(KvQuant::Kivi4, kivi);
    let mut c = KvCache::for_spec(&h, 64, &s).unwrap();
    fill(&mut c, &data, &[10]);
    // Layer 0 takes positions 10..20 (its block 0..16 gets quantized), then the pass fails.
    c.write_own(
        0,
        10,
        &data.0[10 * row..20 * row],
        &data.1[10 * row..20 * row],
    )
    .unwrap();
    assert_eq!(c.len(), 10);
    assert_eq!(
        c.truncate(10),
        0,
        "block 0 was quantized by layer 0: nothing before it is exact"
    );
    // Formats without a window keep the length.
    let mut c = KvCache::for_spec(&h, 64, &spec(KvQuant::Absmax3, kivi)).unwrap();
    fill(&mut c, &data, &[10]);
    c.write_own(
        0,
        10,
        &data.0[10 * row..20 * row],
        &data.1[10 * row..20 * row],
    )
    .unwrap();
    assert_eq!(c.truncate(10), 10);
    fill(&mut c, &data, &[3]);
    assert_eq!(c.len(), 13);
}

fn minicache(start: u32, t: f32, gamma: f32) -> Option<MiniCache> {
    Some(MiniCache {
        start_layer: start,
        t,
        gamma,
    })
}

/// Fill a MiniCache cache as the forward pass does (pairs merged when their second layer runs).
fn fill_mc(c: &mut KvCache, layers: &[(Vec<f32>, Vec<f32>)], p0: usize, n: usize) {
    let row = c.row;
    let mut pending: Option<usize> = None;
    for l in 0..c.n_layer {
        let (k, v) = (
            &layers[l].0[p0 * row..(p0 + n) * row],
            &layers[l].1[p0 * row..(p0 + n) * row],
        );
        match c.role(l).unwrap() {
            Role::Own(_) => c.write_own(l, p0, k, v).unwrap(),
            Role::First(_) => pending = Some(l),
            Role::Second(pair) => {
                let a = pending.take().unwrap();
                let ka = &layers[a].0[p0 * row..(p0 + n) * row];
                let va = &layers[a].1[p0 * row..(p0 + n) * row];
                c.write_pair(pair, p0, (ka, va), (k, v)).unwrap();
            }
        }
    }
    c.len = p0 + n;
}

#[test]
fn minicache_reads_magnitudes_times_the_merged_direction_and_restores_retained_tokens() {
    let h = hp(5);
    let row = 12;
    let n = 40;
    let layers: Vec<(Vec<f32>, Vec<f32>)> = (0..5)
        .map(|l| (rows(n, row, 10 + l), rows(n, row, 20 + l)))
        .collect();
    // Pairs (1,2), (3,4); t = 0: the direction is layer a's own, so layer a reads back x_a.
    let s = KvSpec {
        minicache: minicache(1, 0.0, 1.0),
        ..KvSpec::f32()
    };
    let mut c = KvCache::for_spec(&h, 64, &s).unwrap();
    assert_eq!(c.streams.len(), 3);
    fill_mc(&mut c, &layers, 0, n);
    assert_eq!(c.retained(), 0, "γ = 1 retains nothing");
    let a = read_all(&c, 1);
    let mut want = Vec::new();
    for p in 0..n {
        want.extend_from_slice(&layers[1].0[p * row..(p + 1) * row]);
        want.extend_from_slice(&layers[1].1[p * row..(p + 1) * row]);
    }
    for (x, y) in a.iter().zip(&want) {
        assert!((x - y).abs() <= 2e-3 * y.abs().max(1.0), "{x} vs {y}");
    }
    // Layer b reads ‖x_b‖·u_a: its norm per head is its own.
    let b = read_all(&c, 2);
    let hd = 6;
    for p in 0..n {
        for hh in 0..2 {
            let got = &b[p * 2 * row + hh * hd..p * 2 * row + (hh + 1) * hd];
            let x = &layers[2].0[p * row + hh * hd..p * row + (hh + 1) * hd];
            assert!((norm(got) - norm(x)).abs() < 2e-3 * norm(x));
        }
    }
    // Bytes: 1 own layer + 2 direction streams of f32, + magnitudes.
    assert_eq!(
        c.bytes_in_use(),
        3 * 2 * 12 * 4 * n as u64 + 2 * (n as u64 * 2 * 2 * 2 * 2)
    );

    // γ = 0: every distinct token wants retention; the pool (⌈64·2/8⌉ = 16 entries) fills
    // with the first ones in position order and the rest are merged.
    let s = KvSpec {
        minicache: minicache(1, 0.5, 0.0),
        ..KvSpec::f32()
    };
    let mut c = KvCache::for_spec(&h, 64, &s).unwrap();
    fill_mc(&mut c, &layers, 0, 10);
    fill_mc(&mut c, &layers, 10, n - 10);
    assert_eq!(c.retained(), 4 * 16);
    let b = read_all(&c, 2);
    // Position 0..7 (heads 0, 1: 16 entries) are retained: layer b reads its own vector (f16).
    for p in 0..8 {
        for (x, y) in b[p * 2 * row..p * 2 * row + row]
            .iter()
            .zip(&layers[2].0[p * row..(p + 1) * row])
        {
            assert_eq!(*x, f16_round(*y));
        }
    }
    // Truncation keeps the entries of the positions kept.
    let mut t = c.clone();
    assert_eq!(t.truncate(5), 5);
    assert_eq!(t.retained(), 4 * 10);
    fill_mc(&mut t, &layers, 5, n - 5);
    assert_eq!(read_all(&t, 2), b);
    assert_eq!(read_all(&t, 4), read_all(&c, 4));
}

#[test]
fn minicache_stores_directions_in_the_quantized_formats() {
    let h = hp(4);
    let row = 12;
    let n = 50;
    let layers: Vec<(Vec<f32>, Vec<f32>)> = (0..4)
        .map(|l| (rows(n, row, 30 + l), rows(n, row, 40 + l)))
        .collect();
    for q in [KvQuant::Kivi4, KvQuant::Absmax3, KvQuant::Q8] {
        let s = KvSpec {
            quant: q,
            kivi: Kivi {
                group: 4,
                residual: 16,
            },
            minicache: minicache(2, 0.5, 0.6),
        };
        let mut c = KvCache::for_spec(&h, 64, &s).unwrap();
        fill_mc(&mut c, &layers, 0, 30);
        fill_mc(&mut c, &layers, 30, n - 30);
        let plain = KvSpec {
            minicache: None,
            ..s
        };
        let want = plain.quant.layer_bytes(&h, plain.kivi, n as u64) * 3
            + n as u64 * 2 * 2 * 2 * 2
            + c.retained() as u64 * (6 * 2 + 4);
        assert_eq!(c.bytes_in_use(), want, "{q:?}");
        let got = read_all(&c, 3);
        assert!(got.iter().all(|v| v.is_finite()));
        let mut fresh = KvCache::for_spec(&h, 64, &s).unwrap();
        fill_mc(&mut fresh, &layers, 0, n);
        assert_eq!(
            read_all(&fresh, 3),
            got,
            "{q:?}: batching does not change the cache"
        );
    }
}

#[test]
fn bad_specs_are_errors() {
    let h = hp(4);
    let s = KvSpec {
        minicache: minicache(3, 0.5, 0.1),
        ..KvSpec::f32()
    };
    assert!(KvCache::for_spec(&h, 8, &s).is_err());
    let s = spec(
        KvQuant::Kivi4,
        Kivi {
            group: 8,
            residual: 12,
        },
    );
    assert!(KvCache::for_spec(&h, 8, &s).is_err());
}

#[test]
fn append_rows_stores_as_the_forward_pass_does() {
    let h = hp(4);
    let row = 12;
    let n = 20;
    let layers: Vec<(Vec<f32>, Vec<f32>)> = (0..4)
        .map(|l| (rows(n, row, 50 + l), rows(n, row, 60 + l)))
        .collect();
    let s = KvSpec {
        quant: KvQuant::Kivi3,
        kivi: Kivi {
            group: 4,
            residual: 8,
        },
        minicache: minicache(2, 0.7, 0.5),
    };
    let mut a = KvCache::for_spec(&h, 32, &s).unwrap();
    let ks: Vec<&[f32]> = layers.iter().map(|l| &l.0[..]).collect();
    let vs: Vec<&[f32]> = layers.iter().map(|l| &l.1[..]).collect();
    a.append_rows(&ks, &vs).unwrap();
    let mut b = KvCache::for_spec(&h, 32, &s).unwrap();
    fill_mc(&mut b, &layers, 0, n);
    for l in 0..4 {
        assert_eq!(read_all(&a, l), read_all(&b, l));
    }
    let (mut k, mut v) = (vec![0.0; row], vec![0.0; row]);
    assert!(a.read_row(3, n - 1, &mut k, &mut v).is_ok());
    assert!(a.read_row(3, n, &mut k, &mut v).is_err());
    assert!(a.append_rows(&ks[..3], &vs[..3]).is_err());
    assert!(
        a.append_rows(&ks, &vs).is_err(),
        "40 positions do not fit 32"
    );
    assert_eq!(a.len(), n);
}

/// `set_input_jitter`: off by default and at 0; on, every stored value moves by at most the
/// amplitude (relative), some move, and the perturbation does not depend on the batching.
#[test]
fn input_jitter_is_bounded_deterministic_and_batch_independent() {
    let h = hp(2);
    let row = 12;
    let n = 20;
    let data = (rows(n, row, 3), rows(n, row, 4));
    let s = spec(KvQuant::F16, Kivi::default());
    let read_all = |c: &KvCache| {
        let mut out = Vec::new();
        for l in 0..2 {
            for p in 0..n {
                let (mut k, mut v) = (vec![0.0; row], vec![0.0; row]);
                c.read_row(l, p, &mut k, &mut v).unwrap();
                out.extend(k);
                out.extend(v);
            }
        }
        out
    };
    let mut plain = KvCache::for_spec(&h, n, &s).unwrap();
    fill(&mut plain, &data, &[n]);
    let mut off = KvCache::for_spec(&h, n, &s).unwrap();
    off.set_input_jitter(0.0, 7);
    fill(&mut off, &data, &[n]);
    assert_eq!(read_all(&plain), read_all(&off));
    // 1e-2: far above f16's rounding, so the perturbation shows through the f16 store
    let mut a = KvCache::for_spec(&h, n, &s).unwrap();
    a.set_input_jitter(1e-2, 7);
    fill(&mut a, &data, &[n]);
    let mut b = KvCache::for_spec(&h, n, &s).unwrap();
    b.set_input_jitter(1e-2, 7);
    fill(&mut b, &data, &[3, 1, 16]);
    let (ra, rp) = (read_all(&a), read_all(&plain));
    assert_eq!(
        ra,
        read_all(&b),
        "the same seed gives the same cache in any batching"
    );
    let moved = ra.iter().zip(&rp).filter(|(x, y)| x != y).count();
    assert!(moved > ra.len() / 2, "{moved} of {} values moved", ra.len());
    for (x, y) in ra.iter().zip(&rp) {
        // ±0.5e-2 relative, plus the f16 rounding of both
        assert!((x - y).abs() <= 0.006 * y.abs() + 2e-3, "{x} vs {y}");
    }
    let mut c = KvCache::for_spec(&h, n, &s).unwrap();
    c.set_input_jitter(1e-2, 8);
    fill(&mut c, &data, &[n]);
    assert_ne!(read_all(&c), ra, "another seed, another perturbation");
}

/// q4r/q3r/q2r streams: keys and values alike per (position, head), 3 bits densely packed —
/// exactly the codec's functions, no window, the bytes of the spec, every length an exact
/// truncation point; a head_dim that is not a power of two is refused.
#[test]
fn rotated_formats_store_per_position_and_head() {
    use crate::kv_codec::{kivi_dequantize_values, kivi_quantize_values, row_words};
    let h = HParams {
        head_dim: 8,
        rope_dim: 8,
        n_embd: 32,
        ..hp(1)
    };
    let row = 16;
    let n = 70;
    let data = (rows(n, row, 3), rows(n, row, 4));
    let kivi = Kivi::default();
    for q in [KvQuant::Rot4, KvQuant::Rot3, KvQuant::Rot2] {
        let mut c = KvCache::for_spec(&h, 80, &spec(q, kivi)).unwrap();
        fill(&mut c, &data, &[1, 9, 30, 30]);
        let want_row = |x: &[f32]| {
            let mut codes = vec![0u32; row_words(q, row)];
            let (mut s, mut m) = (vec![half::f16::ZERO; 2], vec![half::f16::ZERO; 2]);
            kivi_quantize_values(q, 8, x, &mut codes, &mut s, &mut m).unwrap();
            let mut want = vec![0.0; row];
            kivi_dequantize_values(q, 8, &codes, &s, &m, &mut want).unwrap();
            want
        };
        for p in 0..n {
            let (mut k, mut v) = (vec![0.0; row], vec![0.0; row]);
            c.read(0, p, None, &mut k, &mut v).unwrap();
            assert_eq!(
                k,
                want_row(&data.0[p * row..(p + 1) * row]),
                "{q:?} key {p}"
            );
            assert_eq!(
                v,
                want_row(&data.1[p * row..(p + 1) * row]),
                "{q:?} value {p}"
            );
            assert!(k.iter().zip(&data.0[p * row..]).any(|(a, b)| a != b));
        }
        assert_eq!(c.bytes_in_use(), q.layer_bytes(&h, kivi, n as u64), "{q:?}");
        assert_eq!(c.truncate(37), 37);
        assert!(KvCache::for_spec(&hp(1), 80, &spec(q, kivi)).is_err());
    }
}
