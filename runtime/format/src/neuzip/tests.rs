#![allow(clippy::unwrap_used)] // tests may unwrap

use super::*;

/// Small deterministic generator (xorshift64*), so the tests need no extra dependency.
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Roughly normal, via the sum of uniforms.
    fn normal(&mut self) -> f32 {
        let s: f64 = (0..4)
            .map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        ((s - 2.0) * 1.7) as f32
    }
}

pub(super) fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}
pub(super) fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}
pub(super) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn u16_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub(super) fn weights(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut r = Rng(seed | 1);
    (0..n).map(|_| r.normal() * scale).collect()
}

const SMALL: Params = Params {
    lanes: 4,
    block_symbols: 37,
};

/// Encode losslessly, decode, and check everything that must agree.
fn roundtrip(dtype: FloatType, data: &[u8], row_len: usize, params: Params) -> Vec<u8> {
    let k = full_mantissa_bits(dtype);
    let blob = encode_with(dtype, k, data, row_len, params).unwrap();
    assert_eq!(blob.len() % 4, 0);
    assert_eq!(
        decode(&blob).unwrap(),
        data,
        "{dtype:?} row_len {row_len} {params:?}"
    );
    check_consistency(&blob, data);
    blob
}

/// Reference (per-lane scalar) decoder agrees with the fast path, and decode_rows with slices.
pub(super) fn check_consistency(blob: &[u8], decoded: &[u8]) {
    let plan = Plan::parse(blob).unwrap();
    let l = Layout::of(plan.dtype);
    let size = plan.dtype.size();
    let exps = decode_exponents_reference(blob).unwrap();
    assert_eq!(exps.len() as u64, plan.n_elements);
    for (i, c) in decoded.chunks_exact(size).enumerate() {
        let x = if size == 2 {
            u32::from(u16::from_le_bytes([c[0], c[1]]))
        } else {
            u32::from_le_bytes([c[0], c[1], c[2], c[3]])
        };
        assert_eq!(exps[i], float::symbol(l, x), "exponent {i}");
    }
    let rows = plan.rows();
    let row_bytes = plan.row_len as usize * size;
    let mut cases = vec![(0, rows), (0, 0)];
    if rows > 0 {
        cases.extend([
            (0, 1),
            (rows - 1, 1),
            (rows / 2, rows - rows / 2),
            (rows / 3, 1.min(rows - rows / 3)),
        ]);
    }
    for (first, n) in cases {
        let got = decode_rows(blob, first, n).unwrap();
        let a = first as usize * row_bytes;
        assert_eq!(
            got,
            &decoded[a..a + n as usize * row_bytes],
            "rows {first}+{n}"
        );
    }
    assert!(decode_rows(blob, rows, 1).is_err());
    assert!(decode_rows(blob, 0, rows + 1).is_err());
    assert!(decode_rows(blob, u64::MAX, 2).is_err());
}

#[test]
fn every_bf16_and_f16_bit_pattern_lossless() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let data = u16_bytes(&all);
    for dtype in [FloatType::Bf16, FloatType::F16] {
        roundtrip(dtype, &data, 256, Params::default());
        roundtrip(dtype, &data, 65536, SMALL);
        roundtrip(
            dtype,
            &data,
            16384,
            Params {
                lanes: 64,
                block_symbols: 5000,
            },
        );
    }
}

