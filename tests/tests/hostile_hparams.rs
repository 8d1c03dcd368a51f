//! Issue 12: a small `.tern` whose metadata lies about the hyperparameters (`n_layer =
//! 4294967295`, a huge `n_embd`, a mismatched `n_vocab`, `n_ctx_train = 4294967295`, …) must be
//! a typed error, or run with a bounded context, when loaded on the CPU through
//! `tern_engine::Model::open` + `Session::new(&m, 0)` + a 1-token eval — never abort the process
//! with "memory allocation of … bytes failed" (an abort kills this test binary, so passing means
//! none happened).
//!
//! `TERN_BLESS=1 cargo test -p tern-tests --test hostile_hparams` rewrites the fuzz seeds in
//! `fuzz/regressions/model_load/` (replayed on stable by `fuzz_regressions.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tern_engine::{Model, Session};
use tern_format::{
    ActivationScheme, Arch, Encoding, FfnAct, FormatError, HParams, ModelMeta, Provenance,
    TernWriter,
};

const N_VOCAB: u32 = 8;
const N_EMBD: u32 = 16;
const N_LAYER: u32 = 2;
const N_HEAD: u32 = 2;
const N_HEAD_KV: u32 = 1;
const HEAD_DIM: u32 = 8;
const N_FF: u32 = 32;

fn hparams() -> HParams {
    HParams {
        n_vocab: N_VOCAB,
        n_embd: N_EMBD,
        n_layer: N_LAYER,
        n_head: N_HEAD,
        n_head_kv: N_HEAD_KV,
        head_dim: HEAD_DIM,
        n_ff: N_FF,
        n_ctx_train: 2048,
        rope_theta: 10000.0,
        rope_dim: HEAD_DIM,
        rope_neox: true,
        rms_eps: 1e-5,
        ffn_act: FfnAct::Silu,
        tied_embeddings: true,
        sub_norms: false,
    }
}

fn meta(hp: HParams) -> ModelMeta {
    ModelMeta {
        arch: Arch::Llama,
        hparams: hp,
        tokenizer: None,
        activations: ActivationScheme::FLOAT,
        provenance: Provenance {
            source_format: "test".into(),
            source_name: "hostile_hparams".into(),
            packer: "tern test".into(),
            ..Default::default()
        },
        extra: BTreeMap::new(),
    }
}

/// A tiny, valid llama-shaped model (f32, tied embeddings) whose metadata says `hp`: the tensors
/// always have the shapes of [`hparams`], so any change to `hp` is a lie about them.
fn write_model(path: &Path, hp: HParams) {
    let (v, e, f) = (N_VOCAB as u64, N_EMBD as u64, N_FF as u64);
    let (q, kv) = ((N_HEAD * HEAD_DIM) as u64, (N_HEAD_KV * HEAD_DIM) as u64);
    let mut w = TernWriter::create(path, meta(hp)).unwrap();
    let mut seed = 0x1234_5678u32;
    let mut add = |w: &mut TernWriter, name: String, shape: &[u64], norm: bool| {
        let n: u64 = shape.iter().product();
        let bytes: Vec<u8> = (0..n)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let x = if norm {
                    1.0f32
                } else {
                    ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2
                };
                x.to_le_bytes()
            })
            .collect();
        w.add_tensor(&name, shape, Encoding::F32, &bytes).unwrap();
    };
    add(&mut w, "token_embd.weight".into(), &[v, e], false);
    add(&mut w, "output_norm.weight".into(), &[e], true);
    for l in 0..N_LAYER {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        add(&mut w, n("attn_norm"), &[e], true);
        add(&mut w, n("attn_q"), &[q, e], false);
        add(&mut w, n("attn_k"), &[kv, e], false);
        add(&mut w, n("attn_v"), &[kv, e], false);
        add(&mut w, n("attn_output"), &[e, q], false);
        add(&mut w, n("ffn_norm"), &[e], true);
        add(&mut w, n("ffn_gate"), &[f, e], false);
        add(&mut w, n("ffn_up"), &[f, e], false);
        add(&mut w, n("ffn_down"), &[e, f], false);
    }
    w.finish().unwrap();
}

