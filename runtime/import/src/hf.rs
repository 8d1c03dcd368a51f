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

fn hf_err(msg: impl Into<String>) -> ImportError {
    ImportError::Hf(msg.into())
}

// ------------------------------------------------------------------------------------------------
// config.json

/// How BitNet linear weights are stored in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitnetForm {
    /// Float masters, ternarized at pack time (absmean).
    Masters,
    /// uint8 packed trits + `weight_scale`; `divide`: the scale divides the output (`bitlinear`).
    Packed { divide: bool },
}

/// The parts of `config.json` tern uses.
#[derive(Debug, Clone)]
struct HfConfig {
    model_type: String,
    arch: Arch,
    hparams: HParams,
    bitnet_form: Option<BitnetForm>,
    name: Option<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
}

fn field<'a>(cfg: &'a Value, key: &str) -> Option<&'a Value> {
    cfg.get(key).filter(|v| !v.is_null())
}

fn req_u32(cfg: &Value, key: &str) -> Result<u32> {
    opt_u32(cfg, key)?.ok_or_else(|| hf_err(format!("config.json: `{key}` is missing")))
}

fn opt_u32(cfg: &Value, key: &str) -> Result<Option<u32>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| {
                hf_err(format!(
                    "config.json: `{key}` = {v} is not an integer in 0..2^32"
                ))
            }),
    }
}

fn opt_f64(cfg: &Value, key: &str) -> Result<Option<f64>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| hf_err(format!("config.json: `{key}` = {v} is not a number"))),
    }
}

fn opt_bool(cfg: &Value, key: &str) -> Result<Option<bool>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| hf_err(format!("config.json: `{key}` = {v} is not a boolean"))),
    }
}

fn opt_str<'a>(cfg: &'a Value, key: &str) -> Result<Option<&'a str>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| hf_err(format!("config.json: `{key}` = {v} is not a string"))),
    }
}

