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
/// On error the partial output file is removed.
pub fn import_path(
    input: &Path,
    out: &Path,
    opts: &PackOptions,
    progress: pack::Progress,
) -> Result<tern_format::ModelMeta> {
    let r = if input.is_dir() {
        import_hf(input, out, opts, progress)
    } else {
        gguf_import::import_gguf(input, out, opts, progress)
    };
    if r.is_err() {
        let _ = std::fs::remove_file(out);
    }
    r
}

fn import_hf(
    input: &Path,
    out: &Path,
    opts: &PackOptions,
    progress: pack::Progress,
) -> Result<tern_format::ModelMeta> {
    hf::import_hf_dir(input, out, opts, progress)
}
