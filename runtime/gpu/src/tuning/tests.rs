use super::*;
use std::cell::RefCell;
use std::collections::HashMap;

/// [`GpuTuning::from_lookup`] over the given variables (the others unset).
fn parse(vars: &[(&str, &str)]) -> Result<GpuTuning> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    GpuTuning::from_lookup(|name| map.get(name).cloned())
}

#[test]
fn unset_and_empty_are_the_defaults() {
    let d = GpuTuning::default();
    assert_eq!(parse(&[]).unwrap(), d);
    let empty: Vec<(&str, &str)> = TUNING_VARS.iter().map(|v| (*v, "")).collect();
    assert_eq!(parse(&empty).unwrap(), d);
    // today's defaults, spelled out
    assert_eq!(d.fuse_norm, FuseNorm::All);
    assert!(d.fuse_float_norm);
    assert_eq!(d.attn_short, None);
    assert!(!d.attn_prefill);
    assert_eq!(d.qkv, QkvLayout::Stacked);
    assert_eq!(d.gate_up, GateUpLayout::Paired);
    assert_eq!(d.gemm_tile, GemmTileChoice::Auto);
    assert_eq!(d.gemv, GemvKernel::Auto);
    assert!(d.lookahead);
}

/// Every value each variable accepts, and the field it sets (every other field keeps its
/// default).
#[test]
fn every_accepted_value() {
    let d = GpuTuning::default();
    let with = |f: &dyn Fn(&mut GpuTuning)| {
        let mut t = d;
        f(&mut t);
        t
    };
    let cases: Vec<(&str, &str, GpuTuning)> = vec![
        (
            "TERN_GPU_FUSE_NORM",
            "0",
            with(&|t| t.fuse_norm = FuseNorm::Off),
        ),
        (
            "TERN_GPU_FUSE_NORM",
            "qkv",
            with(&|t| t.fuse_norm = FuseNorm::Qkv),
        ),
        (
            "TERN_GPU_FUSE_NORM",
            "attn",
            with(&|t| t.fuse_norm = FuseNorm::Attn),
        ),
        (
            "TERN_GPU_FUSE_NORM",
            "all",
            with(&|t| t.fuse_norm = FuseNorm::All),
        ),
        (
            "TERN_GPU_FUSE_NORM",
            "notopk",
            with(&|t| t.fuse_norm = FuseNorm::NoTopk),
        ),
        (
            "TERN_GPU_FUSE_NORM",
            "1",
            with(&|t| t.fuse_norm = FuseNorm::Wide),
        ),
        (
            "TERN_GPU_FUSE_FLOAT_NORM",
            "0",
            with(&|t| t.fuse_float_norm = false),
        ),
        (
            "TERN_GPU_FUSE_FLOAT_NORM",
            "1",
            with(&|t| t.fuse_float_norm = true),
        ),
        (
            "TERN_GPU_ATTN_SHORT",
            "0",
            with(&|t| t.attn_short = Some(0)),
        ),
        (
            "TERN_GPU_ATTN_SHORT",
            "512",
            with(&|t| t.attn_short = Some(512)),
        ),
        (
            "TERN_GPU_ATTN_SHORT",
            "18446744073709551615",
            with(&|t| t.attn_short = Some(u64::MAX)),
        ),
        (
            "TERN_GPU_ATTN_PREFILL",
            "0",
            with(&|t| t.attn_prefill = false),
        ),
        (
            "TERN_GPU_ATTN_PREFILL",
            "1",
            with(&|t| t.attn_prefill = true),
        ),
        (
            "TERN_GPU_QKV",
            "stacked",
            with(&|t| t.qkv = QkvLayout::Stacked),
        ),
        ("TERN_GPU_QKV", "split", with(&|t| t.qkv = QkvLayout::Split)),
        (
            "TERN_GPU_GATE_UP",
            "paired",
            with(&|t| t.gate_up = GateUpLayout::Paired),
        ),
        (
            "TERN_GPU_GATE_UP",
            "split",
            with(&|t| t.gate_up = GateUpLayout::Split),
        ),
        (
            "TERN_GEMM_TILE",
            "auto",
            with(&|t| t.gemm_tile = GemmTileChoice::Auto),
        ),
        (
            "TERN_GEMM_TILE",
            "old",
            with(&|t| t.gemm_tile = GemmTileChoice::Old),
        ),
        (
            "TERN_GEMM_TILE",
            "32",
            with(&|t| t.gemm_tile = GemmTileChoice::Narrow),
        ),
        (
            "TERN_GEMM_TILE",
            "64",
            with(&|t| t.gemm_tile = GemmTileChoice::Wide),
        ),
        (
            "TERN_GEMM_TILE",
            "128",
            with(&|t| t.gemm_tile = GemmTileChoice::Tall),
        ),
        (
            "TERN_GEMM_TILE",
            "64j8",
            with(&|t| t.gemm_tile = GemmTileChoice::TallHalf),
        ),
        (
            "TERN_GPU_GEMV",
            "auto",
            with(&|t| t.gemv = GemvKernel::Auto),
        ),
        (
            "TERN_GPU_GEMV",
            "plain",
            with(&|t| t.gemv = GemvKernel::Plain),
        ),
        ("TERN_GPU_LOOKAHEAD", "0", with(&|t| t.lookahead = false)),
        ("TERN_GPU_LOOKAHEAD", "1", with(&|t| t.lookahead = true)),
    ];
    for (var, value, want) in &cases {
        assert_eq!(parse(&[(var, value)]).unwrap(), *want, "{var}={value}");
    }
    // every variable has cases
    for var in TUNING_VARS {
        assert!(cases.iter().any(|(v, ..)| *v == var), "{var} untested");
    }
    // all at once
    let all = parse(&[
        ("TERN_GPU_FUSE_NORM", "notopk"),
        ("TERN_GPU_FUSE_FLOAT_NORM", "0"),
        ("TERN_GPU_ATTN_SHORT", "64"),
        ("TERN_GPU_ATTN_PREFILL", "1"),
        ("TERN_GPU_QKV", "split"),
        ("TERN_GPU_GATE_UP", "split"),
        ("TERN_GEMM_TILE", "64j8"),
        ("TERN_GPU_GEMV", "plain"),
        ("TERN_GPU_LOOKAHEAD", "0"),
    ])
    .unwrap();
    assert_eq!(
        all,
        GpuTuning {
            fuse_norm: FuseNorm::NoTopk,
            fuse_float_norm: false,
            attn_short: Some(64),
            attn_prefill: true,
            qkv: QkvLayout::Split,
            gate_up: GateUpLayout::Split,
            gemm_tile: GemmTileChoice::TallHalf,
            gemv: GemvKernel::Plain,
            lookahead: false,
        }
    );
}

