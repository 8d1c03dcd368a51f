//! ggml quantized blocks (`ggml/src/ggml-common.h`) and their dequantization, bit-identical to
//! llama.cpp's `dequantize_row_*` (`ggml/src/ggml-quants.c`): each f16 scale is widened to f32
//! first, then every element is computed with the same operations in the same order, so tern and
//! llama.cpp produce the same f32 bits (checked against the vendored llama.cpp build by
//! `tests/tests/ggml_golden.rs`).
//!
//! Blocks are byte-packed with no padding and may start at any byte (an 18-byte Q4_0 block is not
//! 2-byte aligned inside a row of odd block count), so f16 fields are `[u8; 2]` and every struct has
//! alignment 1: a `&[u8]` of the right length always casts to a block slice.
//!
//! [`BlockType`] is the one table of the ggml block types tern knows (like ggml's `type_traits[]`):
//! name, bytes and elements per block, and which GPU kernels read it ([`BlockType::gpu_qtype`]).
//! The `.tern` [`Encoding`](crate::Encoding)s, the GGUF importer, the CPU reference and `.ternd`
//! deltas take these facts from it, and the GPU pipelines pick their kernels by `gpu_qtype`.
//!
//! Also here: the trits of ggml's ternary types (TQ1_0, TQ2_0) and of bitnet.cpp's I2_S, in element
//! order, with their scales.

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::error::{FormatError, Result};

/// Elements of the 256-element super-block of the K-quants, TQ1_0 and TQ2_0 (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// Q8_0: 32 elements, one f16 scale `d`, 32 `i8` quants; `x = q·d`. 8.5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; 32],
}

/// Q4_0: 32 elements, f16 `d`, 16 bytes of nibbles: byte `j` holds element `j` in its low nibble
/// and element `j + 16` in its high nibble; `x = (q − 8)·d`. 4.5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}

/// Q4_1: 32 elements, f16 `d` and f16 min `m`, nibbles as Q4_0; `x = q·d + m`. 5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; 16],
}

/// Q6_K: 256 elements in 16 sub-blocks of 16, each with an `i8` scale; 6-bit quants split into
/// `ql` (low 4 bits: byte `l` of a 128-element half holds elements `l` and `l + 64` of it) and `qh`
/// (high 2 bits), f16 `d` last; `x = d·scale·(q − 32)`. 6.5625 bits per weight. tern keeps it as it
/// is: llama-quantize gives the token embedding of ternary models this type.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [i8; 16],
    pub d: [u8; 2],
}

/// Q5_0: 32 elements, f16 `d`, `qh` the 5th bits (bit `j` of the little-endian u32 for element
/// `j`), 16 bytes of low nibbles as Q4_0; `x = (q − 16)·d`. 5.5 bits per weight.
/// (`ggml/src/ggml-common.h` `block_q5_0`; `ggml/src/ggml-quants.c` `dequantize_row_q5_0`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// Q5_1: 32 elements, f16 `d` and f16 min `m`, `qh` and nibbles as Q5_0; `x = q·d + m`. 6 bits per
/// weight. (`ggml-common.h` `block_q5_1`; `ggml-quants.c` `dequantize_row_q5_1`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// Q2_K: 256 elements in 16 sub-blocks of 16; `scales[i]` holds sub-block `i`'s 4-bit scale (low
/// nibble) and 4-bit min (high nibble); 2-bit quants `qs` (byte `32·n + l` of half `n` holds, at
/// bits `2j`, element `128·n + 32·j + l`); f16 `d` and `dmin` last;
/// `x = (d·sc)·q − dmin·m`. 2.625 bits per weight. (`ggml-common.h` `block_q2_K`;
/// `ggml-quants.c` `dequantize_row_q2_K`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2K {
    pub scales: [u8; 16],
    pub qs: [u8; 64],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// Q3_K: 256 elements in 16 sub-blocks of 16; `hmask` the high bits (bit `4·n + j` of byte `l`
/// for element `128·n + 32·j + l`; a clear bit subtracts 4), `qs` the low 2 bits as Q2_K, 12
/// bytes of 6-bit scales packed as `dequantize_row_q3_K` unpacks them, f16 `d` last;
/// `x = (d·(sc − 32))·q`. 3.4375 bits per weight. (`ggml-common.h` `block_q3_K`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; 32],
    pub qs: [u8; 64],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

/// Q4_K: 256 elements in 8 sub-blocks of 32; f16 `d` and `dmin` first, 12 bytes of 6-bit scales
/// and mins (`get_scale_min_k4`), then 128 bytes of nibbles: byte `32·c + l` holds element
/// `64·c + l` (low nibble) and `64·c + 32 + l` (high); `x = (d·sc)·q − dmin·m`. 4.5 bits per
/// weight. (`ggml-common.h` `block_q4_K`; `ggml-quants.c` `dequantize_row_q4_K`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; 128],
}

