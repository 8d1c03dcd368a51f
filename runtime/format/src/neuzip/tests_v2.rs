//! Layout 2 (groups of 4 symbols over many short lanes): round trips on odd sizes and block
//! boundaries, agreement with layout 1 and the scalar reference, hostile inputs, frozen seeds.
#![allow(clippy::unwrap_used)] // tests may unwrap

use super::tests::{bf16_bytes, check_consistency, f16_bytes, f32_bytes, weights, Rng};
use super::*;

fn data_of(dtype: FloatType, v: &[f32]) -> Vec<u8> {
    match dtype {
        FloatType::F32 => f32_bytes(v),
        FloatType::F16 => f16_bytes(v),
        FloatType::Bf16 => bf16_bytes(v),
    }
}

#[test]
fn lane_positions_cover_each_block_once() {
    for (len, lanes, group) in [
        (1, 1, 4),
        (7, 3, 4),
        (37, 4, 4),
        (128, 32, 4),
        (129, 32, 4),
        (50, 8, 1),
    ] {
        let mut seen = vec![0u32; len as usize];
        for l in 0..lanes {
            let n = lane_len(len, lanes, group, l);
            let mut last = None;
            for t in 0..n {
                let p = lane_pos(lanes, group, l, t);
                assert!(last.is_none_or(|q| q < p), "lane order");
                last = Some(p);
                seen[p] += 1;
            }
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "{len} {lanes} {group}: {seen:?}"
        );
    }
}

#[test]
fn v2_round_trips_odd_sizes_and_matches_v1() {
    let mut r = Rng(7);
    let shapes: &[(usize, usize)] = &[
        (1, 1),
        (1, 3),
        (3, 7),
        (5, 13),
        (2, 8193),
        (17, 600),
        (1, 4097),
    ];
    let params = [
        None,
        Some(Params {
            lanes: 1,
            block_symbols: 1,
        }),
        Some(Params {
            lanes: 3,
            block_symbols: 5,
        }),
        Some(Params {
            lanes: 32,
            block_symbols: 4096,
        }),
        Some(Params {
            lanes: 64,
            block_symbols: 333,
        }),
        Some(Params {
            lanes: 7,
            block_symbols: 65536,
        }),
    ];
    for &(rows, cols) in shapes {
        let mut v = weights(rows * cols, r.next(), 0.05);
        if v.len() > 4 {
            v[2] = f32::INFINITY;
            v[3] = -0.0;
            v[4] = 1e-40;
        }
        for dtype in [FloatType::Bf16, FloatType::F16, FloatType::F32] {
            let d = data_of(dtype, &v);
            for k in [full_mantissa_bits(dtype), 3, 0] {
                let v1 = decode(&encode(dtype, k, &d, cols).unwrap()).unwrap();
                for p in params {
                    let blob = match p {
                        None => encode_v2(dtype, k, &d, cols).unwrap(),
                        Some(p) => encode_v2_with(dtype, k, &d, cols, p).unwrap(),
                    };
                    let plan = Plan::parse(&blob).unwrap();
                    assert_eq!((plan.version, plan.group), (2, 4));
                    let out = decode(&blob).unwrap();
                    assert!(out == v1, "{dtype:?} k={k} {rows}x{cols} {p:?}");
                    if k == full_mantissa_bits(dtype) {
                        assert!(out == d);
                    }
                    check_consistency(&blob, &out);
                }
            }
        }
    }
}

#[test]
fn v2_default_geometry_and_size() {
    // 6912 × 2560 shape rows, cut smaller to stay fast: rows of 2560 give 3-row blocks of 7680.
    let d = bf16_bytes(&weights(2560 * 64, 3, 0.02));
    let blob = encode_v2(FloatType::Bf16, 7, &d, 2560).unwrap();
    let p = Plan::parse(&blob).unwrap();
    assert_eq!((p.lanes, p.block_len, p.rows_per_block), (32, 7680, 3));
    let s = stats(&blob).unwrap();
    let s1 = stats(&encode(FloatType::Bf16, 7, &d, 2560).unwrap()).unwrap();
    // 32 lanes × 6 bytes per 7680 symbols: 0.2 bits per symbol more than layout 1.
    assert!(
        s.exponent_bits_per_symbol < s1.exponent_bits_per_symbol + 0.25,
        "{s:?} {s1:?}"
    );
    assert!(
        s.exponent_bits_per_symbol < s.exponent_entropy_bits + 0.25,
        "{s:?}"
    );
    assert!(s.ratio_vs_bf16 < 0.72, "{s:?}");
}

