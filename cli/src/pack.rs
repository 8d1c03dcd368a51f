//! `tern pack IN -o OUT.tern`

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tern_engine::chat::{ChatError, ChatMessage};
use tern_import::pack::{parse_ternary_layout, FloatMode, PackOptions};

#[derive(Args)]
pub struct PackArgs {
    /// A .gguf file or a Hugging Face model directory (config.json + *.safetensors).
    pub input: PathBuf,
    /// Output .tern file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Ternary weight layout: 2bit (2 bits/weight) or base3 (5 trits per byte, 1.6 bits/weight).
    #[arg(long, default_value = "2bit")]
    pub ternary: String,
    /// Float tensors: raw, neuzip (lossless), neuzip-lossy3, neuzip-lossy1, neuzip-lossy0.
    #[arg(long, default_value = "raw")]
    pub floats: String,
    /// BitNet activation scheme: a8 (b1.58) or a4.8.
    #[arg(long)]
    pub activations: Option<String>,
    /// NeuZip layout of float tensors packed with --floats neuzip*: 2 (default: many short rANS
    /// lanes, fast GPU decode) or 1 (~1% smaller, slow GPU decode). Both load.
    #[arg(long, default_value_t = 2)]
    pub neuzip_layout: u8,
}

pub fn options(a: &PackArgs) -> Result<PackOptions> {
    let activations = match a.activations.as_deref() {
        None => None,
        Some("a8") => Some(tern_format::ActivationScheme::A8),
        Some("a4.8") => Some(tern_format::ActivationScheme::A4_8),
        Some(x) => anyhow::bail!("--activations {x:?}: expected a8 or a4.8"),
    };
    Ok(PackOptions {
        ternary: parse_ternary_layout(&a.ternary)?,
        floats: a.floats.parse::<FloatMode>()?,
        activations,
        neuzip_layout: match a.neuzip_layout {
            l @ (1 | 2) => l,
            l => anyhow::bail!("--neuzip-layout {l}: expected 1 or 2"),
        },
    })
}

/// The chat template the input carries (GGUF `tokenizer.chat_template`, or an HF directory's
/// tokenizer_config.json), rendered once for a short conversation before anything is written: a
/// template that does not parse or runs past the template limits would fail every `chat` later,
/// so it is refused at pack time (other render errors — a template that needs variables tern
/// does not pass — are left to `chat`).
fn check_chat_template(input: &std::path::Path, opts: &PackOptions) -> Result<()> {
    let spec = if input.is_dir() {
        tern_import::hf::hf_meta(input, opts)?.tokenizer
    } else {
        match tern_import::gguf::GgufFile::open(input) {
            Ok(g) => tern_import::gguf_meta::tokenizer_spec(&g)?,
            Err(_) => return Ok(()), // the importer reports the file's own error
        }
    };
    let Some(t) = spec.as_ref().and_then(|s| s.chat_template.as_deref()) else {
        return Ok(());
    };
    let msgs = [
        ChatMessage::new("user", "Hello"),
        ChatMessage::new("assistant", "Hi"),
        ChatMessage::new("user", "Bye"),
    ];
    match tern_engine::chat::render_chat(t, &msgs, true, "", "") {
        Err(e @ (ChatError::Syntax(_) | ChatError::Limit(_))) => {
            anyhow::bail!("the model's chat template would fail every chat: {e}")
        }
        _ => Ok(()),
    }
}

pub fn run(a: PackArgs) -> Result<ExitCode> {
    let opts = options(&a)?;
    check_chat_template(&a.input, &opts)
        .with_context(|| format!("packing {}", a.input.display()))?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} packing [{bar:40}] {pos}/{len} tensors {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()) // ok: constant template
            .progress_chars("=> "),
    );
    let t0 = std::time::Instant::now();
    let meta = tern_import::import_path(&a.input, &a.output, &opts, &mut |done, total, name| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(name.to_string());
    })
    .with_context(|| format!("packing {}", a.input.display()))?;
    bar.finish_and_clear();
    let size = std::fs::metadata(&a.output)?.len();
    eprintln!(
        "packed {} ({:?}, {} layers) -> {} ({:.1} MiB) in {:.1}s",
        a.input.display(),
        meta.arch,
        meta.hparams.n_layer,
        a.output.display(),
        size as f64 / (1u64 << 20) as f64,
        t0.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
