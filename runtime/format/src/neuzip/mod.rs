//! # NeuZip: entropy-coded exponents, raw sign+mantissa (f32, f16, bf16)
//!
//! A float is split into its **exponent** (the symbol, entropy-coded with rANS) and its
//! **sign + kept mantissa bits** (stored raw, bit-packed). Trained weights use a handful of
//! exponents, so the exponent costs ~2.6 bits instead of 8 while the mantissa is incompressible
//! noise (NeuZip, arXiv 2410.20650; methods-and-formats.md §3). Lossless mode (`mantissa_bits` =
//! 23/10/7 for f32/f16/bf16) reconstructs every bit, ±0, subnormals, inf and NaN payloads included.
//! Lossy modes keep `k < full` mantissa bits (NeuZip uses 3, 1, 0; any `k` is accepted) with
//! NeuZip's rounding, see [`Rounding`](#rounding).
//!
//! The rANS layout is made for a WGSL decoder (§3.5 "independent-lane interleaved rANS"): the
//! exponent stream is cut into **blocks**; symbol `j` of a block belongs to **lane** `j mod lanes`;
//! every lane has its own 16-bit word stream, its own final state and its own start offset, so one
//! GPU invocation decodes one lane with no cross-lane communication (no ballot, no prefix sum).
//! One frequency table per tensor, `2^11` precision, so the decode table is 2048 × u32 = 8 KiB of
//! workgroup memory. The encoder runs each lane backwards and stores the words reversed, so the
//! decoder produces symbols **in order** and reads words **forward** (and can stop early).
//!
//! ## Byte layout, version 1
//! All integers little-endian. Every section starts at a multiple of 4 bytes and is zero-padded
//! to a multiple of 4, so the whole blob can be bound as one WGSL `array<u32>`; `u16` arrays are
//! read as `(a[i >> 1] >> ((i & 1) * 16)) & 0xffff`. Sections follow each other in this order with
//! no gaps; the header stores every offset, and the decoder requires each one to be exactly the
//! canonical value (so there is one valid blob per content).
//!
//! 1. **Header**, 80 bytes:
//!
//!    | offset | type  | field |
//!    |-------:|-------|-------|
//!    | 0  | `[u8;4]` | magic `b"TNZP"` |
//!    | 4  | u8  | version = 1 |
//!    | 5  | u8  | dtype: 0 = f32, 1 = f16, 2 = bf16 |
//!    | 6  | u8  | `k` = mantissa bits kept, `0..=full` (23/10/7); `k = full` is lossless |
//!    | 7  | u8  | prob_bits = 11 |
//!    | 8  | u64 | `n` = element count |
//!    | 16 | u64 | `row_len` ≥ 1 (elements per row; `n` is a multiple of it) |
//!    | 24 | u32 | `lanes`, 1..=64 (the encoder uses 32) |
//!    | 28 | u32 | `block_len`: symbols of a full block, 1..=65536 |
//!    | 32 | u32 | `rows_per_block` R ≥ 1 |
//!    | 36 | u32 | `blocks_per_row` S ≥ 1 (R = 1 or S = 1) |
//!    | 40 | u32 | `n_blocks` |
//!    | 44 | u32 | `n_syms`: entries of the frequency table |
//!    | 48 | u32 | `n_words`: 16-bit words of all lanes |
//!    | 52 | u32 | offset of section 2 (table) = 80 |
//!    | 56 | u32 | offset of section 3 (block word bases) |
//!    | 60 | u32 | offset of section 4 (final states) |
//!    | 64 | u32 | offset of section 5 (lane starts) |
//!    | 68 | u32 | offset of section 6 (words) |
//!    | 72 | u32 | offset of section 7 (raw plane) |
//!    | 76 | u32 | total blob length |
//!
//!    No checksum: the `.tern` container checksums the whole tensor. Every field is validated.
//! 2. **Frequency table**, `n_syms × u32`: `sym | pdf << 16` (bits 8..16 and 28..32 zero), symbols
//!    strictly increasing and `< 2^exponent_bits` (256, or 32 for f16), `pdf ≥ 1`, pdfs summing to
//!    2048 (`n_syms = 0` only when `n = 0`). `cdf(sym)` is the sum of the pdfs before it. The
//!    decode table is `lut[s] = (s − cdf) << 20 | pdf << 8 | sym` for `s` in `cdf..cdf+pdf`
//!    ([`Plan::lut`]); a GPU builds it in workgroup memory (or the host uploads it).
//! 3. **Block word bases**, `(n_blocks + 1) × u32`: index of block `b`'s first word in section 6;
//!    entry 0 is 0, non-decreasing, the last is `n_words`.
//! 4. **Final states**, `n_blocks × lanes × u32` (block-major): the state lane `l` of block `b`
//!    starts decoding from, in `[2^15, 2^31)`. A lane that decodes all its symbols ends on exactly
//!    `2^15` having read exactly its words; the decoder checks both.
//! 5. **Lane starts**, `n_blocks × lanes × u16` (block-major), then zero padding: first word of
//!    lane `l` relative to the block's base. Lane 0 starts at 0; non-decreasing; lane `l` ends where
//!    lane `l + 1` starts (the last lane at the next block's base). They fit in u16 because a lane
//!    emits at most one word per symbol and a block has at most 65536 symbols.
//! 6. **Words**, `n_words × u16`, then zero padding: block by block, lane by lane, each lane's words
//!    in the order it reads them.
//! 7. **Raw plane**: element `i`'s field `sign << k | top k mantissa bits` (`w = k + 1` bits) at bits
//!    `i·w .. i·w + w` of an LSB-first bit stream (bit `t` = bit `t mod 32` of u32 word `t / 32`),
//!    `ceil(n·w / 8)` bytes then zero padding (unused bits zero too). It is one plane for the whole
//!    tensor, indexed by element, so any row's fields are found without touching other rows.
//!    Per dtype: bf16 lossless is exactly one byte `sign << 7 | mantissa` per element (DFloat11's
//!    layout; a GPU reads 4 per u32); f16 lossless 11 bits, f32 lossless 24 bits (3 bytes), both
//!    tightly packed: a field crosses at most one u32 boundary, so a GPU reads two words and
//!    funnel-shifts. Padding those to u16/u32 would cost 5 or 8 bits per element, more than the
//!    exponent coding saves. Lossy widths 4, 2, 1 never cross a word.
//!
//! Element reconstruction: `bits = sign << (man + exp_bits) | sym << man | kept << (man − k)`.
//!
//! ## Blocks and rows
//! Blocks follow rows so [`decode_rows`] only decodes the blocks holding those rows. For a target
//! block size `B` (default [`DEFAULT_BLOCK_SYMBOLS`]): if `row_len ≤ B`, a block is
//! `R = ⌊B / row_len⌋` whole rows (`block_len = R·row_len`, the last block may hold fewer rows);
//! otherwise each row is cut into `S = ⌈row_len / block_len⌉` blocks of `block_len = ⌈row_len /
//! ⌈row_len / B⌉⌉` symbols (the last one of a row shorter). Blocks never straddle a row boundary
//! unless they contain whole rows. See [`Plan::block_span`].
//!
//! Block size trades compression against GPU parallelism and row-lookup cost: each lane costs
//! 6 stored bytes (state + start), ~2 of which are information the words would otherwise carry,
//! so 32 lanes over 65536 symbols add ~0.016 bits per symbol (under 1% of a ~2.6-bit exponent);
//! DietGPU-sized blocks (4096 symbols over 32 lanes) would add ~0.25. With 32 lanes a lane decodes up to 2048
//! symbols. [`encode`] uses fewer lanes for small blocks ([`Params::auto`]: one per 2048 symbols),
//! so a 576-element norm has one lane instead of 32 nearly empty ones.
//! Measured (SmolLM2-135M's Q8_0 embedding as bf16, 49152 × 576): 66.6% of bf16, exponent
//! 2.653 bits/symbol against an empirical entropy of 2.632 (+0.8%).
//!
//! ## GPU decode (what the WGSL kernel does)
//! One workgroup per block (or several blocks per workgroup of 64 invocations), invocation `l`
//! = lane `l`: build or load the 2048-entry table into workgroup memory; read the lane's state
//! (section 4) and word range (sections 3 and 5); then for `t = 0, 1, ..` while
//! `j = l + t·lanes < block symbols`, run the step of [`decode_lane`] and write exponent `j`,
//! merged with raw field `block start + j` (section 7) into the output element. Lanes never wait
//! for each other, and consecutive lanes write consecutive elements. [`decode_lane`] is the
//! scalar reference the kernel must match bit for bit; [`decode_exponents_reference`] runs it
//! over a whole blob. The CPU fast path (`decode`) runs all lanes of a block in lockstep with a
//! branch-free renormalization (~400–650 MB/s of bf16 output on one Xeon core: 0.09–0.14 s for
//! the 28M-element embedding; a single-row lookup ~175 µs, as it decodes its block up to the row).
//!
//! ## Rounding
//! Lossy encoding rounds half up on the magnitude, NeuZip's rule: `(mag + half) >> drop << drop`,
//! the carry propagating into the exponent (1.9375 → 2.0 with k = 3; the largest subnormal can
//! become the smallest normal). Infinities stay infinities. A NaN stays a NaN: its mantissa is
//! truncated and, if the kept bits are zero, the top kept (quiet) bit is set; with `k = 0` a NaN
//! cannot be represented and [`encode`] returns `InvalidArgument`. A finite value whose rounding
//! would carry into the all-ones exponent is saturated to the largest finite value with `k`
//! mantissa bits, so finite stays finite. Lossy decode returns the same dtype with the dropped
//! mantissa bits zero.
//!
//! ## Limits
//! Offsets are u32, so one blob is at most 4 GiB. Decode allocates at most `n × 4` bytes, and `n`
//! is bounded by the raw plane that must be inside the blob (`n ≤ 8 × blob length`).

