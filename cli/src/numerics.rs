//! `--llama-cpp-numerics`, shared by `run`, `chat`, `bench`, `score` and `perplexity`.

use anyhow::{bail, Result};
use clap::Args;
use tern_engine::session::{Device, Model};

#[derive(Args, Clone, Copy, Debug, Default)]
pub struct NumericsArgs {
    /// Use llama.cpp's CPU numerics (Q8 activation blocks, an f16 KV cache, its kernels) instead
    /// of the f32 reference: greedy output token for token as llama.cpp's for llama-family
    /// Q4_1/Q8_0 models. A CPU mode: `--device auto` then runs on the CPU; `--device gpu` is an
    /// error.
    #[arg(long)]
    pub llama_cpp_numerics: bool,
}

impl NumericsArgs {
    /// The device to load on: the CPU under `auto` when the llama.cpp numerics are asked for; an
    /// error for `gpu` (the GPU kernels have their own numerics).
    pub fn device(&self, device: Device) -> Result<Device> {
        if !self.llama_cpp_numerics {
            return Ok(device);
        }
        match device {
            Device::Gpu => bail!(
                "--llama-cpp-numerics is a CPU mode (llama.cpp's CPU kernels, rounding for \
                 rounding) and cannot run on the GPU: use --device cpu or auto"
            ),
            Device::Auto => {
                log::info!("--llama-cpp-numerics: running on the CPU");
                Ok(Device::Cpu)
            }
            Device::Cpu => Ok(Device::Cpu),
        }
    }

    /// Switch the loaded model's CPU forward pass to llama.cpp's numerics when asked.
    pub fn apply(&self, model: &mut Model) -> Result<()> {
        if self.llama_cpp_numerics {
            model.set_forward_options(tern_engine::ForwardOptions::llama_cpp_like())?;
        }
        Ok(())
    }
}
