//! Model metadata stored in the `.tern` metadata section (JSON): architecture and hyperparameters,
//! tokenizer, chat template, per-sublayer activation scheme, provenance.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Model architecture family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama family (SmolLM2, Llama 2/3): RMSNorm, RoPE, GQA, SwiGLU, float or ggml-block weights.
    Llama,
    /// BitNet b1.58 (incl. 2B4T): ternary linear layers with per-token int8 activations, relu²,
    /// attention and FFN sub-norms.
    Bitnet,
    /// Gemma 3 (GGUF `gemma3`): QK-norm, post-attention/post-FFN norms, GELU-tanh GeGLU, scaled
    /// embeddings, interleaved sliding-window and global layers with their own RoPE bases.
    Gemma3,
    /// Qwen 2 / 2.5 (GGUF `qwen2`): llama layers with q/k/v biases, NeoX RoPE.
    Qwen2,
    /// Qwen 3 (GGUF `qwen3`): llama layers with per-head QK-norm, NeoX RoPE.
    Qwen3,
}

/// FFN activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FfnAct {
    /// SwiGLU: `silu(gate) * up`.
    Silu,
    /// `relu(gate)^2 * up` (BitNet b1.58 2B4T).
    Relu2,
    /// GeGLU with the tanh approximation of GELU: `gelu_tanh(gate) * up` (Gemma).
    #[serde(rename = "gelu_tanh")]
    GeluTanh,
}

/// Hyperparameters the forward pass needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HParams {
    pub n_vocab: u32,
    pub n_embd: u32,
    pub n_layer: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    pub n_ff: u32,
    /// Context length the model was trained with.
    pub n_ctx_train: u32,
    pub rope_theta: f32,
    /// Number of head dimensions rotated by RoPE (usually `head_dim`).
    pub rope_dim: u32,
    /// NeoX pairing (dim j with j + rope_dim/2) when true; adjacent pairs (2j, 2j+1) when false.
    pub rope_neox: bool,
    pub rms_eps: f32,
    pub ffn_act: FfnAct,
    /// Output head shares the token embedding.
    pub tied_embeddings: bool,
    /// BitNet sub-norms before o_proj and down_proj.
    pub sub_norms: bool,
}

/// Activation quantization applied to the input of one kind of linear sublayer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActQuant {
    /// Float activations (llama family).
    None,
    /// Per-token absmax INT8 (BitNet b1.58).
    Int8,
    /// Per-token absmean INT4 (BitNet a4.8 attention/FFN inputs).
    Int4,
    /// Per-token TopK-50% by magnitude, then absmax INT8 (BitNet a4.8 o_proj input).
    Topk50Int8,
}

/// Per-sublayer activation scheme: chosen at pack time (`--activations a8|a4.8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationScheme {
    /// Input of q/k/v projections.
    pub qkv: ActQuant,
    /// Input of the attention output projection.
    pub out: ActQuant,
    /// Input of gate/up projections.
    pub gate_up: ActQuant,
    /// Input of the down projection.
    pub down: ActQuant,
}

impl ActivationScheme {
    pub const FLOAT: Self = Self {
        qkv: ActQuant::None,
        out: ActQuant::None,
        gate_up: ActQuant::None,
        down: ActQuant::None,
    };
    /// BitNet b1.58 W1.58A8.
    pub const A8: Self = Self {
        qkv: ActQuant::Int8,
        out: ActQuant::Int8,
        gate_up: ActQuant::Int8,
        down: ActQuant::Int8,
    };
    /// BitNet a4.8: INT4 for attention/FFN inputs, TopK-50% + INT8 for o_proj, INT8 for down_proj.
    pub const A4_8: Self = Self {
        qkv: ActQuant::Int4,
        out: ActQuant::Topk50Int8,
        gate_up: ActQuant::Int4,
        down: ActQuant::Int8,
    };
}

/// Tokenizer model family (GGUF `tokenizer.ggml.model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// Byte-level BPE (GGUF "gpt2").
    Gpt2,
    /// SentencePiece-style (GGUF "llama").
    Llama,
}

/// Everything needed to rebuild the tokenizer, as GGUF stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerSpec {
    pub kind: TokenizerKind,
    /// llama.cpp pre-tokenizer id (`tokenizer.ggml.pre`), e.g. "smollm", "llama-bpe", "gpt-2".
    pub pre: Option<String>,
    /// Token strings, id-indexed (byte-level BPE tokens are in GPT-2 byte-to-unicode form).
    pub tokens: Vec<String>,
    /// GGUF token types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    pub token_types: Vec<i32>,
    /// BPE merges "A B", rank = index.
    #[serde(default)]
    pub merges: Vec<String>,
    /// SentencePiece scores.
    #[serde(default)]
    pub scores: Vec<f32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    #[serde(default)]
    pub eot: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    #[serde(default)]
    pub add_space_prefix: bool,
    /// Jinja chat template.
    pub chat_template: Option<String>,
}