mod decoder;
mod encoder;
mod float;
mod plan;
pub mod rans;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_v2;

use std::ops::Range;

use crate::dtype::{full_mantissa_bits, FloatType};
use crate::error::{FormatError, Result};
pub use decoder::{decode, decode_exponents_reference, decode_rows, entropy_bits, stats, Stats};
pub use encoder::{encode, encode_v2, encode_v2_with, encode_version, encode_with};
use float::{BitReader, BitWriter, Layout};
pub use rans::{decode_lane, LUT_SIZE, PROB_BITS, PROB_SCALE, RANS_L};

/// Magic bytes at the start of every NeuZip blob.
pub const MAGIC: [u8; 4] = *b"TNZP";
/// Newest layout version (read and written by this build; see "Layout version 2").
pub const VERSION: u8 = 2;
/// The first layout (still read, and written by [`encode`] / [`encode_with`]).
pub const VERSION_V1: u8 = 1;
/// Symbols per interleave group in layout 2: symbol `j` of a block belongs to lane
/// `(j / V2_GROUP) mod lanes` (layout 1: group 1).
pub const V2_GROUP: u32 = 4;
/// Target symbols per block written by [`encode_v2`].
pub const V2_BLOCK_SYMBOLS: u32 = 8192;
/// Symbols per lane below which [`Params::auto_v2`] uses fewer lanes.
pub const V2_SYMBOLS_PER_LANE: u64 = 128;
/// Size of the fixed header.
pub const HEADER_BYTES: usize = 80;
/// Most lanes per block (one WGSL workgroup of 64 decodes one block).
pub const MAX_LANES: u32 = 64;
/// Most symbols per block (lane starts are u16).
pub const MAX_BLOCK_LEN: u32 = 65536;
/// Lanes per block written by [`encode`].
pub const DEFAULT_LANES: u32 = 32;
/// Symbols per lane below which [`Params::auto`] uses fewer lanes.
pub const SYMBOLS_PER_LANE: u64 = 2048;
/// Target symbols per block written by [`encode`].
pub const DEFAULT_BLOCK_SYMBOLS: u32 = 65536;

