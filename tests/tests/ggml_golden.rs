//! tern's GGUF parser and ggml block decoders against llama.cpp itself: golden vectors made by
//! the vendored llama.cpp build (see tests/golden/ggml/PROVENANCE.md) and the real SmolLM2 GGUF
//! as llama.cpp's gguf-py reads it.

use tern_import::gguf::{GgmlType, GgufFile};

mod sha256 {
    //! A small SHA-256 (FIPS 180-4) so the test needs no extra dependency; checked against the
    //! standard test vectors below.
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    fn block(h: &mut [u32; 8], b: &[u8]) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b2, mut c, mut d, mut e, mut f, mut g, mut hh] = *h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b2) ^ (a & c) ^ (b2 & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b2;
            b2 = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b2, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }

    pub fn hex(data: &[u8]) -> String {
        let mut h: [u32; 8] = [
            0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
            0x5be0cd19,
        ];
        let mut chunks = data.chunks_exact(64);
        for c in &mut chunks {
            block(&mut h, c);
        }
        let rest = chunks.remainder();
        let mut tail = rest.to_vec();
        tail.push(0x80);
        while tail.len() % 64 != 56 {
            tail.push(0);
        }
        tail.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
        for c in tail.chunks_exact(64) {
            block(&mut h, c);
        }
        h.iter().map(|x| format!("{x:08x}")).collect()
    }

    #[test]
    fn sha256_test_vectors() {
        assert_eq!(
            hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(
            hex(long),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }
}

#[derive(serde::Deserialize)]
struct TensorRecord {
    name: String,
    #[serde(rename = "type")]
    ty: u32,
    ne: Vec<u64>,
    offset: u64,
    n_bytes: u64,
    sha256: String,
}

#[derive(serde::Deserialize)]
struct SmolRecord {
    data_offset: u64,
    alignment: u64,
    tensors: Vec<TensorRecord>,
}

/// tern's parser agrees with gguf-py on every tensor of the real SmolLM2 GGUF: name, type, shape,
/// offset, size and the bytes themselves (sha256), and every byte range is inside the file.
#[test]
fn smollm2_gguf_matches_gguf_py() {
    let path = tern_tests::smollm2_gguf();
    let g = GgufFile::open(&path).unwrap();
    let rec: SmolRecord = serde_json::from_slice(
        &std::fs::read(tern_tests::golden("ggml/smollm2_tensors.json")).unwrap(),
    )
    .unwrap();

    assert_eq!(g.version(), 3);
    assert_eq!(g.architecture(), "llama");
    assert_eq!(g.data_offset(), rec.data_offset);
    assert_eq!(g.alignment(), rec.alignment);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.tensors().len(), rec.tensors.len());

    let file_len = g.bytes().len() as u64;
    let mut ranges = vec![];
    for (t, r) in g.tensors().iter().zip(&rec.tensors) {
        assert_eq!(t.name, r.name);
        assert_eq!(t.type_id, r.ty, "{}", t.name);
        assert_eq!(t.ne, r.ne, "{}", t.name);
        assert_eq!(t.offset, r.offset, "{}", t.name);
        assert_eq!(t.size, Some(r.n_bytes), "{}", t.name);
        let start = g.data_offset() + t.offset;
        assert!(start + r.n_bytes <= file_len);
        assert_eq!(start % g.alignment(), 0);
        ranges.push((start, start + r.n_bytes));
        let bytes = g.tensor_bytes(t).unwrap();
        assert_eq!(bytes.len() as u64, r.n_bytes);
        assert_eq!(sha256::hex(bytes), r.sha256, "{}", t.name);
    }
    ranges.sort();
    for w in ranges.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
    }

    // Types and shapes as tern names them.
    let embd = g.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.ggml_type, GgmlType::Q8_0);
    assert_eq!(embd.shape(), vec![49152, 576]);
    assert_eq!(
        g.tensor("blk.0.ffn_down.weight").unwrap().ggml_type,
        GgmlType::Q4_1
    );
    assert_eq!(
        g.tensor("blk.0.ffn_down.weight").unwrap().shape(),
        vec![576, 1536]
    );
    assert_eq!(
        g.tensor("output_norm.weight").unwrap().ggml_type,
        GgmlType::F32
    );

    // Metadata through the typed getters.
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.get_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(g.get_u32("llama.attention.head_count_kv").unwrap(), 3);
    assert!((g.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap() - 1e-5).abs() < 1e-9);
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(
        g.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(
        g.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        48900
    );
    let tt = g.get_i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(tt.len(), 49152);
    assert!(tt.iter().all(|&t| (1..=6).contains(&t)));
    let _ = g.get_bool("tokenizer.ggml.add_bos_token").unwrap();
    assert!(matches!(
        g.get_u32("no.such.key"),
        Err(tern_import::ImportError::MissingKey(_))
    ));
    assert!(g.get_u32("general.architecture").is_err());
}

