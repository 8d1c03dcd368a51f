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

mod float;
pub mod rans;
#[cfg(test)]
mod tests;

use std::ops::Range;

use crate::dtype::{full_mantissa_bits, FloatType};
use crate::error::{FormatError, Result};
use float::{BitReader, BitWriter, Layout};
pub use rans::{decode_lane, LUT_SIZE, PROB_BITS, PROB_SCALE, RANS_L};

/// Magic bytes at the start of every NeuZip blob.
pub const MAGIC: [u8; 4] = *b"TNZP";
/// Layout version written and read by this build.
pub const VERSION: u8 = 1;
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

/// Encode with the default [`Params`]. `data`: raw little-endian elements of `dtype`; `row_len`:
/// elements per row (the last dimension; used to align blocks to rows; may be 0 only for an empty
/// tensor); `mantissa_bits`: bits kept (full width = lossless: 23/10/7 for f32/f16/bf16; lossy
/// 3, 1 or 0 as in NeuZip, any smaller value works).
pub fn encode(dtype: FloatType, mantissa_bits: u8, data: &[u8], row_len: usize) -> Result<Vec<u8>> {
    let n = data.len() / dtype.size();
    encode_with(
        dtype,
        mantissa_bits,
        data,
        row_len,
        Params::auto(n as u64, row_len as u64),
    )
}

