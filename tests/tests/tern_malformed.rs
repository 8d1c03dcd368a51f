//! The `.tern` reader on malformed and hostile input: truncation at every byte and every section
//! boundary, bad magic/version/features, checksum mismatches, out-of-range offsets and sizes,
//! overflowing shapes, unknown encodings and sections, and directory lies (each a typed
//! [`FormatError`] whose message names the problem, never a panic); `verify()` catching a flipped
//! bit at every byte of a file; and `tern inspect --verify/--json` on good and damaged files.
//!
//! Files are built with [`TernWriter`] and then taken apart and re-assembled by an independent
//! implementation of the v1 layout in this file ([`Parts`]), so a damaged directory or section
//! table can carry valid checksums and reach the checks behind them.
//!
//! `TERN_BLESS=1 cargo test -p tern-tests --test tern_malformed write_fuzz_seeds` rewrites the fuzz
//! seeds in `fuzz/regressions/tern_read/`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};
use tern_format::container::{
    checksum, DATA_OFFSET, HEADER_SIZE, SECTION_DATA, SECTION_DIRECTORY, SECTION_METADATA,
};
use tern_format::encoding::full_mantissa_bits;
use tern_format::ternary::TernaryRef;
use tern_format::{
    neuzip, ternary, ActivationScheme, Arch, Encoding, FfnAct, FloatType, FormatError, HParams,
    ModelMeta, Provenance, TernFile, TernWriter, TernaryLayout, TokenizerKind, TokenizerSpec,
    FEATURE_NEUZIP,
};

// ------------------------------------------------------------------------------------------------
// A small valid file with every kind of encoding

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn trit(&mut self) -> i8 {
        (self.next() % 3) as i8 - 1
    }
}

fn meta() -> ModelMeta {
    let mut options = BTreeMap::new();
    options.insert("floats".to_string(), "neuzip".to_string());
    options.insert("ternary".to_string(), "2bit".to_string());
    ModelMeta {
        arch: Arch::Llama,
        hparams: HParams {
            n_vocab: 4,
            n_embd: 64,
            n_layer: 1,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 32,
            n_ff: 8,
            n_ctx_train: 2048,
            rope_theta: 10000.0,
            rope_dim: 32,
            rope_neox: true,
            rms_eps: 1e-5,
            ffn_act: FfnAct::Silu,
            tied_embeddings: true,
            sub_norms: false,
        },
        tokenizer: Some(TokenizerSpec {
            kind: TokenizerKind::Gpt2,
            pre: Some("smollm".into()),
            tokens: vec!["<|endoftext|>".into(), "a".into(), "b".into(), "ab".into()],
            token_types: vec![3, 1, 1, 1],
            merges: vec!["a b".into()],
            scores: vec![],
            bos: Some(0),
            eos: Some(0),
            unk: None,
            pad: None,
            eot: None,
            add_bos: false,
            add_eos: false,
            add_space_prefix: false,
            chat_template: Some("{% for m in messages %}{{ m['content'] }}{% endfor %}".into()),
        }),
        activations: ActivationScheme::FLOAT,
        provenance: Provenance {
            source_format: "gguf".into(),
            source_name: "tiny.gguf".into(),
            source_hash: Some("0123456789abcdef".into()),
            model_name: Some("tiny".into()),
            packer: "tern 0.1.0".into(),
            options,
        },
        extra: BTreeMap::new(),
    }
}

type TensorSpec = (&'static str, Vec<u64>, Encoding, Vec<u8>);

/// The fixture's tensors: q8_0 (valid blocks), f32, f16, ternary 2bit (grouped f16 scales) and
/// base3 (one f32 scale), lossless bf16 NeuZip and lossy f32 NeuZip.
fn tensors() -> Vec<TensorSpec> {
    let mut r = Rng(0x7e57_7e57_7e57_7e57);
    let mut q8 = Vec::new();
    for b in 0..8 {
        q8.extend_from_slice(&half::f16::from_f32(0.01 * (b + 1) as f32).to_le_bytes());
        for _ in 0..32 {
            q8.push((r.next() % 255) as u8 ^ 0x80 | 1); // any i8 but -128
        }
    }
    let f32s: Vec<u8> = (0..64)
        .flat_map(|_| (1.0 + 0.1 * r.unit()).to_le_bytes())
        .collect();
    let f16s: Vec<u8> = (0..256)
        .flat_map(|_| half::f16::from_f32(r.unit()).to_le_bytes())
        .collect();
    let t2: Vec<i8> = (0..8 * 64).map(|_| r.trit()).collect();
    let s2: Vec<f32> = (0..16).map(|i| 0.02 + 0.001 * i as f32).collect();
    let bits2 = ternary::pack(TernaryLayout::Bits2, 8, 64, &t2, 32, FloatType::F16, &s2).unwrap();
    let t3: Vec<i8> = (0..4 * 40).map(|_| r.trit()).collect();
    let base3 =
        ternary::pack(TernaryLayout::Base3, 4, 40, &t3, 0, FloatType::F32, &[0.03]).unwrap();
    let bf16s: Vec<u8> = (0..128)
        .flat_map(|_| half::bf16::from_f32(1.0 + 0.05 * r.unit()).to_le_bytes())
        .collect();
    let nz_bf16 = neuzip::encode(
        FloatType::Bf16,
        full_mantissa_bits(FloatType::Bf16),
        &bf16s,
        64,
    )
    .unwrap();
    let f32b: Vec<u8> = (0..128)
        .flat_map(|_| (0.05 * r.unit()).to_le_bytes())
        .collect();
    let nz_f32 = neuzip::encode(FloatType::F32, 3, &f32b, 64).unwrap();
    vec![
        ("token_embd.weight", vec![4, 64], Encoding::Q8_0, q8),
        ("blk.0.attn_norm.weight", vec![64], Encoding::F32, f32s),
        ("blk.0.attn_q.weight", vec![8, 32], Encoding::F16, f16s),
        (
            "blk.0.ffn_up.weight",
            vec![8, 64],
            Encoding::Ternary {
                layout: TernaryLayout::Bits2,
                group: 32,
                scale_type: FloatType::F16,
            },
            bits2,
        ),
        (
            "blk.0.ffn_down.weight",
            vec![4, 40],
            Encoding::Ternary {
                layout: TernaryLayout::Base3,
                group: 0,
                scale_type: FloatType::F32,
            },
            base3,
        ),
        (
            "output_norm.weight",
            vec![2, 64],
            Encoding::NeuZip {
                dtype: FloatType::Bf16,
                mantissa_bits: 7,
            },
            nz_bf16,
        ),
        (
            "blk.0.attn_k.weight",
            vec![2, 64],
            Encoding::NeuZip {
                dtype: FloatType::F32,
                mantissa_bits: 3,
            },
            nz_f32,
        ),
    ]
}

fn write_file(path: &Path, specs: &[TensorSpec]) -> Vec<u8> {
    let mut w = TernWriter::create(path, meta()).unwrap();
    for (name, shape, enc, bytes) in specs {
        w.add_tensor(name, shape, enc.clone(), bytes).unwrap();
    }
    let size = w.finish().unwrap();
    let b = std::fs::read(path).unwrap();
    assert_eq!(b.len() as u64, size);
    b
}

/// The valid fixture file's bytes (about 9 KB).
fn valid() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        write_file(
            &tern_tests::scratch("tern_malformed_fixture").join("valid.tern"),
            &tensors(),
        )
    })
}

