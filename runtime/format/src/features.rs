//! Model features outside the baseline layer of [`crate::spec`]: [`Feature`], what a backend
//! implements ([`Caps`]), and the typed refusal ([`Unsupported`]). A leaf module (it names no
//! other module of the crate), so that [`crate::error::FormatError`] can carry the refusal.

/// A part of a [`ModelSpec`](crate::spec::ModelSpec) outside the baseline (`spec`'s module
/// doc), which a backend either implements or refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// [`Norms::sub_attn`](crate::spec::Norms::sub_attn) (BitNet).
    SubNormAttn,
    /// [`Norms::sub_ffn`](crate::spec::Norms::sub_ffn) (BitNet).
    SubNormFfn,
    /// [`Activation::Relu2`](crate::spec::Activation::Relu2) (BitNet b1.58 2B4T).
    Relu2,
    /// [`Activation::GeluTanh`](crate::spec::Activation::GeluTanh) (Gemma).
    GeluTanh,
    /// [`FfnSpec::gated`](crate::spec::FfnSpec::gated) false.
    UngatedFfn,
    /// [`Norms::post_attn`](crate::spec::Norms::post_attn) (Gemma 2 / 3).
    PostAttnNorm,
    /// [`Norms::post_ffn`](crate::spec::Norms::post_ffn) (Gemma 2 / 3).
    PostFfnNorm,
    /// [`QkNorm::PerHeadRms`](crate::spec::QkNorm::PerHeadRms) (Gemma 3, Qwen 3).
    QkNorm,
    /// [`AttnSpec::sliding_window`](crate::spec::AttnSpec::sliding_window) (Gemma 2 / 3, Mistral).
    SlidingWindow,
    /// [`AttnSpec::logit_softcap`](crate::spec::AttnSpec::logit_softcap) (Gemma 2).
    AttnSoftcap,
    /// [`Biases`](crate::spec::Biases) (Qwen 2).
    AttnBias,
    /// [`RopeScaling::Linear`](crate::spec::RopeScaling::Linear) (Gemma 3).
    RopeLinear,
    /// [`RopeScaling::Llama3`](crate::spec::RopeScaling::Llama3) (Llama 3.1 / 3.2).
    RopeLlama3,
    /// [`RopeScaling::Yarn`](crate::spec::RopeScaling::Yarn) (Qwen 2.5 long context).
    RopeYarn,
    /// Layers whose [`RopeSpec`](crate::spec::RopeSpec) differs from the first layer's (Gemma 3).
    LayerRope,
    /// Layers whose shape (heads, `head_dim`, `n_ff`) differs from the first layer's.
    LayerShapes,
    /// [`ModelSpec::embed_scale`](crate::spec::ModelSpec::embed_scale) (Gemma).
    EmbedScale,
    /// [`ModelSpec::final_logit_softcap`](crate::spec::ModelSpec::final_logit_softcap) (Gemma 2).
    FinalSoftcap,
}

impl Feature {
    /// Every feature, in the order
    /// [`ModelSpec::features`](crate::spec::ModelSpec::features) reports a layer's.
    pub const ALL: [Feature; 18] = [
        Feature::SubNormAttn,
        Feature::SubNormFfn,
        Feature::Relu2,
        Feature::GeluTanh,
        Feature::UngatedFfn,
        Feature::PostAttnNorm,
        Feature::PostFfnNorm,
        Feature::QkNorm,
        Feature::SlidingWindow,
        Feature::AttnSoftcap,
        Feature::AttnBias,
        Feature::RopeLinear,
        Feature::RopeLlama3,
        Feature::RopeYarn,
        Feature::LayerRope,
        Feature::LayerShapes,
        Feature::EmbedScale,
        Feature::FinalSoftcap,
    ];

    /// What the feature is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Feature::SubNormAttn => "a sub-norm before the attention output projection",
            Feature::SubNormFfn => "a sub-norm before the FFN down projection",
            Feature::Relu2 => "the ReLU² activation",
            Feature::GeluTanh => "the GELU (tanh) activation",
            Feature::UngatedFfn => "an ungated FFN",
            Feature::PostAttnNorm => "a norm after the attention block",
            Feature::PostFfnNorm => "a norm after the FFN block",
            Feature::QkNorm => "per-head query/key norms",
            Feature::SlidingWindow => "sliding-window attention",
            Feature::AttnSoftcap => "an attention logit soft-cap",
            Feature::AttnBias => "attention projection biases",
            Feature::RopeLinear => "linear RoPE scaling",
            Feature::RopeLlama3 => "Llama 3 RoPE scaling",
            Feature::RopeYarn => "YaRN RoPE scaling",
            Feature::LayerRope => "a RoPE base or scaling that differs between layers",
            Feature::LayerShapes => "layers of different shapes",
            Feature::EmbedScale => "an embedding scale",
            Feature::FinalSoftcap => "a final logit soft-cap",
        }
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// What a backend's kernels implement beyond the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The backend's name in messages ("CPU", "GPU").
    pub backend: &'static str,
    pub features: &'static [Feature],
}

impl Caps {
    /// Whether the backend implements `f`.
    pub fn has(&self, f: Feature) -> bool {
        self.features.contains(&f)
    }
}

/// A [`ModelSpec`](crate::spec::ModelSpec) needs a [`Feature`] that a backend does not
/// implement: the first one, with its layer (`None`: a global part).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this model needs {feature}{}, which the {backend} backend does not implement: run it on \
     another device, or with a newer tern",
    at(*layer)
)]
pub struct Unsupported {
    pub backend: &'static str,
    pub feature: Feature,
    pub layer: Option<u32>,
}

fn at(layer: Option<u32>) -> String {
    layer.map_or(String::new(), |l| format!(" (layer {l})"))
}
