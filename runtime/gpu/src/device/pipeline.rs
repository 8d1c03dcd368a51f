//! Typed pipeline-cache keys (the key's `Display` is the pipeline label) and the cache.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tern_format::{FloatType, TernaryLayout};
use tern_shaders::Shader;

use crate::error::{GpuError, Result};

use super::kinds::suffix;
pub use super::kinds::{ActBits, DotKind, GemmTile};

/// ggml block types: the one table of their facts (bytes, block length, whether the GPU has
/// kernels for them — [`GgmlType::gpu_qtype`], the `QTYPE` override of `ggml_gemv.wgsl`,
/// `ggml_gemm.wgsl`, `embed.wgsl` and `cce.wgsl`) is `tern_format::ggml::BlockType`'s.
pub use tern_format::ggml::BlockType as GgmlType;

/// Element format of a KV cache: `tern_format::KvQuant` (the spec every backend implements, see
/// `tern_format::kv`). It is part of the KV-store and attention pipeline keys, so each format has
/// its own compiled kernels (an override constant), never a runtime flag inside one.
pub type KvFormat = tern_format::KvQuant;

/// How an attention layer reads its cache (MiniCache pairs share one): part of the attention
/// pipeline key (`attention.wgsl`'s `MC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvRole {
    /// Its own keys and values.
    #[default]
    Own,
    /// The first layer of a merged pair: magnitude 0 · direction, its batch's rows unmerged.
    First,
    /// The second layer: magnitude 1 · direction, or its retained row.
    Second,
}

/// Elementwise ops of `elementwise.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EltOp {
    SwiGlu,
    Relu2Glu,
    Add,
    /// `gelu_tanh(a) · b` (Gemma).
    GeGlu,
}

