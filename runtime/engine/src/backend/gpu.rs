//! The GPU engine backend (`tern-gpu`): weights uploaded as stored, a `GpuSession` per session,
//! scoring through the fused Cut-Cross-Entropy kernel. `Model::score` reuses one cached scoring
//! session instead of building a new one per call.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, TryLockError};

use tern_format::TernFile;
use tern_gpu::{GpuError, GpuModel, GpuSession};
use tern_reference::{ForwardOptions, KvCache};

use super::{check_finite, Logits, ModelBackend, SessionBackend, StepOut, Stop};
use crate::capabilities::{Capabilities, Verb};
use crate::error::{EngineError, Result};
use crate::options::LoadOptions;
use crate::options::{KvSpec, Numerics, ScoreObserver, ScoreOptions};
use crate::report::HostTransfers;
use crate::report::{
    ActivationPlanReport, ActivationRow, ActivationSparsity, BackendKind, KernelTime, MemoryReport,
    ModelReport, SessionReport, TensorReport,
};
use crate::sampler::Candidates;

/// A verb the GPU backend does not have (not in [`Capabilities::gpu`]; the seam test checks
/// that the two agree).
fn lacks<T>(verb: Verb) -> Result<T> {
    Err(EngineError::unsupported(verb, BackendKind::Gpu))
}

/// This GPU backend's verbs ([`Verb::Profile`] needs the adapter's `TIMESTAMP_QUERY`).
fn capabilities_of(model: &GpuModel) -> Capabilities {
    Capabilities::gpu(model.context().info.timestamp_query)
}

/// Tokens per GPU batch (prefill chunk) of a session.
const GPU_BATCH: u64 = 512;

/// The session `Model::score` runs in, and the batch it was made for.
struct Scorer {
    session: GpuSession,
    batch: usize,
    kv: KvSpec,
}

pub(crate) struct GpuBackend {
    model: Arc<GpuModel>,
    /// Kept between `Model::score` calls (perplexity scores window after window); grown when a
    /// longer text comes. A concurrent call that finds it busy uses a fresh session.
    scorer: Mutex<Option<Scorer>>,
}

impl GpuBackend {
    pub(crate) fn load(file: &TernFile, opts: &LoadOptions, allow_software: bool) -> Result<Self> {
        let ctx = tern_gpu::GpuContext::with_options(context_options(allow_software))?;
        let model = GpuModel::load(Arc::new(ctx), file, model_options(opts))?;
        Ok(Self {
            model: Arc::new(model),
            scorer: Mutex::new(None),
        })
    }
}

/// The GPU context a load (and the planner, `crate::plan`) asks for.
pub(crate) fn context_options(allow_software: bool) -> tern_gpu::GpuOptions {
    tern_gpu::GpuOptions {
        preference: tern_gpu::DevicePreference::Gpu,
        allow_software,
        binding_limit: None,
        packed_dot: None,
        coop_matrix: None,
    }
}

/// The GPU model options a load (and the planner) passes for `opts`.
pub(crate) fn model_options(opts: &LoadOptions) -> tern_gpu::GpuModelOptions {
    tern_gpu::GpuModelOptions {
        max_memory: opts.max_memory,
        kv: tern_format::KvSpec::default(),
        tuning: opts.gpu,
    }
}

impl ModelBackend for GpuBackend {
    fn device_name(&self) -> String {
        let i = &self.model.context().info;
        // wgpu's `DeviceType::Cpu`: lavapipe, WARP, SwiftShader (`tern bench` warns on it).
        let soft = if i.device_type == "cpu" {
            ", software adapter"
        } else {
            ""
        };
        format!("gpu ({}, {}{soft})", i.name, i.backend)
    }