#[test]
fn f32_specials_and_random_bits_lossless() {
    let mut v: Vec<u32> = vec![
        0,
        0x8000_0000,
        1,
        0x8000_0001,
        0x007F_FFFF,
        0x0080_0000,
        0x7F7F_FFFF,
        0xFF7F_FFFF,
        0x7F80_0000,
        0xFF80_0000,
        0x7F80_0001,
        0x7FC0_0000,
        0xFFFF_FFFF,
        0x7FBF_FFFF,
        0x3F80_0000,
    ];
    let mut r = Rng(7);
    v.extend((0..5000).map(|_| r.next() as u32));
    v.extend(
        f32_bytes(&weights(3000, 3, 0.02))
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    v.truncate(8015);
    let data = u32_bytes(&v);
    roundtrip(FloatType::F32, &data, 1603, Params::default());
    roundtrip(FloatType::F32, &data, 5, SMALL);
    roundtrip(
        FloatType::F32,
        &data,
        8015,
        Params {
            lanes: 3,
            block_symbols: 1000,
        },
    );
}

#[test]
fn edge_shapes_all_dtypes() {
    for dtype in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
        let enc = |v: &[f32]| match dtype {
            FloatType::F32 => f32_bytes(v),
            FloatType::F16 => f16_bytes(v),
            FloatType::Bf16 => bf16_bytes(v),
        };
        // Empty tensor (row_len 0 and non-zero).
        for rl in [0, 1, 7] {
            let blob = roundtrip(dtype, &[], rl, Params::default());
            assert_eq!(blob.len(), HEADER_BYTES + 4);
            assert_eq!(decode_rows(&blob, 0, 0).unwrap(), Vec::<u8>::new());
        }
        // One element, zeros, ±0.
        roundtrip(dtype, &enc(&[1.5]), 1, Params::default());
        roundtrip(dtype, &enc(&[0.0; 100]), 10, Params::default());
        roundtrip(dtype, &enc(&[0.0, -0.0, 0.0, -0.0, -0.0]), 5, SMALL);
        // One distinct exponent (degenerate stream: pdf = 2048, no words at all).
        let one: Vec<f32> = (0..1000).map(|i| 1.0 + (i % 97) as f32 / 128.0).collect();
        let blob = roundtrip(dtype, &enc(&one), 100, SMALL);
        let plan = Plan::parse(&blob).unwrap();
        assert_eq!((plan.n_syms, plan.n_words), (1, 0));
        assert_eq!(plan.symbol_table(&blob).unwrap()[0].1, 2048);
        // Lengths that are not multiples of lanes or blocks, every geometry.
        for n in [1usize, 2, 31, 32, 33, 63, 65, 4095, 4097, 70001] {
            let v = weights(n, n as u64, 0.05);
            let d = enc(&v);
            roundtrip(dtype, &d, n, Params::default());
            roundtrip(dtype, &d, 1, Params::default());
            if n % 3 == 0 {
                roundtrip(dtype, &d, n / 3, SMALL);
            }
            roundtrip(
                dtype,
                &d,
                n,
                Params {
                    lanes: 5,
                    block_symbols: 64,
                },
            );
        }
    }
}

#[test]
fn geometry_follows_rows() {
    let d = bf16_bytes(&weights(576 * 300, 11, 0.02));
    // Short rows: whole rows per block.
    let blob = encode(FloatType::Bf16, 7, &d, 576).unwrap();
    let p = Plan::parse(&blob).unwrap();
    assert_eq!(
        (p.rows_per_block, p.blocks_per_row, p.block_len),
        (113, 1, 113 * 576)
    );
    assert_eq!(p.n_blocks, 3);
    assert_eq!(p.blocks_for_rows(113, 1), 1..2);
    assert_eq!(p.blocks_for_rows(112, 2), 0..2);
    assert_eq!(p.block_span(2), (226 * 576, (300 - 226) * 576));
    // Long rows: each row cut into equal blocks that never cross a row.
    let blob = encode_with(
        FloatType::Bf16,
        7,
        &d,
        576 * 100,
        Params {
            lanes: 32,
            block_symbols: 10000,
        },
    )
    .unwrap();
    let p = Plan::parse(&blob).unwrap();
    assert_eq!(
        (p.rows_per_block, p.blocks_per_row, p.block_len),
        (1, 6, 9600)
    );
    assert_eq!(p.n_blocks, 18);
    assert_eq!(p.block_span(5), (5 * 9600, 57600 - 5 * 9600));
    assert_eq!(p.block_span(6), (57600, 9600));
    assert_eq!(p.blocks_for_rows(1, 1), 6..12);
    check_consistency(&blob, &d);
}

fn round_one(dtype: FloatType, k: u8, bits: u32) -> Result<u32> {
    let data = match dtype {
        FloatType::F32 => bits.to_le_bytes().to_vec(),
        _ => (bits as u16).to_le_bytes().to_vec(),
    };
    let blob = encode(dtype, k, &data, 1)?;
    let out = decode(&blob).unwrap();
    let got = if out.len() == 4 {
        u32::from_le_bytes([out[0], out[1], out[2], out[3]])
    } else {
        u32::from(u16::from_le_bytes([out[0], out[1]]))
    };
    assert_eq!(
        got,
        float::round_lossy(Layout::of(dtype), u32::from(k), bits).unwrap()
    );
    Ok(got)
}

