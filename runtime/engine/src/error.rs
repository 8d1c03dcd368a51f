//! The one error type of `tern-engine`.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Format(#[from] tern_format::FormatError),
    #[error(transparent)]
    Reference(#[from] tern_reference::ReferenceError),
    #[error(transparent)]
    Gpu(#[from] tern_gpu::GpuError),
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
