//! The architecture description: [`ModelSpec`], what the forward pass does, layer by layer.
//!
//! Built once from a file's metadata ([`ModelSpec::from_file`], [`ModelSpec::from_meta`]) and
//! read by both forward passes (the CPU reference `tern_reference::Model` and the GPU graph
//! builder `tern_gpu::GpuModel`): norms and their placement, QK-norm, the FFN's activation and
//! gating, the attention shape, RoPE, embedding scale, tied head, biases. No forward-pass code
//! matches on [`Arch`]; a new model family is a new way of filling a `ModelSpec` (plus any kernel
//! it needs), not a third forward pass.
//!
//! Every field says which family uses it. What today's families use (llama-family float models,
//! BitNet b1.58 / a4.8) is the *baseline* below plus [`Feature::SubNormAttn`],
//! [`Feature::SubNormFfn`] and [`Feature::Relu2`]; the other [`Feature`]s are representable but
//! no kernel implements them yet. Each backend states what it implements as a [`Caps`] and
//! refuses, at load, a spec that needs anything more ([`ModelSpec::check_supported`] → the typed
//! [`Unsupported`], naming the first missing feature and its layer), rather than ignoring it.
//!
//! Baseline layer (no [`Feature`]): `h += Wo·attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)` with
//! `n = RMSNorm(h)`, then `h += Wdown·(silu(Wgate·m) ⊙ Wup·m)` with `m = RMSNorm(h)`; GQA, any
//! `head_dim`, RoPE over the first `dim` dimensions of each head with either pairing, no biases,
//! every layer the same shape and the same RoPE.

pub use crate::features::{Caps, Feature, Unsupported};

use crate::check::{check_hparams, check_hparams_alone};
use crate::container::TernFile;
use crate::error::{FormatError, Result};
use crate::meta::{Arch, FfnAct, HParams, ModelMeta};

/// How a normalization layer normalizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// RMSNorm, `x / √(mean(x²) + eps) · w`: Llama, BitNet, Gemma (whose `1 + w` weights the
    /// importer stores as `w`), Qwen.
    Rms,
}

/// Where a layer's normalizations are. The pre-attention (`attn_norm`) and pre-FFN
/// (`ffn_norm`) RMSNorms of the residual stream are always there (every family so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Norms {
    /// The kind of every norm of the layer.
    pub kind: NormKind,
    /// A norm of the attention block's output (after `o_proj`, before the residual add;
    /// `post_attention_norm`): Gemma 2 / 3. [`Feature::PostAttnNorm`].
    pub post_attn: bool,
    /// A norm of the FFN block's output (after `down_proj`, before the residual add;
    /// `post_ffw_norm`): Gemma 2 / 3. [`Feature::PostFfnNorm`].
    pub post_ffn: bool,
    /// A norm of the attention output before `o_proj` (`attn_sub_norm`, width `n_head·head_dim`):
    /// BitNet b1.58 / a4.8. [`Feature::SubNormAttn`].
    pub sub_attn: bool,
    /// A norm of the GLU output before `down_proj` (`ffn_sub_norm`, width `n_ff`): BitNet b1.58 /
    /// a4.8. [`Feature::SubNormFfn`].
    pub sub_ffn: bool,
}

/// A normalization of the queries and keys before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    /// None: Llama, BitNet, Qwen 2, Gemma 2.
    None,
    /// RMSNorm of each head's `head_dim` values, one weight vector for the queries and one for
    /// the keys (`attn_q_norm`, `attn_k_norm`): Gemma 3, Qwen 3. [`Feature::QkNorm`].
    PerHeadRms,
}