/// A token id field that may be an integer or a list of integers (the first is taken).
fn opt_token_id(cfg: &Value, key: &str) -> Result<Option<u32>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(Value::Array(a)) => match a.first() {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| hf_err(format!("config.json: `{key}` holds {v}, not a token id"))),
        },
        Some(_) => opt_u32(cfg, key),
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| hf_err(format!("reading {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| hf_err(format!("{}: invalid JSON: {e}", path.display())))
}

/// RoPE θ from `rope_theta` or transformers 5's `rope_parameters`; anything but plain RoPE is refused.
fn rope_theta(cfg: &Value, default: f64) -> Result<f64> {
    if let Some(rs) = field(cfg, "rope_scaling") {
        let ty = rs
            .get("rope_type")
            .or_else(|| rs.get("type"))
            .and_then(Value::as_str);
        if ty != Some("default") {
            return Err(hf_err(format!(
                "config.json: `rope_scaling` = {rs} is not supported (tern implements plain RoPE)"
            )));
        }
    }
    if let Some(f) = opt_f64(cfg, "partial_rotary_factor")? {
        if f != 1.0 {
            return Err(hf_err(format!("config.json: `partial_rotary_factor` = {f} is not supported (tern rotates the whole head)")));
        }
    }
    let mut theta = opt_f64(cfg, "rope_theta")?;
    if let Some(rp) = field(cfg, "rope_parameters") {
        let ty = rp
            .get("rope_type")
            .and_then(Value::as_str)
            .unwrap_or("default");
        if ty != "default" {
            return Err(hf_err(format!("config.json: `rope_parameters.rope_type` = {ty:?} is not supported (tern implements plain RoPE)")));
        }
        if let Some(f) = rp.get("partial_rotary_factor").and_then(Value::as_f64) {
            if f != 1.0 {
                return Err(hf_err(format!(
                    "config.json: `rope_parameters.partial_rotary_factor` = {f} is not supported"
                )));
            }
        }
        match rp.get("rope_theta") {
            Some(v) => {
                theta = Some(v.as_f64().ok_or_else(|| {
                    hf_err(format!(
                        "config.json: `rope_parameters.rope_theta` = {v} is not a number"
                    ))
                })?)
            }
            None if theta.is_none() => {
                return Err(hf_err(format!(
                    "config.json: `rope_parameters` = {rp} has no `rope_theta`"
                )))
            }
            None => {}
        }
    }
    let theta = theta.unwrap_or(default);
    if !(theta.is_finite() && theta > 1.0) {
        return Err(hf_err(format!(
            "config.json: RoPE theta {theta} must be a finite number > 1"
        )));
    }
    Ok(theta)
}

fn bitnet_form(cfg: &Value) -> Result<BitnetForm> {
    let Some(q) = field(cfg, "quantization_config") else {
        return Ok(BitnetForm::Masters);
    };
    let get_str = |k: &str| -> Result<Option<&str>> {
        match q.get(k).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| {
                hf_err(format!(
                    "config.json: `quantization_config.{k}` = {v} is not a string"
                ))
            }),
        }
    };
    let method = get_str("quant_method")?.unwrap_or("");
    if method != "bitnet" {
        return Err(hf_err(format!("config.json: `quantization_config.quant_method` = {method:?} is not supported (tern reads \"bitnet\")")));
    }
    if q.get("use_rms_norm").and_then(Value::as_bool) == Some(true) {
        return Err(hf_err("config.json: `quantization_config.use_rms_norm` = true is not supported (an extra RMSNorm inside every BitLinear)"));
    }
    if let Some(skip) = q.get("modules_to_not_convert").filter(|v| !v.is_null()) {
        let ok = skip
            .as_array()
            .is_some_and(|a| a.iter().all(|m| m.as_str() == Some("lm_head")));
        if !ok {
            return Err(hf_err(format!("config.json: `quantization_config.modules_to_not_convert` = {skip} is not supported (only lm_head may stay float)")));
        }
    }
    // Defaults as in transformers' BitNetQuantConfig.
    let class = get_str("linear_class")?.unwrap_or("bitlinear");
    let mode = get_str("quantization_mode")?.unwrap_or("offline");
    match (class, mode) {
        ("autobitlinear", "online") => Ok(BitnetForm::Masters),
        ("autobitlinear", "offline") => Ok(BitnetForm::Packed { divide: false }),
        ("bitlinear", "offline") => Ok(BitnetForm::Packed { divide: true }),
        ("bitlinear", _) => Err(hf_err(format!("config.json: `quantization_config.quantization_mode` = {mode:?} with linear_class \"bitlinear\" is not supported"))),
        ("autobitlinear", _) => Err(hf_err(format!("config.json: `quantization_config.quantization_mode` = {mode:?} is not supported (online or offline)"))),
        _ => Err(hf_err(format!("config.json: `quantization_config.linear_class` = {class:?} is not supported (bitlinear or autobitlinear)"))),
    }
}

