//! The device layer: what every kernel launcher stands on.
//!
//! * `context.rs` — [`GpuContext`]: adapter choice, limits no higher than mobile GPUs give,
//!   allocation inside error scopes, readback, device-lost and uncaptured-error handling.
//! * `queue.rs` — submit/wait, readback, device loss and uncaptured errors (more of
//!   [`GpuContext`]'s methods).
//! * `memory.rs` — GPU memory accounting: live bytes (measured by the driver's allocator where
//!   it counts), the peak, the budget every allocation is checked against.
//! * `pipeline.rs` — [`KernelKey`]: typed pipeline-cache keys whose `Display` is the pipeline
//!   label and the `tern-shaders` variant label; the pipeline cache.
//! * `kinds.rs` — [`pipeline::ActBits`], [`pipeline::DotKind`]: the integer matmuls' key parts.
//! * `plan.rs` — [`Recorder`]: launchers record into a command encoder or a [`Plan`] replayed
//!   per step.
//! * `params.rs` — every kernel's parameter struct, defined once and checked against the WGSL
//!   structs with naga in a CPU test.
//! * `check.rs` — shape/size/binding checks and row splits shared by the launchers.

pub mod check;
pub mod context;
pub mod kinds;
pub mod memory;
pub mod params;
pub mod pipeline;
pub mod plan;
pub mod queue;

pub use context::{GpuContext, GpuOptions};
pub use pipeline::KernelKey;
pub use plan::{Plan, Recorder};
