//! # tern-gpu: the GPU engine on wgpu
//!
//! Four layers, each a folder, each using only the ones above it:
//!
//! * [`device`] — [`GpuContext`] (adapter choice with [`DevicePreference`]: `--device
//!   gpu|cpu|auto`, [`GpuError::NoAdapter`] so the caller falls back to the CPU reference; limits
//!   no higher than mobile GPUs give: `wgpu::Limits::downlevel_defaults()`, ≤ 128 MiB per storage
//!   binding, 16352 B of workgroup memory, 4 storage buffers per stage, `SHADER_F16` only
//!   requested when present and needed by no kernel; allocation inside error scopes
//!   ([`GpuError::OutOfMemory`]); device-lost and uncaptured errors recorded as typed errors
//!   instead of wgpu's default panic; readback), [`KernelKey`] (typed pipeline-cache key whose
//!   `Display` is the pipeline and `tern-shaders` variant label, e.g.
//!   `ternary_gemv_2bit_f32_tpr32`), [`Plan`]/[`Recorder`], every kernel's parameter struct
//!   (`device::params`, checked against the WGSL with naga), shared checks.
//! * [`weights`] — weights as they live on the GPU (ternary codes, ggml blocks, float matrices,
//!   NeuZip blobs), validated and uploaded, split by rows into bindings ([`split_rows`];
//!   [`GpuOptions::binding_limit`] forces small splits in tests).
//! * [`kernels`] — one launcher file per kernel family; a launcher checks shapes first (typed
//!   errors), then builds the key, binds and records a dispatch.
//! * [`model`] — [`GpuModel`] (load, memory plan, activation plan) and [`GpuSession`] (KV cache,
//!   scratch, the recorded graph, the verbs the engine calls).
//!
//! [`tuning`] ([`GpuTuning`]) holds the knobs that pick between equivalent kernels and layouts
//! (`TERN_GPU_*`, `TERN_GEMM_TILE`), typed: parsed once at the edge ([`GpuTuning::from_env`],
//! the crate's one reader of the environment), carried by [`GpuModelOptions`] into the model, and
//! handed to the launchers as arguments.
//!
//! Every kernel has a CPU counterpart in `tern-reference`; `tests/parity.rs` runs each over a
//! table of shapes (bit-exact on the integer and decoder paths, NMSE ≤ 1e-6 on float paths).

pub mod device;
pub mod error;
pub mod kernels;
pub mod model;
pub mod tuning;
pub mod weights;

pub use device::check::split_rows;
pub use device::context::{
    AdapterSummary, DevicePreference, GpuContext, GpuOptions, MAX_BINDING_BYTES,
    WORKGROUP_MEMORY_BYTES,
};
pub use device::memory::MemoryStats;
pub use device::pipeline::{ActBits, DotKind, EltOp, GgmlType, KernelKey, KvFormat, KvRole};
pub use device::plan::{Plan, Recorder};
pub use error::{GpuError, Result};
pub use model::activation::{
    ActivationPlan, BlockInputs, InputScheme, Linear, LinearInput, Producer, WeightKind,
};
pub use model::{
    GpuModel, GpuModelOptions, GpuSession, KvCache, MemoryPlan, SessionMemory, SparsityCount,
    TensorPlacement, Wanted, SHORT_ATTENTION_KEYS,
};
pub use tuning::{
    FuseNorm, GateUpLayout, GemmTileChoice, GemvKernel, GpuTuning, QkvLayout, TUNING_VARS,
};
pub use weights::{FloatPart, FloatWeight, GgmlWeight, NeuzipTensor, TernaryWeight};
