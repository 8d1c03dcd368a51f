//! Architecture invariants that are cheap to check by reading the source (ARCHITECTURE.md):
//! the CLI and the desktop app reach the GPU engine only through `tern-engine`, and no file of the GPU
//! engine grows back into a thousand-line module. (Import cycles are checked by
//! `scripts/check_cycles.py`, also run in CI.)

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read source dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A front end (`dir`: its crate folder) reaches the GPU engine only through `tern-engine`:
/// no source file names `tern_gpu`, the manifest does not depend on `tern-gpu`.
fn never_names_tern_gpu(dir: &str, src_dirs: &[&str], min_files: usize) {
    let mut files = Vec::new();
    for d in src_dirs {
        rust_files(&root().join(dir).join(d), &mut files);
    }
    assert!(files.len() >= min_files, "{dir} sources found: {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        assert!(
            !text.contains("tern_gpu"),
            "{} names tern_gpu: {dir} uses tern-engine's API and reports",
            f.display()
        );
    }
    let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).expect("read");
    assert!(
        !manifest.contains("tern-gpu"),
        "{dir}/Cargo.toml depends on tern-gpu"
    );
}

#[test]
fn cli_never_names_tern_gpu() {
    never_names_tern_gpu("cli", &["src"], 5);
}

#[test]
fn app_never_names_tern_gpu() {
    never_names_tern_gpu("app", &["src", "tests"], 6);
}

#[test]
fn gpu_engine_files_stay_small() {
    let mut files = Vec::new();
    rust_files(&root().join("runtime/gpu/src"), &mut files);
    assert!(files.len() >= 20, "gpu sources found: {}", files.len());
    for f in &files {
        let lines = std::fs::read_to_string(f).expect("read").lines().count();
        assert!(
            lines <= 650,
            "{} has {lines} lines: split it (ARCHITECTURE.md, tern-gpu layers)",
            f.display()
        );
    }
}