/// The FFN's activation function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(x) = x·σ(x)` (SwiGLU when gated): Llama, SmolLM2, Qwen, BitNet (GGUF `bitnet`).
    Silu,
    /// `gelu` with the tanh approximation (GeGLU when gated): Gemma. [`Feature::GeluTanh`].
    GeluTanh,
    /// `relu(x)²`: BitNet b1.58 2B4T. [`Feature::Relu2`].
    Relu2,
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FfnSpec {
    /// Hidden width.
    pub n_ff: u32,
    pub act: Activation,
    /// `act(Wgate·m) ⊙ Wup·m` when true (every family so far); `act(Wup·m)` when false
    /// (GPT-2-style MLPs). [`Feature::UngatedFfn`].
    pub gated: bool,
}

/// Bias vectors of the attention projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Biases {
    /// Qwen 2 / 2.5: q, k and v. [`Feature::AttnBias`] for any of the four.
    pub q: bool,
    pub k: bool,
    pub v: bool,
    /// The output projection (none of the supported families).
    pub o: bool,
}

impl Biases {
    pub fn any(&self) -> bool {
        self.q || self.k || self.v || self.o
    }
}

/// The attention's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnSpec {
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads (`n_head` is a multiple; fewer is GQA: Llama 3, SmolLM2, Qwen, Gemma).
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Each query sees at most this many keys (itself included): Gemma 2 / 3 local layers,
    /// Mistral. `None`: the whole causal past. [`Feature::SlidingWindow`].
    pub sliding_window: Option<u32>,
    /// `cap · tanh(s / cap)` on the attention scores before the softmax: Gemma 2 (50).
    /// [`Feature::AttnSoftcap`].
    pub logit_softcap: Option<f32>,
    pub bias: Biases,
}

/// Which dimensions of a head RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairing {
    /// Adjacent pairs `(2j, 2j+1)`: Llama as llama.cpp stores it (GGUF `llama`), BitNet.
    Normal,
    /// `(j, j + dim/2)` (GPT-NeoX, HF `rotate_half`): HF-imported Llama, Qwen, Gemma.
    Neox,
}

/// RoPE frequency scaling for contexts past the training length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE: every family tern runs today.
    None,
    /// Positions divided by `factor` (linear interpolation): Gemma 3 global layers (8).
    /// [`Feature::RopeLinear`].
    Linear { factor: f32 },
    /// Llama 3.1 / 3.2's per-frequency scaling (`rope_type: "llama3"`).
    /// [`Feature::RopeLlama3`].
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: u32,
    },
    /// Llama 3.x scaling as llama.cpp's GGUF converter stores it: each frequency `i` divided by
    /// `rope_freqs.weight[i]` (`dim / 2` floats, the tensor read by the loaders).
    /// [`Feature::RopeLlama3`].
    FreqFactors,
    /// YaRN (`rope_type: "yarn"`): Qwen 2.5 long-context configurations.
    /// [`Feature::RopeYarn`].
    Yarn {
        factor: f32,
        original_context: u32,
        beta_fast: f32,
        beta_slow: f32,
        /// Multiplier of the attention logits' temperature (`mscale`; 1 = none).
        attn_factor: f32,
    },
}

/// One layer's RoPE. A model whose layers differ here (Gemma 3: base 10 000 on local layers,
/// 1 000 000 and linear scaling on global ones) needs [`Feature::LayerRope`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    /// The base θ of the frequencies `θ^(-2i/dim)`: 10 000 (Llama 2), 100 000 (SmolLM2-135M),
    /// 500 000 (Llama 3), 1 000 000 (Qwen 2.5, Gemma 3 global layers).
    pub theta: f32,
    /// Dimensions of each head that are rotated (even, ≤ `head_dim`; usually `head_dim`).
    pub dim: u32,
    pub pairing: RopePairing,
    pub scaling: RopeScaling,
}

impl RopeSpec {
    /// NeoX pairing (the kernels' `neox` flag).
    pub fn neox(&self) -> bool {
        self.pairing == RopePairing::Neox
    }
}

/// What one layer does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerSpec {
    pub norms: Norms,
    pub qk_norm: QkNorm,
    pub attn: AttnSpec,
    pub rope: RopeSpec,
    pub ffn: FfnSpec,
}