/// One compiled pipeline, and the kernel registry: the key names its shader
/// ([`KernelKey::shader`]), its `override` values ([`KernelKey::constants`]) and its label
/// (`Display`, e.g. `ternary_gemv_2bit_f32_tpr32`: the pipeline label in profiles and docs);
/// [`KernelKey::all`] enumerates every key a launcher may ask for (see `pipeline/registry.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelKey {
    ActQuantInt8,
    /// Ternary GEMV; `act` the activation width (`ActBits`), `dot` the integer dot product.
    TernaryGemv {
        layout: TernaryLayout,
        scale_type: FloatType,
        act: ActBits,
        dot: DotKind,
    },
    GgmlGemv(GgmlType),
    /// `ggml_gemv.wgsl` with its fused RMSNorm prologue (`NORM` = 1).
    GgmlGemvNorm(GgmlType),
    /// Ternary GEMM by tiles of `tile` (`GemmTile::{Tall, TallHalf}`: `ternary_gemm_t128.wgsl`,
    /// whose `grouped` variant takes scale groups of a multiple of 64 columns).
    TernaryGemm {
        layout: TernaryLayout,
        scale_type: FloatType,
        act: ActBits,
        dot: DotKind,
        tile: GemmTile,
        grouped: bool,
    },
    /// BitNet a4.8 quantizers: INT4 absmean (`act_quant_a48.wgsl`) or TopK-50% + INT8
    /// (`act_quant_topk.wgsl`), alone or fused with the preceding RMSNorm.
    ActQuantA48 {
        topk: bool,
        norm: bool,
    },
    /// The wide ternary GEMV with the fused norm prologue (`ternary_gemv_wide.wgsl`).
    TernaryGemvWide {
        layout: TernaryLayout,
        scale_type: FloatType,
        act: ActBits,
        dot: DotKind,
    },
    /// The decode ternary GEMV (`ternary_gemv_dec.wgsl`: 2-bit, vec4-aligned rows).
    TernaryGemvDec {
        scale_type: FloatType,
        act: ActBits,
        dot: DotKind,
    },
    /// The decode ternary GEMV with the fused norm + quantization prologue
    /// (`ternary_gemv_dec_norm.wgsl`: 2-bit, vec4-aligned rows, 32 rows per workgroup).
    /// `topk`: the TopK 50% + INT8 prologue (`act` Int8; issue 13).
    TernaryGemvDecNorm {
        scale_type: FloatType,
        act: ActBits,
        dot: DotKind,
        topk: bool,
    },
    /// Ternary GEMV (2-bit, INT8 activations) that skips zero activation words.
    TernaryGemvSparse {
        scale_type: FloatType,
        dot: DotKind,
    },
    /// Zero-code counters of quantized activations.
    ActStats,
    GgmlGemm(GgmlType),
    NeuzipDecode,
    NeuzipGemv,
    NeuzipEmbed,
    RmsNorm,
    RmsNormQuant,
    Rope {
        neox: bool,
    },
    Elementwise(EltOp),
    /// Rows scaled and biased in place (`bias_scale.wgsl`).
    BiasScale,
    /// Per-head RMSNorm in place (`head_rmsnorm.wgsl`, QK-norm).
    HeadRmsNorm,
    Argmax,
    /// RoPE of q and k fused with the store of keys and values (a layer's cache in `quant`).
    RopeKv {
        quant: KvFormat,
        neox: bool,
    },
    /// The absmax formats' scales pass before [`KernelKey::RopeKv`] (`rope_kv.wgsl` PASS 1: each
    /// (position, kv head)'s f16 scale, keys rotated, then values).
    RopeKvScales {
        quant: KvFormat,
        neox: bool,
    },
    /// The concatenated q/k/v projection split into planar q, k, v.
    QkvSplit,
    /// Whole rows into the cache (f32, f16, q8, a4, a3).
    KvStore(KvFormat),
    /// The absmax formats' (q8, a4, a3) scales pass before [`KernelKey::KvStore`]
    /// (`kv_store.wgsl` STAGE 6).
    KvScales(KvFormat),
    /// KIVI: key blocks (`keys`) or values leaving the window, quantized; `step`: a one-token
    /// batch, whose window row goes in by the same dispatch.
    KvKivi {
        quant: KvFormat,
        keys: bool,
        step: bool,
    },
    /// KIVI: new positions into the f16 window.
    KvWindow,
    Attention(KvFormat, KvRole),
    /// KIVI attention through the word path (`attention.wgsl`'s WORDS = 1): faster over long
    /// key ranges (one workgroup per (token, head group): prefill), slower than [`Self::Attention`]
    /// over the short chunks of a split decode step (measured on an H100, docs/measurements.md).
    AttentionWords(KvFormat, KvRole),
    /// Query-tiled prefill attention (`attention_prefill.wgsl`; f32 / f16, a layer of its own).
    AttentionPrefill(KvFormat),
    /// MiniCache: merge a pair's keys or values.
    MinicacheMerge,
    /// Merge of split-K attention partials.
    AttentionCombine,
    /// Embedding-row lookup from a float table / a ggml-block table.
    EmbedFloat(FloatType),
    EmbedGgml(GgmlType),
    /// Top-k of logits: per-workgroup pass, or the merge of its candidates.
    TopK {
        merge: bool,
    },
    /// GPU sampling (`topk_sample.wgsl`): 0 = set the penalized tokens aside, 1 = log-sum-exp
    /// per workgroup, 2 = its merge.
    TopkSample(u8),
    FloatGemv(FloatType),
    /// Fused CCE pass A over a ggml head / a float head; positions per workgroup (128, 64, 16).
    CceGgml(GgmlType, u32),
    CceFloat(FloatType, u32),
    CceCombine,
    LogSoftmaxTarget,
}

fn ternary_names(layout: TernaryLayout, scale_type: FloatType) -> (&'static str, &'static str) {
    let l = match layout {
        TernaryLayout::Bits2 => "2bit",
        TernaryLayout::Base3 => "base3",
    };
    let s = match scale_type {
        FloatType::F32 => "f32",
        FloatType::F16 => "f16",
        FloatType::Bf16 => "bf16",
    };
    (l, s)
}

