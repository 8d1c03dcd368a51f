//! The integer matmuls' pipeline-key parts: activation width and dot product kind (re-exported by
//! `pipeline.rs`, split from it to keep that file small).

/// Width of the packed integer activations a ternary matmul reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActBits {
    /// 4 int8 per u32 (`act_quant_int8`, `rmsnorm_quant_int8`, the TopK quantizer).
    Int8,
    /// 8 int4 per u32 (`act_quant_a48.wgsl` MODE 0).
    Int4,
}

/// How the integer kernels form 4-byte dot products: `dot4I8Packed` (a DP4A instruction where the
/// adapter has the packed integer dot product, naga's exact polyfill elsewhere) or a plain
/// byte-by-byte sum. Same integers either way; `GpuContext::dot_kind` picks per adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DotKind {
    Packed,
    Plain,
}

pub(crate) fn suffix(act: ActBits, dot: DotKind) -> &'static str {
    match (act, dot) {
        (ActBits::Int8, DotKind::Packed) => "",
        (ActBits::Int8, DotKind::Plain) => "_plain",
        (ActBits::Int4, DotKind::Packed) => "_a4",
        (ActBits::Int4, DotKind::Plain) => "_a4_plain",
    }
}
