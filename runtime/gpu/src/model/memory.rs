//! The memory plan: where every weight goes and what it costs. NeuZip tensors are kept decoded
//! (decoded once at load) while the budget (`--max-memory`) allows, and kept compressed and
//! decoded just in time before each use otherwise; everything else stays as stored.

use std::collections::HashMap;

/// Options of [`crate::GpuModel::load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModelOptions {
    /// GPU memory the weights may take (bytes). NeuZip tensors are kept decoded while the total
    /// stays within it, and decoded just in time otherwise. `None`: no limit (decode everything
    /// once at load).
    pub max_memory: Option<u64>,
}

impl Default for GpuModelOptions {
    fn default() -> Self {
        GpuModelOptions { max_memory: None }
    }
}

/// How one tensor is held on the GPU (reported by `tern bench` and `-v`).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlacement {
    pub name: String,
    /// Encoding in the file.
    pub encoding: String,
    /// "resident" (as stored), "decoded" (NeuZip decoded once at load), "jit" (NeuZip kept
    /// compressed, decoded before each use), "host" (token embeddings looked up on the CPU).
    pub placement: &'static str,
    /// Bytes it takes on the GPU.
    pub gpu_bytes: u64,
}

/// What the memory plan decided, with the bytes of each part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPlan {
    pub budget: Option<u64>,
    pub tensors: Vec<TensorPlacement>,
    /// Bytes of the just-in-time decode scratch (one or two sets sized for the largest JIT
    /// tensor).
    pub jit_scratch_bytes: u64,
}

impl MemoryPlan {
    /// Resident weight bytes by encoding name, sorted by name.
    pub fn by_encoding(&self) -> Vec<(String, u64)> {
        let mut m: HashMap<String, u64> = HashMap::new();
        for t in &self.tensors {
            let k = if t.placement == "resident" || t.placement == "host" {
                t.encoding.clone()
            } else {
                format!("{} ({})", t.encoding, t.placement)
            };
            *m.entry(k).or_default() += t.gpu_bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }

    /// All weight bytes on the GPU.
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.gpu_bytes).sum()
    }
}
