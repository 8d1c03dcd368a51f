//! The CPU kernel path (`simd.rs`): the one detected is the one that runs, through the public
//! matmul, for every kernel with hand-written versions.

use tern_format::ggml::BlockType;
use tern_format::{ActQuant, Encoding, FloatType};

use crate::ggml_cpu;
use crate::ggml_dot;
use crate::matmul::{GgmlActivations, MatmulOptions, Matrix};

/// The CPU kernel path is the best this CPU has (or the one `TERN_EXPECT_CPU_PATH` names:
/// scripts/qemu-aarch64-test.sh sets it per emulated CPU), public matmuls of every kind with a
/// hand-written kernel (Q8_0 / Q4_0 / Q4_1 block dots, packed 2bit and base3 ternary dots)
/// actually run that path's kernels, and their outputs equal the plain definitions bit for bit.
#[test]
fn the_cpu_kernel_path_is_the_one_detected_and_the_one_that_runs() {
    use crate::simd::{hits, path, Path};
    let name = crate::cpu_kernel_path();
    eprintln!("CPU kernel path: {name}");
    if let Ok(want) = std::env::var("TERN_EXPECT_CPU_PATH") {
        assert_eq!(name, want, "TERN_EXPECT_CPU_PATH");
    }
    let scalar =
        std::env::var("TERN_CPU_SIMD").is_ok_and(|v| v.trim().eq_ignore_ascii_case("scalar"));
    #[cfg(target_arch = "x86_64")]
    let best = if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
    {
        "avx2"
    } else {
        "scalar"
    };
    #[cfg(target_arch = "aarch64")]
    let best = if std::arch::is_aarch64_feature_detected!("dotprod") {
        "neon-dotprod"
    } else {
        "neon"
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let best = "scalar";
    assert_eq!(name, if scalar { "scalar" } else { best });

    let p = path();
    let serial = MatmulOptions {
        ggml_activations: GgmlActivations::LlamaCpp,
        parallel: false, // on this thread, whose kernel calls `hits` counts
    };
    let mut st = 0x9e37_79b9_u32;
    let mut next = move || {
        st ^= st << 13;
        st ^= st >> 17;
        st ^= st << 5;
        st
    };
    let (rows, nb, n) = (5, 7, 3);
    let cols = nb * ggml_dot::QK;
    let x: Vec<f32> = (0..n * cols)
        .map(|_| (next() % 2001) as f32 / 100.0 - 10.0)
        .collect();
    for (bt, enc) in [
        (BlockType::Q8_0, Encoding::Q8_0),
        (BlockType::Q4_0, Encoding::Q4_0),
        (BlockType::Q4_1, Encoding::Q4_1),
    ] {
        let bb = bt.block_bytes();
        let mut bytes = Vec::new();
        for _ in 0..rows * nb {
            bytes.extend(half::f16::from_f32(0.001 * (1 + next() % 50) as f32).to_le_bytes());
            if bt == BlockType::Q4_1 {
                bytes.extend(half::f16::from_f32(-0.01 * (next() % 9) as f32).to_le_bytes());
            }
            while bytes.len() % bb != 0 {
                bytes.push(next() as u8);
            }
        }
        let m = Matrix::from_encoded("w", rows, cols, &enc, &bytes).unwrap();
        let want_path = if p == Path::Avx2 && bt == BlockType::Q4_0 {
            Path::Scalar // no AVX2 Q4_0 kernel: the plain code
        } else {
            p
        };
        let before = hits::get(want_path);
        let mut y = vec![0.0; n * rows];
        m.matmul(&x, ActQuant::None, &serial, &mut y).unwrap();
        assert!(
            hits::get(want_path) > before,
            "{bt:?}: {want_path:?} did not run"
        );
        let (mut q, mut d, mut mm) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rows {
            ggml_dot::unpack_row(
                bt,
                &bytes[r * nb * bb..(r + 1) * nb * bb],
                &mut q,
                &mut d,
                &mut mm,
            );
            for t in 0..n {
                let xt = &x[t * cols..(t + 1) * cols];
                let want = if bt == BlockType::Q4_1 {
                    ggml_cpu::dot_q4_1_q8_1(&q, &d, &mm, &ggml_dot::quantize_row_q8_1(xt).unwrap())
                } else {
                    ggml_cpu::dot_q8_0_q8_0_tinyblas(
                        &q,
                        &d,
                        &ggml_dot::quantize_row_q8_0(xt).unwrap(),
                    )
                };
                assert_eq!(
                    y[t * rows + r].to_bits(),
                    want.to_bits(),
                    "{bt:?} row {r} token {t}"
                );
            }
        }
    }
    // packed ternary (2bit and base3; 300 columns: a partial last chunk)
    let tcols = 300;
    let trits: Vec<i8> = (0..rows * tcols).map(|_| (next() % 3) as i8 - 1).collect();
    let xt: Vec<f32> = (0..n * tcols)
        .map(|_| (next() % 2001) as f32 / 100.0 - 10.0)
        .collect();
    for layout in [
        tern_format::TernaryLayout::Bits2,
        tern_format::TernaryLayout::Base3,
    ] {
        let bytes = tern_format::ternary::pack(
            layout,
            rows as u64,
            tcols as u64,
            &trits,
            0,
            FloatType::F32,
            &[0.5],
        )
        .unwrap();
        let enc = Encoding::Ternary {
            layout,
            group: 0,
            scale_type: FloatType::F32,
        };
        let m = Matrix::from_encoded("t", rows, tcols, &enc, &bytes).unwrap();
        let before = hits::get(p);
        let mut y = vec![0.0; n * rows];
        m.matmul(&xt, ActQuant::Int8, &serial, &mut y).unwrap();
        assert!(hits::get(p) > before, "{layout:?}: {p:?} did not run");
    }
}
