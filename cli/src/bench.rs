//! `tern bench`: llama-bench-style throughput (pp / tg tests, t/s ± sd over repetitions) plus a
//! memory breakdown and the dispatches per decoded token. Every timed region ends with the
//! results on the host (logits read back), so GPU work is waited for inside it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use tern_engine::session::Session;
use tern_engine::{BackendKind, Verb};

#[derive(Args)]
pub struct BenchArgs {
    /// A .tern model; default: SmolLM2-135M-Instruct.
    pub model: Option<PathBuf>,
    /// Prompt tokens of the prefill test (pp<P>; 0 = skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the decode test (tg<N>; 0 = skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Tokens already in the KV cache before each test (llama-bench `-d`).
    #[arg(short = 'd', long = "depth", default_value_t = 0)]
    pub depth: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Per-kernel GPU timestamps of one decode step and of one pp<P> prefill (needs
    /// TIMESTAMP_QUERY).
    #[arg(long)]
    pub profile: bool,
    /// `--device` (default here: gpu, the engine this command measures) and `--max-memory` (the
    /// GPU's peak allocation is printed against it).
    #[command(flatten)]
    pub load: crate::load::DeviceArgs,
    #[command(flatten)]
    pub numerics: crate::numerics::NumericsArgs,
    /// Run the ternary linears' inputs as BitNet `a8` (INT8 absmax) or `a4.8` (INT4 absmean,
    /// TopK-50% + INT8, INT8 down) instead of the file's scheme: the same weights either way.
    /// The output says which scheme ran and whether it overrides the file.
    #[arg(long)]
    pub activations: Option<String>,
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
}

/// The name of an activation scheme (`a8`, `a4.8`, `float` or `custom`).
fn scheme_name(s: tern_format::ActivationScheme) -> &'static str {
    use tern_format::ActivationScheme as A;
    match s {
        x if x == A::A8 => "a8",
        x if x == A::A4_8 => "a4.8",
        x if x == A::FLOAT => "float",
        _ => "custom",
    }
}

/// Mean and sample standard deviation.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

/// Deterministic pseudo-random token ids (speed does not depend on them).
fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab.max(1) as u64) as u32
        })
        .collect()
}

