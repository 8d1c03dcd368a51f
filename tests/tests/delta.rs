//! Fine-tune deltas (`.ternd`): bit-exact reconstruction on real fine-tune pairs and on every
//! encoding, wrong bases and corrupt or truncated deltas refused with typed errors, sizes and
//! decode throughput printed.
//!
//! * `real_pairs_*`: the committed small pairs of `tests/golden/delta/` (made by `make_pairs.py`:
//!   a random BitNet after 8 QAT steps, a tiny llama after 20 AdamW steps), packed here.
//! * `every_encoding`: in-Rust perturbations of f32/f16/bf16, Q8_0/Q4_0/Q4_1/Q6_K, ternary 2-bit
//!   and base-3 (per-tensor and grouped scales), NeuZip lossless and lossy, new/reshaped/dropped
//!   tensors.
//! * `smollm2_q4_1`: the real SmolLM2 Q4_1/Q8_0 model with re-quantization-like code and scale
//!   changes.
//! * `smollm2_finetunes`: the big pairs of `finetune_smollm2.py` (not committed; set
//!   `TERN_DELTA_PAIRS=DIR` holding `smollm2-base.tern` and `smollm2-step{10,100,1000}.tern`),
//!   skipped with a message when absent.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tern_format::delta::{self, DeltaFile, Index};
use tern_format::{Encoding, FloatType, FormatError, TernFile, TernWriter, TernaryLayout};
use tern_import::hf::import_hf_dir;
use tern_import::pack::{FloatMode, PackOptions};
use tern_tests::{golden, scratch};

fn pack_hf(dir: &Path, out: &Path, opts: &PackOptions) -> TernFile {
    import_hf_dir(dir, out, opts, &mut |_: usize, _: usize, _: &str| {}).expect("pack");
    TernFile::open(out).expect("open packed")
}

/// Create a delta, check it rebuilds `tuned` byte for byte (in memory, through `apply_open` and
/// through a file), and return it with the report.
fn round_trip(base: &Path, tuned: &Path, dir: &Path) -> (Vec<u8>, delta::CreateReport) {
    let b = TernFile::open(base).unwrap();
    let t = TernFile::open(tuned).unwrap();
    let (bytes, rep) = delta::create(&b, &t, 2).unwrap();
    assert_eq!(rep.delta_bytes as usize, bytes.len());
    let d = DeltaFile::from_bytes(bytes.clone()).unwrap();
    let tuned_bytes = std::fs::read(tuned).unwrap();
    for threads in [1, 3] {
        let image = d.apply_with(&b, threads).unwrap();
        assert!(
            image == tuned_bytes,
            "rebuilt image differs ({threads} threads)"
        );
    }
    let f = d.apply_open(&b, 2).unwrap();
    f.verify().unwrap();
    for (x, y) in f.tensors().iter().zip(t.tensors()) {
        assert_eq!(x, y);
        assert_eq!(
            f.tensor(&x.name).unwrap().bytes,
            t.tensor(&y.name).unwrap().bytes
        );
    }
    let dp = dir.join("d.ternd");
    std::fs::write(&dp, &bytes).unwrap();
    let out = dir.join("rebuilt.tern");
    let n = DeltaFile::open(&dp)
        .unwrap()
        .apply_to_file(&b, &out, 2)
        .unwrap();
    assert_eq!(n as usize, tuned_bytes.len());
    assert!(std::fs::read(&out).unwrap() == tuned_bytes);
    let f2 = delta::open_with_delta(base, &dp).unwrap();
    assert_eq!(f2.tensors(), t.tensors());
    (bytes, rep)
}

fn methods(rep: &delta::CreateReport) -> std::collections::BTreeMap<String, String> {
    rep.tensors
        .iter()
        .map(|t| (t.name.clone(), t.method.clone()))
        .collect()
}

fn print_report(what: &str, rep: &delta::CreateReport) {
    let mut by: std::collections::BTreeMap<&str, (u64, u64, usize)> = Default::default();
    for t in &rep.tensors {
        let e = by.entry(t.method.as_str()).or_default();
        e.0 += t.tuned_bytes;
        e.1 += t.delta_bytes;
        e.2 += 1;
    }
    println!(
        "{what}: delta {} B = {:.2}% of the tuned file ({} B); {by:?}",
        rep.delta_bytes,
        100.0 * rep.delta_bytes as f64 / rep.tuned_bytes as f64,
        rep.tuned_bytes
    );
}

