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
    /// A tensor or buffer exceeds what this adapter can hold or bind, even when split.
    #[error("{what} is too large for this adapter: {detail}")]
    TooLarge { what: String, detail: String },
    /// A launcher was given operands of the wrong shape, size or encoding.
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
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
    pub(crate) fn shape(op: &'static str, detail: impl Into<String>) -> Self {
        GpuError::Shape {
            op,
            detail: detail.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, GpuError>;
