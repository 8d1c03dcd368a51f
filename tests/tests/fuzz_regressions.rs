//! The fuzz corpora on stable: every input under `fuzz/regressions/<target>/` (seeds and minimized
//! crashes) goes through the same library calls as `fuzz/fuzz_targets/<target>.rs`, so
//! `cargo test` catches a regression without nightly or cargo-fuzz. Each `*_body` function below
//! mirrors its target's `fuzz_target!` body; keep them in sync.
//!
//! `tern_read` also gets a short deterministic mutation run on stable (byte flips, overwrites with
//! boundary values, truncations, insertions, each also with its checksums fixed up), so the
//! reader's deeper checks see hostile input in every CI run, not only under `cargo fuzz`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tern_engine::tokenizer::{StreamDecoder, Tokenizer};
use tern_format::container::checksum;
use tern_format::neuzip::{self, Plan};
use tern_format::{ggml, Encoding, FloatType, TernFile, TokenizerKind, TokenizerSpec};
use tern_import::gguf::{GgmlType, GgufFile};

/// The input files of one target's regression directory (sorted; scripts and notes skipped).
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            !name.starts_with('.') && !matches!(ext, "py" | "md" | "txt" | "sh" | "json" | "toml")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect()
}

/// Run `body` on every input of `target`'s corpus; fail listing every input that panicked.
fn run_corpus(target: &str, min_inputs: usize, body: fn(&[u8])) {
    let inputs = corpus(target);
    assert!(
        inputs.len() >= min_inputs,
        "fuzz/regressions/{target}/ has {} inputs, expected at least {min_inputs}",
        inputs.len()
    );
    let failed: Vec<String> = inputs
        .iter()
        .filter(|(_, bytes)| catch_unwind(AssertUnwindSafe(|| body(bytes))).is_err())
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: these inputs panic: {failed:#?}"
    );
    eprintln!("{target}: {} inputs ok", inputs.len());
}

// ------------------------------------------------------------------------------------------------
// tern_read (mirrors fuzz/fuzz_targets/tern_read.rs)

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn fix_checksums(data: &[u8]) -> Option<Vec<u8>> {
    let mut b = data.to_vec();
    if b.len() < 64 {
        return None;
    }
    let len = b.len() as u64;
    b[48..56].copy_from_slice(&len.to_le_bytes());
    let t0 = u64_at(&b, 32)?;
    let n = u64::from(u32::from_le_bytes(b[40..44].try_into().ok()?));
    let body = n.checked_mul(32).filter(|&x| x <= len)?;
    let t1 = t0
        .checked_add(body)
        .filter(|&x| x.checked_add(8).is_some_and(|e| e <= len))?;
    let (t0, t1) = (usize::try_from(t0).ok()?, usize::try_from(t1).ok()?);
    for e in (t0..t1).step_by(32) {
        let kind = u32::from_le_bytes(b[e..e + 4].try_into().ok()?);
        let (off, size) = (u64_at(&b, e + 8)?, u64_at(&b, e + 16)?);
        let end = off.checked_add(size).filter(|&x| x <= len);
        if kind != 3 {
            if let Some(end) = end {
                let h = checksum(&b[off as usize..end as usize]);
                b[e + 24..e + 32].copy_from_slice(&h.to_le_bytes());
            }
        }
    }
    let h = checksum(&b[t0..t1]);
    b[t1..t1 + 8].copy_from_slice(&h.to_le_bytes());
    let h = checksum(&b[0..56]);
    b[56..64].copy_from_slice(&h.to_le_bytes());
    Some(b)
}

/// Whether the file opened (for the mutation run's statistics).
fn exercise(bytes: Vec<u8>) -> bool {
    let Ok(f) = TernFile::from_bytes(bytes) else {
        return false;
    };
    let _ = (f.header(), f.sections(), f.meta());
    let data = f.data_offset();
    for (i, t) in f.tensors().iter().enumerate() {
        let _ = (t.n_elements(), t.bits_per_weight(), t.encoding.name());
        if let Ok(v) = f.tensor_at(i) {
            let _ = v.to_f32();
        }
        let start = (data + t.offset) as usize;
        let raw = &f.file_bytes()[start..start + t.size as usize];
        let _ = t.encoding.decode_f32(&t.shape, raw);
    }
    if f.verify().is_ok() {
        for i in 0..f.tensors().len() {
            let v = f.tensor_at(i).expect("tensor of a verified file");
            let vals = v.to_f32().expect("decode a tensor of a verified file");
            assert_eq!(vals.len() as u64, v.info.n_elements());
        }
    }
    true
}