#[test]
fn lossy_rounding_hand_computed() {
    use FloatType::*;
    let cases: &[(FloatType, u8, u32, u32)] = &[
        // bf16, k=3: 1.0625 (mantissa 0b0001000) is a tie → up to 1.125.
        (Bf16, 3, 0x3F88, 0x3F90),
        (Bf16, 3, 0x3F87, 0x3F80),
        // 1.9375 rounds up, the carry goes into the exponent: 2.0.
        (Bf16, 3, 0x3FF8, 0x4000),
        (Bf16, 3, 0xBFF8, 0xC000),
        // k=1: 1.25 is a tie → 1.5; 1.2421875 → 1.0.
        (Bf16, 1, 0x3FA0, 0x3FC0),
        (Bf16, 1, 0x3F9F, 0x3F80),
        (Bf16, 1, 0x3FE0, 0x4000),
        // k=0: 1.5 → 2.0, 1.4921875 → 1.0, -0.75 → -1.0.
        (Bf16, 0, 0x3FC0, 0x4000),
        (Bf16, 0, 0x3FBF, 0x3F80),
        (Bf16, 0, 0xBF40, 0xBF80),
        // Subnormals: the largest one becomes the smallest normal; tiny ones flush to ±0.
        (Bf16, 3, 0x007F, 0x0080),
        (Bf16, 3, 0x0001, 0x0000),
        (Bf16, 3, 0x8001, 0x8000),
        (Bf16, 0, 0x0040, 0x0080),
        // ±0 stay.
        (Bf16, 0, 0x0000, 0x0000),
        (Bf16, 0, 0x8000, 0x8000),
        // Near the top: saturate to the largest finite k-bit value instead of going to inf.
        (Bf16, 3, 0x7F7F, 0x7F70),
        (Bf16, 3, 0xFF7C, 0xFF70),
        (Bf16, 0, 0x7F40, 0x7F00),
        (Bf16, 3, 0x7F77, 0x7F70),
        (Bf16, 3, 0x7F67, 0x7F60),
        (Bf16, 3, 0x7F68, 0x7F70),
        // inf stays inf; NaN stays NaN (payload truncated, quiet bit set when nothing is left).
        (Bf16, 3, 0x7F80, 0x7F80),
        (Bf16, 0, 0xFF80, 0xFF80),
        (Bf16, 3, 0x7F81, 0x7FC0),
        (Bf16, 3, 0x7FD1, 0x7FD0),
        (Bf16, 1, 0xFFA0, 0xFFC0),
        // f16 (10-bit mantissa), k=3: 1 + 2^-4 tie → 1.125; 65504 (max) stays max (already 3 bits? no: saturates).
        (F16, 3, 0x3C40, 0x3C80),
        (F16, 3, 0x3C3F, 0x3C00),
        (F16, 3, 0x3FC0, 0x4000),
        (F16, 3, 0x7BFF, 0x7B80),
        (F16, 1, 0x03FF, 0x0400),
        (F16, 0, 0x7C00, 0x7C00),
        (F16, 3, 0x7C01, 0x7E00),
        // f32, k=3 and k=0.
        (F32, 3, 0x3F88_0000, 0x3F90_0000),
        (F32, 3, 0x3F87_FFFF, 0x3F80_0000),
        (F32, 3, 0x3FF8_0000, 0x4000_0000),
        (F32, 0, 0x3FC0_0000, 0x4000_0000),
        (F32, 3, 0x7F7F_FFFF, 0x7F70_0000),
        (F32, 1, 0x7F80_0001, 0x7FC0_0000),
        (F32, 3, 0x007F_FFFF, 0x0080_0000),
    ];
    for &(dtype, k, input, want) in cases {
        assert_eq!(
            round_one(dtype, k, input).unwrap(),
            want,
            "{dtype:?} k={k} {input:#x}"
        );
    }
    // NaN cannot be kept with 0 mantissa bits.
    assert!(matches!(
        round_one(Bf16, 0, 0x7FC0),
        Err(FormatError::InvalidArgument(_))
    ));
    assert!(matches!(
        round_one(F32, 0, 0xFFC0_0001),
        Err(FormatError::InvalidArgument(_))
    ));
    // ...but inf can.
    assert_eq!(round_one(F32, 0, 0xFF80_0000).unwrap(), 0xFF80_0000);
}