const CODEC: &str = "neuzip";

/// Encoder knobs (the decoder reads them from the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Lanes per block, 1..=64.
    pub lanes: u32,
    /// Target symbols per block, 1..=65536 (see the module doc, "Blocks and rows").
    pub block_symbols: u32,
}

impl Params {
    /// What [`encode`] uses: [`DEFAULT_BLOCK_SYMBOLS`], and [`DEFAULT_LANES`] lanes unless a block
    /// is small, then one lane per [`SYMBOLS_PER_LANE`] symbols (at least one) so small tensors
    /// (norms, biases) do not pay 6 bytes for each of 32 nearly empty lanes.
    pub fn auto(n_elements: u64, row_len: u64) -> Params {
        let b = u64::from(DEFAULT_BLOCK_SYMBOLS);
        let block = match row_len {
            0 => n_elements,
            r if r <= b => (b / r * r).min(n_elements),
            r => r.div_ceil(r.div_ceil(b)),
        };
        let lanes = block
            .div_ceil(SYMBOLS_PER_LANE)
            .clamp(1, u64::from(DEFAULT_LANES)) as u32; // ok: ≤ 32
        Params {
            lanes,
            block_symbols: DEFAULT_BLOCK_SYMBOLS,
        }
    }
}

impl Params {
    /// What [`encode_v2`] uses: [`V2_BLOCK_SYMBOLS`]-symbol blocks of [`DEFAULT_LANES`] lanes
    /// (256 symbols, 64 groups per lane), fewer lanes for blocks under 4096 symbols (one per
    /// [`V2_SYMBOLS_PER_LANE`]).
    pub fn auto_v2(n_elements: u64, row_len: u64) -> Params {
        let b = u64::from(V2_BLOCK_SYMBOLS);
        let block = match row_len {
            0 => n_elements,
            r if r <= b => (b / r * r).min(n_elements),
            r => r.div_ceil(r.div_ceil(b)),
        };
        let lanes = block
            .div_ceil(V2_SYMBOLS_PER_LANE)
            .clamp(1, u64::from(DEFAULT_LANES)) as u32; // ok: ≤ 32
        Params {
            lanes,
            block_symbols: V2_BLOCK_SYMBOLS,
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Params {
            lanes: DEFAULT_LANES,
            block_symbols: DEFAULT_BLOCK_SYMBOLS,
        }
    }
}

/// A byte range of the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub offset: u32,
    pub len: u32,
}

