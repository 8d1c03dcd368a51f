//! Weights as they live on the GPU, one file per storage kind: tern's packed ternary codes,
//! ggml blocks, float matrices (raw, or NeuZip decoded) and NeuZip blobs. Each type validates
//! the file's bytes and uploads them, split by rows into parts of at most one binding
//! ([`crate::GpuContext::binding_limit`]); the kernels that read them live in `kernels/`.

pub mod float;
pub mod ggml;
pub mod neuzip;
pub mod ternary;

pub use float::{FloatPart, FloatWeight};
pub use ggml::GgmlWeight;
pub use neuzip::NeuzipTensor;
pub use ternary::{TernaryWeight, TERNARY_MAX_GROUPS_PER_ROW};

/// One binding of a row-split weight (ternary or ggml).
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) row0: u64,
    pub(crate) rows: u64,
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) scale_word_offset: u64,
}