/// A one-tensor file (every byte of it is cheap to test in every way).
fn small() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        let spec = tensors()
            .into_iter()
            .filter(|t| t.0 == "blk.0.attn_norm.weight")
            .collect::<Vec<_>>();
        write_file(
            &tern_tests::scratch("tern_malformed_small").join("small.tern"),
            &spec,
        )
    })
}

// ------------------------------------------------------------------------------------------------
// An independent reading and writing of the v1 layout (header, data, metadata, directory, table)

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn fix_header(b: &mut [u8]) {
    let h = checksum(&b[0..56]);
    put_u64(b, 56, h);
}
fn pad8(v: &mut Vec<u8>) {
    while v.len() % 8 != 0 {
        v.push(0);
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    kind: u32,
    flags: u32,
    offset: u64,
    size: u64,
    checksum: u64,
}

fn read_table(b: &[u8]) -> (usize, Vec<Entry>) {
    let t0 = u64_at(b, 32) as usize;
    let n = u32_at(b, 40) as usize;
    let entries = (0..n)
        .map(|i| {
            let e = &b[t0 + 32 * i..t0 + 32 * (i + 1)];
            Entry {
                kind: u32_at(e, 0),
                flags: u32_at(e, 4),
                offset: u64_at(e, 8),
                size: u64_at(e, 16),
                checksum: u64_at(e, 24),
            }
        })
        .collect();
    (t0, entries)
}

/// Replace the section table (at the same offset) with `entries`, fixing its checksum and the
/// header's count, file size and checksum.
fn write_table(b: &[u8], entries: &[Entry]) -> Vec<u8> {
    let t0 = u64_at(b, 32) as usize;
    let mut out = b[..t0].to_vec();
    let start = out.len();
    for e in entries {
        out.extend_from_slice(&e.kind.to_le_bytes());
        out.extend_from_slice(&e.flags.to_le_bytes());
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.size.to_le_bytes());
        out.extend_from_slice(&e.checksum.to_le_bytes());
    }
    let h = checksum(&out[start..]);
    out.extend_from_slice(&h.to_le_bytes());
    put_u32(&mut out, 40, entries.len() as u32);
    let len = out.len() as u64;
    put_u64(&mut out, 48, len);
    fix_header(&mut out);
    out
}

fn edit_table(b: &[u8], f: impl FnOnce(&mut Vec<Entry>)) -> Vec<u8> {
    let (_, mut entries) = read_table(b);
    f(&mut entries);
    write_table(b, &entries)
}

/// A file taken apart into the pieces a writer chooses.
#[derive(Clone, Debug)]
struct Parts {
    version: u32,
    required: u64,
    optional: u64,
    data: Vec<u8>,
    meta: Vec<u8>,
    dir: Vec<u8>,
    /// Extra sections `(kind, flags, bytes)`, written after the directory.
    extra: Vec<(u32, u32, Vec<u8>)>,
}

impl Parts {
    fn of(b: &[u8]) -> Parts {
        let (_, entries) = read_table(b);
        let get = |kind: u32| {
            let e = entries.iter().find(|e| e.kind == kind).unwrap();
            b[e.offset as usize..(e.offset + e.size) as usize].to_vec()
        };
        let extra = entries
            .iter()
            .filter(|e| ![SECTION_DATA, SECTION_METADATA, SECTION_DIRECTORY].contains(&e.kind))
            .map(|e| {
                (
                    e.kind,
                    e.flags,
                    b[e.offset as usize..(e.offset + e.size) as usize].to_vec(),
                )
            })
            .collect();
        Parts {
            version: u32_at(b, 8),
            required: u64_at(b, 16),
            optional: u64_at(b, 24),
            data: get(SECTION_DATA),
            meta: get(SECTION_METADATA),
            dir: get(SECTION_DIRECTORY),
            extra,
        }
    }

    /// Lay the pieces out as `TernWriter` does, with fresh checksums everywhere.
    fn assemble(&self) -> Vec<u8> {
        let mut out = vec![0u8; DATA_OFFSET as usize];
        let mut entries = vec![Entry {
            kind: SECTION_DATA,
            flags: 1,
            offset: DATA_OFFSET,
            size: self.data.len() as u64,
            checksum: 0,
        }];
        out.extend_from_slice(&self.data);
        let sections = [
            (SECTION_METADATA, 1, &self.meta),
            (SECTION_DIRECTORY, 1, &self.dir),
        ];
        for (kind, flags, bytes) in sections
            .into_iter()
            .chain(self.extra.iter().map(|(k, f, b)| (*k, *f, b)))
        {
            pad8(&mut out);
            entries.push(Entry {
                kind,
                flags,
                offset: out.len() as u64,
                size: bytes.len() as u64,
                checksum: checksum(bytes),
            });
            out.extend_from_slice(bytes);
        }
        pad8(&mut out);
        let t0 = out.len() as u64;
        out[0..8].copy_from_slice(b"TERN\0\r\n\x1a");
        put_u32(&mut out, 8, self.version);
        put_u32(&mut out, 12, HEADER_SIZE as u32);
        put_u64(&mut out, 16, self.required);
        put_u64(&mut out, 24, self.optional);
        put_u64(&mut out, 32, t0);
        write_table(&out, &entries)
    }

    fn dir_json(&self) -> Value {
        serde_json::from_slice(&self.dir).unwrap()
    }
}

/// Re-serialize the directory after `f` edited it; everything else is re-checksummed around it.
fn edit_dir(b: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut p = Parts::of(b);
    let mut v = p.dir_json();
    f(&mut v);
    p.dir = serde_json::to_vec(&v).unwrap();
    p.assemble()
}

fn entry<'a>(dir: &'a mut Value, name: &str) -> &'a mut Value {
    dir["tensors"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == name)
        .unwrap()
}

/// Overwrite tensor bytes in the data section and store their new checksum in the directory, so
/// only the codecs can notice.
fn replace_tensor_bytes(b: &[u8], name: &str, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut p = Parts::of(b);
    let mut dir = p.dir_json();
    let t = entry(&mut dir, name);
    let (off, size) = (
        t["offset"].as_u64().unwrap() as usize,
        t["size"].as_u64().unwrap() as usize,
    );
    f(&mut p.data[off..off + size]);
    t["checksum"] = json!(checksum(&p.data[off..off + size]));
    p.dir = serde_json::to_vec(&dir).unwrap();
    p.assemble()
}

// ------------------------------------------------------------------------------------------------
// Assertions

fn open(b: &[u8]) -> tern_format::Result<TernFile> {
    TernFile::from_bytes(b.to_vec())
}

