//! Issue 29: the eight classes of hostile input that aborted, hung, OOM-killed, silently mis-read
//! or destroyed files, each through the `tern` command line under a memory limit (`ulimit -v`)
//! and a timeout: the command must exit 1 with one `error:` line and no signal, and no input may
//! change. (The chat-template class is in `runtime/engine/src/chat.rs`'s unit tests and, through
//! the C ABI, `tests/c/test_hostile.c`; the template check at pack time is here.)

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tern_tests::{golden, scratch, tern_bin};

/// Virtual memory the CLI gets in these tests (KiB): a runaway allocation fails instead of
/// swapping the machine, and a regression shows as a signal or an abort, not an OOM kill.
const MEM_LIMIT_KB: u64 = 4 << 20;

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `tern ARGS` under `ulimit -v` and `timeout`.
fn tern_limited(args: &[&str]) -> Out {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {MEM_LIMIT_KB}; exec timeout -s KILL 120 \"$0\" \"$@\""
        ))
        .arg(tern_bin())
        .args(args);
    let o = cmd.output().expect("run tern");
    Out {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The command was refused cleanly: exit 1 (no signal, no abort, no timeout), one `error:` line
/// naming `word`.
fn refused(args: &[&str], word: &str) -> String {
    let o = tern_limited(args);
    let errors: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(
        o.code,
        Some(1),
        "tern {args:?}: expected exit 1, got {:?}\nstdout: {}\nstderr: {}",
        o.code,
        o.stdout,
        o.stderr
    );
    assert_eq!(errors.len(), 1, "tern {args:?}: stderr {}", o.stderr);
    assert!(
        errors[0].contains(word),
        "tern {args:?}: error does not name {word:?}: {}",
        errors[0]
    );
    errors[0].to_string()
}

fn ok(args: &[&str]) -> Out {
    let o = tern_limited(args);
    assert_eq!(o.code, Some(0), "tern {args:?}: {}", o.stderr);
    o
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn copy_dir(src: &Path, name: &str) -> PathBuf {
    let dst = scratch(name).join("model");
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
    dst
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn llama_tiny() -> PathBuf {
    golden("bitnet_hf/llama_tiny")
}

/// Class 2: config.json sizes used before any check (aborted, OOM-killed or hung `tern pack`).
#[test]
fn absurd_hf_config_sizes_are_refused_before_allocating() {
    for (key, val, word) in [
        ("vocab_size", 4_000_000_000u64, "vocab_size"),
        ("num_hidden_layers", 4_000_000_000, "num_hidden_layers"),
        ("hidden_size", 4_000_000_000, "hidden_size"),
        ("intermediate_size", 4_000_000_000, "intermediate_size"),
        // Under the maxima but not what the tensors say.
        ("vocab_size", 4_000_000, "vocab_size"),
        ("num_hidden_layers", 4000, "num_hidden_layers"),
    ] {
        let d = copy_dir(&llama_tiny(), &format!("hostile_cfg_{key}_{val}"));
        edit_json(&d.join("config.json"), |c| c[key] = val.into());
        let out = d.parent().unwrap().join("out.tern");
        let start = std::time::Instant::now();
        refused(&["pack", s(&d), "-o", s(&out)], word);
        assert!(
            start.elapsed().as_secs() < 60,
            "{key}: {:?}",
            start.elapsed()
        );
        assert!(!out.exists());
    }
}

/// Class 5: non-finite metadata packed "successfully" into a file every later command refused,
/// replacing a good output. Now refused at pack time, and the good output stays.
#[test]
fn non_finite_metadata_is_refused_and_the_output_kept() {
    let d = copy_dir(&llama_tiny(), "hostile_nonfinite");
    let out = d.parent().unwrap().join("good.tern");
    ok(&["pack", s(&d), "-o", s(&out)]);
    let good = std::fs::read(&out).unwrap();
    for (key, val) in [("rope_theta", 1e39f64), ("rms_norm_eps", 1e39)] {
        let d2 = copy_dir(&llama_tiny(), &format!("hostile_nonfinite_{key}"));
        edit_json(&d2.join("config.json"), |c| {
            c[key] = val.into();
            // transformers 5 configs carry θ in `rope_parameters`, which wins.
            if key == "rope_theta" {
                c["rope_parameters"]["rope_theta"] = val.into();
            }
        });
        refused(&["pack", s(&d2), "-o", s(&out)], "f32");
        assert_eq!(std::fs::read(&out).unwrap(), good, "{key}: output replaced");
    }
    ok(&["inspect", s(&out), "--verify"]);
}

/// Class 7: the classic string form of BPE merges with a multi-byte first symbol ("Ġ t").
#[test]
fn bpe_merges_with_a_multibyte_first_symbol_import() {
    let d = copy_dir(&llama_tiny(), "hostile_merges");
    edit_json(&d.join("tokenizer.json"), |t| {
        let m = t["model"]["merges"].as_array_mut().unwrap();
        m.push(Value::String("Ġ t".into()));
        m.push(Value::String("ĠĠ ĠĠ".into()));
    });
    let out = d.parent().unwrap().join("m.tern");
    ok(&["pack", s(&d), "-o", s(&out)]);
    let f = tern_format::TernFile::open(&out).unwrap();
    let merges = &f.meta().tokenizer.as_ref().unwrap().merges;
    assert!(merges.iter().any(|m| m == "Ġ t"), "{merges:?}");
    assert!(merges.iter().any(|m| m == "ĠĠ ĠĠ"));
}

/// Class 8: an output that is, or resolves to, an input destroyed the user's file and exited 0.
#[test]
fn an_output_is_never_an_input() {
    let d = copy_dir(&llama_tiny(), "hostile_data_loss");
    let root = d.parent().unwrap().to_path_buf();
    let x = root.join("x.tern");
    ok(&["pack", s(&d), "-o", s(&x)]);
    let orig = std::fs::read(&x).unwrap();
    // `pack X.part -o X`: the input is the output's temporary file.
    let xpart = root.join("y.tern.part");
    std::fs::copy(&x, &xpart).unwrap();
    refused(
        &["pack", s(&xpart), "-o", s(&root.join("y.tern"))],
        "would overwrite the input",
    );
    assert_eq!(std::fs::read(&xpart).unwrap(), orig);
    // A hard link to the input, and a path through `..`.
    let link = root.join("link.tern");
    let _ = std::fs::remove_file(&link);
    std::fs::hard_link(&x, &link).unwrap();
    let dotdot = root.join("model/../x.tern");
    for out in [&link, &dotdot] {
        refused(&["pack", s(&x), "-o", s(out)], "would overwrite the input");
    }
    // delta create -o BASE / TUNED, delta apply -o BASE / DELTA and --base X.part -o X.
    let tuned = root.join("tuned.tern");
    std::fs::copy(&x, &tuned).unwrap();
    let delta = root.join("d.ternd");
    ok(&[
        "delta",
        "create",
        "--base",
        s(&x),
        "--tuned",
        s(&tuned),
        "-o",
        s(&delta),
    ]);
    let delta_bytes = std::fs::read(&delta).unwrap();
    for out in [&x, &tuned, &link] {
        refused(
            &[
                "delta",
                "create",
                "--base",
                s(&x),
                "--tuned",
                s(&tuned),
                "-o",
                s(out),
            ],
            "would overwrite the input",
        );
    }
    for out in [&x, &delta] {
        refused(
            &[
                "delta",
                "apply",
                "--base",
                s(&x),
                "--delta",
                s(&delta),
                "-o",
                s(out),
            ],
            "would overwrite the input",
        );
    }
    refused(
        &[
            "delta",
            "apply",
            "--base",
            s(&xpart),
            "--delta",
            s(&delta),
            "-o",
            s(&root.join("y.tern")),
        ],
        "would overwrite the input",
    );
    // run --dump-logits MODEL.
    refused(
        &[
            "run",
            s(&x),
            "--device",
            "cpu",
            "--tokens",
            "1,2",
            "-n",
            "0",
            "--dump-logits",
            s(&x),
        ],
        "would overwrite the input",
    );
    assert_eq!(std::fs::read(&x).unwrap(), orig, "the model changed");
    assert_eq!(std::fs::read(&tuned).unwrap(), orig);
    assert_eq!(std::fs::read(&delta).unwrap(), delta_bytes);
}

/// Class 3: a delta that lies about a NeuZip tensor's size (checksums resealed) aborted `delta
/// apply`, `delta inspect --base` and `run --delta` with a 16 TiB allocation.
#[test]
fn a_delta_lying_about_a_size_is_refused_before_allocating() {
    let d = copy_dir(&llama_tiny(), "hostile_delta_base");
    let root = d.parent().unwrap().to_path_buf();
    let base = root.join("base.tern");
    ok(&["pack", s(&d), "-o", s(&base), "--floats", "neuzip"]);
    // The tuned model: every float of every tensor nudged by one ulp-ish step.
    let d2 = copy_dir(&llama_tiny(), "hostile_delta_tuned");
    let st = d2.join("model.safetensors");
    let mut b = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    for (i, byte) in b[8 + n..].iter_mut().enumerate() {
        if i % 2 == 0 {
            *byte ^= 1; // the low bit of a bf16/f16 mantissa (or of an f32's low half)
        }
    }
    std::fs::write(&st, &b).unwrap();
    let tuned = root.join("tuned.tern");
    ok(&["pack", s(&d2), "-o", s(&tuned), "--floats", "neuzip"]);
    let delta = root.join("d.ternd");
    ok(&[
        "delta",
        "create",
        "--base",
        s(&base),
        "--tuned",
        s(&tuned),
        "-o",
        s(&delta),
    ]);
    let bytes = std::fs::read(&delta).unwrap();
    let lie: u64 = 16 << 40;
    let mut lied = false;
    let hostile = tern_format::delta::reseal_index(&bytes, |idx| {
        // A NeuZip record grows by `lie`; every tensor after it moves down (so nothing overlaps).
        let at = idx
            .tensors
            .iter()
            .filter(|r| matches!(r.method, tern_format::delta::Method::NeuZip { .. }))
            .map(|r| r.info.offset)
            .max();
        if let Some(at) = at {
            for r in &mut idx.tensors {
                if r.info.offset == at {
                    r.info.size += lie;
                } else if r.info.offset > at {
                    r.info.offset += lie;
                }
            }
            idx.data_size += lie;
            idx.tuned_size += lie;
            lied = true;
        }
    })
    .unwrap();
    assert!(lied, "the delta has no NeuZip record to lie about");
    let bad = root.join("lie.ternd");
    std::fs::write(&bad, &hostile).unwrap();
    let out = root.join("rebuilt.tern");
    refused(
        &[
            "delta",
            "apply",
            "--base",
            s(&base),
            "--delta",
            s(&bad),
            "-o",
            s(&out),
        ],
        "declares",
    );
    refused(
        &["delta", "inspect", s(&bad), "--base", s(&base)],
        "declares",
    );
    refused(
        &[
            "run",
            s(&base),
            "--delta",
            s(&bad),
            "--device",
            "cpu",
            "--tokens",
            "1,2",
            "-n",
            "1",
        ],
        "declares",
    );
    assert!(!out.exists());
}

/// Class 4: a KV cache the machine cannot hold was reserved (granted under overcommit) and then
/// zero-filled until the OOM killer ended the process. Now refused before a page is touched,
/// naming the bytes and what the machine has.
#[test]
fn a_kv_cache_larger_than_the_machine_is_refused_up_front() {
    let Some(avail) = tern_format::sysmem::available_bytes() else {
        return; // no MemAvailable on this OS: the documented fallback is the allocator's refusal
    };
    // n_ctx_train_max.tern: a tiny model (2 layers, 1 KV head of 8 dims) whose training context
    // is 2^32 - 1, so a context that needs twice the machine's memory is addressable.
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions/model_load/n_ctx_train_max.tern");
    let per_token = 2 * 2 * 8 * 4; // layers × (K + V) × dims × f32 (`--kv f32` below)
    let n_ctx = (2 * avail / per_token).min(u64::from(u32::MAX - 1));
    if n_ctx * per_token <= avail {
        return; // a machine with more memory than a u32 context can ask for
    }
    let start = std::time::Instant::now();
    refused(
        &[
            "run",
            s(&model),
            "--device",
            "cpu",
            "--tokens",
            "1,2",
            "-n",
            "1",
            "--kv",
            "f32",
            "-c",
            &n_ctx.to_string(),
        ],
        "available",
    );
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
}

/// Class 1 at pack time: a template from an HF tokenizer_config.json that would run past the
/// template limits packed fine and failed (or aborted) `chat` later; now `pack` refuses it.
#[test]
fn a_runaway_chat_template_is_refused_at_pack_time() {
    let d = copy_dir(&llama_tiny(), "hostile_template_pack");
    edit_json(&d.join("tokenizer_config.json"), |c| {
        c["chat_template"] = "{{ 'a\\nb' | indent(1000000000000) }}".into();
    });
    let out = d.parent().unwrap().join("t.tern");
    refused(&["pack", s(&d), "-o", s(&out)], "chat template");
    assert!(!out.exists());
}

/// `inspect` on a FIFO blocked forever waiting for a writer; now refused at once.
#[test]
fn inspect_refuses_a_fifo() {
    let p = scratch("hostile_fifo").join("fifo");
    let _ = std::fs::remove_file(&p);
    let st = Command::new("mkfifo").arg(&p).status().unwrap();
    assert!(st.success());
    refused(&["inspect", s(&p)], "not a regular file");
}

/// The hostile chat templates `tests/c/test_hostile.c --templates` renders through
/// `tern_chat_apply` (and `scripts/hostile.sh` through `tern chat`): each aborted the process, ran
/// for minutes or was OOM-killed before the template limits.
pub const HOSTILE_TEMPLATES: [(&str, &str); 8] = [
    ("indent", "{{ 'a\\nb' | indent(1000000000000) }}"),
    ("batch", "{{ messages | batch(1000000000000) | list }}"),
    ("format_width", "{{ '%1000000000000d' | format(1) }}"),
    ("tojson_indent", "{{ messages | tojson(indent=1000000000000) }}"),
    ("list_repetition", "{{ (messages * 1000000000000) | list | length }}"),
    (
        "string_doubling",
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    ),
    (
        "quadratic_list",
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | length }}",
    ),
    (
        "repetition_join",
        "{% set s = 'x' * 10000000 %}{{ ([s] * 1000) | join }}",
    ),
];

/// Writes `tests/hostile/templates/<name>.tern`: the tiny valid model of the `model_load` fuzz
/// corpus with an 8-token tokenizer and one hostile chat template each. Run by hand after
/// changing [`HOSTILE_TEMPLATES`]:
/// `cargo test --release -p tern-tests --test hostile_inputs -- --ignored write_hostile_template_models`.
#[test]
#[ignore]
fn write_hostile_template_models() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src =
        tern_format::TernFile::open(&root.join("fuzz/regressions/model_load/valid.tern")).unwrap();
    let dir = root.join("tests/hostile/templates");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, t) in HOSTILE_TEMPLATES {
        let mut meta = src.meta().clone();
        let n = meta.hparams.n_vocab as usize;
        meta.tokenizer = Some(tern_format::TokenizerSpec {
            kind: tern_format::TokenizerKind::Gpt2,
            pre: None,
            tokens: (0..n)
                .map(|i| ((b'a' + i as u8) as char).to_string())
                .collect(),
            token_types: vec![1; n],
            merges: vec![],
            scores: vec![],
            bos: None,
            eos: None,
            unk: None,
            pad: None,
            eot: None,
            add_bos: false,
            add_eos: false,
            add_space_prefix: false,
            chat_template: Some(t.to_string()),
        });
        meta.provenance.source_name = format!("hostile template {name}");
        let out = dir.join(format!("{name}.tern"));
        let mut w = tern_format::TernWriter::create(&out, meta).unwrap();
        for i in 0..src.tensors().len() {
            let v = src.tensor_at(i).unwrap();
            w.add_tensor(
                &v.info.name,
                &v.info.shape,
                v.info.encoding.clone(),
                v.bytes,
            )
            .unwrap();
        }
        w.finish().unwrap();
    }
}

