//! # tern-engine
//!
//! tern's public Rust API: open a packed model, tokenize, render chat templates, run sessions
//! (prefill + decode with a preallocated KV cache) and sample.

mod backend;
pub mod capabilities;
pub mod chat;
pub mod error;
pub mod options;
pub mod report;
pub mod sampler;
pub mod score;
pub mod session;
pub mod tokenizer;

pub use capabilities::{Capabilities, Verb};
pub use error::{BackendError, EngineError, ErrorKind, Result};
pub use options::{kv_spec_from_flags, minicache_on, Kivi, KvQuant, KvSpec, MiniCache};
pub use report::HostTransfers;
pub use report::{
    ActivationPlanReport, ActivationRow, ActivationSparsity, BackendKind, KernelTime, MemoryReport,
    ModelReport, SessionReport, TensorReport,
};
pub use sampler::{Sampler, SamplingParams};
pub use score::{
    NoObserver, Perplexity, PerplexityOptions, ScoreObserver, ScoreOptions, WindowScore,
};
pub use session::{
    Device, GenerateOptions, GenerateOutput, LoadOptions, Model, Session, StopReason,
};
/// The CPU forward pass's numerical options ([`Model::set_forward_options`]).
pub use tern_reference::ForwardOptions;
