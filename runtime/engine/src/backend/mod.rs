//! The backend seam: one pair of traits that the CPU reference (`cpu.rs`) and the GPU engine
//! (`gpu.rs`) both implement with the same verbs, so that [`crate::Model`] and
//! [`crate::Session`] never match on the backend.
//!
//! * [`ModelBackend`]: the loaded weights. Makes sessions, scores a text with a fresh cache
//!   ([`crate::Model::score`]), reports memory and the activation plan.
//! * [`SessionBackend`]: one KV cache. Evaluates tokens (last or all logits), truncates, scores
//!   with the fused Cut-Cross-Entropy scorer (no logit matrix), reports its memory.
//!
//! A verb only some backends have is named by a [`crate::Verb`]; each backend says which it has
//! ([`ModelBackend::capabilities`]) and writes the others out as
//! [`crate::EngineError::Unsupported`] (the traits have no default bodies). The engine's own
//! fallbacks (e.g. sampling from the full logits where there is no device sampling) ask the
//! capabilities, not a `None`.
//!
//! The checks every backend shares (empty input, token ids, room in the context) are done by the
//! callers in `session.rs` / `score.rs` before a backend is called.

use tern_format::TernFile;
use tern_reference::{ForwardOptions, KvCache};

use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::options::{Device, LoadOptions};
use crate::options::{KvSpec, ScoreObserver, ScoreOptions};
use crate::report::{HostTransfers, KernelTime, ModelReport, SessionReport};
use crate::sampler::Candidates;

pub(crate) mod cpu;
pub(crate) mod gpu;

/// Which logits [`SessionBackend::eval`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Logits {
    /// The last token's row, `[n_vocab]`.
    Last,
    /// Every token's row, `[tokens, n_vocab]`.
    All,
}

/// What [`SessionBackend::eval_sample`] returns instead of logits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StepOut {
    /// The greedy token (argmax taken on the device).
    Token(u32),
    /// The sampling candidates of the last token's logits.
    Candidates(Candidates),
}

/// A cancellation check: `true` means stop. Backends call it between units of work — on the CPU
/// before every layer of a batch, on the GPU between submissions — and then return
/// [`crate::EngineError::Cancelled`].
pub(crate) type Stop<'a> = &'a dyn Fn() -> bool;