    fn prefill_path(&self) -> Option<&'static str> {
        Some(self.model.context().prefill_path())
    }

    fn new_session(&self, n_ctx: usize, kv: &KvSpec) -> Result<Box<dyn SessionBackend + '_>> {
        Ok(Box::new(GpuState {
            session: GpuSession::new(Arc::clone(&self.model), n_ctx as u64, GPU_BATCH, kv)?,
            max_memory: self.model.context().budget(),
            tokens: Vec::new(),
            xfer: HostTransfers::default(),
            caps: capabilities_of(&self.model),
        }))
    }

    fn capabilities(&self) -> Capabilities {
        capabilities_of(&self.model)
    }

    fn score(
        &self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        let n_in = tokens.len().saturating_sub(1);
        let batch = if opts.batch == 0 { 512 } else { opts.batch };
        let fresh = |n_ctx: usize| -> Result<Scorer> {
            Ok(Scorer {
                session: GpuSession::new(
                    Arc::clone(&self.model),
                    n_ctx as u64,
                    batch.min(n_ctx) as u64,
                    &opts.kv,
                )?,
                batch,
                kv: opts.kv,
            })
        };
        let mut guard = match self.scorer.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                *g = None;
                g
            }
            Err(TryLockError::WouldBlock) => {
                // Another thread is scoring: do not wait for it.
                let mut s = fresh(n_in)?;
                return gpu_score(&mut s.session, tokens, obs);
            }
        };
        let fits = guard.as_ref().is_some_and(|s| {
            s.batch == batch && s.kv == opts.kv && s.session.n_ctx() as usize >= n_in
        });
        if !fits {
            let grown = guard
                .as_ref()
                .filter(|s| s.batch == batch && s.kv == opts.kv)
                .map_or(n_in, |s| (s.session.n_ctx() as usize).max(n_in));
            // Free the old session's buffers before the new one is made.
            *guard = None;
            *guard = Some(fresh(grown)?);
        }
        match guard.as_mut() {
            Some(s) => gpu_score(&mut s.session, tokens, obs),
            None => Err(GpuError::Internal {
                op: "score",
                detail: "no scoring session".into(),
            }
            .into()),
        }
    }

    fn report(&self) -> ModelReport {
        let plan = self.model.memory_plan();
        let stats = self.model.context().memory_stats();
        let memory = MemoryReport {
            budget: plan.budget,
            weight_bytes: plan.weight_bytes(),
            by_encoding: plan.by_encoding(),
            tensors: plan
                .tensors
                .iter()
                .map(|t| TensorReport {
                    name: t.name.clone(),
                    encoding: t.encoding.clone(),
                    placement: t.placement.to_string(),
                    bytes: t.gpu_bytes,
                })
                .collect(),
            jit_scratch_bytes: plan.jit_scratch_bytes,
            gpu_allocated_peak: Some(stats.peak),
            gpu_allocated_now: Some(stats.live),
            gpu_allocation_measured: Some(stats.measured),
            gpu_min_budget: Some(plan.min_budget),
            host_resident_bytes: None,
        };
        let rows = self
            .model
            .activation_plan()
            .rows()
            .into_iter()
            .map(|(layers, linear, weights, input, producer)| ActivationRow {
                layers,
                linear: linear.into(),
                weights: weights.into(),
                input: input.into(),
                producer: producer.into(),
            })
            .collect();
        ModelReport {
            device: self.device_name(),
            backend: BackendKind::Gpu,
            memory,
            activation_plan: ActivationPlanReport { rows },
        }
    }

    fn score_in_cache(
        &self,
        _cache: &mut KvCache,
        _tokens: &[u32],
        _opts: &ScoreOptions,
        _obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        lacks(Verb::ScoreInCache)
    }

    fn set_forward_options(&mut self, _o: ForwardOptions) -> Result<()> {
        lacks(Verb::ForwardOptions)
    }

    fn device_lost(&self) -> bool {
        self.model.context().is_lost()
    }

    fn simulate_device_loss(&self) -> Result<()> {
        self.model.context().simulate_device_loss();
        Ok(())
    }
}

/// Score on the GPU (one call: the forward pass and the fused head run batch after batch;
/// `obs.cancelled()` is asked between GPU submissions).
fn gpu_score(gs: &mut GpuSession, tokens: &[u32], obs: &mut dyn ScoreObserver) -> Result<Vec<f32>> {
    let n_in = tokens.len().saturating_sub(1);
    if obs.cancelled() {
        return Err(EngineError::Cancelled);
    }
    obs.scoring_started();
    let lp = {
        let cell = RefCell::new(&mut *obs);
        let stop = || cell.try_borrow_mut().is_ok_and(|mut o| o.cancelled());
        gs.score_with(tokens, &stop)
    };
    obs.scoring_finished();
    let lp = lp?.ok_or(EngineError::Cancelled)?;
    check_finite(&lp, 0)?;
    obs.kv_cache(gs.kv_bytes_in_use()?, gs.len() as usize);
    obs.progress(n_in, n_in);
    Ok(lp)
}