/// Q5_K: Q4_K plus `qh`, the 5th bits: bit `2·c` (low nibbles) / `2·c + 1` (high) of byte `l` for
/// chunk `c`; `x = (d·sc)·(q + 16·h) − dmin·m`. 5.5 bits per weight. (`ggml-common.h` `block_q5_K`;
/// `ggml-quants.c` `dequantize_row_q5_K`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

/// IQ4_NL: 32 elements, f16 `d`, nibbles as Q4_0 indexing the non-linear table
/// [`KVALUES_IQ4NL`]; `x = d·kvalues[q]`. 4.5 bits per weight. (`ggml-common.h` `block_iq4_nl`;
/// `ggml-quants.c` `dequantize_row_iq4_nl`.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Nl {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}

/// IQ4_NL's code book (`ggml-common.h` `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// TQ1_0: 256 ternary elements, 5 trits per byte in base-3 fixed point, then f16 `d` (last).
/// 1.6875 bits per weight.
///
/// * `qs[0..32]`: byte `m` holds elements `m + 32·n`, n = 0..5 (elements 0..160);
/// * `qs[32..48]`: byte `32 + m` holds elements `160 + m + 16·n`, n = 0..5 (160..240);
/// * `qh[0..4]`: byte `j` holds elements `240 + j + 4·n`, n = 0..4 (240..256; its 5th trit is 0).
///
/// A byte stores `ceil(v·256/243)` with `v = Σ_n c_n·3^(4−n)` and `c = t + 1`; trit `n` decodes as
/// `q = byte·3^n mod 256`, `c = (q·3) >> 8`. Every byte value decodes to digits in 0..=2.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTq1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    pub d: [u8; 2],
}

/// TQ2_0: 256 ternary elements as 2-bit codes `c = t + 1`, then f16 `d` (last). Element
/// `e = 128·h + 32·l + m` (h = 0..2, l = 0..4, m = 0..32) is in byte `32·h + m` at bits `2l..2l+2`;
/// `x = (c − 1)·d`. 2.0625 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTq2_0 {
    pub qs: [u8; 64],
    pub d: [u8; 2],
}

fn f16_to_f32(d: [u8; 2]) -> f32 {
    f16::from_le_bytes(d).to_f32()
}

impl BlockQ8_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockQ4_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockQ4_1 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
    pub fn m(&self) -> f16 {
        f16::from_le_bytes(self.m)
    }
}
impl BlockQ6K {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockTq1_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}
impl BlockTq2_0 {
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }
}

/// The ggml block types tern knows. [`BlockType::traits`] is the table of their facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockType {
    Q8_0,
    Q4_0,
    Q4_1,
    /// 256-element super-blocks of 210 bytes.
    Q6K,
    Tq1_0,
    Tq2_0,
    Q5_0,
    Q5_1,
    /// 256-element super-blocks of 84 bytes.
    Q2K,
    /// 256-element super-blocks of 110 bytes.
    Q3K,
    /// 256-element super-blocks of 144 bytes.
    Q4K,
    /// 256-element super-blocks of 176 bytes.
    Q5K,
    Iq4Nl,
}

/// One row of the ggml block-type table (ggml's `type_traits[]`, for the types tern knows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockTraits {
    /// ggml's type name, lowercase (ggml spells Q6_K `q6_K`); also the `.tern` encoding's name and
    /// the GPU kernel variants' suffix (`ggml_gemv_q6_k_tpr32`).
    pub name: &'static str,
    /// Bytes of one block (`sizeof(block_*)` in `ggml-common.h`).
    pub block_bytes: usize,
    /// Elements of one block (a row's length must be a multiple of it).
    pub block_elems: usize,
    /// GPU kernels available: the value of the `QTYPE` override that selects this type in the
    /// ggml GEMV/GEMM, embedding and CCE kernels (`shaders/`), or `None` when the GPU never reads
    /// the type as it is (TQ1_0/TQ2_0: tern re-lays ternary sources into its own layouts).
    pub gpu_qtype: Option<u32>,
}

impl BlockType {
    /// Every block type, in table order.
    pub const ALL: [BlockType; 13] = [
        BlockType::Q8_0,
        BlockType::Q4_0,
        BlockType::Q4_1,
        BlockType::Q6K,
        BlockType::Tq1_0,
        BlockType::Tq2_0,
        BlockType::Q5_0,
        BlockType::Q5_1,
        BlockType::Q2K,
        BlockType::Q3K,
        BlockType::Q4K,
        BlockType::Q5K,
        BlockType::Iq4Nl,
    ];