/// The hostile variants: name, the lie, and whether the file must still load and run.
fn variants() -> Vec<(&'static str, HParams, bool)> {
    let base = hparams();
    let with = |f: &dyn Fn(&mut HParams)| {
        let mut h = base.clone();
        f(&mut h);
        h
    };
    vec![
        ("valid", base.clone(), true),
        ("n_layer_max", with(&|h| h.n_layer = u32::MAX), false),
        (
            "n_layer_one_more",
            with(&|h| h.n_layer = N_LAYER + 1),
            false,
        ),
        (
            "n_layer_one_less",
            with(&|h| h.n_layer = N_LAYER - 1),
            false,
        ),
        ("n_layer_zero", with(&|h| h.n_layer = 0), false),
        ("n_embd_huge", with(&|h| h.n_embd = 1 << 30), false),
        ("n_embd_max", with(&|h| h.n_embd = u32::MAX), false),
        (
            "n_vocab_mismatch",
            with(&|h| h.n_vocab = N_VOCAB + 1),
            false,
        ),
        ("n_vocab_max", with(&|h| h.n_vocab = u32::MAX), false),
        ("n_ff_huge", with(&|h| h.n_ff = u32::MAX), false),
        ("n_head_kv_max", with(&|h| h.n_head_kv = u32::MAX), false),
        (
            "head_dim_max",
            with(&|h| {
                h.head_dim = u32::MAX;
                h.rope_dim = 0
            }),
            false,
        ),
        ("n_head_not_multiple", with(&|h| h.n_head_kv = 3), false),
        ("n_head_zero", with(&|h| h.n_head = 0), false),
        ("n_head_kv_zero", with(&|h| h.n_head_kv = 0), false),
        (
            "head_dim_mismatch",
            with(&|h| {
                h.head_dim = HEAD_DIM / 2;
                h.rope_dim = HEAD_DIM / 2
            }),
            false,
        ),
        ("n_ff_mismatch", with(&|h| h.n_ff = 2 * N_FF), false),
        ("rope_dim_odd", with(&|h| h.rope_dim = 7), false),
        (
            "rope_dim_too_big",
            with(&|h| h.rope_dim = HEAD_DIM + 2),
            false,
        ),
        ("n_ctx_train_max", with(&|h| h.n_ctx_train = u32::MAX), true),
    ]
}

fn files(scratch: &str) -> Vec<(&'static str, PathBuf, bool)> {
    let dir = tern_tests::scratch(scratch);
    variants()
        .into_iter()
        .map(|(name, hp, ok)| {
            let p = dir.join(format!("{name}.tern"));
            write_model(&p, hp);
            (name, p, ok)
        })
        .collect()
}

#[test]
fn hostile_hyperparameters_are_typed_errors_or_run_bounded() {
    for (name, path, should_load) in files("hostile_hparams") {
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size < 100_000, "{name}: {size} bytes");
        match Model::open(&path) {
            Ok(m) => {
                assert!(should_load, "{name}: loaded, expected an error");
                let mut s = Session::new(&m, 0).unwrap();
                let want = (m.meta().hparams.n_ctx_train as usize).min(Session::DEFAULT_MAX_CTX);
                assert_eq!(s.n_ctx(), want, "{name}");
                let logits = s.eval(&[1]).unwrap();
                assert_eq!(logits.len(), N_VOCAB as usize, "{name}");
                assert!(logits.iter().all(|x| x.is_finite()), "{name}");
            }
            Err(e) => {
                assert!(!should_load, "{name}: expected to load, got {e}");
                assert!(e.is_bad_file(), "{name}: {e} is not a bad-file error");
                eprintln!("{name}: {e}");
            }
        }
    }
}