impl LayerSpec {
    /// `n_head · head_dim`: the width of the queries and of the attention output.
    pub fn q_dim(&self) -> u64 {
        u64::from(self.attn.n_head) * u64::from(self.attn.head_dim)
    }

    /// `n_head_kv · head_dim`: the width of a key or value row.
    pub fn kv_dim(&self) -> u64 {
        u64::from(self.attn.n_head_kv) * u64::from(self.attn.head_dim)
    }

    /// Whether `other` has the same shape (attention heads and widths, `n_ff`): the backends
    /// size their KV caches and scratch buffers once for all layers.
    fn same_shape(&self, other: &LayerSpec) -> bool {
        let shape = |l: &LayerSpec| (l.attn.n_head, l.attn.n_head_kv, l.attn.head_dim, l.ffn.n_ff);
        shape(self) == shape(other)
    }
}

/// The whole model: global parts and one [`LayerSpec`] per layer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// The family's name, for reports only: no forward-pass code matches on it.
    pub arch: Arch,
    pub n_vocab: u32,
    /// Width of the residual stream.
    pub n_embd: u32,
    /// `eps` of every RMSNorm.
    pub eps: f32,
    /// The token embeddings are multiplied by this before the first layer: Gemma (`√n_embd`).
    /// [`Feature::EmbedScale`].
    pub embed_scale: Option<f32>,
    /// The output head is the token embedding matrix (SmolLM2, Gemma, Llama 3.2 1B/3B);
    /// otherwise it is `output.weight`.
    pub tied_head: bool,
    /// The norm before the head (`output_norm`), there in every family.
    pub final_norm: NormKind,
    /// `cap · tanh(logit / cap)` on the final logits: Gemma 2 (30). [`Feature::FinalSoftcap`].
    pub final_logit_softcap: Option<f32>,
    pub layers: Vec<LayerSpec>,
}

impl From<FfnAct> for Activation {
    fn from(a: FfnAct) -> Self {
        match a {
            FfnAct::Silu => Activation::Silu,
            FfnAct::Relu2 => Activation::Relu2,
            FfnAct::GeluTanh => Activation::GeluTanh,
        }
    }
}

impl LayerSpec {
    /// The layer every layer of today's metadata describes (hyperparameters checked by the
    /// caller): pre-norms, BitNet's sub-norms when `sub_norms`, no QK-norm, the gated FFN with
    /// `ffn_act`, plain RoPE, no biases, full causal attention.
    fn from_hparams(hp: &HParams) -> Self {
        LayerSpec {
            norms: Norms {
                kind: NormKind::Rms,
                post_attn: false,
                post_ffn: false,
                sub_attn: hp.sub_norms,
                sub_ffn: hp.sub_norms,
            },
            qk_norm: QkNorm::None,
            attn: AttnSpec {
                n_head: hp.n_head,
                n_head_kv: hp.n_head_kv,
                head_dim: hp.head_dim,
                sliding_window: None,
                logit_softcap: None,
                bias: Biases::default(),
            },
            rope: RopeSpec {
                theta: hp.rope_theta,
                dim: hp.rope_dim,
                pairing: if hp.rope_neox {
                    RopePairing::Neox
                } else {
                    RopePairing::Normal
                },
                scaling: RopeScaling::None,
            },
            ffn: FfnSpec {
                n_ff: hp.n_ff,
                act: hp.ffn_act.into(),
                gated: true,
            },
        }
    }