    /// The table: this type's row.
    pub const fn traits(self) -> BlockTraits {
        const fn row(
            name: &'static str,
            block_bytes: usize,
            block_elems: usize,
            gpu_qtype: Option<u32>,
        ) -> BlockTraits {
            BlockTraits {
                name,
                block_bytes,
                block_elems,
                gpu_qtype,
            }
        }
        match self {
            BlockType::Q8_0 => row("q8_0", 34, 32, Some(0)),
            BlockType::Q4_0 => row("q4_0", 18, 32, Some(1)),
            BlockType::Q4_1 => row("q4_1", 20, 32, Some(2)),
            BlockType::Q6K => row("q6_k", 210, QK_K, Some(3)),
            BlockType::Tq1_0 => row("tq1_0", 54, QK_K, None),
            BlockType::Tq2_0 => row("tq2_0", 66, QK_K, None),
            BlockType::Q5_0 => row("q5_0", 22, 32, Some(4)),
            BlockType::Q5_1 => row("q5_1", 24, 32, Some(5)),
            BlockType::Q2K => row("q2_k", 84, QK_K, Some(6)),
            BlockType::Q3K => row("q3_k", 110, QK_K, Some(7)),
            BlockType::Q4K => row("q4_k", 144, QK_K, Some(8)),
            BlockType::Q5K => row("q5_k", 176, QK_K, Some(9)),
            BlockType::Iq4Nl => row("iq4_nl", 18, 32, Some(10)),
        }
    }
    /// ggml's type name, lowercase (see [`BlockTraits::name`]).
    pub const fn name(self) -> &'static str {
        self.traits().name
    }
    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        self.traits().block_bytes
    }
    /// Elements per block.
    pub const fn block_elems(self) -> usize {
        self.traits().block_elems
    }
    /// GPU kernels available: the kernels' `QTYPE` override value for this type, `None` when the
    /// GPU does not read it (see [`BlockTraits::gpu_qtype`]).
    pub const fn gpu_qtype(self) -> Option<u32> {
        self.traits().gpu_qtype
    }
    /// The type of a [`BlockType::name`].
    pub fn from_name(name: &str) -> Option<BlockType> {
        BlockType::ALL.into_iter().find(|b| b.name() == name)
    }
    /// Bytes of `n` elements; errors unless `n` is a whole number of blocks.
    pub fn bytes_for(self, n: usize) -> Result<usize> {
        let be = self.block_elems();
        if n % be != 0 {
            return Err(FormatError::BadShape {
                what: self.name().into(),
                detail: format!("{n} elements is not a multiple of the block size {be}"),
            });
        }
        (n / be)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| FormatError::out_of_range(self.name(), "size overflows"))
    }
}

// The table agrees with the block structs.
const _: () = assert!(BlockType::Q8_0.block_bytes() == std::mem::size_of::<BlockQ8_0>());
const _: () = assert!(BlockType::Q4_0.block_bytes() == std::mem::size_of::<BlockQ4_0>());
const _: () = assert!(BlockType::Q4_1.block_bytes() == std::mem::size_of::<BlockQ4_1>());
const _: () = assert!(BlockType::Q6K.block_bytes() == std::mem::size_of::<BlockQ6K>());
const _: () = assert!(BlockType::Tq1_0.block_bytes() == std::mem::size_of::<BlockTq1_0>());
const _: () = assert!(BlockType::Tq2_0.block_bytes() == std::mem::size_of::<BlockTq2_0>());
const _: () = assert!(BlockType::Q5_0.block_bytes() == std::mem::size_of::<BlockQ5_0>());
const _: () = assert!(BlockType::Q5_1.block_bytes() == std::mem::size_of::<BlockQ5_1>());
const _: () = assert!(BlockType::Q2K.block_bytes() == std::mem::size_of::<BlockQ2K>());
const _: () = assert!(BlockType::Q3K.block_bytes() == std::mem::size_of::<BlockQ3K>());
const _: () = assert!(BlockType::Q4K.block_bytes() == std::mem::size_of::<BlockQ4K>());
const _: () = assert!(BlockType::Q5K.block_bytes() == std::mem::size_of::<BlockQ5K>());
const _: () = assert!(BlockType::Iq4Nl.block_bytes() == std::mem::size_of::<BlockIq4Nl>());
const _: () = assert!(std::mem::align_of::<BlockQ6K>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ5K>() == 1);

/// Checks that `bytes` holds exactly the blocks of `n` elements.
fn check_len(bt: BlockType, bytes: &[u8], n: usize) -> Result<()> {
    let need = bt.bytes_for(n)?;
    if bytes.len() != need {
        return Err(FormatError::malformed(
            bt.name(),
            format!("{n} elements need {need} bytes, found {}", bytes.len()),
        ));
    }
    Ok(())
}

/// Dequantizes `n` elements (a whole number of blocks) into a new vector.
pub fn dequantize(bt: BlockType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    check_len(bt, bytes, n)?;
    let mut out = vec![0f32; n];
    dequantize_into(bt, bytes, &mut out)?;
    Ok(out)
}

