//! The whole forward pass on the GPU, recorded once into [`Plan`](crate::Plan)s and replayed
//! per step.
//!
//! Same graph as `tern_reference::Model` (see its module doc), read from the same
//! [`ModelSpec`] (`tern_format::spec`): what each layer does. The parts, each in its own file:
//!
//! * `load.rs` — [`GpuModel::load`]: builds the spec (the file checked against its
//!   hyperparameters), refuses one that needs a feature beyond [`GPU_CAPS`], uploads the
//!   weights as stored (ternary codes, ggml blocks, raw floats) and applies the memory plan;
//! * `memory.rs` — [`MemoryPlan`]: NeuZip tensors kept decoded while the budget allows, else
//!   kept compressed and decoded just in time into a shared scratch right before use;
//! * `jit.rs` — NeuZip matrices decoded just in time, chunk by chunk, and their status checks;
//! * `activation.rs` — [`ActivationPlan`]: per linear, the input scheme and the kernel that
//!   produces it, built once from the file;
//! * `kv_cache.rs` — [`KvCache`]: buffers, element format, byte accounting;
//! * `graph.rs` — the recording: embedding, attention block, FFN block, head, from small
//!   functions that read the layer's spec and the activation plan;
//! * `session.rs` — [`GpuSession`]: KV cache, activation scratch (sized for `max_batch`
//!   tokens), one recorded plan per batch size; a step writes the token embeddings, the RoPE
//!   table and the step parameters (`p0`) with `queue.write_buffer`, encodes the plan (one
//!   compute pass), copies the result to a mapped staging buffer and submits once;
//! * `profile.rs` — per-kernel timestamps of a decode step, benchmark loops.

pub mod activation;
mod graph;
mod jit;
pub mod kv_cache;
mod kv_state;
mod load;
pub mod memory;
mod profile;
mod relayout;
mod scratch;
mod session;
pub mod sparsity;

use std::sync::Arc;

use tern_format::spec::{Caps, Feature};
use tern_format::{FloatType, HParams, ModelSpec};

use crate::device::context::GpuContext;
use crate::kernels::{EmbedTable, RopeFreqs};
use crate::tuning::GpuTuning;
use crate::weights::{FloatWeight, GgmlWeight, NeuzipTensor, TernaryWeight};

pub use activation::ActivationPlan;
pub use graph::{Wanted, SHORT_ATTENTION_KEYS};
pub use kv_cache::{KvCache, KvFormat};
pub(crate) use load::HostEmbedding;
pub use memory::{GpuModelOptions, MemoryPlan, TensorPlacement};
pub use relayout::{ggml_gate_up, ternary_gate_up};
pub use session::{GpuSession, SessionMemory};
pub use sparsity::SparsityCount;

/// What the GPU graph implements beyond the baseline layer (`tern_format::spec`): BitNet's
/// sub-norms and ReLU²; Qwen 2's q/k/v biases; Qwen 3's and Gemma 3's QK-norm; Llama 3's RoPE
/// frequency divisors and linear RoPE scaling; Gemma 3's GELU-tanh, post-norms, embedding scale,
/// per-layer RoPE and sliding window. [`GpuModel::load`] refuses a spec that needs more
/// (attention and final soft-caps, YaRN, ungated FFNs, layers of different shapes).
pub const GPU_CAPS: Caps = Caps {
    backend: "GPU",
    features: &[
        Feature::SubNormAttn,
        Feature::SubNormFfn,
        Feature::Relu2,
        Feature::AttnBias,
        Feature::QkNorm,
        Feature::RopeLlama3,
        Feature::RopeLinear,
        Feature::GeluTanh,
        Feature::PostAttnNorm,
        Feature::PostFfnNorm,
        Feature::EmbedScale,
        Feature::LayerRope,
        Feature::SlidingWindow,
    ],
};

/// A linear layer's weight as it lives on the GPU.
pub(crate) enum Lin {
    Ternary(TernaryWeight),
    Ggml(GgmlWeight),
    Float(FloatWeight),
    /// NeuZip, decoded just in time into the shared scratch before each use.
    Jit(usize),
}

/// A layer's q/k/v projections: one matrix over the concatenated rows `[Wq; Wk; Wv]` (one
/// GEMV/GEMM writing `[n][q_dim + 2·kv_dim]`; `relayout.rs`'s `concat_rows`) where the three have the
/// same storage, else the three as stored.
pub(crate) enum Qkv {
    Fused(Lin),
    Split { wq: Lin, wk: Lin, wv: Lin },
}

pub(crate) struct Layer {
    pub(crate) attn_norm: wgpu::Buffer,
    pub(crate) qkv: Qkv,
    /// The q/k/v projection biases (Qwen 2), when the layer has any.
    pub(crate) bias: Option<QkvBias>,
    /// QK-norm weights (`head_dim` each): Qwen 3, Gemma 3.
    pub(crate) q_norm: Option<wgpu::Buffer>,
    pub(crate) k_norm: Option<wgpu::Buffer>,
    /// Norms of the attention / FFN block outputs before the residual adds (Gemma 3).
    pub(crate) post_attn_norm: Option<wgpu::Buffer>,
    pub(crate) post_ffn_norm: Option<wgpu::Buffer>,
    pub(crate) wo: Lin,
    pub(crate) attn_sub_norm: Option<wgpu::Buffer>,
    pub(crate) ffn_norm: wgpu::Buffer,
    pub(crate) gate_up: GateUp,
    pub(crate) down: Lin,
    pub(crate) ffn_sub_norm: Option<wgpu::Buffer>,
}

