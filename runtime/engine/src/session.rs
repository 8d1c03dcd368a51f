//! Models and sessions: open a `.tern` file, prefill, decode, generate with streaming and stops.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tern_format::{ModelMeta, TernFile};
use tern_reference::ForwardOptions;

use crate::backend::{Logits, ModelBackend, SessionBackend};
use crate::capabilities::{Capabilities, Verb};
use crate::error::{EngineError, Result};
pub use crate::options::{CpuThreads, Device, LoadOptions, LoadProgress, SessionOptions};
use crate::options::{
    KvSpec, NoObserver, Numerics, ScoreObserver, ScoreOptions, ValidSessionOptions,
};
use crate::report::{KernelTime, ModelReport, SessionReport};
use crate::sampler::{Sampler, SamplingParams};
use crate::tokenizer::{StreamDecoder, Tokenizer};

mod sampling;
mod state;
use sampling::Pending;
pub use state::{CHUNK as STATE_CHUNK, STATE_VERSION};

/// A loaded model: weights for the CPU reference or the GPU engine, tokenizer, metadata.
pub struct Model {
    meta: ModelMeta,
    backend: Box<dyn ModelBackend>,
    tokenizer: Option<Tokenizer>,
    /// The file the model was opened from, to open it again ([`Model::reopen_on`]) with `opts`
    /// (delta and activation override included); `None` when it was made from a caller's
    /// [`TernFile`].
    source: Option<PathBuf>,
    opts: LoadOptions,
    forward: Option<ForwardOptions>,
}