impl Section {
    pub fn range(self) -> Range<usize> {
        self.offset as usize..self.offset as usize + self.len as usize
    }
}

/// A validated header: everything a decoder (CPU or the GPU upload code) needs to find the
/// frequency table, per-block word bases, per-lane states and starts, the words and the raw plane.
/// Built by [`Plan::parse`], which checks every field and the structure of sections 2–5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Layout version, 1 or 2.
    pub version: u8,
    /// Interleave group: 1 (layout 1) or [`V2_GROUP`] (layout 2).
    pub group: u32,
    pub dtype: FloatType,
    /// Mantissa bits kept (`full_mantissa_bits(dtype)` = lossless).
    pub mantissa_bits: u8,
    pub n_elements: u64,
    pub row_len: u64,
    pub lanes: u32,
    pub block_len: u32,
    pub rows_per_block: u32,
    pub blocks_per_row: u32,
    pub n_blocks: u32,
    pub n_syms: u32,
    pub n_words: u32,
    /// Section 2: `n_syms × u32`.
    pub table: Section,
    /// Section 3: `(n_blocks + 1) × u32`.
    pub block_words: Section,
    /// Section 4: `n_blocks × lanes × u32`.
    pub states: Section,
    /// Section 5: `n_blocks × lanes × u16` (+ padding).
    pub lane_starts: Section,
    /// Section 6: `n_words × u16` (+ padding).
    pub words: Section,
    /// Section 7: packed raw fields (+ padding).
    pub raw: Section,
    /// Total blob length.
    pub blob_len: u32,
}

fn dtype_code(t: FloatType) -> u8 {
    match t {
        FloatType::F32 => 0,
        FloatType::F16 => 1,
        FloatType::Bf16 => 2,
    }
}

