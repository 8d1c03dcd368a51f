//! `tern delta`: make, apply and inspect fine-tune deltas (`.ternd`, see `tern_format::delta`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use tern_format::delta::{self, DeltaFile};
use tern_format::TernFile;

#[derive(Args)]
pub struct DeltaArgs {
    #[command(subcommand)]
    cmd: DeltaCmd,
}

#[derive(Subcommand)]
enum DeltaCmd {
    /// Make a delta that turns BASE into TUNED (both .tern files).
    Create {
        #[arg(long)]
        base: PathBuf,
        #[arg(long)]
        tuned: PathBuf,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Worker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Print one line per tensor.
        #[arg(long)]
        per_tensor: bool,
    },
    /// Rebuild the tuned .tern file from its base and a delta (byte-identical to the original).
    Apply {
        #[arg(long)]
        base: PathBuf,
        #[arg(long)]
        delta: PathBuf,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Show a delta's base identity, sizes and per-tensor methods; with --base, check it applies.
    Inspect {
        delta: PathBuf,
        #[arg(long)]
        base: Option<PathBuf>,
        #[arg(long)]
        threads: Option<usize>,
    },
}

fn mb(x: u64) -> f64 {
    x as f64 / 1e6
}

pub fn run(a: DeltaArgs) -> Result<ExitCode> {
    match a.cmd {
        DeltaCmd::Create {
            base,
            tuned,
            output,
            threads,
            per_tensor,
        } => {
            let t0 = Instant::now();
            // The data-safety rule (docs/safety.md): an output is never an input.
            tern_format::output::refuse_input_as_output(
                &[base.as_path(), tuned.as_path()],
                &output,
                "output",
            )?;
            let b = TernFile::open(&base).with_context(|| format!("opening {}", base.display()))?;
            let t =
                TernFile::open(&tuned).with_context(|| format!("opening {}", tuned.display()))?;
            let (bytes, rep) =
                delta::create(&b, &t, threads.unwrap_or_else(delta::default_threads))?;
            tern_format::output::write_atomic(&output, &bytes)
                .with_context(|| format!("writing {}", output.display()))?;
            if per_tensor {
                for r in &rep.tensors {
                    println!(
                        "{:<40} {:<14} {:<12} {:>12} -> {:>12} ({:.1}%)",
                        r.name,
                        r.encoding,
                        r.method,
                        r.tuned_bytes,
                        r.delta_bytes,
                        100.0 * r.delta_bytes as f64 / r.tuned_bytes.max(1) as f64
                    );
                }
            }
            let mut by: std::collections::BTreeMap<&str, (u64, u64, usize)> = Default::default();
            for r in &rep.tensors {
                let e = by.entry(r.method.as_str()).or_default();
                e.0 += r.tuned_bytes;
                e.1 += r.delta_bytes;
                e.2 += 1;
            }
            for (m, (tb, db, n)) in by {
                eprintln!(
                    "  {m:<13} {n:>4} tensors  {:>10.2} MB -> {:>10.2} MB",
                    mb(tb),
                    mb(db)
                );
            }
            println!(
                "{}: {:.2} MB = {:.2}% of the tuned file ({:.2} MB), made in {:.2}s",
                output.display(),
                mb(rep.delta_bytes),
                100.0 * rep.delta_bytes as f64 / rep.tuned_bytes.max(1) as f64,
                mb(rep.tuned_bytes),
                t0.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        DeltaCmd::Apply {
            base,
            delta,
            output,
            threads,
        } => {
            let t0 = Instant::now();
            tern_format::output::refuse_input_as_output(
                &[base.as_path(), delta.as_path()],
                &output,
                "output",
            )?;
            let b = TernFile::open(&base).with_context(|| format!("opening {}", base.display()))?;
            let d =
                DeltaFile::open(&delta).with_context(|| format!("opening {}", delta.display()))?;
            let t1 = Instant::now();
            let n = d
                .apply_to_file(&b, &output, threads.unwrap_or_else(delta::default_threads))
                .with_context(|| format!("applying {}", delta.display()))?;
            println!(
                "{}: {:.2} MB rebuilt and checked in {:.2}s (open + validate {:.2}s)",
                output.display(),
                mb(n),
                t0.elapsed().as_secs_f64(),
                (t1 - t0).as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        DeltaCmd::Inspect {
            delta,
            base,
            threads,
        } => {
            let d =
                DeltaFile::open(&delta).with_context(|| format!("opening {}", delta.display()))?;
            let idx = d.index();
            println!("base identity  {:#018x}", d.base_id());
            println!(
                "tuned file     {} bytes, xxh3 {:#018x}",
                idx.tuned_size, idx.tuned_hash
            );
            println!(
                "delta          {} bytes ({:.2}% of the tuned file), {} tensors",
                d.len(),
                100.0 * d.len() as f64 / idx.tuned_size.max(1) as f64,
                idx.tensors.len()
            );
            for (name, tb, db, m) in d.tensor_sizes() {
                println!("  {name:<40} {m:<12} {tb:>12} -> {db:>12}");
            }
            if let Some(base) = base {
                let b = TernFile::open(&base)?;
                let t0 = Instant::now();
                let f = d.apply_open(&b, threads.unwrap_or_else(delta::default_threads))?;
                println!(
                    "applies to {}: {} tensors rebuilt and checked in {:.3}s",
                    base.display(),
                    f.tensors().len(),
                    t0.elapsed().as_secs_f64()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