    /// The features of this layer outside the baseline, in [`Feature::ALL`] order (the
    /// layer-to-layer ones, [`Feature::LayerRope`] and [`Feature::LayerShapes`], excluded).
    fn features(&self) -> Vec<Feature> {
        let r = &self.rope.scaling;
        [
            (Feature::SubNormAttn, self.norms.sub_attn),
            (Feature::SubNormFfn, self.norms.sub_ffn),
            (Feature::Relu2, self.ffn.act == Activation::Relu2),
            (Feature::GeluTanh, self.ffn.act == Activation::GeluTanh),
            (Feature::UngatedFfn, !self.ffn.gated),
            (Feature::PostAttnNorm, self.norms.post_attn),
            (Feature::PostFfnNorm, self.norms.post_ffn),
            (Feature::QkNorm, self.qk_norm != QkNorm::None),
            (Feature::SlidingWindow, self.attn.sliding_window.is_some()),
            (Feature::AttnSoftcap, self.attn.logit_softcap.is_some()),
            (Feature::AttnBias, self.attn.bias.any()),
            (Feature::RopeLinear, matches!(r, RopeScaling::Linear { .. })),
            (
                Feature::RopeLlama3,
                matches!(r, RopeScaling::Llama3 { .. } | RopeScaling::FreqFactors),
            ),
            (Feature::RopeYarn, matches!(r, RopeScaling::Yarn { .. })),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect()
    }
}

impl ModelSpec {
    /// The spec of a file: its hyperparameters checked against each other and against its
    /// tensors ([`check_hparams`]), then [`ModelSpec::from_checked`]. What the loaders call.
    pub fn from_file(file: &TernFile) -> Result<Self> {
        check_hparams(file)?;
        Self::from_checked(file.meta())
    }

    /// The spec of `meta` on its own: the hyperparameters checked against each other
    /// ([`check_hparams_alone`]; nothing checks `n_layer` against tensors here, so the layer
    /// table is reserved fallibly).
    pub fn from_meta(meta: &ModelMeta) -> Result<Self> {
        check_hparams_alone(&meta.hparams)?;
        Self::from_checked(meta)
    }

    /// The metadata (`Arch` + `HParams` + the [`FamilyParams`](crate::meta::FamilyParams) of
    /// `extra.family`) as a spec: every layer from the hyperparameters
    /// ([`LayerSpec::from_hparams`]), then the family's parts (QK-norm, post-norms, biases,
    /// sliding-window layers with their own RoPE base, RoPE scaling of the global layers),
    /// validated here.
    fn from_checked(meta: &ModelMeta) -> Result<Self> {
        let hp = &meta.hparams;
        let fam = meta.family()?;
        let n = hp.n_layer as usize;
        let bad = |detail: String| FormatError::OutOfRange {
            what: "hyperparameters".into(),
            detail,
        };
        let mut layers = Vec::new();
        layers.try_reserve_exact(n).map_err(|_| {
            bad(format!(
                "n_layer = {n}: the layer table cannot be allocated"
            ))
        })?;
        if !fam.swa_layers.is_empty() && fam.swa_layers.len() != n {
            return Err(bad(format!(
                "{} sliding-window flags for {n} layers",
                fam.swa_layers.len()
            )));
        }
        if fam.swa_layers.iter().any(|&b| b) && fam.sliding_window.is_none() {
            return Err(bad("sliding-window layers without a window".into()));
        }
        if fam.sliding_window == Some(0) {
            return Err(bad("a sliding window of 0 keys".into()));
        }
        let positive = |what: &str, v: Option<f32>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => Err(bad(format!("{what} = {x}"))),
            _ => Ok(()),
        };
        positive("embedding scale", fam.embed_scale)?;
        positive("sliding-window RoPE base", fam.rope_theta_swa)?;
        positive("linear RoPE factor", fam.rope_linear)?;
        positive("final logit soft-cap", fam.final_logit_softcap)?;
        positive("attention logit soft-cap", fam.attn_logit_softcap)?;
        if fam.rope_freq_factors && fam.rope_linear.is_some() {
            return Err(bad(
                "two RoPE scalings (frequency factors and linear)".into()
            ));
        }
        let base = LayerSpec::from_hparams(hp);
        for li in 0..n {
            let mut l = base;
            if fam.qk_norm {
                l.qk_norm = QkNorm::PerHeadRms;
            }
            l.norms.post_attn = fam.post_norms;
            l.norms.post_ffn = fam.post_norms;
            l.attn.bias = Biases {
                q: fam.qkv_bias,
                k: fam.qkv_bias,
                v: fam.qkv_bias,
                o: false,
            };
            l.attn.logit_softcap = fam.attn_logit_softcap;
            let swa = fam.swa_layers.get(li).copied().unwrap_or(false);
            if swa {
                l.attn.sliding_window = fam.sliding_window;
                if let Some(t) = fam.rope_theta_swa {
                    l.rope.theta = t;
                }
            } else if let Some(factor) = fam.rope_linear {
                l.rope.scaling = RopeScaling::Linear { factor };
            } else if fam.rope_freq_factors {
                l.rope.scaling = RopeScaling::FreqFactors;
            }
            layers.push(l);
        }
        Ok(ModelSpec {
            arch: meta.arch,
            n_vocab: hp.n_vocab,
            n_embd: hp.n_embd,
            eps: hp.rms_eps,
            embed_scale: fam.embed_scale,
            tied_head: hp.tied_embeddings,
            final_norm: NormKind::Rms,
            final_logit_softcap: fam.final_logit_softcap,
            layers,
        })
    }