impl Model {
    /// Open and validate a `.tern` file and load its weights for the CPU reference.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, &LoadOptions::default())
    }

    /// Open a `.tern` file as `opts` says: the fine-tune delta `opts.delta` applied in memory
    /// (nothing is written to disk; a delta made against another base is refused before
    /// anything is used), the activation override `opts.activations`, loaded for the backend
    /// `opts.device` within `opts.max_memory`. The one way to open a model from a path: every
    /// model opened here can be opened again by [`Model::reopen_on`].
    pub fn open_with(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let mut file = match &opts.delta {
            Some(d) => tern_format::delta::open_with_delta(path, d)?,
            None => TernFile::open(path)?,
        };
        if let Some(acts) = opts.activations {
            file.override_activations(acts);
        }
        LoadProgress::report(&opts.progress, 0.05, "open");
        let mut m = Self::load(&file, opts)?;
        m.source = Some(path.to_path_buf());
        Ok(m)
    }

    /// Open the same file(s) again with the same [`LoadOptions`] (delta, activation override,
    /// memory budget, CPU threads) and CPU numerical options, for `device`: what to do after
    /// [`EngineError::DeviceLost`], with `Device::Cpu`. The old model and its sessions stay as
    /// they are (drop them); a new session fed the old one's [`Session::history`] continues
    /// where it stopped. An error for a model made by [`Model::from_file_with`] (open the file
    /// again instead).
    pub fn reopen_on(&self, device: Device) -> Result<Model> {
        let path = self.source.as_ref().ok_or_else(|| {
            EngineError::InvalidArgument(
                "this model was made from an open TernFile: load that file again instead".into(),
            )
        })?;
        let opts = LoadOptions {
            device,
            ..self.opts.clone()
        };
        let mut m = Self::open_with(path, &opts)?;
        if let Some(f) = self
            .forward
            .filter(|_| m.capabilities().has(Verb::ForwardOptions))
        {
            m.set_forward_options(f)?;
        }
        Ok(m)
    }

    /// The GPU device this model runs on was lost: every call on it and its sessions fails with
    /// [`EngineError::DeviceLost`]; [`Model::reopen_on`] makes a usable one. Never on the CPU.
    pub fn is_device_lost(&self) -> bool {
        self.backend.device_lost()
    }

    /// Destroy the GPU device under this model (`wgpu::Device::destroy`) to test how an app
    /// survives a device loss. Returns whether it did: `false` (and nothing is done) on a
    /// backend without a device, the CPU ([`Verb::SimulateDeviceLoss`] is not among its
    /// [`Model::capabilities`]) — a test hook, where "nothing to lose" is an answer, not an
    /// error. Safe to call from any thread, also during a generation on one of its sessions.
    #[doc(hidden)]
    pub fn simulate_device_loss(&self) -> bool {
        self.capabilities().has(Verb::SimulateDeviceLoss)
            && self.backend.simulate_device_loss().is_ok()
    }

    pub fn from_file(file: &TernFile) -> Result<Self> {
        Self::from_file_with(file, &LoadOptions::default())
    }

    /// Load an already open `file` as `opts` says. `opts.delta` and `opts.activations` belong to
    /// [`Model::open_with`] (apply them to the file: `tern_format::delta`,
    /// `TernFile::override_activations`): an error here.
    pub fn from_file_with(file: &TernFile, opts: &LoadOptions) -> Result<Self> {
        if opts.delta.is_some() || opts.activations.is_some() {
            return Err(EngineError::InvalidArgument(
                "LoadOptions.delta and .activations apply to a path: use Model::open_with".into(),
            ));
        }
        Self::load(file, opts)
    }

    fn load(file: &TernFile, opts: &LoadOptions) -> Result<Self> {
        let meta = file.meta().clone();
        if let CpuThreads::Count(n) = opts.cpu_threads {
            if n == 0 {
                return Err(EngineError::InvalidArgument(
                    "CpuThreads::Count(0): give at least one thread".into(),
                ));
            }
            // Before any CPU work of this model: the pool is sized on first use.
            if opts.device != Device::Gpu {
                tern_reference::threads::set_pool_threads(n)
                    .map_err(EngineError::InvalidArgument)?;
            }
        }
        let mut backend = crate::backend::load(file, opts)?;
        LoadProgress::report(&opts.progress, 0.95, "weights");
        // The CPU's threading is a forward option: only a backend with them takes it (the GPU
        // ignores `cpu_threads`, as documented on the field).
        if opts.cpu_threads == CpuThreads::Caller
            && backend.capabilities().has(Verb::ForwardOptions)
        {
            let mut f = ForwardOptions::default();
            f.matmul.parallel = false;
            backend.set_forward_options(f)?;
        }
        let tokenizer = match &meta.tokenizer {
            Some(spec) => Some(
                Tokenizer::from_spec(spec).map_err(|e| EngineError::Tokenizer(e.to_string()))?,
            ),
            None => None,
        };
        LoadProgress::report(&opts.progress, 0.99, "tokenizer");
        LoadProgress::report(&opts.progress, 1.0, "done");
        Ok(Self {
            meta,
            backend,
            tokenizer,
            source: None,
            opts: opts.clone(),
            forward: None,
        })
    }

    /// The options the model was loaded with.
    pub fn load_options(&self) -> &LoadOptions {
        &self.opts
    }

    /// "cpu", or "gpu (adapter name, backend)".
    pub fn device_name(&self) -> String {
        self.backend.device_name()
    }

    /// The GPU's prefill path so far: `coop-matrix` once a ternary GEMM ran on cooperative
    /// matrices (tensor cores), else `classic`; `None` on the CPU. `tern bench` reports it.
    pub fn prefill_path(&self) -> Option<&'static str> {
        self.backend.prefill_path()
    }

    /// The verbs this model's backend has: a verb it lacks returns
    /// [`EngineError::Unsupported`] and runs nothing (see [`Verb`]).
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// What the model holds: device, weight memory by part, the activation plan.
    pub fn report(&self) -> ModelReport {
        self.backend.report()
    }

    pub(crate) fn backend(&self) -> &dyn ModelBackend {
        &*self.backend
    }

    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }

    /// Numerical options of the CPU forward pass (e.g. llama.cpp-like activation quantization)
    /// for the sessions made after it ([`Verb::ForwardOptions`]: [`EngineError::Unsupported`]
    /// on the GPU, whose kernels have their own numerics).
    pub fn set_forward_options(&mut self, o: ForwardOptions) -> Result<()> {
        self.backend.set_forward_options(o)?;
        self.forward = Some(o);
        Ok(())
    }

    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or(EngineError::NoTokenizer)
    }

    /// Tokenize `text` (adding BOS/EOS as the model's tokenizer says; `special`: parse special
    /// tokens like `<|im_start|>` in the text).
    pub fn tokenize(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        self.tokenizer()?
            .encode(text, special)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))
    }

    pub fn n_vocab(&self) -> usize {
        self.meta.hparams.n_vocab as usize
    }

    /// Check token ids against the vocabulary.
    pub fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.n_vocab()) {
            return Err(EngineError::InvalidArgument(format!(
                "token id {bad} is outside the vocabulary (0..{})",
                self.n_vocab()
            )));
        }
        Ok(())
    }
}

