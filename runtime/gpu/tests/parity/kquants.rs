//! Q5_0, Q5_1, IQ4_NL and the K-quants Q2_K, Q3_K, Q4_K, Q5_K (`ggml_kquants.wgsl`'s `kq4` in
//! the ggml GEMV, GEMM, embedding and CCE kernels) against `tern-reference`: the embedding
//! lookup (the GPU's dequantization) bit for bit, the products NMSE ≤ 1e-10 (GEMV, GEMM) and the
//! CCE head like the other ggml heads. Odd shapes: 1 row, odd row counts, an odd number of blocks
//! per row (3, 5, 33 32-element blocks; 1, 3, 5 super-blocks), token counts around the GEMM tile,
//! weights split across 64 KiB bindings. Random-byte blocks: every scale, min and high-bit pattern
//! occurs (`random_blocks`). Bit-exactness against llama.cpp itself: tests/tests/kquants.rs. Case
//! names start with "kq " (`TERN_PARITY_FILTER="kq "` runs them alone).

use super::cce::{run_cce, HeadKind};
use super::float_ops::run_embed;
use super::gemm::{run_ggml_gemm, Path};
use super::*;

const TYPES: [GgmlType; 7] = [
    GgmlType::Q4K,
    GgmlType::Q5_0,
    GgmlType::Q5K,
    GgmlType::Q5_1,
    GgmlType::Q3K,
    GgmlType::Q2K,
    GgmlType::Iq4Nl,
];

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    for q in TYPES {
        let be = q.block_elems();
        // (rows, blocks per row, tokens, path, split)
        let shapes: [(usize, usize, usize, Path, bool); 9] = [
            (1, 1, 1, Path::Gemv, false),
            (33, 3, 1, Path::Gemv, false),
            (13, 5, 3, Path::Gemv, false),
            (257, if be == 32 { 33 } else { 3 }, 2, Path::Gemv, false),
            (300, if be == 32 { 35 } else { 5 }, 2, Path::Gemv, true),
            (33, 3, 7, Path::Gemm, false),
            (65, 5, 33, Path::Gemm, false),
            (70, if be == 32 { 33 } else { 3 }, 9, Path::Gemm, false),
            (500, 4, 15, Path::Gemm, true),
        ];
        for (rows, nb, tokens, path, split) in shapes {
            let cols = nb * be;
            let s = if split { " split" } else { "" };
            let kind = if matches!(path, Path::Gemm) {
                "gemm"
            } else {
                "gemv"
            };
            v.push((
                format!("kq ggml_{kind} {q:?} {rows}×{cols} tokens {tokens}{s}"),
                split,
                Box::new(move |x, r| run_ggml_gemm(x, r, path, q, rows, cols, tokens)),
            ));
        }
        for (rows, cols, split) in [(1, be, false), (7, 3 * be, false), (200, 2 * be, true)] {
            v.push((
                format!(
                    "kq embed_rows {q:?} {rows}×{cols}{s}",
                    s = if split { " split" } else { "" }
                ),
                split,
                Box::new(move |c, r| run_embed(c, r, Err(q), rows, cols)),
            ));
        }
        let kind = std::sync::Arc::new(HeadKind::Ggml(q));
        let d = if be == 32 { 96 } else { 256 };
        v.push((
            format!("kq cce {q:?} n 7 vocab 1017 d {d}"),
            false,
            Box::new(move |x, r| run_cce(x, r, &kind, 7, 1017, d, false)),
        ));
    }
    v
}
