//! Models and sessions: open a `.tern` file, prefill, decode, generate with streaming and stops.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tern_format::{ModelMeta, TernFile};
use tern_reference::{ForwardOptions, KvCache, LogitsWanted};

use crate::error::{EngineError, Result};
use crate::sampler::{Sampler, SamplingParams};
use crate::tokenizer::{StreamDecoder, Tokenizer};

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

/// Options of [`Model::open_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    pub device: Device,
    /// GPU memory the weights may take (`--max-memory`): NeuZip tensors beyond it stay
    /// compressed and are decoded just in time.
    pub max_memory: Option<u64>,
}

enum Backend {
    Cpu(tern_reference::Model),
    Gpu(Arc<tern_gpu::model::GpuModel>),
}

/// A loaded model: weights for the CPU reference or the GPU engine, tokenizer, metadata.
pub struct Model {
    meta: ModelMeta,
    backend: Backend,
    tokenizer: Option<Tokenizer>,
}

impl Model {
    /// Open and validate a `.tern` file and load its weights for the CPU reference.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, &LoadOptions::default())
    }

    /// Open a `.tern` file for the backend `opts.device` asks for.
    pub fn open_with(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let file = TernFile::open(path)?;
        Self::from_file_with(&file, opts)
    }

    /// Open `base` with the fine-tune delta `delta` (`.ternd`) applied in memory; nothing is
    /// written to disk. A delta made against another base is refused before anything is used.
    pub fn open_with_delta(base: &Path, delta: &Path) -> Result<Self> {
        let file = tern_format::delta::open_with_delta(base, delta)?;
        Self::from_file(&file)
    }

    pub fn from_file(file: &TernFile) -> Result<Self> {
        Self::from_file_with(file, &LoadOptions::default())
    }

    pub fn from_file_with(file: &TernFile, opts: &LoadOptions) -> Result<Self> {
        let meta = file.meta().clone();
        let backend = match opts.device {
            Device::Cpu => Backend::Cpu(tern_reference::Model::load(file)?),
            Device::Gpu => Backend::Gpu(Arc::new(load_gpu(file, opts, true)?)),
            Device::Auto => match load_gpu(file, opts, false) {
                Ok(m) => Backend::Gpu(Arc::new(m)),
                Err(e) => {
                    log::info!("GPU not used ({e}); running on the CPU");
                    Backend::Cpu(tern_reference::Model::load(file)?)
                }
            },
        };
        let tokenizer = match &meta.tokenizer {
            Some(spec) => Some(
                Tokenizer::from_spec(spec).map_err(|e| EngineError::Tokenizer(e.to_string()))?,
            ),
            None => None,
        };
        Ok(Self {
            meta,
            backend,
            tokenizer,
        })
    }

    /// "cpu", or "gpu (adapter name, backend)".
    pub fn device_name(&self) -> String {
        match &self.backend {
            Backend::Cpu(_) => "cpu".into(),
            Backend::Gpu(g) => {
                let i = &g.context().info;
                format!("gpu ({}, {})", i.name, i.backend)
            }
        }
    }

    /// The GPU model, when the model was loaded for the GPU.
    pub fn gpu(&self) -> Option<&Arc<tern_gpu::model::GpuModel>> {
        match &self.backend {
            Backend::Gpu(g) => Some(g),
            Backend::Cpu(_) => None,
        }
    }

    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }

    /// The CPU forward pass (an error when the model was loaded for the GPU).
    pub fn net(&self) -> Result<&tern_reference::Model> {
        match &self.backend {
            Backend::Cpu(n) => Ok(n),
            Backend::Gpu(_) => Err(EngineError::InvalidArgument(
                "this model was loaded for the GPU; the CPU forward pass is not loaded".into(),
            )),
        }
    }

    /// Numerical options of the CPU forward pass (e.g. llama.cpp-like activation quantization);
    /// no effect on the GPU backend.
    pub fn set_forward_options(&mut self, o: ForwardOptions) {
        if let Backend::Cpu(n) = &mut self.backend {
            n.set_options(o);
        }
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

/// One conversation's state: KV cache and the tokens in it.
enum State {
    Cpu(KvCache),
    Gpu(tern_gpu::model::GpuSession),
}

/// Tokens per GPU batch (prefill chunk).
const GPU_BATCH: u64 = 512;

pub struct Session<'m> {
    model: &'m Model,
    cache: State,
    history: Vec<u32>,
    cancel: Arc<AtomicBool>,
}

