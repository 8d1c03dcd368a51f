//! # tern-shaders: every WGSL kernel of the GPU engine, registered in one table
//!
//! Kernels are real `.wgsl` files under `shaders/wgsl/`, pulled in with `include_str!` here and
//! nowhere else. [`Shader`] lists them; [`Shader::source`] is the text handed to wgpu (the shared
//! helpers of `common.wgsl` prepended); [`Shader::variants`] lists every combination of
//! `override` constants a launcher may ask for, so the CPU-only test in this crate can validate
//! each one with naga (parse, validate, resolve the overrides, validate again, write SPIR-V).
//!
//! A variant's [`Variant::label`] is the pipeline label and the pipeline-cache key text used by
//! `tern-gpu` (e.g. `ternary_gemv_2bit_f32_tpr32`).
//!
//! This crate has no dependencies: it is data. `tern-gpu` compiles the pipelines.

/// One WGSL kernel file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shader {
    /// BitNet b1.58 INT8 absmax per-token activation quantization (bit-exact).
    ActQuantInt8,
    /// Ternary GEMV/GEMM on packed 2-bit / base-3 codes with INT8 activations (bit-exact).
    TernaryGemv,
    /// Q8_0 / Q4_0 / Q4_1 / Q6_K GEMV/GEMM with f32 activations.
    GgmlGemv,
    /// Tiled ternary GEMM (64 rows × 32 tokens per workgroup) for prefill (bit-exact).
    TernaryGemm,
    /// Tiled Q8_0 / Q4_0 / Q4_1 / Q6_K GEMM (64 rows × 32 tokens per workgroup) for prefill.
    GgmlGemm,
    /// Tiled ternary GEMM, 64 rows × 128 or 64 tokens per workgroup by 4 × 8 micro-tiles (2bit,
    /// one scale group; bit-exact with `TernaryGemm`).
    TernaryGemmT128,
    /// NeuZip rANS decode into a scratch buffer (bit-exact).
    NeuzipDecode,
    /// Fused NeuZip decode + GEMV for a matrix kept compressed (never writes the decoded matrix).
    NeuzipGemv,
    /// Token-embedding rows looked up in a NeuZip matrix kept compressed (bit-exact decode).
    NeuzipEmbed,
    /// RMSNorm over rows.
    RmsNorm,
    /// RMSNorm fused with INT8 absmax quantization of its output (BitNet linear inputs).
    RmsNormQuant,
    /// Rotary position embedding (both pairings), host-computed cos/sin.
    Rope,
    /// SwiGLU, ReLU² GLU, residual add.
    Elementwise,
    /// Greedy sampling: argmax of each row of logits.
    Argmax,
    /// Write a batch's keys or values into the KV cache at the step's position, quantizing
    /// (every `tern_format::KvQuant`; KIVI in stages: key blocks, values leaving, the window).
    KvStore,
    /// RoPE of queries and keys fused with the KV store of keys and values (every format of a
    /// layer of its own), reading the concatenated q/k/v projection (issues 15, 14).
    RopeKv,
    /// The concatenated q/k/v projection's rows split into planar q, k, v.
    QkvSplit,
    /// Causal GQA attention over the KV cache (decode and prefill), online softmax, split-K.
    Attention,
    /// Merge of split-K attention partials.
    AttentionCombine,
    /// Query-tiled causal GQA attention for prefill batches (4 tokens per workgroup; f32 / f16
    /// caches of a layer of its own).
    AttentionPrefill,
    /// MiniCache: merge a pair of layers' keys or values (SLERP, magnitudes, retained pool).
    MinicacheMerge,
    /// Token-embedding row lookup (float or ggml-block table), bit-exact dequantization.
    Embed,
    /// Top-k of a row of logits (per-workgroup selection, then a merge), for GPU sampling.
    TopK,
    /// GPU sampling around the top-k: repetition-penalty tokens set aside, log-sum-exp of a row.
    TopkSample,
    /// f32 / f16 / bf16 matrix GEMV/GEMM (decoded NeuZip tensors, raw float heads).
    FloatGemv,
    /// BitNet a4.8's INT4 absmean activation quantizer, alone or fused with the preceding
    /// RMSNorm (bit-exact).
    ActQuantA48,
    /// BitNet a4.8's TopK-50% + INT8 activation quantizer, alone or fused with the preceding
    /// RMSNorm (bit-exact).
    ActQuantTopK,
    /// Ternary GEMV (2-bit) with INT8 activations that skips zero activation words (bit-exact).
    TernaryGemvSparse,
    /// The wide ternary GEMV (vec4 loads, staged activations, base-3 byte table) with the RMSNorm
    /// + INT8/INT4 quantization fused into its prologue (bit-exact with the unfused passes).
    TernaryGemvWide,
    /// Zero-code counters of quantized activations (sparsity measurement).
    ActStats,
    /// The decode ternary GEMV (2-bit, vec4-aligned rows, 64-column scale groups): 64 codes per
    /// load, packed dots on trit bytes (bit-exact with `TernaryGemv`).
    TernaryGemvDec,
    /// The decode ternary GEMV with the RMSNorm + INT8/INT4 quantization of its input fused into
    /// its prologue (32 rows per workgroup; bit-exact with the unfused passes).
    TernaryGemvDecNorm,
    /// Fused Cut-Cross-Entropy pass A: logit tiles folded into per-block (max, Σ exp) partials.
    Cce,
    /// Fused Cut-Cross-Entropy pass B: merge the partials per position → log p(target).
    CceCombine,
    /// log p(target) from a materialized `[n][vocab]` logit matrix (CCE's comparison path).
    LogSoftmaxTarget,
}