/// [`encode`] with explicit block parameters. Deterministic: the same input gives the same bytes.
pub fn encode_with(
    dtype: FloatType,
    mantissa_bits: u8,
    data: &[u8],
    row_len: usize,
    params: Params,
) -> Result<Vec<u8>> {
    let l = Layout::of(dtype);
    let full = full_mantissa_bits(dtype);
    if mantissa_bits > full {
        return Err(FormatError::InvalidArgument(format!(
            "{dtype:?} has {full} mantissa bits, asked to keep {mantissa_bits}"
        )));
    }
    if !(1..=MAX_LANES).contains(&params.lanes)
        || !(1..=MAX_BLOCK_LEN).contains(&params.block_symbols)
    {
        return Err(FormatError::InvalidArgument(format!(
            "neuzip params {params:?}: lanes must be 1..={MAX_LANES}, block_symbols 1..={MAX_BLOCK_LEN}"
        )));
    }
    let size = dtype.size();
    if data.len() % size != 0 {
        return Err(FormatError::InvalidArgument(format!(
            "{} bytes is not a whole number of {dtype:?} elements",
            data.len()
        )));
    }
    let n = data.len() / size;
    if n > 0 && (row_len == 0 || n % row_len != 0) {
        return Err(FormatError::InvalidArgument(format!(
            "{n} elements are not a whole number of rows of {row_len}"
        )));
    }
    let k = u32::from(mantissa_bits);
    let lossy = mantissa_bits < full;
    let w = k + 1;
    let row_len = row_len.max(1) as u64;
    let n64 = n as u64;

    // Split into exponent symbols and raw fields.
    let mut syms = Vec::with_capacity(n);
    let mut counts = [0u64; 256];
    let raw_len = (n64 * u64::from(w)).div_ceil(8);
    let mut bits = BitWriter::with_capacity(usize::try_from(raw_len).unwrap_or(0));
    for c in data.chunks_exact(size) {
        let mut x = match *c {
            [a, b] => u32::from(u16::from_le_bytes([a, b])),
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => 0, // unreachable: size is 2 or 4
        };
        if lossy {
            x = float::round_lossy(l, k, x)?;
        }
        let s = float::symbol(l, x);
        counts[usize::from(s)] += 1;
        syms.push(s);
        bits.put(float::field(l, k, x), w);
    }
    let raw = bits.finish();

    // Frequencies, encoder table.
    let table = rans::quantize(&counts);
    let mut enc = [(0u32, 0u32); 256];
    let mut cdf = 0;
    for &(s, pdf) in &table {
        enc[usize::from(s)] = (pdf, cdf);
        cdf += pdf;
    }

    // Blocks and lanes.
    let (block_len, rpb, bpr, n_blocks) = geometry(n64, row_len, params.block_symbols)?;
    let lanes = params.lanes as usize;
    let mut block_words: Vec<u32> = Vec::with_capacity(n_blocks as usize + 1);
    let mut states: Vec<u32> = Vec::with_capacity(n_blocks as usize * lanes);
    let mut starts: Vec<u16> = Vec::with_capacity(n_blocks as usize * lanes);
    let mut words: Vec<u16> = Vec::new();
    let geo = Plan {
        dtype,
        mantissa_bits,
        n_elements: n64,
        row_len,
        lanes: params.lanes,
        block_len,
        rows_per_block: rpb,
        blocks_per_row: bpr,
        n_blocks,
        n_syms: 0,
        n_words: 0,
        table: Section { offset: 0, len: 0 },
        block_words: Section { offset: 0, len: 0 },
        states: Section { offset: 0, len: 0 },
        lane_starts: Section { offset: 0, len: 0 },
        words: Section { offset: 0, len: 0 },
        raw: Section { offset: 0, len: 0 },
        blob_len: 0,
    };
    let too_big = || FormatError::out_of_range("neuzip tensor", "compressed stream exceeds 4 GiB");
    for b in 0..n_blocks {
        let (start, len) = geo.block_span(b);
        let blk = syms
            .get(start as usize..start as usize + len as usize)
            .ok_or_else(|| FormatError::InvalidArgument("block outside the tensor".into()))?;
        let base = words.len();
        block_words.push(u32::try_from(base).map_err(|_| too_big())?);
        for lane in 0..lanes {
            let rel = u16::try_from(words.len() - base).map_err(|_| {
                FormatError::out_of_range("neuzip block", "lane start does not fit u16")
            })?;
            starts.push(rel);
            let it = blk.iter().skip(lane).step_by(lanes).copied();
            states.push(rans::encode_lane(it, &enc, &mut words));
        }
    }
    block_words.push(u32::try_from(words.len()).map_err(|_| too_big())?);

    // Assemble.
    let n_syms = table.len() as u64;
    let offs = layout(
        n_syms,
        u64::from(n_blocks),
        lanes as u64,
        words.len() as u64,
        raw.len() as u64,
    );
    let total = usize::try_from(offs[6])
        .ok()
        .filter(|&t| u32::try_from(t).is_ok())
        .ok_or_else(too_big)?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, dtype_code(dtype), mantissa_bits, PROB_BITS as u8]);
    out.extend_from_slice(&n64.to_le_bytes());
    out.extend_from_slice(&row_len.to_le_bytes());
    for v in [
        params.lanes,
        block_len,
        rpb,
        bpr,
        n_blocks,
        n_syms as u32,
        words.len() as u32,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for o in offs {
        out.extend_from_slice(&(o as u32).to_le_bytes()); // ok: all ≤ total ≤ u32::MAX
    }
    debug_assert_eq!(out.len(), HEADER_BYTES);
    for &(s, pdf) in &table {
        out.extend_from_slice(&(u32::from(s) | (pdf << 16)).to_le_bytes());
    }
    for v in block_words.iter().chain(&states) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in &starts {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.resize(offs[4] as usize, 0);
    for v in &words {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.resize(offs[5] as usize, 0);
    out.extend_from_slice(&raw);
    out.resize(total, 0);
    Ok(out)
}

impl Plan {
    /// Parse and validate the header and the small structural sections (table, block word bases,
    /// states, lane starts, padding). After this, decoding can only fail on the word streams
    /// themselves (a lane running out of words, or ending off `2^15`).
    pub fn parse(blob: &[u8]) -> Result<Plan> {
        if blob.len() < HEADER_BYTES {
            if blob.len() >= 4 && blob.get(..4) != Some(&MAGIC[..]) {
                return Err(FormatError::malformed(
                    "neuzip blob",
                    "bad magic (not a NeuZip stream)",
                ));
            }
            return Err(trunc(blob.len(), 0, HEADER_BYTES));
        }
        if blob.get(..4) != Some(&MAGIC[..]) {
            return Err(FormatError::malformed(
                "neuzip blob",
                "bad magic (not a NeuZip stream)",
            ));
        }
        let byte = |i: usize| blob.get(i).copied().unwrap_or(0);
        if byte(4) != VERSION {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!("version {} (this build reads {VERSION}): re-pack with this build, or upgrade tern", byte(4)),
            ));
        }
        let dtype = match byte(5) {
            0 => FloatType::F32,
            1 => FloatType::F16,
            2 => FloatType::Bf16,
            d => {
                return Err(FormatError::malformed(
                    "neuzip blob",
                    format!("unknown dtype code {d}"),
                ))
            }
        };
        let mantissa_bits = byte(6);
        if mantissa_bits > full_mantissa_bits(dtype) {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!("{mantissa_bits} mantissa bits for {dtype:?}"),
            ));
        }
        if u32::from(byte(7)) != PROB_BITS {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!("prob_bits {} (must be {PROB_BITS})", byte(7)),
            ));
        }
        let n = rd_u64(blob, 8)?;
        let row_len = rd_u64(blob, 16)?;
        let f = |i: usize| rd_u32(blob, 24 + 4 * i);
        let (lanes, block_len, rpb, bpr, n_blocks, n_syms, n_words) =
            (f(0)?, f(1)?, f(2)?, f(3)?, f(4)?, f(5)?, f(6)?);
        let bad = |d: String| FormatError::malformed("neuzip blob", d);
        if row_len == 0 || n % row_len != 0 {
            return Err(bad(format!("{n} elements are not whole rows of {row_len}")));
        }
        if !(1..=MAX_LANES).contains(&lanes) {
            return Err(bad(format!("{lanes} lanes (1..={MAX_LANES})")));
        }
        if !(1..=MAX_BLOCK_LEN).contains(&block_len) || rpb == 0 || bpr == 0 {
            return Err(bad(format!(
                "block geometry len={block_len} rows/block={rpb} blocks/row={bpr}"
            )));
        }
        let rows = n / row_len;
        let expect_blocks = if bpr == 1 {
            if u64::from(rpb).checked_mul(row_len) != Some(u64::from(block_len)) {
                return Err(bad(format!(
                    "block_len {block_len} is not {rpb} rows of {row_len}"
                )));
            }
            rows.div_ceil(u64::from(rpb))
        } else {
            if rpb != 1
                || u64::from(block_len) >= row_len
                || row_len.div_ceil(u64::from(block_len)) != u64::from(bpr)
            {
                return Err(bad(format!(
                    "rows of {row_len} cut into {bpr} blocks of {block_len} (rows/block {rpb})"
                )));
            }
            rows.saturating_mul(u64::from(bpr))
        };
        if expect_blocks != u64::from(n_blocks) {
            return Err(bad(format!(
                "{n_blocks} blocks, geometry gives {expect_blocks}"
            )));
        }
        let l = Layout::of(dtype);
        if u64::from(n_syms) > l.alphabet() as u64 || (n_syms == 0) != (n == 0) {
            return Err(bad(format!("{n_syms} table entries for {n} elements")));
        }
        if u64::from(n_words) > n {
            return Err(bad(format!(
                "{n_words} words for {n} symbols (at most one per symbol)"
            )));
        }
        let w = u64::from(mantissa_bits) + 1;
        let raw_bytes = n
            .checked_mul(w)
            .map(|b| b.div_ceil(8))
            .ok_or_else(|| bad("element count overflows".into()))?;
        let offs = layout(
            u64::from(n_syms),
            u64::from(n_blocks),
            u64::from(lanes),
            u64::from(n_words),
            raw_bytes,
        );
        for (i, &o) in offs.iter().enumerate() {
            let stored = rd_u32(blob, 52 + 4 * i)?;
            if u64::from(stored) != o {
                return Err(bad(format!(
                    "section {} offset {stored}, expected {o}",
                    i + 2
                )));
            }
        }
        if offs[6] != blob.len() as u64 {
            return Err(FormatError::Truncated {
                what: "neuzip blob".into(),
                start: 0,
                end: offs[6],
                len: blob.len() as u64,
            });
        }
        let sec = |a: u64, len: u64| Section {
            offset: a as u32,
            len: len as u32,
        }; // ok: ≤ blob.len() = offs[6] < 2^32
        let plan = Plan {
            dtype,
            mantissa_bits,
            n_elements: n,
            row_len,
            lanes,
            block_len,
            rows_per_block: rpb,
            blocks_per_row: bpr,
            n_blocks,
            n_syms,
            n_words,
            table: sec(offs[0], offs[1] - offs[0]),
            block_words: sec(offs[1], offs[2] - offs[1]),
            states: sec(offs[2], offs[3] - offs[2]),
            lane_starts: sec(offs[3], offs[4] - offs[3]),
            words: sec(offs[4], offs[5] - offs[4]),
            raw: sec(offs[5], offs[6] - offs[5]),
            blob_len: offs[6] as u32,
        };
        plan.validate_sections(blob, raw_bytes)?;
        Ok(plan)
    }

    fn validate_sections(&self, blob: &[u8], raw_bytes: u64) -> Result<()> {
        self.symbol_table(blob)?;
        let mut prev = 0u32;
        for b in 0..=self.n_blocks {
            let v = self.block_word_base(blob, b)?;
            if (b == 0 && v != 0) || v < prev || (b == self.n_blocks && v != self.n_words) {
                return Err(corrupt(format!("block word base {b} = {v} out of order")));
            }
            if b > 0 {
                let (_, len) = self.block_span(b - 1);
                if v - prev > len {
                    return Err(corrupt(format!(
                        "block {} has {} words for {len} symbols",
                        b - 1,
                        v - prev
                    )));
                }
            }
            prev = v;
        }
        for i in 0..self.n_blocks as usize * self.lanes as usize {
            let s = rd_u32(blob, self.states.offset as usize + 4 * i)?;
            if !(RANS_L..rans::RANS_MAX).contains(&s) {
                return Err(corrupt(format!("lane state {s:#x} outside [2^15, 2^31)")));
            }
        }
        for b in 0..self.n_blocks {
            let count = self.block_word_base(blob, b + 1)? - self.block_word_base(blob, b)?;
            let mut prev = 0u32;
            for l in 0..self.lanes {
                let s = u32::from(self.lane_start(blob, b, l)?);
                if (l == 0 && s != 0) || s < prev || s > count {
                    return Err(corrupt(format!(
                        "lane start {s} of lane {l} in block {b} out of order"
                    )));
                }
                prev = s;
            }
        }
        // Padding after lane starts, words and raw plane (including unused bits) is zero.
        let zero_from = |what: &str, from: u64, sec: Section| -> Result<()> {
            let end = u64::from(sec.offset) + u64::from(sec.len);
            for at in u64::from(sec.offset) + from..end {
                if blob.get(at as usize).copied().unwrap_or(0) != 0 {
                    return Err(FormatError::NonZeroPadding {
                        what: format!("neuzip {what}"),
                        offset: at,
                    });
                }
            }
            Ok(())
        };
        zero_from(
            "lane starts",
            2 * u64::from(self.n_blocks) * u64::from(self.lanes),
            self.lane_starts,
        )?;
        zero_from("words", 2 * u64::from(self.n_words), self.words)?;
        zero_from("raw plane", raw_bytes, self.raw)?;
        let used_bits = self.n_elements * (u64::from(self.mantissa_bits) + 1);
        if used_bits % 8 != 0 {
            let last = blob
                .get(self.raw.offset as usize + (used_bits / 8) as usize)
                .copied()
                .unwrap_or(0);
            if last >> (used_bits % 8) != 0 {
                return Err(FormatError::NonZeroPadding {
                    what: "neuzip raw plane (unused bits)".into(),
                    offset: u64::from(self.raw.offset) + used_bits / 8,
                });
            }
        }
        Ok(())
    }

    /// Check that the blob holds what the container's encoding record says (the blob alone cannot
    /// tell bf16 k=7 from f32 k=7 with the same element count: both are valid readings).
    pub fn check_matches(&self, dtype: FloatType, mantissa_bits: u8) -> Result<()> {
        if self.dtype != dtype || self.mantissa_bits != mantissa_bits {
            return Err(FormatError::malformed(
                "neuzip blob",
                format!(
                    "holds {:?} with {} mantissa bits, the tensor record says {dtype:?} with {mantissa_bits}",
                    self.dtype, self.mantissa_bits
                ),
            ));
        }
        Ok(())
    }

    /// The frequency table as `(symbol, pdf)` in increasing symbol order, validated.
    pub fn symbol_table(&self, blob: &[u8]) -> Result<Vec<(u8, u32)>> {
        let alphabet = Layout::of(self.dtype).alphabet() as u32;
        let mut out = Vec::with_capacity(self.n_syms as usize);
        let mut sum = 0u32;
        for i in 0..self.n_syms as usize {
            let e = rd_u32(blob, self.table.offset as usize + 4 * i)?;
            let (sym, pdf) = (e & 0xFF, (e >> 16) & 0xFFF);
            if e & 0xF000_FF00 != 0
                || sym >= alphabet
                || pdf == 0
                || out.last().is_some_and(|&(p, _)| u32::from(p) >= sym)
            {
                return Err(corrupt(format!("frequency table entry {i} = {e:#x}")));
            }
            sum += pdf;
            out.push((sym as u8, pdf)); // ok: sym < alphabet ≤ 256
        }
        if self.n_syms > 0 && sum != PROB_SCALE {
            return Err(corrupt(format!(
                "frequencies sum to {sum}, not {PROB_SCALE}"
            )));
        }
        Ok(out)
    }

    /// The 2048-entry decode table (what a GPU keeps in workgroup memory).
    pub fn lut(&self, blob: &[u8]) -> Result<Box<[u32; LUT_SIZE]>> {
        rans::build_lut(&self.symbol_table(blob)?)
    }

    /// First word (index into section 6) of block `b`; `b = n_blocks` gives `n_words`.
    pub fn block_word_base(&self, blob: &[u8], b: u32) -> Result<u32> {
        rd_u32(blob, self.block_words.offset as usize + 4 * b as usize)
    }

    /// State lane `l` of block `b` starts from.
    pub fn lane_state(&self, blob: &[u8], b: u32, l: u32) -> Result<u32> {
        rd_u32(
            blob,
            self.states.offset as usize + 4 * (b as usize * self.lanes as usize + l as usize),
        )
    }

    /// First word of lane `l` in block `b`, relative to the block's base.
    pub fn lane_start(&self, blob: &[u8], b: u32, l: u32) -> Result<u16> {
        rd_u16(
            blob,
            self.lane_starts.offset as usize + 2 * (b as usize * self.lanes as usize + l as usize),
        )
    }

    /// Absolute word range `[begin, end)` of lane `l` in block `b`.
    pub fn lane_words(&self, blob: &[u8], b: u32, l: u32) -> Result<Range<usize>> {
        let base = self.block_word_base(blob, b)? as usize;
        let begin = base + usize::from(self.lane_start(blob, b, l)?);
        let end = if l + 1 < self.lanes {
            base + usize::from(self.lane_start(blob, b, l + 1)?)
        } else {
            self.block_word_base(blob, b + 1)? as usize
        };
        Ok(begin..end)
    }

    /// Number of rows.
    pub fn rows(&self) -> u64 {
        self.n_elements / self.row_len
    }

    /// First element and symbol count of block `b < n_blocks`.
    pub fn block_span(&self, b: u32) -> (u64, u32) {
        let bl = u64::from(self.block_len);
        let (start, limit) = if self.blocks_per_row == 1 {
            let start = u64::from(b) * bl;
            (start, self.n_elements)
        } else {
            let s = u64::from(self.blocks_per_row);
            let row = u64::from(b) / s;
            let j = u64::from(b) % s;
            (row * self.row_len + j * bl, (row + 1) * self.row_len)
        };
        (start, limit.saturating_sub(start).min(bl) as u32) // ok: ≤ block_len
    }

    /// The blocks holding rows `first_row .. first_row + n_rows` (which must be in range).
    pub fn blocks_for_rows(&self, first_row: u64, n_rows: u64) -> Range<u32> {
        if n_rows == 0 {
            return 0..0;
        }
        let end_row = first_row + n_rows;
        let (b0, b1) = if self.blocks_per_row == 1 {
            let r = u64::from(self.rows_per_block);
            (first_row / r, end_row.div_ceil(r))
        } else {
            let s = u64::from(self.blocks_per_row);
            (first_row * s, end_row * s)
        };
        let nb = u64::from(self.n_blocks);
        (b0.min(nb) as u32)..(b1.min(nb) as u32) // ok: ≤ n_blocks
    }

    /// Decode the first `upto` exponent symbols of block `b` into `out[..upto]`, all lanes in
    /// lockstep (the CPU fast path; same arithmetic as [`decode_lane`]). When the whole block is
    /// decoded, checks that every lane ends on `2^15` with all its words read.
    fn decode_block(
        &self,
        blob: &[u8],
        lut: &[u32; LUT_SIZE],
        b: u32,
        out: &mut [u8],
    ) -> Result<()> {
        let (_, len) = self.block_span(b);
        let upto = out.len();
        let lanes = self.lanes as usize;
        let words = blob
            .get(self.words.range())
            .ok_or_else(|| trunc(blob.len(), self.words.offset as usize, 0))?;
        let base = self.block_word_base(blob, b)? as usize;
        let bend = self.block_word_base(blob, b + 1)? as usize;
        // This block's words; lanes index them relative to `base`.
        let bw = words
            .get(2 * base..2 * bend)
            .ok_or_else(|| corrupt("block words outside the word section"))?;
        let mut x = [0u32; MAX_LANES as usize];
        let mut p = [0usize; MAX_LANES as usize];
        let mut e = [0usize; MAX_LANES as usize];
        for l in 0..lanes {
            let r = self.lane_words(blob, b, l as u32)?;
            x[l] = self.lane_state(blob, b, l as u32)?;
            p[l] = r.start - base;
            e[l] = r.end - base;
        }
        // Branch-free step: every lane reads the word at its cursor (0 past the block's end) and
        // keeps it only when renormalizing. A lane that runs past its own words reads its
        // neighbour's; that is caught after the loop (`p > e`), so no error check per step.
        let mut wbuf: Vec<u16> = bw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        wbuf.push(0);
        let mut x32 = [0u32; MAX_LANES as usize];
        let mut p32 = [0u32; MAX_LANES as usize];
        for l in 0..lanes {
            x32[l] = x[l];
            p32[l] = u32::try_from(p[l]).map_err(|_| corrupt("lane start"))?;
        }
        match lanes {
            32 => lockstep::<32>(lut, &wbuf, &mut x32, &mut p32, out),
            64 => lockstep::<64>(lut, &wbuf, &mut x32, &mut p32, out),
            _ => lockstep_dyn(lut, &wbuf, &mut x32[..lanes], &mut p32[..lanes], out),
        }
        for l in 0..lanes {
            x[l] = x32[l];
            p[l] = p32[l] as usize;
        }
        let whole = upto == len as usize;
        for l in 0..lanes {
            if p[l] > e[l] || (whole && (x[l] != RANS_L || p[l] != e[l])) {
                return Err(corrupt(format!(
                    "lane {l} of block {b} ends in state {:#x} at word {} (its words end at {}; expected 0x8000 there)",
                    x[l], p[l], e[l]
                )));
            }
        }
        Ok(())
    }

    /// Decode elements `start..end` (whole blocks decoded as needed) into raw little-endian bytes.
    fn decode_elements(&self, blob: &[u8], start: u64, end: u64) -> Result<Vec<u8>> {
        let size = self.dtype.size();
        let count = usize::try_from(end - start)
            .map_err(|_| FormatError::out_of_range("neuzip decode", "too many elements"))?;
        let mut out = vec![0u8; count * size];
        if count == 0 {
            return Ok(out);
        }
        let lut = self.lut(blob)?;
        let l = Layout::of(self.dtype);
        let k = u32::from(self.mantissa_bits);
        let w = k + 1;
        let raw = blob
            .get(self.raw.range())
            .ok_or_else(|| trunc(blob.len(), self.raw.offset as usize, 0))?;
        let mut exps = vec![0u8; self.block_len as usize];
        let first_block = self.block_of(start);
        for b in first_block..self.n_blocks {
            let (bs, blen) = self.block_span(b);
            if bs >= end {
                break;
            }
            let upto = (end.min(bs + u64::from(blen)) - bs) as usize; // ok: ≤ blen
            let ex = exps
                .get_mut(..upto)
                .ok_or_else(|| corrupt("block longer than block_len"))?;
            self.decode_block(blob, &lut, b, ex)?;
            // Merge elements max(bs, start) .. bs + upto.
            let from = bs.max(start);
            let skip = (from - bs) as usize;
            let o0 = ((from - start) as usize) * size;
            let dst = out
                .get_mut(o0..o0 + (upto - skip) * size)
                .ok_or_else(|| corrupt("block outside the requested range"))?;
            let ex = ex.get(skip..).unwrap_or(&[]);
            merge_into(l, k, w, raw, from, ex, dst);
        }
        Ok(out)
    }

    /// The block holding element `i`.
    fn block_of(&self, i: u64) -> u32 {
        let b = if self.blocks_per_row == 1 {
            i / u64::from(self.block_len)
        } else {
            let row = i / self.row_len;
            row * u64::from(self.blocks_per_row) + (i % self.row_len) / u64::from(self.block_len)
        };
        b.min(u64::from(self.n_blocks)) as u32 // ok: ≤ n_blocks
    }
}