/// Dequantizes `bytes` into `out`; `out.len()` is the element count and must be a whole number of
/// blocks matching `bytes.len()`.
pub fn dequantize_into(bt: BlockType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_len(bt, bytes, out.len())?;
    let be = bt.block_elems();
    // The casts cannot fail: every block struct has alignment 1 and check_len made the length a
    // whole number of blocks; map_err keeps the no-panic rule without an unwrap.
    let cast_err = |e: bytemuck::PodCastError| FormatError::malformed(bt.name(), format!("{e:?}"));
    match bt {
        BlockType::Q8_0 => {
            let blocks: &[BlockQ8_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                for (q, y) in b.qs.iter().zip(y) {
                    *y = *q as f32 * d;
                }
            }
        }
        BlockType::Q4_0 => {
            let blocks: &[BlockQ4_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                let (lo, hi) = y.split_at_mut(16);
                for ((q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
                    let x0 = (q & 0x0F) as i32 - 8;
                    let x1 = (q >> 4) as i32 - 8;
                    *y0 = x0 as f32 * d;
                    *y1 = x1 as f32 * d;
                }
            }
        }
        BlockType::Q4_1 => {
            let blocks: &[BlockQ4_1] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                let m = f16_to_f32(b.m);
                let (lo, hi) = y.split_at_mut(16);
                for ((q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
                    // llama.cpp: x0*d + m; q·d is exact in f32 (≤ 4 + 11 significant bits), so only
                    // the addition rounds, with or without a fused multiply-add
                    *y0 = (q & 0x0F) as f32 * d + m;
                    *y1 = (q >> 4) as f32 * d + m;
                }
            }
        }
        BlockType::Q6K => {
            let blocks: &[BlockQ6K] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                dequantize_q6_k_block(b, y);
            }
        }
        BlockType::Q5_0 | BlockType::Q5_1 | BlockType::Iq4Nl => {
            for (b, y) in bytes
                .chunks_exact(bt.block_bytes())
                .zip(out.chunks_exact_mut(be))
            {
                match bt {
                    BlockType::Q5_0 => {
                        dequantize_q5_0_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y)
                    }
                    BlockType::Q5_1 => {
                        dequantize_q5_1_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y)
                    }
                    _ => dequantize_iq4_nl_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y),
                }
            }
        }
        BlockType::Q2K | BlockType::Q3K | BlockType::Q4K | BlockType::Q5K => {
            for (b, y) in bytes
                .chunks_exact(bt.block_bytes())
                .zip(out.chunks_exact_mut(be))
            {
                match bt {
                    BlockType::Q2K => {
                        dequantize_q2_k_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y)
                    }
                    BlockType::Q3K => {
                        dequantize_q3_k_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y)
                    }
                    BlockType::Q4K => {
                        dequantize_q4_k_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y)
                    }
                    _ => dequantize_q5_k_block(bytemuck::try_from_bytes(b).map_err(cast_err)?, y),
                }
            }
        }
        BlockType::Tq1_0 => {
            let blocks: &[BlockTq1_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            let mut codes = [0u8; QK_K];
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                tq1_0_block_codes(b, &mut codes);
                for (c, y) in codes.iter().zip(y) {
                    *y = (*c as i16 - 1) as f32 * d;
                }
            }
        }
        BlockType::Tq2_0 => {
            let blocks: &[BlockTq2_0] = bytemuck::try_cast_slice(bytes).map_err(cast_err)?;
            let mut codes = [0u8; QK_K];
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(be)) {
                let d = f16_to_f32(b.d);
                tq2_0_block_codes(b, &mut codes);
                for (c, y) in codes.iter().zip(y) {
                    // code 3 is never written by ggml; llama.cpp dequantizes it as 2·d, and so do we
                    *y = (*c as i8 - 1) as f32 * d;
                }
            }
        }
    }
    Ok(())
}

/// Dequantizes row `row` of a row-major tensor of `cols` columns held in `bytes` (all rows) into
/// `out` (`cols` values): an embedding-table lookup.
pub fn dequantize_row(
    bt: BlockType,
    bytes: &[u8],
    cols: usize,
    row: usize,
    out: &mut [f32],
) -> Result<()> {
    if out.len() != cols {
        return Err(FormatError::InvalidArgument(format!(
            "output has {} values, the row has {cols}",
            out.len()
        )));
    }
    let row_bytes = bt.bytes_for(cols)?;
    let start = row.checked_mul(row_bytes);
    let slice = start
        .and_then(|s| bytes.get(s..s.checked_add(row_bytes)?))
        .ok_or_else(|| {
            FormatError::out_of_range(
                format!("{} row {row}", bt.name()),
                format!(
                    "{} bytes hold {} rows",
                    bytes.len(),
                    bytes.len() / row_bytes.max(1)
                ),
            )
        })?;
    dequantize_into(bt, slice, out)
}

