//! `tern run`, `tern tokenize`, `tern chat`.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use tern_engine::chat::{render_chat, ChatMessage};
use tern_engine::session::{Device, GenerateOptions, LoadOptions, Model, Session, SessionOptions};

use crate::load::DeviceArgs;
use tern_engine::SamplingParams;

#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long = "temp", default_value_t = 0.0)]
    pub temp: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Top-p (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty (1 = off) over the last 64 tokens.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// RNG seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when this string appears (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Context size in tokens (0 = the model's training context, capped at 4096 positions).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx: usize,
    #[command(flatten)]
    pub load: crate::load::DeviceArgs,
    #[command(flatten)]
    pub numerics: crate::numerics::NumericsArgs,
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
    /// Testing aid: destroy the GPU device (as a driver reset would) after this many pieces of
    /// generated text, and then go on as `--device auto` does after a device loss.
    #[arg(long, hide = true)]
    pub debug_lose_device_after: Option<usize>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed,
            ..SamplingParams::default()
        }
    }
}

impl SamplingArgs {
    /// Whether a lost GPU device is replaced by the CPU (with a warning) instead of failing:
    /// `--device auto`, or a simulated loss.
    pub fn falls_back(&self) -> bool {
        self.load.device_or(DeviceArgs::DEFAULT) == Device::Auto
            || self.debug_lose_device_after.is_some()
    }

    /// The backend and memory budget asked for.
    pub fn load_options(&self) -> Result<LoadOptions> {
        self.load.load_options(DeviceArgs::DEFAULT, &self.numerics)
    }

    /// The session these flags ask for: context, KV cache, sampling (checked by the engine when
    /// the session is made). The llama.cpp numerics are the model's (`NumericsArgs::apply`).
    pub fn session_options(&self) -> Result<SessionOptions> {
        Ok(SessionOptions {
            n_ctx: self.ctx,
            kv: self.kv.options()?,
            sampling: self.params(),
            ..Default::default()
        })
    }
}