/// Bytes one decode step reads (issue 15), by part: `weights` — every weight tensor as held
/// (the report's bytes), the token embedding as one row unless it is also the head (tied);
/// `kv` — the cache at the benchmark's depth (`kv_bytes_per_token` × (depth + 1) positions);
/// `activations` — the f32 vectors a layer's ops read once each (hidden state for the two norms
/// and the two residual adds, q/k/v, the attention output, gate/up, the FFN's input to down) and
/// the head's normed row, from the hyperparameters.
fn bytes_read_per_token(
    model: &tern_engine::Model,
    kv_per_token: u64,
    depth: usize,
) -> serde_json::Value {
    let hp = &model.meta().hparams;
    let tensors = model.report().memory.tensors;
    let emb = "token_embd.weight";
    let mut weights: u64 = 0;
    for t in &tensors {
        if t.name == emb && !hp.tied_embeddings {
            weights += t.bytes / u64::from(hp.n_vocab.max(1));
        } else {
            weights += t.bytes;
        }
    }
    let kv = kv_per_token.saturating_mul(depth as u64 + 1);
    let (d, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
    let (q, kvd) = (
        u64::from(hp.n_head) * u64::from(hp.head_dim),
        u64::from(hp.n_head_kv) * u64::from(hp.head_dim),
    );
    let per_layer = 4 * (4 * d + q + 2 * kvd + q + 3 * ff);
    let activations = per_layer * u64::from(hp.n_layer) + 4 * d;
    json!({
        "weights": weights,
        "kv": kv,
        "activations": activations,
        "total": weights + kv + activations,
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    if a.reps == 0 {
        bail!("-r must be at least 1");
    }
    let lo = a.load.load_options(tern_engine::Device::Gpu, &a.numerics)?;
    let path = crate::models::resolve(a.model.as_deref())?;
    let acts = match a.activations.as_deref() {
        None => None,
        Some("a8") => Some(tern_format::ActivationScheme::A8),
        Some("a4.8") => Some(tern_format::ActivationScheme::A4_8),
        Some(x) => bail!("--activations {x:?}: expected a8 or a4.8"),
    };
    let t0 = Instant::now();
    let lo = tern_engine::LoadOptions {
        activations: acts,
        ..lo
    };
    // Every position a test uses: the depth and the longer test (no more).
    let n_ctx = (a.depth + a.n_prompt.max(a.n_gen).max(1)).max(64);
    crate::plan::check_bench(&path, &lo, a.kv.options()?.format, n_ctx as u64)?;
    let mut model = crate::run::load(Some(&path), &lo)?;
    let file_scheme = scheme_name(tern_format::TernFile::open(&path)?.meta().activations);
    let ran_scheme = scheme_name(model.meta().activations);
    let overridden = acts.is_some() && ran_scheme != file_scheme;
    a.numerics.apply(&mut model)?;
    let load_secs = t0.elapsed().as_secs_f64();
    let vocab = model.n_vocab();
    if n_ctx > model.meta().hparams.n_ctx_train as usize {
        log::warn!(
            "depth + test length {n_ctx} exceeds the training context {}",
            model.meta().hparams.n_ctx_train
        );
    }
    let mut s = Session::with_options(
        &model,
        &tern_engine::SessionOptions {
            n_ctx,
            kv: a.kv.options(&a.numerics)?,
            ..Default::default()
        },
    )?;
    let depth_toks = tokens(a.depth, vocab, 7);

    let mut results = Vec::new();
    let mut run_test =
        |name: String, n: usize, f: &mut dyn FnMut(&mut Session) -> Result<()>| -> Result<()> {
            let mut ts = Vec::with_capacity(a.reps);
            // One warm-up (pipelines compiled, plans recorded), not timed.
            for rep in 0..=a.reps {
                s.reset();
                if !depth_toks.is_empty() {
                    s.eval(&depth_toks)?;
                }
                let t = Instant::now();
                f(&mut s)?;
                let dt = t.elapsed().as_secs_f64();
                if rep > 0 {
                    ts.push(n as f64 / dt);
                }
            }
            let (m, sd) = mean_sd(&ts);
            results.push((name, n, m, sd, ts));
            Ok(())
        };
    if a.n_prompt > 0 {
        let p = tokens(a.n_prompt, vocab, 1);
        run_test(format!("pp{}", a.n_prompt), a.n_prompt, &mut |s| {
            s.eval(&p).map(|_| ()).map_err(Into::into)
        })?;
    }
    // Decode steps as `generate` runs them (`Session::eval_next`, a greedy sampler: on the GPU
    // the argmax comes back, not the logits), each step fed the token the last one picked (the
    // first: a fixed token), so the GPU runs each greedy step ahead as in generation (README,
    // "Greedy steps run ahead"). The readback counters of the last repetition give the host
    // round trips and bytes read back per decoded token.
    let mut transfers = None;
    let gpu_verbs = model.capabilities().has(Verb::HostTransfers);
    if a.n_gen > 0 {
        let first = tokens(1, vocab, 2).first().copied().unwrap_or(0);
        let mut sampler = tern_engine::Sampler::new(tern_engine::SamplingParams::greedy())?;
        run_test(format!("tg{}", a.n_gen), a.n_gen, &mut |s| {
            if gpu_verbs {
                s.reset_host_transfers()?;
            }
            let mut t = first;
            for _ in 0..a.n_gen {
                t = s.eval_next(t, &mut sampler)?;
            }
            transfers = gpu_verbs.then(|| s.host_transfers()).transpose()?;
            Ok(())
        })?;
    }
    let per_token = |v: u64| v as f64 / a.n_gen.max(1) as f64;
    let round_trips = transfers.map(|x| per_token(x.round_trips));
    let readback = transfers.map(|x| per_token(x.readback_bytes));

    // Memory and dispatches.
    let file_bytes: u64 = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut mem = serde_json::Map::new();
    let mut dispatches = None;
    let mut profile = None;
    let mut profile_prefill = None;
    let mut peak_line = None;
    let session = s.report()?;
    if model.report().backend == BackendKind::Gpu {
        let plan = model.report().memory;
        let by_enc: serde_json::Map<String, serde_json::Value> = plan
            .by_encoding
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        mem.insert("weights_by_encoding".into(), json!(by_enc));
        mem.insert("weights".into(), json!(plan.weight_bytes));
        mem.insert("jit_scratch".into(), json!(plan.jit_scratch_bytes));
        mem.insert("budget".into(), json!(plan.budget));
        let tensors: Vec<_> = plan
            .tensors
            .iter()
            .filter(|t| t.placement != "resident")
            .map(|t| json!({"name": t.name, "encoding": t.encoding, "placement": t.placement, "bytes": t.bytes}))
            .collect();
        mem.insert("non_resident_tensors".into(), json!(tensors));
        mem.insert("kv".into(), json!(session.kv_bytes));
        if let Some(b) = session.scratch_bytes {
            mem.insert("scratch".into(), json!(b));
        }
        dispatches = session.dispatches_per_token;
        if a.profile {
            s.reset();
            s.eval(&tokens(a.depth.max(1), vocab, 3))?;
            profile = Some(
                s.profile_decode_step(1)?
                    .into_iter()
                    .map(|k| (k.kernel, k.dispatches, k.micros))
                    .collect(),
            );
            if a.n_prompt > 0 {
                s.reset();
                if a.depth > 0 {
                    s.eval(&tokens(a.depth, vocab, 3))?;
                }
                profile_prefill = Some(
                    s.profile_prefill(&tokens(a.n_prompt, vocab, 1))?
                        .into_iter()
                        .map(|k| (k.kernel, k.dispatches, k.micros))
                        .collect(),
                );
            }
        }
        let m = model.report().memory;
        mem.insert("gpu_allocated_peak".into(), json!(m.gpu_allocated_peak));
        mem.insert("gpu_allocated_now".into(), json!(m.gpu_allocated_now));
        mem.insert("gpu_min_budget".into(), json!(m.gpu_min_budget));
        mem.insert(
            "gpu_allocation_measured".into(),
            json!(m.gpu_allocation_measured),
        );
        if let (Some(peak), Some(b)) = (m.gpu_allocated_peak, m.budget) {
            mem.insert("gpu_peak_within_budget".into(), json!(peak <= b));
        }
        peak_line = m.gpu_allocated_peak.map(|peak| {
            let how = if m.gpu_allocation_measured == Some(true) {
                "measured by the driver's allocator"
            } else {
                "counted by tern"
            };
            match m.budget {
                Some(b) => format!(
                    "GPU peak allocation: {:.2} MiB of a {:.2} MiB budget ({:.1}%, {how}; \
                     smallest budget {:.2} MiB)",
                    mib(peak),
                    mib(b),
                    100.0 * peak as f64 / b.max(1) as f64,
                    mib(m.gpu_min_budget.unwrap_or(0))
                ),
                None => format!(
                    "GPU peak allocation: {:.2} MiB (no budget; {how})",
                    mib(peak)
                ),
            }
        });
    } else {
        mem.insert("weights".into(), json!(file_bytes));
        if let Some(b) = model.report().memory.host_resident_bytes {
            mem.insert("cpu_resident_weights".into(), json!(b));
        }
        mem.insert("kv".into(), json!(session.kv_bytes));
    }

    // Measured sparsity of the quantized inputs per linear kind: a pass of its own (the counters
    // cost dispatches; the timed runs above did not carry them), over the prefill's tokens.
    let sparsity = if model.meta().activations != tern_format::ActivationScheme::FLOAT
        && model.capabilities().has(Verb::ActivationSparsity)
    {
        s.reset();
        let n = a.n_prompt.clamp(1, 128);
        Some(s.measure_activation_sparsity(&tokens(n, vocab, 4))?)
    } else {
        None
    };
    let acts_json = json!({
        "scheme": ran_scheme,
        "file_scheme": file_scheme,
        "overridden": overridden,
    });
    let sparsity_json = sparsity.as_ref().map(|v| {
        v.iter()
            .map(
                |x| json!({"linear": x.linear, "zero_fraction": x.zero_fraction, "codes": x.codes}),
            )
            .collect::<Vec<_>>()
    });
    let device = model.device_name();
    if a.json {
        let tests: Vec<_> = results
            .iter()
            .map(|(name, n, m, sd, ts)| {
                json!({"test": name, "n_tokens": n, "depth": a.depth, "avg_ts": m, "stddev_ts": sd, "samples_ts": ts})
            })
            .collect();
        let prof_json = |p: &Vec<(String, u32, f64)>| {
            p.iter()
                .map(|(k, c, us)| json!({"kernel": k, "dispatches": c, "us": us}))
                .collect::<Vec<_>>()
        };
        let prof = profile.as_ref().map(prof_json);
        let prof_pp = profile_prefill.as_ref().map(prof_json);
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "model": path.display().to_string(),
                "file_bytes": file_bytes,
                "device": device,
                "load_secs": load_secs,
                "reps": a.reps,
                "tests": tests,
                "memory": mem,
                "dispatches_per_token": dispatches,
                "host_round_trips_per_token": round_trips,
                "readback_bytes_per_token": readback,
                "kv_bytes_per_token": session.kv_bytes_per_token,
                "bytes_read_per_token": bytes_read_per_token(&model, session.kv_bytes_per_token, a.depth),
                "kv": {"format": a.kv.name(&a.numerics), "minicache": a.kv.minicache},
                "profile_us_per_token": prof,
                "activations": acts_json,
                "activation_sparsity": sparsity_json,
                "profile_prefill_us": prof_pp,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let acts_label = if overridden {
        format!("{ran_scheme} (--activations, overriding the file's {file_scheme})")
    } else {
        format!("{ran_scheme} (the file's)")
    };
    println!("activations: {acts_label}");
    println!("| model | size | device | activations | test | t/s |");
    println!("| --- | ---: | --- | --- | ---: | ---: |");
    for (test, _, m, sd, _) in &results {
        let t = if a.depth > 0 {
            format!("{test} @ d{}", a.depth)
        } else {
            test.clone()
        };
        println!(
            "| {name} | {:.1} MiB | {device} | {ran_scheme} | {t} | {m:.2} ± {sd:.2} |",
            mib(file_bytes)
        );
    }
    println!();
    println!("memory:");
    for (k, v) in &mem {
        match v {
            serde_json::Value::Number(n) => {
                println!("  {k:<24} {:>10.2} MiB", mib(n.as_u64().unwrap_or(0)))
            }
            serde_json::Value::Object(o) => {
                println!("  {k}:");
                for (e, b) in o {
                    println!("    {e:<30} {:>10.2} MiB", mib(b.as_u64().unwrap_or(0)));
                }
            }
            _ => {}
        }
    }
    if let Some(l) = peak_line {
        println!("{l}");
    }
    if let (Some(r), Some(b)) = (round_trips, readback) {
        println!("host round trips per decoded token: {r:.2} ({b:.0} bytes read back)");
    }
    if let Some(d) = dispatches {
        println!("dispatches per decoded token: {d}");
    }
    match &sparsity {
        Some(v) if !v.is_empty() => {
            println!("activation sparsity (zero codes of the quantized inputs, measured):");
            for x in v {
                println!(
                    "  {:<10} {:>6.2}%  ({} codes)",
                    x.linear,
                    100.0 * x.zero_fraction,
                    x.codes
                );
            }
        }
        Some(_) => {}
        None if model.meta().activations != tern_format::ActivationScheme::FLOAT => {
            println!("activation sparsity: not measured on this backend (GPU only)")
        }
        None => {}
    }
    let prefill = profile_prefill.map(|p| (format!("a pp{} prefill", a.n_prompt), p));
    for (what, p) in profile
        .map(|p| ("one decode step".to_string(), p))
        .into_iter()
        .chain(prefill)
    {
        let total: f64 = p.iter().map(|x| x.2).sum();
        println!("GPU time of {what}: {total:.1} µs");
        for (k, c, us) in p {
            println!(
                "  {k:<36} {c:>5} × {:>9.1} µs  {:>5.1}%",
                us,
                100.0 * us / total.max(1e-9)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