/// Why a generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` generated.
    MaxTokens,
    /// An end-of-generation token (EOS, EOT, or a requested stop token).
    Token,
    /// A stop string appeared in the text.
    StopString,
    /// The context is full.
    Context,
    /// The piece callback asked to stop.
    Callback,
}

/// Options of [`Session::generate`].
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    /// Extra token ids that end generation (the model's end-of-generation tokens always do).
    pub stop_tokens: Vec<u32>,
    /// Strings that end generation; the text is cut before the stop string.
    pub stop_strings: Vec<String>,
}

/// What [`Session::generate`] produced.
#[derive(Debug, Clone)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    pub prompt_tokens: usize,
    /// Seconds spent in prefill and in decoding.
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

/// One conversation: a KV cache on the model's backend and the tokens in it.
pub struct Session<'m> {
    model: &'m Model,
    state: Box<dyn SessionBackend + 'm>,
    history: Vec<u32>,
    cancel: Arc<AtomicBool>,
    /// Tokens the last `generate` sampled (and streamed) but could not run because it failed.
    unevaluated: Vec<u32>,
    /// Sample on the device when the backend can ([`Session::set_device_sampling`]).
    device_sampling: bool,
    /// The options it was made with, validated.
    opts: ValidSessionOptions,
}

impl<'m> Session<'m> {
    /// The largest context [`Session::new`] picks on its own when given `n_ctx = 0`.
    pub const DEFAULT_MAX_CTX: usize = SessionOptions::DEFAULT_MAX_CTX;