// ------------------------------------------------------------------------------------------------
// Real small fine-tune pairs (committed)

#[test]
fn real_pairs_bitnet_qat() {
    for (layout, floats) in [
        (TernaryLayout::Bits2, FloatMode::Raw),
        (TernaryLayout::Base3, FloatMode::NeuZip),
    ] {
        let dir = scratch(&format!("delta_bitnet_{layout:?}"));
        let opts = PackOptions {
            ternary: layout,
            floats,
            activations: None,
            ..PackOptions::default()
        };
        pack_hf(&golden("bitnet_hf/tiny_a"), &dir.join("base.tern"), &opts);
        pack_hf(&golden("delta/bitnet_qat"), &dir.join("tuned.tern"), &opts);
        let (_, rep) = round_trip(&dir.join("base.tern"), &dir.join("tuned.tern"), &dir);
        print_report(&format!("tiny BitNet, 8 QAT steps, {layout:?}"), &rep);
        let m = methods(&rep);
        assert_eq!(m["blk.0.ffn_up.weight"], "ternary", "{m:?}");
        assert_eq!(m["blk.1.attn_q.weight"], "ternary", "{m:?}");
        let lin: Vec<_> = rep
            .tensors
            .iter()
            .filter(|t| t.method == "ternary")
            .collect();
        assert_eq!(lin.len(), 14);
        let (tb, db) = lin
            .iter()
            .fold((0, 0), |a, t| (a.0 + t.tuned_bytes, a.1 + t.delta_bytes));
        assert!(db < tb, "ternary deltas {db} B not smaller than {tb} B");
        assert!(rep.delta_bytes < rep.tuned_bytes);
    }
}