fn pad4(x: u64) -> u64 {
    x.div_ceil(4) * 4
}

fn rd_u32(b: &[u8], at: usize) -> Result<u32> {
    match b.get(at..at + 4) {
        Some(&[a, b, c, d]) => Ok(u32::from_le_bytes([a, b, c, d])),
        _ => Err(trunc(b.len(), at, 4)),
    }
}

fn rd_u16(b: &[u8], at: usize) -> Result<u16> {
    match b.get(at..at + 2) {
        Some(&[a, b]) => Ok(u16::from_le_bytes([a, b])),
        _ => Err(trunc(b.len(), at, 2)),
    }
}

fn rd_u64(b: &[u8], at: usize) -> Result<u64> {
    let lo = rd_u32(b, at)?;
    let hi = rd_u32(b, at + 4)?;
    Ok(u64::from(lo) | (u64::from(hi) << 32))
}

fn trunc(len: usize, at: usize, size: usize) -> FormatError {
    FormatError::Truncated {
        what: "neuzip blob".into(),
        start: at as u64,
        end: (at + size) as u64,
        len: len as u64,
    }
}

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt(CODEC, detail)
}

/// Block geometry for `n` elements in rows of `row_len` and a target block size: `(block_len,
/// rows_per_block, blocks_per_row, n_blocks)`.
fn geometry(n: u64, row_len: u64, target: u32) -> Result<(u32, u32, u32, u32)> {
    let rows = n / row_len;
    let target64 = u64::from(target);
    let (block_len, r, s, nb) = if row_len <= target64 {
        let r = target64 / row_len;
        (r * row_len, r, 1, rows.div_ceil(r))
    } else {
        let s0 = row_len.div_ceil(target64);
        let block_len = row_len.div_ceil(s0);
        let s = row_len.div_ceil(block_len);
        (block_len, 1, s, rows.saturating_mul(s))
    };
    let too_big = |what: &str| {
        FormatError::out_of_range("neuzip tensor", format!("{what} does not fit in u32"))
    };
    Ok((
        u32::try_from(block_len).map_err(|_| too_big("block length"))?,
        u32::try_from(r).map_err(|_| too_big("rows per block"))?,
        u32::try_from(s).map_err(|_| too_big("blocks per row"))?,
        u32::try_from(nb).map_err(|_| too_big("block count"))?,
    ))
}

/// Canonical section offsets for the counts: `[table, block_words, states, lane_starts, words,
/// raw, end]`.
fn layout(n_syms: u64, n_blocks: u64, lanes: u64, n_words: u64, raw_bytes: u64) -> [u64; 7] {
    let table = HEADER_BYTES as u64;
    let block_words = table + 4 * n_syms;
    let states = block_words + 4 * (n_blocks + 1);
    let lane_starts = states + 4 * n_blocks * lanes;
    let words = lane_starts + pad4(2 * n_blocks * lanes);
    let raw = words + pad4(2 * n_words);
    let end = raw + pad4(raw_bytes);
    [table, block_words, states, lane_starts, words, raw, end]
}

/// Interleave group of a layout version (1 for layout 1, [`V2_GROUP`] for layout 2).
pub fn group_of(version: u8) -> u32 {
    if version >= 2 {
        V2_GROUP
    } else {
        1
    }
}

/// Symbols of lane `lane` in a block of `len` symbols with `lanes` lanes and interleave `group`.
pub fn lane_len(len: u32, lanes: u32, group: u32, lane: u32) -> usize {
    let (len, lanes, g, l) = (len as usize, lanes as usize, group as usize, lane as usize);
    let span = lanes * g;
    let full = len / span;
    let rem = len % span;
    full * g + rem.saturating_sub(l * g).min(g)
}

/// Position in its block of lane `lane`'s `t`-th symbol.
#[inline]
pub fn lane_pos(lanes: u32, group: u32, lane: u32, t: usize) -> usize {
    let g = group as usize;
    ((t / g) * lanes as usize + lane as usize) * g + t % g
}