    /// A session with room for `n_ctx` tokens, the reference f32 KV cache and the other options
    /// at their defaults — the numerics the parity tests and goldens compare. The default KV
    /// format of the front ends (q8, `KvQuant::default()`) is `SessionOptions::default()`'s:
    /// [`Session::with_options`].
    pub fn new(model: &'m Model, n_ctx: usize) -> Result<Self> {
        Self::with_options(
            model,
            &SessionOptions {
                n_ctx,
                kv: crate::options::KvOptions {
                    format: crate::options::KvQuant::F32,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
    }

    /// [`Session::with_options`] with the context `n_ctx` and the KV cache `kv` (any
    /// [`KvSpec`]: it is checked as [`SessionOptions::validate`] checks every session).
    pub fn with_kv(model: &'m Model, n_ctx: usize, kv: &KvSpec) -> Result<Self> {
        Self::with_options(
            model,
            &SessionOptions {
                n_ctx,
                kv: (*kv).into(),
                ..Default::default()
            },
        )
    }

    /// A session made as `opts` says, checked once by [`SessionOptions::validate`].
    ///
    /// `opts.n_ctx = 0` means the model's training context `n_ctx_train`, capped at
    /// [`Session::DEFAULT_MAX_CTX`] (4096) tokens: the training context is a number from the file
    /// (131072 for Llama 3, and a hostile file may say 4294967295), and the KV cache is allocated
    /// in full up front, so the default stays at a size every machine this runs on can hold (for
    /// SmolLM2-135M, 4096 positions are 360 MB of f32 KV cache). Ask for more explicitly.
    ///
    /// The KV cache size is computed with checked arithmetic and the cache is allocated
    /// fallibly: a size that overflows or that the system refuses is a typed error naming the
    /// bytes, never an abort. The KV format (`tern_format::kv`: f16, q8, KIVI q4/q3/q2, absmax
    /// a4/a3, MiniCache; see `tern_reference::kv`): when the context is full a prompt that does
    /// not fit is refused with [`EngineError::PromptTooLong`] before anything runs (no context
    /// shift); the session is unchanged. `Numerics::LlamaCpp` is a CPU mode
    /// (`InvalidArgument` on the GPU).
    pub fn with_options(model: &'m Model, opts: &SessionOptions) -> Result<Self> {
        let opts = opts.validate(&model.meta.hparams)?;
        if opts.numerics() == Numerics::LlamaCpp
            && !model.capabilities().has(Verb::LlamaCppNumerics)
        {
            // An option this model's backend cannot honour is the caller's argument, named
            // before anything is allocated.
            return Err(EngineError::InvalidArgument(
                "llama.cpp numerics are a CPU mode (llama.cpp's CPU kernels): load the model \
                 on the CPU to use them"
                    .into(),
            ));
        }
        // The cache's exact bytes against the machine's available memory, before the backend
        // reserves or touches a page (a CPU cache lives in host memory; a GPU's buffers are
        // checked against its budget by the GPU engine).
        if model.capabilities().backend() == crate::BackendKind::Cpu {
            let n = opts.n_ctx() as u64;
            let bytes = opts.kv().bytes_held(&model.meta.hparams, n, 0);
            if let Err(available) = tern_format::sysmem::check_fits(bytes) {
                return Err(EngineError::OutOfMemory {
                    what: format!("a {} KV cache of {n} positions", opts.kv().quant.name()),
                    bytes,
                    available,
                });
            }
        }
        let mut state = model.backend.new_session(opts.n_ctx(), opts.kv())?;
        if opts.numerics() == Numerics::LlamaCpp {
            state.set_llama_cpp_numerics(true)?;
        }
        Ok(Self {
            model,
            state,
            history: Vec::new(),
            cancel: Arc::new(AtomicBool::new(false)),
            unevaluated: Vec::new(),
            device_sampling: true,
            opts,
        })
    }

    /// The options this session was made with, validated (context resolved, KV spec checked).
    pub fn options(&self) -> &ValidSessionOptions {
        &self.opts
    }

    /// The session's default sampling ([`SessionOptions::sampling`]).
    pub fn sampling(&self) -> &SamplingParams {
        self.opts.sampling()
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Tokens currently in the KV cache.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    pub fn n_ctx(&self) -> usize {
        self.state.n_ctx()
    }

    /// KV-cache bytes one position takes over all layers (keys and values); the same on every
    /// backend for the same model.
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.state.kv_bytes_per_token()
    }

    /// What the session holds: KV-cache bytes, activation scratch and dispatches per decoded
    /// token (GPU). On the GPU this records the decode plan if it is not recorded yet.
    pub fn report(&mut self) -> Result<SessionReport> {
        self.state.report()
    }

    /// Run one decode step of `token` (after what the cache holds; it enters the cache) with a
    /// GPU timestamp around every dispatch, and return per kernel (dispatches, total µs), largest
    /// first ([`Verb::Profile`]: the GPU with the adapter's `TIMESTAMP_QUERY`; elsewhere
    /// [`EngineError::Unsupported`] and nothing runs).
    pub fn profile_decode_step(&mut self, token: u32) -> Result<Vec<KernelTime>> {
        self.check_room(&[token])?;
        let p = self.state.profile_decode_step(token);
        self.sync_history_len(&[token]);
        p
    }

    /// [`Session::profile_decode_step`] for a batch of `tokens` run as one prefill (they enter
    /// the cache): per kernel, dispatches and µs summed over the whole batch.
    pub fn profile_prefill(&mut self, tokens: &[u32]) -> Result<Vec<KernelTime>> {
        self.check_room(tokens)?;
        let p = self.state.profile_prefill(tokens);
        self.sync_history_len(tokens);
        p
    }

    /// Run `tokens` after what the cache holds (they enter it) while counting, per linear kind,
    /// the zero codes of every quantized input (BitNet: TopK and ReLU² sparsity). A measurement
    /// pass of its own (the counters cost a dispatch per input; timed runs never carry them).
    /// [`Verb::ActivationSparsity`]: the GPU; elsewhere [`EngineError::Unsupported`] and nothing
    /// runs.
    pub fn measure_activation_sparsity(
        &mut self,
        tokens: &[u32],
    ) -> Result<Vec<crate::ActivationSparsity>> {
        self.check_room(tokens)?;
        let r = self.state.measure_activation_sparsity(tokens);
        self.sync_history_len(tokens);
        r
    }

    /// Run this session with llama.cpp's CPU numerics ([`ForwardOptions::llama_cpp_like`]: its
    /// greedy output token for token) or, with `false`, with the model's own. The cache is
    /// cleared (its entries were computed with the other numerics). `true` is a CPU verb
    /// ([`Verb::LlamaCppNumerics`]): [`EngineError::Unsupported`] on the GPU, which has no such
    /// mode.
    pub fn set_llama_cpp_numerics(&mut self, on: bool) -> Result<()> {
        self.state.set_llama_cpp_numerics(on)?;
        self.opts.set_numerics(if on {
            Numerics::LlamaCpp
        } else {
            Numerics::Model
        });
        self.reset();
        Ok(())
    }

    /// Forget everything.
    pub fn reset(&mut self) {
        self.state.truncate(0);
        self.history.clear();
    }

    /// Keep only the first `n` tokens of the cache.
    pub fn truncate(&mut self, n: usize) {
        let n = n.min(self.history.len());
        self.state.truncate(n);
        self.history.truncate(n.min(self.state.len()));
    }

    /// A flag that, once set (from any thread), makes a running `generate`, `eval`, `eval_all`,
    /// `sync_prefix` or `score` return [`EngineError::Cancelled`] promptly: it is checked between
    /// decoded tokens, and inside a prompt or a scored batch before every layer on the CPU and
    /// between GPU submissions (a prefill is submitted a few layers at a time). They clear it
    /// when they start, and a cancelled call leaves the session where it was before the call.
    pub fn cancel_handle(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    fn check_room(&self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(EngineError::InvalidArgument(
                "empty prompt: give at least one token".into(),
            ));
        }
        self.model.check_tokens(tokens)?;
        if self.history.len() + tokens.len() > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: self.history.len() + tokens.len(),
                ctx: self.n_ctx(),
            });
        }
        Ok(())
    }

