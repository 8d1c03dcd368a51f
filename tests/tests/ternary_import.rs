//! Ternary GGUF tensors (llama.cpp's TQ1_0 and TQ2_0, bitnet.cpp's I2_S) packed into both tern
//! ternary layouts decode to the same trits and scales as the source — and so to the same values
//! as llama.cpp's own dequantization (which `tern_format::ggml` reproduces bit for bit; see
//! ggml_golden.rs) — and the packed models run.

use tern_format::ternary::TernaryRef;
use tern_format::{Encoding, TernFile, TernaryLayout};
use tern_import::gguf::{GgmlType, GgufFile};
use tern_import::pack::PackOptions;

fn check(gguf_name: &str, layout: TernaryLayout) {
    let src = tern_tests::golden(&format!("ggml/{gguf_name}"));
    let dir = tern_tests::scratch(&format!("ternary_import_{gguf_name}_{layout:?}"));
    let out = dir.join("m.tern");
    let opts = PackOptions {
        ternary: layout,
        ..PackOptions::default()
    };
    tern_import::import_path(&src, &out, &opts, &mut |_, _, _| {}).unwrap();
    let g = GgufFile::open(&src).unwrap();
    let f = TernFile::open(&out).unwrap();
    f.verify().unwrap();
    let mut n_ternary = 0;
    for gt in g.tensors() {
        let n = gt.n_elements() as usize;
        let bytes = g.tensor_bytes(gt).unwrap();
        let (trits, block_scales): (Vec<i8>, Vec<f32>) = match gt.ggml_type {
            GgmlType::TQ1_0 => {
                let (t, d) = tern_format::ggml::tq1_0_to_trits(bytes, n).unwrap();
                (t, d.iter().map(|x| x.to_f32()).collect())
            }
            GgmlType::TQ2_0 => {
                let (t, d) = tern_format::ggml::tq2_0_to_trits(bytes, n).unwrap();
                (t, d.iter().map(|x| x.to_f32()).collect())
            }
            GgmlType::I2_S => {
                let (t, s) = tern_format::ggml::i2s_to_trits(bytes, n).unwrap();
                (t, vec![s])
            }
            _ => continue,
        };
        n_ternary += 1;
        let v = f.tensor(&gt.name).unwrap();
        let Encoding::Ternary {
            layout: l,
            group,
            scale_type,
        } = v.info.encoding
        else {
            panic!("{} not ternary", gt.name)
        };
        assert_eq!(l, layout);
        let shape = gt.shape();
        let (rows, cols) = (shape[0], shape[1]);
        let r = TernaryRef::new(l, rows, cols, group, scale_type, v.bytes).unwrap();
        let mut row = vec![0i8; cols as usize];
        for i in 0..rows {
            r.row_trits(i as usize, &mut row).unwrap();
            assert_eq!(
                &row[..],
                &trits[(i * cols) as usize..((i + 1) * cols) as usize],
                "{} row {i}",
                gt.name
            );
        }
        // Scales: every element's scale equals its source block's (per-tensor when all agree).
        for e in (0..n).step_by(97) {
            let (i, c) = ((e as u64) / cols, (e as u64) % cols);
            let want = if block_scales.len() == 1 {
                block_scales[0]
            } else {
                block_scales[e / 256]
            };
            assert_eq!(
                r.scale_at(i as usize, c as usize).unwrap().to_bits(),
                want.to_bits(),
                "{} scale at {e}",
                gt.name
            );
        }
        // Values: identical to llama.cpp's dequantization (TQ) / trit × scale (I2_S).
        let ours = v.to_f32().unwrap();
        let theirs = match gt.ggml_type {
            GgmlType::I2_S => tern_format::ggml::i2s_dequantize(bytes, n).unwrap(),
            t => tern_format::ggml::dequantize(t.block_type().unwrap(), bytes, n).unwrap(),
        };
        assert!(
            ours.iter()
                .zip(&theirs)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{} values",
            gt.name
        );
    }
    assert!(
        n_ternary >= 14,
        "{gguf_name}: only {n_ternary} ternary tensors"
    );
    // The packed model runs on the CPU reference (finite logits).
    let m = tern_reference::Model::load(&f).unwrap();
    let mut kv = tern_reference::KvCache::new(&m, 16).unwrap();
    let logits = m
        .forward(&[1, 5, 9], &mut kv, tern_reference::LogitsWanted::Last)
        .unwrap();
    assert!(logits.iter().all(|x| x.is_finite()));
}

#[test]
fn tq2_0_both_layouts() {
    check("tiny-tq2_0.gguf", TernaryLayout::Bits2);
    check("tiny-tq2_0.gguf", TernaryLayout::Base3);
}

#[test]
fn tq1_0_both_layouts() {
    check("tiny-tq1_0.gguf", TernaryLayout::Bits2);
    check("tiny-tq1_0.gguf", TernaryLayout::Base3);
}

#[test]
fn i2_s_both_layouts() {
    check("tiny-i2_s.gguf", TernaryLayout::Bits2);
    check("tiny-i2_s.gguf", TernaryLayout::Base3);
}

/// llama-quantize gives ternary models a Q6_K token embedding by default: tern keeps it byte for
/// byte and dequantizes it exactly as llama.cpp does.
#[test]
fn q6_k_embeddings_are_kept_and_decode_like_llama_cpp() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tern_tests::golden("ggml/q6k.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for name in ["tiny-tq2_0.gguf", "tiny-tq1_0.gguf"] {
        let src = tern_tests::golden(&format!("ggml/{name}"));
        let out = tern_tests::scratch(&format!("q6k_{name}")).join("m.tern");
        tern_import::import_path(&src, &out, &PackOptions::default(), &mut |_, _, _| {}).unwrap();
        let g = GgufFile::open(&src).unwrap();
        let f = TernFile::open(&out).unwrap();
        for gt in g.tensors().iter().filter(|t| t.ggml_type == GgmlType::Q6_K) {
            let v = f.tensor(&gt.name).unwrap();
            assert_eq!(v.info.encoding, Encoding::Q6K);
            assert_eq!(v.bytes, g.tensor_bytes(gt).unwrap());
            let vals = v.to_f32().unwrap();
            let bytes: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
            let want = &golden[format!("{name}:{}", gt.name)]["sha256"];
            assert_eq!(
                want.as_str().unwrap(),
                sha256_hex(&bytes),
                "{name} {}",
                gt.name
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2);
}

fn sha256_hex(data: &[u8]) -> String {
    // Shell out to Python's hashlib rather than adding a hashing dependency for one test.
    use std::io::Write;
    let mut p = std::process::Command::new("python3")
        .args([
            "-c",
            "import hashlib,sys;print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(data).unwrap();
    String::from_utf8(p.wait_with_output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}