#[test]
fn lossy_every_bf16_pattern_matches_neuzip_rule() {
    // For every finite bf16 and k in {3,1,0}: decoded == NeuZip's rule ((m >> drop) + carry, carry
    // into the exponent), except the saturation at the top, and the value is within half a k-bit ulp.
    let all: Vec<u16> = (0..=u16::MAX).filter(|b| b & 0x7F80 != 0x7F80).collect();
    for k in [3u8, 1, 0] {
        let blob = encode(FloatType::Bf16, k, &u16_bytes(&all), 1).unwrap();
        let out = decode(&blob).unwrap();
        check_consistency(&blob, &out);
        let drop = 7 - u32::from(k);
        for (i, &b) in all.iter().enumerate() {
            let got = u16::from_le_bytes([out[2 * i], out[2 * i + 1]]);
            let (sign, e, m) = (b & 0x8000, u32::from((b >> 7) & 0xFF), u32::from(b & 0x7F));
            let carry = (m >> (drop - 1)) & 1;
            let mut m2 = (m >> drop) + carry;
            let mut e2 = e;
            if m2 >> k != 0 {
                m2 = 0;
                e2 += 1;
            }
            let want = if e2 == 0xFF {
                sign | 0x7F00 | (((1 << k) - 1) << drop) as u16
            } else {
                sign | (e2 << 7) as u16 | (m2 << drop) as u16
            };
            assert_eq!(got, want, "k={k} {b:#06x}");
            assert_eq!(got & ((1 << drop) - 1), 0);
        }
    }
}

#[test]
fn lossy_roundtrip_sizes() {
    let v = weights(576 * 64, 5, 0.03);
    for dtype in [FloatType::Bf16, FloatType::F16, FloatType::F32] {
        let data = match dtype {
            FloatType::F32 => f32_bytes(&v),
            FloatType::F16 => f16_bytes(&v),
            FloatType::Bf16 => bf16_bytes(&v),
        };
        let mut last = usize::MAX;
        for k in [full_mantissa_bits(dtype), 3, 1, 0] {
            let blob = encode(dtype, k, &data, 576).unwrap();
            let out = decode(&blob).unwrap();
            check_consistency(&blob, &out);
            // Decoding is a fixed point: re-encoding the lossy output gives the same output.
            let again = encode(dtype, k, &out, 576).unwrap();
            assert_eq!(decode(&again).unwrap(), out);
            assert!(blob.len() < last, "{dtype:?} k={k}: {} bytes", blob.len());
            last = blob.len();
        }
    }
}

#[test]
fn quantize_frequencies() {
    // All 256 symbols, one dominating: everyone present keeps pdf ≥ 1, the sum is exact.
    let mut c = [1u64; 256];
    c[120] = 1_000_000_000;
    let t = rans::quantize(&c);
    assert_eq!(t.len(), 256);
    assert!(t.iter().all(|&(_, p)| p >= 1));
    assert_eq!(t.iter().map(|e| e.1).sum::<u32>(), PROB_SCALE);
    assert_eq!(t[120].1, PROB_SCALE - 255);
    // Proportional where possible, deterministic.
    let mut c = [0u64; 256];
    c[3] = 3;
    c[9] = 1;
    assert_eq!(rans::quantize(&c), vec![(3, 1536), (9, 512)]);
    assert_eq!(rans::quantize(&[0; 256]), vec![]);
    assert_eq!(rans::quantize(&[5]), vec![(0, 2048)]);
    let mut r = Rng(99);
    for _ in 0..200 {
        let mut c = [0u64; 256];
        let m = 1 + (r.next() % 256) as usize;
        for x in c.iter_mut().take(m) {
            *x = if r.next() % 3 == 0 {
                0
            } else {
                r.next() % (1 << (r.next() % 40))
            };
        }
        let t = rans::quantize(&c);
        assert_eq!(t.len(), c.iter().filter(|&&x| x > 0).count());
        if !t.is_empty() {
            assert_eq!(t.iter().map(|e| e.1).sum::<u32>(), PROB_SCALE);
            assert!(t.iter().all(|&(s, p)| p >= 1 && c[s as usize] > 0));
        }
        assert_eq!(t, rans::quantize(&c));
    }
}