#[test]
fn real_pairs_llama_sgd() {
    for floats in [FloatMode::Raw, FloatMode::NeuZip] {
        let dir = scratch(&format!("delta_llama_{floats:?}"));
        let opts = PackOptions {
            floats,
            ..PackOptions::default()
        };
        pack_hf(
            &golden("bitnet_hf/llama_tiny"),
            &dir.join("base.tern"),
            &opts,
        );
        pack_hf(&golden("delta/llama_sgd"), &dir.join("tuned.tern"), &opts);
        let (_, rep) = round_trip(&dir.join("base.tern"), &dir.join("tuned.tern"), &dir);
        print_report(&format!("tiny llama f16, 20 AdamW steps, {floats:?}"), &rep);
        let m = methods(&rep);
        let want = match floats {
            FloatMode::Raw => "fm-delta",
            _ => "neuzip",
        };
        if floats == FloatMode::Raw {
            assert_eq!(m["blk.0.ffn_down.weight"], want, "{m:?}");
            assert!(rep.delta_bytes < rep.tuned_bytes);
        } else {
            // NeuZip blobs of weights that moved a lot (lr 1e-3) are smaller than their FM-Delta:
            // most tensors are copies; the delta costs at most the index on top of the file.
            assert!(m.values().any(|v| v == want), "{m:?}");
            assert!(rep.delta_bytes < rep.tuned_bytes + 8192);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Every encoding, in-Rust perturbations

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unif(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let (a, b) = (self.unif().max(1e-7), self.unif());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f32::consts::PI * b).cos()
    }
}

fn tiny_meta() -> tern_format::ModelMeta {
    let dir = scratch("delta_meta");
    pack_hf(
        &golden("bitnet_hf/llama_tiny"),
        &dir.join("m.tern"),
        &PackOptions::default(),
    )
    .meta()
    .clone()
}

type Tensor = (String, Vec<u64>, Encoding, Vec<u8>);

fn floats_bytes(t: FloatType, v: &[f32]) -> Vec<u8> {
    match t {
        FloatType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        FloatType::F16 => v
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect(),
        FloatType::Bf16 => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect(),
    }
}

/// (base tensors, tuned tensors).
fn synthetic() -> (Vec<Tensor>, Vec<Tensor>) {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut base, mut tuned): (Vec<Tensor>, Vec<Tensor>) = (vec![], vec![]);
    // Floats: 70001 elements (two FM chunks and a bit), fine-tune-like small changes, specials.
    for (name, ft, enc) in [
        ("f32", FloatType::F32, Encoding::F32),
        ("f16", FloatType::F16, Encoding::F16),
        ("bf16", FloatType::Bf16, Encoding::Bf16),
    ] {
        let n = 70001;
        let w: Vec<f32> = (0..n).map(|_| 0.02 * r.normal()).collect();
        let mut t = w.clone();
        for (i, x) in t.iter_mut().enumerate() {
            match i % 10 {
                0..=3 => *x += 2e-4 * r.normal(),
                4 => *x = -*x,
                _ => {}
            }
        }
        let mut w = w;
        w[5] = f32::NAN;
        t[6] = f32::INFINITY;
        w[7] = -0.0;
        t[8] = -0.0;
        t[9] = f32::from_bits(1); // subnormal
        base.push((
            name.into(),
            vec![n as u64],
            enc.clone(),
            floats_bytes(ft, &w),
        ));
        tuned.push((name.into(), vec![n as u64], enc, floats_bytes(ft, &t)));
    }
    // ggml blocks: random bytes with finite f16 scales; a few codes and scales change.
    for (name, enc, bb, cols) in [
        ("q8_0", Encoding::Q8_0, 34usize, 64u64),
        ("q4_0", Encoding::Q4_0, 18, 64),
        ("q4_1", Encoding::Q4_1, 20, 64),
        ("q6_k", Encoding::Q6K, 210, 256),
    ] {
        let rows = 4200u64; // > one 4096-block chunk
        let nblk = (rows * cols / if bb == 210 { 256 } else { 32 }) as usize;
        let mut b = vec![0u8; nblk * bb];
        for x in b.iter_mut() {
            *x = r.next() as u8;
        }
        let scale_at: &[usize] = match bb {
            20 => &[0, 2],
            210 => &[208],
            _ => &[0],
        };
        for blk in b.chunks_exact_mut(bb) {
            for &s in scale_at {
                let v = half::f16::from_f32(0.01 + 0.01 * r.unif()).to_le_bytes();
                blk[s..s + 2].copy_from_slice(&v);
            }
        }
        let mut t = b.clone();
        for (k, blk) in t.chunks_exact_mut(bb).enumerate() {
            if k % 7 == 0 {
                let s = scale_at[0];
                let v = u16::from_le_bytes([blk[s], blk[s + 1]]).wrapping_add(1);
                blk[s..s + 2].copy_from_slice(&v.to_le_bytes());
            }
            if k % 3 == 0 {
                let j = (scale_at[0] + 2 + (r.next() as usize % (bb - 4))) % bb;
                if !scale_at.iter().any(|&s| j == s || j == s + 1) {
                    blk[j] = blk[j].wrapping_add(if r.next() % 2 == 0 { 1 } else { 16 });
                }
            }
        }
        base.push((name.into(), vec![rows, cols], enc.clone(), b));
        tuned.push((name.into(), vec![rows, cols], enc, t));
    }
    // Ternary: two layouts × (per-tensor f32 scale | per-64 f16 scales); 1% of trits flip.
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
        for (group, st) in [(0u32, FloatType::F32), (64, FloatType::F16)] {
            let (rows, cols) = (300u64, 4032u64); // 1.2M trits: two sparse chunks
            let n = (rows * cols) as usize;
            let tb: Vec<i8> = (0..n).map(|_| (r.next() % 3) as i8 - 1).collect();
            let mut tt = tb.clone();
            for x in tt.iter_mut() {
                if r.next() % 100 == 0 {
                    let c = (*x + 1) as u64; // code 0..=2 -> one of the two other codes
                    *x = ((c + 1 + r.next() % 2) % 3) as i8 - 1;
                }
            }
            let ns = if group == 0 { 1 } else { n / group as usize };
            let sb: Vec<f32> = (0..ns).map(|_| 0.5 + r.unif()).collect();
            let st_: Vec<f32> = sb
                .iter()
                .enumerate()
                .map(|(i, &s)| if i % 5 == 0 { s * 1.01 } else { s })
                .collect();
            let enc = Encoding::Ternary {
                layout,
                group,
                scale_type: st,
            };
            let name = format!("ternary_{layout:?}_{group}");
            let pb = tern_format::ternary::pack(layout, rows, cols, &tb, group, st, &sb).unwrap();
            let pt = tern_format::ternary::pack(layout, rows, cols, &tt, group, st, &st_).unwrap();
            base.push((name.clone(), vec![rows, cols], enc.clone(), pb));
            tuned.push((name, vec![rows, cols], enc, pt));
        }
    }
    // NeuZip: lossless bf16 and lossy (3 mantissa bits) f32.
    for (name, ft, k) in [
        ("nz_bf16", FloatType::Bf16, 7u8),
        ("nz_f32_m3", FloatType::F32, 3),
    ] {
        let (rows, cols) = (300usize, 320usize);
        let w: Vec<f32> = (0..rows * cols).map(|_| 0.02 * r.normal()).collect();
        let t: Vec<f32> = w
            .iter()
            .enumerate()
            .map(|(i, &x)| if i % 3 == 0 { x * 1.02 } else { x })
            .collect();
        let enc = Encoding::NeuZip {
            dtype: ft,
            mantissa_bits: k,
        };
        let nb = tern_format::neuzip::encode(ft, k, &floats_bytes(ft, &w), cols).unwrap();
        let nt = tern_format::neuzip::encode(ft, k, &floats_bytes(ft, &t), cols).unwrap();
        base.push((name.into(), vec![rows as u64, cols as u64], enc.clone(), nb));
        tuned.push((name.into(), vec![rows as u64, cols as u64], enc, nt));
    }
    // Unchanged, new, reshaped, dropped, empty.
    let same = floats_bytes(
        FloatType::F32,
        &(0..1000).map(|_| r.normal()).collect::<Vec<_>>(),
    );
    base.push(("same".into(), vec![1000], Encoding::F32, same.clone()));
    tuned.push(("same".into(), vec![1000], Encoding::F32, same.clone()));
    tuned.push(("new".into(), vec![10, 100], Encoding::F32, same.clone()));
    base.push(("reshaped".into(), vec![1000], Encoding::F32, same.clone()));
    tuned.push((
        "reshaped".into(),
        vec![500],
        Encoding::F32,
        same[..2000].to_vec(),
    ));
    base.push(("dropped".into(), vec![1000], Encoding::F32, same));
    base.push(("empty".into(), vec![0, 4], Encoding::F32, vec![]));
    tuned.push(("empty".into(), vec![0, 4], Encoding::F32, vec![]));
    (base, tuned)
}

