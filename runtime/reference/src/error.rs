//! The one error type of `tern-reference`.

use thiserror::Error;

/// Everything that can go wrong while loading a model or running the reference forward pass.
#[derive(Debug, Error)]
pub enum ReferenceError {
    #[error(transparent)]
    Format(#[from] tern_format::FormatError),
    #[error("tensor {name:?} is missing from the model file (re-pack the model with a current `tern pack`)")]
    MissingTensor { name: String },
    #[error("tensor {name:?} has shape {found:?}, the hyperparameters need {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor {name:?}: encoding {encoding} is not supported for {role}")]
    UnsupportedEncoding {
        name: String,
        encoding: String,
        role: &'static str,
    },
    #[error("tensor {name:?} is not ternary: {detail}")]
    NotTernary { name: String, detail: String },
    #[error("bad hyperparameters: {0}")]
    BadHParams(String),
    #[error("token id {token} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { token: u32, n_vocab: u32 },
    #[error("context overflow: {needed} positions needed, the KV cache holds {capacity}")]
    ContextOverflow { needed: usize, capacity: usize },
    #[error("the KV cache was made for a different model ({detail})")]
    CacheMismatch { detail: String },
    #[error("no tokens given")]
    EmptyInput,
    #[error("shape mismatch in {what}: {detail}")]
    Shape { what: &'static str, detail: String },
}

pub type Result<T, E = ReferenceError> = std::result::Result<T, E>;

impl ReferenceError {
    pub(crate) fn shape(what: &'static str, detail: impl Into<String>) -> Self {
        ReferenceError::Shape {
            what,
            detail: detail.into(),
        }
    }
}

/// Check `len == expected`, else a [`ReferenceError::Shape`].
pub(crate) fn check_len(what: &'static str, name: &str, len: usize, expected: usize) -> Result<()> {
    if len == expected {
        Ok(())
    } else {
        Err(ReferenceError::shape(
            what,
            format!("{name} has {len} elements, expected {expected}"),
        ))
    }
}
