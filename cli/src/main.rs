//! `tern`: pack, inspect, run, chat and tokenize models; score text and measure perplexity.

mod alloc;
mod bench;
mod delta;
mod inspect;
mod kv;
mod load;
mod models;
mod numerics;
mod pack;
mod perplexity;
mod plan;
mod run;
mod score;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tern",
    version,
    about = "tern: an embedded LLM inference runtime for edge GPUs"
)]
struct Cli {
    /// More logging on stderr (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Pack a GGUF file or a Hugging Face directory into a .tern file.
    Pack(pack::PackArgs),
    /// Show a .tern or .gguf file's metadata and tensors; --verify checks every byte.
    Inspect(inspect::InspectArgs),
    /// Generate text from a prompt (streams only the generated text to stdout).
    Run(run::RunArgs),
    /// Chat interactively with the model's chat template.
    Chat(run::ChatArgs),
    /// Print a text's token ids as a JSON array.
    Tokenize(run::TokenizeArgs),
    /// Fine-tune deltas: create, apply, inspect (.ternd files against a base .tern).
    Delta(delta::DeltaArgs),
    /// Perplexity of a text file (llama-perplexity-compatible windows), without logit matrices.
    Perplexity(perplexity::PerplexityArgs),
    /// Rank candidate continuations of a context by log-likelihood (JSON).
    Score(score::ScoreArgs),
    /// Benchmark prefill and decode (llama-bench style) with a memory breakdown.
    Bench(bench::BenchArgs),
    /// Fit a model and a context into a memory budget before loading (per KV format the
    /// largest context; with --context the best format that fits it).
    Plan(plan::PlanArgs),
    /// Download and pack the default model (SmolLM2-135M-Instruct) if needed; print its path.
    FetchDefault,
    /// Download and pack a known model if needed (`default`, `gemma3-270m`); print its path.
    Fetch {
        /// The model's name.
        name: String,
    },
}

/// Every command writes to stdout, and a reader that goes away (`tern inspect X | head -1`) must
/// end it quietly. Rust ignores SIGPIPE, so a write to a closed pipe fails with EPIPE and
/// `println!` panics (rc 101, a backtrace). tern restores the default action at start instead —
/// as `cat`, `grep` and every C tool behave: the process ends at once on the first write to a
/// closed pipe, silently, whichever code path writes (println!, indicatif, serde_json, the
/// logger), with no write site to audit. The shell reports the pipe's status (0 for `| head`).
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    // Mesa's implicit Vulkan layer `VK_LAYER_MESA_device_select` connects to Wayland while it lists
    // GPUs, and on a machine without a desktop session (no XDG_RUNTIME_DIR) libwayland prints
    // "error: XDG_RUNTIME_DIR is invalid or not set in the environment." on stderr for every
    // probe. The layer only reorders GPUs for a display; tern picks its adapter itself. Turned
    // off here, at the start of the process and before any thread exists (a library cannot
    // safely change its host's environment); a user's own setting wins.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
    restore_sigpipe();
    // llama-cli's `-cnv` (one dash, three letters) is `tern run --chat`.
    let cli =
        Cli::parse_from(std::env::args_os().map(|a| if a == "-cnv" { "--chat".into() } else { a }));
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .target(env_logger::Target::Stderr)
        .init();
    let r = match cli.cmd {
        Cmd::Pack(a) => pack::run(a),
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Chat(a) => run::chat(a),
        Cmd::Tokenize(a) => run::tokenize(a),
        Cmd::Delta(a) => delta::run(a),
        Cmd::Perplexity(a) => perplexity::run(a),
        Cmd::Score(a) => score::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Plan(a) => plan::run(a),
        Cmd::FetchDefault => models::default_model().map(|p| {
            println!("{}", p.display());
            ExitCode::SUCCESS
        }),
        Cmd::Fetch { name } => models::fetch(&name).map(|p| {
            println!("{}", p.display());
            ExitCode::SUCCESS
        }),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