impl fmt::Display for KernelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelKey::ActQuantInt8 => f.write_str("act_quant_int8"),
            KernelKey::TernaryGemv {
                layout,
                scale_type,
                act,
                dot,
            } => {
                let (l, s) = ternary_names(*layout, *scale_type);
                write!(f, "ternary_gemv_{l}_{s}_tpr32{}", suffix(*act, *dot))
            }
            KernelKey::TernaryGemvWide {
                layout,
                scale_type,
                act,
                dot,
            } => {
                let (l, s) = ternary_names(*layout, *scale_type);
                write!(f, "ternary_gemv_wide_{l}_{s}_tpr32{}", suffix(*act, *dot))
            }
            KernelKey::TernaryGemvDec {
                scale_type,
                act,
                dot,
            } => {
                let (l, s) = ternary_names(TernaryLayout::Bits2, *scale_type);
                write!(f, "ternary_gemv_dec_{l}_{s}{}", suffix(*act, *dot))
            }
            KernelKey::TernaryGemvDecNorm {
                scale_type,
                act,
                dot,
                topk,
            } => {
                let (l, s) = ternary_names(TernaryLayout::Bits2, *scale_type);
                let k = if *topk { "_topk" } else { "" };
                write!(f, "ternary_gemv_dec_norm_{l}_{s}{k}{}", suffix(*act, *dot))
            }
            KernelKey::GgmlGemv(t) => write!(f, "ggml_gemv_{}_tpr32", t.name()),
            KernelKey::GgmlGemvNorm(t) => write!(f, "ggml_gemv_norm_{}_tpr8", t.name()),
            KernelKey::TernaryGemm {
                layout: l,
                scale_type: s,
                act,
                dot,
                tile,
                grouped,
            } => {
                let ((l, s), g) = (ternary_names(*l, *s), if *grouped { "g" } else { "" });
                write!(
                    f,
                    "ternary_gemm_{l}_{s}_{}{g}{}",
                    tile.name(),
                    suffix(*act, *dot)
                )
            }
            KernelKey::ActQuantA48 { topk, norm } => f.write_str(match (topk, norm) {
                (false, false) => "act_quant_int4",
                (false, true) => "rmsnorm_quant_int4",
                (true, false) => "act_quant_topk50_int8",
                (true, true) => "rmsnorm_quant_topk50_int8",
            }),
            KernelKey::ActStats => f.write_str("act_stats"),
            KernelKey::TernaryGemvSparse { scale_type, dot } => {
                let (_, s) = ternary_names(TernaryLayout::Bits2, *scale_type);
                write!(
                    f,
                    "ternary_gemv_sparse_2bit_{s}{}",
                    suffix(ActBits::Int8, *dot)
                )
            }
            KernelKey::GgmlGemm(t) => write!(f, "ggml_gemm_{}_64x32", t.name()),
            KernelKey::NeuzipDecode => f.write_str("neuzip_decode"),
            KernelKey::NeuzipGemv => f.write_str("neuzip_gemv"),
            KernelKey::NeuzipEmbed => f.write_str("neuzip_embed"),
            KernelKey::RmsNorm => f.write_str("rmsnorm"),
            KernelKey::RmsNormQuant => f.write_str("rmsnorm_quant_int8"),
            KernelKey::Rope { neox } => {
                f.write_str(if *neox { "rope_neox" } else { "rope_normal" })
            }
            KernelKey::Elementwise(op) => f.write_str(match op {
                EltOp::SwiGlu => "swiglu",
                EltOp::Relu2Glu => "relu2_glu",
                EltOp::Add => "add",
                EltOp::GeGlu => "geglu",
            }),
            KernelKey::BiasScale => f.write_str("bias_scale"),
            KernelKey::HeadRmsNorm => f.write_str("head_rmsnorm"),
            KernelKey::Argmax => f.write_str("argmax"),
            KernelKey::RopeKv { quant, neox } => write!(
                f,
                "rope_kv_{}_{}",
                quant.name(),
                if *neox { "neox" } else { "normal" }
            ),
            KernelKey::RopeKvScales { quant, neox } => write!(
                f,
                "rope_kv_scales_{}_{}",
                quant.name(),
                if *neox { "neox" } else { "normal" }
            ),
            KernelKey::QkvSplit => f.write_str("qkv_split"),
            KernelKey::KvStore(kv) => write!(f, "kv_store_{}", kv.name()),
            KernelKey::KvScales(kv) => write!(f, "kv_scales_{}", kv.name()),
            KernelKey::KvKivi { quant, keys, step } => write!(
                f,
                "kv_store_{}_{}{}",
                quant.name(),
                if *keys { "keys" } else { "values" },
                if *step { "_step" } else { "" }
            ),
            KernelKey::KvWindow => f.write_str("kv_window"),
            KernelKey::Attention(kv, role) => {
                let mc = match role {
                    KvRole::Own => "",
                    KvRole::First => "_mc1",
                    KvRole::Second => "_mc2",
                };
                write!(f, "attention_{}{mc}_wg256", kv.name())
            }
            KernelKey::AttentionWords(kv, role) => {
                let mc = match role {
                    KvRole::Own => "",
                    KvRole::First => "_mc1",
                    KvRole::Second => "_mc2",
                };
                write!(f, "attention_{}{mc}_words_wg256", kv.name())
            }
            KernelKey::AttentionPrefill(kv) => write!(f, "attention_prefill_{}", kv.name()),
            KernelKey::MinicacheMerge => f.write_str("minicache_merge"),
            KernelKey::AttentionCombine => f.write_str("attention_combine"),
            KernelKey::EmbedFloat(t) => f.write_str(match t {
                FloatType::F32 => "embed_f32",
                FloatType::F16 => "embed_f16",
                FloatType::Bf16 => "embed_bf16",
            }),
            KernelKey::EmbedGgml(t) => write!(f, "embed_{}", t.name()),
            KernelKey::TopK { merge } => f.write_str(if *merge { "topk_merge" } else { "topk" }),
            KernelKey::TopkSample(pass) => f.write_str(match pass {
                0 => "sample_mask_penalized",
                1 => "sample_lse",
                _ => "sample_lse_merge",
            }),
            KernelKey::FloatGemv(t) => f.write_str(match t {
                FloatType::F32 => "float_gemv_f32",
                FloatType::F16 => "float_gemv_f16",
                FloatType::Bf16 => "float_gemv_bf16",
            }),
            KernelKey::CceGgml(t, bp) => write!(f, "cce_{}_p{bp}", t.name()),
            KernelKey::CceFloat(t, bp) => {
                let (_, s) = ternary_names(TernaryLayout::Bits2, *t);
                write!(f, "cce_{s}_p{bp}")
            }
            KernelKey::CceCombine => f.write_str("cce_combine"),
            KernelKey::LogSoftmaxTarget => f.write_str("log_softmax_target"),
        }
    }
}

