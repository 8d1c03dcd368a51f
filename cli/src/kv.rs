//! `--kv`, `--minicache`, `--kv-group`, `--kv-window`: the KV-cache format, shared by `run`,
//! `chat`, `perplexity`, `score` and `bench` (formats and their math: `tern_format::kv`; the
//! MiniCache design and its measured defaults: `tern_reference::kv`). The strings are parsed
//! here into the engine's typed [`KvOptions`]; the engine checks them against the model
//! ([`KvOptions::validate`]).

use anyhow::Result;
use clap::Args;
use tern_engine::session::Model;
use tern_engine::{Kivi, KvOptions, KvQuant, KvSpec, MiniCacheMode};

#[derive(Args, Clone, Debug)]
pub struct KvArgs {
    /// KV-cache format: f32 (the default: the reference numerics), f16, q8 (absmax per head),
    /// q4|q3|q2 (KIVI: keys per channel, values per token, an f16 window of recent tokens),
    /// a4|a3 (a4.8-style absmax per head; a3 keeps the BOS token at 4 bits).
    #[arg(long = "kv", default_value = "f32")]
    pub kv: String,
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
    /// The typed options these flags spell (not yet checked against a model).
    pub fn options(&self) -> Result<KvOptions> {
        let format = KvQuant::parse(&self.kv)?;
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
    pub fn spec(&self, model: &Model) -> Result<KvSpec> {
        Ok(self.options()?.validate(&model.meta().hparams)?)
    }
}
