//! `tern perplexity`: llama-perplexity-compatible perplexity of a text file, scored with the fused
//! Cut-Cross-Entropy path (no logit matrix), with the scoring stage's peak heap measured.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tern_engine::session::Model;
use tern_engine::{PerplexityOptions, ScoreObserver};

#[derive(Args)]
pub struct PerplexityArgs {
    /// A .tern (or .gguf) model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    /// The text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Window size in tokens (llama-perplexity's -c); the file needs at least twice as many tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Tokens per forward call (0 = min(c, 512)).
    #[arg(short = 'b', long = "batch-size", default_value_t = 0)]
    pub batch: usize,
    /// Score only the first N windows (llama-perplexity's --chunks).
    #[arg(long)]
    pub chunks: Option<usize>,
    #[command(flatten)]
    pub numerics: crate::numerics::NumericsArgs,
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub load: crate::load::DeviceArgs,
}

/// Load the MODEL argument (a .tern, a .gguf packed once into the cache, or the default model)
/// as `--device` (default auto), `--max-memory` and `--llama-cpp-numerics` say. On the GPU the
/// forward pass and the fused CCE head run there (`peak_scoring_bytes` then counts only host
/// memory).
pub fn load_model(
    model: Option<&std::path::Path>,
    load: &crate::load::DeviceArgs,
    numerics: &crate::numerics::NumericsArgs,
) -> Result<Model> {
    let lo = load.load_options(crate::load::DeviceArgs::DEFAULT, numerics)?;
    let mut m = crate::run::load(model, &lo)?;
    numerics.apply(&mut m)?;
    Ok(m)
}

/// Progress bar + peak heap of the scoring stages.
struct Observer {
    bar: ProgressBar,
    baseline: usize,
    peak_extra: usize,
}

impl ScoreObserver for Observer {
    fn scoring_started(&mut self) {
        self.baseline = crate::alloc::reset_peak();
    }
    fn scoring_finished(&mut self) {
        let extra = crate::alloc::peak().saturating_sub(self.baseline);
        self.peak_extra = self.peak_extra.max(extra);
    }
    fn progress(&mut self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
    }
}

pub fn run(a: PerplexityArgs) -> Result<ExitCode> {
    let raw = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    if raw.is_empty() {
        bail!("{} is empty: nothing to score", a.file.display());
    }
    let text = String::from_utf8(raw)
        .map_err(|e| anyhow::anyhow!("{} is not UTF-8 text: {e}", a.file.display()))?;
    let model = load_model(a.model.as_deref(), &a.load, &a.numerics)?;
    let n_ctx_train = model.meta().hparams.n_ctx_train as usize;
    if a.ctx > n_ctx_train {
        bail!(
            "-c {} is larger than the model's training context ({n_ctx_train})",
            a.ctx
        );
    }
    let kv = a.kv.spec(&model, &a.numerics)?;
    let tokens = model.perplexity_tokens(&text)?;
    let opts = PerplexityOptions {
        kv,
        n_ctx: a.ctx,
        batch: a.batch,
        windows: a
            .chunks
            .map(|n| (0..n.min(tokens.len() / a.ctx.max(1))).collect()),
        ..PerplexityOptions::default()
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} scoring [{bar:40}] {pos}/{len} tokens ({rate} tokens/s, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()) // ok: constant template
        .with_key(
            "rate",
            |st: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{}", crate::run::human_rate(st.per_sec()));
            },
        )
        .progress_chars("=> "),
    );
    let mut obs = Observer {
        bar,
        baseline: 0,
        peak_extra: 0,
    };
    let t0 = Instant::now();
    let r = model.perplexity(&tokens, &opts, &mut obs);
    obs.bar.finish_and_clear();
    let r = r?;
    let secs = t0.elapsed().as_secs_f64();
    let n_vocab = model.n_vocab();
    let batch = if a.batch == 0 {
        a.ctx.min(512)
    } else {
        a.batch
    };
    // What the plain path would hold for one batch: its [batch, n_vocab] f32 logits.
    let materialized = batch.min(a.ctx) * n_vocab * 4;
    if a.json {
        let j = serde_json::json!({
            "ppl": r.ppl,
            "ppl_second_half": r.ppl_second_half,
            "ppl_second_half_stderr": r.ppl_second_half_stderr,
            "tokens": r.tokens,
            "n_ctx": r.n_ctx,
            "windows": r.windows.len(),
            "scored_tokens": r.scored,
            "scored_tokens_second_half": r.scored_second_half,
            "peak_scoring_bytes": obs.peak_extra,
            "materialized_logits_bytes_per_batch": materialized,
            "seconds": secs,
            "kv": a.kv.name(&a.numerics),
            "minicache": kv.minicache.map(|m| format!("{},{},{}", m.start_layer, m.t, m.gamma)),
            "kv_bytes_per_token": r.kv_bytes_per_token,
        });
        println!("{j}");
    } else {
        println!(
            "{} tokens, {} windows of {}",
            r.tokens,
            r.windows.len(),
            r.n_ctx
        );
        println!(
            "perplexity over all {} predicted tokens: {:.4}",
            r.scored, r.ppl
        );
        println!(
            "perplexity over the second half of each window ({} tokens, llama-perplexity's figure): {:.4} +/- {:.5}",
            r.scored_second_half, r.ppl_second_half, r.ppl_second_half_stderr
        );
        println!("KV cache: {:.1} bytes per token", r.kv_bytes_per_token);
        eprintln!(
            "{:.1}s ({} tokens/s); scoring stage peak heap {} bytes (a materialized [{batch}, {n_vocab}] logit batch would be {materialized})",
            secs,
            crate::run::human_rate(r.scored as f64 / secs.max(1e-9)),
            obs.peak_extra
        );
    }
    Ok(ExitCode::SUCCESS)
}
