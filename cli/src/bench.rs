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
    /// A .tern model; default: SmolLM2-135M-Instruct (or give -m).
    pub model: Option<PathBuf>,
    /// Models to measure (llama-bench `-m`, repeatable), after MODEL if given.
    #[arg(short = 'm', long = "model")]
    pub models: Vec<PathBuf>,
    /// Prompt tokens of the prefill tests (pp<P>; comma list; 0 = skip).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generated tokens of the decode tests (tg<N>; comma list; 0 = skip).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Repetitions of each test (comma list: each value is its own run).
    #[arg(
        short = 'r',
        long = "repetitions",
        value_delimiter = ',',
        default_value = "5"
    )]
    pub reps: Vec<usize>,
    /// Tokens already in the KV cache before each test (llama-bench `-d`; comma list).
    #[arg(
        short = 'd',
        long = "n-depth",
        alias = "depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub depth: Vec<usize>,
    /// Output as llama-bench: md (a table), csv, json (an array of rows), jsonl (a row a line).
    /// Without -o, one model and one value of each list: the table plus tern's memory report.
    #[arg(short = 'o', long = "output", value_parser = ["md", "csv", "json", "jsonl"])]
    pub output: Option<String>,
    /// tern's full one-run report as JSON (memory, dispatches, profile): one model, one value
    /// of each list.
    #[arg(long, conflicts_with = "output")]
    pub json: bool,
    /// Per-kernel GPU timestamps of one decode step and of one pp<P> prefill (needs
    /// TIMESTAMP_QUERY).
    #[arg(long)]
    pub profile: bool,
    /// `--device` (default auto: a hardware GPU, else the CPU; a software GPU adapter such as
    /// lavapipe is used only with `--device gpu`, with a warning) and `--max-memory` (the GPU's
    /// peak allocation is printed against it).
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

/// One run of the benchmark: one model, one value of each list.
struct One<'a> {
    model: Option<PathBuf>,
    n_prompt: usize,
    n_gen: usize,
    reps: usize,
    depth: usize,
    /// Print tern's report (`None`: only return the rows); `Some(true)`: as JSON.
    report: Option<bool>,
    profile: bool,
    load: crate::load::DeviceArgs,
    numerics: crate::numerics::NumericsArgs,
    activations: Option<String>,
    kv: &'a crate::kv::KvArgs,
}