const COMMON: &str = include_str!("../wgsl/common.wgsl");
/// The ternary GEMVs' shared epilogue (`pair_scale`, `epilogue`), appended to both.
const TERNARY_EPILOGUE: &str = include_str!("../wgsl/ternary_epilogue.wgsl");
/// The KV cache's quantizing store (every format's stages), appended to `kv_store.wgsl` and to
/// `rope_kv.wgsl` (the fused RoPE + store runs the same code: the same bits).
const KV_QUANT: &str = include_str!("../wgsl/kv_quant.wgsl");
/// NeuZip row decoding (Params, decode table, stream readers), appended to `neuzip_gemv.wgsl`
/// and `neuzip_embed.wgsl`.
const NEUZIP_ROWS: &str = include_str!("../wgsl/neuzip_rows.wgsl");
/// The decode GEMVs' trit bytes, INT8 dot and group sums, appended to `ternary_gemv_dec.wgsl` and
/// `ternary_gemv_dec_norm.wgsl`.
const TERNARY_DEC_COMMON: &str = include_str!("../wgsl/ternary_dec_common.wgsl");
/// The RMSNorm multiplier (sum of squares, tree, rsqrt), appended to `rmsnorm.wgsl` and to
/// `ggml_gemv.wgsl` (its fused norm prologue): one code, the same bits.
const RMS_SCALE: &str = include_str!("../wgsl/rms_scale.wgsl");
/// The ternary matmuls' scale lookup, packed dot and 2-bit trit expansion, appended to the GEMV,
/// the sparse GEMV and both GEMM kernels (one code, the same bits).
const TERNARY_OPS: &str = include_str!("../wgsl/ternary_ops.wgsl");
/// The TopK 50% radix select (threshold passes, ties' ranks), appended to `act_quant_topk.wgsl`
/// and `ternary_gemv_dec_norm.wgsl` (its TopK prologue runs the same code: the same bits).
const TOPK_SELECT: &str = include_str!("../wgsl/topk_select.wgsl");

/// Values of the `override` constants of one pipeline (name, value), in declaration order.
pub type Constants = &'static [(&'static str, f64)];

/// One compiled form of a shader: its label (also the cache key text) and its override values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variant {
    pub shader: Shader,
    pub label: &'static str,
    pub constants: Constants,
}

macro_rules! variants {
    ($shader:expr; $( $label:literal => [$( $k:literal = $v:expr ),*] ),* $(,)?) => {
        &[$( Variant { shader: $shader, label: $label, constants: &[$( ($k, $v as f64) ),*] } ),*]
    };
}

const ACT_QUANT_VARIANTS: &[Variant] = variants![Shader::ActQuantInt8; "act_quant_int8" => []];

const TERNARY_VARIANTS: &[Variant] = variants![Shader::TernaryGemv;
    "ternary_gemv_2bit_f32_tpr32" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_2bit_f16_tpr32" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_2bit_bf16_tpr32" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_base3_f32_tpr32" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_base3_f16_tpr32" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_base3_bf16_tpr32" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_2bit_f32_tpr32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_2bit_f16_tpr32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_2bit_bf16_tpr32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_base3_f32_tpr32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_base3_f16_tpr32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_base3_bf16_tpr32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_2bit_f32_tpr32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_2bit_f16_tpr32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_2bit_bf16_tpr32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_base3_f32_tpr32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_base3_f16_tpr32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_base3_bf16_tpr32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_2bit_f32_tpr32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_2bit_f16_tpr32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_2bit_bf16_tpr32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_base3_f32_tpr32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_base3_f16_tpr32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_base3_bf16_tpr32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
];

const TERNARY_DEC_VARIANTS: &[Variant] = variants![Shader::TernaryGemvDec;
    "ternary_gemv_dec_2bit_f32" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_dec_2bit_f32_plain" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_dec_2bit_f32_a4" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_dec_2bit_f32_a4_plain" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_dec_2bit_f16" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_dec_2bit_f16_plain" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_dec_2bit_f16_a4" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_dec_2bit_f16_a4_plain" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_dec_2bit_bf16" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_dec_2bit_bf16_plain" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_dec_2bit_bf16_a4" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_dec_2bit_bf16_a4_plain" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0],
];