/// One decode step of one lane (the arithmetic of [`decode_lane`], branch-free word read).
#[inline(always)]
fn lane_step(lut: &[u32; LUT_SIZE], wbuf: &[u16], o: &mut u8, xl: &mut u32, pl: &mut u32) {
    let xv = *xl;
    let ent = lut[(xv & (PROB_SCALE - 1)) as usize];
    *o = ent as u8; // ok: the low byte is the symbol
    let xn = ((ent >> 8) & 0xFFF) * (xv >> PROB_BITS) + (ent >> 20);
    let need = xn < RANS_L;
    let w = u32::from(wbuf.get(*pl as usize).copied().unwrap_or(0));
    *xl = if need { (xn << 16) | w } else { xn };
    *pl += u32::from(need);
}

/// All `L` lanes in lockstep over `out` (symbol `j` → lane `j mod L`); `L` known at compile time.
fn lockstep<const L: usize>(
    lut: &[u32; LUT_SIZE],
    wbuf: &[u16],
    x: &mut [u32; MAX_LANES as usize],
    p: &mut [u32; MAX_LANES as usize],
    out: &mut [u8],
) {
    let mut xs = [0u32; L];
    let mut ps = [0u32; L];
    xs.copy_from_slice(&x[..L]);
    ps.copy_from_slice(&p[..L]);
    let mut chunks = out.chunks_exact_mut(L);
    for c in &mut chunks {
        for ((o, xl), pl) in c.iter_mut().zip(xs.iter_mut()).zip(ps.iter_mut()) {
            lane_step(lut, wbuf, o, xl, pl);
        }
    }
    for ((o, xl), pl) in chunks
        .into_remainder()
        .iter_mut()
        .zip(xs.iter_mut())
        .zip(ps.iter_mut())
    {
        lane_step(lut, wbuf, o, xl, pl);
    }
    x[..L].copy_from_slice(&xs);
    p[..L].copy_from_slice(&ps);
}

