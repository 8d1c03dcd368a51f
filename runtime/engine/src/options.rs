//! The options spine: [`LoadOptions`] (how a model is opened) and [`SessionOptions`] (how a
//! session is made), plain typed structs that the CLI, the desktop app and the C ABI fill in at
//! their edges (string and integer parsing happen there, never here), each validated once, here:
//! [`SessionOptions::validate`] (with [`KvOptions::validate`] for the KV cache) into
//! [`OptionsError`]. Also the plain option and hook types of scoring. A leaf of the crate: it
//! names nothing else of it but the error type.

use std::path::PathBuf;

pub use tern_format::kv::{Kivi, KvQuant, KvSpec, KvSpecError, MiniCache};
use tern_format::{ActivationScheme, HParams};
use tern_reference::CceOptions;
use thiserror::Error;

use crate::error::EngineError;
use crate::sampler::SamplingParams;

/// Which backend runs the model (`--device cpu|gpu|auto`, `TERN_DEVICE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// The CPU reference.
    #[default]
    Cpu,
    /// The GPU engine (a software adapter such as lavapipe is accepted); an error when there is
    /// no usable adapter or the model has tensors without GPU kernels.
    Gpu,
    /// tern's one meaning of "auto", everywhere (`--device auto`, `TERN_DEVICE_AUTO`, the desktop
    /// app, Kotlin and Swift): a **hardware** GPU when there is one and the model has kernels for
    /// every tensor on it; else the CPU reference. A software adapter (lavapipe, WARP, SwiftShader)
    /// is never picked by `Auto` (so on a machine without a GPU, CI included, `Auto` is the CPU);
    /// ask for [`Device::Gpu`] to use one — or, to test an app's `Auto` path on a machine with
    /// only a software adapter (CI's lavapipe job), set [`LoadOptions::auto_software_gpu`] (the
    /// C ABI: the environment variable `TERN_AUTO_SOFTWARE_GPU=1`).
    Auto,
}

/// How the CPU backend runs its matrix products ([`LoadOptions::cpu_threads`]; the C ABI's
/// `use_threads`). The results are bit-identical either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuThreads {
    /// Split them over a thread pool (default).
    #[default]
    Pool,
    /// Run them on the calling thread only.
    Caller,
    /// Split them over a pool of this many threads (> 0). The pool is the process's one CPU
    /// pool (`tern_reference::threads`): made once, by the first model loaded on the CPU; a
    /// later model asking for another count is refused (`InvalidArgument` naming the count in
    /// use). `Count(1)` still uses the pool (one worker); `Caller` uses none.
    Count(usize),
}

impl CpuThreads {
    /// Threads a CPU model loaded with these options runs its products on.
    pub fn resolved(self) -> usize {
        match self {
            CpuThreads::Caller => 1,
            CpuThreads::Pool | CpuThreads::Count(_) => tern_reference::threads::pool_threads(),
        }
    }
}

/// Options of [`Model::open_with`](crate::Model::open_with): everything that decides how a
/// model is loaded. All fields are public and the struct has a `Default`, so callers write
/// `LoadOptions { device: Device::Gpu, ..Default::default() }`.
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// Quantize the ternary linears' inputs as this scheme says instead of the file's (both
    /// backends; `tern bench --activations a8|a4.8`, the app's activation choice).
    pub activations: Option<ActivationScheme>,
    /// A fine-tune delta (`.ternd`) applied in memory to the file opened; a delta made against
    /// another base is refused before anything is used (`tern run --delta`).
    pub delta: Option<PathBuf>,
    /// CPU backend: matrix products on a thread pool or on the calling thread.
    pub cpu_threads: CpuThreads,
    /// Called as loading goes ([`LoadProgress`]); `None`: not reported.
    pub progress: Option<LoadProgress>,
    /// [`Device::Auto`] also takes a software adapter (lavapipe, WARP, SwiftShader) when there
    /// is no hardware GPU: for tests of the `Auto` path on machines without a GPU. Default off.
    pub auto_software_gpu: bool,
}