// ------------------------------------------------------------------------------------------------
// Block golden vectors (tests/golden/ggml/vectors, made by gen_golden.py with llama.cpp's
// quantize_row_*_ref / dequantize_row_* and bitnet.cpp's I2_S layout)

use tern_format::ggml::{self, BlockType};

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    rows: usize,
    cols: usize,
    scale: Option<f32>,
}

fn vec_file(name: &str) -> Vec<u8> {
    std::fs::read(tern_tests::golden(&format!("ggml/vectors/{name}"))).unwrap()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn block_type(name: &str) -> BlockType {
    match name {
        "q8_0" => BlockType::Q8_0,
        "q4_0" => BlockType::Q4_0,
        "q4_1" => BlockType::Q4_1,
        "tq1_0" => BlockType::Tq1_0,
        "tq2_0" => BlockType::Tq2_0,
        other => panic!("{other}"),
    }
}

fn cases() -> Vec<Case> {
    #[derive(serde::Deserialize)]
    struct Cases {
        cases: Vec<Case>,
    }
    let c: Cases = serde_json::from_slice(&vec_file("cases.json")).unwrap();
    c.cases
}

/// tern's dequantization is bit-identical to llama.cpp's for Q8_0, Q4_0, Q4_1, TQ1_0 and TQ2_0, whole
/// tensors and row by row.
#[test]
fn dequantize_bit_identical_to_llama_cpp() {
    let mut seen = std::collections::BTreeSet::new();
    for c in cases().iter().filter(|c| c.ty != "i2_s") {
        let bt = block_type(&c.ty);
        let blocks = vec_file(&format!("{}.blocks", c.name));
        let want = f32s(&vec_file(&format!("{}.deq.f32", c.name)));
        let n = c.rows * c.cols;
        assert_eq!(want.len(), n);
        let got = ggml::dequantize(bt, &blocks, n).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{} element {i}: tern {g} llama.cpp {w}",
                c.name
            );
        }
        let mut row = vec![0f32; c.cols];
        for r in 0..c.rows {
            ggml::dequantize_row(bt, &blocks, c.cols, r, &mut row).unwrap();
            assert_eq!(
                bytemuck::cast_slice::<f32, u32>(&row),
                bytemuck::cast_slice::<f32, u32>(&want[r * c.cols..][..c.cols])
            );
        }
        assert!(ggml::dequantize_row(bt, &blocks, c.cols, c.rows, &mut row).is_err());
        seen.insert(c.ty.clone());
    }
    assert_eq!(
        seen.len(),
        5,
        "every block type has a golden case: {seen:?}"
    );
}

/// Trits and per-block d of TQ1_0/TQ2_0 match the ones derived from llama.cpp's dequantized values;
/// I2_S trits and scale match what bitnet.cpp's layout (gen_i2s_synth.py pack_i2s) packed.
#[test]
fn trits_match_llama_cpp_and_bitnet_layout() {
    let mut n_cases = 0;
    for c in cases() {
        if !["tq1_0", "tq2_0", "i2_s"].contains(&c.ty.as_str()) {
            continue;
        }
        let n = c.rows * c.cols;
        let blocks = vec_file(&format!("{}.blocks", c.name));
        let want_t: Vec<i8> = vec_file(&format!("{}.trits.i8", c.name))
            .iter()
            .map(|&b| b as i8)
            .collect();
        match c.ty.as_str() {
            "tq1_0" | "tq2_0" => {
                let (t, d) = if c.ty == "tq1_0" {
                    ggml::tq1_0_to_trits(&blocks, n).unwrap()
                } else {
                    ggml::tq2_0_to_trits(&blocks, n).unwrap()
                };
                assert_eq!(t, want_t, "{}", c.name);
                let want_d = vec_file(&format!("{}.d.f16", c.name));
                let got_d: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
                assert_eq!(got_d, want_d, "{}", c.name);
                for v in [-1i8, 0, 1] {
                    assert!(t.contains(&v), "{}: all three trits occur", c.name);
                }
            }
            "i2_s" => {
                let (t, s) = ggml::i2s_to_trits(&blocks, n).unwrap();
                assert_eq!(t, want_t, "{}", c.name);
                assert_eq!(s.to_bits(), c.scale.unwrap().to_bits());
                let deq = ggml::i2s_dequantize(&blocks, n).unwrap();
                assert!(deq.iter().zip(&want_t).all(|(x, &t)| *x == t as f32 * s));
            }
            _ => unreachable!(),
        }
        n_cases += 1;
    }
    assert_eq!(n_cases, 6);
}

