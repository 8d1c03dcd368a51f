//! `--device` and `--max-memory`, declared once and flattened into `run`, `chat`, `perplexity`,
//! `score` and `bench`: parsed here, at the edge, into the engine's typed [`LoadOptions`].

use anyhow::{bail, Context, Result};
use clap::Args;
use tern_engine::session::{Device, LoadOptions};

#[derive(Args, Clone, Copy, Debug, Default)]
pub struct DeviceArgs {
    /// Device: cpu, gpu (the GPU engine; software adapters such as lavapipe count) or auto (a
    /// hardware GPU when present and the model has kernels for it, else the CPU). Default: auto;
    /// `tern bench`: gpu (it measures the GPU engine).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<Device>,
    /// GPU memory budget (bytes, or with K/M/G) for everything the model and session allocate:
    /// NeuZip tensors that do not fit decoded stay compressed and are decoded just in time; a
    /// budget below the smallest that works is refused, naming it. The plan is printed with -v.
    /// On the CPU: NeuZip matrices stay compressed when decoding them would exceed it.
    #[arg(long, value_parser = parse_max_memory)]
    pub max_memory: Option<u64>,
}

impl DeviceArgs {
    /// The default `--device` of every command but `bench`.
    pub const DEFAULT: Device = Device::Auto;

    /// The device asked for, or `default` (see [`DeviceArgs::DEFAULT`]).
    pub fn device_or(&self, default: Device) -> Device {
        self.device.unwrap_or(default)
    }

    /// The load options these flags ask for (device `default` when not given), the device
    /// adjusted by `--llama-cpp-numerics` ([`crate::numerics::NumericsArgs::device`]).
    pub fn load_options(
        &self,
        default: Device,
        numerics: &crate::numerics::NumericsArgs,
    ) -> Result<LoadOptions> {
        Ok(LoadOptions {
            device: numerics.device(self.device_or(default))?,
            max_memory: self.max_memory,
            // The GPU knobs (`TERN_GPU_*`, `TERN_GEMM_TILE`), parsed here at the edge.
            gpu: tern_engine::GpuTuning::from_env()?,
            ..Default::default()
        })
    }
}

/// `cpu`, `gpu`, `auto` → [`Device`].
fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "gpu" => Ok(Device::Gpu),
        "auto" => Ok(Device::Auto),
        o => Err(format!("--device `{o}`: expected cpu, gpu or auto")),
    }
}

fn parse_max_memory(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|e| format!("{e:#}"))
}

/// `123`, `512M`, `1.5G` (binary units: K = 1024) → bytes.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'B' => 1,
                _ => bail!("--max-memory {s:?}: use bytes or a K/M/G suffix"),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("--max-memory {s:?}: not a number"))?;
    if !(v.is_finite() && v >= 0.0) {
        bail!("--max-memory {s:?}: must be a non-negative size");
    }
    Ok((v * mul as f64) as u64)
}