const TERNARY_DEC_NORM_VARIANTS: &[Variant] = variants![Shader::TernaryGemvDecNorm;
    "ternary_gemv_dec_norm_2bit_f32" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_f32_plain" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_f32_a4" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_f32_a4_plain" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_f16" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_f16_plain" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_f16_a4" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_f16_a4_plain" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_bf16" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_bf16_plain" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_bf16_a4" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_bf16_a4_plain" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_f32_topk" => ["SCALE_TYPE" = 0, "ACT4" = 2, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_f32_topk_plain" => ["SCALE_TYPE" = 0, "ACT4" = 2, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_f16_topk" => ["SCALE_TYPE" = 1, "ACT4" = 2, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_f16_topk_plain" => ["SCALE_TYPE" = 1, "ACT4" = 2, "DOT" = 0],
    "ternary_gemv_dec_norm_2bit_bf16_topk" => ["SCALE_TYPE" = 2, "ACT4" = 2, "DOT" = 1],
    "ternary_gemv_dec_norm_2bit_bf16_topk_plain" => ["SCALE_TYPE" = 2, "ACT4" = 2, "DOT" = 0],
];

const TERNARY_WIDE_VARIANTS: &[Variant] = variants![Shader::TernaryGemvWide;
    "ternary_gemv_wide_2bit_f32_tpr32" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_wide_2bit_f16_tpr32" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_wide_2bit_bf16_tpr32" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_wide_base3_f32_tpr32" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_wide_base3_f16_tpr32" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_wide_base3_bf16_tpr32" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 1],
    "ternary_gemv_wide_2bit_f32_tpr32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_wide_2bit_f16_tpr32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_wide_2bit_bf16_tpr32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_wide_base3_f32_tpr32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_wide_base3_f16_tpr32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_wide_base3_bf16_tpr32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 0, "DOT" = 0],
    "ternary_gemv_wide_2bit_f32_tpr32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_wide_2bit_f16_tpr32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_wide_2bit_bf16_tpr32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_wide_base3_f32_tpr32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_wide_base3_f16_tpr32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_wide_base3_bf16_tpr32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 1],
    "ternary_gemv_wide_2bit_f32_tpr32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_wide_2bit_f16_tpr32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_wide_2bit_bf16_tpr32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_wide_base3_f32_tpr32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_wide_base3_f16_tpr32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
    "ternary_gemv_wide_base3_bf16_tpr32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "TPR" = 32, "ACT4" = 1, "DOT" = 0],
];

const GGML_VARIANTS: &[Variant] = variants![Shader::GgmlGemv;
    "ggml_gemv_q8_0_tpr32" => ["QTYPE" = 0, "TPR" = 32],
    "ggml_gemv_q4_0_tpr32" => ["QTYPE" = 1, "TPR" = 32],
    "ggml_gemv_q4_1_tpr32" => ["QTYPE" = 2, "TPR" = 32],
    "ggml_gemv_q6_k_tpr32" => ["QTYPE" = 3, "TPR" = 32],
    "ggml_gemv_norm_q8_0_tpr8" => ["QTYPE" = 0, "TPR" = 8, "NORM" = 1],
    "ggml_gemv_norm_q4_0_tpr8" => ["QTYPE" = 1, "TPR" = 8, "NORM" = 1],
    "ggml_gemv_norm_q4_1_tpr8" => ["QTYPE" = 2, "TPR" = 8, "NORM" = 1],
    "ggml_gemv_norm_q6_k_tpr8" => ["QTYPE" = 3, "TPR" = 8, "NORM" = 1],
];

const TERNARY_GEMM_VARIANTS: &[Variant] = variants![Shader::TernaryGemm;
    "ternary_gemm_2bit_f32_64x32" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1],
    "ternary_gemm_2bit_f16_64x32" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1],
    "ternary_gemm_2bit_bf16_64x32" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1],
    "ternary_gemm_base3_f32_64x32" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1],
    "ternary_gemm_base3_f16_64x32" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1],
    "ternary_gemm_base3_bf16_64x32" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1],
    "ternary_gemm_2bit_f32_64x32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0],
    "ternary_gemm_2bit_f16_64x32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0],
    "ternary_gemm_2bit_bf16_64x32_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0],
    "ternary_gemm_base3_f32_64x32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0],
    "ternary_gemm_base3_f16_64x32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0],
    "ternary_gemm_base3_bf16_64x32_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0],
    "ternary_gemm_2bit_f32_64x32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1],
    "ternary_gemm_2bit_f16_64x32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1],
    "ternary_gemm_2bit_bf16_64x32_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1],
    "ternary_gemm_base3_f32_64x32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1],
    "ternary_gemm_base3_f16_64x32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1],
    "ternary_gemm_base3_bf16_64x32_a4" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1],
    "ternary_gemm_2bit_f32_64x32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0],
    "ternary_gemm_2bit_f16_64x32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0],
    "ternary_gemm_2bit_bf16_64x32_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0],
    "ternary_gemm_base3_f32_64x32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0],
    "ternary_gemm_base3_f16_64x32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0],
    "ternary_gemm_base3_bf16_64x32_a4_plain" => ["LAYOUT" = 1, "SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0],
    // 64 rows × 64 tokens (4 tokens per invocation; 2bit only: 16 KiB of workgroup memory).
    "ternary_gemm_2bit_f32_64x64" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1, "NJ" = 4],
    "ternary_gemm_2bit_f16_64x64" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1, "NJ" = 4],
    "ternary_gemm_2bit_bf16_64x64" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1, "NJ" = 4],
    "ternary_gemm_2bit_f32_64x64_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0, "NJ" = 4],
    "ternary_gemm_2bit_f16_64x64_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0, "NJ" = 4],
    "ternary_gemm_2bit_bf16_64x64_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0, "NJ" = 4],
    "ternary_gemm_2bit_f32_64x64_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1, "NJ" = 4],
    "ternary_gemm_2bit_f16_64x64_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1, "NJ" = 4],
    "ternary_gemm_2bit_bf16_64x64_a4" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1, "NJ" = 4],
    "ternary_gemm_2bit_f32_64x64_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0, "NJ" = 4],
    "ternary_gemm_2bit_f16_64x64_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0, "NJ" = 4],
    "ternary_gemm_2bit_bf16_64x64_a4_plain" => ["LAYOUT" = 0, "SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0, "NJ" = 4],
];

// 64 rows × 128 tokens (256 invocations) and 64 × 64 (`j8`, 128 invocations), 4 rows × 8 tokens per
// invocation (2bit, group 0; `g`: scale groups of a multiple of 64 columns).
const TERNARY_GEMM_T128_VARIANTS: &[Variant] = variants![Shader::TernaryGemmT128;
    "ternary_gemm_2bit_f32_64x128" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1, "WG" = 256],
    "ternary_gemm_2bit_f16_64x128" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1, "WG" = 256],
    "ternary_gemm_2bit_bf16_64x128" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1, "WG" = 256],
    "ternary_gemm_2bit_f32_64x128_plain" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0, "WG" = 256],
    "ternary_gemm_2bit_f16_64x128_plain" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0, "WG" = 256],
    "ternary_gemm_2bit_bf16_64x128_plain" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0, "WG" = 256],
    "ternary_gemm_2bit_f32_64x128_a4" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1, "WG" = 256],
    "ternary_gemm_2bit_f16_64x128_a4" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1, "WG" = 256],
    "ternary_gemm_2bit_bf16_64x128_a4" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1, "WG" = 256],
    "ternary_gemm_2bit_f32_64x128_a4_plain" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0, "WG" = 256],
    "ternary_gemm_2bit_f16_64x128_a4_plain" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0, "WG" = 256],
    "ternary_gemm_2bit_bf16_64x128_a4_plain" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0, "WG" = 256],
    "ternary_gemm_2bit_f32_64x64j8" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1, "WG" = 128],
    "ternary_gemm_2bit_f16_64x64j8" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1, "WG" = 128],
    "ternary_gemm_2bit_bf16_64x64j8" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1, "WG" = 128],
    "ternary_gemm_2bit_f32_64x64j8_plain" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0, "WG" = 128],
    "ternary_gemm_2bit_f16_64x64j8_plain" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0, "WG" = 128],
    "ternary_gemm_2bit_bf16_64x64j8_plain" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0, "WG" = 128],
    "ternary_gemm_2bit_f32_64x64j8_a4" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1, "WG" = 128],
    "ternary_gemm_2bit_f16_64x64j8_a4" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1, "WG" = 128],
    "ternary_gemm_2bit_bf16_64x64j8_a4" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1, "WG" = 128],
    "ternary_gemm_2bit_f32_64x64j8_a4_plain" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0, "WG" = 128],
    "ternary_gemm_2bit_f16_64x64j8_a4_plain" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0, "WG" = 128],
    "ternary_gemm_2bit_bf16_64x64j8_a4_plain" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0, "WG" = 128],
    "ternary_gemm_2bit_f32_64x128g" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x128g" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x128g" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x128g_plain" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x128g_plain" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x128g_plain" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x128g_a4" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x128g_a4" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x128g_a4" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x128g_a4_plain" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x128g_a4_plain" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x128g_a4_plain" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0, "WG" = 256, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x64j8g" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 1, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x64j8g" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 1, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x64j8g" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 1, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x64j8g_plain" => ["SCALE_TYPE" = 0, "ACT4" = 0, "DOT" = 0, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x64j8g_plain" => ["SCALE_TYPE" = 1, "ACT4" = 0, "DOT" = 0, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x64j8g_plain" => ["SCALE_TYPE" = 2, "ACT4" = 0, "DOT" = 0, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x64j8g_a4" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 1, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x64j8g_a4" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 1, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x64j8g_a4" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 1, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f32_64x64j8g_a4_plain" => ["SCALE_TYPE" = 0, "ACT4" = 1, "DOT" = 0, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_f16_64x64j8g_a4_plain" => ["SCALE_TYPE" = 1, "ACT4" = 1, "DOT" = 0, "WG" = 128, "GROUPED" = 1],
    "ternary_gemm_2bit_bf16_64x64j8g_a4_plain" => ["SCALE_TYPE" = 2, "ACT4" = 1, "DOT" = 0, "WG" = 128, "GROUPED" = 1],
];

