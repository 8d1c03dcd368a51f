//! Packed ternary dots against the plain unpacked reference (the representation the CPU path
//! used before: one `i8` trit per weight, f32 scales recovered from the dequantized values).

use super::*;
use crate::matmul::{MatmulOptions, Matrix, WeightData};
use tern_format::ActQuant;

/// The old reference: trits one per byte, scales per group, the same sums as before.
struct Unpacked {
    trits: Vec<i8>,
    scales: Vec<f32>,
    group: usize,
    cols: usize,
}

impl Unpacked {
    fn from_encoded(rows: usize, cols: usize, enc: &Encoding, bytes: &[u8]) -> Self {
        let Encoding::Ternary { group, .. } = *enc else {
            panic!("not ternary")
        };
        let values = enc.decode_f32(&[rows as u64, cols as u64], bytes).unwrap();
        let (trits, scales) = trits_from_values("w", rows, cols, group as usize, &values).unwrap();
        Self {
            trits,
            scales,
            group: group as usize,
            cols,
        }
    }
    fn scale(&self, r: usize, c: usize) -> f32 {
        let i = if self.group == 0 {
            0
        } else {
            r * self.cols.div_ceil(self.group) + c / self.group
        };
        self.scales[i]
    }
    fn g(&self) -> usize {
        if self.group == 0 {
            self.cols.max(1)
        } else {
            self.group
        }
    }
    fn dot_int(&self, r: usize, q: &[i8]) -> f32 {
        let cols = self.cols;
        let trits = &self.trits[r * cols..(r + 1) * cols];
        let g = self.g();
        let mut sum = 0.0f32;
        for (gi, (tg, qg)) in trits.chunks(g).zip(q.chunks(g)).enumerate() {
            let acc: i32 = tg.iter().zip(qg).map(|(&t, &x)| t as i32 * x as i32).sum();
            sum += acc as f32 * self.scale(r, gi * g);
        }
        sum
    }
    fn dot_f32(&self, r: usize, x: &[f32]) -> f32 {
        let cols = self.cols;
        let trits = &self.trits[r * cols..(r + 1) * cols];
        let g = self.g();
        let mut sum = 0.0f32;
        for (gi, (tg, xg)) in trits.chunks(g).zip(x.chunks(g)).enumerate() {
            let acc: f32 = tg.iter().zip(xg).map(|(&t, &v)| t as f32 * v).sum();
            sum += acc * self.scale(r, gi * g);
        }
        sum
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn f(&mut self) -> f32 {
        (self.next() % 20001) as f32 / 10000.0 - 1.0
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Packed vs unpacked, bit for bit, through `Matrix::matmul` (int8, int4 and f32 activations) and
/// `row_f32`, for both layouts, per-tensor and per-group scales of every scale type, odd shapes
/// around the word and chunk boundaries, and group sizes on and off the packed fast path.
#[test]
fn packed_dots_equal_the_unpacked_reference() {
    let mut rng = Rng(11);
    let shapes: &[(usize, usize, &[u32])] = &[
        (3, 1, &[0, 1]),
        (5, 15, &[0, 5]),
        (4, 16, &[0, 16, 8]),
        (3, 17, &[0, 17]),
        (2, 20, &[0, 20, 4]),
        (7, 127, &[0]),
        (6, 128, &[0, 128, 64, 32]),
        (5, 129, &[0, 43]),
        (4, 159, &[0, 53]),
        (3, 160, &[0, 160, 32, 80]),
        (3, 161, &[0, 7]),
        (9, 320, &[0, 160, 64, 320]),
        (2, 640, &[0, 128, 160, 320, 640]),
        (3, 1000, &[0, 200, 500]),
        (2, 2560, &[0, 128, 256, 640]),
    ];
    let mut checked_fast = [0usize; 2];
    for &(rows, cols, groups) in shapes {
        for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
            for &group in groups {
                for st in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
                    let trits: Vec<i8> = (0..rows * cols)
                        .map(|_| (rng.next() % 3) as i8 - 1)
                        .collect();
                    let ns = scale_count(rows as u64, cols as u64, group).unwrap() as usize;
                    // positive, negative and zero scales
                    let scales: Vec<f32> = (0..ns)
                        .map(|i| match i % 5 {
                            3 => -0.75 - rng.f().abs(),
                            4 if ns > 1 => 0.0,
                            _ => 0.01 + rng.f().abs(),
                        })
                        .collect();
                    let bytes = tern_format::ternary::pack(
                        layout,
                        rows as u64,
                        cols as u64,
                        &trits,
                        group,
                        st,
                        &scales,
                    )
                    .unwrap();
                    let enc = Encoding::Ternary {
                        layout,
                        group,
                        scale_type: st,
                    };
                    let old = Unpacked::from_encoded(rows, cols, &enc, &bytes);
                    let m = Matrix::from_encoded("w", rows, cols, &enc, &bytes).unwrap();
                    let WeightData::Ternary(tw) = &m.data else {
                        panic!("not kept packed")
                    };
                    assert_eq!(tw.resident_bytes(), bytes.len());
                    if tw.packed_dots() {
                        checked_fast[(layout == TernaryLayout::Base3) as usize] += 1;
                    }
                    let n = 3;
                    let x: Vec<f32> = (0..n * cols)
                        .map(|i| {
                            if i % 11 == 0 {
                                0.0
                            } else {
                                rng.f() * (1.0 + (i % 7) as f32)
                            }
                        })
                        .collect();
                    for act in [ActQuant::Int8, ActQuant::Int4, ActQuant::None] {
                        let mut y = vec![0.0; n * rows];
                        m.matmul(&x, act, &MatmulOptions::default(), &mut y)
                            .unwrap();
                        let mut want = vec![0.0; n * rows];
                        for t in 0..n {
                            let xt = &x[t * cols..(t + 1) * cols];
                            let mut q = vec![0i8; cols];
                            let s = crate::quant::quantize_act(act, xt, &mut q).unwrap();
                            for r in 0..rows {
                                want[t * rows + r] = match s {
                                    Some(s) => old.dot_int(r, &q) / s,
                                    None => old.dot_f32(r, xt),
                                };
                            }
                        }
                        assert_eq!(
                            bits(&y),
                            bits(&want),
                            "{layout:?} {rows}×{cols} group {group} {st:?} {act:?}"
                        );
                    }
                    let mut row = vec![0.0; cols];
                    for r in 0..rows {
                        m.row_f32(r, &mut row).unwrap();
                        let want: Vec<f32> = (0..cols)
                            .map(|c| old.trits[r * cols + c] as f32 * old.scale(r, c))
                            .collect();
                        assert_eq!(bits(&row), bits(&want));
                    }
                }
            }
        }
    }
    // both layouts went through the packed fast path, per tensor and per group
    assert!(
        checked_fast[0] > 20 && checked_fast[1] > 20,
        "{checked_fast:?}"
    );
}

/// The AVX2 and NEON (`sdot` and widening-multiply) plane dots equal the plain-Rust definition on
/// random codes (including 2bit code 3 and the 13 non-encoding base3 bytes) and extreme
/// activations, over a table of chunk counts.
#[test]
fn simd_chunk_dots_equal_the_plain_definition() {
    let mut rng = Rng(3);
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
        let k = chunk_elems(layout);
        for n_chunks in [1, 2, 3, 5, 7, 40] {
            let codes: Vec<u8> = (0..n_chunks * CHUNK_BYTES)
                .map(|_| rng.next() as u8)
                .collect();
            for extreme in [false, true] {
                let qp: Vec<i8> = (0..n_chunks * k)
                    .map(|i| {
                        if extreme {
                            if i % 2 == 0 {
                                -128
                            } else {
                                127
                            }
                        } else {
                            rng.next() as i8
                        }
                    })
                    .collect();
                let plain = chunks_dot_plain(layout, &codes, &qp);
                assert_eq!(chunks_dot(layout, &codes, &qp), plain, "{layout:?}");
                // every AArch64 kernel, whichever one this process dispatches to
                #[cfg(target_arch = "aarch64")]
                {
                    let what = format!("{layout:?}, {n_chunks} chunks, extreme {extreme}");
                    // SAFETY: NEON is part of every AArch64 target's baseline.
                    let neon = unsafe { arm::dot_neon(layout, &codes, &qp) };
                    assert_eq!(neon, plain, "neon: {what}");
                    if std::arch::is_aarch64_feature_detected!("dotprod") {
                        // SAFETY: dotprod checked just above.
                        let sd = unsafe { arm::dot_dotprod(layout, &codes, &qp) };
                        assert_eq!(sd, plain, "neon-dotprod: {what}");
                    }
                }
                // the plain definition is Σ code·q over the plane order
                let mut want = 0i64;
                for (ci, c) in codes.chunks(CHUNK_BYTES).enumerate() {
                    for p in 0..planes(layout) {
                        for (i, &b) in c.iter().enumerate() {
                            let code = match layout {
                                TernaryLayout::Bits2 => (b >> (2 * p)) & 3,
                                TernaryLayout::Base3 => {
                                    ((b.wrapping_mul(3u8.pow(p as u32)) as u16 * 3) >> 8) as u8
                                }
                            };
                            want += code as i64 * qp[ci * k + p * CHUNK_BYTES + i] as i64;
                        }
                    }
                }
                assert_eq!(plain as i64, want);
            }
        }
    }
}