impl KernelKey {
    /// The shader file this key compiles.
    pub fn shader(self) -> Shader {
        match self {
            KernelKey::ActQuantInt8 => Shader::ActQuantInt8,
            KernelKey::TernaryGemv { .. } => Shader::TernaryGemv,
            KernelKey::GgmlGemv(_) | KernelKey::GgmlGemvNorm(_) => Shader::GgmlGemv,
            KernelKey::TernaryGemm { tile, .. } => match tile {
                GemmTile::Narrow | GemmTile::Wide => Shader::TernaryGemm,
                GemmTile::Tall | GemmTile::TallHalf => Shader::TernaryGemmT128,
                GemmTile::Coop => Shader::TernaryGemmCoop,
            },
            KernelKey::ActQuantA48 { topk: true, .. } => Shader::ActQuantTopK,
            KernelKey::ActQuantA48 { topk: false, .. } => Shader::ActQuantA48,
            KernelKey::TernaryGemvSparse { .. } => Shader::TernaryGemvSparse,
            KernelKey::TernaryGemvWide { .. } => Shader::TernaryGemvWide,
            KernelKey::TernaryGemvDec { .. } => Shader::TernaryGemvDec,
            KernelKey::TernaryGemvDecNorm { .. } => Shader::TernaryGemvDecNorm,
            KernelKey::ActStats => Shader::ActStats,
            KernelKey::GgmlGemm(_) => Shader::GgmlGemm,
            KernelKey::NeuzipDecode => Shader::NeuzipDecode,
            KernelKey::NeuzipGemv => Shader::NeuzipGemv,
            KernelKey::NeuzipEmbed => Shader::NeuzipEmbed,
            KernelKey::RmsNorm => Shader::RmsNorm,
            KernelKey::RmsNormQuant => Shader::RmsNormQuant,
            KernelKey::Rope { .. } => Shader::Rope,
            KernelKey::Elementwise(_) => Shader::Elementwise,
            KernelKey::BiasScale => Shader::BiasScale,
            KernelKey::HeadRmsNorm => Shader::HeadRmsNorm,
            KernelKey::Argmax => Shader::Argmax,
            KernelKey::RopeKv { .. } | KernelKey::RopeKvScales { .. } => Shader::RopeKv,
            KernelKey::QkvSplit => Shader::QkvSplit,
            KernelKey::KvStore(_)
            | KernelKey::KvScales(_)
            | KernelKey::KvKivi { .. }
            | KernelKey::KvWindow => Shader::KvStore,
            KernelKey::Attention(..) | KernelKey::AttentionWords(..) => Shader::Attention,
            KernelKey::AttentionPrefill(_) => Shader::AttentionPrefill,
            KernelKey::MinicacheMerge => Shader::MinicacheMerge,
            KernelKey::AttentionCombine => Shader::AttentionCombine,
            KernelKey::EmbedFloat(_) | KernelKey::EmbedGgml(_) => Shader::Embed,
            KernelKey::TopK { .. } => Shader::TopK,
            KernelKey::TopkSample(_) => Shader::TopkSample,
            KernelKey::FloatGemv(_) => Shader::FloatGemv,
            KernelKey::CceGgml(..) | KernelKey::CceFloat(..) => Shader::Cce,
            KernelKey::CceCombine => Shader::CceCombine,
            KernelKey::LogSoftmaxTarget => Shader::LogSoftmaxTarget,
        }
    }
}

