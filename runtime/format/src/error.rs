//! The one error type of `tern-format`.

use thiserror::Error;

/// Everything that can go wrong while reading, writing or decoding a `.tern` file or one of its
/// tensor encodings. Every variant names the problem; reader errors carry a remedy where one exists.
#[derive(Debug, Error)]
pub enum FormatError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a .tern file (bad magic bytes): {remedy}")]
    BadMagic { remedy: &'static str },
    #[error("file is .tern format v{found}, this build reads v{supported}: re-run `tern pack` with this build, or upgrade tern")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("file needs format features {bits:#x} that this build does not know: upgrade tern, or re-pack without them")]
    UnsupportedFeatures { bits: u64 },
    #[error("file is truncated: {what} needs bytes {start}..{end} but the file has {len}")]
    Truncated {
        what: String,
        start: u64,
        end: u64,
        len: u64,
    },
    #[error("checksum mismatch in {what}: stored {stored:#018x}, computed {computed:#018x} (the file is corrupt: re-download or re-pack it)")]
    Checksum {
        what: String,
        stored: u64,
        computed: u64,
    },
    #[error("{what} is out of range: {detail}")]
    OutOfRange { what: String, detail: String },
    #[error("bad shape for {what}: {detail}")]
    BadShape { what: String, detail: String },
    #[error("unknown tensor encoding {0:?}")]
    UnknownEncoding(String),
    #[error("malformed {what}: {detail}")]
    Malformed { what: String, detail: String },
    #[error("non-zero padding at byte {offset} ({what})")]
    NonZeroPadding { what: String, offset: u64 },
    #[error("tensor {0:?} not found")]
    NoSuchTensor(String),
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("corrupt {codec} stream: {detail}")]
    Corrupt { codec: &'static str, detail: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The model's architecture (`spec::ModelSpec`) needs a feature the backend that loads it
    /// does not implement.
    #[error(transparent)]
    UnsupportedModel(#[from] crate::features::Unsupported),
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    pub(crate) fn malformed(what: impl Into<String>, detail: impl Into<String>) -> Self {
        FormatError::Malformed {
            what: what.into(),
            detail: detail.into(),
        }
    }
    pub(crate) fn out_of_range(what: impl Into<String>, detail: impl Into<String>) -> Self {
        FormatError::OutOfRange {
            what: what.into(),
            detail: detail.into(),
        }
    }
    pub(crate) fn corrupt(codec: &'static str, detail: impl Into<String>) -> Self {
        FormatError::Corrupt {
            codec,
            detail: detail.into(),
        }
    }
}
