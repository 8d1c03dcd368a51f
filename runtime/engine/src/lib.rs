//! # tern-engine
//!
//! tern's public Rust API: open a packed model, tokenize, render chat templates, run sessions
//! (prefill + decode with a preallocated KV cache) and sample.

mod backend;
pub mod capabilities;
pub mod chat;
pub mod error;
pub mod options;
pub mod plan;
pub mod report;
pub mod sampler;
pub mod score;
pub mod session;
pub mod tokenizer;

pub use capabilities::{Capabilities, Verb};
pub use error::{BackendError, EngineError, ErrorKind, Result, StateError};
pub use options::{
    minicache_on, CpuThreads, Kivi, KvOptions, KvQuant, KvSpec, KvSpecError, MiniCache,
    MiniCacheMode, Numerics, OptionsError, SessionOptions, ValidSessionOptions,
};
pub use plan::{plan, Plan, PlanChoice, PlanConfig};
pub use report::HostTransfers;
pub use report::{
    ActivationPlanReport, ActivationRow, ActivationSparsity, BackendKind, KernelTime, MemoryReport,
    ModelReport, SessionReport, TensorReport,
};
pub use sampler::{Sampler, SamplingParams, SamplingSource};
pub use score::{
    NoObserver, Perplexity, PerplexityOptions, ScoreObserver, ScoreOptions, WindowScore,
};
pub use session::{
    Device, GenerateOptions, GenerateOutput, LoadOptions, LoadProgress, Model, Session, StopReason,
};
/// The GPU engine's tuning knobs ([`LoadOptions::gpu`]), parsed from the environment at the edge.
pub use tern_gpu::GpuTuning;
/// The CPU kernel path this process runs: `"avx2"`, `"neon-dotprod"`, `"neon"` or `"scalar"`
/// (`TERN_CPU_SIMD=scalar` forces the last); every path gives the same bits.
pub use tern_reference::cpu_kernel_path;
/// The CPU forward pass's numerical options ([`Model::set_forward_options`]).
pub use tern_reference::ForwardOptions;
