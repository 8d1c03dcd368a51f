//! Plain reports of what a loaded model and a session hold and do, the same on every backend:
//! device, memory by part, dispatches per token and per-kernel timings (GPU), and the activation
//! plan (each linear layer's input scheme and the code that produces it).
//!
//! These are plain data: `tern bench`, `tern run -v` and the C ABI print them without naming a
//! backend crate.

use std::fmt;

/// Which backend a model was loaded for (defined beside the verbs each backend has).
pub use crate::capabilities::BackendKind;

/// One weight tensor as the backend holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorReport {
    pub name: String,
    /// Encoding in the file.
    pub encoding: String,
    /// GPU: "resident" (as stored), "decoded" (NeuZip decoded once at load), "jit" (NeuZip kept
    /// compressed, decoded before each use), "host" (looked up on the CPU). CPU: "host".
    pub placement: String,
    /// Bytes on the device (GPU) or as stored in the file (CPU).
    pub bytes: u64,
}

/// Memory of the model's weights.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// The weight budget asked for (`--max-memory`), GPU only.
    pub budget: Option<u64>,
    /// All weight bytes (see [`TensorReport::bytes`]).
    pub weight_bytes: u64,
    /// Weight bytes by encoding name (`"q4_1"`, `"neuzip(bf16) (jit)"`), sorted by name.
    pub by_encoding: Vec<(String, u64)>,
    /// Every tensor.
    pub tensors: Vec<TensorReport>,
    /// Bytes of the just-in-time decode scratch (GPU; 0 on the CPU).
    pub jit_scratch_bytes: u64,
    /// Peak bytes allocated on the GPU so far (GPU only): everything alive at once — weights,
    /// just-in-time scratch, KV caches, activation scratch, staging.
    pub gpu_allocated_peak: Option<u64>,
    /// Bytes of weights the CPU backend holds in host memory (kept as stored, so close to
    /// `weight_bytes`; `tern_reference::Model::resident_bytes`). CPU only.
    pub host_resident_bytes: Option<u64>,
    /// Bytes allocated on the GPU now (GPU only).
    pub gpu_allocated_now: Option<u64>,
    /// Whether those two are measured by the driver's allocator (Vulkan, D3D12) rather than
    /// counted by tern (GPU only).
    pub gpu_allocation_measured: Option<bool>,
    /// The smallest budget the model loads with (and runs a 512-position session), GPU only.
    pub gpu_min_budget: Option<u64>,
}

/// One row of the activation plan: a linear layer kind over a run of identical layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationRow {
    /// `"0-29"`, `"3"`, or `"-"` for the output head.
    pub layers: String,
    /// `"qkv"`, `"attn_out"`, `"gate_up"`, `"down"`, `"head"`.
    pub linear: String,
    /// `"ternary"`, `"ggml"`, `"float"`, `"other"`.
    pub weights: String,
    /// The input scheme (`"f32"`, `"int8 absmax"`, `"int4 absmean"`, `"topk50% + int8 absmax"`).
    pub input: String,
    /// What makes that input (a GPU kernel, or the CPU reference's quantizer function).
    pub producer: String,
}

/// Every linear layer's input scheme and producer; `Display` prints it as a table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActivationPlanReport {
    pub rows: Vec<ActivationRow>,
}

impl fmt::Display for ActivationPlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<8} {:<9} {:<8} {:<22} producer",
            "layers", "linear", "weights", "input"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<8} {:<9} {:<8} {:<22} {}",
                r.layers, r.linear, r.weights, r.input, r.producer
            )?;
        }
        Ok(())
    }
}

/// What a loaded model holds ([`crate::Model::report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReport {
    /// "cpu", or "gpu (adapter name, backend)".
    pub device: String,
    pub backend: BackendKind,
    pub memory: MemoryReport,
    pub activation_plan: ActivationPlanReport,
}

/// What a session holds and really uses ([`crate::Session::report`]): read back by the C ABI's
/// `tern_session_get_report`, the CLI's `bench`, the desktop app.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionReport {
    /// The backend the session runs on (`Device::Auto` resolved).
    pub backend: BackendKind,
    /// The memory budget the model and its sessions live within (`LoadOptions::max_memory`;
    /// `None`: no cap).
    pub max_memory: Option<u64>,
    /// The KV cache's format, KIVI group/window and MiniCache settings (`on` resolved).
    pub kv: crate::options::KvSpec,
    /// The numerics of the forward pass.
    pub numerics: crate::options::Numerics,
    /// Positions the KV cache holds.
    pub n_ctx: usize,
    /// Bytes of the KV cache (all positions, keys and values, every layer).
    pub kv_bytes: u64,
    /// KV-cache bytes one position takes over all layers.
    pub kv_bytes_per_token: u64,
    /// Activation scratch bytes (GPU only).
    pub scratch_bytes: Option<u64>,
    /// Compute dispatches of one decode step (GPU only).
    pub dispatches_per_token: Option<usize>,
}

/// What a session's GPU steps sent back to the host ([`crate::Session::host_transfers`]; GPU
/// only). A round trip is one wait for a readback (a decode step is one; a sampled step whose
/// candidates cannot decide the token exactly reads the full row of logits: one more).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostTransfers {
    /// Backend calls that ran tokens (a decode step is one).
    pub steps: u64,
    /// Waits for a readback.
    pub round_trips: u64,
    /// Bytes read back from the GPU.
    pub readback_bytes: u64,
    /// Sampled steps that read the full row of logits after the candidates.
    pub full_rows: u64,
}

/// One kernel's share of a profiled decode step ([`crate::Session::profile_decode_step`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// The kernel (pipeline) label.
    pub kernel: String,
    pub dispatches: u32,
    /// Total GPU time of its dispatches, µs.
    pub micros: f64,
}

/// The measured fraction of zero codes in one linear kind's quantized inputs
/// ([`crate::Session::measure_activation_sparsity`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationSparsity {
    /// `qkv`, `attn_out`, `gate_up` or `down`.
    pub linear: String,
    /// Zero codes / codes over every layer and token of the measurement.
    pub zero_fraction: f64,
    /// Codes counted.
    pub codes: u64,
}