#[test]
fn deterministic_encoding() {
    let d = bf16_bytes(&weights(100_000, 42, 0.02));
    let a = encode(FloatType::Bf16, 7, &d, 1000).unwrap();
    let b = encode(FloatType::Bf16, 7, &d, 1000).unwrap();
    assert_eq!(a, b);
    let a = encode(FloatType::Bf16, 3, &d, 1000).unwrap();
    assert_eq!(a, encode(FloatType::Bf16, 3, &d, 1000).unwrap());
}

#[test]
fn compresses_near_entropy() {
    let d = bf16_bytes(&weights(576 * 1000, 1, 0.02));
    let blob = encode(FloatType::Bf16, 7, &d, 576).unwrap();
    let s = stats(&blob).unwrap();
    assert!(
        s.exponent_bits_per_symbol < s.exponent_entropy_bits * 1.02,
        "{s:?}"
    );
    assert!(s.ratio_vs_bf16 < 0.72, "{s:?}");
}

#[test]
fn bad_arguments() {
    let d = bf16_bytes(&[1.0; 6]);
    assert!(encode(FloatType::Bf16, 8, &d, 6).is_err());
    assert!(encode(FloatType::Bf16, 7, &d[..11], 1).is_err());
    assert!(encode(FloatType::Bf16, 7, &d, 4).is_err());
    assert!(encode(FloatType::Bf16, 7, &d, 0).is_err());
    assert!(encode_with(
        FloatType::Bf16,
        7,
        &d,
        6,
        Params {
            lanes: 0,
            block_symbols: 10
        }
    )
    .is_err());
    assert!(encode_with(
        FloatType::Bf16,
        7,
        &d,
        6,
        Params {
            lanes: 65,
            block_symbols: 10
        }
    )
    .is_err());
    assert!(encode_with(
        FloatType::Bf16,
        7,
        &d,
        6,
        Params {
            lanes: 2,
            block_symbols: 65537
        }
    )
    .is_err());
}

fn sample_blob() -> Vec<u8> {
    let mut v = weights(600, 8, 0.05);
    v[3] = f32::INFINITY;
    v[5] = 1e-40;
    encode_with(
        FloatType::Bf16,
        7,
        &bf16_bytes(&v),
        60,
        Params {
            lanes: 4,
            block_symbols: 130,
        },
    )
    .unwrap()
}

#[test]
fn truncated_blobs_are_errors() {
    for dtype in [FloatType::Bf16, FloatType::F16, FloatType::F32] {
        let v = weights(300, 8, 0.05);
        let d = match dtype {
            FloatType::F32 => f32_bytes(&v),
            FloatType::F16 => f16_bytes(&v),
            FloatType::Bf16 => bf16_bytes(&v),
        };
        let blob = encode_with(
            dtype,
            full_mantissa_bits(dtype),
            &d,
            30,
            Params {
                lanes: 4,
                block_symbols: 100,
            },
        )
        .unwrap();
        for cut in 0..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "{dtype:?} cut at {cut}");
            assert!(decode_rows(&blob[..cut], 0, 1).is_err());
            assert!(Plan::parse(&blob[..cut]).is_err());
        }
        let mut longer = blob.clone();
        longer.extend_from_slice(&[0; 4]);
        assert!(decode(&longer).is_err());
    }
}

#[test]
fn corrupt_header_fields_are_errors() {
    let blob = sample_blob();
    let good = decode(&blob).unwrap();
    // Every header byte except those whose change can still describe the same stream: flipping any
    // single bit of the header must be rejected.
    for i in 0..HEADER_BYTES {
        for bit in 0..8 {
            let mut b = blob.clone();
            b[i] ^= 1 << bit;
            match decode(&b) {
                // The dtype and mantissa_bits fields can name another valid reading of the same
                // bytes (bf16 k=7 vs f32 k=7); the container's encoding record catches that.
                Ok(_) if i == 5 || i == 6 => {
                    let p = Plan::parse(&b).unwrap();
                    assert!(p.dtype != FloatType::Bf16 || p.mantissa_bits != 7);
                }
                r => assert!(r.is_err(), "header byte {i} bit {bit}"),
            }
        }
    }
    // Bogus offsets and counts.
    let set = |at: usize, v: u32| {
        let mut b = blob.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        b
    };
    for at in (24..80).step_by(4) {
        for v in [
            0,
            1,
            3,
            u32::MAX,
            u32::MAX / 2,
            blob.len() as u32,
            blob.len() as u32 + 4,
        ] {
            let b = set(at, v);
            if b != blob {
                assert!(decode(&b).is_err(), "field at {at} = {v}");
            }
        }
    }
    let mut b = blob.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(decode(&b).is_err());
    assert_eq!(decode(&blob).unwrap(), good);
}