const GGML_GEMM_VARIANTS: &[Variant] = variants![Shader::GgmlGemm;
    "ggml_gemm_q8_0_64x32" => ["QTYPE" = 0],
    "ggml_gemm_q4_0_64x32" => ["QTYPE" = 1],
    "ggml_gemm_q4_1_64x32" => ["QTYPE" = 2],
    "ggml_gemm_q6_k_64x32" => ["QTYPE" = 3],
];

const ACT_QUANT_A48_VARIANTS: &[Variant] = variants![Shader::ActQuantA48;
    "act_quant_int4" => ["NORM" = 0],
    "rmsnorm_quant_int4" => ["NORM" = 1],
];
const ACT_QUANT_TOPK_VARIANTS: &[Variant] = variants![Shader::ActQuantTopK;
    "act_quant_topk50_int8" => ["NORM" = 0],
    "rmsnorm_quant_topk50_int8" => ["NORM" = 1],
];
const TERNARY_GEMV_SPARSE_VARIANTS: &[Variant] = variants![Shader::TernaryGemvSparse;
    "ternary_gemv_sparse_2bit_f32" => ["SCALE_TYPE" = 0, "DOT" = 1],
    "ternary_gemv_sparse_2bit_f16" => ["SCALE_TYPE" = 1, "DOT" = 1],
    "ternary_gemv_sparse_2bit_bf16" => ["SCALE_TYPE" = 2, "DOT" = 1],
    "ternary_gemv_sparse_2bit_f32_plain" => ["SCALE_TYPE" = 0, "DOT" = 0],
    "ternary_gemv_sparse_2bit_f16_plain" => ["SCALE_TYPE" = 1, "DOT" = 0],
    "ternary_gemv_sparse_2bit_bf16_plain" => ["SCALE_TYPE" = 2, "DOT" = 0],
];
const ACT_STATS_VARIANTS: &[Variant] = variants![Shader::ActStats; "act_stats" => []];
const NEUZIP_VARIANTS: &[Variant] = variants![Shader::NeuzipDecode; "neuzip_decode" => []];
const NEUZIP_GEMV_VARIANTS: &[Variant] = variants![Shader::NeuzipGemv; "neuzip_gemv" => []];
const NEUZIP_EMBED_VARIANTS: &[Variant] = variants![Shader::NeuzipEmbed; "neuzip_embed" => []];
const RMSNORM_VARIANTS: &[Variant] = variants![Shader::RmsNorm; "rmsnorm" => []];
const RMSNORM_QUANT_VARIANTS: &[Variant] =
    variants![Shader::RmsNormQuant; "rmsnorm_quant_int8" => []];