impl<'m> Session<'m> {
    /// A session with room for `n_ctx` tokens (0 = the model's training context).
    pub fn new(model: &'m Model, n_ctx: usize) -> Result<Self> {
        let n_ctx = if n_ctx == 0 {
            model.meta.hparams.n_ctx_train as usize
        } else {
            n_ctx
        };
        let cache = match &model.backend {
            Backend::Cpu(net) => State::Cpu(KvCache::new(net, n_ctx)?),
            Backend::Gpu(g) => State::Gpu(tern_gpu::model::GpuSession::new(
                Arc::clone(g),
                n_ctx as u64,
                GPU_BATCH,
            )?),
        };
        Ok(Self {
            model,
            cache,
            history: Vec::new(),
            cancel: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Tokens currently in the KV cache.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    pub fn n_ctx(&self) -> usize {
        match &self.cache {
            State::Cpu(c) => c.capacity(),
            State::Gpu(g) => g.n_ctx() as usize,
        }
    }

    /// The GPU session, when the model runs on the GPU.
    pub fn gpu(&mut self) -> Option<&mut tern_gpu::model::GpuSession> {
        match &mut self.cache {
            State::Gpu(g) => Some(g),
            State::Cpu(_) => None,
        }
    }

    /// Forget everything.
    pub fn reset(&mut self) {
        match &mut self.cache {
            State::Cpu(c) => c.clear(),
            State::Gpu(g) => g.truncate(0),
        }
        self.history.clear();
    }

    /// Keep only the first `n` tokens of the cache.
    pub fn truncate(&mut self, n: usize) {
        let n = n.min(self.history.len());
        match &mut self.cache {
            State::Cpu(c) => c.truncate(n),
            State::Gpu(g) => g.truncate(n as u64),
        }
        self.history.truncate(n);
    }

    /// A flag that, once set (from any thread), makes a running `generate` return
    /// [`EngineError::Cancelled`] at the next token. `generate` clears it when it starts.
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

    /// Run `tokens` and return the logits of every one of them, `[tokens.len(), n_vocab]`.
    pub fn eval_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.check_room(tokens)?;
        let l = match (&self.model.backend, &mut self.cache) {
            (Backend::Cpu(net), State::Cpu(c)) => net.forward(tokens, c, LogitsWanted::All)?,
            (_, State::Gpu(g)) => g.eval_all(tokens)?,
            _ => return Err(EngineError::InvalidArgument("backend mismatch".into())),
        };
        self.history.extend_from_slice(tokens);
        Ok(l)
    }

    /// Run `tokens` and return the logits of the last one.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.check_room(tokens)?;
        let l = match (&self.model.backend, &mut self.cache) {
            (Backend::Cpu(net), State::Cpu(c)) => net.forward(tokens, c, LogitsWanted::Last)?,
            (_, State::Gpu(g)) => g.eval(tokens)?,
            _ => return Err(EngineError::InvalidArgument("backend mismatch".into())),
        };
        self.history.extend_from_slice(tokens);
        Ok(l)
    }

    /// Make the cache hold exactly `tokens`: keep the longest common prefix with what it holds,
    /// run the rest, and return the last logits (the cache must end up non-empty).
    pub fn sync_prefix(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let common = self
            .history
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // Re-run at least the last token to get its logits.
        let keep = common.min(tokens.len().saturating_sub(1));
        self.truncate(keep);
        self.eval(&tokens[keep..])
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
        let mut sampler = Sampler::new(params.clone())?;
        let t0 = Instant::now();
        let mut logits = self.eval(prompt)?;
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
            let next = sampler.sample(&logits, &self.history)?;
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
            logits = self.eval(&[next])?;
        }
        if out.stop != StopReason::Callback && emitted < out.text.len() {
            on_piece(&out.text[emitted..]);
        }
        out.decode_secs = t1.elapsed().as_secs_f64();
        Ok(out)
    }
}

fn load_gpu(
    file: &TernFile,
    opts: &LoadOptions,
    allow_software: bool,
) -> Result<tern_gpu::model::GpuModel> {
    let ctx = tern_gpu::GpuContext::with_options(tern_gpu::GpuOptions {
        preference: tern_gpu::DevicePreference::Gpu,
        allow_software,
        binding_limit: None,
    })?;
    Ok(tern_gpu::model::GpuModel::load(
        Arc::new(ctx),
        file,
        tern_gpu::model::GpuModelOptions {
            max_memory: opts.max_memory,
        },
    )?)
}

/// The largest char boundary ≤ `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