fn sample_v2() -> Vec<u8> {
    let mut v = weights(600, 8, 0.05);
    v[3] = f32::INFINITY;
    v[5] = 1e-40;
    encode_v2_with(
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
fn v2_hostile_inputs_are_typed_errors() {
    let blob = sample_v2();
    let good = decode(&blob).unwrap();
    let plan = Plan::parse(&blob).unwrap();
    for cut in 0..blob.len() {
        assert!(decode(&blob[..cut]).is_err(), "cut at {cut}");
        assert!(Plan::parse(&blob[..cut]).is_err());
    }
    for i in 0..HEADER_BYTES {
        for bit in 0..8 {
            let mut b = blob.clone();
            b[i] ^= 1 << bit;
            match decode(&b) {
                Ok(_) if i == 5 || i == 6 => {}
                r => assert!(r.is_err(), "header byte {i} bit {bit}"),
            }
        }
    }
    let structural = plan.table.offset as usize..plan.words.offset as usize;
    for i in 0..blob.len() {
        for x in [0x01u8, 0x80, 0xFF] {
            let mut b = blob.clone();
            b[i] ^= x;
            let r = decode(&b);
            let _ = decode_rows(&b, 2, 3);
            let _ = stats(&b);
            let _ = decode_exponents_reference(&b);
            let table_symbol =
                plan.table.range().contains(&i) && (i - plan.table.offset as usize) % 4 == 0;
            if structural.contains(&i) && !table_symbol {
                assert!(r.is_err(), "byte {i} ^ {x:#x} (structural) accepted");
            }
            if let Ok(out) = r {
                assert_eq!(out.len(), good.len());
            }
        }
    }
    // An unknown layout version names the remedy.
    let mut b = blob.clone();
    b[4] = 3;
    let e = decode(&b).unwrap_err().to_string();
    assert!(e.contains("re-pack"), "{e}");
    // Reading a layout-2 blob as layout 1 (or back) fails the final-state checks.
    let mut b = blob.clone();
    b[4] = 1;
    assert!(decode(&b).is_err());
}

/// Layout-1 seeds stay byte-identical (tests.rs `fuzz_seeds`); these freeze layout 2 and are part
/// of the `rans_decode` fuzz corpus. `TERN_BLESS=1` rewrites them.
#[test]
fn fuzz_seeds_v2() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/rans_decode");
    let v = weights(200, 21, 0.05);
    let p = |lanes, block_symbols| Params {
        lanes,
        block_symbols,
    };
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "v2_bf16_lossless",
            encode_v2_with(FloatType::Bf16, 7, &bf16_bytes(&v), 20, p(4, 50)).unwrap(),
        ),
        (
            "v2_bf16_m3",
            encode_v2_with(FloatType::Bf16, 3, &bf16_bytes(&v), 100, p(3, 41)).unwrap(),
        ),
        (
            "v2_f16_odd",
            encode_v2_with(FloatType::F16, 10, &f16_bytes(&v[..63]), 21, p(2, 13)).unwrap(),
        ),
        (
            "v2_f32_m1",
            encode_v2(FloatType::F32, 1, &f32_bytes(&v[..64]), 64).unwrap(),
        ),
    ];
    if std::env::var_os("TERN_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, blob) in &seeds {
            std::fs::write(dir.join(format!("seed_{name}.bin")), blob).unwrap();
        }
    }
    for (name, blob) in &seeds {
        decode(blob).unwrap();
        let path = dir.join(format!("seed_{name}.bin"));
        let stored = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with TERN_BLESS=1)", path.display()));
        assert_eq!(
            &stored, blob,
            "{name}: layout 2 encoder output changed (bump VERSION)"
        );
    }
}

/// CPU decode throughput, layout 1 vs layout 2, on a 28M-element bf16 tensor:
/// `cargo test --release -p tern-format --lib neuzip::tests_v2::bench_v1_v2 -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_v1_v2() {
    let n = 49152 * 576;
    let d = bf16_bytes(&weights(n, 123, 0.02));
    for (name, blob) in [
        ("v1", encode(FloatType::Bf16, 7, &d, 576).unwrap()),
        ("v2", encode_v2(FloatType::Bf16, 7, &d, 576).unwrap()),
    ] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let out = decode(&blob).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            assert!(out == d);
        }
        let t = std::time::Instant::now();
        for r in 0..100u64 {
            decode_rows(&blob, r * 491, 1).unwrap();
        }
        let row = t.elapsed().as_secs_f64() / 100.0;
        println!(
            "{name}: decode {best:.3} s ({:.0} MB/s of bf16), row lookup {:.1} µs, {:.2}% of bf16",
            d.len() as f64 / 1e6 / best,
            row * 1e6,
            100.0 * blob.len() as f64 / d.len() as f64
        );
    }
}
