//! TEMPORARY: the old hand-written variant table, kept for the one-off migration check.
#![allow(dead_code)]
use super::Shader;

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

pub fn all_variants() -> impl Iterator<Item = &'static Variant> {
    [
        ACT_QUANT_VARIANTS,
        TERNARY_VARIANTS,
        GGML_VARIANTS,
        TERNARY_GEMM_VARIANTS,
        GGML_GEMM_VARIANTS,
        TERNARY_GEMM_T128_VARIANTS,
        NEUZIP_VARIANTS,
        NEUZIP_GEMV_VARIANTS,
        RMSNORM_VARIANTS,
        RMSNORM_QUANT_VARIANTS,
        ROPE_VARIANTS,
        ELEMENTWISE_VARIANTS,
        ARGMAX_VARIANTS,
        KV_STORE_VARIANTS,
        ROPE_KV_VARIANTS,
        QKV_SPLIT_VARIANTS,
        ATTENTION_VARIANTS,
        ATTENTION_COMBINE_VARIANTS,
        ATTENTION_PREFILL_VARIANTS,
        MINICACHE_MERGE_VARIANTS,
        EMBED_VARIANTS,
        TOPK_VARIANTS,
        TOPK_SAMPLE_VARIANTS,
        FLOAT_GEMV_VARIANTS,
        CCE_VARIANTS,
        CCE_COMBINE_VARIANTS,
        LOG_SOFTMAX_TARGET_VARIANTS,
        ACT_QUANT_A48_VARIANTS,
        ACT_QUANT_TOPK_VARIANTS,
        TERNARY_GEMV_SPARSE_VARIANTS,
        TERNARY_WIDE_VARIANTS,
        ACT_STATS_VARIANTS,
        TERNARY_DEC_VARIANTS,
        NEUZIP_EMBED_VARIANTS,
        TERNARY_DEC_NORM_VARIANTS,
    ]
    .into_iter()
    .flat_map(|v| v.iter())
}