/// One Q6_K block into `y` (256 values), as llama.cpp's `dequantize_row_q6_K`.
fn dequantize_q6_k_block(b: &BlockQ6K, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    for (half, y) in y.chunks_exact_mut(128).enumerate() {
        let ql = &b.ql[half * 64..half * 64 + 64];
        let qh = &b.qh[half * 32..half * 32 + 32];
        let sc = &b.scales[half * 8..half * 8 + 8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            // Same evaluation order as C: (d * sc) * q, in f32.
            y[l] = d * sc[is] as f32 * q1 as f32;
            y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
            y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
            y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
        }
    }
}

// The blocks below are dequantized as `ggml/src/ggml-quants.c` does (`dequantize_row_*`), element
// for element. Every product there is exact in f32 (an f16 scale, 11 significant bits, times a
// 4..8-bit integer, times a ≤ 5-bit quant), so each value is rounded once, by its final addition or
// subtraction, whether or not a compiler fuses it into a multiply-add: the f32 bits are llama.cpp's.

/// The 5th bit of element `j` (0..32) of a Q5_0 / Q5_1 block, as 0 or 16: `dequantize_row_q5_0`'s
/// `xh_0 = ((qh >> j) << 4) & 0x10` for `j < 16`, `xh_1 = (qh >> (j' + 12)) & 0x10` for `j = j' + 16`.
fn q5_high(qh: u32, j: usize) -> u8 {
    (((qh >> j) & 1) << 4) as u8
}

/// One Q5_0 block into `y` (32 values): `dequantize_row_q5_0`.
fn dequantize_q5_0_block(b: &BlockQ5_0, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    let qh = u32::from_le_bytes(b.qh);
    let (lo, hi) = y.split_at_mut(16);
    for (j, ((q, y0), y1)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
        let x0 = ((q & 0x0F) | q5_high(qh, j)) as i32 - 16;
        let x1 = ((q >> 4) | q5_high(qh, j + 16)) as i32 - 16;
        *y0 = x0 as f32 * d;
        *y1 = x1 as f32 * d;
    }
}

/// One Q5_1 block into `y` (32 values): `dequantize_row_q5_1`, `x0*d + m`.
fn dequantize_q5_1_block(b: &BlockQ5_1, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    let m = f16_to_f32(b.m);
    let qh = u32::from_le_bytes(b.qh);
    let (lo, hi) = y.split_at_mut(16);
    for (j, ((q, y0), y1)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
        let x0 = (q & 0x0F) | q5_high(qh, j);
        let x1 = (q >> 4) | q5_high(qh, j + 16);
        *y0 = x0 as f32 * d + m;
        *y1 = x1 as f32 * d + m;
    }
}