fn tern_read_body(data: &[u8]) {
    exercise(data.to_vec());
    if let Some(fixed) = fix_checksums(data) {
        exercise(fixed);
    }
}

#[test]
fn tern_read_corpus() {
    run_corpus("tern_read", 10, tern_read_body);
}

/// A few thousand deterministic mutations of the seeds, each through the target body.
#[test]
fn tern_read_mutations() {
    let seeds = corpus("tern_read");
    assert!(!seeds.is_empty());
    let mut s = 0x5eed_u64;
    let mut rng = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    const SPECIAL: [u64; 8] = [
        0,
        1,
        0xff,
        0x7fff_ffff,
        0xffff_ffff,
        1 << 32,
        u64::MAX,
        u64::MAX - 255,
    ];
    let (mut runs, mut opened) = (0, 0);
    for (path, seed) in &seeds {
        for _ in 0..150 {
            let mut b = seed.clone();
            let ops = 1 + rng() % 3;
            for _ in 0..ops {
                if b.is_empty() {
                    break;
                }
                let at = (rng() % b.len() as u64) as usize;
                match rng() % 6 {
                    0 => b[at] ^= 1 << (rng() % 8),
                    1 => b[at] = rng() as u8,
                    2 => {
                        let v = SPECIAL[(rng() % 8) as usize].to_le_bytes();
                        let k = (rng() % 8 + 1) as usize;
                        for (j, x) in v.iter().take(k).enumerate() {
                            if let Some(y) = b.get_mut(at + j) {
                                *y = *x;
                            }
                        }
                    }
                    3 => b.truncate(at),
                    4 => {
                        let n = (rng() % 16) as usize;
                        b.splice(at..at, std::iter::repeat_n(rng() as u8, n));
                    }
                    _ => {
                        let n = ((rng() % 16) as usize).min(b.len() - at);
                        b.drain(at..at + n);
                    }
                }
            }
            let r = catch_unwind(AssertUnwindSafe(|| {
                let a = exercise(b.clone());
                let c = fix_checksums(&b).map(exercise).unwrap_or(false);
                a as usize + c as usize
            }));
            match r {
                Ok(k) => opened += k,
                Err(_) => {
                    let out = Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../target/test-scratch/tern_read_crash.bin");
                    let _ = std::fs::create_dir_all(out.parent().unwrap());
                    std::fs::write(&out, &b).unwrap();
                    panic!(
                        "mutation of {} panics the reader; input saved to {}",
                        path.display(),
                        out.display()
                    );
                }
            }
            runs += 1;
        }
    }
    eprintln!(
        "tern_read mutations: {runs} inputs, {opened} opened (with or without checksum fix-up)"
    );
    // The fix-up is what lets mutations reach the directory checks and codecs.
    assert!(
        opened > runs / 10,
        "only {opened} of {runs} mutated files opened"
    );
}

// ------------------------------------------------------------------------------------------------
// gguf_parse (mirrors fuzz/fuzz_targets/gguf_parse.rs)

