//! `tern run`, `tern tokenize`, `tern chat`.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use tern_engine::chat::{render_chat, ChatMessage};
use tern_engine::session::{Device, GenerateOptions, LoadOptions, Model, Session, SessionOptions};

use crate::load::DeviceArgs;
use tern_engine::{SamplingParams, SamplingSource};

#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy). Default: the model file's recommended sampling when it carries
    /// one (GGUF `general.sampling.*`), else llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95,
    /// min-p 0.05, repeat penalty 1.0 (off).
    #[arg(long = "temp")]
    pub temp: Option<f32>,
    /// Top-k (0 = off).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Top-p (1 = off).
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Min-p (0 = off).
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Repetition penalty (1 = off) over the last 64 tokens.
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// RNG seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when this string appears (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Context size in tokens (0 = the model's training context, capped at 4096 positions), or
    /// `auto` with --max-memory: the largest context of the KV format within the budget
    /// (`tern plan`; a fixed context above the plan's is refused under --max-memory).
    #[arg(short = 'c', long = "ctx-size", default_value = "0")]
    pub ctx: crate::plan::ContextArg,
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
    /// The sampling these flags ask for on `model`: each flag given wins; the rest comes from
    /// the model's recommended sampling ([`SamplingParams::recommended`]: the file's, else
    /// llama.cpp's defaults). `--temp 0` is greedy. Also a line saying where it came from.
    pub fn params(&self, model: &Model) -> (SamplingParams, String) {
        let (base, src) = SamplingParams::recommended(model.meta());
        let p = SamplingParams {
            temperature: self.temp.unwrap_or(base.temperature),
            top_k: self.top_k.unwrap_or(base.top_k),
            top_p: self.top_p.unwrap_or(base.top_p),
            min_p: self.min_p.unwrap_or(base.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(base.repeat_penalty),
            seed: self.seed,
            ..base
        };
        let from = match src {
            SamplingSource::File => "the model file's recommended sampling",
            SamplingSource::LlamaCpp => "llama.cpp's defaults",
        };
        let line = format!("sampling: {} (flags over {from})", describe(&p));
        (p, line)
    }
}

/// `temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1 (seed 0)`, or `greedy`.
pub fn describe(p: &SamplingParams) -> String {
    if p.temperature == 0.0 {
        return "greedy (--temp 0)".into();
    }
    format!(
        "temp {}, top-k {}, top-p {}, min-p {}, repeat penalty {}, seed {}",
        p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.seed
    )
}

