//! Plain option and hook types shared by the engine's modules (a leaf: it names nothing else of
//! the crate but its error type, so the backend seam, sessions and scoring can all use them).

pub use tern_format::kv::{Kivi, KvQuant, KvSpec, MiniCache};
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
    /// The GPU engine's kernel and layout choices (`TERN_GPU_*`, `TERN_GEMM_TILE`; see
    /// [`GpuTuning`](crate::GpuTuning)): the defaults unless the caller's edge (the CLI, the app,
    /// the C ABI) parsed the environment with `GpuTuning::from_env`. The CPU ignores them.
    pub gpu: tern_gpu::GpuTuning,
}

/// Options of [`Model::score_with`](crate::Model::score_with).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ScoreOptions {
    /// Tokens per forward call (0 = 512, llama.cpp's default micro-batch).
    pub batch: usize,
    /// Most tokens one call may score (0 = the model's training context).
    pub max_tokens: usize,
    /// Block sizes of the fused scorer.
    pub cce: CceOptions,
    /// The KV-cache format of the scoring cache (`--kv`, `--minicache`; default f32).
    pub kv: KvSpec,
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
    /// After a scoring run: the KV cache held `positions` positions in `bytes_in_use` bytes
    /// (all of them: codes, scales, zero points, window, magnitudes, retained tokens).
    fn kv_cache(&mut self, _bytes_in_use: u64, _positions: usize) {}
    /// Return `true` to stop with [`EngineError::Cancelled`](crate::EngineError::Cancelled) (checked before every batch).
    fn cancelled(&mut self) -> bool {
        false
    }
}

/// An observer that does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;
impl ScoreObserver for NoObserver {}

/// The MiniCache settings of `--minicache on` for a model of `n_layer` layers: the measured
/// defaults of `tern_reference::kv` (start layer as a fraction of the depth, t, γ).
pub fn minicache_on(n_layer: u32) -> MiniCache {
    tern_reference::kv::minicache_default(n_layer)
}

/// A [`KvSpec`] from the CLI / C ABI spellings: `kv` = f32|f16|q8|q4|q3|q2|a4|a3, `minicache` =
/// off|on|S,t,gamma, KIVI `group`/`window` (None = 32/128); checked against `hp`.
pub fn kv_spec_from_flags(
    kv: &str,
    minicache: &str,
    group: Option<u32>,
    window: Option<u32>,
    hp: &tern_format::HParams,
) -> Result<KvSpec> {
    let bad = |e: tern_format::kv::KvSpecError| EngineError::InvalidArgument(e.to_string());
    let quant = KvQuant::parse(kv).map_err(bad)?;
    let mc = if minicache.trim().eq_ignore_ascii_case("on") {
        Some(minicache_on(hp.n_layer))
    } else {
        KvSpec::parse_minicache_explicit(minicache).map_err(bad)?
    };
    let d = Kivi::default();
    let spec = KvSpec {
        quant,
        kivi: Kivi {
            group: group.unwrap_or(d.group),
            residual: window.unwrap_or(d.residual),
        },
        minicache: mc,
    };
    if quant.is_kivi() || group.is_some() || window.is_some() {
        spec.kivi.check().map_err(bad)?;
    }
    spec.check(hp).map_err(bad)?;
    Ok(spec)
}
