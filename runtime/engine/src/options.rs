//! Plain option and hook types shared by the engine's modules (a leaf: it names nothing else of
//! the crate but its error type, so the backend seam, sessions and scoring can all use them).

use tern_reference::CceOptions;

use crate::error::{EngineError, Result};

/// Which backend runs the model (`--device cpu|gpu|auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// The CPU reference.
    #[default]
    Cpu,
    /// The GPU engine (a software adapter such as lavapipe is accepted); an error when there is
    /// no usable adapter or the model has tensors without GPU kernels.
    Gpu,
    /// A hardware GPU when there is one and the model runs on it; else the CPU reference.
    Auto,
}

impl std::str::FromStr for Device {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            "auto" => Ok(Device::Auto),
            o => Err(EngineError::InvalidArgument(format!(
                "--device `{o}`: expected cpu, gpu or auto"
            ))),
        }
    }
}

/// Options of [`Model::open_with`](crate::Model::open_with).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    pub device: Device,
    /// GPU memory the model and its sessions may take (`--max-memory`): weights, just-in-time
    /// scratch, KV caches, activation scratch, staging. NeuZip tensors beyond it stay compressed
    /// and are decoded just in time; a budget below the smallest that works is refused at load
    /// (`GpuError::OverBudget` naming it), a session that does not fit when it is made. On the
    /// CPU: NeuZip matrices are decoded at load unless that would exceed it (then they stay
    /// compressed and are decoded per tile when used).
    pub max_memory: Option<u64>,
}

/// Options of [`Model::score_with`](crate::Model::score_with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScoreOptions {
    /// Tokens per forward call (0 = 512, llama.cpp's default micro-batch).
    pub batch: usize,
    /// Most tokens one call may score (0 = the model's training context).
    pub max_tokens: usize,
    /// Block sizes of the fused scorer.
    pub cce: CceOptions,
}

/// Hooks into a long scoring run: progress, cancellation, and the bounds of each scoring stage
/// (head product + log-sum-exp, after the forward pass of a batch) for memory measurements.
pub trait ScoreObserver {
    /// A batch's hidden states are ready and the scoring stage starts.
    fn scoring_started(&mut self) {}
    /// The scoring stage of that batch is done.
    fn scoring_finished(&mut self) {}
    /// `done` of `total` tokens have been run.
    fn progress(&mut self, _done: usize, _total: usize) {}
    /// Return `true` to stop with [`EngineError::Cancelled`](crate::EngineError::Cancelled) (checked before every batch).
    fn cancelled(&mut self) -> bool {
        false
    }
}

/// An observer that does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;
impl ScoreObserver for NoObserver {}