/// A rate as a person reads it: 3 significant digits (`61.8`, `1234`, `0.512`).
pub fn human_rate(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
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
    pub fn session_options(&self, model: &Model) -> Result<SessionOptions> {
        Ok(SessionOptions {
            n_ctx: self.ctx.positions()?,
            kv: self.kv.options(&self.numerics)?,
            sampling: self.params(model).0,
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
    /// Apply the model's chat template: the prompt becomes one user turn (llama-cli's `-cnv`,
    /// accepted too). Without it the prompt is fed as raw text; stderr says which.
    #[arg(long = "chat", conflicts_with = "tokens")]
    pub chat: bool,
    /// System prompt (with --chat).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// The chat template of `model`, and its BOS and EOS texts (what templates name).
fn chat_template(model: &Model) -> Result<(String, String, String)> {
    let tok = model.tokenizer()?;
    let template = model
        .meta()
        .tokenizer
        .as_ref()
        .and_then(|t| t.chat_template.clone())
        .context("this model has no chat template (`tern run` without --chat feeds raw text)")?;
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_text(i).ok())
            .unwrap_or("")
            .to_string()
    };
    Ok((template, piece(tok.bos()), piece(tok.eos())))
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

pub fn run(mut a: RunArgs) -> Result<ExitCode> {
    let lo = a.sampling.load_options()?;
    a.sampling.ctx = crate::plan::resolve_context(
        a.model.as_deref(),
        &lo,
        a.sampling.kv.options(&a.sampling.numerics)?.format,
        a.sampling.ctx,
    )?;
    let lo = LoadOptions {
        delta: a.delta.clone(),
        ..lo
    };
    if let Some(out) = &a.dump_logits {
        // The data-safety rule (docs/safety.md): an output is never an input.
        let inputs: Vec<&Path> = a
            .model
            .iter()
            .chain(&a.model_opt)
            .chain(&a.delta)
            .map(PathBuf::as_path)
            .collect();
        tern_format::output::refuse_input_as_output(&inputs, out, "--dump-logits")?;
    }
    let mut model = load(a.model.as_deref().or(a.model_opt.as_deref()), &lo)?;
    a.sampling.numerics.apply(&mut model)?;
    let has_template = model
        .meta()
        .tokenizer
        .as_ref()
        .is_some_and(|t| t.chat_template.is_some());
    let prompt = match (&a.prompt, &a.tokens) {
        (Some(p), None) if a.chat => {
            let (template, bos, eos) = chat_template(&model)?;
            let mut msgs = Vec::new();
            if let Some(sys) = &a.system {
                msgs.push(ChatMessage::new("system", sys.clone()));
            }
            msgs.push(ChatMessage::new("user", p.clone()));
            let rendered = render_chat(&template, &msgs, true, &bos, &eos)?;
            eprintln!("prompt: the model's chat template applied (one user turn)");
            // The template already holds BOS where the model wants it.
            model.tokenizer()?.encode_with(&rendered, false, true)?
        }
        (Some(p), None) => {
            if has_template {
                eprintln!(
                    "prompt: raw text, no chat template (this is an instruct model: --chat applies its template)"
                );
            }
            model.tokenize(p, !a.no_special)?
        }
        (None, Some(t)) => t.clone(),
        _ => bail!("give a prompt: -p TEXT or --tokens 1,2,3"),
    };
    model.check_tokens(&prompt)?;
    log::info!("{}", a.sampling.params(&model).1);
    if let Some(path) = &a.dump_logits {
        let mut s = Session::with_options(&model, &a.sampling.session_options(&model)?)?;
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
        let mut s = Session::with_options(&model, &a.sampling.session_options(&model)?)?;
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
        "prompt: {} tokens in {:.2}s ({} t/s) | generated: {} tokens in {:.2}s ({} t/s) | stop: {:?}",
        r.prompt_tokens,
        r.prefill_secs,
        human_rate(r.prompt_tokens as f64 / r.prefill_secs.max(1e-9)),
        n,
        r.decode_secs,
        human_rate(n as f64 / r.decode_secs.max(1e-9)),
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
    /// A .tern (or .gguf) model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    #[arg(short = 'p', long = "prompt")]
    pub prompt: String,
    /// Treat special-token text (like <|im_start|>) as plain text.
    #[arg(long)]
    pub no_special: bool,
}

pub fn tokenize(a: TokenizeArgs) -> Result<ExitCode> {
    let path = crate::models::resolve(a.model.as_deref())?;
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
    /// System prompt (kept when old turns are dropped to make room).
    #[arg(long)]
    pub system: Option<String>,
    /// Maximum tokens per reply.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    pub n: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

const CHAT_HELP: &str = "\
commands:
  /help          this list
  /reset         forget the conversation (the system prompt stays)
  /quit, /exit   end the chat (Ctrl-D too)
keys: Ctrl-C stops a reply and keeps the conversation; Ctrl-C again (or Ctrl-D) at the prompt
quits; arrows, Home/End and history (up/down) edit the line.";

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

/// Ctrl-C while a reply runs: the handler sets the running session's cancel flag (the reply
/// stops, the conversation stays); a second Ctrl-C in the same reply, or one while no reply
/// runs (stdin not a terminal: no line editor to read it as a key), quits with 130 as a shell
/// expects. At the prompt of a terminal the line editor reads Ctrl-C as a key instead.
struct CtrlC {
    cancel: std::sync::Mutex<Option<std::sync::Arc<std::sync::atomic::AtomicBool>>>,
    presses: std::sync::atomic::AtomicUsize,
}

static CTRL_C: CtrlC = CtrlC {
    cancel: std::sync::Mutex::new(None),
    presses: std::sync::atomic::AtomicUsize::new(0),
};

impl CtrlC {
    fn install() {
        use std::sync::atomic::Ordering;
        let r = ctrlc::set_handler(|| {
            let running = CTRL_C.cancel.lock().ok().and_then(|g| g.clone());
            let n = CTRL_C.presses.fetch_add(1, Ordering::SeqCst) + 1;
            match running {
                Some(flag) if n < 2 => flag.store(true, Ordering::SeqCst),
                _ => {
                    eprintln!();
                    std::process::exit(130);
                }
            }
        });
        if let Err(e) = r {
            log::warn!("Ctrl-C handler not installed ({e}): Ctrl-C ends the chat");
        }
    }

    /// A reply starts (its session's cancel flag) or ends (`None`).
    fn running(flag: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) {
        CTRL_C.presses.store(0, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut g) = CTRL_C.cancel.lock() {
            *g = flag;
        }
    }
}

/// One line of the user's input.
enum Input {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    Eof,
}

/// Where chat lines come from: a line editor on a terminal (editing keys, history), else plain
/// lines from stdin (bytes that are not UTF-8 are replaced, with a warning, never fatal).
enum Reader {
    Editor(Box<rustyline::DefaultEditor>),
    Plain(std::io::BufReader<std::io::Stdin>),
}

impl Reader {
    fn new() -> Reader {
        if std::io::IsTerminal::is_terminal(&std::io::stdin())
            && std::io::IsTerminal::is_terminal(&std::io::stderr())
        {
            match rustyline::DefaultEditor::new() {
                Ok(e) => return Reader::Editor(Box::new(e)),
                Err(e) => log::warn!("no line editing ({e}): reading plain lines"),
            }
        }
        Reader::Plain(std::io::BufReader::new(std::io::stdin()))
    }

    fn interactive(&self) -> bool {
        matches!(self, Reader::Editor(_))
    }

    fn read(&mut self) -> Input {
        match self {
            Reader::Editor(ed) => loop {
                match ed.readline("> ") {
                    Ok(l) => {
                        let _ = ed.add_history_entry(l.as_str());
                        return Input::Line(l);
                    }
                    Err(rustyline::error::ReadlineError::Interrupted) => return Input::Interrupted,
                    Err(rustyline::error::ReadlineError::Eof) => return Input::Eof,
                    Err(e) => {
                        // Invalid UTF-8 typed or pasted, a terminal hiccup: say so, read again.
                        eprintln!("(that line could not be read: {e}; type it again)");
                    }
                }
            },
            Reader::Plain(r) => {
                let mut buf = Vec::new();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) => Input::Eof,
                    Ok(_) => {
                        let line = match String::from_utf8(buf) {
                            Ok(l) => l,
                            Err(e) => {
                                eprintln!(
                                    "warning: the input line is not valid UTF-8: invalid bytes replaced by U+FFFD"
                                );
                                String::from_utf8_lossy(e.as_bytes()).into_owned()
                            }
                        };
                        Input::Line(line.trim_end_matches(['\n', '\r']).to_string())
                    }
                    Err(e) => {
                        eprintln!("error: reading stdin: {e}");
                        Input::Eof
                    }
                }
            }
        }
    }
}

pub fn chat(mut a: ChatArgs) -> Result<ExitCode> {
    let lo = a.sampling.load_options()?;
    let src = a.model.clone().or(a.model_opt.clone());
    a.sampling.ctx = crate::plan::resolve_context(
        src.as_deref(),
        &lo,
        a.sampling.kv.options(&a.sampling.numerics)?.format,
        a.sampling.ctx,
    )?;
    let mut model = load(src.as_deref(), &lo)?;
    a.sampling.numerics.apply(&mut model)?;
    let mut messages = Vec::new();
    if let Some(sys) = &a.system {
        messages.push(ChatMessage::new("system", sys.clone()));
    }
    let mut reader = Reader::new();
    CtrlC::install();
    let mut resume = None;
    loop {
        match chat_on(&model, &a, &mut messages, &mut reader, resume.take())? {
            ChatEnd::Done => return Ok(ExitCode::SUCCESS),
            ChatEnd::Lost(e, r) => {
                model = reopen_on_cpu(&model, &e)?;
                resume = Some(r);
            }
        }
    }
}

/// Drop the oldest turns (never a system message, never the last message) until the rendered
/// conversation leaves `room` tokens of the context; returns the tokens and how many messages
/// were dropped, or `None` when even the last message alone does not fit.
fn fit_context(
    messages: &mut Vec<ChatMessage>,
    render: &dyn Fn(&[ChatMessage]) -> Result<Vec<u32>>,
    n_ctx: usize,
    room: usize,
) -> Result<Option<(Vec<u32>, usize)>> {
    let mut dropped = 0;
    loop {
        let ids = render(messages)?;
        if ids.len() + room <= n_ctx {
            return Ok(Some((ids, dropped)));
        }
        let first = messages.iter().position(|m| m.role != "system");
        match first {
            Some(i) if i + 1 < messages.len() => {
                messages.remove(i);
                dropped += 1;
            }
            _ => return Ok(None),
        }
    }
}

/// The chat loop on one model; a reply cut short by a lost device (with `--device auto`) is
/// handed back to be finished on the CPU.
fn chat_on(
    model: &Model,
    a: &ChatArgs,
    messages: &mut Vec<ChatMessage>,
    reader: &mut Reader,
    mut resume: Option<Resume>,
) -> Result<ChatEnd> {
    let tok = model.tokenizer()?;
    let (template, bos, eos) = chat_template(model)?;
    let mut s = Session::with_options(model, &a.sampling.session_options(model)?)?;
    let interactive = reader.interactive();
    if resume.is_none() {
        let (_, line) = a.sampling.params(model);
        if interactive {
            eprintln!(
                "chatting with {} on {} ({} tokens of context) — /help for commands; Ctrl-C stops a reply, Ctrl-D quits.\n{line}",
                model
                    .meta()
                    .provenance
                    .model_name
                    .as_deref()
                    .unwrap_or("the model"),
                model.device_name(),
                s.n_ctx()
            );
        } else {
            log::info!("{line}");
        }
    }
    let render = |msgs: &[ChatMessage]| -> Result<Vec<u32>> {
        let rendered = render_chat(&template, msgs, true, &bos, &eos)?;
        // The template already holds BOS where the model wants it: do not add another.
        Ok(tok.encode_with(&rendered, false, true)?)
    };
    let mut out = std::io::stdout();
    let mut pieces = 0usize;
    // The last input was a Ctrl-C (at the prompt or stopping a reply): another one quits.
    let mut interrupted = false;
    loop {
        let (ids, max_tokens, mut text) = match resume.take() {
            Some(r) => (r.tokens, r.max_tokens, r.text),
            None => {
                let line = match reader.read() {
                    Input::Eof => return Ok(ChatEnd::Done),
                    Input::Interrupted if interrupted => return Ok(ChatEnd::Done),
                    Input::Interrupted => {
                        interrupted = true;
                        eprintln!("(Ctrl-C again or Ctrl-D quits; /help lists the commands)");
                        continue;
                    }
                    Input::Line(l) => l,
                };
                interrupted = false;
                let cmd = line.trim();
                if cmd.is_empty() {
                    continue;
                }
                if let Some(c) = cmd.strip_prefix('/').filter(|c| !c.starts_with('/')) {
                    match c {
                        "quit" | "exit" => return Ok(ChatEnd::Done),
                        "help" | "?" => eprintln!("{CHAT_HELP}"),
                        "reset" => {
                            messages.retain(|m: &ChatMessage| m.role == "system");
                            s.reset();
                            eprintln!(
                                "(conversation cleared{})",
                                if messages.is_empty() {
                                    ""
                                } else {
                                    "; the system prompt stays"
                                }
                            );
                        }
                        _ => eprintln!(
                            "unknown command /{}: /help lists the commands (start a message with \"//\" to send a line beginning with \"/\")",
                            c.split_whitespace().next().unwrap_or("")
                        ),
                    }
                    continue;
                }
                // "//text" sends "/text".
                let text = match line.trim_start().strip_prefix("//") {
                    Some(rest) => format!("/{rest}"),
                    None => line.clone(),
                };
                messages.push(ChatMessage::new("user", text));
                let n_ctx = s.n_ctx();
                let room = a.n.min(n_ctx / 2).max(1);
                let Some((ids, dropped)) = fit_context(messages, &render, n_ctx, room)? else {
                    messages.pop();
                    eprintln!(
                        "that message is too long for the context ({n_ctx} tokens) with room for a reply: not sent (-c sets a larger context)"
                    );
                    continue;
                };
                if dropped > 0 {
                    eprintln!(
                        "(the conversation filled the context of {n_ctx} tokens: dropped the oldest {dropped} message{}{})",
                        if dropped == 1 { "" } else { "s" },
                        if messages.first().is_some_and(|m| m.role == "system") {
                            "; the system prompt is kept"
                        } else {
                            ""
                        }
                    );
                }
                let max = a.n.min(n_ctx - ids.len());
                (ids, max, String::new())
            }
        };
        // Keep the cached prefix; feed only what is new.
        let opts = GenerateOptions {
            max_tokens,
            stop_tokens: vec![],
            stop_strings: a.sampling.stop.clone(),
        };
        CtrlC::running(Some(s.cancel_handle()));
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
        CtrlC::running(None);
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
            Err(tern_engine::EngineError::Cancelled) => {
                let _ = writeln!(out);
                eprintln!("[reply stopped (Ctrl-C); the conversation goes on — Ctrl-C again or Ctrl-D quits]");
                interrupted = true;
                messages.push(ChatMessage::new("assistant", text));
                continue;
            }
            r => r?.0,
        };
        let _ = writeln!(out);
        let n = r.tokens.len();
        eprintln!(
            "[{n} tokens at {} t/s; prompt {} tokens at {} t/s; context {}/{}]",
            human_rate(n as f64 / r.decode_secs.max(1e-9)),
            r.prompt_tokens,
            human_rate(r.prompt_tokens as f64 / r.prefill_secs.max(1e-9)),
            s.history().len(),
            s.n_ctx()
        );
        messages.push(ChatMessage::new("assistant", text));
    }
}