fn parse_config(cfg: &Value) -> Result<HfConfig> {
    if !cfg.is_object() {
        return Err(hf_err("config.json: not a JSON object"));
    }
    let model_type = opt_str(cfg, "model_type")?
        .ok_or_else(|| hf_err("config.json: `model_type` is missing"))?
        .to_string();
    let arch = match model_type.as_str() {
        "llama" => Arch::Llama,
        "bitnet" => Arch::Bitnet,
        other => {
            return Err(ImportError::UnsupportedArch(format!(
                "model_type {other:?}"
            )))
        }
    };
    let bitnet = arch == Arch::Bitnet;
    if arch == Arch::Llama && field(cfg, "quantization_config").is_some() {
        return Err(hf_err("config.json: `quantization_config` on a llama model is not supported (tern imports float llama checkpoints)"));
    }
    for key in ["attention_bias", "mlp_bias"] {
        if opt_bool(cfg, key)? == Some(true) {
            return Err(hf_err(format!(
                "config.json: `{key}` = true is not supported (tern's linear layers have no bias)"
            )));
        }
    }
    let n_embd = req_u32(cfg, "hidden_size")?;
    let n_layer = req_u32(cfg, "num_hidden_layers")?;
    let n_head = req_u32(cfg, "num_attention_heads")?;
    let n_head_kv = opt_u32(cfg, "num_key_value_heads")?.unwrap_or(n_head);
    let n_ff = req_u32(cfg, "intermediate_size")?;
    let n_vocab = req_u32(cfg, "vocab_size")?;
    for (k, v) in [
        ("hidden_size", n_embd),
        ("num_hidden_layers", n_layer),
        ("num_attention_heads", n_head),
        ("num_key_value_heads", n_head_kv),
        ("intermediate_size", n_ff),
        ("vocab_size", n_vocab),
    ] {
        if v == 0 {
            return Err(hf_err(format!("config.json: `{k}` is 0")));
        }
    }
    if n_head % n_head_kv != 0 {
        return Err(hf_err(format!("config.json: num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_head_kv}")));
    }
    let head_dim = match opt_u32(cfg, "head_dim")? {
        Some(d) => d,
        None if n_embd % n_head == 0 => n_embd / n_head,
        None => return Err(hf_err(format!("config.json: hidden_size {n_embd} is not a multiple of num_attention_heads {n_head} and `head_dim` is missing"))),
    };
    if head_dim == 0 || head_dim % 2 != 0 {
        return Err(hf_err(format!(
            "config.json: head_dim {head_dim} must be even and non-zero (RoPE rotates pairs)"
        )));
    }
    if bitnet && n_head.checked_mul(head_dim) != Some(n_embd) {
        // BitNet's attn_sub_norm has hidden_size weights and normalizes the n_head × head_dim output.
        return Err(hf_err(format!("config.json: BitNet needs num_attention_heads × head_dim = hidden_size ({n_head} × {head_dim} ≠ {n_embd})")));
    }
    if n_head.checked_mul(head_dim).is_none() {
        return Err(hf_err(
            "config.json: num_attention_heads × head_dim overflows",
        ));
    }
    let ffn_act = match opt_str(cfg, "hidden_act")?.unwrap_or(if bitnet { "relu2" } else { "silu" })
    {
        "silu" | "swish" => FfnAct::Silu,
        "relu2" => FfnAct::Relu2,
        other => {
            return Err(hf_err(format!(
                "config.json: `hidden_act` = {other:?} is not supported (silu or relu2)"
            )))
        }
    };
    let rope_theta = rope_theta(cfg, if bitnet { 500_000.0 } else { 10_000.0 })?;
    let rms_eps = opt_f64(cfg, "rms_norm_eps")?.unwrap_or(if bitnet { 1e-5 } else { 1e-6 });
    if !(rms_eps.is_finite() && rms_eps > 0.0) {
        return Err(hf_err(format!(
            "config.json: `rms_norm_eps` = {rms_eps} must be positive"
        )));
    }
    let hparams = HParams {
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_ctx_train: opt_u32(cfg, "max_position_embeddings")?.unwrap_or(2048),
        rope_theta: rope_theta as f32,
        rope_dim: head_dim,
        rope_neox: true,
        rms_eps: rms_eps as f32,
        ffn_act,
        tied_embeddings: opt_bool(cfg, "tie_word_embeddings")?.unwrap_or(false),
        sub_norms: bitnet,
    };
    Ok(HfConfig {
        model_type,
        arch,
        hparams,
        bitnet_form: if bitnet {
            Some(bitnet_form(cfg)?)
        } else {
            None
        },
        name: opt_str(cfg, "_name_or_path")
            .ok()
            .flatten()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        bos: opt_token_id(cfg, "bos_token_id")?,
        eos: opt_token_id(cfg, "eos_token_id")?,
        pad: opt_token_id(cfg, "pad_token_id")?,
    })
}

// ------------------------------------------------------------------------------------------------
// Tensor plan

/// How one tern tensor is made from the source.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Conv {
    /// Kept float.
    Float,
    /// BitNet linear weight, ternary in tern.
    Ternary,
}

/// One tern tensor: its name, the HF tensor it comes from, its expected shape and conversion.
#[derive(Debug, Clone)]
struct Planned {
    tern: String,
    hf: String,
    shape: Vec<u64>,
    conv: Conv,
}

