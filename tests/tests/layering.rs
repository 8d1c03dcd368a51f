//! Architecture invariants that are cheap to check by reading the source (ARCHITECTURE.md):
//! the CLI reaches the GPU engine only through `tern-engine`'s reports, and no file of the GPU
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

#[test]
fn cli_never_names_tern_gpu() {
    let mut files = Vec::new();
    rust_files(&root().join("cli/src"), &mut files);
    assert!(files.len() >= 5, "cli sources found: {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        assert!(
            !text.contains("tern_gpu"),
            "{} names tern_gpu: the CLI uses tern-engine's reports",
            f.display()
        );
    }
    let manifest = std::fs::read_to_string(root().join("cli/Cargo.toml")).expect("read");
    assert!(
        !manifest.contains("tern-gpu"),
        "cli/Cargo.toml depends on tern-gpu"
    );
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
