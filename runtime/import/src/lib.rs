//! Importers into `.tern`: GGUF v3 files and Hugging Face safetensors directories.
//!
//! Entry point: [`import_path`] (what `tern pack` calls) picks the importer by the input's kind.

pub mod error;
pub mod fetch;
pub mod gguf;
pub mod gguf_import;
pub mod gguf_meta;
pub mod hf;
pub mod pack;

use std::path::{Path, PathBuf};

pub use error::{ImportError, Result};
pub use pack::{FloatMode, PackOptions};

/// Pack `input` (a `.gguf` file or a Hugging Face model directory) into the `.tern` file `out`.
/// The file is written as `<out>.part` and renamed to `out` only when complete, so a failed pack
/// leaves an existing `out` as it was; `out` may not be the input (or a file inside the input
/// directory), which is memory-mapped while packing.
pub fn import_path(
    input: &Path,
    out: &Path,
    opts: &PackOptions,
    progress: pack::Progress,
) -> Result<tern_format::ModelMeta> {
    if input.is_dir() {
        hf::import_hf_dir(input, out, opts, progress)
    } else {
        gguf_import::import_gguf(input, out, opts, progress)
    }
}

/// Refuses an `out` that is `input` itself or an existing file inside the input directory (the
/// importer reads it while writing). Called before the input is parsed.
pub(crate) fn check_output(input: &Path, out: &Path) -> Result<()> {
    if let (Ok(i), Ok(o)) = (input.canonicalize(), out.canonicalize()) {
        if i == o || (i.is_dir() && o.starts_with(&i)) {
            return Err(ImportError::InvalidArgument(format!(
                "output {} would overwrite the input {} (choose another output path)",
                out.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Runs `write(part)` for the temporary `<out>.part`, then renames it to `out`; on error the
/// partial file is removed and `out` is untouched.
pub(crate) fn write_via_part<T>(out: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let part = {
        let mut s = out.as_os_str().to_owned();
        s.push(".part");
        PathBuf::from(s)
    };
    match write(&part) {
        Ok(v) => {
            if let Err(e) = std::fs::rename(&part, out) {
                let _ = std::fs::remove_file(&part);
                return Err(e.into());
            }
            Ok(v)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e)
        }
    }
}
