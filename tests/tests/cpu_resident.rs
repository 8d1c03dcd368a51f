//! The CPU fallback holds the weights as stored (issue 12): its resident weight bytes
//! (`tern_reference::Model::resident_bytes`, reported by the engine as
//! `MemoryReport::host_resident_bytes`) stay within 1.25× the file's tensor bytes, on SmolLM2-135M
//! (Q8_0/Q4_1 + f32 norms) and on tiny BitNet models packed from llama.cpp's TQ1_0/TQ2_0 and
//! bitnet.cpp's I2_S, in both ternary layouts and with raw and NeuZip floats. Before, ternary
//! tensors took one byte per weight and float tensors four.

use tern_format::{TernFile, TernaryLayout};
use tern_import::pack::{FloatMode, PackOptions};

fn tensor_bytes(f: &TernFile) -> u64 {
    f.tensors().iter().map(|t| t.size).sum()
}

fn check(f: &TernFile, what: &str) -> f64 {
    let m = tern_reference::Model::load(f).unwrap();
    let file = tensor_bytes(f);
    let resident = m.resident_bytes();
    let ratio = resident as f64 / file as f64;
    eprintln!("{what}: resident {resident} B, file tensors {file} B, ratio {ratio:.3}");
    assert!(
        resident as f64 <= 1.25 * file as f64,
        "{what}: resident {resident} > 1.25 × {file}"
    );
    // The model still runs.
    let mut kv = tern_reference::KvCache::new(&m, 8).unwrap();
    let logits = m
        .forward(&[1, 2, 3], &mut kv, tern_reference::LogitsWanted::Last)
        .unwrap();
    assert!(logits.iter().all(|x| x.is_finite()), "{what}: logits");
    ratio
}

#[test]
fn smollm2_resident_within_file_size() {
    let Some(home) = std::env::var_os("HOME") else {
        panic!("HOME not set");
    };
    let path = std::path::Path::new(&home).join(".cache/tern/SmolLM2-135M-Instruct.tern");
    let path = if path.exists() {
        path
    } else {
        // pack it from the cached GGUF (downloaded on first use)
        let dir = tern_tests::scratch("cpu_resident_smollm2");
        let out = dir.join("m.tern");
        tern_import::import_path(
            &tern_tests::smollm2_gguf(),
            &out,
            &PackOptions::default(),
            &mut |_, _, _| {},
        )
        .unwrap();
        out
    };
    let f = TernFile::open(&path).unwrap();
    check(&f, "SmolLM2-135M");
    // and the engine reports it
    let model = tern_engine::Model::from_file(&f).unwrap();
    let mem = model.report().memory;
    let resident = mem.host_resident_bytes.expect("CPU reports resident bytes");
    assert!(resident as f64 <= 1.25 * mem.weight_bytes as f64);
}

#[test]
fn tiny_bitnet_resident_within_file_size() {
    for gguf in ["tiny-tq1_0.gguf", "tiny-tq2_0.gguf", "tiny-i2_s.gguf"] {
        for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
            for floats in [FloatMode::Raw, FloatMode::NeuZipLossy(3)] {
                let what = format!("{gguf} {layout:?} {}", floats.name());
                let dir = tern_tests::scratch(&format!(
                    "cpu_resident_{gguf}_{layout:?}_{}",
                    floats.name()
                ));
                let out = dir.join("m.tern");
                let opts = PackOptions {
                    ternary: layout,
                    floats,
                    ..PackOptions::default()
                };
                let src = tern_tests::golden(&format!("ggml/{gguf}"));
                tern_import::import_path(&src, &out, &opts, &mut |_, _, _| {}).unwrap();
                let f = TernFile::open(&out).unwrap();
                let ratio = check(&f, &what);
                // raw floats: nothing is widened (the norms are stored as f32 already); with
                // NeuZip only the small norm vectors are decoded (to f32)
                if matches!(floats, FloatMode::Raw) {
                    assert!(ratio <= 1.0001, "{what}: ratio {ratio}");
                }
            }
        }
    }
}

/// NeuZip on the CPU follows the GPU's `--max-memory` rule: without a budget (or with one that
/// fits) the matrices are decoded at load to 16-bit (the speed of raw floats), under a smaller
/// budget they stay compressed (resident = the file's tensor bytes). Same logits either way.
#[test]
fn neuzip_decoded_at_load_unless_the_budget_forbids() {
    use tern_engine::{Device, LoadOptions, Model, Session};
    for floats in [FloatMode::NeuZip, FloatMode::NeuZipLossy(3)] {
        let what = floats.name();
        let dir = tern_tests::scratch(&format!("cpu_resident_budget_{what}"));
        let out = dir.join("m.tern");
        let opts = PackOptions {
            floats,
            ..PackOptions::default()
        };
        // bitnet.cpp's I2_S form of the tiny model: f16 embeddings → NeuZip f16
        let src = tern_tests::golden("ggml/tiny-i2_s.gguf");
        tern_import::import_path(&src, &out, &opts, &mut |_, _, _| {}).unwrap();
        let f = TernFile::open(&out).unwrap();
        let stored = tensor_bytes(&f);
        let extra = tern_reference::Model::neuzip_decoded_bytes(&f);
        assert!(extra > 0, "{what}: the tiny model has NeuZip matrices");
        let run = |max_memory: Option<u64>| {
            let m = Model::from_file_with(
                &f,
                &LoadOptions {
                    device: Device::Cpu,
                    max_memory,
                    ..Default::default()
                },
            )
            .unwrap();
            let resident = m.report().memory.host_resident_bytes.unwrap();
            let mut s = Session::new(&m, 16).unwrap();
            (resident, s.eval_all(&[1, 2, 3, 4]).unwrap())
        };
        let (r_free, l_free) = run(None);
        let (r_fit, l_fit) = run(Some(stored + extra));
        let (r_tight, l_tight) = run(Some(stored + extra - 1));
        eprintln!("{what}: stored {stored} B; resident decoded {r_free} B, compressed {r_tight} B");
        assert_eq!(r_free, r_fit, "{what}");
        assert!(r_free >= stored + extra / 2, "{what}: decoded at load");
        assert!(r_tight as f64 <= 1.25 * stored as f64, "{what}: compressed");
        assert_eq!(l_free, l_fit);
        assert_eq!(
            l_free, l_tight,
            "{what}: decoded and compressed give the same logits"
        );
    }
}

/// `TernFile::release_tensor` (what the loaders call once a tensor is copied or uploaded) only
/// drops the mapped pages from the resident set: the bytes read afterwards are the same (they come
/// back from the file), checksum included, and the model loads and runs the same.
#[test]
fn released_tensor_pages_read_back_the_same() {
    let dir = tern_tests::scratch("cpu_resident_release");
    let path = dir.join("m.tern");
    let src = tern_tests::golden("ggml/tiny-tq2_0.gguf");
    tern_import::import_path(&src, &path, &PackOptions::default(), &mut |_, _, _| {}).unwrap();
    let f = TernFile::open(&path).unwrap();
    let before: Vec<(String, Vec<u8>)> = f
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), f.tensor(&t.name).unwrap().bytes.to_vec()))
        .collect();
    for (name, _) in &before {
        f.release_tensor(name);
    }
    for (name, bytes) in &before {
        assert_eq!(f.tensor(name).unwrap().bytes, &bytes[..], "{name}");
    }
    f.verify().unwrap();
}
