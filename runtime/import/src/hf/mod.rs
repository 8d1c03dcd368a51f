//! Hugging Face model directories → `.tern`: `config.json`, `*.safetensors` (one file, or shards
//! listed by `model.safetensors.index.json`) and, optionally, `tokenizer.json` +
//! `tokenizer_config.json`.
//!
//! # Architectures
//!
//! * `model_type: "llama"` (SmolLM2, Llama 2/3 without `rope_scaling`): every tensor stays float
//!   (bf16/f16/f32 as in the source, or NeuZip per `--floats`), activations float.
//! * `model_type: "bitnet"` (BitNet b1.58, incl. microsoft/bitnet-b1.58-2B-4T): linear weights
//!   become ternary with one f32 scale per matrix; embeddings, norms and an untied `lm_head` stay
//!   float (transformers never converts the output head). Two source forms are read
//!   (`transformers: integrations/bitnet.py`):
//!   - **offline** (`quantization_config.quantization_mode = "offline"`, e.g. 2B-4T): `*.weight` is
//!     uint8 `[out/4, in]`; the 2-bit field at bits `2i..2i+2` of `packed[r, c]` holds `t + 1` for
//!     row `i·out/4 + r` (four contiguous row chunks, not interleaved); `*.weight_scale` (`[1]`) is
//!     multiplied into the output for `linear_class = "autobitlinear"` and divided for
//!     `"bitlinear"` (`BitLinear.post_quant_process`), so tern's scale is `weight_scale` or
//!     `1 / weight_scale`;
//!   - **online** (`quantization_mode = "online"`, or no `quantization_config`: the `-bf16` master
//!     checkpoints): float masters ternarized here with absmean (`WeightQuant`:
//!     `alpha = max(mean|W|, 1e-5)`, `t = clamp(round(W / alpha), -1, 1)`, round half to even).
//!
//! # Names and layout
//!
//! HF names map to tern's GGUF-style names (`model.embed_tokens.weight` → `token_embd.weight`,
//! `model.layers.N.self_attn.q_proj.weight` → `blk.N.attn_q.weight`, … see [`tensor_plan`]).
//! Shapes are kept outermost-first as safetensors has them (`[out, in]`). HF q/k projections are in
//! rotate-half (NeoX) order, so they are kept as they are and `hparams.rope_neox = true` (a GGUF
//! converter instead permutes them for adjacent pairing).
//!
//! Everything is checked before the output is created: config fields, every tensor's presence,
//! dtype and shape, and that no tensor is left over (an unexpected bias would otherwise be dropped
//! silently). Tensors are then converted one at a time from the memory-mapped shards and streamed to
//! `<out>.part`, which is renamed to `out` only when the file is complete.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use tern_format::{
    ActivationScheme, Arch, FfnAct, FloatType, HParams, ModelMeta, Provenance, TernWriter,
    TokenizerKind, TokenizerSpec,
};

use crate::error::{ImportError, Result};
use crate::pack::{encode_float, encode_ternary, PackOptions, Progress};

mod config;
mod plan;
mod shards;
mod tokenizer;

use config::*;
use plan::*;
use shards::*;
use tokenizer::*;

fn hf_err(msg: impl Into<String>) -> ImportError {
    ImportError::Hf(msg.into())
}

// ------------------------------------------------------------------------------------------------
// Import

/// config.json's sizes against the tensors the shards hold, before anything is sized from them:
/// the embedding is `[vocab_size, hidden_size]` and the layers present are exactly
/// `0..num_hidden_layers` (a 2 KB directory claiming four billion layers or vocabulary entries
/// is refused here, not by the allocator).
fn check_config_tensors(cfg: &HfConfig, shards: &[SafeTensors<'_>]) -> Result<()> {
    let h = &cfg.hparams;
    let embed = "model.embed_tokens.weight";
    let t = shards
        .iter()
        .find_map(|s| s.tensor(embed).ok())
        .ok_or_else(|| ImportError::MissingTensor(embed.to_string()))?;
    let want = [u64::from(h.n_vocab), u64::from(h.n_embd)];
    let shape = shape_u64(t.shape());
    if shape != want {
        return Err(hf_err(format!(
            "{embed}: shape {shape:?}, but config.json says vocab_size {} × hidden_size {}",
            h.n_vocab, h.n_embd
        )));
    }
    let mut layers = BTreeSet::new();
    for s in shards {
        for name in s.names() {
            if let Some(i) = name
                .strip_prefix("model.layers.")
                .and_then(|r| r.split('.').next())
                .and_then(|n| n.parse::<u64>().ok())
            {
                layers.insert(i);
            }
        }
    }
    let n = u64::from(h.n_layer);
    if layers.len() as u64 != n || layers.last().is_some_and(|&m| m >= n) {
        return Err(hf_err(format!(
            "config.json says num_hidden_layers {n}, the checkpoint holds {} layers (model.layers.{}…{})",
            layers.len(),
            layers.first().copied().unwrap_or(0),
            layers.last().copied().unwrap_or(0)
        )));
    }
    Ok(())
}

/// Read a HF model directory's metadata (config.json, tokenizer) without touching the weights.
pub fn hf_meta(dir: &Path, opts: &PackOptions) -> Result<ModelMeta> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        return Err(hf_err(format!("no config.json in {}", dir.display())));
    }
    let cfg = parse_config(&read_json(&cfg_path)?)?;
    let files = shard_files(dir)?;
    let maps = files
        .iter()
        .map(|f| map_file(f))
        .collect::<Result<Vec<_>>>()?;
    let mut shards = Vec::with_capacity(maps.len());
    for (f, m) in files.iter().zip(&maps) {
        shards.push(
            SafeTensors::deserialize(m).map_err(|e| hf_err(format!("{}: {e}", f.display())))?,
        );
    }
    check_config_tensors(&cfg, &shards)?;
    meta_of(dir, &cfg, opts)
}

