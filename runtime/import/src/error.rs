//! The one error type of `tern-import`.

use thiserror::Error;

/// Import errors: everything names the problem (and the tensor or key where it applies).
#[derive(Debug, Error)]
pub enum ImportError {
    #[error(transparent)]
    Format(#[from] tern_format::FormatError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("GGUF: {0}")]
    Gguf(String),
    #[error("GGUF tensor {name:?} has type {ty} ({type_name}), which tern does not import")]
    UnsupportedGgufType {
        name: String,
        ty: u32,
        type_name: String,
    },
    #[error("Hugging Face model: {0}")]
    Hf(String),
    #[error("missing metadata key {0:?}")]
    MissingKey(String),
    #[error("unsupported architecture {0:?} (tern imports llama-family and BitNet b1.58 models)")]
    UnsupportedArch(String),
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    #[error("fetching the default model: {0}")]
    Fetch(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

pub type Result<T, E = ImportError> = std::result::Result<T, E>;