const ROPE_VARIANTS: &[Variant] = variants![Shader::Rope;
    "rope_normal" => ["NEOX" = 0],
    "rope_neox" => ["NEOX" = 1],
];
const ELEMENTWISE_VARIANTS: &[Variant] = variants![Shader::Elementwise;
    "swiglu" => ["OP" = 0],
    "relu2_glu" => ["OP" = 1],
    "add" => ["OP" = 2],
];
// FMT: kv_store.wgsl's (0 f32, 1 f16, 2 q8, 3 q4, 4 q3, 5 q2, 6 a4, 7 a3).
const ROPE_KV_VARIANTS: &[Variant] = variants![Shader::RopeKv;
    "rope_kv_f32_normal" => ["NEOX" = 0, "FMT" = 0],
    "rope_kv_f32_neox" => ["NEOX" = 1, "FMT" = 0],
    "rope_kv_f16_normal" => ["NEOX" = 0, "FMT" = 1],
    "rope_kv_f16_neox" => ["NEOX" = 1, "FMT" = 1],
    "rope_kv_q8_normal" => ["NEOX" = 0, "FMT" = 2],
    "rope_kv_q8_neox" => ["NEOX" = 1, "FMT" = 2],
    "rope_kv_q4_normal" => ["NEOX" = 0, "FMT" = 3],
    "rope_kv_q4_neox" => ["NEOX" = 1, "FMT" = 3],
    "rope_kv_q3_normal" => ["NEOX" = 0, "FMT" = 4],
    "rope_kv_q3_neox" => ["NEOX" = 1, "FMT" = 4],
    "rope_kv_q2_normal" => ["NEOX" = 0, "FMT" = 5],
    "rope_kv_q2_neox" => ["NEOX" = 1, "FMT" = 5],
    "rope_kv_a4_normal" => ["NEOX" = 0, "FMT" = 6],
    "rope_kv_a4_neox" => ["NEOX" = 1, "FMT" = 6],
    "rope_kv_a3_normal" => ["NEOX" = 0, "FMT" = 7],
    "rope_kv_a3_neox" => ["NEOX" = 1, "FMT" = 7],
];
const QKV_SPLIT_VARIANTS: &[Variant] = variants![Shader::QkvSplit; "qkv_split" => []];
const ARGMAX_VARIANTS: &[Variant] = variants![Shader::Argmax; "argmax" => []];
// FMT: tern_format::KvQuant::ALL order (f32 f16 q8 q4 q3 q2 a4 a3); STAGE: 0 whole rows,
// 1 KIVI key blocks, 2 KIVI values leaving the window, 3 the KIVI f16 window.
const KV_STORE_VARIANTS: &[Variant] = variants![Shader::KvStore;
    "kv_store_f32" => ["FMT" = 0, "STAGE" = 0],
    "kv_store_f16" => ["FMT" = 1, "STAGE" = 0],
    "kv_store_q8" => ["FMT" = 2, "STAGE" = 0],
    "kv_store_q4_keys" => ["FMT" = 3, "STAGE" = 1],
    "kv_store_q4_values" => ["FMT" = 3, "STAGE" = 2],
    "kv_store_q4_keys_step" => ["FMT" = 3, "STAGE" = 4],
    "kv_store_q4_values_step" => ["FMT" = 3, "STAGE" = 5],
    "kv_store_q3_keys" => ["FMT" = 4, "STAGE" = 1],
    "kv_store_q3_values" => ["FMT" = 4, "STAGE" = 2],
    "kv_store_q3_keys_step" => ["FMT" = 4, "STAGE" = 4],
    "kv_store_q3_values_step" => ["FMT" = 4, "STAGE" = 5],
    "kv_store_q2_keys" => ["FMT" = 5, "STAGE" = 1],
    "kv_store_q2_values" => ["FMT" = 5, "STAGE" = 2],
    "kv_store_q2_keys_step" => ["FMT" = 5, "STAGE" = 4],
    "kv_store_q2_values_step" => ["FMT" = 5, "STAGE" = 5],
    "kv_store_a4" => ["FMT" = 6, "STAGE" = 0],
    "kv_store_a3" => ["FMT" = 7, "STAGE" = 0],
    "kv_window" => ["FMT" = 1, "STAGE" = 3],
];
// MC: 0 a layer of its own, 1 / 2 the first / second layer of a MiniCache pair.
const ATTENTION_VARIANTS: &[Variant] = variants![Shader::Attention;
    "attention_f32_wg256" => ["FMT" = 0, "MC" = 0],
    "attention_f16_wg256" => ["FMT" = 1, "MC" = 0],
    "attention_q8_wg256" => ["FMT" = 2, "MC" = 0],
    "attention_q4_wg256" => ["FMT" = 3, "MC" = 0],
    "attention_q3_wg256" => ["FMT" = 4, "MC" = 0],
    "attention_q2_wg256" => ["FMT" = 5, "MC" = 0],
    "attention_a4_wg256" => ["FMT" = 6, "MC" = 0],
    "attention_a3_wg256" => ["FMT" = 7, "MC" = 0],
    "attention_f32_mc1_wg256" => ["FMT" = 0, "MC" = 1],
    "attention_f16_mc1_wg256" => ["FMT" = 1, "MC" = 1],
    "attention_q8_mc1_wg256" => ["FMT" = 2, "MC" = 1],
    "attention_q4_mc1_wg256" => ["FMT" = 3, "MC" = 1],
    "attention_q3_mc1_wg256" => ["FMT" = 4, "MC" = 1],
    "attention_q2_mc1_wg256" => ["FMT" = 5, "MC" = 1],
    "attention_a4_mc1_wg256" => ["FMT" = 6, "MC" = 1],
    "attention_a3_mc1_wg256" => ["FMT" = 7, "MC" = 1],
    "attention_f32_mc2_wg256" => ["FMT" = 0, "MC" = 2],
    "attention_f16_mc2_wg256" => ["FMT" = 1, "MC" = 2],
    "attention_q8_mc2_wg256" => ["FMT" = 2, "MC" = 2],
    "attention_q4_mc2_wg256" => ["FMT" = 3, "MC" = 2],
    "attention_q3_mc2_wg256" => ["FMT" = 4, "MC" = 2],
    "attention_q2_mc2_wg256" => ["FMT" = 5, "MC" = 2],
    "attention_a4_mc2_wg256" => ["FMT" = 6, "MC" = 2],
    "attention_a3_mc2_wg256" => ["FMT" = 7, "MC" = 2],
    "attention_q4_words_wg256" => ["FMT" = 3, "MC" = 0, "WORDS" = 1],
    "attention_q4_mc1_words_wg256" => ["FMT" = 3, "MC" = 1, "WORDS" = 1],
    "attention_q4_mc2_words_wg256" => ["FMT" = 3, "MC" = 2, "WORDS" = 1],
    "attention_q3_words_wg256" => ["FMT" = 4, "MC" = 0, "WORDS" = 1],
    "attention_q3_mc1_words_wg256" => ["FMT" = 4, "MC" = 1, "WORDS" = 1],
    "attention_q3_mc2_words_wg256" => ["FMT" = 4, "MC" = 2, "WORDS" = 1],
    "attention_q2_words_wg256" => ["FMT" = 5, "MC" = 0, "WORDS" = 1],
    "attention_q2_mc1_words_wg256" => ["FMT" = 5, "MC" = 1, "WORDS" = 1],
    "attention_q2_mc2_words_wg256" => ["FMT" = 5, "MC" = 2, "WORDS" = 1],
];
const MINICACHE_MERGE_VARIANTS: &[Variant] =
    variants![Shader::MinicacheMerge; "minicache_merge" => []];
const ATTENTION_COMBINE_VARIANTS: &[Variant] =
    variants![Shader::AttentionCombine; "attention_combine" => []];