/// A layer's q/k/v projection biases (zeros where a projection has none): planar, for the three
/// projections as stored, and stacked `[bq | bk | bv]`, for the rows of the stacked projection.
pub(crate) struct QkvBias {
    pub(crate) q: wgpu::Buffer,
    pub(crate) k: wgpu::Buffer,
    pub(crate) v: wgpu::Buffer,
    pub(crate) stacked: wgpu::Buffer,
}

/// A layer's gate and up projections: as stored, or one weight of interleaved row pairs
/// (`relayout.rs`'s `ternary_gate_up` / `ggml_gate_up`: one GEMV with the GLU in its epilogue).
pub(crate) enum GateUp {
    Split { gate: Lin, up: Lin },
    Paired(Lin),
}

/// A NeuZip matrix kept compressed; decoded into the scratch before each use.
pub(crate) struct JitTensor {
    pub(crate) name: String,
    pub(crate) nz: NeuzipTensor,
    pub(crate) rows: u64,
    pub(crate) cols: u64,
    pub(crate) dtype: FloatType,
}

/// The tied head as a token-embedding table looked up on the GPU: a float or ggml matrix, or a
/// NeuZip matrix kept compressed whose blocks hold whole rows (rows decoded on lookup). `None`:
/// the embedding is looked up on the host.
pub(crate) fn embed_table<'a>(head: &'a Lin, jit: &'a [JitTensor]) -> Option<EmbedTable<'a>> {
    match head {
        Lin::Float(fw) => Some(EmbedTable::Float(fw)),
        Lin::Ggml(gw) => Some(EmbedTable::Ggml(gw)),
        Lin::Jit(i) => jit
            .get(*i)
            .filter(|j| j.nz.embeddable(j.cols))
            .map(|j| EmbedTable::NeuZip(&j.nz)),
        Lin::Ternary(_) => None,
    }
}

/// A model loaded onto the GPU.
pub struct GpuModel {
    pub(crate) ctx: Arc<GpuContext>,
    pub(crate) hp: HParams,
    /// What the forward pass does, per layer (the graph reads `spec.layers[li]`).
    pub(crate) spec: ModelSpec,
    pub(crate) layers: Vec<Layer>,
    /// The distinct RoPE frequency sets of the layers (one cos/sin table each per step), and the
    /// one of each layer (an index into it).
    pub(crate) rope_freqs: Vec<RopeFreqs>,
    pub(crate) layer_rope: Vec<usize>,
    pub(crate) output_norm: wgpu::Buffer,
    pub(crate) head: Lin,
    /// Token embeddings looked up on the host (`None`: looked up on the GPU in the tied head).
    pub(crate) embed: Option<HostEmbedding>,
    pub(crate) jit: Vec<JitTensor>,
    /// Decode scratch buffers used alternately, chunk after chunk (one or two, each the
    /// largest chunk of any just-in-time matrix).
    pub(crate) jit_scratch: Vec<wgpu::Buffer>,
    pub(crate) plan: MemoryPlan,
    pub(crate) act_plan: ActivationPlan,
    /// The knobs it was loaded with ([`GpuModelOptions::tuning`]): the graph, the sessions and
    /// the launchers they call read them here.
    pub(crate) tuning: GpuTuning,
}

impl std::fmt::Debug for GpuModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuModel")
            .field("hparams", &self.hp)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl GpuModel {
    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    /// What the forward pass does, per layer.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// `Ok` when the GPU graph implements everything `spec` needs ([`GPU_CAPS`]), else the
    /// typed [`tern_format::FormatError::UnsupportedModel`] naming the first missing feature.
    /// [`GpuModel::load`] calls it before allocating anything.
    pub fn check_spec(spec: &ModelSpec) -> crate::error::Result<()> {
        spec.check_supported(&GPU_CAPS)
            .map_err(|e| crate::error::GpuError::Format(e.into()))
    }

    /// Layer `li`'s RoPE table (an index into [`GpuModel::rope_freqs`]).
    pub(crate) fn rope_table_of(&self, li: usize) -> crate::error::Result<usize> {
        self.layer_rope
            .get(li)
            .copied()
            .ok_or_else(|| crate::error::GpuError::internal("plan", "layer without a RoPE table"))
    }

    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Every linear layer's input scheme and the kernel that produces it.
    pub fn activation_plan(&self) -> &ActivationPlan {
        &self.act_plan
    }

    /// Where every tensor went and what it costs.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The tuning knobs it was loaded with.
    pub fn tuning(&self) -> &GpuTuning {
        &self.tuning
    }
}
