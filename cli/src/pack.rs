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
    // The output may not be the input (checked before the input is read at all, as the
    // importer does again).
    tern_format::output::refuse_input_as_output(&[a.input.as_path()], &a.output, "output")?;
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
    let file = tern_format::TernFile::open(&a.output)?;
    let (lines, saved) = savings(file.tensors());
    for l in lines {
        eprintln!("  {l}");
    }
    let neuzip = a.floats != "raw";
    let layout = a.neuzip_layout != 2;
    if neuzip && saved == 0 {
        eprintln!(
            "warning: --floats {} changed nothing: this model has no float tensor it applies to",
            a.floats
        );
    } else if neuzip && (saved as f64) < 0.01 * size as f64 {
        eprintln!(
            "warning: --floats {} saved only {} ({:.2}% of the file): this model's float tensors are small",
            a.floats,
            human_bytes(saved),
            100.0 * saved as f64 / size.max(1) as f64
        );
    }
    if layout && !neuzip {
        eprintln!("warning: --neuzip-layout changes nothing without --floats neuzip*");
    }
    Ok(ExitCode::SUCCESS)
}

/// `13.2 KiB`, `4.1 MiB`.
fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1048576.0 {
        format!("{:.1} MiB", b / 1048576.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// The component a tensor belongs to, by its (GGUF-style) name.
fn component(name: &str) -> &'static str {
    if name.starts_with("token_embd") {
        "embedding"
    } else if name.starts_with("output.") {
        "output head"
    } else if name.contains("norm") {
        "norms"
    } else {
        "linears"
    }
}

/// What each component holds and what NeuZip saved on it (its bytes against the decoded float
/// type's), one line each; and the bytes saved in all.
fn savings(tensors: &[tern_format::TensorInfo]) -> (Vec<String>, u64) {
    use std::collections::BTreeMap;
    // component -> (stored bytes, encodings, neuzip stored, neuzip decoded)
    let mut by: BTreeMap<&str, (u64, BTreeMap<String, usize>, u64, u64)> = BTreeMap::new();
    for t in tensors {
        let e = by.entry(component(&t.name)).or_default();
        e.0 += t.size;
        *e.1.entry(t.encoding.name()).or_default() += 1;
        if let tern_format::Encoding::NeuZip { dtype, .. } = t.encoding {
            e.2 += t.size;
            e.3 += t.n_elements() * dtype.size() as u64;
        }
    }
    let mut total = 0;
    let lines = by
        .iter()
        .map(|(c, (bytes, encs, nz, raw))| {
            let encs: Vec<String> = encs.iter().map(|(e, n)| format!("{n} × {e}")).collect();
            let mut l = format!("{c:<12} {:>10}  {}", human_bytes(*bytes), encs.join(", "));
            if *raw > 0 {
                let saved = raw.saturating_sub(*nz);
                total += saved;
                l.push_str(&format!(
                    "; neuzip saved {} of {} ({:.1}%)",
                    human_bytes(saved),
                    human_bytes(*raw),
                    100.0 * saved as f64 / *raw as f64
                ));
            }
            l
        })
        .collect();
    (lines, total)
}