fn meta_of(dir: &Path, cfg: &HfConfig, opts: &PackOptions) -> Result<ModelMeta> {
    let dir_name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    let mut extra = BTreeMap::new();
    extra.insert(
        "hf_model_type".to_string(),
        Value::String(cfg.model_type.clone()),
    );
    if let Some(form) = cfg.bitnet_form {
        let s = if form == BitnetForm::Masters {
            "masters (absmean at pack time)"
        } else {
            "packed"
        };
        extra.insert("bitnet_weights".to_string(), Value::String(s.into()));
    }
    Ok(ModelMeta {
        arch: cfg.arch,
        hparams: cfg.hparams.clone(),
        tokenizer: tokenizer_spec(dir, cfg)?,
        activations: if cfg.arch == Arch::Bitnet {
            opts.activations.unwrap_or(ActivationScheme::A8)
        } else {
            ActivationScheme::FLOAT
        },
        provenance: Provenance {
            source_format: "safetensors".into(),
            source_name: dir_name.clone(),
            source_hash: None,
            model_name: Some(cfg.name.clone().unwrap_or(dir_name)),
            packer: format!("tern {}", env!("CARGO_PKG_VERSION")),
            options: opts.describe(),
        },
        extra,
    })
}

/// Import a Hugging Face model directory into a `.tern` file at `out` (see the module docs).
/// The shards are memory-mapped and one tensor at a time is converted; `out` appears only when
/// complete. Returns the metadata written.
pub fn import_hf_dir(
    dir: &Path,
    out: &Path,
    opts: &PackOptions,
    progress: Progress,
) -> Result<ModelMeta> {
    crate::check_output(dir, out)?;
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        return Err(hf_err(format!("no config.json in {}", dir.display())));
    }
    let cfg = parse_config(&read_json(&cfg_path)?)?;

    let files = shard_files(dir)?;
    let maps = files
        .iter()
        .map(|f| map_file(f))
        .collect::<Result<Vec<_>>>()?;
    let mut shards = Vec::with_capacity(maps.len());
    for (f, m) in files.iter().zip(&maps) {
        shards.push(
            SafeTensors::deserialize(m).map_err(|e| hf_err(format!("{}: {e}", f.display())))?,
        );
    }
    let mut where_is: HashMap<String, usize> = HashMap::new();
    for (i, s) in shards.iter().enumerate() {
        for name in s.names() {
            if where_is.insert(name.to_string(), i).is_some() {
                return Err(hf_err(format!("tensor {name:?} is in more than one shard")));
            }
        }
    }
    // The sizes config.json declares are checked against the tensors present before anything is
    // sized from them (the tokenizer's table from vocab_size, the plan from num_hidden_layers).
    check_config_tensors(&cfg, &shards)?;
    let mut meta = meta_of(dir, &cfg, opts)?;
    crate::pack::check_meta(&meta)?;
    let hashes = std::iter::once(&cfg_path)
        .chain(&files)
        .map(|f| tern_format::hash_file(f).map(|h| format!("{h:016x}")))
        .collect::<tern_format::Result<Vec<_>>>()?;
    // config.json, then each shard in file-name order.
    meta.provenance.source_hash = Some(hashes.join("+"));

    // Check everything before writing anything.
    let plan = tensor_plan(&cfg);
    let form = cfg.bitnet_form;
    let mut used: BTreeSet<String> = BTreeSet::new();
    let view = |name: &str| -> Result<safetensors::tensor::TensorView<'_>> {
        let &i = where_is
            .get(name)
            .ok_or_else(|| ImportError::MissingTensor(name.to_string()))?;
        let s = shards
            .get(i)
            .ok_or_else(|| ImportError::MissingTensor(name.to_string()))?;
        s.tensor(name).map_err(|e| hf_err(format!("{name}: {e}")))
    };
    for p in &plan {
        let t = view(&p.hf)?;
        let shape = shape_u64(t.shape());
        let packed = p.conv == Conv::Ternary && matches!(form, Some(BitnetForm::Packed { .. }));
        if packed {
            let want = [
                p.shape.first().copied().unwrap_or(0) / 4,
                p.shape.get(1).copied().unwrap_or(0),
            ];
            if t.dtype() != Dtype::U8
                || shape != want
                || p.shape.first().is_some_and(|r| r % 4 != 0)
            {
                return Err(hf_err(format!(
                    "{}: expected packed uint8 of shape {want:?} (for [{}, {}]), found {:?} {shape:?}",
                    p.hf,
                    p.shape.first().copied().unwrap_or(0),
                    p.shape.get(1).copied().unwrap_or(0),
                    t.dtype()
                )));
            }
            let sname = format!("{}_scale", p.hf);
            let s = view(&sname)?;
            read_scale(&sname, s.dtype(), s.shape(), s.data())?;
            used.insert(sname);
        } else {
            if float_type(t.dtype()).is_none() {
                return Err(hf_err(format!(
                    "{}: dtype {:?} is not supported (bf16, f16 or f32{})",
                    p.hf,
                    t.dtype(),
                    if p.conv == Conv::Ternary {
                        "; this checkpoint's quantization_config says float masters"
                    } else {
                        ""
                    }
                )));
            }
            if shape != p.shape {
                return Err(hf_err(format!(
                    "{}: shape {shape:?}, expected {:?} from config.json",
                    p.hf, p.shape
                )));
            }
        }
        used.insert(p.hf.clone());
    }
    let tied = cfg.hparams.tied_embeddings;
    if let Some(extra) = where_is
        .keys()
        .filter(|k| !used.contains(k.as_str()) && !ignorable(k, tied))
        .min()
    {
        return Err(hf_err(format!(
            "unexpected tensor {extra:?}: tern's {:?} graph has no place for it",
            cfg.arch
        )));
    }

    crate::write_via_part(out, |part| -> Result<ModelMeta> {
        let mut w = TernWriter::create(part, meta.clone())?;
        let total = plan.len();
        for (i, p) in plan.iter().enumerate() {
            progress(i, total, &p.tern);
            let t = view(&p.hf)?;
            match (p.conv.clone(), form) {
                (Conv::Ternary, Some(BitnetForm::Packed { divide })) => {
                    let rows = p.shape.first().copied().unwrap_or(0) as usize;
                    let cols = p.shape.get(1).copied().unwrap_or(0) as usize;
                    let trits = unpack_bitnet_weight(&p.hf, t.data(), rows, cols)?;
                    let sname = format!("{}_scale", p.hf);
                    let s = view(&sname)?;
                    let ws = read_scale(&sname, s.dtype(), s.shape(), s.data())?;
                    let scale = if divide { 1.0 / ws } else { ws };
                    let (enc, bytes) =
                        encode_ternary(opts, &p.shape, &trits, 0, FloatType::F32, &[scale])?;
                    w.add_tensor(&p.tern, &p.shape, enc, &bytes)?;
                }
                (Conv::Ternary, _) => {
                    let dt = float_type(t.dtype())
                        .ok_or_else(|| hf_err(format!("{}: not a float tensor", p.hf)))?;
                    let vals = to_f32(dt, t.data());
                    let (trits, alpha) = crate::pack::ternarize_master(&p.hf, &vals, None)
                        .map_err(|e| hf_err(e.to_string().replace("invalid argument: ", "")))?;
                    drop(vals);
                    let (enc, bytes) =
                        encode_ternary(opts, &p.shape, &trits, 0, FloatType::F32, &[alpha])?;
                    w.add_tensor(&p.tern, &p.shape, enc, &bytes)?;
                }
                (Conv::Float, _) => {
                    let dt = float_type(t.dtype())
                        .ok_or_else(|| hf_err(format!("{}: not a float tensor", p.hf)))?;
                    let (enc, bytes) = encode_float(opts, dt, &p.shape, t.data())?;
                    w.add_tensor(&p.tern, &p.shape, enc, &bytes)?;
                }
            }
        }
        progress(total, total, "");
        w.finish()?;
        Ok(meta)
    })
}
