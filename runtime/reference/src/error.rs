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

/// The error for an allocation of `bytes` that cannot be made: a
/// [`tern_format::FormatError::OutOfRange`] naming `what` and the bytes (no variant of its own, so
/// that the exhaustive status maps of the FFI stay as they are; it counts as a bad file).
pub(crate) fn too_large(what: &str, bytes: u128) -> ReferenceError {
    ReferenceError::Format(tern_format::FormatError::OutOfRange {
        what: what.to_string(),
        detail: format!(
            "needs {bytes} bytes, more than this process can allocate (a hostile or corrupt \
             file, or a context too large for this machine)"
        ),
    })
}

/// A zero-filled `Vec` of `n` elements, allocated fallibly: an allocation the system refuses (or
/// a byte count that overflows) is a [`too_large`] error naming `what` and the bytes, not a
/// process abort.
pub(crate) fn try_zeroed<T: Clone + Default>(what: &str, n: usize) -> Result<Vec<T>> {
    let too_large = || too_large(what, n as u128 * std::mem::size_of::<T>() as u128);
    let bytes = n
        .checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(too_large)?;
    // Refused before a page is touched when the machine cannot hold it (overcommit would accept
    // the reservation and the zero-fill below would summon the OOM killer).
    tern_format::sysmem::check_fits(bytes as u64).map_err(|_| too_large())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_large())?;
    v.resize(n, T::default());
    Ok(v)
}

/// Check that `bytes` (as u128, so no product can overflow) could be allocated at all, before a
/// decoder allocates them infallibly: refuses more than `isize::MAX` and anything the allocator
/// refuses now, as a [`too_large`] error.
pub(crate) fn probe_alloc(what: &str, bytes: u128) -> Result<()> {
    let too_large = || too_large(what, bytes);
    let n = usize::try_from(bytes)
        .ok()
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(too_large)?;
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_large())
}