// ------------------------------------------------------------------------------------------------
// Real GGUFs written by llama.cpp's llama-quantize (tiny BitNet-shaped model, TQ2_0 and TQ1_0)

#[derive(serde::Deserialize)]
struct TinyTensor {
    name: String,
    #[serde(rename = "type")]
    ty: u32,
    ne: Vec<u64>,
    offset: u64,
    n_bytes: u64,
    sha256: String,
    deq_sha256: Option<String>,
}

#[derive(serde::Deserialize)]
struct TinyRecord {
    data_offset: u64,
    alignment: u64,
    tensors: Vec<TinyTensor>,
}

#[test]
fn llama_quantize_tq_gguf_parses_and_dequantizes_like_llama_cpp() {
    for (q, ty, bt) in [
        ("tq2_0", GgmlType::TQ2_0, BlockType::Tq2_0),
        ("tq1_0", GgmlType::TQ1_0, BlockType::Tq1_0),
    ] {
        let g = GgufFile::open(tern_tests::golden(&format!("ggml/tiny-{q}.gguf"))).unwrap();
        let rec: TinyRecord = serde_json::from_slice(
            &std::fs::read(tern_tests::golden(&format!("ggml/tiny-{q}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(g.architecture(), "bitnet");
        assert_eq!(g.data_offset(), rec.data_offset);
        assert_eq!(g.alignment(), rec.alignment);
        assert_eq!(g.tensors().len(), rec.tensors.len());
        let mut n_tq = 0;
        for (t, r) in g.tensors().iter().zip(&rec.tensors) {
            assert_eq!(
                (&t.name, t.type_id, &t.ne, t.offset, t.size),
                (&r.name, r.ty, &r.ne, r.offset, Some(r.n_bytes))
            );
            let bytes = g.tensor_bytes(t).unwrap();
            assert_eq!(sha256::hex(bytes), r.sha256, "{}", t.name);
            if let Some(want) = &r.deq_sha256 {
                assert_eq!(t.ggml_type, ty);
                assert_eq!(t.ggml_type.block_type(), Some(bt));
                let deq = ggml::dequantize(bt, bytes, t.n_elements() as usize).unwrap();
                assert_eq!(&sha256::hex(bytemuck::cast_slice(&deq)), want, "{}", t.name);
                n_tq += 1;
            }
        }
        assert_eq!(n_tq, 14, "{q}: 7 ternary weights × 2 layers");
        assert_eq!(g.get_u32("bitnet.block_count").unwrap(), 2);
    }
}

/// bitnet.cpp-style I2_S GGUF (arch `bitnet-25`, type 36) from the shared tool, when it is there.
#[test]
fn i2s_gguf_from_shared_tool() {
    let tool = std::env::var_os("TERN_SHARED_TOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools")
        })
        .join("gen_i2s_synth.py");
    if !tool.is_file() {
        let why = format!("{} not found", tool.display());
        tern_tests::skip_or_fail("i2s_gguf_from_shared_tool", &why);
        return;
    }
    let dir = tern_tests::scratch("ggml_golden_i2s");
    let out = dir.join("tiny-i2s.gguf");
    let ok = std::process::Command::new("python3")
        .arg(&tool)
        .arg(&out)
        .env("SMALL", "1")
        .status();
    if !ok.is_ok_and(|s| s.success()) {
        let why = format!("python3 {} failed (needs numpy)", tool.display());
        tern_tests::skip_or_fail("i2s_gguf_from_shared_tool", &why);
        return;
    }
    let g = GgufFile::open(&out).unwrap();
    assert_eq!(g.architecture(), "bitnet-25");
    let mut n = 0;
    for t in g.tensors().iter().filter(|t| t.type_id == 36) {
        assert_eq!(t.ggml_type, GgmlType::I2_S);
        let ne = t.n_elements() as usize;
        assert_eq!(t.size, Some(ne as u64 / 4 + 32));
        let (trits, scale) = ggml::i2s_to_trits(g.tensor_bytes(t).unwrap(), ne).unwrap();
        assert_eq!(scale, 0.02);
        assert!(trits.iter().all(|&x| (-1..=1).contains(&x)));
        n += 1;
    }
    assert_eq!(n, 14);
    // Read with an upstream architecture, id 36 is unknown: listed, but its bytes are refused.
    assert_eq!(GgmlType::from_id(36, "llama"), GgmlType::Unknown(36));
    assert_eq!(GgmlType::from_id(39, "llama"), GgmlType::MXFP4);
    assert_eq!(GgmlType::from_id(39, "bitnet-b1.58"), GgmlType::TL2);
}