    /// Layer `li`'s spec, or a typed error past the last layer.
    pub fn layer(&self, li: usize) -> Result<&LayerSpec> {
        self.layers.get(li).ok_or_else(|| FormatError::OutOfRange {
            what: "layer index".into(),
            detail: format!("layer {li} of a {}-layer model", self.layers.len()),
        })
    }

    /// Every feature outside the baseline that the spec uses, with its layer (`None`: global):
    /// the global ones first, then layer by layer in [`Feature::ALL`] order.
    pub fn features(&self) -> Vec<(Option<u32>, Feature)> {
        let mut out = Vec::new();
        if self.embed_scale.is_some() {
            out.push((None, Feature::EmbedScale));
        }
        if self.final_logit_softcap.is_some() {
            out.push((None, Feature::FinalSoftcap));
        }
        let first = self.layers.first();
        for (li, l) in self.layers.iter().enumerate() {
            let li = Some(li as u32); // ok: n_layer is a u32
            out.extend(l.features().into_iter().map(|f| (li, f)));
            if first.is_some_and(|f| f.rope != l.rope) {
                out.push((li, Feature::LayerRope));
            }
            if first.is_some_and(|f| !f.same_shape(l)) {
                out.push((li, Feature::LayerShapes));
            }
        }
        out
    }

