//! `--kv`, `--minicache`, `--kv-group`, `--kv-window`: the KV-cache format, shared by `run`,
//! `chat`, `perplexity`, `score` and `bench` (formats and their math: `tern_format::kv`; the
//! MiniCache design and its measured defaults: `tern_reference::kv`). The strings are parsed
//! here into the engine's typed [`KvOptions`]; the engine checks them against the model
//! ([`KvOptions::validate`]).

use anyhow::Result;
use clap::Args;
use tern_engine::session::Model;
use tern_engine::{Kivi, KvOptions, KvQuant, KvSpec, MiniCacheMode};

use crate::numerics::NumericsArgs;

#[derive(Args, Clone, Debug)]
pub struct KvArgs {
    /// KV-cache format: q8 (the default: 8-bit absmax per head, about half of f16's bytes),
    /// f32 (the reference numerics; the default with --llama-cpp-numerics), f16, q4|q3|q2
    /// (KIVI: keys per channel, values per token, an f16 window of recent tokens), q4r|q3r|q2r
    /// (a per-head Walsh–Hadamard rotation, then min-max per token: smaller, and measured
    /// lossy on small models — q4r +6.6 % perplexity on SmolLM2), a4|a3
    /// (a4.8-style absmax per head; a3 keeps the BOS token at 4 bits). docs/kv-cache.md.
    #[arg(long = "kv")]
    pub kv: Option<String>,
    /// MiniCache cross-layer merging: off, on (the measured defaults), or S,t,gamma (start
    /// layer, SLERP t, retention threshold on the angular distance).
    #[arg(long = "minicache", default_value = "off")]
    pub minicache: String,
    /// KIVI group size G (default 32).
    #[arg(long = "kv-group")]
    pub kv_group: Option<u32>,
    /// KIVI full-precision window R, a multiple of G (default 128).
    #[arg(long = "kv-window")]
    pub kv_window: Option<u32>,
}

impl KvArgs {
    /// The format's `--kv` name: as given, else the default — `q8`, or `f32` under
    /// `--llama-cpp-numerics` (llama.cpp's numerics round an f32 cache to f16 as llama.cpp does;
    /// a quantized cache has numerics of its own).
    pub fn name(&self, numerics: &NumericsArgs) -> String {
        match &self.kv {
            Some(k) => k.clone(),
            None if numerics.llama_cpp_numerics => KvQuant::F32.name().into(),
            None => KvQuant::default().name().into(),
        }
    }

    /// The typed options these flags spell (not yet checked against a model).
    pub fn options(&self, numerics: &NumericsArgs) -> Result<KvOptions> {
        let format = KvQuant::parse(&self.name(numerics))?;
        let minicache = if self.minicache.trim().eq_ignore_ascii_case("on") {
            MiniCacheMode::On
        } else {
            KvSpec::parse_minicache_explicit(&self.minicache)?
                .map_or(MiniCacheMode::Off, MiniCacheMode::Custom)
        };
        let d = Kivi::default();
        Ok(KvOptions {
            format,
            kivi: Kivi {
                group: self.kv_group.unwrap_or(d.group),
                residual: self.kv_window.unwrap_or(d.residual),
            },
            minicache,
        })
    }

    /// The spec for `model` (`on` resolved for its depth; checked against it), for scoring.
    pub fn spec(&self, model: &Model, numerics: &NumericsArgs) -> Result<KvSpec> {
        Ok(self.options(numerics)?.validate(&model.meta().hparams)?)
    }
}