    /// After a backend call that may have failed half way: keep `history` equal to what the
    /// cache holds (`extra` are the tokens that call was running).
    fn sync_history_len(&mut self, extra: &[u32]) {
        let len = self.state.len();
        if len < self.history.len() {
            self.history.truncate(len);
        } else {
            let more = (len - self.history.len()).min(extra.len());
            self.history
                .extend_from_slice(extra.get(..more).unwrap_or_default());
            self.state.truncate(self.history.len());
        }
    }

    /// The GPU under this session was lost: it must be recreated (see [`Model::reopen_on`]);
    /// every call on it fails with [`EngineError::DeviceLost`].
    pub fn is_device_lost(&self) -> bool {
        self.model.is_device_lost()
    }

    /// After a failed [`Session::generate`]: the tokens it had sampled and passed to `on_piece`
    /// but could not run (at most one; empty after a success or when the prompt failed). A
    /// session that takes over (e.g. on the CPU after a device loss) continues from
    /// `history() + unevaluated_tokens()`.
    pub fn unevaluated_tokens(&self) -> &[u32] {
        &self.unevaluated
    }

    /// Run `tokens` after the history, checking the cancel flag (not cleared here). A failed or
    /// cancelled run leaves the session at its position before the call on every backend.
    fn run(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        self.run_with(tokens, |state, stop| state.eval(tokens, logits, stop))
    }