    /// `Ok` when `caps` implements every feature the spec uses, else the first it does not.
    pub fn check_supported(&self, caps: &Caps) -> std::result::Result<(), Unsupported> {
        match self.features().into_iter().find(|&(_, f)| !caps.has(f)) {
            None => Ok(()),
            Some((layer, feature)) => Err(Unsupported {
                backend: caps.backend,
                feature,
                layer,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{ActivationScheme, Provenance};

    /// SmolLM2-135M's hyperparameters (as the GGUF importer writes them).
    fn smollm2() -> ModelMeta {
        ModelMeta {
            arch: Arch::Llama,
            hparams: HParams {
                n_vocab: 49152,
                n_embd: 576,
                n_layer: 30,
                n_head: 9,
                n_head_kv: 3,
                head_dim: 64,
                n_ff: 1536,
                n_ctx_train: 8192,
                rope_theta: 100_000.0,
                rope_dim: 64,
                rope_neox: false,
                rms_eps: 1e-5,
                ffn_act: FfnAct::Silu,
                tied_embeddings: true,
                sub_norms: false,
            },
            tokenizer: None,
            activations: ActivationScheme::FLOAT,
            provenance: Provenance::default(),
            extra: Default::default(),
        }
    }

    /// BitNet b1.58 2B4T's hyperparameters.
    fn bitnet() -> ModelMeta {
        ModelMeta {
            arch: Arch::Bitnet,
            hparams: HParams {
                n_vocab: 128256,
                n_embd: 2560,
                n_layer: 30,
                n_head: 20,
                n_head_kv: 5,
                head_dim: 128,
                n_ff: 6912,
                n_ctx_train: 4096,
                rope_theta: 500_000.0,
                rope_dim: 128,
                rope_neox: true,
                rms_eps: 1e-5,
                ffn_act: FfnAct::Relu2,
                tied_embeddings: true,
                sub_norms: true,
            },
            tokenizer: None,
            activations: ActivationScheme::A4_8,
            provenance: Provenance::default(),
            extra: Default::default(),
        }
    }

    const TODAY: Caps = Caps {
        backend: "test",
        features: &[Feature::SubNormAttn, Feature::SubNormFfn, Feature::Relu2],
    };
    const NONE: Caps = Caps {
        backend: "bare",
        features: &[],
    };

    #[test]
    fn smollm2_spec_is_the_baseline() {
        let s = ModelSpec::from_meta(&smollm2()).unwrap();
        assert_eq!((s.n_vocab, s.n_embd, s.eps), (49152, 576, 1e-5));
        assert!(s.tied_head);
        assert_eq!(s.final_norm, NormKind::Rms);
        assert_eq!((s.embed_scale, s.final_logit_softcap), (None, None));
        assert_eq!(s.layers.len(), 30);
        let l = s.layers[29];
        assert_eq!(
            (l.attn.n_head, l.attn.n_head_kv, l.attn.head_dim),
            (9, 3, 64)
        );
        assert_eq!((l.q_dim(), l.kv_dim()), (576, 192));
        assert_eq!(
            l.ffn,
            FfnSpec {
                n_ff: 1536,
                act: Activation::Silu,
                gated: true
            }
        );
        assert_eq!(l.rope.theta, 100_000.0);
        assert_eq!(
            (l.rope.dim, l.rope.pairing, l.rope.neox()),
            (64, RopePairing::Normal, false)
        );
        assert_eq!(l.rope.scaling, RopeScaling::None);
        assert_eq!(l.qk_norm, QkNorm::None);
        assert!(!l.norms.sub_attn && !l.norms.sub_ffn && !l.norms.post_attn && !l.norms.post_ffn);
        assert!(!l.attn.bias.any());
        assert_eq!((l.attn.sliding_window, l.attn.logit_softcap), (None, None));
        // nothing outside the baseline: even a backend with no features runs it
        assert!(s.features().is_empty());
        assert_eq!(s.check_supported(&NONE), Ok(()));
    }

    #[test]
    fn bitnet_spec_has_sub_norms_and_relu2() {
        let s = ModelSpec::from_meta(&bitnet()).unwrap();
        let l = s.layers[0];
        assert!(l.norms.sub_attn && l.norms.sub_ffn);
        assert_eq!(l.ffn.act, Activation::Relu2);
        assert!(l.rope.neox());
        assert!(s.layers.iter().all(|x| *x == l));
        let f = s.features();
        assert_eq!(f.len(), 30 * 3);
        assert_eq!(
            &f[..3],
            &[
                (Some(0), Feature::SubNormAttn),
                (Some(0), Feature::SubNormFfn),
                (Some(0), Feature::Relu2)
            ]
        );
        assert_eq!(s.check_supported(&TODAY), Ok(()));
        let e = s.check_supported(&NONE).unwrap_err();
        assert_eq!(
            e,
            Unsupported {
                backend: "bare",
                feature: Feature::SubNormAttn,
                layer: Some(0)
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("sub-norm") && msg.contains("layer 0") && msg.contains("bare"),
            "{msg}"
        );
    }

    /// Turn `f` on in `s` with a value a family uses; returns the layer the feature is reported
    /// at (`None`: global). Exhaustive, so a new feature needs a case here.
    fn turn_on(s: &mut ModelSpec, f: Feature) -> Option<u32> {
        let l = &mut s.layers[3];
        match f {
            Feature::SubNormAttn => l.norms.sub_attn = true,
            Feature::SubNormFfn => l.norms.sub_ffn = true,
            Feature::Relu2 => l.ffn.act = Activation::Relu2,
            Feature::GeluTanh => l.ffn.act = Activation::GeluTanh,
            Feature::UngatedFfn => l.ffn.gated = false,
            Feature::PostAttnNorm => l.norms.post_attn = true,
            Feature::PostFfnNorm => l.norms.post_ffn = true,
            Feature::QkNorm => l.qk_norm = QkNorm::PerHeadRms,
            Feature::SlidingWindow => l.attn.sliding_window = Some(512),
            Feature::AttnSoftcap => l.attn.logit_softcap = Some(50.0),
            Feature::AttnBias => l.attn.bias.k = true,
            Feature::LayerRope => l.rope.theta = 1e6,
            Feature::LayerShapes => l.ffn.n_ff = 1024,
            Feature::RopeLinear | Feature::RopeLlama3 | Feature::RopeYarn => {
                let scaling = match f {
                    Feature::RopeLinear => RopeScaling::Linear { factor: 8.0 },
                    Feature::RopeLlama3 => RopeScaling::Llama3 {
                        factor: 32.0,
                        low_freq_factor: 1.0,
                        high_freq_factor: 4.0,
                        original_context: 8192,
                    },
                    _ => RopeScaling::Yarn {
                        factor: 4.0,
                        original_context: 32768,
                        beta_fast: 32.0,
                        beta_slow: 1.0,
                        attn_factor: 1.0,
                    },
                };
                // every layer alike (else it is also `LayerRope`)
                for l in &mut s.layers {
                    l.rope.scaling = scaling;
                }
                return Some(0);
            }
            Feature::EmbedScale => {
                s.embed_scale = Some(24.0);
                return None;
            }
            Feature::FinalSoftcap => {
                s.final_logit_softcap = Some(30.0);
                return None;
            }
        }
        Some(3)
    }

    /// Each feature, turned on alone in a baseline spec, is reported (with its layer) and refused
    /// by a backend without it; a backend with every feature takes it. With several, the first
    /// is named: the global ones, then the layers in order.
    #[test]
    fn every_feature_is_reported_and_refused() {
        let base = ModelSpec::from_meta(&smollm2()).unwrap();
        let all = Caps {
            backend: "all",
            features: &Feature::ALL,
        };
        for (i, &f) in Feature::ALL.iter().enumerate() {
            assert!(!Feature::ALL[..i].contains(&f), "{f:?} twice in ALL");
            let mut s = base.clone();
            let layer = turn_on(&mut s, f);
            let found = s.features();
            assert_eq!(found.first(), Some(&(layer, f)), "{f:?}");
            assert!(found.iter().all(|&(_, g)| g == f), "{f:?}: {found:?}");
            let e = s.check_supported(&NONE).unwrap_err();
            assert_eq!((e.feature, e.layer, e.backend), (f, layer, "bare"));
            assert!(e.to_string().contains(f.describe()), "{e}");
            assert_eq!(s.check_supported(&all), Ok(()));
            assert_eq!(s.check_supported(&TODAY).is_ok(), TODAY.has(f), "{f:?}");
        }
        let mut s = base.clone();
        s.layers[7].qk_norm = QkNorm::PerHeadRms;
        s.layers[2].attn.sliding_window = Some(4096);
        let e = s.check_supported(&TODAY).unwrap_err();
        assert_eq!((e.feature, e.layer), (Feature::SlidingWindow, Some(2)));
        s.embed_scale = Some(2.0);
        let e = s.check_supported(&TODAY).unwrap_err();
        assert_eq!((e.feature, e.layer), (Feature::EmbedScale, None));
    }

    /// The spec's checks are `check_hparams_alone`'s: a bad hyperparameter is its typed error.
    #[test]
    fn bad_hparams_are_refused() {
        for f in [
            (|h: &mut HParams| h.n_head_kv = 2) as fn(&mut HParams),
            |h| h.n_layer = 0,
            |h| h.rope_dim = 65,
            |h| h.rope_theta = f32::NAN,
        ] {
            let mut m = smollm2();
            f(&mut m.hparams);
            let e = ModelSpec::from_meta(&m).unwrap_err();
            assert!(matches!(e, FormatError::Malformed { .. }), "{e}");
        }
        let s = ModelSpec::from_meta(&smollm2()).unwrap();
        assert!(s.layer(29).is_ok());
        assert!(matches!(s.layer(30), Err(FormatError::OutOfRange { .. })));
    }

    /// Gemma 3 270M's metadata as the GGUF importer writes it (`gguf_meta::family_params`).
    fn gemma3() -> ModelMeta {
        let mut m = smollm2();
        m.arch = Arch::Gemma3;
        let hp = &mut m.hparams;
        (hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv) = (262_144, 640, 18, 4, 1);
        (hp.head_dim, hp.rope_dim, hp.n_ff, hp.rope_theta) = (256, 256, 2048, 1e6);
        (hp.rope_neox, hp.rms_eps, hp.ffn_act) = (true, 1e-6, FfnAct::GeluTanh);
        m.set_family(&crate::meta::FamilyParams {
            qk_norm: true,
            post_norms: true,
            embed_scale: Some(640f32.sqrt()),
            sliding_window: Some(512),
            swa_layers: (0..18).map(|il| il % 6 < 5).collect(),
            rope_theta_swa: Some(10_000.0),
            ..Default::default()
        });
        m
    }

    /// Gemma 3: every sixth layer global (base 1e6, full attention), the others sliding (512
    /// keys, base 1e4); QK-norm, post-norms, GELU-tanh and the embedding scale on every layer.
    #[test]
    fn gemma3_spec_interleaves_sliding_and_global_layers() {
        let meta = gemma3();
        let s = ModelSpec::from_meta(&meta).unwrap();
        assert_eq!(s.embed_scale, Some(640f32.sqrt()));
        for (li, l) in s.layers.iter().enumerate() {
            let global = li % 6 == 5;
            assert_eq!(
                l.attn.sliding_window,
                (!global).then_some(512),
                "layer {li}"
            );
            assert_eq!(l.rope.theta, if global { 1e6 } else { 1e4 }, "layer {li}");
            assert_eq!(l.qk_norm, QkNorm::PerHeadRms);
            assert!(l.norms.post_attn && l.norms.post_ffn && l.rope.neox());
            assert_eq!(l.ffn.act, Activation::GeluTanh);
        }
        let f = s.features();
        assert_eq!(f[0], (None, Feature::EmbedScale));
        assert!(f.contains(&(Some(5), Feature::LayerRope)));
        assert!(!f.contains(&(Some(4), Feature::LayerRope)));
        // the metadata round-trips through JSON (the .tern metadata section)
        let back: ModelMeta = serde_json::from_str(&serde_json::to_string(&meta).unwrap()).unwrap();
        assert_eq!(ModelSpec::from_meta(&back).unwrap(), s);
        // a file without `extra.family` (every file before) is all off
        assert!(smollm2().family().unwrap().is_default());
    }

    /// Bad family parameters are typed errors, not specs.
    #[test]
    fn bad_family_params_are_refused() {
        let cases: [fn(&mut crate::meta::FamilyParams); 4] = [
            |f| f.swa_layers.truncate(3),
            |f| f.sliding_window = None,
            |f| f.sliding_window = Some(0),
            |f| f.embed_scale = Some(-1.0),
        ];
        for c in cases {
            let mut m = gemma3();
            let mut f = m.family().unwrap();
            c(&mut f);
            m.set_family(&f);
            let e = ModelSpec::from_meta(&m).unwrap_err();
            assert!(matches!(e, FormatError::OutOfRange { .. }), "{e}");
        }
        let mut m = gemma3();
        m.extra
            .insert("family".into(), serde_json::json!({"qk_norm": 3}));
        assert!(ModelSpec::from_meta(&m).is_err());
    }
}