#[track_caller]
fn open_err(b: &[u8]) -> FormatError {
    match open(b) {
        Ok(_) => panic!("a damaged file opened"),
        Err(e) => e,
    }
}

#[track_caller]
fn verify_err(b: &[u8]) -> FormatError {
    let f = open(b).unwrap_or_else(|e| {
        panic!("expected the file to open (damage only visible to verify), got: {e}")
    });
    match f.verify() {
        Ok(()) => panic!("verify passed on a damaged file"),
        Err(e) => e,
    }
}

/// The message names the problem: every `needle` occurs in it.
#[track_caller]
fn says(e: &FormatError, needles: &[&str]) {
    let m = e.to_string();
    for n in needles {
        assert!(
            m.contains(n),
            "error message {m:?} does not mention {n:?} ({e:?})"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// The fixture and the test's own layout code

#[test]
fn fixture_is_valid_and_reassembles_byte_identically() {
    let b = valid();
    assert!(b.len() < 12_000, "fixture is {} bytes", b.len());
    let f = open(b).unwrap();
    let mut progress = Vec::new();
    f.verify_with(|done, total| progress.push((done, total)))
        .unwrap();
    let n = tensors().len();
    assert_eq!(
        progress.last(),
        Some(&(n, n)),
        "verify decodes every tensor"
    );
    assert_eq!(f.tensors().len(), n);
    for (name, shape, enc, bytes) in tensors() {
        let v = f.tensor(name).unwrap();
        assert_eq!(v.bytes, &bytes[..]);
        assert_eq!(&v.info.shape, &shape);
        assert_eq!(v.info.encoding, enc);
        assert_eq!(v.to_f32().unwrap().len() as u64, v.info.n_elements());
    }
    assert_eq!(f.meta(), &meta());
    // The test's independent layout code writes exactly what TernWriter writes.
    assert_eq!(Parts::of(b).assemble(), b);
    assert_eq!(Parts::of(small()).assemble(), small());
    // And the mmap path opens the same file.
    let p = tern_tests::scratch("tern_malformed_mmap").join("v.tern");
    std::fs::write(&p, b).unwrap();
    TernFile::open(&p).unwrap().verify().unwrap();
}

// ------------------------------------------------------------------------------------------------
// Truncation

/// Every section and tensor boundary of a file.
fn boundaries(b: &[u8]) -> Vec<(String, usize)> {
    let f = open(b).unwrap();
    let mut v = vec![
        ("header end".to_string(), HEADER_SIZE),
        ("data start".into(), DATA_OFFSET as usize),
    ];
    let data = f.data_offset() as usize;
    for t in f.tensors() {
        v.push((format!("start of {}", t.name), data + t.offset as usize));
        v.push((
            format!("end of {}", t.name),
            data + (t.offset + t.size) as usize,
        ));
    }
    for s in f.sections() {
        v.push((format!("start of section {}", s.kind), s.offset as usize));
        v.push((
            format!("end of section {}", s.kind),
            (s.offset + s.size) as usize,
        ));
    }
    v.push((
        "table start".into(),
        f.header().section_table_offset as usize,
    ));
    v.push(("table checksum".into(), b.len() - 8));
    v.push(("last byte".into(), b.len() - 1));
    v
}

#[test]
fn truncation_at_every_section_boundary_is_a_truncated_error() {
    let b = valid();
    for (what, at) in boundaries(b) {
        assert!(at < b.len());
        let e = open_err(&b[..at]);
        assert!(
            matches!(e, FormatError::Truncated { .. }),
            "cut at {what} ({at}): {e:?}"
        );
        says(&e, &["truncated", &format!("has {at}")]);
        // The same cut on disk, through the mmap path.
        let p = tern_tests::scratch("tern_malformed_trunc").join("t.tern");
        std::fs::write(&p, &b[..at]).unwrap();
        let e = TernFile::open(&p).unwrap_err();
        assert!(
            matches!(e, FormatError::Truncated { .. }),
            "mmap cut at {what} ({at}): {e:?}"
        );
    }
    // An empty file, and part of the magic.
    for at in 0..8 {
        let e = open_err(&b[..at]);
        assert!(matches!(e, FormatError::Truncated { .. }), "{at}: {e:?}");
        says(&e, &["header"]);
    }
}

#[test]
fn truncation_at_every_byte_is_a_typed_error() {
    for b in [small(), valid()] {
        for at in 0..b.len() {
            let e = open_err(&b[..at]);
            assert!(
                matches!(e, FormatError::Truncated { .. }),
                "cut at {at}: {e:?}"
            );
            // A truncating tool that also rewrote the header's file size (and its checksum): the
            // section table is then missing or misplaced, still a typed error.
            if at >= HEADER_SIZE {
                let mut c = b[..at].to_vec();
                put_u64(&mut c, 48, at as u64);
                fix_header(&mut c);
                let e = open_err(&c);
                assert!(
                    matches!(
                        e,
                        FormatError::Truncated { .. }
                            | FormatError::OutOfRange { .. }
                            | FormatError::Malformed { .. }
                            | FormatError::Checksum { .. }
                    ),
                    "cut at {at} with a patched header: {e:?}"
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Header

#[test]
fn bad_magic_names_the_remedy() {
    let mut b = valid().to_vec();
    b[0] = b'X';
    let e = open_err(&b);
    assert!(matches!(e, FormatError::BadMagic { .. }), "{e:?}");
    says(&e, &["not a .tern file", "tern pack"]);

    // A GGUF file: told to convert it.
    let mut g = b"GGUF".to_vec();
    g.extend_from_slice(&3u32.to_le_bytes());
    g.extend_from_slice(&[0u8; 16]);
    let e = open_err(&g);
    assert!(matches!(e, FormatError::BadMagic { .. }), "{e:?}");
    says(&e, &["GGUF", "tern pack"]);
    // A real GGUF (the committed fuzz seed), too.
    let seed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/gguf_parse/all_types.gguf");
    if let Ok(real) = std::fs::read(seed) {
        says(&open_err(&real), &["GGUF", "tern pack"]);
    }
    // Text, and a file of zeros.
    says(
        &open_err(b"hello world, this is not a model at all"),
        &["bad magic"],
    );
    says(&open_err(&[0u8; 100]), &["bad magic"]);
}

#[test]
fn unsupported_version_says_to_repack_or_upgrade() {
    for v in [0u32, 2, 0xffff_ffff] {
        let mut b = valid().to_vec();
        put_u32(&mut b, 8, v);
        // With and without a matching header checksum: the version is what must be reported.
        for fix in [false, true] {
            if fix {
                fix_header(&mut b);
            }
            let e = open_err(&b);
            assert!(
                matches!(e, FormatError::UnsupportedVersion { found, supported: 1 } if found == v),
                "{e:?}"
            );
            says(&e, &[&format!("v{v}"), "tern pack", "upgrade tern"]);
        }
    }
    // Whole v2 file assembled properly.
    let mut p = Parts::of(valid());
    p.version = 2;
    let e = open_err(&p.assemble());
    assert!(
        matches!(e, FormatError::UnsupportedVersion { found: 2, .. }),
        "{e:?}"
    );
}

#[test]
fn unknown_required_feature_is_refused_unknown_optional_feature_is_ignored() {
    let mut p = Parts::of(valid());
    p.required |= 1 << 17;
    let e = open_err(&p.assemble());
    assert!(
        matches!(e, FormatError::UnsupportedFeatures { bits } if bits == 1 << 17),
        "{e:?}"
    );
    says(&e, &["0x20000", "upgrade tern"]);

    let mut p = Parts::of(valid());
    p.optional |= 1 << 40;
    let f = open(&p.assemble()).unwrap();
    f.verify().unwrap();
}

#[test]
fn header_checksum_and_fields() {
    // A flipped bit in any header field other than magic/version: the header checksum.
    for at in 12..56 {
        let mut b = valid().to_vec();
        b[at] ^= 0x10;
        let e = open_err(&b);
        assert!(
            matches!(e, FormatError::Checksum { ref what, .. } if what == "header"),
            "byte {at}: {e:?}"
        );
        says(&e, &["checksum mismatch in header", "corrupt"]);
    }
    // The checksum itself.
    let mut b = valid().to_vec();
    b[60] ^= 1;
    assert!(matches!(open_err(&b), FormatError::Checksum { .. }));

    // Valid checksum, impossible fields.
    let mut b = valid().to_vec();
    put_u32(&mut b, 12, 128);
    fix_header(&mut b);
    says(&open_err(&b), &["malformed header", "header size 128"]);

    for count in [0u32, 5000] {
        let mut b = valid().to_vec();
        put_u32(&mut b, 40, count);
        fix_header(&mut b);
        let e = open_err(&b);
        assert!(matches!(e, FormatError::Malformed { .. }), "{e:?}");
        says(&e, &["section table", &format!("{count} sections")]);
    }
    let t0 = u64_at(valid(), 32);
    for (off, needle) in [
        (t0 + 4, "section table offset"),
        (8, "section table offset"),
        (u64::MAX - 7, "section table offset"),
    ] {
        let mut b = valid().to_vec();
        put_u64(&mut b, 32, off);
        fix_header(&mut b);
        let e = open_err(&b);
        assert!(
            matches!(e, FormatError::OutOfRange { .. }),
            "table at {off}: {e:?}"
        );
        says(&e, &[needle]);
    }
    // Table moved earlier (no longer the last bytes), and a header that claims fewer bytes.
    let mut b = valid().to_vec();
    put_u64(&mut b, 32, t0 - 8);
    fix_header(&mut b);
    says(&open_err(&b), &["after the section table"]);
    let mut b = valid().to_vec();
    b.extend_from_slice(&[0u8; 8]);
    let e = open_err(&b);
    says(&e, &["malformed file", "header says"]);
    let len = b.len() as u64;
    put_u64(&mut b, 48, len);
    fix_header(&mut b);
    says(&open_err(&b), &["8 bytes after the section table"]);
}

// ------------------------------------------------------------------------------------------------
// Section table and sections

#[test]
fn section_table_checksum_and_ranges() {
    let (t0, entries) = read_table(valid());
    // A flipped bit anywhere in the table (entries or its checksum).
    for at in t0..valid().len() {
        let mut b = valid().to_vec();
        b[at] ^= 0x04;
        let e = open_err(&b);
        assert!(
            matches!(e, FormatError::Checksum { ref what, .. } if what == "section table"),
            "byte {at}: {e:?}"
        );
    }
    let meta_i = entries
        .iter()
        .position(|e| e.kind == SECTION_METADATA)
        .unwrap();
    let dir_i = entries
        .iter()
        .position(|e| e.kind == SECTION_DIRECTORY)
        .unwrap();
    let data_i = entries.iter().position(|e| e.kind == SECTION_DATA).unwrap();
    let cases: Vec<(&str, Box<dyn Fn(&mut Vec<Entry>)>, &[&str])> = vec![
        (
            "size past the table",
            Box::new(move |e: &mut Vec<Entry>| e[meta_i].size = 1 << 20),
            &["out of range", "section of kind 1"],
        ),
        (
            "size overflows",
            Box::new(move |e: &mut Vec<Entry>| e[dir_i].size = u64::MAX - 3),
            &["out of range", "kind 2"],
        ),
        (
            "offset inside the header",
            Box::new(move |e: &mut Vec<Entry>| e[meta_i].offset = 8),
            &["out of range", "outside 64.."],
        ),
        (
            "offset past the end",
            Box::new(move |e: &mut Vec<Entry>| e[dir_i].offset = u64::MAX),
            &["out of range"],
        ),
        (
            "overlapping sections",
            Box::new(move |e: &mut Vec<Entry>| e[dir_i].offset = e[meta_i].offset + 1),
            &["overlap"],
        ),
        (
            "metadata inside the data",
            Box::new(move |e: &mut Vec<Entry>| e[meta_i].offset = DATA_OFFSET),
            &["overlap"],
        ),
        (
            "no directory",
            Box::new(move |e: &mut Vec<Entry>| {
                e.remove(dir_i);
            }),
            &["no section of kind 2"],
        ),
        (
            "no data section",
            Box::new(move |e: &mut Vec<Entry>| {
                e.remove(data_i);
            }),
            &["no section of kind 3"],
        ),
        (
            "two metadata sections",
            Box::new(move |e: &mut Vec<Entry>| {
                let m = e[meta_i];
                e.push(Entry {
                    size: 0,
                    offset: 64,
                    ..m
                });
            }),
            &["two sections of kind 1"],
        ),
        (
            "misaligned data section",
            Box::new(move |e: &mut Vec<Entry>| {
                e[data_i].offset += 8;
                e[data_i].size -= 8;
            }),
            &["data section", "aligned"],
        ),
        (
            "wrong metadata checksum",
            Box::new(move |e: &mut Vec<Entry>| e[meta_i].checksum ^= 1),
            &["checksum mismatch in metadata"],
        ),
        (
            "wrong directory checksum",
            Box::new(move |e: &mut Vec<Entry>| e[dir_i].checksum ^= 1),
            &["checksum mismatch in tensor directory"],
        ),
        (
            "unknown required section",
            Box::new(|e: &mut Vec<Entry>| {
                e.push(Entry {
                    kind: 99,
                    flags: 1,
                    offset: 64,
                    size: 0,
                    checksum: checksum(&[]),
                })
            }),
            &["required section kind 99", "upgrade tern"],
        ),
    ];
    for (what, f, needles) in cases {
        let b = edit_table(valid(), |e| f(e));
        let e = open_err(&b);
        assert!(
            matches!(
                e,
                FormatError::OutOfRange { .. }
                    | FormatError::Malformed { .. }
                    | FormatError::Checksum { .. }
            ),
            "{what}: {e:?}"
        );
        says(&e, needles);
    }
}

#[test]
fn metadata_and_directory_checksums_and_json() {
    let f = open(valid()).unwrap();
    for (kind, what) in [
        (SECTION_METADATA, "metadata"),
        (SECTION_DIRECTORY, "tensor directory"),
    ] {
        let s = *f.sections().iter().find(|s| s.kind == kind).unwrap();
        for at in [s.offset, s.offset + s.size / 2, s.offset + s.size - 1] {
            let mut b = valid().to_vec();
            b[at as usize] ^= 0x01;
            let e = open_err(&b);
            assert!(
                matches!(e, FormatError::Checksum { what: ref w, .. } if w == what),
                "{what} byte {at}: {e:?}"
            );
            says(
                &e,
                &[
                    &format!("checksum mismatch in {what}"),
                    "re-download or re-pack",
                ],
            );
        }
    }
    // Checksummed but not what the reader expects.
    let mut p = Parts::of(valid());
    p.meta = b"{\"arch\": \"llama\"".to_vec();
    says(&open_err(&p.assemble()), &["malformed metadata"]);
    let mut p = Parts::of(valid());
    p.meta = br#"{"arch":"gpt-j"}"#.to_vec();
    says(&open_err(&p.assemble()), &["malformed metadata", "gpt-j"]);
    let mut p = Parts::of(valid());
    p.dir = br#"{"tensors": 5}"#.to_vec();
    says(&open_err(&p.assemble()), &["malformed tensor directory"]);
    let mut p = Parts::of(valid());
    p.dir = vec![0xff, 0xfe];
    says(&open_err(&p.assemble()), &["malformed tensor directory"]);
}

#[test]
fn unknown_optional_section_is_skipped_but_still_verified() {
    let mut p = Parts::of(valid());
    p.extra
        .push((99, 0, b"an optional section from a newer writer".to_vec()));
    let b = p.assemble();
    let f = open(&b).unwrap();
    assert_eq!(f.sections().len(), 4);
    f.verify().unwrap();
    for (name, _, _, bytes) in tensors() {
        assert_eq!(f.tensor(name).unwrap().bytes, &bytes[..]);
    }
    // A flipped bit inside it is caught by verify (the reader skipped it on open).
    let s = *f.sections().iter().find(|s| s.kind == 99).unwrap();
    let mut c = b.clone();
    c[(s.offset + 3) as usize] ^= 0x20;
    let e = verify_err(&c);
    assert!(matches!(e, FormatError::Checksum { .. }), "{e:?}");
    says(&e, &["section of kind 99"]);
    // The same section marked required is refused.
    let mut p = Parts::of(valid());
    p.extra.push((99, 1, b"x".to_vec()));
    let e = open_err(&p.assemble());
    says(&e, &["required section kind 99 is unknown", "upgrade tern"]);
}

// ------------------------------------------------------------------------------------------------
// Tensor directory lies (all with valid checksums)

#[test]
fn directory_offsets_and_sizes_out_of_range() {
    let data_len = Parts::of(valid()).data.len() as u64;
    let q = "token_embd.weight";
    let nz = "output_norm.weight";
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Box<dyn Fn(&mut Value)>, &[&str])> = vec![
        (
            "offset past the data section",
            Box::new(move |d: &mut Value| {
                entry(d, q)["offset"] = json!((data_len + 255) / 256 * 256)
            }),
            &[
                "out of range",
                "token_embd.weight",
                "beyond the data section",
            ],
        ),
        (
            "neuzip size past the data section",
            Box::new(move |d: &mut Value| entry(d, nz)["size"] = json!(data_len)),
            &[
                "out of range",
                "output_norm.weight",
                "beyond the data section",
            ],
        ),
        (
            "neuzip size huge",
            Box::new(|d: &mut Value| entry(d, nz)["size"] = json!(1u64 << 62)),
            &["output_norm.weight", "beyond"],
        ),
        (
            "offset + size overflows",
            Box::new(|d: &mut Value| {
                entry(d, nz)["offset"] = json!(u64::MAX - 255);
                entry(d, nz)["size"] = json!(512);
            }),
            &["output_norm.weight", "offset + size overflows"],
        ),
        (
            "size not what the encoding needs",
            Box::new(|d: &mut Value| entry(d, q)["size"] = json!(272 + 34)),
            &[
                "token_embd.weight",
                "q8_0",
                "needs 272 bytes",
                "directory says 306",
            ],
        ),
        (
            "misaligned offset",
            Box::new(|d: &mut Value| entry(d, q)["offset"] = json!(4)),
            &["token_embd.weight", "offset 4 not 256-aligned"],
        ),
        (
            "overlapping tensors",
            Box::new(|d: &mut Value| {
                let o = entry(d, "blk.0.attn_norm.weight")["offset"].clone();
                entry(d, q)["offset"] = o;
            }),
            &["overlap", "token_embd.weight", "blk.0.attn_norm.weight"],
        ),
    ];
    for (what, f, needles) in cases {
        let e = open_err(&edit_dir(valid(), f));
        assert!(
            matches!(
                e,
                FormatError::OutOfRange { .. } | FormatError::Malformed { .. }
            ),
            "{what}: {e:?}"
        );
        says(&e, needles);
    }
}

#[test]
fn directory_shapes_encodings_features_names() {
    let q = "token_embd.weight";
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Box<dyn Fn(&mut Value)>, &[&str])> = vec![
        (
            "shape product overflows",
            Box::new(|d: &mut Value| entry(d, q)["shape"] = json!([u64::MAX, 2])),
            &["bad shape", "token_embd.weight", "overflows"],
        ),
        (
            "shape product overflows (neuzip: no size rule)",
            Box::new(|d: &mut Value| {
                entry(d, "output_norm.weight")["shape"] = json!([1u64 << 32, 1u64 << 32, 2])
            }),
            &["bad shape", "output_norm.weight", "overflows"],
        ),
        (
            "byte size overflows",
            Box::new(|d: &mut Value| {
                entry(d, "blk.0.attn_norm.weight")["shape"] = json!([1u64 << 62, 2])
            }),
            &["bad shape", "blk.0.attn_norm.weight", "overflows"],
        ),
        (
            "5 dimensions",
            Box::new(|d: &mut Value| entry(d, q)["shape"] = json!([1, 1, 1, 4, 64])),
            &["bad shape", "token_embd.weight", "5 dimensions"],
        ),
        (
            "q8_0 row not whole blocks",
            Box::new(|d: &mut Value| entry(d, q)["shape"] = json!([8, 32 + 2])),
            &["token_embd.weight", "not a multiple of 32"],
        ),
        (
            "unknown encoding",
            Box::new(|d: &mut Value| entry(d, q)["encoding"] = json!({"type": "q9_z"})),
            &["malformed tensor directory", "q9_z"],
        ),
        (
            "encoding without a type",
            Box::new(|d: &mut Value| entry(d, q)["encoding"] = json!({"group": 3})),
            &["malformed tensor directory"],
        ),
        (
            "unknown ternary layout",
            Box::new(|d: &mut Value| {
                entry(d, "blk.0.ffn_up.weight")["encoding"]["layout"] = json!("1bit")
            }),
            &["malformed tensor directory", "1bit"],
        ),
        (
            "ternary group does not divide the row",
            Box::new(|d: &mut Value| {
                entry(d, "blk.0.ffn_up.weight")["encoding"]["group"] = json!(7)
            }),
            &["blk.0.ffn_up.weight", "scale group 7"],
        ),
        (
            "ternary group changes the size",
            Box::new(|d: &mut Value| {
                entry(d, "blk.0.ffn_up.weight")["encoding"]["group"] = json!(16)
            }),
            &["blk.0.ffn_up.weight", "needs", "directory says 160"],
        ),
        (
            "duplicate names",
            Box::new(|d: &mut Value| {
                entry(d, "blk.0.attn_norm.weight")["name"] = json!("token_embd.weight")
            }),
            &["duplicate tensor name", "token_embd.weight"],
        ),
        (
            "empty name",
            Box::new(|d: &mut Value| entry(d, q)["name"] = json!("")),
            &["malformed tensor directory", "empty tensor name"],
        ),
        (
            "missing field",
            Box::new(|d: &mut Value| {
                entry(d, q).as_object_mut().unwrap().remove("checksum");
            }),
            &["malformed tensor directory", "checksum"],
        ),
        (
            "negative offset",
            Box::new(|d: &mut Value| entry(d, q)["offset"] = json!(-256)),
            &["malformed tensor directory"],
        ),
    ];
    for (what, f, needles) in cases {
        let e = open_err(&edit_dir(valid(), f));
        assert!(
            matches!(
                e,
                FormatError::BadShape { .. }
                    | FormatError::Malformed { .. }
                    | FormatError::OutOfRange { .. }
                    | FormatError::DuplicateTensor(_)
                    | FormatError::UnknownEncoding(_)
            ),
            "{what}: {e:?}"
        );
        says(&e, needles);
    }

    // An encoding whose feature bit the header does not declare.
    let mut p = Parts::of(valid());
    assert_ne!(p.required & FEATURE_NEUZIP, 0);
    p.required &= !FEATURE_NEUZIP;
    let e = open_err(&p.assemble());
    assert!(matches!(e, FormatError::Malformed { .. }), "{e:?}");
    says(&e, &["not declared in the header", "0x1"]);
}

// ------------------------------------------------------------------------------------------------
// Tensor bytes

#[test]
fn tensor_checksum_is_checked_lazily_and_by_verify() {
    let f = open(valid()).unwrap();
    for (i, t) in f.tensors().iter().enumerate() {
        let at = (f.data_offset() + t.offset + t.size / 2) as usize;
        let mut b = valid().to_vec();
        b[at] ^= 0x80;
        let g = open(&b).expect("tensor checksums are not read on open");
        for (j, u) in g.tensors().iter().enumerate() {
            let r = g.tensor(&u.name);
            if i == j {
                let e = r
                    .err()
                    .unwrap_or_else(|| panic!("flipped byte in {} not caught", t.name));
                assert!(matches!(e, FormatError::Checksum { .. }), "{e:?}");
                says(&e, &[&format!("tensor {:?}", t.name), "checksum mismatch"]);
                // Still refused on the second access (the result is cached, not the bytes).
                assert!(g.tensor_at(j).is_err());
            } else {
                r.unwrap();
            }
        }
        let e = g.verify().unwrap_err();
        assert!(matches!(e, FormatError::Checksum { .. }), "{e:?}");
        says(&e, &[&t.name]);
    }
}

#[test]
fn corrupt_tensor_contents_behind_a_valid_checksum() {
    // 2-bit code 3 is not a trit.
    let b = replace_tensor_bytes(valid(), "blk.0.ffn_up.weight", |t| t[5] = 0xff);
    let e = verify_err(&b);
    assert!(
        matches!(
            e,
            FormatError::Corrupt { .. } | FormatError::Malformed { .. }
        ),
        "{e:?}"
    );
    says(&e, &["blk.0.ffn_up.weight"]);

    // A byte that is not one of the 243 base-3 encodings (byte 0 of row 0 holds columns 0..5).
    let orig = open(valid())
        .unwrap()
        .tensor("blk.0.ffn_down.weight")
        .unwrap()
        .bytes
        .to_vec();
    let bad = (0..=255u8)
        .find(|&x| {
            let mut t = orig.clone();
            t[0] = x;
            let e = TernaryRef::new(TernaryLayout::Base3, 4, 40, 0, FloatType::F32, &t)
                .unwrap()
                .validate();
            matches!(e, Err(FormatError::Corrupt { .. }))
        })
        .expect("some byte is not a base-3 encoding");
    let b = replace_tensor_bytes(valid(), "blk.0.ffn_down.weight", |t| t[0] = bad);
    let e = verify_err(&b);
    says(&e, &["blk.0.ffn_down.weight"]);

    // NeuZip blob damage at every byte (with a fixed-up checksum): typed error or a clean decode,
    // never a panic. Damage in the header fields must be caught.
    let f = open(valid()).unwrap();
    for name in ["output_norm.weight", "blk.0.attn_k.weight"] {
        let size = f.tensor(name).unwrap().bytes.len();
        let mut caught = 0;
        for i in 0..size {
            let b = replace_tensor_bytes(valid(), name, |t| t[i] ^= 1 << (i % 8));
            match open(&b).unwrap().verify() {
                Err(e) => {
                    caught += 1;
                    assert!(
                        matches!(
                            e,
                            FormatError::Corrupt { .. }
                                | FormatError::Malformed { .. }
                                | FormatError::Truncated { .. }
                                | FormatError::NonZeroPadding { .. }
                        ),
                        "{name} byte {i}: {e:?}"
                    );
                }
                Ok(()) => assert!(
                    i >= neuzip::HEADER_BYTES,
                    "{name}: damaged NeuZip header byte {i} passed verify"
                ),
            }
        }
        assert!(
            caught > size / 4,
            "{name}: only {caught} of {size} damaged blobs refused"
        );
    }

    // A NeuZip blob that does not describe the tensor the directory says it is.
    for (what, edit) in [
        (
            "dtype",
            json!({"type": "neuzip", "dtype": "f16", "mantissa_bits": 7}),
        ),
        (
            "mantissa bits",
            json!({"type": "neuzip", "dtype": "bf16", "mantissa_bits": 3}),
        ),
    ] {
        let b = edit_dir(valid(), |d| {
            entry(d, "output_norm.weight")["encoding"] = edit.clone()
        });
        let e = verify_err(&b);
        assert!(matches!(e, FormatError::Malformed { .. }), "{what}: {e:?}");
        says(&e, &["output_norm.weight", "neuzip", "directory says"]);
    }
    for shape in [json!([4, 32]), json!([3, 64]), json!([128, 1])] {
        let b = edit_dir(valid(), |d| {
            entry(d, "output_norm.weight")["shape"] = shape.clone()
        });
        says(&verify_err(&b), &["output_norm.weight", "neuzip"]);
    }
}

#[test]
fn nonzero_padding_is_refused() {
    let f = open(valid()).unwrap();
    let t0 = &f.tensors()[0];
    let after_first = (f.data_offset() + t0.offset + t0.size) as usize;
    for at in [
        HEADER_SIZE,
        100,
        DATA_OFFSET as usize - 1,
        after_first,
        after_first + 1,
    ] {
        let mut b = valid().to_vec();
        assert_eq!(b[at], 0);
        b[at] = 1;
        let e = verify_err(&b);
        assert!(
            matches!(e, FormatError::NonZeroPadding { offset, .. } if offset == at as u64),
            "byte {at}: {e:?}"
        );
        says(&e, &["non-zero padding", &format!("byte {at}")]);
    }
}

/// Region of the file a byte belongs to, and what a flipped bit there must give.
#[derive(Debug, PartialEq)]
enum Region {
    Header,
    Table,
    Section(u32),
    Tensor(usize),
    Padding,
}

fn region_map(b: &[u8]) -> Vec<Region> {
    let f = open(b).unwrap();
    let mut m: Vec<Region> = (0..b.len()).map(|_| Region::Padding).collect();
    let mut fill =
        |s: u64, e: u64, r: &dyn Fn() -> Region| (s..e).for_each(|i| m[i as usize] = r());
    fill(0, HEADER_SIZE as u64, &|| Region::Header);
    fill(f.header().section_table_offset, b.len() as u64, &|| {
        Region::Table
    });
    for s in f.sections().iter().filter(|s| s.kind != SECTION_DATA) {
        fill(s.offset, s.offset + s.size, &|| Region::Section(s.kind));
    }
    for (i, t) in f.tensors().iter().enumerate() {
        let s = f.data_offset() + t.offset;
        fill(s, s + t.size, &|| Region::Tensor(i));
    }
    m
}

#[test]
fn verify_catches_a_flipped_bit_at_every_byte() {
    let mut p = Parts::of(valid());
    p.extra.push((77, 0, b"optional".to_vec()));
    let with_optional = p.assemble();
    for b in [valid(), small(), &with_optional[..]] {
        let regions = region_map(b);
        let names: Vec<String> = open(b)
            .unwrap()
            .tensors()
            .iter()
            .map(|t| t.name.clone())
            .collect();
        let mut seen = BTreeMap::new();
        for (i, region) in regions.iter().enumerate() {
            let mut c = b.to_vec();
            c[i] ^= 1 << (i % 8);
            let res = open(&c).and_then(|f| f.verify());
            let e = res.err().unwrap_or_else(|| {
                panic!(
                    "flipped bit {} of byte {i} ({region:?}) not detected",
                    i % 8
                )
            });
            let ok = match region {
                Region::Header => true, // magic, version, truncation or header checksum
                Region::Table => {
                    matches!(e, FormatError::Checksum { ref what, .. } if what == "section table")
                }
                Region::Section(k) => {
                    matches!(e, FormatError::Checksum { .. }) && {
                        let m = e.to_string();
                        match *k {
                            SECTION_METADATA => m.contains("metadata"),
                            SECTION_DIRECTORY => m.contains("tensor directory"),
                            k => m.contains(&format!("section of kind {k}")),
                        }
                    }
                }
                Region::Tensor(t) => {
                    matches!(e, FormatError::Checksum { .. })
                        && e.to_string().contains(&format!("{:?}", names[*t]))
                }
                Region::Padding => {
                    matches!(e, FormatError::NonZeroPadding { offset, .. } if offset == i as u64)
                }
            };
            assert!(ok, "byte {i} ({region:?}): {e:?}");
            *seen
                .entry(format!("{:?}", std::mem::discriminant(region)))
                .or_insert(0) += 1;
        }
        assert_eq!(
            seen.len(),
            5,
            "every kind of region was exercised: {seen:?}"
        );
    }
    // Every bit of the header and the table of the small file.
    let b = small();
    let t0 = u64_at(b, 32) as usize;
    for i in (0..HEADER_SIZE).chain(t0..b.len()) {
        for bit in 0..8 {
            let mut c = b.to_vec();
            c[i] ^= 1 << bit;
            assert!(open(&c).is_err(), "bit {bit} of byte {i}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The CLI: `tern inspect --verify` and `--json`

#[test]
fn cli_inspect_verify_and_json() {
    let dir = tern_tests::scratch("tern_malformed_cli");
    let good = dir.join("good.tern");
    std::fs::write(&good, valid()).unwrap();
    let f = open(valid()).unwrap();
    let t = &f.tensors()[2];
    let mut b = valid().to_vec();
    b[(f.data_offset() + t.offset + 7) as usize] ^= 0x02;
    let flipped = dir.join("flipped.tern");
    std::fs::write(&flipped, &b).unwrap();
    let mut b = valid().to_vec();
    b[DATA_OFFSET as usize - 3] = 0x40;
    let padded = dir.join("padding.tern");
    std::fs::write(&padded, &b).unwrap();
    let bad_magic = dir.join("bad.tern");
    std::fs::write(&bad_magic, b"NOT A TERN FILE, just some text").unwrap();
    let truncated = dir.join("truncated.tern");
    std::fs::write(&truncated, &valid()[..5000]).unwrap();

    let bin = tern_tests::tern_bin();
    let run = |args: &[&str], file: &Path| {
        let out = Command::new(&bin)
            .arg("inspect")
            .arg(file)
            .args(args)
            .output()
            .expect("run tern");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // The container is sound, but its tensors are no model of its hyperparameters (the fixture
    // exercises encodings, not a forward pass): `--verify` checks every byte first, then the
    // hyperparameters against the tensors (`tern_format::check_hparams`), and names the first
    // problem. A file that passes both is covered by tests/tests/hostile_hparams.rs.
    let (st, out, err) = run(&["--verify"], &good);
    assert!(!st.success(), "good file: {st:?}\n{out}\n{err}");
    assert!(
        err.contains("verify FAILED: malformed hyperparameters") && err.contains("attn_q"),
        "{err}"
    );

    let (st, _, err) = run(&["--verify"], &flipped);
    assert!(
        !st.success(),
        "flipped data byte passed `tern inspect --verify`"
    );
    assert!(
        err.contains("verify FAILED") && err.contains("checksum mismatch") && err.contains(&t.name),
        "stderr: {err}"
    );

    let (st, _, err) = run(&["--verify"], &padded);
    assert!(!st.success());
    assert!(
        err.contains("non-zero padding") && err.contains(&format!("byte {}", DATA_OFFSET - 3)),
        "stderr: {err}"
    );

    // Without --verify a flipped tensor byte is not looked at (inspect reads the directory only).
    let (st, _, _) = run(&[], &flipped);
    assert!(st.success());

    for (file, needle) in [(&bad_magic, "tern pack"), (&truncated, "truncated")] {
        let (st, _, err) = run(&["--verify"], file);
        assert!(!st.success(), "{}", file.display());
        assert!(err.contains(needle), "{}: stderr {err}", file.display());
    }

    let (st, out, err) = run(&["--json"], &good);
    assert!(st.success(), "{err}");
    let j: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("--json output does not parse: {e}\n{out}"));
    let rows = j["tensors"].as_array().expect("tensors array");
    assert_eq!(rows.len(), f.tensors().len());
    let mut total = 0;
    for (r, t) in rows.iter().zip(f.tensors()) {
        assert_eq!(r["name"], t.name.as_str());
        assert_eq!(r["shape"], json!(t.shape));
        assert_eq!(r["encoding"], t.encoding.name().as_str());
        assert_eq!(r["bytes"], t.size);
        assert_eq!(r["checksum"], format!("{:016x}", t.checksum).as_str());
        total += t.size;
    }
    assert_eq!(j["totals"]["tensors"], rows.len());
    assert_eq!(j["totals"]["bytes"], total);
    assert_eq!(j["totals"]["file_bytes"], valid().len());
    // With --verify the JSON says whether the file passed (this one fails the hyperparameter check).
    let (st, out, _) = run(&["--json", "--verify"], &good);
    assert!(!st.success());
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["verified"], false);

    let (st, out, _) = run(&["--json", "--verify"], &flipped);
    assert!(!st.success());
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["verified"], false);
}

// ------------------------------------------------------------------------------------------------
// Fuzz seeds

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let v = valid();
    let f = open(v).unwrap();
    let data = f.data_offset() as usize;
    let t = &f.tensors()[0];
    let mut flipped = v.to_vec();
    flipped[data + t.offset as usize + 3] ^= 0x10;
    let mut padding = v.to_vec();
    padding[200] = 7;
    let mut p = Parts::of(v);
    p.extra.push((99, 0, b"optional".to_vec()));
    let optional = p.assemble();
    vec![
        ("valid.tern", v.to_vec()),
        ("valid_small.tern", small().to_vec()),
        ("optional_section.tern", optional),
        ("flipped_tensor_byte.tern", flipped),
        ("nonzero_padding.tern", padding),
        ("truncated_directory.tern", v[..v.len() - 100].to_vec()),
        (
            "bad_ternary_code.tern",
            replace_tensor_bytes(v, "blk.0.ffn_up.weight", |t| t[5] = 0xff),
        ),
        (
            "bad_neuzip_blob.tern",
            replace_tensor_bytes(v, "output_norm.weight", |t| t[8] ^= 0x01),
        ),
        (
            "neuzip_dtype_lie.tern",
            edit_dir(v, |d| {
                entry(d, "output_norm.weight")["encoding"]["dtype"] = json!("f16")
            }),
        ),
        (
            "shape_overflow.tern",
            edit_dir(small(), |d| d["tensors"][0]["shape"] = json!([u64::MAX, 2])),
        ),
        (
            "misaligned_offset.tern",
            edit_dir(small(), |d| d["tensors"][0]["offset"] = json!(4)),
        ),
        (
            "unknown_encoding.tern",
            edit_dir(small(), |d| {
                d["tensors"][0]["encoding"] = json!({"type": "q5_k"})
            }),
        ),
    ]
}

#[test]
fn write_fuzz_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/tern_read");
    let bless = std::env::var_os("TERN_BLESS").is_some();
    if bless {
        std::fs::create_dir_all(&dir).unwrap();
    }
    for (name, bytes) in seeds() {
        assert!(bytes.len() <= 20_000, "{name} is {} bytes", bytes.len());
        if bless {
            std::fs::write(dir.join(name), &bytes).unwrap();
        }
        // Valid seeds open and verify; the others fail cleanly.
        let res = open(&bytes).and_then(|f| f.verify());
        assert_eq!(
            res.is_ok(),
            name.starts_with("valid") || name.starts_with("optional"),
            "{name}: {res:?}"
        );
        // The committed copies still mean what their names say.
        if let Ok(committed) = std::fs::read(dir.join(name)) {
            let res = open(&committed).and_then(|f| f.verify());
            assert_eq!(
                res.is_ok(),
                name.starts_with("valid") || name.starts_with("optional"),
                "committed {name}: {res:?}"
            );
        }
    }
}

/// NeuZip layout 2 inside a `.tern` file (issue 15): the fixture with its two NeuZip tensors
/// re-encoded in layout 2 is valid and decodes to the same values; damage at every byte of
/// either blob (checksum fixed up) is a typed error or a clean decode, never a panic; damage to
/// any header byte or to the index (frequency table, block word bases, lane states, lane starts:
/// every offset and length the decoder follows) is always refused.
#[test]
fn neuzip_layout_2_damage_is_typed() {
    let specs: Vec<TensorSpec> = tensors()
        .into_iter()
        .map(|(name, shape, enc, bytes)| match enc {
            Encoding::NeuZip {
                dtype,
                mantissa_bits,
            } => {
                let raw = neuzip::decode(&bytes).unwrap();
                let cols = *shape.last().unwrap() as usize;
                let v2 = neuzip::encode_v2_with(
                    dtype,
                    mantissa_bits,
                    &raw,
                    cols,
                    neuzip::Params {
                        lanes: 5,
                        block_symbols: 70,
                    },
                )
                .unwrap();
                (name, shape, enc, v2)
            }
            other => (name, shape, other, bytes),
        })
        .collect();
    let b = write_file(
        &tern_tests::scratch("tern_malformed_nz2").join("v2.tern"),
        &specs,
    );
    let f = open(&b).unwrap();
    f.verify().unwrap();
    let base = open(valid()).unwrap();
    for name in ["output_norm.weight", "blk.0.attn_k.weight"] {
        let blob = f.tensor(name).unwrap().bytes.to_vec();
        let plan = neuzip::Plan::parse(&blob).unwrap();
        assert_eq!(plan.version, 2);
        assert_eq!(
            neuzip::decode(&blob).unwrap(),
            neuzip::decode(base.tensor(name).unwrap().bytes).unwrap(),
            "{name}: layout 2 decodes to layout 1's values"
        );
        let index_end = plan.words.offset as usize;
        for i in 0..blob.len() {
            let d = replace_tensor_bytes(&b, name, |t| t[i] ^= 1 << (i % 8));
            match open(&d).unwrap().verify() {
                Err(e) => assert!(
                    matches!(
                        e,
                        FormatError::Corrupt { .. }
                            | FormatError::Malformed { .. }
                            | FormatError::Truncated { .. }
                            | FormatError::NonZeroPadding { .. }
                    ),
                    "{name} byte {i}: {e:?}"
                ),
                Ok(()) => {
                    let table_symbol = plan.table.range().contains(&i)
                        && (i - plan.table.offset as usize) % 4 == 0;
                    assert!(
                        i >= index_end || (table_symbol && i >= neuzip::HEADER_BYTES),
                        "{name}: damaged layout-2 header/index byte {i} passed verify"
                    );
                }
            }
        }
    }
}