fn gguf_parse_body(data: &[u8]) {
    let Ok(g) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let keys: Vec<String> = g.metadata().map(|(k, _)| k.to_string()).collect();
    for k in &keys {
        let _ = g.opt_u32(k);
        let _ = g.opt_f32(k);
        let _ = g.opt_str(k);
        let _ = g.opt_bool(k);
        let _ = g.get_str_array(k);
        let _ = g.get_i32_array(k);
        let _ = g.get_f32_array(k);
    }
    for t in g.tensors() {
        let _ = t.shape();
        let Ok(bytes) = g.tensor_bytes(t) else {
            continue;
        };
        let Ok(n) = usize::try_from(t.n_elements()) else {
            continue;
        };
        if let Some(bt) = t.ggml_type.block_type() {
            let _ = ggml::dequantize(bt, bytes, n);
            let _ = match bt {
                ggml::BlockType::Tq1_0 => ggml::tq1_0_to_trits(bytes, n).map(|_| ()),
                ggml::BlockType::Tq2_0 => ggml::tq2_0_to_trits(bytes, n).map(|_| ()),
                _ => Ok(()),
            };
            continue;
        }
        let shape = t.shape();
        let _ = match t.ggml_type {
            GgmlType::F32 => Encoding::F32.decode_f32(&shape, bytes).map(|_| ()),
            GgmlType::F16 => Encoding::F16.decode_f32(&shape, bytes).map(|_| ()),
            GgmlType::BF16 => Encoding::Bf16.decode_f32(&shape, bytes).map(|_| ()),
            GgmlType::I2_S => ggml::i2s_to_trits(bytes, n).map(|_| ()),
            _ => Ok(()),
        };
    }
}

#[test]
fn gguf_parse_corpus() {
    run_corpus("gguf_parse", 1, gguf_parse_body);
}

// ------------------------------------------------------------------------------------------------
// rans_decode (mirrors fuzz/fuzz_targets/rans_decode.rs)

fn rans_decode_body(data: &[u8]) {
    let full = neuzip::decode(data);
    let _ = neuzip::stats(data);
    let reference = neuzip::decode_exponents_reference(data);
    if let Ok(plan) = Plan::parse(data) {
        let rows = plan.rows();
        let h = data
            .iter()
            .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
        let first = if rows == 0 { 0 } else { h % rows };
        let n = if rows == 0 {
            0
        } else {
            (h >> 32) % (rows - first + 1)
        };
        let part = neuzip::decode_rows(data, first, n);
        let _ = neuzip::decode_rows(data, first, u64::MAX);
        let _ = neuzip::decode_rows(data, rows, 1);
        if let Ok(all) = &full {
            let size = plan.dtype.size();
            assert_eq!(all.len() as u64, plan.n_elements * size as u64);
            let rb = plan.row_len as usize * size;
            let part = part.expect("decode_rows fails on a blob that decodes");
            assert_eq!(
                part[..],
                all[first as usize * rb..(first + n) as usize * rb]
            );
            assert!(
                reference.is_ok(),
                "reference decoder rejects a blob that decodes"
            );
        }
    } else {
        assert!(full.is_err());
    }
    let even = &data[..data.len() & !1];
    for dtype in [FloatType::Bf16, FloatType::F16] {
        let full_bits = tern_format::encoding::full_mantissa_bits(dtype);
        let blob = neuzip::encode(dtype, full_bits, even, even.len() / 2).expect("encode");
        assert_eq!(neuzip::decode(&blob).expect("decode own blob"), even);
    }
}

#[test]
fn rans_decode_corpus() {
    run_corpus("rans_decode", 1, rans_decode_body);
}

// ------------------------------------------------------------------------------------------------
// tokenize (mirrors fuzz/fuzz_targets/tokenize.rs)

/// GPT-2 bytes_to_unicode.
fn byte_char(b: u8) -> char {
    let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable {
        return b as char;
    }
    let n = (0..b)
        .filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
        .count() as u32;
    char::from_u32(256 + n).unwrap()
}

fn bpe_spec(pre: &str) -> TokenizerSpec {
    let mut tokens = vec![
        "<|endoftext|>".to_string(),
        "<|im_start|>".into(),
        "<|im_end|>".into(),
        "<u>".into(),
    ];
    let mut token_types = vec![3, 3, 3, 4];
    for b in 0..=255u8 {
        tokens.push(byte_char(b).to_string());
        token_types.push(1);
    }
    let g = byte_char(b' ');
    let mut merges = Vec::new();
    for (a, b) in [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        (&*g.to_string(), "w"),
        ("o", "r"),
        ("1", "2"),
        ("12", "3"),
    ] {
        merges.push(format!("{a} {b}"));
        tokens.push(format!("{a}{b}"));
        token_types.push(1);
    }
    TokenizerSpec {
        kind: TokenizerKind::Gpt2,
        pre: Some(pre.into()),
        tokens,
        token_types,
        merges,
        scores: vec![],
        bos: Some(1),
        eos: Some(2),
        unk: None,
        pad: None,
        eot: None,
        add_bos: false,
        add_eos: false,
        add_space_prefix: false,
        chat_template: None,
    }
}

