//! The fuzz corpora on stable: every input under `fuzz/regressions/<target>/` (seeds and minimized
//! crashes) goes through the same library calls as `fuzz/fuzz_targets/<target>.rs`, so
//! `cargo test` catches a regression without nightly or cargo-fuzz. Each target's body lives in
//! `fuzz/bodies/<target>.rs` and is included both there and here.
//!
//! `tern_read` also gets a short deterministic mutation run on stable (byte flips, overwrites with
//! boundary values, truncations, insertions, each also with its checksums fixed up), so the
//! reader's deeper checks see hostile input in every CI run, not only under `cargo fuzz`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

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

mod tern_read {
    include!("../../fuzz/bodies/tern_read.rs");
}

#[test]
fn tern_read_corpus() {
    run_corpus("tern_read", 10, tern_read::run);
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
                let a = tern_read::exercise(b.clone());
                let c = tern_read::fix_checksums(&b)
                    .map(tern_read::exercise)
                    .unwrap_or(false);
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

mod gguf_parse {
    include!("../../fuzz/bodies/gguf_parse.rs");
}

#[test]
fn gguf_parse_corpus() {
    run_corpus("gguf_parse", 1, gguf_parse::run);
}

// ------------------------------------------------------------------------------------------------
// rans_decode (mirrors fuzz/fuzz_targets/rans_decode.rs)

mod rans_decode {
    include!("../../fuzz/bodies/rans_decode.rs");
}

#[test]
fn rans_decode_corpus() {
    run_corpus("rans_decode", 1, rans_decode::run);
}

// ------------------------------------------------------------------------------------------------
// tokenize (mirrors fuzz/fuzz_targets/tokenize.rs)

mod tokenize {
    include!("../../fuzz/bodies/tokenize.rs");
}

#[test]
fn tokenize_corpus() {
    // The committed corpus (if any), then a few inputs of our own so the mirror always runs:
    // every tokenizer (selector byte), with and without special-token parsing, invalid UTF-8.
    // (No literal U+2581: SentencePiece decodes it to a space, so the target's round-trip
    // invariant does not hold for it.)
    run_corpus("tokenize", 0, tokenize::run);
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
            tokenize::run(&input);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// delta_decode (mirrors fuzz/fuzz_targets/delta_decode.rs)

mod delta_decode {
    include!("../../fuzz/bodies/delta_decode.rs");
}

#[test]
fn delta_decode_corpus() {
    run_corpus("delta_decode", 7, delta_decode::run);
}

// ------------------------------------------------------------------------------------------------
// model_load (mirrors fuzz/fuzz_targets/model_load.rs)

mod model_load {
    include!("../../fuzz/bodies/model_load.rs");
}

#[test]
fn model_load_corpus() {
    // Hostile hyperparameters (seeds written by tests/tests/hostile_hparams.rs, TERN_BLESS=1)
    // must be typed errors or run, never abort: an abort here kills the test process.
    run_corpus("model_load", 5, model_load::run);
}

// ------------------------------------------------------------------------------------------------
// chat_template, hf_config, delta_apply (issue 29; mirror fuzz/fuzz_targets/<target>.rs)

mod chat_template {
    include!("../../fuzz/bodies/chat_template.rs");
}

#[test]
fn chat_template_corpus() {
    run_corpus("chat_template", 10, chat_template::run);
}

mod hf_config {
    include!("../../fuzz/bodies/hf_config.rs");
}

#[test]
fn hf_config_corpus() {
    run_corpus("hf_config", 10, hf_config::run);
}

mod delta_apply {
    include!("../../fuzz/bodies/delta_apply.rs");
}

#[test]
fn delta_apply_corpus() {
    assert!(
        !delta_apply::seed_delta().is_empty(),
        "the seed delta could not be made"
    );
    run_corpus("delta_apply", 5, delta_apply::run);
}