/// Where the packed model came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// "gguf" or "safetensors".
    pub source_format: String,
    /// File or directory name the model was packed from.
    pub source_name: String,
    /// xxh3-64 of the source file(s), hex.
    pub source_hash: Option<String>,
    /// Model name from the source metadata.
    pub model_name: Option<String>,
    /// `tern x.y.z`.
    pub packer: String,
    /// The pack options, as given.
    pub options: BTreeMap<String, String>,
}

/// The metadata section of a `.tern` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    pub arch: Arch,
    pub hparams: HParams,
    pub tokenizer: Option<TokenizerSpec>,
    pub activations: ActivationScheme,
    pub provenance: Provenance,
    /// Free-form extra keys (kept, not interpreted), except [`FAMILY_KEY`]: the
    /// [`FamilyParams`] of the Gemma / Qwen / Llama 3 families ([`ModelMeta::family`]).
    #[serde(default)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// The key of [`ModelMeta::extra`] holding the [`FamilyParams`] (absent: all off, as in every
/// file written before the Gemma / Qwen / Llama 3 families; so old files load unchanged).
pub const FAMILY_KEY: &str = "family";

/// Per-family parts of the architecture beyond [`HParams`] (every field defaults to "off"):
/// what `tern_format::spec::ModelSpec::from_checked` turns into per-layer specs. Kept as a typed
/// sub-document of [`ModelMeta::extra`] (`"family"`) so that the metadata format stays
/// backward compatible and the many `HParams` literals stay as they are.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FamilyParams {
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`): Gemma 3,
    /// Qwen 3.
    pub qk_norm: bool,
    /// RMSNorms of the attention and FFN outputs before the residual adds
    /// (`post_attention_norm`, `post_ffw_norm`): Gemma 2 / 3.
    pub post_norms: bool,
    /// Biases of the q, k and v projections (`attn_q.bias` …): Qwen 2.
    pub qkv_bias: bool,
    /// The token embeddings are multiplied by this (Gemma: `√n_embd`).
    pub embed_scale: Option<f32>,
    /// The sliding window (keys a query sees, itself included) of the layers `swa_layers` marks.
    pub sliding_window: Option<u32>,
    /// One entry per layer: `true` for a sliding-window layer (empty: none).
    pub swa_layers: Vec<bool>,
    /// RoPE base of the sliding-window layers (the others use `HParams::rope_theta`).
    pub rope_theta_swa: Option<f32>,
    /// Linear RoPE scaling factor (positions divided by it) of the global layers.
    pub rope_linear: Option<f32>,
    /// Per-frequency RoPE divisors in the tensor `rope_freqs.weight` (`rope_dim / 2` floats):
    /// Llama 3.1 / 3.2 (`rope_type: "llama3"`), as llama.cpp's converter writes them.
    pub rope_freq_factors: bool,
    /// `cap · tanh(logit / cap)` on the final logits (Gemma 2).
    pub final_logit_softcap: Option<f32>,
    /// `cap · tanh(s / cap)` on the attention scores (Gemma 2).
    pub attn_logit_softcap: Option<f32>,
}

impl FamilyParams {
    /// Whether every field is off (the params of a llama-family or BitNet model).
    pub fn is_default(&self) -> bool {
        *self == FamilyParams::default()
    }
}

impl ModelMeta {
    /// The [`FamilyParams`] stored under [`FAMILY_KEY`] (defaults when absent).
    pub fn family(&self) -> crate::error::Result<FamilyParams> {
        match self.extra.get(FAMILY_KEY) {
            None => Ok(FamilyParams::default()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                crate::error::FormatError::OutOfRange {
                    what: "metadata".into(),
                    detail: format!("extra.{FAMILY_KEY}: {e}"),
                }
            }),
        }
    }

    /// Store `f` under [`FAMILY_KEY`] (removed when all off).
    pub fn set_family(&mut self, f: &FamilyParams) {
        if f.is_default() {
            self.extra.remove(FAMILY_KEY);
        } else if let Ok(v) = serde_json::to_value(f) {
            self.extra.insert(FAMILY_KEY.into(), v);
        }
    }
}
