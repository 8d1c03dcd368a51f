//! `tern score`: rank candidate continuations of a context by their log-likelihood.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args)]
pub struct ScoreArgs {
    /// A .tern (or .gguf) model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    /// The context (tokenized with BOS when the model adds one).
    #[arg(long)]
    pub context: String,
    /// A continuation to score (repeatable). It is tokenized on its own and appended to the
    /// context's tokens, so include a leading space where the text needs one (" Paris").
    #[arg(long = "candidates", alias = "candidate", required = true)]
    pub candidates: Vec<String>,
    /// Treat special-token text (like <|im_start|>) as plain text.
    #[arg(long)]
    pub no_special: bool,
    #[command(flatten)]
    pub numerics: crate::numerics::NumericsArgs,
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
    #[command(flatten)]
    pub load: crate::load::DeviceArgs,
}

/// Ranks (1 = best) of `values`, higher is better; ties keep input order.
fn ranks(values: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    let mut r = vec![0; values.len()];
    for (rank, &i) in order.iter().enumerate() {
        r[i] = rank + 1;
    }
    r
}

pub fn run(a: ScoreArgs) -> Result<ExitCode> {
    let model = crate::perplexity::load_model(a.model.as_deref(), &a.load, &a.numerics)?;
    let score_opts = tern_engine::ScoreOptions {
        kv: a.kv.spec(&model, &a.numerics)?,
        ..Default::default()
    };
    let tok = model.tokenizer()?;
    let special = !a.no_special;
    let ctx = tok.encode_with(&a.context, true, special)?;
    if ctx.is_empty() {
        bail!("the context is empty and the model adds no BOS: give a --context to condition on");
    }
    let mut results = Vec::new();
    for (i, cand) in a.candidates.iter().enumerate() {
        let ids = tok.encode_with(cand, false, special)?;
        if ids.is_empty() {
            bail!("candidate {} ({cand:?}) has no tokens", i + 1);
        }
        let mut all = ctx.clone();
        all.extend_from_slice(&ids);
        let lp = model.score_with(&all, &score_opts, &mut tern_engine::NoObserver)?;
        // lp[p] scores all[p + 1]: the candidate's tokens are the last ids.len() values.
        let own = lp.get(ctx.len() - 1..).unwrap_or_default().to_vec();
        let sum: f64 = own.iter().map(|&v| v as f64).sum();
        let pieces: Vec<String> = ids
            .iter()
            .map(|&t| {
                tok.decode_bytes(&[t])
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            })
            .collect();
        results.push((cand, ids, pieces, own, sum));
    }
    let sums: Vec<f64> = results.iter().map(|r| r.4).collect();
    let means: Vec<f64> = results.iter().map(|r| r.4 / r.1.len() as f64).collect();
    let (rank_sum, rank_mean) = (ranks(&sums), ranks(&means));
    let cands: Vec<serde_json::Value> = results
        .iter()
        .enumerate()
        .map(|(i, (text, ids, pieces, lp, sum))| {
            serde_json::json!({
                "text": text,
                "tokens": ids,
                "pieces": pieces,
                "logprobs": lp,
                "sum": sum,
                "mean": means[i],
                "rank": rank_sum[i],
                "rank_by_mean": rank_mean[i],
            })
        })
        .collect();
    let best = rank_sum.iter().position(|&r| r == 1).unwrap_or(0);
    let best_mean = rank_mean.iter().position(|&r| r == 1).unwrap_or(0);
    let j = serde_json::json!({
        "context_tokens": ctx.len(),
        "candidates": cands,
        "best": a.candidates.get(best),
        "best_by_mean": a.candidates.get(best_mean),
    });
    println!("{}", serde_json::to_string_pretty(&j)?);
    Ok(ExitCode::SUCCESS)
}