fn write(path: &Path, meta: &tern_format::ModelMeta, ts: &[Tensor]) {
    let mut w = TernWriter::create(path, meta.clone()).unwrap();
    for (n, s, e, b) in ts {
        w.add_tensor(n, s, e.clone(), b).unwrap();
    }
    w.finish().unwrap();
}

fn synthetic_pair(dir: &Path) -> (PathBuf, PathBuf) {
    let meta = tiny_meta();
    let (base, tuned) = synthetic();
    let (bp, tp) = (dir.join("base.tern"), dir.join("tuned.tern"));
    write(&bp, &meta, &base);
    let mut meta2 = meta.clone();
    meta2.provenance.source_name = format!("{} (fine-tuned)", meta2.provenance.source_name);
    write(&tp, &meta2, &tuned);
    (bp, tp)
}

#[test]
fn every_encoding() {
    let dir = scratch("delta_every_encoding");
    let (bp, tp) = synthetic_pair(&dir);
    let (_, rep) = round_trip(&bp, &tp, &dir);
    print_report("synthetic", &rep);
    let m = methods(&rep);
    for (name, want) in [
        ("f32", "fm-delta"),
        ("f16", "fm-delta"),
        ("bf16", "fm-delta"),
        ("q8_0", "ggml"),
        ("q4_0", "ggml"),
        ("q4_1", "ggml"),
        ("q6_k", "ggml"),
        ("ternary_Bits2_0", "ternary"),
        ("ternary_Bits2_64", "ternary"),
        ("ternary_Base3_0", "ternary"),
        ("ternary_Base3_64", "ternary"),
        ("nz_bf16", "neuzip"),
        ("same", "base"),
        ("new", "copy"),
        ("reshaped", "copy"),
        ("empty", "base"),
    ] {
        assert_eq!(m[name], want, "{name}: {m:?}");
    }
    for t in &rep.tensors {
        if !["copy", "base"].contains(&t.method.as_str()) {
            assert!(t.delta_bytes < t.tuned_bytes / 2, "{t:?}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Wrong base, corrupt and truncated deltas

fn is_typed(e: &FormatError) -> bool {
    !matches!(e, FormatError::Io(_))
}

/// Recompute every checksum of a (modified) delta so corruption reaches the decoders.
fn reseal(bytes: &mut [u8]) {
    let isize = u64::from_le_bytes(bytes[32..40].try_into().unwrap()) as usize;
    let ib = &bytes[64..64 + isize];
    let Ok(mut index) = serde_json::from_slice::<Index>(ib) else {
        return;
    };
    let sum = |b: &[u8], o: u64, s: u64| {
        b.get(o as usize..(o + s) as usize)
            .map_or(0, xxhash_rust_like)
    };
    index.prefix.checksum = sum(bytes, index.prefix.offset, index.prefix.size);
    index.suffix.checksum = sum(bytes, index.suffix.offset, index.suffix.size);
    for r in &mut index.tensors {
        r.payload.checksum = sum(bytes, r.payload.offset, r.payload.size);
    }
    let mut json = serde_json::to_vec(&index).unwrap();
    if json.len() > isize {
        return;
    }
    json.resize(isize, b' ');
    bytes[64..64 + isize].copy_from_slice(&json);
    let h = xxhash_rust_like(&json);
    bytes[40..48].copy_from_slice(&h.to_le_bytes());
    let hh = xxhash_rust_like(&bytes[0..56]);
    bytes[56..64].copy_from_slice(&hh.to_le_bytes());
}

/// xxh3-64, through the format crate's public helper.
fn xxhash_rust_like(b: &[u8]) -> u64 {
    tern_format::container::checksum(b)
}

#[test]
fn wrong_base_corrupt_and_truncated_deltas() {
    let dir = scratch("delta_errors");
    let (bp, tp) = synthetic_pair(&dir);
    let base = TernFile::open(&bp).unwrap();
    let tuned = TernFile::open(&tp).unwrap();
    let tuned_bytes = std::fs::read(&tp).unwrap();
    let (bytes, _) = delta::create(&base, &tuned, 2).unwrap();

    // A wrong base: refused by identity before anything is decoded.
    let d = DeltaFile::from_bytes(bytes.clone()).unwrap();
    match d.apply(&tuned) {
        Err(FormatError::Checksum { what, .. }) => {
            assert!(what.contains("base identity"), "{what}")
        }
        other => panic!("wrong base accepted: {:?}", other.map(|v| v.len())),
    }
    // A base with the right directory but a damaged tensor: refused by that tensor's checksum.
    let mut damaged = std::fs::read(&bp).unwrap();
    let f32_off = (base.data_offset() + base.tensor("f32").unwrap().info.offset) as usize;
    damaged[f32_off + 100] ^= 1;
    let damaged = TernFile::from_bytes(damaged).unwrap();
    assert!(matches!(
        d.apply(&damaged),
        Err(FormatError::Checksum { .. })
    ));
    // A .tern passed as the delta.
    assert!(matches!(
        DeltaFile::from_bytes(std::fs::read(&bp).unwrap()),
        Err(FormatError::BadMagic { .. })
    ));

    // Truncations.
    for len in [0, 5, 8, 63, 64, 200, bytes.len() / 2, bytes.len() - 1] {
        let e = DeltaFile::from_bytes(bytes[..len].to_vec()).unwrap_err();
        assert!(is_typed(&e), "{len}: {e}");
    }
    // Bit flips anywhere: refused at open (every byte is under a checksum or must be zero).
    let mut r = Rng(7);
    for k in 0..300 {
        let mut b = bytes.clone();
        let at = if k < 64 {
            k
        } else {
            (r.next() % b.len() as u64) as usize
        };
        b[at] ^= 1 << (r.next() % 8);
        assert!(DeltaFile::from_bytes(b).is_err(), "flip at {at} accepted");
    }
    // Flips with the checksums fixed up, so the decoders see them: never a panic, never a wrong
    // image — either a typed error or (a flip with no effect) the exact tuned file.
    let (mut errors, mut exact) = (0, 0);
    for _ in 0..400 {
        let mut b = bytes.clone();
        let at = 64 + (r.next() % (b.len() as u64 - 64)) as usize;
        b[at] ^= 1 << (r.next() % 8);
        reseal(&mut b);
        match DeltaFile::from_bytes(b).and_then(|d| d.apply_with(&base, 2)) {
            Ok(img) => {
                assert!(
                    img == tuned_bytes,
                    "a corrupt delta produced a wrong model (flip at {at})"
                );
                exact += 1;
            }
            Err(e) => {
                assert!(is_typed(&e));
                errors += 1;
            }
        }
    }
    println!("resealed flips: {errors} refused, {exact} harmless");
    assert!(errors > 300);
}

// ------------------------------------------------------------------------------------------------
// SmolLM2 Q4_1 / Q8_0 (real ggml blocks)

#[test]
fn smollm2_q4_1() {
    let dir = scratch("delta_smollm2_q4");
    let gguf = tern_tests::smollm2_gguf();
    let bp = dir.join("base.tern");
    tern_import::gguf_import::import_gguf(&gguf, &bp, &PackOptions::default(), &mut |_, _, _| {})
        .expect("pack SmolLM2");
    let base = TernFile::open(&bp).unwrap();
    // "Re-quantized after a fine-tune": in every ggml tensor, 2% of blocks get one code ±1 and
    // one scale ulp; the norms change slightly.
    let mut r = Rng(11);
    let mut tensors = Vec::new();
    for info in base.tensors() {
        let mut b = base.tensor(&info.name).unwrap().bytes.to_vec();
        match info.encoding {
            Encoding::Q4_1 | Encoding::Q8_0 => {
                let bb = if info.encoding == Encoding::Q4_1 {
                    20
                } else {
                    34
                };
                let code0 = if bb == 20 { 4 } else { 2 };
                for blk in b.chunks_exact_mut(bb) {
                    if r.next() % 50 == 0 {
                        let j = code0 + (r.next() as usize % (bb - code0));
                        blk[j] = blk[j].wrapping_add(1);
                        blk[0] = blk[0].wrapping_add(1);
                    }
                }
            }
            Encoding::F32 => {
                for c in b.chunks_exact_mut(4) {
                    let x = f32::from_le_bytes(c.try_into().unwrap()) * 1.001;
                    c.copy_from_slice(&x.to_le_bytes());
                }
            }
            _ => {}
        }
        tensors.push((
            info.name.clone(),
            info.shape.clone(),
            info.encoding.clone(),
            b,
        ));
    }
    let tp = dir.join("tuned.tern");
    write(&tp, base.meta(), &tensors);
    let (_, rep) = round_trip(&bp, &tp, &dir);
    print_report("SmolLM2 Q4_1, 2% of blocks re-quantized", &rep);
    assert!(rep.tensors.iter().filter(|t| t.method == "ggml").count() >= 200);
    assert!((rep.delta_bytes as f64) < 0.1 * rep.tuned_bytes as f64);
}

// ------------------------------------------------------------------------------------------------
// The big SmolLM2 bf16 fine-tune pairs (optional)

#[test]
fn smollm2_finetunes() {
    let Some(dir) = std::env::var_os("TERN_DELTA_PAIRS").map(PathBuf::from) else {
        tern_tests::skip_or_fail(
            "smollm2_finetunes",
            "set TERN_DELTA_PAIRS=DIR with smollm2-base.tern and smollm2-step*.tern \
             (made by tests/golden/delta/finetune_smollm2.py + `tern pack`)",
        );
        return;
    };
    let bp = dir.join("smollm2-base.tern");
    if !bp.is_file() {
        tern_tests::skip_or_fail("smollm2_finetunes", &format!("{} is missing", bp.display()));
        return;
    }
    let base = TernFile::open(&bp).unwrap();
    let threads = delta::default_threads();
    for steps in [10, 100, 1000] {
        let tp = dir.join(format!("smollm2-step{steps}.tern"));
        if !tp.is_file() {
            println!("step {steps}: {} is missing, skipped", tp.display());
            continue;
        }
        let tuned = TernFile::open(&tp).unwrap();
        let t0 = Instant::now();
        let (bytes, rep) = delta::create(&base, &tuned, threads).unwrap();
        let t_create = t0.elapsed().as_secs_f64();
        print_report(&format!("SmolLM2 bf16, {steps} AdamW steps"), &rep);
        let d = DeltaFile::from_bytes(bytes).unwrap();
        let tuned_bytes = std::fs::read(&tp).unwrap();
        let tensor_bytes: u64 = tuned.tensors().iter().map(|t| t.size).sum();
        for th in [1, threads] {
            let t0 = Instant::now();
            let img = d.apply_with(&base, th).unwrap();
            let dt = t0.elapsed().as_secs_f64();
            assert!(img == tuned_bytes);
            println!(
                "  apply ({th} threads): {dt:.3}s = {:.0} MB/s of tensor bytes (create {t_create:.2}s)",
                tensor_bytes as f64 / 1e6 / dt
            );
        }
        // Load time: tuned file vs base + delta, both into the engine.
        let t0 = Instant::now();
        let m = tern_engine::session::Model::open(&tp).unwrap();
        let t_plain = t0.elapsed().as_secs_f64();
        drop(m);
        let t0 = Instant::now();
        let f = d.apply_open(&base, threads).unwrap();
        let t_apply = t0.elapsed().as_secs_f64();
        let m = tern_engine::session::Model::from_file(&f).unwrap();
        let t_delta = t0.elapsed().as_secs_f64();
        drop(m);
        println!(
            "  load: tuned file {t_plain:.3}s; base + delta {t_delta:.3}s (of which applying {t_apply:.3}s)"
        );
    }
}

#[test]
fn fuzz_entry_never_panics() {
    let mut r = Rng(3);
    for len in [0usize, 1, 2, 7, 40, 200, 1000] {
        for _ in 0..50 {
            let v: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            delta::fuzz_chunk(&v);
        }
    }
}

/// The fuzz corpus on stable: every input of `fuzz/regressions/delta_decode/` through the fuzz
/// target's body. `TERN_BLESS=1` rewrites the seeds (one chunk of each kind, one whole delta).
#[test]
fn fuzz_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/delta_decode");
    let seeds = delta::fuzz_seeds();
    assert_eq!(seeds.len(), 6, "a chunk seed does not round-trip");
    if std::env::var_os("TERN_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        // A whole small delta: a few tensors of each family.
        let s = scratch("delta_fuzz_seed");
        let meta = tiny_meta();
        let (base, tuned) = synthetic();
        let small = |v: Vec<Tensor>| -> Vec<Tensor> {
            v.into_iter()
                .filter(|t| ["q4_1", "same", "new", "empty", "reshaped"].contains(&t.0.as_str()))
                .map(|(n, s, e, b)| {
                    if n == "q4_1" {
                        (n, vec![2, 64], e, b[..80].to_vec())
                    } else {
                        (n, s, e, b)
                    }
                })
                .collect()
        };
        write(&s.join("b.tern"), &meta, &small(base));
        write(&s.join("t.tern"), &meta, &small(tuned));
        let (bytes, _) = delta::create(
            &TernFile::open(&s.join("b.tern")).unwrap(),
            &TernFile::open(&s.join("t.tern")).unwrap(),
            1,
        )
        .unwrap();
        let mut v = vec![1u8];
        v.extend_from_slice(&bytes);
        std::fs::write(dir.join("seed_file_small.bin"), v).unwrap();
    }
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) == Some("bin") {
            delta::fuzz_input(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 7, "{n} inputs in {}", dir.display());
}