/// The tensors a model of this config consists of, in the order they are written.
fn tensor_plan(c: &HfConfig) -> Vec<Planned> {
    let h = &c.hparams;
    let (e, ff, v) = (u64::from(h.n_embd), u64::from(h.n_ff), u64::from(h.n_vocab));
    let q = u64::from(h.n_head) * u64::from(h.head_dim);
    let kv = u64::from(h.n_head_kv) * u64::from(h.head_dim);
    let lin = if c.arch == Arch::Bitnet {
        Conv::Ternary
    } else {
        Conv::Float
    };
    let p = |tern: String, hf: String, shape: Vec<u64>, conv: Conv| Planned {
        tern,
        hf,
        shape,
        conv,
    };
    let mut out = vec![p(
        "token_embd.weight".into(),
        "model.embed_tokens.weight".into(),
        vec![v, e],
        Conv::Float,
    )];
    for i in 0..h.n_layer {
        let b = format!("blk.{i}");
        let m = format!("model.layers.{i}");
        out.push(p(
            format!("{b}.attn_norm.weight"),
            format!("{m}.input_layernorm.weight"),
            vec![e],
            Conv::Float,
        ));
        out.push(p(
            format!("{b}.attn_q.weight"),
            format!("{m}.self_attn.q_proj.weight"),
            vec![q, e],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.attn_k.weight"),
            format!("{m}.self_attn.k_proj.weight"),
            vec![kv, e],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.attn_v.weight"),
            format!("{m}.self_attn.v_proj.weight"),
            vec![kv, e],
            lin.clone(),
        ));
        if h.sub_norms {
            out.push(p(
                format!("{b}.attn_sub_norm.weight"),
                format!("{m}.self_attn.attn_sub_norm.weight"),
                vec![e],
                Conv::Float,
            ));
        }
        out.push(p(
            format!("{b}.attn_output.weight"),
            format!("{m}.self_attn.o_proj.weight"),
            vec![e, q],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.ffn_norm.weight"),
            format!("{m}.post_attention_layernorm.weight"),
            vec![e],
            Conv::Float,
        ));
        out.push(p(
            format!("{b}.ffn_gate.weight"),
            format!("{m}.mlp.gate_proj.weight"),
            vec![ff, e],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.ffn_up.weight"),
            format!("{m}.mlp.up_proj.weight"),
            vec![ff, e],
            lin.clone(),
        ));
        if h.sub_norms {
            out.push(p(
                format!("{b}.ffn_sub_norm.weight"),
                format!("{m}.mlp.ffn_sub_norm.weight"),
                vec![ff],
                Conv::Float,
            ));
        }
        out.push(p(
            format!("{b}.ffn_down.weight"),
            format!("{m}.mlp.down_proj.weight"),
            vec![e, ff],
            lin.clone(),
        ));
    }
    out.push(p(
        "output_norm.weight".into(),
        "model.norm.weight".into(),
        vec![e],
        Conv::Float,
    ));
    if !h.tied_embeddings {
        // transformers never quantizes the output head (it is in `modules_to_not_convert`).
        out.push(p(
            "output.weight".into(),
            "lm_head.weight".into(),
            vec![v, e],
            Conv::Float,
        ));
    }
    out
}

/// Source tensors that carry nothing tern needs.
fn ignorable(name: &str, tied: bool) -> bool {
    name.ends_with(".rotary_emb.inv_freq") || (tied && name == "lm_head.weight")
}

// ------------------------------------------------------------------------------------------------
// Shards

/// The safetensors files of a model, in a stable order.
fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let v = read_json(&index)?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| hf_err("model.safetensors.index.json: no `weight_map` object"))?;
        let mut files = BTreeSet::new();
        for (tensor, f) in map {
            let f = f.as_str().ok_or_else(|| {
                hf_err(format!(
                    "model.safetensors.index.json: file of {tensor:?} is not a string"
                ))
            })?;
            let plain = !f.is_empty() && f != "." && f != ".." && !f.contains(['/', '\\']);
            if !plain {
                return Err(hf_err(format!(
                    "model.safetensors.index.json: shard {f:?} is not a plain file name"
                )));
            }
            files.insert(f.to_string());
        }
        if files.is_empty() {
            return Err(hf_err(
                "model.safetensors.index.json: `weight_map` is empty",
            ));
        }
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(hf_err(format!(
            "no *.safetensors file in {}",
            dir.display()
        )));
    }
    Ok(files)
}

fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let f = File::open(path).map_err(|e| hf_err(format!("opening {}: {e}", path.display())))?;
    // SAFETY: read-only mapping of a file tern does not write; if another process truncates it
    // meanwhile, reads fault (the usual mmap caveat, as for every mmap-based loader).
    Ok(unsafe { memmap2::Mmap::map(&f)? })
}

