//! One launcher file per kernel family. A launcher checks shapes and sizes first (typed
//! errors), then builds the pipeline key, binds and records a dispatch into a [`Recorder`]
//! (a command encoder or a [`crate::Plan`]); nothing here waits on the GPU.
//!
//! * `matmul.rs` — the ternary and float matmuls (GEMV and tiled GEMM), the GEMV/GEMM choice
//!   and the decode GEMVs' epilogues;
//! * `ggml.rs` — the ggml-block (Q8_0, Q4_0, Q4_1, Q6_K) GEMV and GEMM;
//! * `act_quant.rs` — INT8 activation quantization and BitNet a4.8's INT4 absmean and TopK-50% +
//!   INT8, alone or fused into RMSNorm;
//! * `sparse.rs` — the ternary GEMV that skips zero activations (a4.8's sparse inputs);
//! * `pointwise.rs` — RMSNorm, RoPE, GLU and residual add;
//! * `kv.rs` — the KV cache's layout in every format and the store (quantize on write);
//! * `rope_kv.rs` — RoPE fused with the KV store over the concatenated q/k/v projection, and
//!   that projection split into planar q, k, v;
//! * `minicache.rs` — MiniCache's merge of a pair of layers (SLERP, magnitudes, retained pool);
//! * `attention.rs` — split-K causal GQA attention reading the cache as stored;
//! * `embed.rs` — token-embedding rows from float or ggml tables;
//! * `family.rs` — what the model families need beyond the baseline (issue 31): q/k/v biases and
//!   the embedding scale, QK-norm, per-layer RoPE frequency tables (linear, Llama 3);
//! * `sample.rs` — argmax and top-k of logits, the GPU half of sampling;
//! * `cce.rs` — fused Cut-Cross-Entropy scoring (log p(target) without logits);
//! * `neuzip.rs` — NeuZip rANS decode.
//!
//! Every kernel has a CPU counterpart in `tern-reference` and cases in the parity harness
//! (`runtime/gpu/tests/parity.rs`).
//!
//! [`Recorder`]: crate::Recorder

pub mod act_quant;
pub mod attention;
pub mod cce;
pub mod embed;
pub mod family;
pub mod ggml;
pub mod kv;
pub mod matmul;
pub mod minicache;
pub mod neuzip;
pub mod pointwise;
pub mod rope_kv;
pub mod sample;
pub mod sparse;

pub use act_quant::{
    act4_stride_words, act_stats, act_stride_words, quantize_act_a48_into, quantize_act_int8,
    quantize_act_int8_into, rmsnorm_quant_int8, A48Quant, ActInt8,
};
pub use attention::{
    attention, attention_prefill, attention_role, attention_splits, attention_windowed,
    attention_with_split, KvRead, StepParams,
};
pub use embed::{embed_rows, EmbedTable};
pub use family::{bias_scale, head_rmsnorm, llama3_rope_factors, HeadRows, RopeFreqs};
pub use ggml::{
    ggml_gemm, ggml_gemv, ggml_gemv_epi, ggml_gemv_fused, ggml_matmul, GgmlNorm,
    GGML_GEMV_ROWS_PER_WG,
};
pub use kv::{kv_store, KvLayout};
pub use matmul::{
    dec_norm_fits, float_gemv, float_matmul, fused_norm_fits, norm_fits, ternary_gemm,
    ternary_gemm_tiled, ternary_gemv, ternary_gemv_fused, ternary_matmul, Epilogue, GemmTile,
    NormPrologue, GEMM_MIN_TOKENS, GEMM_TILE_ROWS, GEMM_TILE_TOKENS, GEMM_WIDE_MIN_WORKGROUPS,
    GEMM_WIDE_TILE_TOKENS, GEMV_STAGED_ACT_WORDS,
};
pub use pointwise::{elementwise, glu_pairs, rmsnorm, rope, rope_table, rope_with_table};
pub use rope_kv::{qkv_split, rope_kv_fuses, rope_kv_fuses_batch, rope_kv_store, QkvShape};
pub use sample::{
    argmax, sample_candidates, topk, SampleBufs, SampleCandidates, SAMPLE_HIST_MAX, SAMPLE_K,
    TOPK_MAX_K,
};
pub use sparse::{sparse_applies, ternary_gemv_sparse, ternary_matmul_sparse, SPARSE_MAX_DENSITY};