// FMT: 0 f32, 1 f16 (tern_format::KvQuant::ALL order).
const ATTENTION_PREFILL_VARIANTS: &[Variant] = variants![Shader::AttentionPrefill;
    "attention_prefill_f32" => ["FMT" = 0],
    "attention_prefill_f16" => ["FMT" = 1],
];
const EMBED_VARIANTS: &[Variant] = variants![Shader::Embed;
    "embed_f32" => ["SRC" = 0],
    "embed_f16" => ["SRC" = 1],
    "embed_bf16" => ["SRC" = 2],
    "embed_q8_0" => ["SRC" = 3],
    "embed_q4_0" => ["SRC" = 4],
    "embed_q4_1" => ["SRC" = 5],
    "embed_q6_k" => ["SRC" = 6],
];
const TOPK_SAMPLE_VARIANTS: &[Variant] = variants![Shader::TopkSample;
    "sample_mask_penalized" => ["PASS" = 0],
    "sample_lse" => ["PASS" = 1],
    "sample_lse_merge" => ["PASS" = 2],
];
const TOPK_VARIANTS: &[Variant] = variants![Shader::TopK;
    "topk" => ["MERGE" = 0],
    "topk_merge" => ["MERGE" = 1],
];
const FLOAT_GEMV_VARIANTS: &[Variant] = variants![Shader::FloatGemv;
    "float_gemv_f32" => ["DTYPE" = 0],
    "float_gemv_f16" => ["DTYPE" = 1],
    "float_gemv_bf16" => ["DTYPE" = 2],
];
const CCE_VARIANTS: &[Variant] = variants![Shader::Cce;
    "cce_q8_0_p128" => ["HEAD" = 0, "TY" = 16, "R" = 2],
    "cce_q4_0_p128" => ["HEAD" = 1, "TY" = 16, "R" = 2],
    "cce_q4_1_p128" => ["HEAD" = 2, "TY" = 16, "R" = 2],
    "cce_q6_k_p128" => ["HEAD" = 3, "TY" = 16, "R" = 2],
    "cce_f32_p128" => ["HEAD" = 4, "TY" = 16, "R" = 2],
    "cce_f16_p128" => ["HEAD" = 5, "TY" = 16, "R" = 2],
    "cce_bf16_p128" => ["HEAD" = 6, "TY" = 16, "R" = 2],
    "cce_q8_0_p64" => ["HEAD" = 0, "TY" = 16, "R" = 1],
    "cce_q4_0_p64" => ["HEAD" = 1, "TY" = 16, "R" = 1],
    "cce_q4_1_p64" => ["HEAD" = 2, "TY" = 16, "R" = 1],
    "cce_q6_k_p64" => ["HEAD" = 3, "TY" = 16, "R" = 1],
    "cce_f32_p64" => ["HEAD" = 4, "TY" = 16, "R" = 1],
    "cce_f16_p64" => ["HEAD" = 5, "TY" = 16, "R" = 1],
    "cce_bf16_p64" => ["HEAD" = 6, "TY" = 16, "R" = 1],
    "cce_q8_0_p16" => ["HEAD" = 0, "TY" = 4, "R" = 1],
    "cce_q4_0_p16" => ["HEAD" = 1, "TY" = 4, "R" = 1],
    "cce_q4_1_p16" => ["HEAD" = 2, "TY" = 4, "R" = 1],
    "cce_q6_k_p16" => ["HEAD" = 3, "TY" = 4, "R" = 1],
    "cce_f32_p16" => ["HEAD" = 4, "TY" = 4, "R" = 1],
    "cce_f16_p16" => ["HEAD" = 5, "TY" = 4, "R" = 1],
    "cce_bf16_p16" => ["HEAD" = 6, "TY" = 4, "R" = 1],
];
const CCE_COMBINE_VARIANTS: &[Variant] = variants![Shader::CceCombine; "cce_combine" => []];
const LOG_SOFTMAX_TARGET_VARIANTS: &[Variant] =
    variants![Shader::LogSoftmaxTarget; "log_softmax_target" => []];

impl Shader {
    /// Every shader, in a fixed order.
    pub const ALL: [Shader; 35] = [
        Shader::ActQuantInt8,
        Shader::TernaryGemv,
        Shader::GgmlGemv,
        Shader::TernaryGemm,
        Shader::GgmlGemm,
        Shader::TernaryGemmT128,
        Shader::NeuzipDecode,
        Shader::NeuzipGemv,
        Shader::RmsNorm,
        Shader::RmsNormQuant,
        Shader::Rope,
        Shader::Elementwise,
        Shader::Argmax,
        Shader::KvStore,
        Shader::RopeKv,
        Shader::QkvSplit,
        Shader::Attention,
        Shader::AttentionCombine,
        Shader::MinicacheMerge,
        Shader::Embed,
        Shader::TopK,
        Shader::TopkSample,
        Shader::FloatGemv,
        Shader::Cce,
        Shader::CceCombine,
        Shader::LogSoftmaxTarget,
        Shader::ActQuantA48,
        Shader::ActQuantTopK,
        Shader::TernaryGemvSparse,
        Shader::TernaryGemvWide,
        Shader::ActStats,
        Shader::TernaryGemvDec,
        Shader::NeuzipEmbed,
        Shader::TernaryGemvDecNorm,
        Shader::AttentionPrefill,
    ];

