//! `--kv`, `--minicache`, `--kv-group`, `--kv-window`: the KV-cache format, shared by `run`,
//! `chat`, `perplexity`, `score` and `bench` (formats and their math: `tern_format::kv`; the
//! MiniCache design and its measured defaults: `tern_reference::kv`).

use anyhow::Result;
use clap::Args;
use tern_engine::session::Model;
use tern_engine::KvSpec;

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
    /// The spec for `model` (`on` resolved for its depth; checked against it).
    pub fn spec(&self, model: &Model) -> Result<KvSpec> {
        Ok(tern_engine::kv_spec_from_flags(
            &self.kv,
            &self.minicache,
            self.kv_group,
            self.kv_window,
            &model.meta().hparams,
        )?)
    }
}