/// A load-progress callback ([`LoadOptions::progress`]): called on the loading thread with the
/// fraction done in [0, 1] and the stage that just finished — `"open"` (the file mapped and its
/// header, metadata and tensor table checked), `"weights"` (the weights loaded for the device:
/// uploaded to the GPU, or decoded/mapped on the CPU; the long part), `"tokenizer"`, then
/// `"done"` at 1.0 — in that order, each once, ending with 1.0 on success only. Equal when it
/// is the same callback.
#[derive(Clone)]
pub struct LoadProgress(pub std::sync::Arc<dyn Fn(f32, &str) + Send + Sync>);

impl LoadProgress {
    pub(crate) fn report(p: &Option<LoadProgress>, fraction: f32, stage: &str) {
        if let Some(p) = p {
            (p.0)(fraction, stage);
        }
    }
}

impl std::fmt::Debug for LoadProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoadProgress(..)")
    }
}

impl PartialEq for LoadProgress {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// MiniCache cross-layer merging of a session's KV cache (`--minicache off|on|S,t,gamma`,
/// `TERN_MINICACHE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum MiniCacheMode {
    #[default]
    Off,
    /// The measured defaults for the model's depth ([`minicache_on`]).
    On,
    /// Explicit start layer, SLERP `t` and retention threshold `gamma`.
    Custom(MiniCache),
}

/// The KV-cache options of a session (`--kv`, `--kv-group`, `--kv-window`, `--minicache`;
/// `tern_session_options.kv_format/kivi_*/minicache*`), made a [`KvSpec`] for a model by
/// [`KvOptions::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KvOptions {
    /// How each K/V value is stored (default q8, `KvQuant::default()`; f32 is the reference).
    pub format: KvQuant,
    /// KIVI's group `G` and window `R` (default 32 / 128); checked for the KIVI formats, and for
    /// the others when not the default.
    pub kivi: Kivi,
    pub minicache: MiniCacheMode,
}

impl From<KvSpec> for KvOptions {
    fn from(s: KvSpec) -> Self {
        KvOptions {
            format: s.quant,
            kivi: s.kivi,
            minicache: s
                .minicache
                .map_or(MiniCacheMode::Off, MiniCacheMode::Custom),
        }
    }
}

impl KvOptions {
    /// The one check of a KV spec (every front end and both backends rely on it): `On` resolved
    /// for the model's depth, KIVI's group and window checked also for a non-KIVI format that
    /// sets them, then `tern_format::KvSpec::check` (KIVI, MiniCache's `t`/`gamma` in [0, 1] and
    /// start layer, a row the cache can store).
    pub fn validate(&self, hp: &HParams) -> Result<KvSpec, OptionsError> {
        let minicache = match self.minicache {
            MiniCacheMode::Off => None,
            MiniCacheMode::On => Some(minicache_on(hp.n_layer)),
            MiniCacheMode::Custom(m) => Some(m),
        };
        let spec = KvSpec {
            quant: self.format,
            kivi: self.kivi,
            minicache,
        };
        if self.kivi != Kivi::default() {
            self.kivi.check()?;
        }
        spec.check(hp)?;
        Ok(spec)
    }
}

/// The numerics of a session's CPU forward pass (`--llama-cpp-numerics`,
/// `tern_session_options.llama_cpp_numerics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Numerics {
    /// The model's own (f32 activations and KV cache unless the file says otherwise).
    #[default]
    Model,
    /// llama.cpp's CPU numerics (`ForwardOptions::llama_cpp_like`): its greedy output token for
    /// token for llama-family Q4_1/Q8_0 models on x86. A CPU mode: a GPU session refuses it.
    LlamaCpp,
}

/// Options of [`Session::with_options`](crate::Session::with_options): everything that decides
/// how a session is made, validated once by [`SessionOptions::validate`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionOptions {
    /// Positions of the KV cache; 0 = the model's training context, capped at
    /// [`Session::DEFAULT_MAX_CTX`](crate::Session::DEFAULT_MAX_CTX) (4096).
    pub n_ctx: usize,
    pub kv: KvOptions,
    /// The session's default sampling ([`Session::sampling`](crate::Session::sampling)).
    pub sampling: SamplingParams,
    pub numerics: Numerics,
}

/// [`SessionOptions`] checked against a model: only [`SessionOptions::validate`] makes one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSessionOptions {
    n_ctx: usize,
    kv: KvSpec,
    sampling: SamplingParams,
    numerics: Numerics,
}