    /// The file name under `shaders/wgsl/`.
    pub fn file(self) -> &'static str {
        match self {
            Shader::ActQuantInt8 => "act_quant_int8.wgsl",
            Shader::TernaryGemv => "ternary_gemv.wgsl",
            Shader::GgmlGemv => "ggml_gemv.wgsl",
            Shader::TernaryGemm => "ternary_gemm.wgsl",
            Shader::GgmlGemm => "ggml_gemm.wgsl",
            Shader::TernaryGemmT128 => "ternary_gemm_t128.wgsl",
            Shader::NeuzipDecode => "neuzip_decode.wgsl",
            Shader::NeuzipGemv => "neuzip_gemv.wgsl",
            Shader::RmsNorm => "rmsnorm.wgsl",
            Shader::RmsNormQuant => "rmsnorm_quant.wgsl",
            Shader::Rope => "rope.wgsl",
            Shader::Elementwise => "elementwise.wgsl",
            Shader::Argmax => "argmax.wgsl",
            Shader::KvStore => "kv_store.wgsl",
            Shader::RopeKv => "rope_kv.wgsl",
            Shader::QkvSplit => "qkv_split.wgsl",
            Shader::Attention => "attention.wgsl",
            Shader::AttentionCombine => "attention_combine.wgsl",
            Shader::AttentionPrefill => "attention_prefill.wgsl",
            Shader::MinicacheMerge => "minicache_merge.wgsl",
            Shader::Embed => "embed.wgsl",
            Shader::TopK => "topk.wgsl",
            Shader::TopkSample => "topk_sample.wgsl",
            Shader::FloatGemv => "float_gemv.wgsl",
            Shader::Cce => "cce.wgsl",
            Shader::CceCombine => "cce_combine.wgsl",
            Shader::LogSoftmaxTarget => "log_softmax_target.wgsl",
            Shader::ActQuantA48 => "act_quant_a48.wgsl",
            Shader::ActQuantTopK => "act_quant_topk.wgsl",
            Shader::TernaryGemvSparse => "ternary_gemv_sparse.wgsl",
            Shader::TernaryGemvWide => "ternary_gemv_wide.wgsl",
            Shader::ActStats => "act_stats.wgsl",
            Shader::TernaryGemvDec => "ternary_gemv_dec.wgsl",
            Shader::NeuzipEmbed => "neuzip_embed.wgsl",
            Shader::TernaryGemvDecNorm => "ternary_gemv_dec_norm.wgsl",
        }
    }

    /// The kernel's own text (without the shared helpers).
    pub fn kernel_source(self) -> &'static str {
        match self {
            Shader::ActQuantInt8 => include_str!("../wgsl/act_quant_int8.wgsl"),
            Shader::TernaryGemv => include_str!("../wgsl/ternary_gemv.wgsl"),
            Shader::GgmlGemv => include_str!("../wgsl/ggml_gemv.wgsl"),
            Shader::TernaryGemm => include_str!("../wgsl/ternary_gemm.wgsl"),
            Shader::GgmlGemm => include_str!("../wgsl/ggml_gemm.wgsl"),
            Shader::TernaryGemmT128 => include_str!("../wgsl/ternary_gemm_t128.wgsl"),
            Shader::NeuzipDecode => include_str!("../wgsl/neuzip_decode.wgsl"),
            Shader::NeuzipGemv => include_str!("../wgsl/neuzip_gemv.wgsl"),
            Shader::RmsNorm => include_str!("../wgsl/rmsnorm.wgsl"),
            Shader::RmsNormQuant => include_str!("../wgsl/rmsnorm_quant.wgsl"),
            Shader::Rope => include_str!("../wgsl/rope.wgsl"),
            Shader::Elementwise => include_str!("../wgsl/elementwise.wgsl"),
            Shader::Argmax => include_str!("../wgsl/argmax.wgsl"),
            Shader::KvStore => include_str!("../wgsl/kv_store.wgsl"),
            Shader::RopeKv => include_str!("../wgsl/rope_kv.wgsl"),
            Shader::QkvSplit => include_str!("../wgsl/qkv_split.wgsl"),
            Shader::Attention => include_str!("../wgsl/attention.wgsl"),
            Shader::AttentionCombine => include_str!("../wgsl/attention_combine.wgsl"),
            Shader::AttentionPrefill => include_str!("../wgsl/attention_prefill.wgsl"),
            Shader::MinicacheMerge => include_str!("../wgsl/minicache_merge.wgsl"),
            Shader::Embed => include_str!("../wgsl/embed.wgsl"),
            Shader::TopK => include_str!("../wgsl/topk.wgsl"),
            Shader::TopkSample => include_str!("../wgsl/topk_sample.wgsl"),
            Shader::FloatGemv => include_str!("../wgsl/float_gemv.wgsl"),
            Shader::Cce => include_str!("../wgsl/cce.wgsl"),
            Shader::CceCombine => include_str!("../wgsl/cce_combine.wgsl"),
            Shader::LogSoftmaxTarget => include_str!("../wgsl/log_softmax_target.wgsl"),
            Shader::ActQuantA48 => include_str!("../wgsl/act_quant_a48.wgsl"),
            Shader::ActQuantTopK => include_str!("../wgsl/act_quant_topk.wgsl"),
            Shader::TernaryGemvSparse => include_str!("../wgsl/ternary_gemv_sparse.wgsl"),
            Shader::TernaryGemvWide => include_str!("../wgsl/ternary_gemv_wide.wgsl"),
            Shader::ActStats => include_str!("../wgsl/act_stats.wgsl"),
            Shader::TernaryGemvDec => include_str!("../wgsl/ternary_gemv_dec.wgsl"),
            Shader::NeuzipEmbed => include_str!("../wgsl/neuzip_embed.wgsl"),
            Shader::TernaryGemvDecNorm => include_str!("../wgsl/ternary_gemv_dec_norm.wgsl"),
        }
    }

    /// The full module text: `common.wgsl` then the kernel.
    pub fn source(self) -> String {
        let k = self.kernel_source();
        let mut s = String::with_capacity(COMMON.len() + k.len() + 1);
        s.push_str(COMMON);
        s.push('\n');
        s.push_str(k);
        if matches!(
            self,
            Shader::TernaryGemv
                | Shader::TernaryGemvWide
                | Shader::TernaryGemvDec
                | Shader::TernaryGemvDecNorm
        ) {
            s.push('\n');
            s.push_str(TERNARY_EPILOGUE);
        }
        if matches!(
            self,
            Shader::TernaryGemv
                | Shader::TernaryGemvSparse
                | Shader::TernaryGemm
                | Shader::TernaryGemmT128
        ) {
            s.push('\n');
            s.push_str(TERNARY_OPS);
        }
        if matches!(self, Shader::TernaryGemvDec | Shader::TernaryGemvDecNorm) {
            s.push('\n');
            s.push_str(TERNARY_DEC_COMMON);
        }
        if matches!(self, Shader::RmsNorm | Shader::GgmlGemv) {
            s.push('\n');
            s.push_str(RMS_SCALE);
        }
        if matches!(self, Shader::ActQuantTopK | Shader::TernaryGemvDecNorm) {
            s.push('\n');
            s.push_str(TOPK_SELECT);
        }
        if matches!(self, Shader::NeuzipGemv | Shader::NeuzipEmbed) {
            s.push('\n');
            s.push_str(NEUZIP_ROWS);
        }
        if matches!(self, Shader::KvStore | Shader::RopeKv) {
            s.push('\n');
            s.push_str(KV_QUANT);
        }
        s
    }

    /// The compute entry point (every kernel uses `main`).
    pub fn entry_point(self) -> &'static str {
        "main"
    }

    /// Every variant a launcher can request.
    pub fn variants(self) -> &'static [Variant] {
        match self {
            Shader::ActQuantInt8 => ACT_QUANT_VARIANTS,
            Shader::TernaryGemv => TERNARY_VARIANTS,
            Shader::GgmlGemv => GGML_VARIANTS,
            Shader::TernaryGemm => TERNARY_GEMM_VARIANTS,
            Shader::GgmlGemm => GGML_GEMM_VARIANTS,
            Shader::TernaryGemmT128 => TERNARY_GEMM_T128_VARIANTS,
            Shader::NeuzipDecode => NEUZIP_VARIANTS,
            Shader::NeuzipGemv => NEUZIP_GEMV_VARIANTS,
            Shader::RmsNorm => RMSNORM_VARIANTS,
            Shader::RmsNormQuant => RMSNORM_QUANT_VARIANTS,
            Shader::Rope => ROPE_VARIANTS,
            Shader::Elementwise => ELEMENTWISE_VARIANTS,
            Shader::Argmax => ARGMAX_VARIANTS,
            Shader::KvStore => KV_STORE_VARIANTS,
            Shader::RopeKv => ROPE_KV_VARIANTS,
            Shader::QkvSplit => QKV_SPLIT_VARIANTS,
            Shader::Attention => ATTENTION_VARIANTS,
            Shader::AttentionCombine => ATTENTION_COMBINE_VARIANTS,
            Shader::AttentionPrefill => ATTENTION_PREFILL_VARIANTS,
            Shader::MinicacheMerge => MINICACHE_MERGE_VARIANTS,
            Shader::Embed => EMBED_VARIANTS,
            Shader::TopK => TOPK_VARIANTS,
            Shader::TopkSample => TOPK_SAMPLE_VARIANTS,
            Shader::FloatGemv => FLOAT_GEMV_VARIANTS,
            Shader::Cce => CCE_VARIANTS,
            Shader::CceCombine => CCE_COMBINE_VARIANTS,
            Shader::LogSoftmaxTarget => LOG_SOFTMAX_TARGET_VARIANTS,
            Shader::ActQuantA48 => ACT_QUANT_A48_VARIANTS,
            Shader::ActQuantTopK => ACT_QUANT_TOPK_VARIANTS,
            Shader::TernaryGemvSparse => TERNARY_GEMV_SPARSE_VARIANTS,
            Shader::TernaryGemvWide => TERNARY_WIDE_VARIANTS,
            Shader::ActStats => ACT_STATS_VARIANTS,
            Shader::TernaryGemvDec => TERNARY_DEC_VARIANTS,
            Shader::NeuzipEmbed => NEUZIP_EMBED_VARIANTS,
            Shader::TernaryGemvDecNorm => TERNARY_DEC_NORM_VARIANTS,
        }
    }

    /// The variant with this label.
    pub fn variant(self, label: &str) -> Option<&'static Variant> {
        self.variants().iter().find(|v| v.label == label)
    }
}

