//! # tern-shaders: every WGSL kernel of the GPU engine and the modules they import
//!
//! Kernels and modules are real `.wgsl` files under `shaders/wgsl/`, pulled in with
//! `include_str!` here and nowhere else. [`Shader`] lists the kernels; [`MODULES`] the shared
//! modules (structs and helpers written once). A file names what it uses with a line
//! `// #import name`; [`Shader::source`] is the text handed to wgpu: the kernel with its imports
//! resolved ([`resolve`]: each module at most once, its own imports first, deterministic order;
//! unknown modules and cycles are [`ImportError`]s).
//!
//! Which pipelines exist (a shader plus its `override` values) is not listed here: tern-gpu's
//! typed `KernelKey` derives each pipeline's shader, constants and label and enumerates them
//! (`KernelKey::all`), and its registry test compiles every one with naga.
//!
//! This crate has no dependencies: it is data (see README.md for why the import step is a small
//! preprocessor rather than naga_oil or wesl). `tern-gpu` compiles the pipelines.

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
    /// Ternary GEMM on cooperative matrices (tensor cores): f16 tiles of trits and activation
    /// codes, f32 accumulators; bit-exact with `TernaryGemm` (2bit, one scale group). Needs the
    /// `f16`, `wgpu_cooperative_matrix` and subgroup capabilities ([`Shader::needs_coop_matrix`]).
    TernaryGemmCoop,
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
    /// SwiGLU, ReLU² GLU, GeGLU, residual add.
    Elementwise,
    /// Rows scaled and biased in place (q/k/v projection biases, the embedding scale).
    BiasScale,
    /// Per-head RMSNorm in place (QK-norm).
    HeadRmsNorm,
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

mod import;
#[cfg(test)]
mod tests;

pub use import::{imports_of, resolve, ImportError};

/// Every WGSL module a kernel may `// #import`, by name (its file under `shaders/wgsl/`, less
/// `.wgsl`). Each is inlined at most once into a kernel's final source ([`Shader::source`]).
pub const MODULES: &[(&str, &str)] = &[
    // div_rn, exact f16 <-> f32 with integer ops: imported by every kernel.
    ("common", include_str!("../wgsl/common.wgsl")),
    // The ternary GEMVs' epilogue (pair_scale, epilogue).
    (
        "ternary_epilogue",
        include_str!("../wgsl/ternary_epilogue.wgsl"),
    ),
    // The KV cache's quantizing store (every format's stages): kv_store and the fused rope_kv.
    ("kv_quant", include_str!("../wgsl/kv_quant.wgsl")),
    // NeuZip row decoding (decode table, stream readers): the fused GEMV and embedding.
    ("neuzip_rows", include_str!("../wgsl/neuzip_rows.wgsl")),
    // The decode GEMVs' trit bytes, INT8 dot and group sums.
    (
        "ternary_dec_common",
        include_str!("../wgsl/ternary_dec_common.wgsl"),
    ),
    // The RMSNorm multiplier (sum of squares, tree, rsqrt): rmsnorm and ggml_gemv's prologue.
    ("rms_scale", include_str!("../wgsl/rms_scale.wgsl")),
    // The ternary matmuls' scale lookup and 2-bit trit expansion.
    ("ternary_ops", include_str!("../wgsl/ternary_ops.wgsl")),
    // The TopK 50% radix select (threshold passes, ties' ranks).
    ("topk_select", include_str!("../wgsl/topk_select.wgsl")),
    // The ternary matmuls' parameter uniform.
    (
        "ternary_params",
        include_str!("../wgsl/ternary_params.wgsl"),
    ),
    // dot4: dot4I8Packed or the exact byte sum (DOT).
    ("packed_dot", include_str!("../wgsl/packed_dot.wgsl")),
    // INT4 activations widened to int8 bytes.
    ("int4_act", include_str!("../wgsl/int4_act.wgsl")),
    // NaN test on f32 bits.
    ("nan_bits", include_str!("../wgsl/nan_bits.wgsl")),
    // The activation quantizers' rounding of one value.
    ("act_round", include_str!("../wgsl/act_round.wgsl")),
    // Float sums rounded in the order written (zb, opq, ad).
    ("ordered_sum", include_str!("../wgsl/ordered_sum.wgsl")),
    // The 256-invocation tree sum in the reference's order.
    ("tree_sum256", include_str!("../wgsl/tree_sum256.wgsl")),
    // The (RMSNorm-fused) activation quantizers' parameter uniform and row loads.
    (
        "norm_quant_params",
        include_str!("../wgsl/norm_quant_params.wgsl"),
    ),
    (
        "norm_quant_row",
        include_str!("../wgsl/norm_quant_row.wgsl"),
    ),
    // The KV-cache kernels' per-step uniform.
    ("kv_step", include_str!("../wgsl/kv_step.wgsl")),
    // The KV formats' indexes (FMT), named once.
    ("kv_formats", include_str!("../wgsl/kv_formats.wgsl")),
    // The attention kernels' parameter uniform.
    (
        "attention_params",
        include_str!("../wgsl/attention_params.wgsl"),
    ),
    // How attention reads each cache format (kget / vget), split from attention.wgsl.
    (
        "attention_kv_read",
        include_str!("../wgsl/attention_kv_read.wgsl"),
    ),
    // Unaligned little-endian u32 reads of byte-packed blocks (load32).
    ("byte_load", include_str!("../wgsl/byte_load.wgsl")),
    // The ggml-block matmuls' parameter uniform and f16 reads.
    ("ggml_common", include_str!("../wgsl/ggml_common.wgsl")),
    // Q5_0, Q5_1, IQ4_NL and the K-quants Q2_K..Q5_K read as stored (kq4), shared by the ggml
    // GEMV/GEMM, embed and cce.
    ("ggml_kquants", include_str!("../wgsl/ggml_kquants.wgsl")),
    // f32 -> saturated f16 bits.
    ("f16_sat", include_str!("../wgsl/f16_sat.wgsl")),
    // NeuZip's rANS stream (Params, word and raw-field readers).
    ("neuzip_stream", include_str!("../wgsl/neuzip_stream.wgsl")),
];