/// One IQ4_NL block into `y` (32 values): `dequantize_row_iq4_nl`, `d * kvalues_iq4nl[q]`.
fn dequantize_iq4_nl_block(b: &BlockIq4Nl, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    let (lo, hi) = y.split_at_mut(16);
    for ((q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
        *y0 = d * KVALUES_IQ4NL[(q & 0xF) as usize] as f32;
        *y1 = d * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
    }
}

/// Scale and min `j` (0..8) of a Q4_K / Q5_K block: `ggml-quants.c` `get_scale_min_k4`.
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One Q4_K block into `y` (256 values): `dequantize_row_q4_K`.
fn dequantize_q4_k_block(b: &BlockQ4K, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    let min = f16_to_f32(b.dmin);
    for (c, (q, y)) in
        b.qs.chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
    {
        let (sc, m) = scale_min_k4(2 * c, &b.scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * c + 1, &b.scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (lo, hi) = y.split_at_mut(32);
        for ((q, y0), y1) in q.iter().zip(lo).zip(hi) {
            *y0 = d1 * (q & 0xF) as f32 - m1;
            *y1 = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// One Q5_K block into `y` (256 values): `dequantize_row_q5_K`.
fn dequantize_q5_k_block(b: &BlockQ5K, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    let min = f16_to_f32(b.dmin);
    for (c, (q, y)) in
        b.qs.chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
    {
        let (sc, m) = scale_min_k4(2 * c, &b.scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * c + 1, &b.scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
        let (lo, hi) = y.split_at_mut(32);
        for (((q, h), y0), y1) in q.iter().zip(&b.qh).zip(lo).zip(hi) {
            let h0 = if h & u1 != 0 { 16 } else { 0 };
            let h1 = if h & u2 != 0 { 16 } else { 0 };
            *y0 = d1 * ((q & 0xF) + h0) as f32 - m1;
            *y1 = d2 * ((q >> 4) + h1) as f32 - m2;
        }
    }
}

/// One Q2_K block into `y` (256 values): `dequantize_row_q2_K`.
fn dequantize_q2_k_block(b: &BlockQ2K, y: &mut [f32]) {
    let d = f16_to_f32(b.d);
    let min = f16_to_f32(b.dmin);
    let mut is = 0;
    for (n, y) in y.chunks_exact_mut(128).enumerate() {
        let q = &b.qs[32 * n..32 * n + 32];
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let shift = 2 * j;
            for (half, y) in y.chunks_exact_mut(16).enumerate() {
                let sc = b.scales[is];
                is += 1;
                let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
                for (l, y) in y.iter_mut().enumerate() {
                    *y = dl * ((q[l + 16 * half] >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// The 16 signed 6-bit scales of a Q3_K block, unpacked as `dequantize_row_q3_K` does (before its
/// `− 32`).
pub fn q3_k_scales(s: &[u8; 12]) -> [u8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, tmp) = (w(0), w(1), w(2));
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, a) in out.chunks_exact_mut(4).zip(aux) {
        o.copy_from_slice(&a.to_le_bytes());
    }
    out
}

/// One Q3_K block into `y` (256 values): `dequantize_row_q3_K`.
fn dequantize_q3_k_block(b: &BlockQ3K, y: &mut [f32]) {
    let d_all = f16_to_f32(b.d);
    let scales = q3_k_scales(&b.scales);
    let mut is = 0;
    let mut m = 1u8;
    for (n, y) in y.chunks_exact_mut(128).enumerate() {
        let q = &b.qs[32 * n..32 * n + 32];
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let shift = 2 * j;
            for (half, y) in y.chunks_exact_mut(16).enumerate() {
                let dl = d_all * (scales[is] as i8 as i32 - 32) as f32;
                is += 1;
                for (l, y) in y.iter_mut().enumerate() {
                    let k = l + 16 * half;
                    let lo = ((q[k] >> shift) & 3) as i32;
                    let hi = if b.hmask[k] & m != 0 { 0 } else { 4 };
                    *y = dl * (lo - hi) as f32;
                }
            }
            m <<= 1;
        }
    }
}

/// The 256 codes (`t + 1`, in element order) of one TQ1_0 block, decoded as llama.cpp does.
fn tq1_0_block_codes(b: &BlockTq1_0, codes: &mut [u8; QK_K]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let digit = |byte: u8, n: usize| -> u8 {
        let q = byte.wrapping_mul(POW3[n % 5]);
        ((q as u16 * 3) >> 8) as u8
    };
    let (qs0, qs1) = b.qs.split_at(32);
    let mut k = 0;
    let mut put = |c: u8| {
        if let Some(slot) = codes.get_mut(k) {
            *slot = c;
        }
        k += 1;
    };
    for n in 0..5 {
        for &byte in qs0 {
            put(digit(byte, n));
        }
    }
    for n in 0..5 {
        for &byte in qs1 {
            put(digit(byte, n));
        }
    }
    for n in 0..4 {
        for &byte in &b.qh {
            put(digit(byte, n));
        }
    }
}

/// The 256 codes (`t + 1`, 0..=3, in element order) of one TQ2_0 block.
fn tq2_0_block_codes(b: &BlockTq2_0, codes: &mut [u8; QK_K]) {
    for (h, qs) in b.qs.chunks_exact(32).enumerate() {
        for l in 0..4 {
            for (m, &byte) in qs.iter().enumerate() {
                if let Some(slot) = codes.get_mut(128 * h + 32 * l + m) {
                    *slot = (byte >> (2 * l)) & 3;
                }
            }
        }
    }
}

/// The trits (in {-1, 0, 1}, element order) and per-256-block scales `d` of a TQ1_0 tensor of `n`
/// elements.
pub fn tq1_0_to_trits(bytes: &[u8], n: usize) -> Result<(Vec<i8>, Vec<f16>)> {
    check_len(BlockType::Tq1_0, bytes, n)?;
    let blocks: &[BlockTq1_0] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| FormatError::malformed("tq1_0", format!("{e:?}")))?;
    let mut trits = Vec::with_capacity(n);
    let mut scales = Vec::with_capacity(blocks.len());
    let mut codes = [0u8; QK_K];
    for b in blocks {
        tq1_0_block_codes(b, &mut codes);
        trits.extend(codes.iter().map(|&c| c as i8 - 1));
        scales.push(b.d());
    }
    Ok((trits, scales))
}

/// The trits (in {-1, 0, 1}, element order) and per-256-block scales `d` of a TQ2_0 tensor of `n`
/// elements. Code 3 (never written by ggml's quantizer) is a [`FormatError::Corrupt`] error.
pub fn tq2_0_to_trits(bytes: &[u8], n: usize) -> Result<(Vec<i8>, Vec<f16>)> {
    check_len(BlockType::Tq2_0, bytes, n)?;
    let blocks: &[BlockTq2_0] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| FormatError::malformed("tq2_0", format!("{e:?}")))?;
    let mut trits = Vec::with_capacity(n);
    let mut scales = Vec::with_capacity(blocks.len());
    let mut codes = [0u8; QK_K];
    for (i, b) in blocks.iter().enumerate() {
        tq2_0_block_codes(b, &mut codes);
        if let Some(e) = codes.iter().position(|&c| c == 3) {
            return Err(FormatError::corrupt(
                "tq2_0",
                format!("code 3 at element {}", i * QK_K + e),
            ));
        }
        trits.extend(codes.iter().map(|&c| c as i8 - 1));
        scales.push(b.d());
    }
    Ok((trits, scales))
}

/// Elements per I2_S block in bitnet.cpp's x86 layout (`QK_I2_S` with `ACT_PARALLEL`).
pub const I2S_BLOCK: usize = 128;

/// Bytes of an I2_S tensor of `n` elements: `n/4` code bytes, then a 32-byte tail whose first four
/// bytes are the f32 scale (bitnet.cpp's `ggml_nbytes` special case).
pub fn i2s_bytes(n: usize) -> usize {
    n / 4 + 32
}

/// The trits (in {-1, 0, 1}, element order) and the one f32 scale of a bitnet.cpp I2_S tensor of `n`
/// elements, x86 layout (`microsoft/BitNet: src/ggml-bitnet-mad.cpp`, `quantize_i2_s`): each 128
/// consecutive elements fill 32 bytes, element `j` of a block in byte `j % 32` at bit shift
/// `6 − 2·(j / 32)`; codes 0, 1, 2 are −1, 0, +1. Code 3 is never written by the quantizer, so it is
/// a [`FormatError::Corrupt`] error here rather than bitnet.cpp's silent 0: a file holding one was
/// not made by bitnet.cpp's x86 writer (or is damaged). `n` must be a multiple of 128; files made by
/// the ARM build (64-element blocks) cannot be told apart from the bytes and decode wrongly.
pub fn i2s_to_trits(bytes: &[u8], n: usize) -> Result<(Vec<i8>, f32)> {
    if n % I2S_BLOCK != 0 {
        return Err(FormatError::BadShape {
            what: "i2_s".into(),
            detail: format!("{n} elements is not a multiple of the {I2S_BLOCK}-element block"),
        });
    }
    if bytes.len() != i2s_bytes(n) {
        return Err(FormatError::malformed(
            "i2_s",
            format!(
                "{n} elements need {} bytes, found {}",
                i2s_bytes(n),
                bytes.len()
            ),
        ));
    }
    let (codes, tail) = bytes.split_at(n / 4);
    let scale = match tail.first_chunk::<4>() {
        Some(s) => f32::from_le_bytes(*s),
        None => return Err(FormatError::malformed("i2_s", "missing scale")),
    };
    let mut trits = vec![0i8; n];
    for (bi, (block, out)) in codes
        .chunks_exact(32)
        .zip(trits.chunks_exact_mut(I2S_BLOCK))
        .enumerate()
    {
        for (j, t) in out.iter_mut().enumerate() {
            let byte = block.get(j % 32).copied().unwrap_or(0);
            let c = (byte >> (6 - 2 * (j / 32))) & 3;
            if c == 3 {
                return Err(FormatError::corrupt(
                    "i2_s",
                    format!("code 3 at element {}", bi * I2S_BLOCK + j),
                ));
            }
            *t = c as i8 - 1;
        }
    }
    Ok((trits, scale))
}

/// Dequantizes an I2_S tensor: `trit as f32 · scale` (bitnet.cpp's dequantization).
pub fn i2s_dequantize(bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let (trits, scale) = i2s_to_trits(bytes, n)?;
    Ok(trits.into_iter().map(|t| t as f32 * scale).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tq1_0_all_bytes_decode_to_digits() {
        // Every byte value decodes to 5 digits in 0..=2; the encoding of a digit tuple round-trips.
        for v in 0..243u32 {
            let byte = ((v * 256).div_ceil(243)) as u8;
            let mut rebuilt = 0u32;
            for n in 0..5 {
                let q = byte.wrapping_mul([1u8, 3, 9, 27, 81][n]);
                let c = ((q as u16 * 3) >> 8) as u32;
                assert!(c <= 2);
                rebuilt = rebuilt * 3 + c;
            }
            assert_eq!(rebuilt, v);
        }
    }

    #[test]
    fn table_matches_llama_cpp_and_the_block_structs() {
        // ggml-common.h: sizeof(block_*) and QK*, and the shaders' QTYPE overrides.
        let want = [
            ("q8_0", 34, 32, Some(0)),
            ("q4_0", 18, 32, Some(1)),
            ("q4_1", 20, 32, Some(2)),
            ("q6_k", 210, 256, Some(3)),
            ("tq1_0", 54, 256, None),
            ("tq2_0", 66, 256, None),
            ("q5_0", 22, 32, Some(4)),
            ("q5_1", 24, 32, Some(5)),
            ("q2_k", 84, 256, Some(6)),
            ("q3_k", 110, 256, Some(7)),
            ("q4_k", 144, 256, Some(8)),
            ("q5_k", 176, 256, Some(9)),
            ("iq4_nl", 18, 32, Some(10)),
        ];
        assert_eq!(BlockType::ALL.len(), want.len());
        for (bt, (name, bytes, elems, q)) in BlockType::ALL.into_iter().zip(want) {
            assert_eq!(
                (
                    bt.name(),
                    bt.block_bytes(),
                    bt.block_elems(),
                    bt.gpu_qtype()
                ),
                (name, bytes, elems, q)
            );
            assert_eq!(BlockType::from_name(name), Some(bt));
        }
        let sizes = [
            std::mem::size_of::<BlockQ8_0>(),
            std::mem::size_of::<BlockQ4_0>(),
            std::mem::size_of::<BlockQ4_1>(),
            std::mem::size_of::<BlockQ6K>(),
            std::mem::size_of::<BlockTq1_0>(),
            std::mem::size_of::<BlockTq2_0>(),
            std::mem::size_of::<BlockQ5_0>(),
            std::mem::size_of::<BlockQ5_1>(),
            std::mem::size_of::<BlockQ2K>(),
            std::mem::size_of::<BlockQ3K>(),
            std::mem::size_of::<BlockQ4K>(),
            std::mem::size_of::<BlockQ5K>(),
            std::mem::size_of::<BlockIq4Nl>(),
        ];
        for (bt, size) in BlockType::ALL.into_iter().zip(sizes) {
            assert_eq!(bt.block_bytes(), size, "{}", bt.name());
        }
        // QTYPE values are distinct
        let mut q: Vec<u32> = BlockType::ALL
            .iter()
            .filter_map(|b| b.gpu_qtype())
            .collect();
        q.dedup();
        assert_eq!(q, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    }

    #[test]
    fn encodings_map_to_the_table() -> Result<()> {
        use crate::Encoding;
        for bt in BlockType::ALL {
            match Encoding::from_ggml_block(bt) {
                Some(e) => {
                    assert_eq!(e.ggml_block(), Some(bt));
                    assert_eq!(e.name(), bt.name());
                    let shape = [3, 2 * bt.block_elems() as u64];
                    let bytes = 3 * 2 * bt.block_bytes() as u64;
                    assert_eq!(e.expected_bytes(&shape)?, Some(bytes));
                }
                None => assert_eq!(bt.gpu_qtype(), None, "{}", bt.name()),
            }
        }
        assert_eq!(Encoding::F16.ggml_block(), None);
        Ok(())
    }

    #[test]
    fn q6_k_goes_through_dequantize() -> Result<()> {
        // one block: d = 1, scales 1..=16, all quants 32 + 1 (low nibble 1, high bits 2 → 33)
        let mut b = BlockQ6K::zeroed();
        b.d = f16::from_f32(0.5).to_le_bytes();
        for (i, s) in b.scales.iter_mut().enumerate() {
            *s = i as i8 - 8;
        }
        b.ql = [0x11; 128];
        b.qh = [0xAA; 64];
        let bytes = bytemuck::bytes_of(&b);
        let v = dequantize(BlockType::Q6K, bytes, 256)?;
        for (j, x) in v.iter().enumerate() {
            // element j of half h, l = j % 128: sub-block scale index 8h + (l % 32) / 16 + 2 (l / 32)
            let (h, l) = (j / 128, j % 128);
            let sc = b.scales[8 * h + (l % 32) / 16 + 2 * (l / 32)] as f32;
            assert_eq!(*x, 0.5 * sc * 1.0, "element {j}");
        }
        assert!(dequantize(BlockType::Q6K, &bytes[..209], 256).is_err());
        assert!(dequantize(BlockType::Q6K, bytes, 128).is_err());
        let mut out = [0f32; 256];
        assert!(dequantize_row(BlockType::Q6K, bytes, 256, 0, &mut out).is_ok());
        assert_eq!(out.as_slice(), v.as_slice());
        Ok(())
    }

    #[test]
    fn lengths_are_checked() {
        assert!(dequantize(BlockType::Q8_0, &[0; 33], 32).is_err());
        assert!(dequantize(BlockType::Q8_0, &[0; 34], 31).is_err());
        assert!(dequantize(BlockType::Q8_0, &[0; 34], 32).is_ok());
        assert!(i2s_to_trits(&[0; 63], 128).is_err());
        assert!(i2s_to_trits(&[0x55; 64], 128).is_ok());
        assert!(i2s_to_trits(&[0xff; 64], 128).is_err());
        let mut out = [0f32; 32];
        assert!(dequantize_row(BlockType::Q8_0, &[0; 68], 32, 2, &mut out).is_err());
        assert!(dequantize_row(BlockType::Q8_0, &[0; 68], 32, 1, &mut out).is_ok());
    }
}
