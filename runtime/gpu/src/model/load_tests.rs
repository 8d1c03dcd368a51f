//! Unit tests of `load.rs` (row concatenation of stacked q/k/v and gate/up).

use super::*;
use tern_format::{ternary, TensorInfo, TernaryLayout};

fn info(name: &str, rows: u64, cols: u64, encoding: Encoding, size: usize) -> TensorInfo {
    TensorInfo {
        name: name.into(),
        shape: vec![rows, cols],
        encoding,
        offset: 0,
        size: size as u64,
        checksum: 0,
    }
}

/// Ternary bytes: valid 2-bit codes (0..=2), then the scales (f32).
fn ternary_bytes(rows: u64, cols: u64, scales: &[f32], seed: u64) -> Vec<u8> {
    let words = ternary::words_per_row(TernaryLayout::Bits2, cols) * rows;
    let mut s = seed;
    let mut b = Vec::new();
    for _ in 0..words {
        let mut w = 0u32;
        for j in 0..16 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w |= (((s >> 33) % 3) as u32) << (2 * j);
        }
        b.extend_from_slice(&w.to_le_bytes());
    }
    for x in scales {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b
}

/// The stacked tensor decodes to the rows of the three, in order (per-tensor scales become
/// per-row ones; grouped scales are stacked); ggml blocks likewise; mixed storage is not
/// stacked.
#[test]
fn concat_rows_stacks_rows() {
    let cols = 64;
    for group in [0u32, 32] {
        let enc = Encoding::Ternary {
            layout: TernaryLayout::Bits2,
            group,
            scale_type: FloatType::F32,
        };
        let shapes = [(5u64, 0.5f32), (3, 0.25), (3, 2.0)];
        let mut infos = Vec::new();
        let mut datas = Vec::new();
        for (i, &(rows, sc)) in shapes.iter().enumerate() {
            let n = if group == 0 { 1 } else { rows * cols / 32 };
            let scales: Vec<f32> = (0..n).map(|k| sc + k as f32).collect();
            let d = ternary_bytes(rows, cols, &scales, i as u64 + 7);
            infos.push(info("w", rows, cols, enc.clone(), d.len()));
            datas.push(d);
        }
        let views: Vec<TensorView<'_>> = infos
            .iter()
            .zip(&datas)
            .map(|(info, bytes)| TensorView { info, bytes })
            .collect();
        let st = concat_rows(&views).unwrap().unwrap();
        assert_eq!(st.rows, 11);
        assert_eq!(st.shares.iter().sum::<u64>(), st.bytes.len() as u64);
        let got = st.encoding.decode_f32(&[st.rows, cols], &st.bytes).unwrap();
        let want: Vec<f32> = views.iter().flat_map(|v| v.to_f32().unwrap()).collect();
        assert_eq!(got, want, "group {group}");
        assert!(got.iter().any(|&x| x != 0.0));
    }
    // ggml Q8_0: one block per row (f16 scale 1.0, then 32 int8)
    let row = |r: u8| -> Vec<u8> {
        let mut b = vec![0x00, 0x3c];
        b.extend((0..32).map(|i| i * 3 + r));
        b
    };
    let a: Vec<u8> = (0..2).flat_map(row).collect();
    let b: Vec<u8> = (5..6).flat_map(row).collect();
    let (ia, ib) = (
        info("a", 2, 32, Encoding::Q8_0, a.len()),
        info("b", 1, 32, Encoding::Q8_0, b.len()),
    );
    let views = [
        TensorView {
            info: &ia,
            bytes: &a,
        },
        TensorView {
            info: &ib,
            bytes: &b,
        },
    ];
    let st = concat_rows(&views).unwrap().unwrap();
    let got = st.encoding.decode_f32(&[3, 32], &st.bytes).unwrap();
    let want: Vec<f32> = views.iter().flat_map(|v| v.to_f32().unwrap()).collect();
    assert_eq!(got, want);
    // different storage: kept apart
    let ic = info("c", 1, 32, Encoding::Q4_1, 20);
    let c = vec![0u8; 20];
    let mixed = [
        TensorView {
            info: &ia,
            bytes: &a,
        },
        TensorView {
            info: &ic,
            bytes: &c,
        },
    ];
    assert!(concat_rows(&mixed).unwrap().is_none());
}