impl Shader {
    /// Every shader, in a fixed order.
    pub const ALL: [Shader; 38] = [
        Shader::ActQuantInt8,
        Shader::TernaryGemv,
        Shader::GgmlGemv,
        Shader::TernaryGemm,
        Shader::GgmlGemm,
        Shader::TernaryGemmT128,
        Shader::TernaryGemmCoop,
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
        Shader::BiasScale,
        Shader::HeadRmsNorm,
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
            Shader::TernaryGemmCoop => "ternary_gemm_coop.wgsl",
            Shader::NeuzipDecode => "neuzip_decode.wgsl",
            Shader::NeuzipGemv => "neuzip_gemv.wgsl",
            Shader::RmsNorm => "rmsnorm.wgsl",
            Shader::RmsNormQuant => "rmsnorm_quant.wgsl",
            Shader::Rope => "rope.wgsl",
            Shader::Elementwise => "elementwise.wgsl",
            Shader::BiasScale => "bias_scale.wgsl",
            Shader::HeadRmsNorm => "head_rmsnorm.wgsl",
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
            Shader::TernaryGemmCoop => include_str!("../wgsl/ternary_gemm_coop.wgsl"),
            Shader::NeuzipDecode => include_str!("../wgsl/neuzip_decode.wgsl"),
            Shader::NeuzipGemv => include_str!("../wgsl/neuzip_gemv.wgsl"),
            Shader::RmsNorm => include_str!("../wgsl/rmsnorm.wgsl"),
            Shader::RmsNormQuant => include_str!("../wgsl/rmsnorm_quant.wgsl"),
            Shader::Rope => include_str!("../wgsl/rope.wgsl"),
            Shader::Elementwise => include_str!("../wgsl/elementwise.wgsl"),
            Shader::BiasScale => include_str!("../wgsl/bias_scale.wgsl"),
            Shader::HeadRmsNorm => include_str!("../wgsl/head_rmsnorm.wgsl"),
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

    /// The final source handed to wgpu: the kernel with its `// #import`s resolved from
    /// [`MODULES`] (each module once, dependencies first).
    pub fn source(self) -> Result<String, ImportError> {
        resolve(self.file(), self.kernel_source(), MODULES)
    }

    /// Whether the kernel uses cooperative matrices (and with them `f16` and the subgroup
    /// builtins): it compiles only on a device opened with those features, and validates with
    /// naga's `COOPERATIVE_MATRIX | SHADER_FLOAT16 | SUBGROUP` capabilities.
    pub fn needs_coop_matrix(self) -> bool {
        matches!(self, Shader::TernaryGemmCoop)
    }

    /// The compute entry point (every kernel uses `main`).
    pub fn entry_point(self) -> &'static str {
        "main"
    }
}
