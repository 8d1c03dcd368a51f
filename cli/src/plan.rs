//! `tern plan` (how a model and a context fit a memory budget, before loading anything) and the
//! planner's hooks in `run`, `chat` (`--max-memory B -c auto`) and `bench` (a context above the
//! plan's refused before anything is allocated). The planner itself: `tern_engine::plan`;
//! user documentation: `docs/planner.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use tern_engine::{KvQuant, LoadOptions, Plan};

#[derive(Args)]
pub struct PlanArgs {
    /// A .tern (or .gguf) model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    /// The context to fit: pick the best-quality KV format whose largest context reaches it.
    #[arg(long = "context")]
    pub context: Option<u64>,
    /// Print JSON (`docs/planner.md` has the schema).
    #[arg(long)]
    pub json: bool,
    /// `--device` (which backend the plan is for; default auto, as loading) and `--max-memory`
    /// (the budget; required).
    #[command(flatten)]
    pub load: crate::load::DeviceArgs,
}

/// `-c`/`--ctx-size`: a number of positions (0: the model's training context, capped at 4096)
/// or `auto` (with `--max-memory`: the largest context of the KV format within the budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextArg {
    Fixed(usize),
    Auto,
}

impl FromStr for ContextArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(ContextArg::Auto);
        }
        s.trim()
            .parse()
            .map(ContextArg::Fixed)
            .map_err(|_| format!("-c {s:?}: expected a number of positions or `auto`"))
    }
}

impl ContextArg {
    /// The positions (`Auto` must have been resolved by [`resolve_context`] first).
    pub fn positions(self) -> Result<usize> {
        match self {
            ContextArg::Fixed(n) => Ok(n),
            ContextArg::Auto => bail!("-c auto needs --max-memory (the budget the plan fits)"),
        }
    }
}

/// The plan's JSON (`docs/planner.md`): the fields exactly, and a few more.
pub fn plan_json(p: &Plan) -> serde_json::Value {
    let configs: Vec<_> = p
        .configs
        .iter()
        .map(|c| {
            json!({
                "kv": c.kv.name(),
                "kv_bytes_per_token": c.kv_bytes_per_token,
                "max_context": c.max_context,
                "budget_context": c.budget_context,
            })
        })
        .collect();
    json!({
        "budget_bytes": p.budget_bytes,
        "weights_bytes": p.weights_bytes,
        "scratch_bytes": p.scratch_bytes,
        "configs": configs,
        "chosen": p.chosen.map(|c| json!({"kv": c.kv.name(), "context": c.context})),
        "reserve_bytes": p.reserve_bytes,
        "batch": p.batch,
        "context_cap": p.context_cap,
        "context": p.context,
        "min_budget_bytes": p.min_budget_bytes,
        "backend": p.backend.to_string(),
        "device": p.device,
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

pub fn run(a: PlanArgs) -> Result<ExitCode> {
    if a.load.max_memory.is_none() {
        bail!("tern plan needs --max-memory BYTES (the budget to fit)");
    }
    let lo = a.load.load_options(
        crate::load::DeviceArgs::DEFAULT,
        &crate::numerics::NumericsArgs::default(),
    )?;
    let path = crate::models::resolve(a.model.as_deref())?;
    let p = tern_engine::plan(&path, &lo, a.context)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&plan_json(&p))?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("model:    {}", path.display());
    println!("device:   {}", p.device);
    println!(
        "budget:   {:>10.2} MiB ({} bytes)",
        mib(p.budget_bytes),
        p.budget_bytes
    );
    println!("weights:  {:>10.2} MiB", mib(p.weights_bytes));
    println!(
        "scratch:  {:>10.2} MiB (batches of {} tokens)",
        mib(p.scratch_bytes),
        p.batch
    );
    if p.reserve_bytes > 0 {
        println!("reserve:  {:>10.2} MiB", mib(p.reserve_bytes));
    }
    if let Some(m) = p.min_budget_bytes.filter(|&m| m > p.budget_bytes) {
        println!(
            "the model does not load under this budget: the smallest is {:.2} MiB",
            mib(m)
        );
    }
    println!(
        "largest context per KV format (capped at the training context, {}):",
        p.context_cap
    );
    println!(
        "  {:<5} {:>12} {:>12} {:>14}",
        "kv", "bytes/token", "max context", "budget holds"
    );
    for c in &p.configs {
        println!(
            "  {:<5} {:>12} {:>12} {:>14}",
            c.kv.name(),
            c.kv_bytes_per_token,
            c.max_context,
            c.budget_context
        );
    }
    match (a.context, p.chosen) {
        (Some(_), Some(c)) => println!("chosen:   --kv {} -c {}", c.kv.name(), c.context),
        (Some(n), None) => {
            println!("chosen:   none (no KV format fits {n} positions in this budget)")
        }
        (None, _) => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `run`/`chat`: with `--max-memory`, plan before loading: `-c auto` becomes the largest context
/// of the KV format asked for (`--kv`, or the default) within the budget, said on stderr; a
/// fixed context above the plan's is refused (typed, naming the plan) before anything is
/// allocated. Without `--max-memory`, `-c auto` is an error.
pub fn resolve_context(
    model: Option<&std::path::Path>,
    lo: &LoadOptions,
    kv: KvQuant,
    ctx: ContextArg,
) -> Result<ContextArg> {
    if lo.max_memory.is_none() {
        ctx.positions()?;
        return Ok(ctx);
    }
    let path = crate::models::resolve(model)?;
    let p = tern_engine::plan(&path, lo, None)?;
    let n = match ctx {
        ContextArg::Auto => {
            let n = p.auto_context(kv)?;
            eprintln!(
                "plan: -c auto = {n} positions of KV format {} on {} within {:.2} MiB \
                 (weights {:.2} MiB, scratch {:.2} MiB, KV {:.2} MiB)",
                kv.name(),
                p.device,
                mib(p.budget_bytes),
                mib(p.weights_bytes),
                mib(p.scratch_bytes),
                mib(p.kv_bytes(kv, n)),
            );
            n
        }
        ContextArg::Fixed(0) => {
            let path_ctx = tern_engine::SessionOptions::DEFAULT_MAX_CTX as u64;
            let n = p.context_cap.min(path_ctx);
            p.check(kv, n)?;
            return Ok(ctx);
        }
        ContextArg::Fixed(n) => {
            p.check(kv, n as u64)?;
            n as u64
        }
    };
    Ok(ContextArg::Fixed(n as usize))
}

/// `bench`: with `--max-memory`, refuse a session above the plan's largest context (typed,
/// naming the plan) before loading.
pub fn check_bench(
    path: &std::path::Path,
    lo: &LoadOptions,
    kv: KvQuant,
    n_ctx: u64,
) -> Result<()> {
    if lo.max_memory.is_none() {
        return Ok(());
    }
    tern_engine::plan(path, lo, None)?.check(kv, n_ctx)?;
    Ok(())
}