/// Every variant of every shader.
pub fn all_variants() -> impl Iterator<Item = &'static Variant> {
    Shader::ALL.into_iter().flat_map(|s| s.variants().iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use naga::valid::{Capabilities, ValidationFlags, Validator};

    /// Parse, validate, resolve overrides, validate again and translate to SPIR-V: every variant.
    /// Capabilities are WebGPU's defaults (no f16, no subgroups): what every adapter has.
    #[test]
    fn every_variant_validates_with_naga() {
        let mut count = 0;
        for shader in Shader::ALL {
            let src = shader.source();
            let module = naga::front::wgsl::parse_str(&src)
                .unwrap_or_else(|e| panic!("{}: {}", shader.file(), e.emit_to_string(&src)));
            let mut v = Validator::new(ValidationFlags::all(), Capabilities::empty());
            let info = v
                .validate(&module)
                .unwrap_or_else(|e| panic!("{}: {}", shader.file(), e.emit_to_string(&src)));
            assert!(!shader.variants().is_empty());
            for var in shader.variants() {
                let mut pc = naga::back::PipelineConstants::default();
                for &(k, val) in var.constants {
                    assert!(
                        module
                            .overrides
                            .iter()
                            .any(|(_, o)| o.name.as_deref() == Some(k)),
                        "{}: no override named {k}",
                        var.label
                    );
                    pc.insert(k.to_string(), val);
                }
                let ep = Some((naga::ShaderStage::Compute, shader.entry_point()));
                let (m2, i2) =
                    naga::back::pipeline_constants::process_overrides(&module, &info, ep, &pc)
                        .unwrap_or_else(|e| panic!("{}: overrides: {e}", var.label));
                let mut v2 = Validator::new(ValidationFlags::all(), Capabilities::empty());
                v2.validate(&m2)
                    .unwrap_or_else(|e| panic!("{}: {}", var.label, e.emit_to_string(&src)));
                let opts = naga::back::spv::Options::default();
                naga::back::spv::write_vec(&m2, &i2, &opts, None)
                    .unwrap_or_else(|e| panic!("{}: SPIR-V: {e}", var.label));
                count += 1;
            }
            // Workgroup memory stays within WebGPU's guaranteed 16 KiB (16352 B on downlevel).
            let wg_bytes: u32 = module
                .global_variables
                .iter()
                .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
                .map(|(_, g)| module.types[g.ty].inner.size(module.to_ctx()))
                .sum();
            assert!(
                wg_bytes <= 16352,
                "{}: {wg_bytes} B of workgroup memory",
                shader.file()
            );
        }
        assert_eq!(count, all_variants().count());
    }

    #[test]
    fn labels_are_unique_and_found() {
        let mut labels: Vec<&str> = all_variants().map(|v| v.label).collect();
        let n = labels.len();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), n);
        for v in all_variants() {
            assert_eq!(v.shader.variant(v.label), Some(v));
        }
    }
}
