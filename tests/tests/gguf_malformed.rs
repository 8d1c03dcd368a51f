//! The GGUF parser on malformed and hostile input: every case is a typed error that names the
//! problem, never a panic or a huge allocation.

use tern_import::gguf::{GgmlType, GgufFile};
use tern_import::ImportError;

// ------------------------------------------------------------------------------------------------
// A tiny GGUF writer with knobs for breaking things

fn s(x: &str) -> Vec<u8> {
    let mut v = (x.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(x.as_bytes());
    v
}

struct Kv(Vec<u8>);

impl Kv {
    fn raw(key: &str, ty: u32, payload: &[u8]) -> Kv {
        let mut v = s(key);
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(payload);
        Kv(v)
    }
    fn str(key: &str, val: &str) -> Kv {
        Kv::raw(key, 8, &s(val))
    }
    fn u32(key: &str, val: u32) -> Kv {
        Kv::raw(key, 4, &val.to_le_bytes())
    }
}

#[derive(Clone)]
struct T {
    name: String,
    ne: Vec<u64>,
    ty: u32,
    /// `None`: the next aligned offset after the previous tensor.
    offset: Option<u64>,
    data: Vec<u8>,
}

fn t(name: &str, ne: &[u64], ty: u32, data: Vec<u8>) -> T {
    T {
        name: name.into(),
        ne: ne.to_vec(),
        ty,
        offset: None,
        data,
    }
}

struct G {
    version: u32,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    kv: Vec<Kv>,
    tensors: Vec<T>,
    align: u64,
}

impl G {
    fn new() -> G {
        G {
            version: 3,
            n_tensors: None,
            n_kv: None,
            kv: vec![Kv::str("general.architecture", "llama")],
            tensors: vec![],
            align: 32,
        }
    }

    /// A valid file with several value and tensor types.
    fn valid() -> G {
        let mut g = G::new();
        g.kv.push(Kv::u32("llama.block_count", 2));
        g.kv.push(Kv::raw("t.f32", 6, &0.5f32.to_le_bytes()));
        g.kv.push(Kv::raw("t.bool", 7, &[1]));
        g.kv.push(Kv::raw("t.i8", 1, &[0xF9]));
        let mut arr = 8u32.to_le_bytes().to_vec();
        arr.extend_from_slice(&2u64.to_le_bytes());
        arr.extend(s("ab"));
        arr.extend(s("c"));
        g.kv.push(Kv::raw("t.strs", 9, &arr));
        let mut arr = 5u32.to_le_bytes().to_vec();
        arr.extend_from_slice(&3u64.to_le_bytes());
        for x in [1i32, -2, 3] {
            arr.extend_from_slice(&x.to_le_bytes());
        }
        g.kv.push(Kv::raw("t.i32s", 9, &arr));
        let mut q8 = vec![0u8; 68];
        q8[1] = 0x3c; // d = 1.0
        q8[2] = 5;
        q8[35] = 0x3c;
        q8[36] = 0xFF; // -1
        g.tensors.push(t(
            "a",
            &[4],
            0,
            [1f32, 2., 3., 4.]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ));
        g.tensors.push(t("b", &[32, 2], 8, q8));
        g.tensors.push(t("c", &[3, 2], 1, vec![0; 12]));
        let mut tq2 = vec![0x55u8; 66];
        tq2[64] = 0;
        tq2[65] = 0x3c;
        g.tensors.push(t("d", &[256], 35, tq2));
        g
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(
            &self
                .n_tensors
                .unwrap_or(self.tensors.len() as u64)
                .to_le_bytes(),
        );
        out.extend_from_slice(&self.n_kv.unwrap_or(self.kv.len() as u64).to_le_bytes());
        for kv in &self.kv {
            out.extend_from_slice(&kv.0);
        }
        let pad = |x: u64| x.div_ceil(self.align) * self.align;
        let mut offsets = vec![];
        let mut next = 0u64;
        for t in &self.tensors {
            let off = t.offset.unwrap_or(next);
            offsets.push(off);
            next = pad(off.saturating_add(t.data.len() as u64).min(1 << 40));
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            out.extend(s(&t.name));
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
        }
        if !self.tensors.is_empty() {
            out.resize(pad(out.len() as u64) as usize, 0);
        }
        let base = out.len();
        for (t, off) in self.tensors.iter().zip(&offsets) {
            if *off > 1 << 20 {
                continue; // an out-of-range offset under test: its bytes are not written
            }
            let start = base + *off as usize;
            if out.len() < start + t.data.len() {
                out.resize(start + t.data.len(), 0);
            }
            out[start..start + t.data.len()].copy_from_slice(&t.data);
        }
        out // no padding after the last tensor: every strict prefix is invalid
    }
}

fn parse(b: Vec<u8>) -> Result<GgufFile, ImportError> {
    GgufFile::from_bytes(b)
}

/// Parsing fails with a GGUF error whose message contains `needle`.
#[track_caller]
fn expect_err(b: Vec<u8>, needle: &str) {
    match parse(b) {
        Ok(_) => panic!("parsed, expected an error containing {needle:?}"),
        Err(ImportError::Gguf(m)) => assert!(
            m.contains(needle),
            "error {m:?} does not contain {needle:?}"
        ),
        Err(e) => panic!("unexpected error kind {e:?}"),
    }
}

// ------------------------------------------------------------------------------------------------

#[test]
fn valid_file_parses() {
    let g = parse(G::valid().bytes()).unwrap();
    assert_eq!(g.tensors().len(), 4);
    assert_eq!(g.get_str_array("t.strs").unwrap(), ["ab", "c"]);
    assert_eq!(g.get_i32_array("t.i32s").unwrap(), [1, -2, 3]);
    assert!(g.get_bool("t.bool").unwrap());
    assert_eq!(g.get_f32("t.f32").unwrap(), 0.5);
    assert!(g.get_u32("t.i8").is_err(), "-7 does not fit u32");
    let b = g.tensor("b").unwrap();
    assert_eq!(
        (b.ggml_type, b.size, b.shape()),
        (GgmlType::Q8_0, Some(68), vec![2, 32])
    );
    let bytes = g.tensor_bytes(b).unwrap();
    let deq = tern_format::ggml::dequantize(tern_format::ggml::BlockType::Q8_0, bytes, 64).unwrap();
    assert_eq!((deq[0], deq[1], deq[32], deq[33]), (5.0, 0.0, -1.0, 0.0));
    let d = g.tensor("d").unwrap();
    let (trits, _) = tern_format::ggml::tq2_0_to_trits(g.tensor_bytes(d).unwrap(), 256).unwrap();
    assert!(trits.iter().all(|&t| t == 0));
}

/// Every strict prefix of a valid file is an error (the writer adds no trailing padding), and none
/// panics.
#[test]
fn truncation_at_every_byte() {
    let full = G::valid().bytes();
    parse(full.clone()).unwrap();
    for len in 0..full.len() {
        match parse(full[..len].to_vec()) {
            Ok(_) => panic!("prefix of {len} of {} bytes parsed", full.len()),
            Err(ImportError::Gguf(m)) => {
                assert!(
                    m.contains("truncated")
                        || m.contains("past the end")
                        || m.contains("cannot fit"),
                    "{len}: {m}"
                )
            }
            Err(e) => panic!("{len}: unexpected error kind {e:?}"),
        }
    }
}

/// The same on a real llama.cpp-written file (tests/golden/ggml/tiny-tq2_0.gguf): every prefix
/// through the header and a sample through the data section. Prefixes that keep every tensor's
/// bytes (only the trailing padding is cut) are valid.
#[test]
fn truncation_of_llama_cpp_file() {
    let full = std::fs::read(tern_tests::golden("ggml/tiny-tq2_0.gguf")).unwrap();
    let g = parse(full.clone()).unwrap();
    let end = g
        .tensors()
        .iter()
        .map(|t| g.data_offset() + t.offset + t.size.unwrap())
        .max()
        .unwrap() as usize;
    let header = g.data_offset() as usize;
    let lens = (0..=header)
        .chain((header..full.len()).step_by(997))
        .chain(end - 2..full.len());
    for len in lens {
        let r = parse(full[..len].to_vec());
        assert_eq!(
            r.is_ok(),
            len >= end,
            "prefix {len} (data ends at {end}): {:?}",
            r.err()
        );
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut b = G::valid().bytes();
    b[3] = b'X';
    expect_err(b, "bad magic");
    let mut g = G::valid();
    g.version = 1;
    expect_err(g.bytes(), "v1 is not supported");
    g.version = 4;
    expect_err(g.bytes(), "unsupported GGUF version 4");
    g.version = 0;
    expect_err(g.bytes(), "unsupported GGUF version 0");
    g.version = 3u32.swap_bytes();
    expect_err(g.bytes(), "big-endian");
    g.version = 2;
    parse(g.bytes()).unwrap();
}

#[test]
fn hostile_counts_do_not_allocate() {
    for (nt, nk, needle) in [
        (Some(u64::MAX), None, "out of range"),
        (Some(1 << 40), None, "tensor count"),
        (None, Some(u64::MAX), "out of range"),
        (None, Some(1 << 40), "key/value count"),
        (Some(i64::MAX as u64), Some(i64::MAX as u64), "cannot fit"),
    ] {
        let mut g = G::valid();
        g.n_tensors = nt;
        g.n_kv = nk;
        expect_err(g.bytes(), needle);
    }
    // More key/value pairs announced than present: reading runs into the tensor infos and fails.
    let mut g = G::valid();
    g.n_kv = Some(g.kv.len() as u64 + 1);
    assert!(parse(g.bytes()).is_err());
}

#[test]
fn hostile_strings_and_arrays() {
    let mut g = G::new();
    let mut v = s("k");
    v.truncate(0);
    v.extend_from_slice(&(u64::MAX).to_le_bytes()); // key length
    g.kv.push(Kv(v));
    expect_err(g.bytes(), "string length");

    let mut g = G::new();
    g.kv.push(Kv::raw("k", 8, &(1u64 << 50).to_le_bytes()));
    expect_err(g.bytes(), "string length");

    for (ty, n, needle) in [
        (4u32, 1u64 << 31, "exceeds the limit"),
        (4, 1 << 29, "cannot fit"),
        (8, 1 << 29, "cannot fit"),
        (0, u64::MAX, "exceeds the limit"),
    ] {
        let mut g = G::new();
        let mut a = ty.to_le_bytes().to_vec();
        a.extend_from_slice(&n.to_le_bytes());
        g.kv.push(Kv::raw("arr", 9, &a));
        expect_err(g.bytes(), needle);
    }

    let mut g = G::new();
    let mut a = 9u32.to_le_bytes().to_vec();
    a.extend_from_slice(&1u64.to_le_bytes());
    g.kv.push(Kv::raw("nested", 9, &a));
    expect_err(g.bytes(), "arrays of arrays");

    let mut g = G::new();
    g.kv.push(Kv::raw("k", 13, &[0; 8]));
    expect_err(g.bytes(), "invalid value type 13");

    let mut g = G::new();
    let mut a = 77u32.to_le_bytes().to_vec();
    a.extend_from_slice(&1u64.to_le_bytes());
    g.kv.push(Kv::raw("k", 9, &a));
    expect_err(g.bytes(), "invalid array element type 77");

    let mut g = G::new();
    g.kv.push(Kv::raw("b", 7, &[2]));
    expect_err(g.bytes(), "not 0 or 1");

    let mut g = G::new();
    g.kv.push(Kv::u32("dup", 1));
    g.kv.push(Kv::u32("dup", 2));
    expect_err(g.bytes(), "duplicate key \"dup\"");

    let mut g = G::new();
    g.kv.push(Kv::u32("", 1));
    expect_err(g.bytes(), "empty key");

    let mut g = G::new();
    let mut k = 2u64.to_le_bytes().to_vec();
    k.extend_from_slice(&[0xC3, 0x28]);
    k.extend_from_slice(&4u32.to_le_bytes());
    k.extend_from_slice(&1u32.to_le_bytes());
    g.kv.push(Kv(k));
    expect_err(g.bytes(), "not valid UTF-8");

    let mut g = G::new();
    g.kv = vec![Kv::u32("general.architecture", 3)];
    expect_err(g.bytes(), "general.architecture is u32");
}

#[test]
fn alignment_rules() {
    for (a, ok) in [(64u32, true), (1, true), (48, false), (0, false)] {
        let mut g = G::valid();
        g.kv.push(Kv::u32("general.alignment", a));
        g.align = a.max(1) as u64;
        match ok {
            true => assert_eq!(parse(g.bytes()).unwrap().alignment(), a as u64),
            false => expect_err(g.bytes(), "power of two"),
        }
    }
    let mut g = G::valid();
    g.tensors[1].offset = Some(36); // inside the data section, not a multiple of 32
    expect_err(g.bytes(), "not a multiple of the alignment 32");
}

#[test]
fn tensor_info_errors() {
    let cases: Vec<(Box<dyn Fn(&mut G)>, &str)> = vec![
        (
            Box::new(|g| g.tensors[0].ne = vec![1, 1, 1, 1, 4]),
            "5 dimensions, at most 4",
        ),
        (
            Box::new(|g| g.tensors[0].ne = vec![1 << 32, 1 << 32]),
            "overflows",
        ),
        (Box::new(|g| g.tensors[0].ne = vec![u64::MAX]), "negative"),
        (
            Box::new(|g| g.tensors[0].ne = vec![1 << 62]),
            "byte size overflows",
        ),
        (
            Box::new(|g| g.tensors[1].ne = vec![31, 2]),
            "not a multiple of the q8_0 block size 32",
        ),
        (
            Box::new(|g| g.tensors[3].offset = Some(1 << 40)),
            "past the end of the data section",
        ),
        (
            Box::new(|g| g.tensors[3].offset = Some(u64::MAX - 31)),
            "past the end of the data section",
        ),
        (
            Box::new(|g| g.tensors[1].offset = Some(0)),
            "overlaps tensor \"a\"",
        ),
        (
            Box::new(|g| g.tensors[2].name = "a".into()),
            "duplicate tensor name \"a\"",
        ),
        (
            Box::new(|g| g.tensors[3].data.truncate(10)),
            "run past the end",
        ),
    ];
    for (i, (f, needle)) in cases.iter().enumerate() {
        let mut g = G::valid();
        f(&mut g);
        let b = g.bytes();
        match parse(b) {
            Ok(_) => panic!("case {i}: parsed, expected {needle:?}"),
            Err(ImportError::Gguf(m)) => {
                assert!(m.contains(needle), "case {i}: {m:?} lacks {needle:?}")
            }
            Err(e) => panic!("case {i}: {e:?}"),
        }
    }
}

#[test]
fn unknown_types_are_listed_but_not_read() {
    let mut g = G::valid();
    g.tensors.push(t("mystery", &[7, 3], 200, vec![1, 2, 3]));
    g.tensors.push(t("i2s_in_llama", &[128], 36, vec![0; 64]));
    let f = parse(g.bytes()).unwrap();
    for name in ["mystery", "i2s_in_llama"] {
        let info = f.tensor(name).unwrap();
        assert!(matches!(info.ggml_type, GgmlType::Unknown(_)));
        assert_eq!(info.size, None);
        match f.tensor_bytes(info) {
            Err(ImportError::UnsupportedGgufType { name: n, ty, .. }) => {
                assert_eq!((n.as_str(), ty), (name, info.type_id))
            }
            other => panic!("{other:?}"),
        }
    }
    // The same id 36 in a bitnet-25 file is I2_S with size n/4 + 32.
    let mut g = G::new();
    g.kv = vec![Kv::str("general.architecture", "bitnet-25")];
    let mut data = vec![0x55u8; 32];
    data.extend_from_slice(&0.5f32.to_le_bytes());
    data.extend_from_slice(&[0; 28]);
    g.tensors.push(t("w", &[128], 36, data));
    let f = parse(g.bytes()).unwrap();
    let w = f.tensor("w").unwrap();
    assert_eq!((w.ggml_type, w.size), (GgmlType::I2_S, Some(64)));
    let (trits, scale) = tern_format::ggml::i2s_to_trits(f.tensor_bytes(w).unwrap(), 128).unwrap();
    assert_eq!(scale, 0.5);
    assert!(trits.iter().all(|&t| t == 0));
}

/// Random byte flips of a valid file never panic (a cheap stand-in for the fuzzer in CI), and the
/// fuzz seeds and regressions parse without panicking.
#[test]
fn mutations_and_fuzz_regressions_never_panic() {
    let full = G::valid().bytes();
    let mut seed = 0x9E3779B97F4A7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..20_000 {
        let mut b = full.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % b.len();
            b[i] = match next() % 3 {
                0 => next() as u8,
                1 => 0xFF,
                _ => 0,
            };
        }
        if let Ok(g) = parse(b) {
            for t in g.tensors() {
                if let (Ok(bytes), Some(bt)) = (g.tensor_bytes(t), t.ggml_type.block_type()) {
                    let _ = tern_format::ggml::dequantize(bt, bytes, t.n_elements() as usize);
                }
            }
        }
    }
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/gguf_parse");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "py") {
            continue;
        }
        let _ = parse(std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n >= 5, "seed corpus in {}", dir.display());
    let all = parse(std::fs::read(dir.join("all_types.gguf")).unwrap()).unwrap();
    assert_eq!(all.tensors().len(), 8);
    assert_eq!(all.get_str("t.str").unwrap(), "héllo");
    assert_eq!(all.opt_u64("t.u64").unwrap(), Some(1 << 40));
    assert_eq!(all.get_f32_array("t.arr_f32").unwrap(), [0.5, 1.5]);
    for t in all.tensors() {
        all.tensor_bytes(t).unwrap();
    }
    let i2s = parse(std::fs::read(dir.join("bitnet25_i2s.gguf")).unwrap()).unwrap();
    let w = i2s.tensor("w").unwrap();
    tern_format::ggml::i2s_to_trits(i2s.tensor_bytes(w).unwrap(), 128).unwrap();
}