#[test]
fn the_messages_name_the_lie() {
    let dir = tern_tests::scratch("hostile_hparams_messages");
    let open = |name: &str, f: &dyn Fn(&mut HParams)| {
        let mut hp = hparams();
        f(&mut hp);
        let p = dir.join(format!("{name}.tern"));
        write_model(&p, hp);
        Model::open(&p).err().unwrap().to_string()
    };
    let m = open("layers", &|h| h.n_layer = u32::MAX);
    assert!(
        m.contains("n_layer = 4294967295") && m.contains("2 layers"),
        "{m}"
    );
    let m = open("vocab", &|h| h.n_vocab = 9);
    assert!(
        m.contains("n_vocab = 9") && m.contains("token_embd.weight"),
        "{m}"
    );
    let m = open("head_dim", &|h| {
        h.head_dim = 4;
        h.rope_dim = 4
    });
    assert!(m.contains("attn_q"), "{m}");
    let m = open("n_ff", &|h| h.n_ff = 64);
    assert!(m.contains("ffn_up") && m.contains("n_ff"), "{m}");
    // The format-level check on its own, straight from the file.
    let file = tern_format::TernFile::open(&dir.join("layers.tern")).unwrap();
    assert!(matches!(
        tern_format::check_hparams(&file),
        Err(FormatError::Malformed { .. })
    ));
}

#[test]
fn a_context_whose_kv_cache_overflows_is_an_error() {
    let dir = tern_tests::scratch("hostile_hparams_ctx");
    let p = dir.join("valid.tern");
    write_model(&p, hparams());
    let m = Model::open(&p).unwrap();
    for n_ctx in [usize::MAX, usize::MAX / 8, isize::MAX as usize / 16] {
        let e = Session::new(&m, n_ctx).err().expect("an error");
        eprintln!("n_ctx {n_ctx}: {e}");
    }
}

/// With TERN_BLESS=1, write the hostile files as seeds of the `model_load` fuzz target.
#[test]
fn write_fuzz_seeds() {
    if std::env::var_os("TERN_BLESS").is_none() {
        return;
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/model_load");
    std::fs::create_dir_all(&out).unwrap();
    for (name, path, _) in files("hostile_hparams_seeds") {
        std::fs::copy(&path, out.join(format!("{name}.tern"))).unwrap();
    }
}

/// The word each lie's message must contain (the variant names say which lie).
fn expected_word(name: &str) -> &'static str {
    [
        ("n_layer", "n_layer"),
        ("n_vocab", "n_vocab"),
        ("n_embd", "n_embd"),
        ("n_ff", "n_ff"),
        ("rope", "rope"),
        ("n_head", "head"),
        ("head_dim", "head"),
    ]
    .into_iter()
    .find(|(p, _)| name.starts_with(p))
    .map_or("", |(_, w)| w)
}

/// `tern run` and `tern inspect --verify` on every hostile file: a normal exit (no signal) with
/// an error that names the lie; `--verify` passes the valid files.
#[test]
fn cli_run_and_verify_name_the_problem() {
    use std::process::Command;
    for (name, path, should_load) in files("hostile_hparams_cli") {
        let verify = Command::new(tern_tests::tern_bin())
            .args(["inspect", "--verify"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&verify.stderr);
        assert!(verify.status.code().is_some(), "{name}: killed by a signal");
        assert_eq!(verify.status.success(), should_load, "{name}: {err}");
        if should_load {
            continue;
        }
        assert!(err.contains(expected_word(name)), "{name}: {err}");
        // Default device (auto): the GPU is probed, which must not add lines to stderr (Mesa's
        // device-select layer made libwayland complain twice without a desktop session).
        let run = Command::new(tern_tests::tern_bin())
            .arg("run")
            .arg(&path)
            .args(["-p", "a", "-n", "1"])
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("NODEVICE_SELECT")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(expected_word(name)), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: stray lines: {err}");
        eprintln!("{name}: {}", err.trim());
    }
}