#[test]
fn invalid_codes_and_scales_are_refused() {
    let enc = |layout, st| Encoding::Ternary {
        layout,
        group: 0,
        scale_type: st,
    };
    let mut b = tern_format::ternary::pack(
        TernaryLayout::Bits2,
        2,
        5,
        &[0; 10],
        0,
        FloatType::F32,
        &[1.0],
    )
    .unwrap();
    let ok = b.clone();
    b[4] |= 3; // row 1, element 0: code 3
    let e = TernaryWeights::from_stored("w", 2, 5, &enc(TernaryLayout::Bits2, FloatType::F32), &b);
    assert!(format!("{}", e.unwrap_err()).contains("row 1, column 0"));
    // code 3 in padding (element 5 of a 5-column row) is ignored, as before
    let mut p = ok.clone();
    p[1] |= 0b0000_1100;
    TernaryWeights::from_stored("w", 2, 5, &enc(TernaryLayout::Bits2, FloatType::F32), &p).unwrap();
    let mut inf = ok.clone();
    let l = inf.len();
    inf[l - 4..].copy_from_slice(&f32::INFINITY.to_le_bytes());
    assert!(TernaryWeights::from_stored(
        "w",
        2,
        5,
        &enc(TernaryLayout::Bits2, FloatType::F32),
        &inf
    )
    .is_err());
    assert!(TernaryWeights::from_stored(
        "w",
        2,
        5,
        &enc(TernaryLayout::Bits2, FloatType::F32),
        &ok[..ok.len() - 1]
    )
    .is_err());
}