/// A value outside a variable's set (silently ignored before `GpuTuning`) is an error that
/// names the variable, the value and what is accepted.
#[test]
fn a_rejected_value_names_the_variable() {
    let cases = [
        ("TERN_GPU_FUSE_NORM", "yes", "0, qkv, attn, all, notopk, 1"),
        ("TERN_GPU_FUSE_FLOAT_NORM", "off", "0, 1"),
        ("TERN_GPU_ATTN_SHORT", "-1", "number of positions"),
        ("TERN_GPU_ATTN_SHORT", "12k", "number of positions"),
        ("TERN_GPU_ATTN_PREFILL", "2", "0, 1"),
        ("TERN_GPU_QKV", "SPLIT", "stacked, split"),
        ("TERN_GPU_GATE_UP", "pairs", "paired, split"),
        ("TERN_GEMM_TILE", "256", "auto, old, 32, 64, 128, 64j8"),
        ("TERN_GPU_GEMV", "dec", "auto, plain"),
        ("TERN_GPU_LOOKAHEAD", "true", "0, 1"),
    ];
    for (var, value, accepted) in cases {
        let e = parse(&[(var, value)]).unwrap_err();
        let GpuError::InvalidArgument { op, .. } = &e else {
            panic!("{var}={value}: {e:?}");
        };
        assert_eq!(*op, var);
        let msg = e.to_string();
        assert!(msg.starts_with(var), "{msg}");
        assert!(msg.contains(&format!("`{value}`")), "{msg}");
        assert!(msg.contains(accepted), "{msg}");
    }
}

/// `from_lookup` asks for exactly the documented variables.
#[test]
fn reads_exactly_the_tuning_variables() {
    let asked = RefCell::new(Vec::new());
    GpuTuning::from_lookup(|name| {
        asked.borrow_mut().push(name.to_string());
        None
    })
    .unwrap();
    let mut asked = asked.into_inner();
    asked.sort();
    let mut want: Vec<String> = TUNING_VARS.iter().map(|v| v.to_string()).collect();
    want.sort();
    assert_eq!(asked, want);
}

/// The environment (`std::env`'s `var`, `var_os`, `vars`) is read in one module of the crate: this
/// one (its test helper aside, the file holding `from_env`).
#[test]
fn only_this_module_reads_the_environment() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    assert!(
        files.len() > 20,
        "scanned {} files under {src:?}",
        files.len()
    );
    let needle = ["env", "::", "var"].concat();
    let readers: Vec<String> = files
        .iter()
        .filter(|p| std::fs::read_to_string(p).unwrap().contains(&needle))
        .map(|p| p.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert_eq!(
        readers,
        vec!["tuning.rs".to_string()],
        "modules reading the environment"
    );
}