#[derive(Args)]
pub struct RunArgs {
    /// A .tern (or .gguf) model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    /// The model, as MODEL: a file or a name `tern fetch` knows (`gemma3-270m`).
    #[arg(long = "model", value_name = "MODEL", conflicts_with = "model")]
    pub model_opt: Option<PathBuf>,
    /// Prompt text.
    #[arg(short = 'p', long = "prompt", conflicts_with = "tokens")]
    pub prompt: Option<String>,
    /// Prompt as token ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tokens: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n: usize,
    /// Write the prompt positions' logits, [positions, vocab] f32, as .npy.
    #[arg(long)]
    pub dump_logits: Option<PathBuf>,
    /// Do not parse special tokens (like <|im_start|>) in the prompt text.
    #[arg(long)]
    pub no_special: bool,
    /// A fine-tune delta (.ternd) to apply to MODEL in memory (`tern delta create`).
    #[arg(long)]
    pub delta: Option<PathBuf>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

pub fn load(model: Option<&Path>, opts: &LoadOptions) -> Result<Model> {
    let path = crate::models::resolve(model)?;
    let t0 = std::time::Instant::now();
    let what = match &opts.delta {
        Some(d) => format!("{} + delta {}", path.display(), d.display()),
        None => path.display().to_string(),
    };
    let m = Model::open_with(&path, opts).with_context(|| format!("loading {what}"))?;
    log::info!(
        "loaded {what} in {:.2}s on {}",
        t0.elapsed().as_secs_f64(),
        m.device_name()
    );
    crate::models::log_plan(&m);
    Ok(m)
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let lo = a.sampling.load_options()?;
    let lo = LoadOptions {
        delta: a.delta.clone(),
        ..lo
    };
    let mut model = load(a.model.as_deref().or(a.model_opt.as_deref()), &lo)?;
    a.sampling.numerics.apply(&mut model)?;
    let prompt = match (&a.prompt, &a.tokens) {
        (Some(p), None) => model.tokenize(p, !a.no_special)?,
        (None, Some(t)) => t.clone(),
        _ => bail!("give a prompt: -p TEXT or --tokens 1,2,3"),
    };
    model.check_tokens(&prompt)?;
    if let Some(path) = &a.dump_logits {
        let mut s = Session::with_options(&model, &a.sampling.session_options()?)?;
        let logits = s.eval_all(&prompt)?;
        write_npy(path, &logits, prompt.len(), model.n_vocab())?;
        log::info!(
            "wrote {} x {} logits to {}",
            prompt.len(),
            model.n_vocab(),
            path.display()
        );
        if a.n == 0 {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if a.n == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let opts = GenerateOptions {
        max_tokens: a.n,
        stop_tokens: vec![],
        stop_strings: a.sampling.stop.clone(),
    };
    let mut out = std::io::stdout().lock();
    let (mut model, mut prompt, mut opts) = (model, prompt, opts);
    let mut pieces = 0usize;
    let r = loop {
        let mut s = Session::with_options(&model, &a.sampling.session_options()?)?;
        let r = s.generate(&prompt, &s.sampling().clone(), &opts, &mut |piece| {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
            pieces += 1;
            if a.sampling.debug_lose_device_after == Some(pieces) {
                model.simulate_device_loss();
            }
            true
        });
        match r {
            Err(e) if e.is_device_lost() && a.sampling.falls_back() => {
                // Continue on the CPU from what was generated (the text already printed stands).
                let (next, done) = resume_point(&s, &prompt);
                drop(s);
                model = reopen_on_cpu(&model, &e)?;
                prompt = next;
                opts.max_tokens = opts.max_tokens.saturating_sub(done);
                if opts.max_tokens == 0 {
                    let _ = writeln!(out);
                    return Ok(ExitCode::SUCCESS);
                }
            }
            r => break r?,
        }
    };
    let _ = writeln!(out);
    let n = r.tokens.len();
    eprintln!(
        "prompt: {} tokens in {:.2}s ({:.1} t/s) | generated: {} tokens in {:.2}s ({:.1} t/s) | stop: {:?}",
        r.prompt_tokens,
        r.prefill_secs,
        r.prompt_tokens as f64 / r.prefill_secs.max(1e-9),
        n,
        r.decode_secs,
        n as f64 / r.decode_secs.max(1e-9),
        r.stop
    );
    Ok(ExitCode::SUCCESS)
}

/// Where a generation that failed with a device loss goes on: the tokens to feed a new session
/// (what the old one held plus the token sampled but not run, or the prompt when the prompt itself
/// failed) and how many tokens had been generated.
fn resume_point(s: &Session<'_>, prompt: &[u32]) -> (Vec<u32>, usize) {
    let mut next = s.history().to_vec();
    next.extend_from_slice(s.unevaluated_tokens());
    if next.len() < prompt.len() {
        return (prompt.to_vec(), 0);
    }
    let done = next.len() - prompt.len();
    (next, done)
}

/// After a device loss: warn and open the same model on the CPU.
fn reopen_on_cpu(model: &Model, e: &tern_engine::EngineError) -> Result<Model> {
    eprintln!("warning: {e}; continuing on the CPU");
    model
        .reopen_on(Device::Cpu)
        .context("reopening the model on the CPU after the GPU was lost")
}

/// Write a little-endian f32 C-order .npy of shape [rows, cols].
pub fn write_npy(path: &Path, data: &[f32], rows: usize, cols: usize) -> Result<()> {
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    for v in data {
        f.write_all(&v.to_le_bytes())?;
    }
    f.flush()?;
    Ok(())
}

#[derive(Args)]
pub struct TokenizeArgs {
    /// A .tern (or .gguf) model.
    pub model: PathBuf,
    #[arg(short = 'p', long = "prompt")]
    pub prompt: String,
    /// Treat special-token text (like <|im_start|>) as plain text.
    #[arg(long)]
    pub no_special: bool,
}

pub fn tokenize(a: TokenizeArgs) -> Result<ExitCode> {
    let path = crate::models::resolve(Some(&a.model))?;
    let file = tern_format::TernFile::open(&path)?;
    let spec = file
        .meta()
        .tokenizer
        .as_ref()
        .context("this model has no tokenizer")?;
    let tok = tern_engine::tokenizer::Tokenizer::from_spec(spec)?;
    let ids = tok.encode(&a.prompt, !a.no_special)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct ChatArgs {
    /// A .tern (or .gguf) model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    /// The model, as MODEL: a file or a name `tern fetch` knows (`gemma3-270m`).
    #[arg(long = "model", value_name = "MODEL", conflicts_with = "model")]
    pub model_opt: Option<PathBuf>,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Maximum tokens per reply.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    pub n: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// A reply cut short by a device loss, to finish on the CPU.
struct Resume {
    tokens: Vec<u32>,
    max_tokens: usize,
    text: String,
}

/// How a chat ended on one device.
enum ChatEnd {
    /// The input ended (or /quit).
    Done,
    /// The GPU was lost in the middle of a reply.
    Lost(tern_engine::EngineError, Resume),
}

pub fn chat(a: ChatArgs) -> Result<ExitCode> {
    let src = a.model.as_deref().or(a.model_opt.as_deref());
    let mut model = load(src, &a.sampling.load_options()?)?;
    a.sampling.numerics.apply(&mut model)?;
    let mut messages = Vec::new();
    if let Some(sys) = &a.system {
        messages.push(ChatMessage::new("system", sys.clone()));
    }
    let mut resume = None;
    loop {
        match chat_on(&model, &a, &mut messages, resume.take())? {
            ChatEnd::Done => return Ok(ExitCode::SUCCESS),
            ChatEnd::Lost(e, r) => {
                model = reopen_on_cpu(&model, &e)?;
                resume = Some(r);
            }
        }
    }
}

/// The chat loop on one model; a reply cut short by a lost device (with `--device auto`) is
/// handed back to be finished on the CPU.
fn chat_on(
    model: &Model,
    a: &ChatArgs,
    messages: &mut Vec<ChatMessage>,
    mut resume: Option<Resume>,
) -> Result<ChatEnd> {
    let tok = model.tokenizer()?;
    let template = model
        .meta()
        .tokenizer
        .as_ref()
        .and_then(|t| t.chat_template.clone())
        .context("this model has no chat template: use `tern run` instead")?;
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_text(i).ok())
            .unwrap_or("")
            .to_string()
    };
    let (bos, eos) = (piece(tok.bos()), piece(tok.eos()));
    let mut s = Session::with_options(model, &a.sampling.session_options()?)?;
    let stdin = std::io::stdin();
    let interactive = std::io::IsTerminal::is_terminal(&stdin);
    if interactive && resume.is_none() {
        eprintln!("chatting with {} — type a message; /reset clears the conversation, /quit or Ctrl-D ends.", model.meta().provenance.model_name.as_deref().unwrap_or("the model"));
    }
    let mut out = std::io::stdout();
    let mut line = String::new();
    let mut pieces = 0usize;
    loop {
        let (ids, max_tokens, mut text) = match resume.take() {
            Some(r) => (r.tokens, r.max_tokens, r.text),
            None => {
                if interactive {
                    eprint!("> ");
                }
                line.clear();
                if stdin.lock().read_line(&mut line)? == 0 {
                    return Ok(ChatEnd::Done);
                }
                let text = line.trim_end_matches(['\n', '\r']);
                match text.trim() {
                    "" => continue,
                    "/quit" | "/exit" => return Ok(ChatEnd::Done),
                    "/reset" => {
                        messages.retain(|m: &ChatMessage| m.role == "system");
                        s.reset();
                        continue;
                    }
                    _ => {}
                }
                messages.push(ChatMessage::new("user", text));
                let rendered = render_chat(&template, messages, true, &bos, &eos)?;
                // The template already holds BOS where the model wants it: do not add another.
                let ids = tok.encode_with(&rendered, false, true)?;
                if ids.len() + 1 >= s.n_ctx() {
                    bail!(
                        "the conversation ({} tokens) no longer fits the context ({}): /reset it",
                        ids.len(),
                        s.n_ctx()
                    );
                }
                let max = a.n.min(s.n_ctx() - ids.len());
                (ids, max, String::new())
            }
        };
        // Keep the cached prefix; feed only what is new.
        let opts = GenerateOptions {
            max_tokens,
            stop_tokens: vec![],
            stop_strings: a.sampling.stop.clone(),
        };
        let r = s.generate_from(&ids, &s.sampling().clone(), &opts, &mut |p| {
            let _ = out.write_all(p.as_bytes());
            let _ = out.flush();
            text.push_str(p);
            pieces += 1;
            if a.sampling.debug_lose_device_after == Some(pieces) {
                model.simulate_device_loss();
            }
            true
        });
        let r = match r {
            Err(e) if e.is_device_lost() && a.sampling.falls_back() => {
                let (tokens, done) = resume_point(&s, &ids);
                let max_tokens = max_tokens.saturating_sub(done);
                return Ok(ChatEnd::Lost(
                    e,
                    Resume {
                        tokens,
                        max_tokens,
                        text,
                    },
                ));
            }
            r => r?.0,
        };
        let _ = writeln!(out);
        log::info!(
            "{} tokens, {:.1} t/s",
            r.tokens.len(),
            r.tokens.len() as f64 / r.decode_secs.max(1e-9)
        );
        messages.push(ChatMessage::new("assistant", text));
    }
}