#[test]
fn flipped_bytes_never_panic() {
    let blob = sample_blob();
    let plan = Plan::parse(&blob).unwrap();
    let good = decode(&blob).unwrap();
    let structural = plan.table.offset as usize..plan.words.offset as usize;
    for i in 0..blob.len() {
        for x in [0x01u8, 0x80, 0xFF, 0x10] {
            let mut b = blob.clone();
            b[i] ^= x;
            let r = decode(&b);
            let _ = decode_rows(&b, 2, 3);
            let _ = stats(&b);
            let _ = decode_exponents_reference(&b);
            let table_symbol =
                plan.table.range().contains(&i) && (i - plan.table.offset as usize) % 4 == 0;
            if structural.contains(&i) && !table_symbol {
                // Table (except a symbol's id, which may name another unused symbol), block bases, states, lane starts: a change is always caught (states by the
                // final-state check, everything else by validation).
                assert!(r.is_err(), "byte {i} ^ {x:#x} (structural) accepted");
            }
            if let Ok(out) = r {
                assert_eq!(out.len(), good.len());
            }
        }
    }
}

#[test]
fn word_stream_corruption_is_detected_mostly() {
    // The final-state check catches almost every change to the words (a changed word changes the
    // state, which must land back on exactly 2^15).
    let d = bf16_bytes(&weights(20_000, 77, 0.02));
    let blob = encode_with(
        FloatType::Bf16,
        7,
        &d,
        200,
        Params {
            lanes: 8,
            block_symbols: 2000,
        },
    )
    .unwrap();
    let plan = Plan::parse(&blob).unwrap();
    let (mut caught, mut tried) = (0, 0);
    for i in (plan.words.offset as usize..plan.words.offset as usize + 2 * plan.n_words as usize)
        .step_by(7)
    {
        let mut b = blob.clone();
        b[i] ^= 0x5A;
        tried += 1;
        if decode(&b).is_err() {
            caught += 1;
        }
    }
    assert!(caught * 100 >= tried * 99, "{caught}/{tried}");
}

#[test]
fn reference_lane_decoder_matches_lut_packing() {
    // Hand-checkable: two symbols with pdf 1024 each.
    let lut = rans::build_lut(&[(4, 1024), (9, 1024)]).unwrap();
    assert_eq!(lut[0], (1024 << 8) | 4);
    assert_eq!(lut[1023], (1023 << 20) | (1024 << 8) | 4);
    assert_eq!(lut[1024], (1024 << 8) | 9);
    assert_eq!(lut[2047], (1023 << 20) | (1024 << 8) | 9);
    assert!(rans::build_lut(&[(4, 1024), (9, 1023)]).is_err());
    assert!(rans::build_lut(&[(4, 2048), (9, 1)]).is_err());
    // Encode one lane by hand and decode it with the scalar decoder.
    let mut enc = [(0u32, 0u32); 256];
    enc[4] = (1024, 0);
    enc[9] = (1024, 1024);
    let syms: Vec<u8> = (0..100).map(|i| if i % 3 == 0 { 9 } else { 4 }).collect();
    let mut words = Vec::new();
    let state = rans::encode_lane(syms.iter().copied(), &enc, &mut words);
    assert_eq!(words.len(), 100 / 16); // exactly one bit per symbol: a word per 16 symbols
    let bytes = u16_bytes(&words);
    let mut got = vec![0u8; 100];
    let (x, k) = decode_lane(&lut, state, &bytes, 0, words.len(), 100, |t, s| got[t] = s).unwrap();
    assert_eq!((x, k), (RANS_L, words.len()));
    assert_eq!(got, syms);
    // Running out of words is an error, not a panic.
    assert!(decode_lane(&lut, state, &bytes, 0, words.len() - 1, 100, |_, _| {}).is_err());
}