struct GpuState {
    session: GpuSession,
    /// The tokens in the cache (a KIVI cache truncated inside a quantized block re-runs some
    /// of them: `restore`).
    tokens: Vec<u32>,
    /// Readback counters.
    xfer: HostTransfers,
    /// The context's memory budget (reported).
    max_memory: Option<u64>,
    /// The model's verbs.
    caps: Capabilities,
}

impl GpuState {
    /// Make the cache hold exactly `tokens[..n]`: truncate it, and re-run what a KIVI cache could
    /// not keep (the tokens between the start of a quantized block and `n`). On a failure of
    /// that re-run the cache keeps what it could.
    fn restore(&mut self, n: usize) {
        let n = n.min(self.tokens.len());
        let kept = self.session.truncate(n as u64) as usize;
        if kept < n {
            let redo = self.tokens.get(kept..n).unwrap_or_default().to_vec();
            log::debug!(
                "KV cache: re-running {} tokens after truncating into a quantized block",
                redo.len()
            );
            if let Err(e) = self.session.eval(&redo) {
                log::warn!(
                    "KV cache: re-running {} tokens failed ({e}); the cache holds {}",
                    redo.len(),
                    self.session.len()
                );
            }
        }
        self.tokens.truncate(self.session.len() as usize);
    }
}