/// [`lockstep`] for any lane count.
fn lockstep_dyn(
    lut: &[u32; LUT_SIZE],
    wbuf: &[u16],
    xs: &mut [u32],
    ps: &mut [u32],
    out: &mut [u8],
) {
    let lanes = xs.len().max(1);
    let mut chunks = out.chunks_exact_mut(lanes);
    for c in &mut chunks {
        for ((o, xl), pl) in c.iter_mut().zip(xs.iter_mut()).zip(ps.iter_mut()) {
            lane_step(lut, wbuf, o, xl, pl);
        }
    }
    for ((o, xl), pl) in chunks
        .into_remainder()
        .iter_mut()
        .zip(xs.iter_mut())
        .zip(ps.iter_mut())
    {
        lane_step(lut, wbuf, o, xl, pl);
    }
}

/// Write elements `from ..` (their exponents in `ex`) into `dst` as little-endian bytes.
fn merge_into(l: Layout, k: u32, w: u32, raw: &[u8], from: u64, ex: &[u8], dst: &mut [u8]) {
    let size = (l.width / 8) as usize;
    if l == Layout::of(FloatType::Bf16) && k == 7 {
        // bf16 lossless: the raw byte is sign << 7 | mantissa.
        let src = raw.get(from as usize..).unwrap_or(&[]);
        for ((d, &e), &r) in dst.chunks_exact_mut(2).zip(ex).zip(src) {
            let v = (u16::from(r & 0x80) << 8) | (u16::from(e) << 7) | u16::from(r & 0x7F);
            d.copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let mut rd = BitReader::at_bit(raw, from * u64::from(w));
    for (d, &e) in dst.chunks_exact_mut(size).zip(ex) {
        let v = float::merge(l, k, e, rd.get(w));
        if size == 2 {
            d.copy_from_slice(&(v as u16).to_le_bytes()); // ok: 16-bit element
        } else {
            d.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Decode the whole blob into raw little-endian elements of its dtype.
pub fn decode(blob: &[u8]) -> Result<Vec<u8>> {
    let plan = Plan::parse(blob)?;
    plan.decode_elements(blob, 0, plan.n_elements)
}

/// Decode rows `first_row .. first_row + n_rows` only (raw little-endian elements), touching only
/// the blocks holding them; each lane stops after the last requested symbol.
pub fn decode_rows(blob: &[u8], first_row: u64, n_rows: u64) -> Result<Vec<u8>> {
    Plan::parse(blob)?.decode_rows(blob, first_row, n_rows)
}

impl Plan {
    /// [`decode_rows`] with a plan already parsed from `blob` (a caller decoding many row tiles
    /// of one tensor, e.g. the CPU reference's per-tile decode, parses the blob once).
    pub fn decode_rows(&self, blob: &[u8], first_row: u64, n_rows: u64) -> Result<Vec<u8>> {
        let plan = self;
        let end_row = first_row
            .checked_add(n_rows)
            .filter(|&e| e <= plan.rows())
            .ok_or_else(|| {
                FormatError::out_of_range(
                    "neuzip rows",
                    format!(
                        "rows {first_row}..+{n_rows} of a tensor with {} rows",
                        plan.rows()
                    ),
                )
            })?;
        plan.decode_elements(blob, first_row * plan.row_len, end_row * plan.row_len)
    }
}

/// Compression statistics of one blob (decodes the exponents to measure their entropy).
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub dtype: FloatType,
    pub mantissa_bits: u8,
    pub n_elements: u64,
    pub blob_bytes: u64,
    /// Bytes spent on the exponents: header, table, block bases, states, lane starts, words.
    pub exponent_bytes: u64,
    /// Bytes of the raw sign+mantissa plane.
    pub raw_bytes: u64,
    /// `exponent_bytes · 8 / n`.
    pub exponent_bits_per_symbol: f64,
    /// Empirical (order-0) entropy of the exponent symbols, bits per symbol.
    pub exponent_entropy_bits: f64,
    /// `blob_bytes / (n · dtype size)`.
    pub ratio_vs_dtype: f64,
    /// `blob_bytes / (n · 2)`: size relative to bf16.
    pub ratio_vs_bf16: f64,
}

/// Measure a blob: sizes, exponent bits per symbol, and the exponents' empirical entropy.
pub fn stats(blob: &[u8]) -> Result<Stats> {
    let plan = Plan::parse(blob)?;
    let lut = plan.lut(blob)?;
    let mut counts = [0u64; 256];
    let mut exps = vec![0u8; plan.block_len as usize];
    for b in 0..plan.n_blocks {
        let (_, len) = plan.block_span(b);
        let ex = exps
            .get_mut(..len as usize)
            .ok_or_else(|| corrupt("block longer than block_len"))?;
        plan.decode_block(blob, &lut, b, ex)?;
        for &s in ex.iter() {
            counts[usize::from(s)] += 1;
        }
    }
    let n = plan.n_elements;
    let entropy = entropy_bits(&counts);
    let raw_bytes = u64::from(plan.raw.len);
    let exponent_bytes = u64::from(plan.blob_len) - raw_bytes;
    let per = |x: u64, d: u64| if d == 0 { 0.0 } else { x as f64 / d as f64 };
    Ok(Stats {
        dtype: plan.dtype,
        mantissa_bits: plan.mantissa_bits,
        n_elements: n,
        blob_bytes: u64::from(plan.blob_len),
        exponent_bytes,
        raw_bytes,
        exponent_bits_per_symbol: per(exponent_bytes * 8, n),
        exponent_entropy_bits: entropy,
        ratio_vs_dtype: per(u64::from(plan.blob_len), n * plan.dtype.size() as u64),
        ratio_vs_bf16: per(u64::from(plan.blob_len), n * 2),
    })
}

/// Order-0 entropy in bits per symbol of a histogram.
pub fn entropy_bits(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let t = total as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / t;
            -p * p.log2()
        })
        .sum()
}

/// Reference decoder: every lane of every block through the scalar [`decode_lane`], one lane
/// after another, exactly as the WGSL kernel's invocations do. Returns the exponent symbols in
/// element order. Tests check the fast path against it.
pub fn decode_exponents_reference(blob: &[u8]) -> Result<Vec<u8>> {
    let plan = Plan::parse(blob)?;
    let lut = plan.lut(blob)?;
    let words = blob.get(plan.words.range()).unwrap_or(&[]);
    let n = usize::try_from(plan.n_elements)
        .map_err(|_| FormatError::out_of_range("neuzip decode", "too many elements"))?;
    let mut out = vec![0u8; n];
    let lanes = plan.lanes as usize;
    for b in 0..plan.n_blocks {
        let (start, len) = plan.block_span(b);
        for l in 0..plan.lanes {
            let r = plan.lane_words(blob, b, l)?;
            let state = plan.lane_state(blob, b, l)?;
            let count = (len as usize).saturating_sub(l as usize).div_ceil(lanes);
            let mut bad = false;
            let (x, k) = decode_lane(&lut, state, words, r.start, r.end, count, |t, s| match out
                .get_mut(start as usize + l as usize + t * lanes)
            {
                Some(o) => *o = s,
                None => bad = true,
            })?;
            if bad || x != RANS_L || k != r.end {
                return Err(corrupt(format!(
                    "lane {l} of block {b} did not end on 0x8000 with all words read"
                )));
            }
        }
    }
    Ok(out)
}
