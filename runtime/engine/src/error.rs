//! The one error type of `tern-engine`.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Format(#[from] tern_format::FormatError),
    #[error(transparent)]
    Reference(#[from] tern_reference::ReferenceError),
    /// Any GPU error but a lost device (which is [`EngineError::DeviceLost`]).
    #[error(transparent)]
    Gpu(tern_gpu::GpuError),
    /// The GPU device was lost (driver reset, GPU hang, the OS reclaiming it): the model and its
    /// sessions cannot be used again. Reopen the model (`Model::reopen_on(Device::Cpu)` runs it
    /// on the CPU) and make a new session; `Session::history` says what to feed it.
    #[error("the GPU device was lost ({0}): this model and its sessions must be recreated (e.g. reopened on the CPU)")]
    DeviceLost(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("this model has no tokenizer: pass token ids (--tokens) instead of text")]
    NoTokenizer,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("the prompt has {prompt} tokens but the context holds {ctx}: shorten it or raise the context size")]
    PromptTooLong { prompt: usize, ctx: usize },
    #[error("nothing to score: {0}")]
    NothingToScore(String),
    #[error("{tokens} tokens are too few for perplexity with a context of {n_ctx}: at least {needed} are needed (two windows, as llama-perplexity requires); use a longer text or a smaller -c")]
    TooFewTokens {
        tokens: usize,
        n_ctx: usize,
        needed: usize,
    },
    #[error("a context of {requested} tokens is larger than the model's training context ({n_ctx_train})")]
    ContextTooLarge {
        requested: usize,
        n_ctx_train: usize,
    },
    #[error("numeric problem: {0}")]
    Numeric(String),
    #[error("cancelled")]
    Cancelled,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl From<tern_gpu::GpuError> for EngineError {
    fn from(e: tern_gpu::GpuError) -> Self {
        match e {
            tern_gpu::GpuError::DeviceLost(why) => EngineError::DeviceLost(why),
            e => EngineError::Gpu(e),
        }
    }
}

impl EngineError {
    /// The model file is at fault (bad magic, checksum, a missing tensor, a shape or
    /// hyperparameter that does not fit): the same answer whichever backend loaded it.
    pub fn is_bad_file(&self) -> bool {
        use tern_format::FormatError as F;
        use tern_reference::ReferenceError as R;
        fn format_bad(f: &F) -> bool {
            matches!(
                f,
                F::BadMagic { .. }
                    | F::Truncated { .. }
                    | F::Checksum { .. }
                    | F::OutOfRange { .. }
                    | F::BadShape { .. }
                    | F::Malformed { .. }
                    | F::NonZeroPadding { .. }
                    | F::NoSuchTensor(_)
                    | F::DuplicateTensor(_)
                    | F::Corrupt { .. }
            )
        }
        match self {
            EngineError::Format(f) => format_bad(f),
            EngineError::Reference(R::Format(f)) => format_bad(f),
            EngineError::Reference(r) => matches!(
                r,
                R::MissingTensor { .. }
                    | R::TensorShape { .. }
                    | R::NotTernary { .. }
                    | R::BadHParams(_)
            ),
            EngineError::Gpu(tern_gpu::GpuError::Format(f)) => format_bad(f),
            EngineError::Gpu(g) => g.is_bad_file(),
            _ => false,
        }
    }

    /// The GPU device was lost (driver reset, hang): the model must be loaded again.
    pub fn is_device_lost(&self) -> bool {
        matches!(
            self,
            EngineError::DeviceLost(_) | EngineError::Gpu(tern_gpu::GpuError::DeviceLost(_))
        )
    }

    /// An internal invariant failed (a bug in tern, or a GPU driver problem), not the caller's
    /// input or the file.
    pub fn is_internal(&self) -> bool {
        use tern_gpu::GpuError as G;
        match self {
            EngineError::Reference(r) => matches!(
                r,
                tern_reference::ReferenceError::CacheMismatch { .. }
                    | tern_reference::ReferenceError::Shape { .. }
            ),
            EngineError::Gpu(g) => matches!(
                g,
                G::Shape { .. }
                    | G::Internal { .. }
                    | G::Wgpu { .. }
                    | G::Readback { .. }
                    | G::RequestDevice(_)
            ),
            _ => false,
        }
    }
}