impl SessionBackend for GpuState {
    fn kv_state(&mut self) -> Result<Vec<std::borrow::Cow<'_, [u8]>>> {
        // Not counted in the readback counters: they measure the decode steps.
        let sections = self.session.kv_state()?;
        Ok(sections.into_iter().map(std::borrow::Cow::Owned).collect())
    }

    fn restore_kv_state(&mut self, tokens: &[u32], sections: &[&[u8]]) -> Result<()> {
        self.tokens.clear();
        self.session.truncate(0);
        self.session
            .restore_kv_state(tokens.len() as u64, sections)?;
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    fn eval(&mut self, tokens: &[u32], logits: Logits, stop: Stop<'_>) -> Result<Vec<f32>> {
        // `GpuSession` puts its length back on a stop or an error (to a KIVI block's start when
        // that block was quantized meanwhile: then the dropped tokens are re-run here).
        let p0 = self.session.len() as usize;
        self.tokens.truncate(p0);
        self.tokens.extend_from_slice(tokens);
        let out = match logits {
            Logits::Last => self.session.eval_with(tokens, stop),
            Logits::All => self.session.eval_all_with(tokens, stop),
        };
        match out {
            Ok(Some(l)) => {
                self.xfer.steps += 1;
                self.xfer.round_trips += 1;
                self.xfer.readback_bytes += l.len() as u64 * 4;
                Ok(l)
            }
            Ok(None) => {
                self.restore(p0);
                Err(EngineError::Cancelled)
            }
            Err(e) => {
                self.restore(p0);
                Err(e.into())
            }
        }
    }

    fn eval_sample(
        &mut self,
        token: u32,
        penalized: &[u32],
        temperature: f32,
        stop: Stop<'_>,
    ) -> Result<Option<StepOut>> {
        if penalized.len() > tern_gpu::kernels::SAMPLE_HIST_MAX {
            return Ok(None);
        }
        if stop() {
            return Err(EngineError::Cancelled);
        }
        let p0 = self.session.len() as usize;
        self.tokens.truncate(p0);
        self.tokens.push(token);
        let out = if penalized.is_empty() && temperature == 0.0 {
            self.session
                .step_argmax(token)
                .map(|t| (StepOut::Token(t), 4))
        } else {
            self.session
                .step_sample(token, penalized, temperature)
                .map(|c| {
                    let n_vocab = self.session.n_vocab() as usize;
                    let c = Candidates {
                        top: c.top,
                        k: tern_gpu::kernels::SAMPLE_K as usize,
                        max: c.max,
                        sum: c.sum,
                        hist: c.hist,
                        n_vocab,
                    };
                    let bytes = tern_gpu::kernels::SampleCandidates::READBACK_BYTES;
                    (StepOut::Candidates(c), bytes)
                })
        };
        match out {
            Ok((o, bytes)) => {
                self.xfer.steps += 1;
                self.xfer.round_trips += 1;
                self.xfer.readback_bytes += bytes;
                Ok(Some(o))
            }
            Err(e) => {
                self.restore(p0);
                Err(e.into())
            }
        }
    }

    fn last_logits(&mut self) -> Result<Vec<f32>> {
        let l = self.session.last_logits()?;
        self.xfer.round_trips += 1;
        self.xfer.full_rows += 1;
        self.xfer.readback_bytes += l.len() as u64 * 4;
        Ok(l)
    }

    fn host_transfers(&self) -> Result<HostTransfers> {
        Ok(self.xfer)
    }

    fn reset_host_transfers(&mut self) -> Result<()> {
        self.xfer = HostTransfers::default();
        Ok(())
    }

    fn truncate(&mut self, n: usize) {
        self.restore(n);
    }

    fn len(&self) -> usize {
        self.session.len() as usize
    }

    fn n_ctx(&self) -> usize {
        self.session.n_ctx() as usize
    }

    fn score(
        &mut self,
        tokens: &[u32],
        _opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        self.tokens.clear();
        let r = gpu_score(&mut self.session, tokens, obs);
        let held = self.session.len() as usize;
        self.tokens
            .extend_from_slice(tokens.get(..held).unwrap_or_default());
        r
    }

    fn kv_bytes_per_token(&self) -> u64 {
        self.session.kv_bytes_per_token() as u64
    }

    fn report(&mut self) -> Result<SessionReport> {
        let m = self.session.memory();
        Ok(SessionReport {
            backend: BackendKind::Gpu,
            max_memory: self.max_memory,
            // What the cache holds (its spec as made: MiniCache `on` already resolved).
            kv: *self.session.kv_cache().spec(),
            numerics: Numerics::Model,
            n_ctx: self.session.n_ctx() as usize,
            kv_bytes: m.kv_bytes,
            kv_bytes_per_token: self.kv_bytes_per_token(),
            scratch_bytes: Some(m.scratch_bytes),
            dispatches_per_token: Some(self.session.dispatches_per_token()?),
        })
    }

    fn measure_activation_sparsity(&mut self, tokens: &[u32]) -> Result<Vec<ActivationSparsity>> {
        self.session.measure_activation_sparsity(true)?;
        let run = self
            .session
            .eval_all(tokens)
            .and_then(|_| self.session.activation_sparsity());
        self.session.measure_activation_sparsity(false)?;
        // The counters were on for this run, so they are there.
        let counts = run?.ok_or(GpuError::Internal {
            op: "measure_activation_sparsity",
            detail: "the counters were off".into(),
        })?;
        Ok(counts
            .into_iter()
            .filter(|c| c.total > 0)
            .map(|c| ActivationSparsity {
                linear: c.linear.name().to_string(),
                zero_fraction: c.fraction().unwrap_or(0.0),
                codes: c.total,
            })
            .collect())
    }

    fn profile_prefill(&mut self, tokens: &[u32]) -> Result<Vec<KernelTime>> {
        if !self.caps.has(Verb::Profile) {
            return lacks(Verb::Profile);
        }
        // As `eval`: `tokens` track what the cache holds (a later truncate keeps them).
        let p0 = self.session.len() as usize;
        self.tokens.truncate(p0);
        let p = self.session.profile_step(tokens);
        let held = (self.session.len() as usize).saturating_sub(p0);
        self.tokens
            .extend_from_slice(tokens.get(..held).unwrap_or_default());
        let p = p?;
        Ok(p.into_iter()
            .map(|(kernel, dispatches, micros)| KernelTime {
                kernel,
                dispatches,
                micros,
            })
            .collect())
    }

    fn profile_decode_step(&mut self, token: u32) -> Result<Vec<KernelTime>> {
        // `profile_step` of one token is `profile_decode_step`.
        self.profile_prefill(&[token])
    }

    fn set_llama_cpp_numerics(&mut self, on: bool) -> Result<()> {
        if on {
            return lacks(Verb::LlamaCppNumerics);
        }
        // Off: the model's own numerics, which a GPU session always runs.
        Ok(())
    }
}
