//! The crate's one error type.

/// Everything that can go wrong on the GPU path. The process always survives: a caller that gets
/// any of these can fall back to the CPU reference.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// `DevicePreference::Cpu` was asked for: no GPU context is made.
    #[error("the CPU backend was requested; no GPU context is created")]
    CpuRequested,
    /// No adapter (or none of the requested kind) is present.
    #[error("no GPU adapter found{0}")]
    NoAdapter(String),
    /// The adapter lacks a feature or limit every tern kernel needs.
    #[error("adapter `{adapter}` is unsupported: {detail}")]
    Unsupported { adapter: String, detail: String },
    /// `request_device` failed.
    #[error("could not open the GPU device: {0}")]
    RequestDevice(String),
    /// The device was lost (driver reset, `destroy`, GPU hang); the context is unusable.
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// An allocation failed for lack of GPU memory.
    #[error("out of GPU memory allocating {bytes} bytes for {what}")]
    OutOfMemory { what: String, bytes: u64 },
    /// The GPU memory budget (`--max-memory`) cannot hold what was asked for: refused before
    /// allocating, naming the smallest budget that would work (`minimum`, bytes).
    #[error(
        "the GPU memory budget of {budget} bytes is too small for {what}: it needs at least \
         {minimum} bytes{detail}"
    )]
    OverBudget {
        what: String,
        budget: u64,
        minimum: u64,
        /// Extra advice (e.g. the largest context that fits), starting with "; " or empty.
        detail: String,
    },
    /// A tensor or buffer exceeds what this adapter can hold or bind, even when split.
    #[error("{what} is too large for this adapter: {detail}")]
    TooLarge { what: String, detail: String },
    /// A launcher was given operands of the wrong shape, size or encoding (inside the engine
    /// this is a broken invariant, i.e. a bug in tern).
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// The model file is unusable: a tensor is missing, a shape disagrees with the
    /// hyperparameters, the hyperparameters disagree with each other.
    #[error("bad model file: {0}")]
    BadModel(String),
    /// The caller passed a bad argument (a token outside the vocabulary, an empty batch, a
    /// context of 0, more positions than the KV cache holds).
    #[error("{op}: {detail}")]
    InvalidArgument { op: &'static str, detail: String },
    /// An internal invariant of the engine does not hold (a bug in tern).
    #[error("internal error in {op}: {detail}")]
    Internal { op: &'static str, detail: String },
    /// wgpu reported a validation or internal error (a bug in tern, or a driver problem).
    #[error("GPU error in {what}: {detail}")]
    Wgpu { what: String, detail: String },
    /// A decoder kernel found a corrupt stream (e.g. a NeuZip lane reading past its words).
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: String, detail: String },
    /// Mapping a buffer for readback failed.
    #[error("reading back {what} failed: {detail}")]
    Readback { what: String, detail: String },
    /// The format crate rejected a tensor (bad NeuZip blob, ternary bytes of the wrong length).
    #[error(transparent)]
    Format(#[from] tern_format::FormatError),
}

impl GpuError {
    pub(crate) fn bad_model(detail: impl Into<String>) -> Self {
        GpuError::BadModel(detail.into())
    }

    pub(crate) fn invalid(op: &'static str, detail: impl Into<String>) -> Self {
        GpuError::InvalidArgument {
            op,
            detail: detail.into(),
        }
    }

    pub(crate) fn internal(op: &'static str, detail: impl Into<String>) -> Self {
        GpuError::Internal {
            op,
            detail: detail.into(),
        }
    }

    /// The model file is at fault (missing tensor, inconsistent hyperparameters, a corrupt
    /// stream or a tensor the format crate rejects): the same category as the CPU loader's.
    pub fn is_bad_file(&self) -> bool {
        matches!(
            self,
            GpuError::BadModel(_) | GpuError::Corrupt { .. } | GpuError::Format(_)
        )
    }

    pub(crate) fn shape(op: &'static str, detail: impl Into<String>) -> Self {
        GpuError::Shape {
            op,
            detail: detail.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, GpuError>;