fn spm_spec() -> TokenizerSpec {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut token_types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        token_types.push(6);
        scores.push(0.0);
    }
    for (i, p) in ["▁", "a", "b", "ab", "▁a", "▁ab", "abab", "é", "▁▁"]
        .iter()
        .enumerate()
    {
        tokens.push(p.to_string());
        token_types.push(1);
        scores.push(-(i as f32));
    }
    TokenizerSpec {
        kind: TokenizerKind::Llama,
        pre: None,
        tokens,
        token_types,
        merges: vec![],
        scores,
        bos: Some(1),
        eos: Some(2),
        unk: Some(0),
        pad: None,
        eot: None,
        add_bos: true,
        add_eos: false,
        add_space_prefix: true,
        chat_template: None,
    }
}

fn tokenizers() -> &'static [Tokenizer] {
    static T: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let mut v: Vec<Tokenizer> = ["smollm", "gpt-2", "llama-bpe", "qwen2", "default"]
            .iter()
            .map(|p| Tokenizer::from_spec(&bpe_spec(p)).unwrap())
            .collect();
        v.push(Tokenizer::from_spec(&spm_spec()).unwrap());
        v
    })
}

fn tokenize_body(data: &[u8]) {
    let Some((&sel, text)) = data.split_first() else {
        return;
    };
    let all = tokenizers();
    let tok = &all[usize::from(sel) % all.len()];
    let parse_special = sel & 0x80 != 0;
    match tok.encode_bytes(text, parse_special) {
        Ok(_) => {
            let s = std::str::from_utf8(text).unwrap();
            let ids = tok.encode_with(s, false, parse_special).unwrap();
            // Mirrors the fuzz target: SentencePiece decodes a literal U+2581 as a space.
            if !s.contains('\u{2581}') {
                assert_eq!(tok.decode(&ids).unwrap(), s, "round trip");
            }
            let mut sd = StreamDecoder::new();
            let mut streamed = Vec::new();
            for &id in &ids {
                streamed.extend_from_slice(sd.push(tok, id).unwrap().as_bytes());
            }
            streamed.extend_from_slice(sd.flush().as_bytes());
            let raw: Vec<u8> = ids
                .iter()
                .flat_map(|&id| tok.token_bytes(id).unwrap().to_vec())
                .collect();
            assert_eq!(streamed, raw, "stream");
        }
        Err(_) => assert!(std::str::from_utf8(text).is_err()),
    }
    let ids: Vec<u32> = text
        .chunks(2)
        .map(|c| u32::from(c[0]) | u32::from(*c.get(1).unwrap_or(&0)) << 8)
        .map(|x| x % 400)
        .collect();
    let _ = tok.decode(&ids);
    let mut sd = StreamDecoder::new();
    for &id in &ids {
        let _ = sd.push(tok, id);
    }
    let _ = sd.flush();
}

#[test]
fn tokenize_corpus() {
    // The committed corpus (if any), then a few inputs of our own so the mirror always runs:
    // every tokenizer (selector byte), with and without special-token parsing, invalid UTF-8.
    // (No literal U+2581: SentencePiece decodes it to a space, so the target's round-trip
    // invariant does not hold for it.)
    run_corpus("tokenize", 0, tokenize_body);
    let texts: [&[u8]; 6] = [
        b"hello world 123",
        "<|im_start|>user\nhé  ab abab<|im_end|>".as_bytes(),
        b"\xff\xfe invalid \xc3",
        b"",
        b"  \n\t  spaces  ",
        "日本語 🙂 emoji".as_bytes(),
    ];
    for sel in 0..12u8 {
        for t in texts {
            let mut input = vec![sel | if sel % 2 == 0 { 0x80 } else { 0 }];
            input.extend_from_slice(t);
            tokenize_body(&input);
        }
    }
}
