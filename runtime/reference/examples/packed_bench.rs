//! Ternary GEMV speed: the packed dots on the stored codes (`Matrix::matmul`, int8 activations)
//! against the previous representation (one `i8` trit per weight, the same i32 group sums), on
//! the 2B4T shapes (FFN 6912 × 2560 and 2560 × 6912), one token, rows split over the rayon pool.
//! The two run interleaved, so a shared machine's load hits both alike.
//!
//! `cargo run --release -p tern-reference --example packed_bench`

use std::time::Instant;

use tern_format::{ActQuant, Encoding, FloatType, TernaryLayout};
use tern_reference::{quantize_act_int8, MatmulOptions, Matrix};

/// The previous inner loop, compiled with AVX2 as the reference's hot loops are.
fn old_dot(t: &[i8], q: &[i8]) -> i32 {
    #[inline(always)]
    fn imp(t: &[i8], q: &[i8]) -> i32 {
        t.iter().zip(q).map(|(&a, &b)| a as i32 * b as i32).sum()
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn fast(t: &[i8], q: &[i8]) -> i32 {
        imp(t, q)
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the features were just detected.
        return unsafe { fast(t, q) };
    }
    imp(t, q)
}

fn main() {
    let mut seed = 5u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    for (rows, cols) in [(6912usize, 2560usize), (2560, 6912)] {
        let trits: Vec<i8> = (0..rows * cols).map(|_| (next() % 3) as i8 - 1).collect();
        let x: Vec<f32> = (0..cols)
            .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let mut q = vec![0i8; cols];
        let s = quantize_act_int8(&x, &mut q).unwrap();
        let scale = 0.0123f32;
        for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
            let bytes = tern_format::ternary::pack(
                layout,
                rows as u64,
                cols as u64,
                &trits,
                0,
                FloatType::F32,
                &[scale],
            )
            .unwrap();
            let enc = Encoding::Ternary {
                layout,
                group: 0,
                scale_type: FloatType::F32,
            };
            let m = Matrix::from_encoded("w", rows, cols, &enc, &bytes).unwrap();
            let mm = MatmulOptions::default();
            let mut y = vec![0.0f32; rows];
            let mut y_old = vec![0.0f32; rows];
            // the previous path: trits one per byte, i32 sum per row, rows over the rayon pool
            let old = |y: &mut [f32]| {
                use rayon::prelude::*;
                y.par_chunks_mut(64).enumerate().for_each(|(ci, yc)| {
                    for (i, o) in yc.iter_mut().enumerate() {
                        let r = ci * 64 + i;
                        let t = &trits[r * cols..(r + 1) * cols];
                        let acc = old_dot(t, &q);
                        *o = (0.0 + acc as f32 * scale) / s;
                    }
                });
            };
            let (mut t_new, mut t_old) = (f64::MAX, f64::MAX);
            for _ in 0..15 {
                let t0 = Instant::now();
                m.matmul(&x, ActQuant::Int8, &mm, &mut y).unwrap();
                t_new = t_new.min(t0.elapsed().as_secs_f64());
                let t0 = Instant::now();
                old(&mut y_old);
                t_old = t_old.min(t0.elapsed().as_secs_f64());
            }
            assert_eq!(
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y_old.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            println!(
                "{rows:>5} × {cols:<5} {layout:?}: packed {:.2} ms ({:.1} GB/s of codes), one byte per trit {:.2} ms; speedup {:.2}×",
                t_new * 1e3,
                bytes.len() as f64 / t_new / 1e9,
                t_old * 1e3,
                t_old / t_new
            );
        }
    }
}