/// Writes the fuzz seed corpus (`fuzz/regressions/rans_decode/`) when `TERN_BLESS=1`; otherwise
/// checks the committed seeds still decode to what this encoder produces (a format freeze).
#[test]
fn fuzz_seeds() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/rans_decode");
    let v = weights(200, 21, 0.05);
    let mut specials = bf16_bytes(&v[..40]);
    specials.extend(u16_bytes(&[
        0x7F80, 0xFF81, 0x0001, 0x8000, 0x0000, 0x7FFF, 0x3F80, 0x0080,
    ]));
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "bf16_lossless",
            encode_with(
                FloatType::Bf16,
                7,
                &bf16_bytes(&v),
                20,
                Params {
                    lanes: 4,
                    block_symbols: 50,
                },
            )
            .unwrap(),
        ),
        (
            "bf16_specials",
            encode_with(
                FloatType::Bf16,
                7,
                &specials,
                8,
                Params {
                    lanes: 3,
                    block_symbols: 16,
                },
            )
            .unwrap(),
        ),
        (
            "bf16_m3",
            encode_with(
                FloatType::Bf16,
                3,
                &bf16_bytes(&v),
                100,
                Params {
                    lanes: 8,
                    block_symbols: 40,
                },
            )
            .unwrap(),
        ),
        (
            "f16_lossless",
            encode_with(
                FloatType::F16,
                10,
                &f16_bytes(&v),
                50,
                Params {
                    lanes: 4,
                    block_symbols: 64,
                },
            )
            .unwrap(),
        ),
        (
            "f32_m1",
            encode_with(
                FloatType::F32,
                1,
                &f32_bytes(&v[..64]),
                64,
                Params {
                    lanes: 2,
                    block_symbols: 20,
                },
            )
            .unwrap(),
        ),
        (
            "f32_lossless",
            encode_with(
                FloatType::F32,
                23,
                &f32_bytes(&v[..30]),
                10,
                Params {
                    lanes: 32,
                    block_symbols: 1000,
                },
            )
            .unwrap(),
        ),
        (
            "one_exponent",
            encode(FloatType::Bf16, 7, &bf16_bytes(&[1.0, 1.5, 1.25, 1.75]), 2).unwrap(),
        ),
        ("empty", encode(FloatType::F16, 10, &[], 0).unwrap()),
    ];
    if std::env::var_os("TERN_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, blob) in &seeds {
            std::fs::write(dir.join(format!("seed_{name}.bin")), blob).unwrap();
        }
    }
    for (name, blob) in &seeds {
        decode(blob).unwrap();
        let p = dir.join(format!("seed_{name}.bin"));
        let stored = std::fs::read(&p)
            .unwrap_or_else(|e| panic!("{}: {e} (run with TERN_BLESS=1)", p.display()));
        assert_eq!(
            &stored, blob,
            "{name}: encoder output changed; the format is frozen (bump VERSION)"
        );
    }
}

/// Throughput on a 28M-element bf16 tensor (SmolLM2's embedding size):
/// `cargo test --release -p tern-format --lib neuzip::tests::bench_decode -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_decode() {
    let n = 49152 * 576;
    let d = bf16_bytes(&weights(n, 123, 0.02));
    let t = std::time::Instant::now();
    let blob = encode(FloatType::Bf16, 7, &d, 576).unwrap();
    let enc = t.elapsed().as_secs_f64();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let out = decode(&blob).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        assert!(out == d);
    }
    let t = std::time::Instant::now();
    let ex = decode_exponents_reference(&blob).unwrap();
    let refs = t.elapsed().as_secs_f64();
    assert_eq!(ex.len(), n);
    let t = std::time::Instant::now();
    stats(&blob).unwrap();
    println!(
        "stats (exponent decode + histogram) {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let t = std::time::Instant::now();
    for r in 0..100u64 {
        decode_rows(&blob, r * 491, 1).unwrap();
    }
    let row = t.elapsed().as_secs_f64() / 100.0;
    let mb = d.len() as f64 / 1e6;
    println!(
        "bf16 {n} elements: encode {enc:.3} s ({:.0} MB/s), decode {best:.3} s ({:.0} MB/s), reference lanes {refs:.3} s, row lookup {:.1} µs; {:.2}% of bf16",
        mb / enc,
        mb / best,
        row * 1e6,
        100.0 * blob.len() as f64 / d.len() as f64
    );
}