    /// [`Session::run`] with the backend call `f` (`eval` or `eval_sample`).
    fn run_with<T>(
        &mut self,
        tokens: &[u32],
        f: impl FnOnce(&mut (dyn SessionBackend + 'm), crate::backend::Stop<'_>) -> Result<T>,
    ) -> Result<T> {
        self.check_room(tokens)?;
        if self.is_device_lost() {
            return Err(EngineError::DeviceLost(
                "lost before this call; the session must be recreated".into(),
            ));
        }
        let len0 = self.history.len();
        let cancel = Arc::clone(&self.cancel);
        let stop = move || cancel.load(Ordering::SeqCst);
        let r = f(self.state.as_mut(), &stop);
        match r {
            Ok(l) => {
                self.sync_history_len(tokens);
                Ok(l)
            }
            Err(e) => {
                self.state.truncate(len0);
                self.history.truncate(len0);
                Err(e)
            }
        }
    }

    /// Run `tokens` and return the logits of every one of them, `[tokens.len(), n_vocab]`.
    pub fn eval_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.cancel.store(false, Ordering::SeqCst);
        self.run(tokens, Logits::All)
    }

    /// Run `tokens` and return the logits of the last one.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.cancel.store(false, Ordering::SeqCst);
        self.run(tokens, Logits::Last)
    }

    /// Make the cache hold exactly `tokens`, reusing what it already holds: keep the longest
    /// common prefix of the cache and `tokens` (but never all of `tokens`: the last token is
    /// always run, for its logits), run the rest, and return the last token's logits. A chat that resends its growing transcript recomputes only the
    /// new part; the logits are those of a fresh session. This is tern's one prefix-reuse rule
    /// ([`Session::generate_from`], used by `tern chat` and the C ABI's `tern_generate`, keeps
    /// the same prefix).
    pub fn sync_prefix(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let keep = self.reusable_prefix(tokens);
        self.truncate(keep);
        self.eval(tokens.get(keep..).unwrap_or_default())
    }

    /// How many leading tokens of `tokens` the cache can keep ([`Session::sync_prefix`]'s rule):
    /// the common prefix, at most `tokens.len() − 1`.
    pub fn reusable_prefix(&self, tokens: &[u32]) -> usize {
        let common = self
            .history
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        common.min(tokens.len().saturating_sub(1))
    }

    /// [`Session::generate`] after [`Session::sync_prefix`]: `prompt` is the whole context (e.g.
    /// a rendered chat transcript); the cached prefix it shares is kept and only the rest is run.
    /// Returns the output (its `prompt_tokens` counts only the tokens run) and the tokens reused.
    pub fn generate_from(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        opts: &GenerateOptions,
        on_piece: &mut dyn FnMut(&str) -> bool,
    ) -> Result<(GenerateOutput, usize)> {
        let keep = self.reusable_prefix(prompt);
        self.truncate(keep);
        let out = self.generate(
            prompt.get(keep..).unwrap_or_default(),
            params,
            opts,
            on_piece,
        )?;
        Ok((out, keep))
    }

    /// `log p(tokens[i+1] | tokens[..=i])` for `i` in `0..n-1` (natural log, `n − 1` values; the
    /// first token is context only) through the backend's fused scorer: no logit matrix is made.
    /// The cache is cleared first and holds `tokens[..n-1]` afterwards (a prefix of them after an
    /// error); `n − 1` must fit the context. The values equal [`Model::score`]'s.
    /// [`Session::cancel_handle`] stops it before the next batch.
    pub fn score(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.score_with(tokens, &ScoreOptions::default(), &mut NoObserver)
    }

    /// [`Session::score`] with options (`opts.batch`: tokens per forward call on the CPU; the GPU
    /// session runs its own batches; `opts.max_tokens` is not used, the context is the limit) and
    /// an observer.
    pub fn score_with(
        &mut self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        self.cancel.store(false, Ordering::SeqCst);
        if tokens.is_empty() {
            return Err(EngineError::NothingToScore("no tokens given".into()));
        }
        self.model.check_tokens(tokens)?;
        let n_in = tokens.len() - 1;
        if n_in > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: tokens.len(),
                ctx: self.n_ctx() + 1,
            });
        }
        self.reset();
        let mut obs = Cancellable {
            inner: obs,
            cancel: &self.cancel,
        };
        let lp = self.state.score(tokens, opts, &mut obs);
        if lp.is_err() {
            // A failed or cancelled score leaves the session empty, as the score began.
            self.reset();
        } else {
            self.sync_history_len(tokens.get(..n_in).unwrap_or_default());
        }
        lp
    }

    /// Feed `prompt` (after whatever the session already holds) and generate up to
    /// `opts.max_tokens` tokens, calling `on_piece` with UTF-8-complete text pieces as they are
    /// decided (text that might begin a stop string is held back until it is known not to).
    /// `on_piece` returns `false` to stop.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        opts: &GenerateOptions,
        on_piece: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput> {
        self.cancel.store(false, Ordering::SeqCst);
        self.unevaluated.clear();
        let mut sampler = Sampler::new(params.clone())?;
        let t0 = Instant::now();
        let mut pending = Pending::Logits(self.run(prompt, Logits::Last)?);
        let prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let tok = self.model.tokenizer.as_ref();
        let mut stream = tok.map(|_| StreamDecoder::new());
        let mut out = GenerateOutput {
            tokens: Vec::new(),
            text: String::new(),
            stop: StopReason::MaxTokens,
            prompt_tokens: prompt.len(),
            prefill_secs,
            decode_secs: 0.0,
        };
        // `text[emitted..]` is decided but not yet passed to `on_piece`.
        let mut emitted = 0usize;
        let max_stop = opts.stop_strings.iter().map(|s| s.len()).max().unwrap_or(0);
        for _ in 0..opts.max_tokens {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(EngineError::Cancelled);
            }
            let next = self.pick(&mut sampler, pending)?;
            let eog = tok.is_some_and(|t| t.is_eog(next)) || opts.stop_tokens.contains(&next);
            if eog {
                out.stop = StopReason::Token;
                break;
            }
            out.tokens.push(next);
            if let (Some(s), Some(t)) = (stream.as_mut(), tok) {
                let piece = s
                    .push(t, next)
                    .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
                out.text.push_str(&piece);
            }
            // Stop strings: search only the region that could contain a new match.
            let mut hit = None;
            if max_stop > 0 {
                let from = floor_char(&out.text, emitted.saturating_sub(max_stop));
                hit = opts
                    .stop_strings
                    .iter()
                    .filter(|s| !s.is_empty())
                    .filter_map(|s| out.text[from..].find(s.as_str()).map(|i| from + i))
                    .min();
            }
            if let Some(at) = hit {
                out.text.truncate(at);
                if at > emitted && !on_piece(&out.text[emitted..]) {
                    out.stop = StopReason::Callback;
                    break;
                }
                out.stop = StopReason::StopString;
                emitted = out.text.len();
                break;
            }
            // Hold back a tail that could still become a stop string.
            let safe = floor_char(
                &out.text,
                out.text.len().saturating_sub(max_stop.saturating_sub(1)),
            );
            if safe > emitted {
                let ok = on_piece(&out.text[emitted..safe]);
                emitted = safe;
                if !ok {
                    out.stop = StopReason::Callback;
                    break;
                }
            }
            if self.history.len() >= self.n_ctx() {
                out.stop = StopReason::Context;
                break;
            }
            pending = match self.run_for_sampling(next, &sampler) {
                Ok(l) => l,
                Err(e) => {
                    self.unevaluated.push(next);
                    return Err(e);
                }
            };
        }
        if out.stop != StopReason::Callback && emitted < out.text.len() {
            on_piece(&out.text[emitted..]);
        }
        out.decode_secs = t1.elapsed().as_secs_f64();
        Ok(out)
    }
}

/// The largest char boundary ≤ `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// An observer that also reports the session's cancel flag.
struct Cancellable<'a> {
    inner: &'a mut dyn ScoreObserver,
    cancel: &'a AtomicBool,
}

impl ScoreObserver for Cancellable<'_> {
    fn scoring_started(&mut self) {
        self.inner.scoring_started();
    }
    fn scoring_finished(&mut self) {
        self.inner.scoring_finished();
    }
    fn progress(&mut self, done: usize, total: usize) {
        self.inner.progress(done, total);
    }
    fn cancelled(&mut self) -> bool {
        self.cancel.load(Ordering::SeqCst) || self.inner.cancelled()
    }
}