/// A model loaded for one backend.
///
/// No method has a default body: a verb a backend lacks (see [`Capabilities`]) is written out
/// in that backend as an [`crate::EngineError::Unsupported`], never a silent default.
pub(crate) trait ModelBackend: Send + Sync {
    /// "cpu", or "gpu (adapter name, backend)".
    fn device_name(&self) -> String;
    /// The GPU's prefill path so far (`coop-matrix` once a GEMM ran on cooperative matrices, else
    /// `classic`); `None` on the CPU.
    fn prefill_path(&self) -> Option<&'static str> {
        None
    }
    /// The verbs this backend has (the others answer [`crate::EngineError::Unsupported`]).
    fn capabilities(&self) -> Capabilities;
    /// A session with a KV cache of `n_ctx` positions (`n_ctx > 0`) in the format `kv`.
    fn new_session(&self, n_ctx: usize, kv: &KvSpec) -> Result<Box<dyn SessionBackend + '_>>;
    /// `log p(tokens[i+1] | tokens[..=i])` from an empty cache (`tokens.len() ≥ 2`, ids checked).
    fn score(
        &self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>>;
    /// [`ModelBackend::score`] in a caller's CPU cache (cleared first; `tokens.len() − 1` fits
    /// it, checked by the caller) ([`crate::Verb::ScoreInCache`]).
    fn score_in_cache(
        &self,
        cache: &mut KvCache,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>>;
    fn report(&self) -> ModelReport;
    /// The CPU forward pass's numerical options ([`crate::Verb::ForwardOptions`]).
    fn set_forward_options(&mut self, o: ForwardOptions) -> Result<()>;
    /// The device this model runs on was lost (`false` on the CPU, which has none).
    fn device_lost(&self) -> bool;
    /// Destroy the GPU device (tests of device loss) ([`crate::Verb::SimulateDeviceLoss`]).
    fn simulate_device_loss(&self) -> Result<()>;
}

/// One KV cache on a backend. As for [`ModelBackend`], no method has a default body.
pub(crate) trait SessionBackend: Send {
    /// Run `tokens` after what the cache holds (non-empty, ids checked, room checked); `stop`
    /// cancels it ([`crate::EngineError::Cancelled`]). On any error `len()` is what it was.
    fn eval(&mut self, tokens: &[u32], logits: Logits, stop: Stop<'_>) -> Result<Vec<f32>>;
    /// Run one token as [`SessionBackend::eval`] does and return, instead of its logits, the
    /// argmax (when `penalized` is empty and `temperature` is 0) or the sampling candidates
    /// (the logits of the distinct ids `penalized` set aside raw, the top-k and log-sum-exp at
    /// `temperature` of the rest) ([`crate::Verb::DeviceSampling`]). `Ok(None)`: this call is beyond
    /// the device path (more penalized ids than it holds) and nothing ran; the caller runs
    /// [`SessionBackend::eval`] instead.
    fn eval_sample(
        &mut self,
        token: u32,
        penalized: &[u32],
        temperature: f32,
        stop: Stop<'_>,
    ) -> Result<Option<StepOut>>;
    /// After [`SessionBackend::eval_sample`]: the last token's full row of logits (the
    /// penalized ids' entries as the backend left them; the caller puts the raw values back)
    /// ([`crate::Verb::DeviceSampling`]).
    fn last_logits(&mut self) -> Result<Vec<f32>>;
    /// Readback counters ([`crate::Verb::HostTransfers`]).
    fn host_transfers(&self) -> Result<HostTransfers>;
    /// Zero the readback counters ([`crate::Verb::HostTransfers`]).
    fn reset_host_transfers(&mut self) -> Result<()>;
    /// Keep only the first `n` positions (a compressed cache that cannot keep exactly `n` —
    /// KIVI inside a quantized block — re-runs the tokens it dropped; `len()` says what is held).
    fn truncate(&mut self, n: usize);
    /// Positions filled.
    fn len(&self) -> usize;
    /// Positions the cache holds.
    fn n_ctx(&self) -> usize;
    /// `log p(tokens[i+1] | tokens[..=i])` through the fused scorer, from an empty cache; the
    /// cache holds `tokens[..n-1]` afterwards (a prefix of them after an error). `tokens.len() − 1`
    /// fits the cache (checked by the caller). `obs.cancelled()` is the stop check (as often as
    /// [`SessionBackend::eval`]'s).
    fn score(
        &mut self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>>;
    /// KV-cache bytes one position takes over all layers (keys and values).
    fn kv_bytes_per_token(&self) -> u64;
    fn report(&mut self) -> Result<SessionReport>;
    /// Per-kernel timings of one decode step of `token` (which enters the cache)
    /// ([`crate::Verb::Profile`]; without it nothing runs).
    fn profile_decode_step(&mut self, token: u32) -> Result<Vec<KernelTime>>;
    /// [`SessionBackend::profile_decode_step`] for a batch of `tokens` (a prefill, last logits).
    fn profile_prefill(&mut self, tokens: &[u32]) -> Result<Vec<KernelTime>>;
    /// Switch this session to llama.cpp's CPU numerics ([`ForwardOptions::llama_cpp_like`],
    /// keeping the model's threading) or back to the model's own
    /// ([`crate::Verb::LlamaCppNumerics`] for `on`; `off` is accepted everywhere).
    fn set_llama_cpp_numerics(&mut self, on: bool) -> Result<()>;
    /// Run `tokens` (which enter the cache) counting the zero codes of every quantized linear
    /// input ([`crate::Verb::ActivationSparsity`]; without it nothing runs).
    fn measure_activation_sparsity(
        &mut self,
        tokens: &[u32],
    ) -> Result<Vec<crate::report::ActivationSparsity>>;
    /// The KV cache's contents as byte sections: the backend's own storage, exact (CPU:
    /// `tern_reference::KvCache::state_sections`; GPU: every KV buffer read back,
    /// `GpuSession::kv_state`). Every backend has it (`Session::save_state`).
    fn kv_state(&mut self) -> Result<Vec<std::borrow::Cow<'_, [u8]>>>;
    /// Make the cache hold `tokens`, whose KV entries `sections` hold (from
    /// [`SessionBackend::kv_state`] of a session of the same model, KV spec and context on
    /// this backend). Checked first: on an error the session is empty.
    fn restore_kv_state(&mut self, tokens: &[u32], sections: &[&[u8]]) -> Result<()>;
}

/// Load `file` for the backend `opts.device` asks for.
pub(crate) fn load(file: &TernFile, opts: &LoadOptions) -> Result<Box<dyn ModelBackend>> {
    Ok(match opts.device {
        Device::Cpu => Box::new(cpu::CpuModel::load(file, opts.max_memory)?),
        Device::Gpu => Box::new(gpu::GpuBackend::load(file, opts, true)?),
        Device::Auto => match gpu::GpuBackend::load(file, opts, opts.auto_software_gpu) {
            Ok(m) => Box::new(m),
            Err(e) => {
                log::info!("GPU not used ({e}); running on the CPU");
                Box::new(cpu::CpuModel::load(file, opts.max_memory)?)
            }
        },
    })
}

/// Check that no log-probability is NaN or infinite (`offset`: the position of `lp[0]`).
pub(crate) fn check_finite(lp: &[f32], offset: usize) -> Result<()> {
    match lp.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(crate::EngineError::Numeric(format!(
            "non-finite log-probability at position {}",
            offset + i
        ))),
        None => Ok(()),
    }
}