fn float_type(d: Dtype) -> Option<FloatType> {
    match d {
        Dtype::F32 => Some(FloatType::F32),
        Dtype::F16 => Some(FloatType::F16),
        Dtype::BF16 => Some(FloatType::Bf16),
        _ => None,
    }
}

fn to_f32(dt: FloatType, raw: &[u8]) -> Vec<f32> {
    match dt {
        FloatType::F32 => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        FloatType::F16 => raw
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        FloatType::Bf16 => raw
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

fn shape_u64(s: &[usize]) -> Vec<u64> {
    s.iter().map(|&d| d as u64).collect()
}

/// Unpack transformers' packed BitNet weight `name` (`[rows/4, cols]` uint8, four contiguous row
/// chunks, chunk `i` at bits `2i..2i+2`, code = trit + 1) into `rows × cols` trits.
fn unpack_bitnet_weight(name: &str, packed: &[u8], rows: usize, cols: usize) -> Result<Vec<i8>> {
    if rows % 4 != 0 {
        return Err(hf_err(format!(
            "{name}: packed BitNet weight with {rows} rows (not a multiple of 4)"
        )));
    }
    let p = rows / 4;
    if p.checked_mul(cols) != Some(packed.len()) {
        return Err(hf_err(format!(
            "{name}: {} bytes for packed shape [{p}, {cols}]",
            packed.len()
        )));
    }
    let mut trits = vec![0i8; packed.len() * 4];
    for (i, chunk) in trits
        .chunks_exact_mut(packed.len().max(1))
        .enumerate()
        .take(4)
    {
        for (t, &b) in chunk.iter_mut().zip(packed) {
            let code = (b >> (2 * i)) & 3;
            if code == 3 {
                return Err(hf_err(format!(
                    "{name}: packed 2-bit code 3 (only 0, 1, 2 encode -1, 0, +1)"
                )));
            }
            *t = code as i8 - 1;
        }
    }
    Ok(trits)
}

/// Read a one-element `weight_scale` tensor.
fn read_scale(name: &str, dtype: Dtype, shape: &[usize], raw: &[u8]) -> Result<f32> {
    let n: usize = shape.iter().product();
    let dt = float_type(dtype).filter(|_| n == 1).ok_or_else(|| {
        hf_err(format!(
            "{name}: expected one bf16/f16/f32 value, found {dtype:?} of shape {shape:?}"
        ))
    })?;
    let v = to_f32(dt, raw)
        .first()
        .copied()
        .ok_or_else(|| hf_err(format!("{name}: no data")))?;
    if !v.is_finite() || v == 0.0 {
        return Err(hf_err(format!(
            "{name}: scale {v} must be finite and non-zero"
        )));
    }
    Ok(v)
}

// ------------------------------------------------------------------------------------------------
// Tokenizer

/// Llama 3's pre-tokenizer regex (also bitnet-b1.58-2B-4T's): llama.cpp pre id "llama-bpe".
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: the same with single digits: llama.cpp pre id "qwen2".
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn ty(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

fn is_byte_level(v: &Value) -> bool {
    ty(v) == "ByteLevel"
        || (ty(v) == "Sequence"
            && v.get("pretokenizers")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(is_byte_level)))
}

/// `ByteLevel` with its default regex on (GPT-2's split).
fn byte_level_with_regex(v: &Value) -> bool {
    ty(v) == "ByteLevel" && v.get("use_regex").and_then(Value::as_bool).unwrap_or(true)
}

/// Map a HF pre-tokenizer to the llama.cpp pre-tokenizer id that splits the same way.
fn pre_id(pre: &Value) -> Option<&'static str> {
    if byte_level_with_regex(pre) {
        return Some("gpt-2");
    }
    if ty(pre) != "Sequence" {
        return None;
    }
    let parts = pre.get("pretokenizers")?.as_array()?;
    match parts.as_slice() {
        [d, b]
            if ty(d) == "Digits"
                && d.get("individual_digits").and_then(Value::as_bool) == Some(true)
                && byte_level_with_regex(b) =>
        {
            Some("smollm")
        }
        [s, b]
            if ty(s) == "Split"
                && ty(b) == "ByteLevel"
                && b.get("use_regex").and_then(Value::as_bool) == Some(false) =>
        {
            let pat = s.get("pattern")?;
            let re = pat.get("Regex").or_else(|| pat.get("String"))?.as_str()?;
            match re {
                LLAMA3_REGEX => Some("llama-bpe"),
                QWEN2_REGEX => Some("qwen2"),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The text of a special-token entry of tokenizer_config.json (a string or `{"content": ...}`).
fn token_text(v: Option<&Value>) -> Option<&str> {
    let v = v?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

/// `(add_bos, add_eos, bos, eos)` as a `TemplateProcessing` post-processor (possibly inside a
/// `Sequence`) adds them to a single sequence.
fn template_bos_eos(pp: &Value) -> (bool, bool, Option<u32>, Option<u32>) {
    let tp = if ty(pp) == "Sequence" {
        pp.get("processors")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|p| ty(p) == "TemplateProcessing"))
    } else if ty(pp) == "TemplateProcessing" {
        Some(pp)
    } else {
        None
    };
    let Some(tp) = tp else {
        return (false, false, None, None);
    };
    let single = tp
        .get("single")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let special_id = |item: Option<&Value>| -> Option<Option<u32>> {
        let name = item?.get("SpecialToken")?.get("id")?.as_str()?;
        let ids = tp
            .get("special_tokens")?
            .get(name)?
            .get("ids")?
            .as_array()?;
        Some(
            ids.first()
                .and_then(Value::as_u64)
                .and_then(|x| u32::try_from(x).ok()),
        )
    };
    let bos = special_id(single.first());
    let eos = special_id(single.last());
    (bos.is_some(), eos.is_some(), bos.flatten(), eos.flatten())
}

fn tokenizer_spec(dir: &Path, cfg: &HfConfig) -> Result<Option<TokenizerSpec>> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Ok(None);
    }
    let tj = read_json(&path)?;
    let tc_path = dir.join("tokenizer_config.json");
    let tc = if tc_path.is_file() {
        read_json(&tc_path)?
    } else {
        Value::Null
    };
    let terr = |m: String| hf_err(format!("tokenizer.json: {m}"));

    let model = tj.get("model").ok_or_else(|| terr("no `model`".into()))?;
    let mtype = ty(model);
    if !(mtype == "BPE" || (mtype.is_empty() && model.get("merges").is_some())) {
        return Err(terr(format!(
            "model type {mtype:?} is not supported (tern reads byte-level BPE)"
        )));
    }
    let pre = tj.get("pre_tokenizer").unwrap_or(&Value::Null);
    let decoder = tj.get("decoder").unwrap_or(&Value::Null);
    if !(is_byte_level(pre) || ty(decoder) == "ByteLevel") {
        return Err(terr(
            "BPE without a ByteLevel pre-tokenizer is not supported (tern reads byte-level BPE)"
                .into(),
        ));
    }

    // Token table: model.vocab, then added_tokens on top; holes and the rest up to vocab_size are
    // padding tokens, as llama.cpp's converter writes them.
    let n_vocab = cfg.hparams.n_vocab as usize;
    let mut tokens: Vec<Option<String>> = vec![None; n_vocab];
    let mut types = vec![1i32; n_vocab];
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| terr("`model.vocab` is not an object".into()))?;
    let slot = |id: Option<u64>, what: &str| -> Result<usize> {
        let id = id.ok_or_else(|| terr(format!("{what}: id is not an integer")))?;
        usize::try_from(id)
            .ok()
            .filter(|&i| i < n_vocab)
            .ok_or_else(|| terr(format!("{what}: id {id} is not below vocab_size {n_vocab}")))
    };
    for (text, id) in vocab {
        let i = slot(id.as_u64(), &format!("vocab entry {text:?}"))?;
        if let Some(prev) = tokens.get(i).and_then(|t| t.as_ref()) {
            return Err(terr(format!("tokens {prev:?} and {text:?} share id {i}")));
        }
        tokens[i] = Some(text.clone()); // ok: i < n_vocab = tokens.len()
    }
    let mut by_text: HashMap<String, u32> = HashMap::new();
    for at in tj
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let text = at
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| terr("added token without `content`".into()))?;
        let i = slot(
            at.get("id").and_then(Value::as_u64),
            &format!("added token {text:?}"),
        )?;
        let special = at.get("special").and_then(Value::as_bool).unwrap_or(false);
        let looks_special = text.starts_with("<|") && text.ends_with("|>") && text.len() > 4;
        tokens[i] = Some(text.to_string()); // ok: i < n_vocab
        types[i] = if special || looks_special { 3 } else { 4 }; // ok: i < n_vocab
        by_text.insert(text.to_string(), i as u32);
    }
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                if let Some(ty) = types.get_mut(i) {
                    *ty = 5;
                }
                format!("[PAD{i}]")
            })
        })
        .collect();
    let lookup = |text: &str| -> Option<u32> {
        by_text.get(text).copied().or_else(|| {
            vocab
                .get(text)
                .and_then(Value::as_u64)
                .and_then(|x| u32::try_from(x).ok())
        })
    };

    let mut merges = Vec::new();
    for m in model
        .get("merges")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let s = match m {
            Value::String(s) => {
                if !s.get(1..).is_some_and(|r| r.contains(' ')) {
                    return Err(terr(format!("merge {s:?} is not \"A B\"")));
                }
                s.clone()
            }
            Value::Array(p) => match p.as_slice() {
                [Value::String(a), Value::String(b)] if !a.contains(' ') && !b.contains(' ') => {
                    format!("{a} {b}")
                }
                _ => {
                    return Err(terr(format!(
                        "merge {m} is not a pair of space-free strings"
                    )))
                }
            },
            _ => return Err(terr(format!("merge {m} is neither \"A B\" nor [A, B]"))),
        };
        merges.push(s);
    }

    let (tpl_bos_added, tpl_eos_added, tpl_bos, tpl_eos) =
        template_bos_eos(tj.get("post_processor").unwrap_or(&Value::Null));
    let add_bos = tc
        .get("add_bos_token")
        .and_then(Value::as_bool)
        .unwrap_or(tpl_bos_added);
    let add_eos = tc
        .get("add_eos_token")
        .and_then(Value::as_bool)
        .unwrap_or(tpl_eos_added);
    let id_of = |key: &str| token_text(tc.get(key)).and_then(lookup);
    let bos = id_of("bos_token").or(cfg.bos).or(tpl_bos);
    let eos = id_of("eos_token").or(cfg.eos).or(tpl_eos);
    let unk = id_of("unk_token").or_else(|| {
        model
            .get("unk_token")
            .and_then(Value::as_str)
            .and_then(lookup)
    });
    let pad = id_of("pad_token").or(cfg.pad);
    let eot = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"]
        .into_iter()
        .find_map(lookup);
    for (what, id) in [("bos", bos), ("eos", eos), ("unk", unk), ("pad", pad)] {
        if let Some(id) = id {
            if id as usize >= n_vocab {
                return Err(hf_err(format!(
                    "{what} token id {id} is not below vocab_size {n_vocab}"
                )));
            }
        }
    }

    let chat_template = match tc.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .map(str::to_string),
        _ => {
            let jinja = dir.join("chat_template.jinja");
            if jinja.is_file() {
                Some(std::fs::read_to_string(&jinja)?)
            } else {
                None
            }
        }
    };
    let pre_name = pre_id(pre);
    if pre_name.is_none() {
        log::warn!("tokenizer.json: pre-tokenizer {pre} has no llama.cpp equivalent tern knows; tokenization may differ");
    }
    Ok(Some(TokenizerSpec {
        kind: TokenizerKind::Gpt2,
        pre: pre_name.map(str::to_string),
        tokens,
        token_types: types,
        merges,
        scores: Vec::new(),
        bos,
        eos,
        unk,
        pad,
        eot,
        add_bos,
        add_eos,
        add_space_prefix: false,
        chat_template,
    }))
}

// ------------------------------------------------------------------------------------------------
// Import

/// Read a HF model directory's metadata (config.json, tokenizer) without touching the weights.
pub fn hf_meta(dir: &Path, opts: &PackOptions) -> Result<ModelMeta> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        return Err(hf_err(format!("no config.json in {}", dir.display())));
    }
    let cfg = parse_config(&read_json(&cfg_path)?)?;
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
    let mut meta = meta_of(dir, &cfg, opts)?;

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
                    if let Some(bad) = vals.iter().find(|v| !v.is_finite()) {
                        return Err(hf_err(format!("{}: non-finite weight {bad}", p.hf)));
                    }
                    let (trits, alpha) = tern_format::ternary::absmean_ternarize(&vals);
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
