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

use std::path::Path;

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

/// Refuses an `out` that is, or resolves to, `input` — directly, through its temporary
/// `<out>.part` name, or as a hard link — or that lies inside the input directory (the importer
/// maps the input while writing). Called before the input is parsed
/// (`tern_format::output::refuse_input_as_output`, the one data-safety rule).
pub(crate) fn check_output(input: &Path, out: &Path) -> Result<()> {
    tern_format::output::refuse_input_as_output(&[input], out, "output").map_err(|e| match e {
        tern_format::FormatError::InvalidArgument(m) => ImportError::InvalidArgument(m),
        e => e.into(),
    })
}

/// Runs `write(part)` for the temporary `<out>.part`, checks the result as `tern inspect --verify`
/// does ([`verify_written`]), then renames it to `out`; on error the partial file is removed and
/// `out` is untouched.
pub(crate) fn write_via_part<T>(out: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let part = tern_format::output::part_path(out);
    match write(&part).and_then(|v| verify_written(&part).map(|()| v)) {
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

/// The check `tern inspect --verify` runs, on a file just written: it opens (header, metadata,
/// directory, every offset), every tensor decodes with its checksum and padding, and the
/// hyperparameters agree with each other and with the tensors present. A pack that would produce
/// a file later commands refuse fails here instead, before an existing output is replaced.
pub fn verify_written(path: &Path) -> Result<()> {
    let f = tern_format::TernFile::open(path)?;
    f.verify()?;
    tern_format::check_hparams(&f)?;
    Ok(())
}
