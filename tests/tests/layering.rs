//! Architecture invariants that are cheap to check by reading the source (ARCHITECTURE.md):
//! the CLI, the desktop app and the C ABI reach the backends only through `tern-engine` (the C ABI
//! and the app depend on no backend crate at all: `tern-engine`, and `tern-format` for plain
//! types), and no file of the GPU engine grows back into a thousand-line module. (Import cycles are checked by
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

/// The workspace crates (`tern-*`) a manifest's `[dependencies]` names (dev-dependencies and
/// target-specific sections aside).
fn workspace_deps(manifest: &str) -> Vec<String> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section == "[dependencies]" && line.starts_with("tern-") {
            let name: String = line
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

/// A front end (`dir`) that depends on no backend crate: its `[dependencies]` name only the
/// workspace crates `allowed`, the whole manifest names neither `tern-gpu` nor `tern-reference`,
/// and no source file names `tern_gpu` or `tern_reference` (errors are classified by
/// `EngineError::kind`, backends are chosen through `tern-engine`'s options).
fn depends_on_no_backend(dir: &str, src_dirs: &[&str], min_files: usize, allowed: &[&str]) {
    let mut files = Vec::new();
    for d in src_dirs {
        rust_files(&root().join(dir).join(d), &mut files);
    }
    assert!(files.len() >= min_files, "{dir} sources found: {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        for name in ["tern_gpu", "tern_reference"] {
            assert!(
                !text.contains(name),
                "{} names {name}: {dir} uses tern-engine's API (EngineError::kind, Model::capabilities, LoadOptions)",
                f.display()
            );
        }
    }
    let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).expect("read");
    for name in ["tern-gpu", "tern-reference"] {
        assert!(!manifest.contains(name), "{dir}/Cargo.toml names {name}");
    }
    let deps = workspace_deps(&manifest);
    assert!(deps.iter().any(|d| d == "tern-engine"), "{dir}: {deps:?}");
    for d in &deps {
        assert!(
            allowed.contains(&d.as_str()),
            "{dir}/Cargo.toml depends on {d}: allowed are {allowed:?}"
        );
    }
}

#[test]
fn workspace_deps_reads_the_dependencies_section() {
    let m = "[package]\nname = \"tern-x\"\n[dependencies]\ntern-engine.workspace = true\n\
             tern-gpu = { path = \"../g\" }\nlog = \"1\"\n[dev-dependencies]\ntern-tests = \"1\"\n";
    assert_eq!(workspace_deps(m), ["tern-engine", "tern-gpu"]);
}

#[test]
fn ffi_depends_on_no_backend() {
    depends_on_no_backend("ffi", &["src"], 6, &["tern-engine", "tern-format"]);
}

#[test]
fn app_depends_on_no_backend() {
    depends_on_no_backend(
        "app",
        &["src", "tests"],
        6,
        &["tern-engine", "tern-format", "tern-import"],
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