impl ValidSessionOptions {
    /// The context, resolved (never 0).
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// The KV spec, checked against the model (`on` resolved).
    pub fn kv(&self) -> &KvSpec {
        &self.kv
    }
    pub fn sampling(&self) -> &SamplingParams {
        &self.sampling
    }
    pub fn numerics(&self) -> Numerics {
        self.numerics
    }
    /// After `Session::set_llama_cpp_numerics`.
    pub(crate) fn set_numerics(&mut self, n: Numerics) {
        self.numerics = n;
    }
}

/// Why options were refused (one variant per kind of mistake; the message names the value).
/// Converted to [`EngineError::InvalidArgument`] at the engine's API.
#[derive(Debug, Error, PartialEq)]
pub enum OptionsError {
    /// A bad KV spec for this model.
    #[error(transparent)]
    Kv(#[from] KvSpecError),
    /// A context whose KV cache cannot even be addressed.
    #[error(
        "a context of {n_ctx} tokens needs a KV cache of {bytes} bytes ({n_layer} layers × \
         {n_head_kv} KV heads × {head_dim} dims × 8 bytes per token), more than can be addressed"
    )]
    ContextTooLarge {
        n_ctx: usize,
        bytes: u128,
        n_layer: u32,
        n_head_kv: u32,
        head_dim: u32,
    },
    /// A sampling parameter out of range (the message names it).
    #[error("{0}")]
    Sampling(String),
}

impl From<OptionsError> for EngineError {
    fn from(e: OptionsError) -> Self {
        EngineError::InvalidArgument(e.to_string())
    }
}

impl SessionOptions {
    /// The largest context `n_ctx = 0` picks on its own.
    pub const DEFAULT_MAX_CTX: usize = 4096;

    /// The context a session of these options gets on a model of `hp`: `n_ctx`, or for 0 the
    /// training context capped at [`SessionOptions::DEFAULT_MAX_CTX`] (not checked).
    pub fn resolved_n_ctx(&self, hp: &HParams) -> usize {
        if self.n_ctx == 0 {
            (hp.n_ctx_train as usize).min(Self::DEFAULT_MAX_CTX)
        } else {
            self.n_ctx
        }
    }

    /// The one check of a session's options against the model's hyperparameters: the context
    /// resolved (0 → training context, capped) and addressable, the KV spec
    /// ([`KvOptions::validate`]), the sampling ranges.
    pub fn validate(&self, hp: &HParams) -> Result<ValidSessionOptions, OptionsError> {
        let n_ctx = self.resolved_n_ctx(hp);
        let bytes = 8usize.checked_mul(n_ctx).and_then(|b| {
            [hp.n_layer, hp.n_head_kv, hp.head_dim]
                .iter()
                .try_fold(b, |a, &v| a.checked_mul(v as usize))
        });
        if bytes.is_none_or(|b| b > isize::MAX as usize) {
            return Err(OptionsError::ContextTooLarge {
                n_ctx,
                bytes: 8u128
                    * n_ctx as u128
                    * hp.n_layer as u128
                    * hp.n_head_kv as u128
                    * hp.head_dim as u128,
                n_layer: hp.n_layer,
                n_head_kv: hp.n_head_kv,
                head_dim: hp.head_dim,
            });
        }
        let kv = self.kv.validate(hp)?;
        self.sampling.validate().map_err(|e| match e {
            EngineError::InvalidArgument(m) => OptionsError::Sampling(m),
            e => OptionsError::Sampling(e.to_string()),
        })?;
        Ok(ValidSessionOptions {
            n_ctx,
            kv,
            sampling: self.sampling.clone(),
            numerics: self.numerics,
        })
    }
}

/// Options of [`Model::score_with`](crate::Model::score_with).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreOptions {
    /// Tokens per forward call (0 = 512, llama.cpp's default micro-batch).
    pub batch: usize,
    /// Most tokens one call may score (0 = the model's training context).
    pub max_tokens: usize,
    /// Block sizes of the fused scorer.
    pub cce: CceOptions,
    /// The KV-cache format of the scoring cache (`--kv`, `--minicache`; default f32, the
    /// reference numerics of the goldens: the front ends pass the user's format, q8 by default).
    pub kv: KvSpec,
}

impl Default for ScoreOptions {
    fn default() -> Self {
        ScoreOptions {
            batch: 0,
            max_tokens: 0,
            cce: CceOptions::default(),
            kv: KvSpec::f32(),
        }
    }
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