/// The committed template models are what the generator writes, and each is refused by `tern
/// chat` (one error line, exit 1, no signal) under the memory limit.
#[test]
fn hostile_template_models_are_refused_by_chat() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hostile/templates");
    for (name, t) in HOSTILE_TEMPLATES {
        let p = dir.join(format!("{name}.tern"));
        let f = tern_format::TernFile::open(&p).unwrap();
        let tok = f.meta().tokenizer.as_ref().unwrap();
        assert_eq!(tok.chat_template.as_deref(), Some(t), "{name}: regenerate");
        let start = std::time::Instant::now();
        let o = {
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(format!(
                    "ulimit -v {MEM_LIMIT_KB}; echo hi | exec timeout -s KILL 120 \"$0\" \"$@\""
                ))
                .arg(tern_bin())
                .args(["chat", s(&p), "--device", "cpu", "-n", "1"]);
            cmd.output().unwrap()
        };
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains("limit"), "{name}: {err}");
        assert!(
            start.elapsed().as_secs() < 30,
            "{name}: {:?}",
            start.elapsed()
        );
    }
}

/// Class 6 through the CLI: a NaN in a BitNet float master was silently ternarized (the scale
/// clamped to 1e-5, every output changed). The committed tiny BitNet GGUF with one ternary weight
/// rewritten as an F32 master (appended, its tensor info pointed at it): packed as a master when
/// finite, refused naming the tensor when one weight is NaN, the existing output kept.
#[test]
fn a_nan_in_a_bitnet_float_master_is_refused_by_pack() {
    let src = std::fs::read(golden("ggml/tiny-tq2_0.gguf")).unwrap();
    let name = b"blk.0.attn_k.weight";
    let dir = scratch("hostile_nan_master");
    let with_master = |nan: bool| -> PathBuf {
        let mut g = src.clone();
        let at = g
            .windows(name.len())
            .position(|w| w == name)
            .expect("tensor info")
            + name.len();
        let n_dims = u32::from_le_bytes(g[at..at + 4].try_into().unwrap()) as usize;
        let dims: Vec<u64> = (0..n_dims)
            .map(|i| u64::from_le_bytes(g[at + 4 + 8 * i..at + 12 + 8 * i].try_into().unwrap()))
            .collect();
        let ty = at + 4 + 8 * n_dims;
        let off = ty + 4;
        // data_start = the tensor's absolute data offset − its stored relative offset
        let rel = u64::from_le_bytes(g[off..off + 8].try_into().unwrap()) as usize;
        let abs = 235_200; // gguf-py's data_offset of blk.0.attn_k.weight in this file
        let data_start = abs - rel;
        while (g.len() - data_start) % 32 != 0 {
            g.push(0);
        }
        let new_rel = (g.len() - data_start) as u64;
        let n: u64 = dims.iter().product();
        for i in 0..n {
            let v = if nan && i == 7 {
                f32::NAN
            } else {
                (i % 3) as f32 * 0.02 - 0.02
            };
            g.extend_from_slice(&v.to_le_bytes());
        }
        g[ty..ty + 4].copy_from_slice(&0u32.to_le_bytes()); // GGML_TYPE_F32
        g[off..off + 8].copy_from_slice(&new_rel.to_le_bytes());
        let p = dir.join(if nan { "nan.gguf" } else { "finite.gguf" });
        std::fs::write(&p, g).unwrap();
        p
    };
    let out = dir.join("m.tern");
    let finite = with_master(false);
    let o = ok(&["pack", s(&finite), "-o", s(&out)]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let f = tern_format::TernFile::open(&out).unwrap();
    let t = f.tensor("blk.0.attn_k.weight").unwrap();
    assert!(
        matches!(t.info.encoding, tern_format::Encoding::Ternary { .. }),
        "{:?}",
        t.info.encoding
    );
    let before = std::fs::read(&out).unwrap();
    let nan = with_master(true);
    refused(&["pack", s(&nan), "-o", s(&out)], "blk.0.attn_k.weight");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        before,
        "the existing output was replaced"
    );
}
