//! # tern-reference: plain CPU kernels and the whole forward pass
//!
//! The oracle every GPU kernel is checked against, and the CPU fallback. One plain function per op,
//! f32 accumulation, no GPU:
//!
//! * [`kernels`]: [`rmsnorm`], [`rope`] (adjacent and NeoX pairing), [`softmax`], [`attention`]
//!   (causal GQA over the cache), [`swiglu`], [`relu2_glu`], [`dot_f32`];
//! * [`quant`]: BitNet activation quantizers [`quantize_act_int8`], [`quantize_act_int4`],
//!   [`topk50_int8`] (formulas, sources and the TopK tie rule in the module doc);
//! * [`ggml_dot`]: Q8_0 / Q4_0 / Q4_1 row dots with f32 activations, and llama.cpp-style Q8_0/Q8_1
//!   activation quantization with integer block dots;
//! * [`ggml_cpu`]: llama.cpp's x86 CPU arithmetic reproduced bit for bit (lane-ordered Q4_1/Q8_0
//!   dots, double-accumulated RMSNorm, f32-iterated RoPE angles, its vectorized `expf`, both CPU
//!   flash-attention kernels), used by [`ForwardOptions::llama_cpp_like`];
//! * [`matmul`]: a weight [`Matrix`] in any `.tern` encoding and `y = W·x` batched over tokens;
//! * [`Model`] + [`KvCache`]: load a `.tern` file, validate it against its hyperparameters, run
//!   batched prefill and decode;
//! * [`cce`]: fused Cut-Cross-Entropy scoring ([`Model::score_hidden`]): per-token log-probabilities
//!   from hidden states with the head matmul and an online log-sum-exp over vocab blocks, never an
//!   `[n, n_vocab]` logit matrix.
//!
//! ```no_run
//! use tern_reference::{KvCache, LogitsWanted, Model};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = tern_format::TernFile::open("model.tern".as_ref())?;
//! let model = Model::load(&file)?;
//! let mut cache = KvCache::new(&model, 512)?;
//! let logits = model.forward(&[1, 2, 3], &mut cache, LogitsWanted::Last)?; // prefill
//! let next = model.forward(&[4], &mut cache, LogitsWanted::Last)?;          // one decode step
//! # let _ = (logits, next); Ok(()) }
//! ```
//!
//! **Invariants.** Library code never panics on input: shapes are checked up front and return
//! [`ReferenceError`]. The KV cache is allocated once and written in place. Every output element is
//! computed by the same sequential code whatever the batch size or thread count, so a batched
//! prefill equals token-by-token decode bit for bit, and the `parallel` feature (rayon over matrix
//! rows and attention queries) changes speed only. So does the run-time CPU dispatch of the hot
//! loops (`simd`: AVX2 + FMA on x86-64, NEON with or without the `sdot` dot-product extension on
//! AArch64, named by [`cpu_kernel_path`], `TERN_CPU_SIMD=scalar` forces plain Rust; the same exact
//! integer sums and exactly rounded float operations in the same order; its feature-checked calls
//! and the intrinsic kernels are the crate's only `unsafe`).
//!
//! **Numerics.** The default options are the reference semantics (f32 activations, f32 KV cache,
//! plain softmax attention). [`ForwardOptions::llama_cpp_like`] instead reproduces llama.cpp's CPU
//! backend with default settings, bit for bit for llama-family Q4_1/Q8_0 models (tests/tests/
//! llamacpp_agreement.rs: identical logits over the GPL-3 text, identical greedy generations).

pub mod cce;
pub mod error;
pub mod ggml_cpu;
pub mod ggml_dot;
pub mod kernels;
pub mod kv;
pub mod kv_attn;
pub mod kv_codec;
pub mod kv_merge;
mod kv_state;
mod kv_store;
pub mod matmul;
pub mod model;
pub mod packed;
pub mod quant;
mod simd;
#[cfg(test)]
mod simd_tests;
pub mod stored;
pub mod threads;

pub use cce::CceOptions;
pub use error::{ReferenceError, Result};
pub use kernels::{attention, dot_f32, relu2_glu, rmsnorm, rope, silu, softmax, swiglu};
pub use kv::{KvCache, Retention};
pub use matmul::{
    GgmlActivations, MatmulOptions, Matrix, NeuZipResidency, TernaryWeights, WeightData,
};
pub use model::{ForwardOptions, LogitsWanted, Model};
pub use quant::{quantize_act, quantize_act_int4, quantize_act_int8, topk50_int8};
pub use simd::cpu_kernel_path;
pub use tern_format::kv::{Kivi, KvQuant, KvSpec, MiniCache};

/// Map `0..n` through `f`, on the rayon pool when `parallel` is set and the feature is on; results
/// are in index order either way.
pub(crate) fn par_map<T: Send>(
    n: usize,
    parallel: bool,
    f: impl Fn(usize) -> T + Sync + Send,
) -> Vec<T> {
    #[cfg(feature = "parallel")]
    if parallel && n > 1 {
        use rayon::prelude::*;
        return (0..n).into_par_iter().map(f).collect();
    }
    let _ = parallel;
    (0..n).map(f).collect()
}