/// One measured test, as llama-bench prints it (its JSON field names), plus tern's columns.
#[derive(serde::Serialize)]
struct Row {
    model_filename: String,
    model_size: u64,
    device: String,
    /// `tern` (the model's own numerics) or `llama.cpp` (`--llama-cpp-numerics`).
    numerics: String,
    /// The ternary linears' input scheme (`float` for non-BitNet models).
    activations: String,
    /// The KV cache format (type_k = type_v).
    type_k: String,
    type_v: String,
    test: String,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    n_reps: usize,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ts: Vec<f64>,
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    let models: Vec<Option<PathBuf>> = if a.model.is_none() && a.models.is_empty() {
        vec![None]
    } else {
        a.model.iter().chain(&a.models).cloned().map(Some).collect()
    };
    if a.reps.contains(&0) {
        bail!("-r must be at least 1");
    }
    let single = models.len() == 1
        && [&a.n_prompt, &a.n_gen, &a.reps, &a.depth]
            .iter()
            .all(|v| v.len() == 1);
    let report = match (&a.output, a.json) {
        (None, json) if single => Some(json),
        (None, true) => bail!("--json is tern's one-run report: give one model and one value per list, or use -o json"),
        _ => None,
    };
    if a.load.device.is_none() && !single {
        log::info!("device: auto (a hardware GPU, else the CPU)");
    }
    let mut rows = Vec::new();
    for m in &models {
        for &depth in &a.depth {
            for &reps in &a.reps {
                // One load per model and depth: every prompt and generation length of the lists.
                for (n_prompt, n_gen) in pairs(&a.n_prompt, &a.n_gen, report.is_some()) {
                    rows.extend(run_one(One {
                        model: m.clone(),
                        n_prompt,
                        n_gen,
                        reps,
                        depth,
                        report,
                        profile: a.profile,
                        load: a.load,
                        numerics: a.numerics,
                        activations: a.activations.clone(),
                        kv: &a.kv,
                    })?);
                }
            }
        }
    }
    let out = match a.output.as_deref() {
        None => return Ok(ExitCode::SUCCESS),
        Some(o) => o,
    };
    match out {
        "json" => println!("{}", serde_json::to_string_pretty(&rows)?),
        "jsonl" => {
            for r in &rows {
                println!("{}", serde_json::to_string(r)?);
            }
        }
        "csv" => {
            println!("model_filename,model_size,device,numerics,activations,type_k,type_v,test,n_prompt,n_gen,n_depth,n_reps,avg_ts,stddev_ts");
            for r in &rows {
                let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
                println!(
                    "{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.6}",
                    q(&r.model_filename),
                    r.model_size,
                    q(&r.device),
                    r.numerics,
                    r.activations,
                    r.type_k,
                    r.type_v,
                    r.test,
                    r.n_prompt,
                    r.n_gen,
                    r.n_depth,
                    r.n_reps,
                    r.avg_ts,
                    r.stddev_ts
                );
            }
        }
        _ => {
            println!("| model | size | device | numerics | kv | test | t/s |");
            println!("| --- | ---: | --- | --- | --- | ---: | ---: |");
            for r in &rows {
                println!(
                    "| {} | {:.1} MiB | {} | {} | {} | {} | {} ± {} |",
                    std::path::Path::new(&r.model_filename)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    mib(r.model_size),
                    r.device,
                    r.numerics,
                    r.type_k,
                    test_label(&r.test, r.n_depth),
                    crate::run::human_rate(r.avg_ts),
                    crate::run::human_rate(r.stddev_ts)
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The (pp, tg) runs of the lists: as llama-bench, each prompt length alone and each generation
/// length alone (a one-run report pairs the one value of each).
fn pairs(p: &[usize], n: &[usize], report: bool) -> Vec<(usize, usize)> {
    if report {
        return vec![(
            p.first().copied().unwrap_or(0),
            n.first().copied().unwrap_or(0),
        )];
    }
    let mut v: Vec<(usize, usize)> = p.iter().filter(|&&x| x > 0).map(|&x| (x, 0)).collect();
    v.extend(n.iter().filter(|&&x| x > 0).map(|&x| (0, x)));
    v
}

/// `pp64`, or `pp64 @ d512` at a depth.
fn test_label(test: &str, depth: usize) -> String {
    if depth > 0 {
        format!("{test} @ d{depth}")
    } else {
        test.to_string()
    }
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

fn run_one(a: One) -> Result<Vec<Row>> {
    let lo = a
        .load
        .load_options(tern_engine::Device::Auto, &a.numerics)?;
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
    crate::plan::check_bench(&path, &lo, a.kv.options(&a.numerics)?.format, n_ctx as u64)?;
    let mut model = crate::run::load(Some(&path), &lo)?;
    let file_scheme = scheme_name(tern_format::TernFile::open(&path)?.meta().activations);
    let ran_scheme = scheme_name(model.meta().activations);
    let overridden = acts.is_some() && ran_scheme != file_scheme;
    a.numerics.apply(&mut model)?;
    let load_secs = t0.elapsed().as_secs_f64();
    if model.device_name().contains("software adapter") {
        eprintln!(
            "warning: {} is a software GPU adapter (it runs on the CPU): its timings say nothing about a GPU",
            model.device_name()
        );
    }
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
    let sparsity = if a.report.is_some()
        && model.meta().activations != tern_format::ActivationScheme::FLOAT
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
    let numerics =
        if a.numerics.llama_cpp_numerics || session.numerics == tern_engine::Numerics::LlamaCpp {
            "llama.cpp"
        } else {
            "tern"
        };
    let kv_name = session.kv.quant.name().to_string();
    let rows: Vec<Row> = results
        .iter()
        .map(|(name, _, m, sd, ts)| Row {
            model_filename: path.display().to_string(),
            model_size: file_bytes,
            device: device.clone(),
            numerics: numerics.into(),
            activations: ran_scheme.into(),
            type_k: kv_name.clone(),
            type_v: kv_name.clone(),
            test: name.clone(),
            n_prompt: if name.starts_with("pp") {
                a.n_prompt
            } else {
                0
            },
            n_gen: if name.starts_with("tg") { a.n_gen } else { 0 },
            n_depth: a.depth,
            n_reps: a.reps,
            avg_ts: *m,
            stddev_ts: *sd,
            samples_ts: ts.clone(),
        })
        .collect();
    let Some(json_report) = a.report else {
        return Ok(rows);
    };
    if json_report {
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
                "cpu_kernels": tern_engine::cpu_kernel_path(),
                "prefill_path": model.prefill_path(),
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
        return Ok(rows);
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
    if device == "cpu" {
        println!("cpu kernels: {}", tern_engine::cpu_kernel_path());
    }
    if let Some(path) = model.prefill_path() {
        println!("prefill path: {path}");
    }
    println!("| model | size | device | numerics | activations | kv | test | t/s |");
    println!("| --- | ---: | --- | --- | --- | --- | ---: | ---: |");
    for (test, _, m, sd, _) in &results {
        println!(
            "| {name} | {:.1} MiB | {device} | {numerics} | {ran_scheme} | {kv_name} | {} | {} ± {} |",
            mib(file_bytes),
            test_label(test, a.depth),
            crate::run::human_rate(*m),
            crate::run::human_rate(*sd)
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
    Ok(rows)
}
