//! # tern-gpu: the GPU engine on wgpu
//!
//! * [`GpuContext`] (`context.rs`): adapter choice ([`DevicePreference`]: `--device
//!   gpu|cpu|auto`, [`GpuError::NoAdapter`] so the caller falls back to the CPU reference), limits
//!   no higher than mobile GPUs give (`wgpu::Limits::downlevel_defaults()`: ≤ 128 MiB per storage
//!   binding, 16352 B of workgroup memory, 4 storage buffers per stage; `SHADER_F16` only
//!   requested when present, and no kernel needs it), allocation inside error scopes
//!   ([`GpuError::OutOfMemory`]), device-lost and uncaptured errors recorded as typed errors
//!   instead of wgpu's default panic, readback.
//! * [`KernelKey`] (`pipeline.rs`): a typed pipeline-cache key whose `Display` is the pipeline
//!   label and the `tern-shaders` variant label (`ternary_gemv_2bit_f32_tpr32`).
//! * `pool.rs`: a buffer pool for scratch buffers ([`GpuContext::scratch`] / [`GpuContext::recycle`]).
//! * [`ops`]: one launcher per kernel. Each checks shapes first (typed errors), then builds the
//!   key, binds and dispatches into the caller's command encoder. Weights larger than one binding
//!   are split by rows ([`split_rows`]; [`GpuOptions::binding_limit`] forces a small split in
//!   tests).
//!
//! Every kernel has a CPU counterpart in `tern-reference`; `tests/parity.rs` runs each over a
//! table of shapes (bit-exact on the integer and decoder paths, NMSE ≤ 1e-6 on float paths).

pub mod activation;
pub mod attn;
pub mod cce;
pub mod context;
pub mod error;
pub mod float_ops;
pub mod gemm;
pub mod model;
pub mod ops;
pub mod pipeline;
pub mod plan;
mod pool;

pub use activation::{ActivationPlan, InputScheme, Linear, LinearInput, Producer, WeightKind};
pub use context::{
    split_rows, AdapterSummary, DevicePreference, GpuContext, GpuOptions, MAX_BINDING_BYTES,
    WORKGROUP_MEMORY_BYTES,
};
pub use error::{GpuError, Result};
pub use model::{
    GpuModel, GpuModelOptions, GpuSession, MemoryPlan, SessionMemory, TensorPlacement, Wanted,
};
pub use pipeline::{EltOp, GgmlType, KernelKey};
pub use plan::{Plan, Recorder};
