//! config.json → the model's hyperparameters and BitNet form.

use super::*;

// ------------------------------------------------------------------------------------------------
// config.json

/// How BitNet linear weights are stored in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BitnetForm {
    /// Float masters, ternarized at pack time (absmean).
    Masters,
    /// uint8 packed trits + `weight_scale`; `divide`: the scale divides the output (`bitlinear`).
    Packed { divide: bool },
}

/// The parts of `config.json` tern uses.
#[derive(Debug, Clone)]
pub(super) struct HfConfig {
    pub(super) model_type: String,
    pub(super) arch: Arch,
    pub(super) hparams: HParams,
    pub(super) bitnet_form: Option<BitnetForm>,
    pub(super) name: Option<String>,
    pub(super) bos: Option<u32>,
    pub(super) eos: Option<u32>,
    pub(super) pad: Option<u32>,
}

/// Largest `hidden_size` / `intermediate_size` accepted (released models: ≤ 53248).
pub(super) const MAX_WIDTH: u32 = 1 << 20;
/// Largest `num_hidden_layers` accepted (released models: ≤ 126).
pub(super) const MAX_LAYERS: u32 = 4096;
/// Largest head count accepted.
pub(super) const MAX_HEADS: u32 = 4096;
/// Largest `head_dim` accepted (released models: ≤ 256).
pub(super) const MAX_HEAD_DIM: u32 = 4096;
/// Largest `vocab_size` accepted (released models: ≤ 262144).
pub(super) const MAX_VOCAB: u32 = 1 << 22;

pub(super) fn field<'a>(cfg: &'a Value, key: &str) -> Option<&'a Value> {
    cfg.get(key).filter(|v| !v.is_null())
}

pub(super) fn req_u32(cfg: &Value, key: &str) -> Result<u32> {
    opt_u32(cfg, key)?.ok_or_else(|| hf_err(format!("config.json: `{key}` is missing")))
}

pub(super) fn opt_u32(cfg: &Value, key: &str) -> Result<Option<u32>> {
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

pub(super) fn opt_f64(cfg: &Value, key: &str) -> Result<Option<f64>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| hf_err(format!("config.json: `{key}` = {v} is not a number"))),
    }
}

pub(super) fn opt_bool(cfg: &Value, key: &str) -> Result<Option<bool>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| hf_err(format!("config.json: `{key}` = {v} is not a boolean"))),
    }
}

pub(super) fn opt_str<'a>(cfg: &'a Value, key: &str) -> Result<Option<&'a str>> {
    match field(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| hf_err(format!("config.json: `{key}` = {v} is not a string"))),
    }
}

/// A token id field that may be an integer or a list of integers (the first is taken).
pub(super) fn opt_token_id(cfg: &Value, key: &str) -> Result<Option<u32>> {
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

pub(super) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| hf_err(format!("reading {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| hf_err(format!("{}: invalid JSON: {e}", path.display())))
}

/// RoPE θ from `rope_theta` or transformers 5's `rope_parameters`; anything but plain RoPE is refused.
pub(super) fn rope_theta(cfg: &Value, default: f64) -> Result<f64> {
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

pub(super) fn bitnet_form(cfg: &Value) -> Result<BitnetForm> {
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

pub(super) fn parse_config(cfg: &Value) -> Result<HfConfig> {
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
    // Sane maxima, far above any released model, so that nothing is sized from an absurd value
    // even before the tensors are compared with it.
    for (k, v, max) in [
        ("hidden_size", n_embd, MAX_WIDTH),
        ("num_hidden_layers", n_layer, MAX_LAYERS),
        ("num_attention_heads", n_head, MAX_HEADS),
        ("num_key_value_heads", n_head_kv, MAX_HEADS),
        ("intermediate_size", n_ff, MAX_WIDTH),
        ("vocab_size", n_vocab, MAX_VOCAB),
    ] {
        if v > max {
            return Err(hf_err(format!(
                "config.json: `{k}` = {v} is above tern's limit {max}"
            )));
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
    if head_dim == 0 || head_dim % 2 != 0 || head_dim > MAX_HEAD_DIM {
        return Err(hf_err(format!(
            "config.json: head_dim {head_dim} must be even, non-zero (RoPE rotates pairs) and at most {MAX_HEAD_DIM}"
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
    // Both are stored as f32: a value that overflows f32 (1e39) would become infinite.
    if !(rope_theta as f32).is_finite() {
        return Err(hf_err(format!(
            "config.json: RoPE theta {rope_theta} does not fit an f32"
        )));
    }
    if !(rms_eps.is_finite() && rms_eps > 0.0 && (rms_eps as f32).is_finite()) {
        return Err(hf_err(format!(
            "config.json: `rms_norm_eps` = {rms_eps} must be positive and fit an f32"
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
