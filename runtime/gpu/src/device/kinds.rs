//! The integer matmuls' pipeline-key parts: activation width, dot product kind and the ternary
//! GEMM's tile (re-exported by `pipeline.rs` and, the tile, by `kernels`; its choice lives in
//! `kernels/matmul.rs`), split from `pipeline.rs` to keep that file small.

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

/// Tile of the ternary GEMM (`ternary_gemm.wgsl`'s `NJ`, or `ternary_gemm_t128.wgsl`'s `WG`);
/// bit-identical results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmTile {
    /// 64 rows × 32 tokens, 4 × 2 outputs per invocation (every layout).
    Narrow,
    /// 64 rows × 64 tokens, 4 × 4 outputs per invocation: twice the products per read of the
    /// staged tiles (2bit only: base3 keeps its 160-column K steps in the narrow tile).
    Wide,
    /// 64 rows × 128 tokens, 4 × 8 outputs per invocation (`ternary_gemm_t128.wgsl`): 128
    /// products per 12 staged-vector reads, weights decoded once per 128 tokens; 2bit with one
    /// scale group (per-tensor scales, gate/up pairs included) or groups of a multiple of 64
    /// columns (`GROUPED`).
    Tall,
    /// 64 rows × 64 tokens by [`GemmTile::Tall`]'s 4 × 8 micro-tiles (128 invocations): twice
    /// its workgroups for a shape, the same weights only. H100, 512 tokens, against
    /// [`GemmTile::Wide`]: 2560 × 2560 206 → 191 µs, 2560 × 6912 446 → 392, 6912 × 2560 426 → 361.
    TallHalf,
    /// 64 rows × 64 tokens on cooperative matrices (`ternary_gemm_coop.wgsl`: tensor cores, f16
    /// tiles, f32 accumulators, exact): 2bit with one scale group, on a device that has the
    /// feature ([`crate::GpuContext::coop_matrix`]).
    Coop,
}

impl GemmTile {
    /// Every tile.
    pub const ALL: [GemmTile; 5] = [
        GemmTile::Narrow,
        GemmTile::Wide,
        GemmTile::Tall,
        GemmTile::TallHalf,
        GemmTile::Coop,
    ];

    /// The tile's part of a pipeline label (rows × tokens; `j8`: 8 tokens per invocation).
    pub fn name(self) -> &'static str {
        match self {
            GemmTile::Narrow => "64x32",
            GemmTile::Wide => "64x64",
            GemmTile::Tall => "64x128",
            GemmTile::TallHalf => "64x64j8",
            GemmTile::Coop => "coop64x64",
        }
    }
}