/// Shader modules and pipelines, each built once.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: Mutex<HashMap<Shader, Arc<wgpu::ShaderModule>>>,
    pipelines: Mutex<HashMap<KernelKey, Arc<wgpu::ComputePipeline>>>,
}

impl PipelineCache {
    pub(crate) fn len(&self) -> usize {
        self.pipelines.lock().map(|p| p.len()).unwrap_or(0)
    }

    pub(crate) fn get(
        &self,
        device: &wgpu::Device,
        key: KernelKey,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        fn poisoned<E>(_: E) -> GpuError {
            GpuError::Wgpu {
                what: "pipeline cache".into(),
                detail: "lock poisoned".into(),
            }
        }
        if let Some(p) = self.pipelines.lock().map_err(poisoned)?.get(&key) {
            return Ok(Arc::clone(p));
        }
        let constants = key.constants()?;
        let shader = key.shader();
        let module = {
            let mut mods = self.modules.lock().map_err(poisoned)?;
            match mods.get(&shader) {
                Some(m) => Arc::clone(m),
                None => {
                    let src = shader.source().map_err(|e| GpuError::Wgpu {
                        what: format!("assembling {}", shader.file()),
                        detail: e.to_string(),
                    })?;
                    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
                    let m = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(shader.file()),
                        source: wgpu::ShaderSource::Wgsl(src.into()),
                    });
                    if let Some(e) = pollster::block_on(scope.pop()) {
                        return Err(GpuError::Wgpu {
                            what: format!("compiling {}", shader.file()),
                            detail: e.to_string(),
                        });
                    }
                    let m = Arc::new(m);
                    mods.insert(shader, Arc::clone(&m));
                    m
                }
            }
        };
        let label = key.to_string();
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: None,
            module: &module,
            entry_point: Some(shader.entry_point()),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                zero_initialize_workgroup_memory: true,
            },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Wgpu {
                what: format!("pipeline {label}"),
                detail: e.to_string(),
            });
        }
        let p = Arc::new(pipeline);
        self.pipelines
            .lock()
            .map_err(poisoned)?
            .insert(key, Arc::clone(&p));
        Ok(p)
    }
}

mod registry;
pub use registry::Constant;

#[cfg(test)]
mod tests;
