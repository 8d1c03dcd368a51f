//! # Fine-tune deltas (`.ternd`): a tuned model as a lossless delta against a base `.tern`
//!
//! An app that ships several fine-tunes of one base, or updates one, downloads and stores only what
//! changed. A delta names its base by content (the base identity, below), and reconstructs the
//! tuned `.tern` file **byte for byte**: every tensor's checksum is checked after decoding, and
//! the reconstructed image goes through [`TernFile::from_bytes`]'s full validation.
//!
//! Per tensor (matched by name; the base tensor must have the same encoding, shape and size):
//! * **floats** (f32/f16/bf16, and NeuZip tensors after decoding): **FM-Delta**
//!   (methods-and-formats.md §6, after fpzip): each value's bits go through fpzip's
//!   order-preserving map `r = !x; r ^= (−(r >> (N−1))) >> 1`, the base's mapped value is
//!   subtracted, and the sign and position `k` of the highest set bit of the difference `d` form one
//!   of `2N + 1` symbols (`N` = equal, `N + 1 + k` = larger, `N − 1 − k` = smaller), entropy-coded;
//!   the `k` low bits of `d − 2^k` are stored raw. FM-Delta codes elements sequentially with an
//!   adaptive range coder; tern instead cuts tensors into chunks of 65536 elements, each with its
//!   own static frequency table and rANS state (NeuZip's coder, [`crate::neuzip::rans`]), so chunks
//!   decode in parallel.
//! * **ternary** tensors: a sparse list of the trits that changed (gaps between changed positions
//!   coded like FM-Delta's differences: the highest-bit position entropy-coded, the low bits raw;
//!   the new trit as one of the two other values, entropy-coded), applied in place to the base's
//!   packed codes, and FM-Delta on the scales.
//! * **ggml blocks** (Q8_0, Q4_0, Q4_1, Q6_K): FM-Delta on the f16 scale fields, a sparse list
//!   of byte differences (`tuned − base mod 256`) on the code bytes.
//! * a tensor that is new, differently shaped or encoded, or that codes smaller that way, is a
//!   **plain copy**; an unchanged tensor or chunk costs nothing (**base**). Every chunk falls back to
//!   a copy when that is smaller, and [`create`] decodes every tensor it encoded and falls back to a
//!   generic sparse byte delta, then to a copy, if the codec would not reproduce it exactly.
//!
//! ## Base identity
//! `xxh3-64(metadata section bytes ‖ tensor directory section bytes)` of the base file. The
//! directory holds every tensor's xxh3 checksum, so this names the base's whole content; computing
//! it touches a few KB instead of hashing the whole base at every load. Each base tensor's
//! own checksum is then verified when it is read ([`TernFile::tensor`]), and every record also
//! stores the checksum of the base tensor it was made against, so a wrong or damaged base is
//! refused before any of it is used.
//!
//! ## Byte layout, version 1
//! All integers little-endian.
//! 1. **Header**, 64 bytes:
//!    | bytes | field |
//!    |---|---|
//!    | 0..8 | magic `"TRND\0\r\n\x1a"` |
//!    | 8..12 | `u32` version (= 1) |
//!    | 12..16 | `u32` header size (= 64) |
//!    | 16..24 | `u64` base identity |
//!    | 24..32 | `u64` index offset (= 64) |
//!    | 32..40 | `u64` index size |
//!    | 40..48 | `u64` xxh3-64 of the index |
//!    | 48..56 | `u64` total file size |
//!    | 56..64 | `u64` xxh3-64 of bytes 0..56 |
//! 2. **Index**: UTF-8 JSON ([`Index`]): the tuned file's size and xxh3, the offset and size of its
//!    data section, the `prefix` (bytes `0..data_offset`: header and padding) and `suffix` (bytes
//!    after the data section: metadata, directory, section table) as payload references and the
//!    xxh3 of prefix ‖ suffix (checked after rebuilding, with every tensor's checksum), and per
//!    tuned tensor (directory order) its [`TensorInfo`], the checksum of the base tensor it needs
//!    (none for copies), the method (`chunks`, or `neuzip` with the NeuZip parameters to re-encode)
//!    and its payload reference `{offset, size, checksum}` (absolute offset, xxh3-64).
//! 3. **Payloads**, each inside the file after the index, not overlapping. A tensor payload:
//!    `u32 n_chunks, u32 0`, then `n_chunks` entries `{u32 kind, u32 data_len, u64 out_start,
//!    u64 out_end}`, then the chunks' data in order, each zero-padded to 4 bytes. The chunks'
//!    output ranges tile the target (the tensor's bytes; for `neuzip`, its decoded raw floats)
//!    in order; a chunk reads only the same byte range of the base. Kinds:
//!    * 0 **base**: the base's bytes (no data);
//!    * 1 **copy**: the bytes themselves;
//!    * 2 / 3 **FM-Delta 16 / 32-bit**: one symbol stream of the elements' symbols, then raw bits;
//!    * 4 **sparse bytes**: a change list over the range's bytes, value = `tuned − base mod 256`;
//!    * 5 **ternary codes**: whole rows of the codes region; a change list over the rows' trits
//!      (row-major, `cols` per row), value 0 = the next trit in the cycle −1 → 0 → +1 → −1, 1 = the other;
//!    * 6 **ggml blocks**: whole blocks; `u32` length of an FM-Delta-16 part over the blocks' f16
//!      scale fields (Q4_1: `d`, `m` per block), that part, then a sparse-bytes part over the
//!      blocks' other bytes (in block order).
//!
//!    A **symbol stream**: `u16 n_syms, u16 0`, `n_syms × u32 (sym | pdf << 16)` (symbols strictly
//!    increasing, pdfs ≥ 1 summing to 2048), `u32` final rANS state, `u32 n_words`, `n_words × u16`,
//!    zero padding to 4 (one lane of NeuZip's rANS: [`crate::neuzip::rans`]; the decoder checks that
//!    it ends on the initial state having read exactly its words). Symbol counts come from context.
//!    **Raw bits**: `u32` byte length, the bytes (LSB-first: a value of width `w` takes the next
//!    `w` bits), zero padding to 4. A **change list** over `n` elements: `u32 m` changes, a gap
//!    stream (symbol `k` for gap `g`, `2^k ≤ g + 1 < 2^(k+1)`), a value stream, raw bits (`k` low bits
//!    of `g + 1 − 2^k` per change).
//!
//! ## Validation
//! [`DeltaFile::from_bytes`] checks the header, the index checksum, every payload's range and
//! checksum and every chunk table (kinds allowed for the tensor's encoding, ranges tiling the
//! target, whole elements/rows/blocks), and that every byte outside header, index and payloads
//! is zero, before anything is decoded. Applying checks the base identity
//! and each base tensor's checksum first; every chunk decoder bounds-checks its stream; every
//! reconstructed tensor's checksum must equal the tuned one; a mismatch is a typed error, never a
//! silently wrong model.

mod coder;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::container::{TensorInfo, TernFile, SECTION_DATA, SECTION_DIRECTORY, SECTION_METADATA};
use crate::dtype::{FloatType, TernaryLayout};
use crate::encoding::{element_count, rows_cols, Encoding};
use crate::error::{FormatError, Result};
use crate::{ggml, neuzip, ternary};
use coder::{Cursor, Width, CODEC};

/// Magic bytes of a `.ternd` file.
pub const MAGIC: [u8; 8] = *b"TRND\0\r\n\x1a";
/// The delta format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Size of the fixed header.
pub const HEADER_SIZE: usize = 64;
/// Elements per FM-Delta chunk.
pub const FM_CHUNK_ELEMS: usize = 1 << 16;
/// Elements (trits or bytes) per sparse chunk.
pub const SPARSE_CHUNK_ELEMS: usize = 1 << 20;
/// ggml blocks per chunk.
pub const GGML_CHUNK_BLOCKS: usize = 4096;

const K_BASE: u32 = 0;
const K_COPY: u32 = 1;
const K_FM16: u32 = 2;
const K_FM32: u32 = 3;
const K_SPARSE: u32 = 4;
const K_TERNARY: u32 = 5;
const K_GGML: u32 = 6;
const CHUNK_ENTRY: usize = 24;

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt(CODEC, detail)
}
fn malformed(detail: impl Into<String>) -> FormatError {
    FormatError::malformed(".ternd delta", detail)
}

// ------------------------------------------------------------------------------------------------
// Index

/// A byte range of the delta file with its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    pub offset: u64,
    pub size: u64,
    pub checksum: u64,
}

/// How a tensor is reconstructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Method {
    /// The chunks rebuild the tensor's bytes.
    Chunks,
    /// The chunks rebuild the decoded floats (FM-Delta against the decoded base), which are then
    /// NeuZip-encoded with these parameters (NeuZip encoding is deterministic).
    #[serde(rename = "neuzip")]
    NeuZip {
        lanes: u32,
        block_symbols: u32,
        /// NeuZip layout of the rebuilt blob (absent in the index = 1, so layout-1 deltas are
        /// written exactly as before layout 2 existed).
        #[serde(default = "layout_one", skip_serializing_if = "is_layout_one")]
        layout: u8,
    },
}

fn layout_one() -> u8 {
    1
}

fn is_layout_one(l: &u8) -> bool {
    *l == 1
}

/// NeuZip-encode in layout `layout` (1 or 2) with explicit parameters.
fn neuzip_encode(
    layout: u8,
    dtype: FloatType,
    mantissa_bits: u8,
    raw: &[u8],
    row_len: usize,
    p: neuzip::Params,
) -> Result<Vec<u8>> {
    match layout {
        1 => neuzip::encode_with(dtype, mantissa_bits, raw, row_len, p),
        2 => neuzip::encode_v2_with(dtype, mantissa_bits, raw, row_len, p),
        l => Err(malformed(format!("neuzip record of layout {l}"))),
    }
}

/// One tuned tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The tuned tensor's directory entry (offset relative to the data section).
    pub info: TensorInfo,
    /// Checksum of the base tensor of the same name this record was made against (`None`: it
    /// needs no base, every chunk is a copy).
    pub base_checksum: Option<u64>,
    pub method: Method,
    pub payload: Blob,
}

/// The delta's index (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// Size and xxh3-64 of the whole tuned `.tern` file.
    pub tuned_size: u64,
    pub tuned_hash: u64,
    /// The tuned file's data section.
    pub data_offset: u64,
    pub data_size: u64,
    /// Tuned bytes `0..data_offset`.
    pub prefix: Blob,
    /// Tuned bytes `data_offset + data_size..tuned_size`.
    pub suffix: Blob,
    /// xxh3-64 of the tuned file's prefix followed by its suffix: with the tensors' checksums, an
    /// end-to-end check of the rebuilt image that does not hash the whole file.
    pub skeleton_hash: u64,
    pub tensors: Vec<Record>,
}

/// The identity of a base: xxh3-64 of its metadata section followed by its directory section
/// (see the module documentation for why this names the whole content).
pub fn base_identity(base: &TernFile) -> Result<u64> {
    let b = base.file_bytes();
    let mut h = Xxh3::new();
    for kind in [SECTION_METADATA, SECTION_DIRECTORY] {
        let s = base
            .sections()
            .iter()
            .find(|s| s.kind == kind)
            .ok_or_else(|| FormatError::malformed("base file", format!("no section {kind}")))?;
        let r = usize_of(s.offset)?..usize_of(s.offset.saturating_add(s.size))?;
        h.update(
            b.get(r)
                .ok_or_else(|| FormatError::malformed("base file", "section out of range"))?,
        );
    }
    Ok(h.digest())
}

fn skeleton_hash(prefix: &[u8], suffix: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(prefix);
    h.update(suffix);
    h.digest()
}

fn usize_of(x: u64) -> Result<usize> {
    usize::try_from(x).map_err(|_| FormatError::out_of_range("delta", format!("{x} too large")))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

// ------------------------------------------------------------------------------------------------
// Per-encoding context

/// What a chunk decoder needs to know about the tensor.
#[derive(Debug, Clone, Copy)]
enum Ctx {
    /// Raw floats or decoded NeuZip floats of this width.
    Float(Width),
    Ternary {
        layout: TernaryLayout,
        cols: usize,
        row_bytes: usize,
        codes_len: usize,
        scale: Width,
    },
    Ggml(GgmlLayout),
    Other,
}

#[derive(Debug, Clone, Copy)]
struct GgmlLayout {
    block_bytes: usize,
    /// Byte offsets of the f16 scale fields in a block (1 or 2 of them).
    scales: [usize; 2],
    n_scales: usize,
}

impl GgmlLayout {
    fn of(e: &Encoding) -> Option<Self> {
        use std::mem::offset_of;
        let bt = e.ggml_block()?;
        let (scales, n) = match bt {
            ggml::BlockType::Q8_0 => ([offset_of!(ggml::BlockQ8_0, d), 0], 1),
            ggml::BlockType::Q4_0 => ([offset_of!(ggml::BlockQ4_0, d), 0], 1),
            ggml::BlockType::Q4_1 => (
                [
                    offset_of!(ggml::BlockQ4_1, d),
                    offset_of!(ggml::BlockQ4_1, m),
                ],
                2,
            ),
            ggml::BlockType::Q6K => ([offset_of!(ggml::BlockQ6K, d), 0], 1),
            // not a `.tern` encoding (re-laid out as ternary)
            ggml::BlockType::Tq1_0 | ggml::BlockType::Tq2_0 => return None,
        };
        Some(GgmlLayout {
            block_bytes: bt.block_bytes(),
            scales,
            n_scales: n,
        })
    }
    fn is_scale_byte(&self, o: usize) -> bool {
        self.scales[..self.n_scales]
            .iter()
            .any(|&s| o == s || o == s + 1)
    }
    /// Split whole blocks into (scale words as little-endian u16 bytes, code bytes).
    fn split(&self, b: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut sc = Vec::with_capacity(b.len() / self.block_bytes * 2 * self.n_scales);
        let mut codes = Vec::with_capacity(b.len());
        for blk in b.chunks_exact(self.block_bytes) {
            for &s in &self.scales[..self.n_scales] {
                sc.extend_from_slice(&blk[s..s + 2]);
            }
            for (o, &x) in blk.iter().enumerate() {
                if !self.is_scale_byte(o) {
                    codes.push(x);
                }
            }
        }
        (sc, codes)
    }
}

fn float_width(t: FloatType) -> Width {
    match t {
        FloatType::F32 => Width::W32,
        FloatType::F16 | FloatType::Bf16 => Width::W16,
    }
}

fn ctx_of(info: &TensorInfo, method: Method) -> Result<Ctx> {
    if let Method::NeuZip { .. } = method {
        return match info.encoding {
            Encoding::NeuZip { dtype, .. } => Ok(Ctx::Float(float_width(dtype))),
            _ => Err(malformed(format!(
                "tensor {:?}: method neuzip on a {} tensor",
                info.name,
                info.encoding.name()
            ))),
        };
    }
    Ok(match &info.encoding {
        Encoding::F32 => Ctx::Float(Width::W32),
        Encoding::F16 | Encoding::Bf16 => Ctx::Float(Width::W16),
        Encoding::Ternary {
            layout, scale_type, ..
        } => {
            let (rows, cols) = rows_cols(&info.shape)?;
            Ctx::Ternary {
                layout: *layout,
                cols: usize_of(cols)?,
                row_bytes: usize_of(ternary::codes_bytes(*layout, 1, cols)?)?,
                codes_len: usize_of(ternary::codes_bytes(*layout, rows, cols)?)?,
                scale: float_width(*scale_type),
            }
        }
        e => GgmlLayout::of(e).map_or(Ctx::Other, Ctx::Ggml),
    })
}

// ------------------------------------------------------------------------------------------------
// Chunk tables

#[derive(Debug, Clone)]
struct Chunk {
    kind: u32,
    /// Range of the chunk's data in the delta file.
    data: Range<usize>,
    /// Range of the target it writes.
    out: Range<usize>,
}

/// Parse and validate a payload's chunk table against the record's target.
fn parse_chunks(
    file: &[u8],
    payload: Range<usize>,
    target_len: usize,
    ctx: Ctx,
    has_base: bool,
    name: &str,
) -> Result<Vec<Chunk>> {
    let p = file
        .get(payload.clone())
        .ok_or_else(|| malformed("payload out of range"))?;
    let mut c = Cursor::new(p);
    let n = c.u32("chunk count")? as usize;
    if c.u32("chunk table")? != 0 {
        return Err(corrupt(format!("tensor {name:?}: reserved field not zero")));
    }
    if n.checked_mul(CHUNK_ENTRY).is_none_or(|b| b > p.len()) {
        return Err(corrupt(format!(
            "tensor {name:?}: {n} chunks do not fit the payload"
        )));
    }
    let mut chunks = Vec::with_capacity(n);
    let mut heads = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = c.u32("chunk entry")?;
        let len = c.u32("chunk entry")? as usize;
        let s = c.u64("chunk entry")?;
        let e = c.u64("chunk entry")?;
        heads.push((kind, len, s, e));
    }
    let mut at = 8 + n * CHUNK_ENTRY; // ok: ≤ p.len() checked above
    let mut expect = 0u64;
    for (i, (kind, len, s, e)) in heads.into_iter().enumerate() {
        let bad = |d: String| corrupt(format!("tensor {name:?}, chunk {i}: {d}"));
        if s != expect || e < s || e > target_len as u64 {
            return Err(bad(format!(
                "output range {s}..{e} does not continue at {expect} within {target_len}"
            )));
        }
        expect = e;
        let out = s as usize..e as usize; // ok: ≤ target_len, a usize
        let olen = out.len();
        let end = at
            .checked_add(len)
            .filter(|&x| x <= p.len())
            .ok_or_else(|| bad(format!("data of {len} bytes beyond the payload")))?;
        let pad_end = end.div_ceil(4) * 4;
        if p.get(end..pad_end.min(p.len()))
            .is_some_and(|z| z.iter().any(|&x| x != 0))
        {
            return Err(bad("non-zero padding".into()));
        }
        let whole = |unit: usize| unit > 0 && out.start % unit == 0 && olen % unit == 0;
        let ok = match (kind, ctx) {
            (K_BASE, _) => len == 0 && has_base,
            (K_COPY, _) => len == olen,
            (K_FM16, _) => has_base && whole(2),
            (K_FM32, _) => has_base && whole(4),
            (K_SPARSE, _) => has_base,
            (
                K_TERNARY,
                Ctx::Ternary {
                    row_bytes,
                    codes_len,
                    ..
                },
            ) => has_base && whole(row_bytes) && out.end <= codes_len,
            (K_GGML, Ctx::Ggml(g)) => has_base && whole(g.block_bytes),
            _ => false,
        };
        if !ok {
            return Err(bad(format!(
                "kind {kind} ({len} bytes) does not fit output {s}..{e} of this tensor{}",
                if has_base { "" } else { " (no base tensor)" }
            )));
        }
        chunks.push(Chunk {
            kind,
            data: payload.start + at..payload.start + end,
            out,
        });
        at = pad_end;
    }
    if expect != target_len as u64 {
        return Err(corrupt(format!(
            "tensor {name:?}: chunks cover {expect} of {target_len} bytes"
        )));
    }
    if at != p.len() {
        return Err(corrupt(format!(
            "tensor {name:?}: payload has {} bytes after its chunks",
            p.len().saturating_sub(at)
        )));
    }
    Ok(chunks)
}

// ------------------------------------------------------------------------------------------------
// Chunk codecs

/// The code (t + 1, 0..=2) of element `j` of a packed ternary row; `None` for an invalid code.
fn trit_code(layout: TernaryLayout, row: &[u8], j: usize) -> Option<u8> {
    match layout {
        TernaryLayout::Bits2 => {
            let c = (row.get(j / 4)? >> (2 * (j % 4))) & 3;
            (c < 3).then_some(c)
        }
        TernaryLayout::Base3 => {
            const POW3: [u8; 5] = [1, 3, 9, 27, 81];
            let q = row.get(j / 5)?.wrapping_mul(POW3[j % 5]);
            Some(((u16::from(q) * 3) >> 8) as u8) // ok: < 3
        }
    }
}

/// Set element `j` of a packed ternary row to code `c` (0..=2).
fn set_trit_code(layout: TernaryLayout, row: &mut [u8], j: usize, c: u8) -> Result<()> {
    match layout {
        TernaryLayout::Bits2 => {
            let b = row
                .get_mut(j / 4)
                .ok_or_else(|| corrupt("ternary change outside its row"))?;
            let sh = 2 * (j % 4);
            *b = (*b & !(3 << sh)) | (c << sh);
        }
        TernaryLayout::Base3 => {
            let old = *row
                .get(j / 5)
                .ok_or_else(|| corrupt("ternary change outside its row"))?;
            let mut d = [0u8; 5];
            for (n, dn) in d.iter_mut().enumerate() {
                *dn = trit_code(layout, &[old], n).unwrap_or(1);
            }
            d[j % 5] = c;
            let v = d.iter().fold(0u32, |acc, &x| acc * 3 + u32::from(x));
            if let Some(b) = row.get_mut(j / 5) {
                *b = (v * 256).div_ceil(243) as u8; // ok: v ≤ 242
            }
        }
    }
    Ok(())
}

/// Encode one chunk of `base` → `tuned` (same range) with `kind`; `None` when the codec cannot
/// express it (e.g. invalid ternary codes).
fn encode_chunk(kind: u32, ctx: Ctx, base: &[u8], tuned: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match (kind, ctx) {
        (K_FM16, _) => coder::fm_encode(Width::W16, base, tuned, &mut out),
        (K_FM32, _) => coder::fm_encode(Width::W32, base, tuned, &mut out),
        (K_SPARSE, _) => {
            let ch: Vec<(usize, u8)> = base
                .iter()
                .zip(tuned)
                .enumerate()
                .filter(|(_, (b, t))| b != t)
                .map(|(i, (b, t))| (i, t.wrapping_sub(*b)))
                .collect();
            coder::sparse_encode(&ch, &mut out);
        }
        (
            K_TERNARY,
            Ctx::Ternary {
                layout,
                cols,
                row_bytes,
                ..
            },
        ) => {
            let mut ch = Vec::new();
            for (r, (rb, rt)) in base
                .chunks_exact(row_bytes)
                .zip(tuned.chunks_exact(row_bytes))
                .enumerate()
            {
                if rb == rt {
                    continue;
                }
                for j in 0..cols {
                    let b = trit_code(layout, rb, j)?;
                    let t = trit_code(layout, rt, j)?;
                    if b != t {
                        ch.push((r * cols + j, u8::from(t != (b + 1) % 3)));
                    }
                }
            }
            coder::sparse_encode(&ch, &mut out);
        }
        (K_GGML, Ctx::Ggml(g)) => {
            let (sb, cb) = g.split(base);
            let (st, ct) = g.split(tuned);
            let mut fm = Vec::new();
            coder::fm_encode(Width::W16, &sb, &st, &mut fm);
            out.extend_from_slice(&(fm.len() as u32).to_le_bytes()); // ok: small chunk
            out.extend_from_slice(&fm);
            let ch: Vec<(usize, u8)> = cb
                .iter()
                .zip(&ct)
                .enumerate()
                .filter(|(_, (b, t))| b != t)
                .map(|(i, (b, t))| (i, t.wrapping_sub(*b)))
                .collect();
            coder::sparse_encode(&ch, &mut out);
        }
        _ => return None,
    }
    Some(out)
}

/// Decode one chunk into `out`, reading the same range of the base.
fn decode_chunk(kind: u32, ctx: Ctx, data: &[u8], base: &[u8], out: &mut [u8]) -> Result<()> {
    let mut c = Cursor::new(data);
    let need_base = kind != K_COPY;
    if need_base && base.len() != out.len() {
        return Err(corrupt("chunk range outside the base tensor"));
    }
    match (kind, ctx) {
        (K_BASE, _) => out.copy_from_slice(base),
        (K_COPY, _) => {
            out.copy_from_slice(c.take(out.len(), "copy")?);
        }
        (K_FM16, _) => coder::fm_decode(Width::W16, &mut c, base, out)?,
        (K_FM32, _) => coder::fm_decode(Width::W32, &mut c, base, out)?,
        (K_SPARSE, _) => {
            out.copy_from_slice(base);
            let n = out.len();
            coder::sparse_decode(&mut c, n, 256, |i, v| {
                let o = out
                    .get_mut(i)
                    .ok_or_else(|| corrupt("sparse change outside the chunk"))?;
                if v == 0 {
                    return Err(corrupt("sparse change of zero"));
                }
                *o = o.wrapping_add(v);
                Ok(())
            })?;
        }
        (
            K_TERNARY,
            Ctx::Ternary {
                layout,
                cols,
                row_bytes,
                ..
            },
        ) => {
            out.copy_from_slice(base);
            let rows = out.len() / row_bytes.max(1);
            let n = rows
                .checked_mul(cols)
                .ok_or_else(|| corrupt("ternary chunk too large"))?;
            coder::sparse_decode(&mut c, n, 2, |i, v| {
                let (r, j) = (i / cols, i % cols); // ok: cols > 0 since n > i
                let row = out
                    .get_mut(r * row_bytes..(r + 1) * row_bytes)
                    .ok_or_else(|| corrupt("ternary change outside the chunk"))?;
                let old = trit_code(layout, row, j)
                    .ok_or_else(|| corrupt("ternary change on an invalid base code"))?;
                let new = if v == 0 { (old + 1) % 3 } else { (old + 2) % 3 };
                set_trit_code(layout, row, j, new)
            })?;
        }
        (K_GGML, Ctx::Ggml(g)) => {
            let fm_len = c.u32("ggml scales length")? as usize;
            let fm = c.take(fm_len, "ggml scales")?;
            let (sb, cb) = g.split(base);
            let mut sc = vec![0u8; sb.len()];
            let mut fc = Cursor::new(fm);
            coder::fm_decode(Width::W16, &mut fc, &sb, &mut sc)?;
            fc.expect_done("ggml scales")?;
            let mut codes = cb;
            let n = codes.len();
            coder::sparse_decode(&mut c, n, 256, |i, v| {
                let o = codes
                    .get_mut(i)
                    .ok_or_else(|| corrupt("ggml change outside the chunk"))?;
                if v == 0 {
                    return Err(corrupt("sparse change of zero"));
                }
                *o = o.wrapping_add(v);
                Ok(())
            })?;
            // Interleave scales and codes back into blocks.
            let (mut si, mut ci) = (sc.iter(), codes.iter());
            for blk in out.chunks_exact_mut(g.block_bytes) {
                for &s in &g.scales[..g.n_scales] {
                    for k in 0..2 {
                        blk[s + k] = *si.next().ok_or_else(|| corrupt("ggml scales short"))?;
                    }
                }
                for (o, x) in blk.iter_mut().enumerate() {
                    if !g.is_scale_byte(o) {
                        *x = *ci.next().ok_or_else(|| corrupt("ggml codes short"))?;
                    }
                }
            }
        }
        _ => return Err(corrupt(format!("chunk kind {kind} on this tensor"))),
    }
    c.expect_done("chunk")
}

// ------------------------------------------------------------------------------------------------
// Parallel work

/// Run `f` on every item with `threads` workers (std only; the format crate has no rayon). Returns
/// the results in order, or the first error.
fn par_map<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let n = items.len();
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        return items.into_iter().map(f).collect();
    }
    let queue = Mutex::new(items.into_iter().enumerate());
    let results: Mutex<Vec<Option<Result<R>>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = match queue.lock() {
                    Ok(mut q) => q.next(),
                    Err(_) => None,
                };
                let Some((i, item)) = next else { break };
                let r = f(item);
                let failed = r.is_err();
                if let Ok(mut res) = results.lock() {
                    if let Some(slot) = res.get_mut(i) {
                        *slot = Some(r);
                    }
                }
                if failed {
                    break;
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| FormatError::InvalidArgument("a delta worker panicked".into()))?;
    let mut out = Vec::with_capacity(n);
    for r in results {
        match r {
            Some(r) => out.push(r?),
            None => {
                return Err(FormatError::InvalidArgument(
                    "a delta worker stopped early".into(),
                ))
            }
        }
    }
    Ok(out)
}

/// Worker threads to use by default: the machine's parallelism.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

// ------------------------------------------------------------------------------------------------
// Creating a delta

/// What [`create`] did for one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorReport {
    pub name: String,
    pub encoding: String,
    /// "base", "copy", "fm-delta", "ternary", "ggml", "neuzip", "sparse-bytes" (the main chunk kind).
    pub method: String,
    pub tuned_bytes: u64,
    pub delta_bytes: u64,
}

/// What [`create`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateReport {
    pub tensors: Vec<TensorReport>,
    pub delta_bytes: u64,
    pub tuned_bytes: u64,
}

/// Chunk plan for one target: `(kind, out range)`.
fn plan_chunks(ctx: Ctx, target_len: usize) -> Vec<(u32, Range<usize>)> {
    let cut = |kind: u32, range: Range<usize>, step: usize| -> Vec<(u32, Range<usize>)> {
        let step = step.max(1);
        let mut v = Vec::new();
        let mut s = range.start;
        while s < range.end {
            let e = (s + step).min(range.end);
            v.push((kind, s..e));
            s = e;
        }
        v
    };
    match ctx {
        Ctx::Float(Width::W16) => cut(K_FM16, 0..target_len, FM_CHUNK_ELEMS * 2),
        Ctx::Float(Width::W32) => cut(K_FM32, 0..target_len, FM_CHUNK_ELEMS * 4),
        Ctx::Ternary {
            cols,
            row_bytes,
            codes_len,
            scale,
            ..
        } => {
            let rows_per = (SPARSE_CHUNK_ELEMS / cols.max(1)).max(1);
            let mut v = cut(K_TERNARY, 0..codes_len, rows_per * row_bytes);
            let (k, w) = match scale {
                Width::W16 => (K_FM16, 2),
                Width::W32 => (K_FM32, 4),
            };
            v.extend(cut(k, codes_len..target_len, FM_CHUNK_ELEMS * w));
            v
        }
        Ctx::Ggml(g) => cut(K_GGML, 0..target_len, GGML_CHUNK_BLOCKS * g.block_bytes),
        Ctx::Other => cut(K_SPARSE, 0..target_len, SPARSE_CHUNK_ELEMS),
    }
}

fn sparse_plan(target_len: usize) -> Vec<(u32, Range<usize>)> {
    plan_chunks(Ctx::Other, target_len)
}

/// Encode a payload for `plan` (each chunk falls back to base or copy when that is no larger).
fn encode_payload(
    plan: Vec<(u32, Range<usize>)>,
    ctx: Ctx,
    base: &[u8],
    tuned: &[u8],
    threads: usize,
) -> Result<Option<Vec<u8>>> {
    let encoded = par_map(plan, threads, |(kind, r)| {
        let (b, t) = match (base.get(r.clone()), tuned.get(r.clone())) {
            (Some(b), Some(t)) => (b, t),
            _ => return Ok(None),
        };
        if b == t {
            return Ok(Some((K_BASE, r, Vec::new())));
        }
        Ok(Some(match encode_chunk(kind, ctx, b, t) {
            Some(d) if d.len() < t.len() => (kind, r, d),
            _ => (K_COPY, r, t.to_vec()),
        }))
    })?;
    let Some(chunks) = encoded.into_iter().collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    Ok(Some(assemble(&chunks)))
}

fn assemble(chunks: &[(u32, Range<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(chunks.len() as u32).to_le_bytes()); // ok: chunk count < 2^32
    out.extend_from_slice(&0u32.to_le_bytes());
    for (kind, r, d) in chunks {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(d.len() as u32).to_le_bytes()); // ok: chunks are < 4 GiB
        out.extend_from_slice(&(r.start as u64).to_le_bytes());
        out.extend_from_slice(&(r.end as u64).to_le_bytes());
    }
    for (_, _, d) in chunks {
        out.extend_from_slice(d);
        coder::pad4(&mut out);
    }
    out
}

fn copy_payload(tuned: &[u8]) -> Vec<u8> {
    if tuned.is_empty() {
        return assemble(&[]);
    }
    assemble(&[(K_COPY, 0..tuned.len(), tuned.to_vec())])
}

/// NeuZip parameters that re-encode `raw` to exactly `blob`, if any.
fn neuzip_params(
    dtype: FloatType,
    mantissa_bits: u8,
    raw: &[u8],
    row_len: usize,
    blob: &[u8],
) -> Option<(neuzip::Params, u8)> {
    let plan = neuzip::Plan::parse(blob).ok()?;
    let n = (raw.len() / dtype.size()) as u64;
    let auto = if plan.version >= 2 {
        neuzip::Params::auto_v2(n, row_len as u64)
    } else {
        neuzip::Params::auto(n, row_len as u64)
    };
    let candidates = [
        auto,
        neuzip::Params {
            lanes: plan.lanes,
            block_symbols: plan.block_len,
        },
        neuzip::Params {
            lanes: plan.lanes,
            block_symbols: neuzip::DEFAULT_BLOCK_SYMBOLS,
        },
    ];
    candidates
        .into_iter()
        .find(|&p| {
            neuzip_encode(plan.version, dtype, mantissa_bits, raw, row_len, p)
                .is_ok_and(|b| b == blob)
        })
        .map(|p| (p, plan.version))
}

fn decode_neuzip_raw(info: &TensorInfo, bytes: &[u8]) -> Result<Vec<u8>> {
    if let Encoding::NeuZip {
        dtype,
        mantissa_bits,
    } = info.encoding
    {
        let plan = neuzip::Plan::parse(bytes)?;
        plan.check_matches(dtype, mantissa_bits)?;
        let n = element_count(&info.shape)?;
        let row_len = info.shape.last().copied().unwrap_or(1).max(1);
        if plan.n_elements != n || plan.row_len != row_len {
            return Err(FormatError::malformed(
                format!("tensor {:?}", info.name),
                "NeuZip blob does not match the tensor's shape",
            ));
        }
        neuzip::decode(bytes)
    } else {
        Err(FormatError::InvalidArgument(format!(
            "tensor {:?} is not NeuZip",
            info.name
        )))
    }
}

/// Encode one tuned tensor against its base (if any). Returns (record without payload offset,
/// payload bytes, method name).
fn encode_tensor(
    info: &TensorInfo,
    tuned: &[u8],
    base: Option<(&TensorInfo, &[u8])>,
    threads: usize,
) -> Result<(Option<u64>, Method, Vec<u8>, &'static str)> {
    let copy = || Ok((None, Method::Chunks, copy_payload(tuned), "copy"));
    let Some((binfo, bbytes)) = base.filter(|(b, _)| {
        b.encoding == info.encoding && b.shape == info.shape && b.size == info.size
    }) else {
        return copy();
    };
    let base_ck = Some(binfo.checksum);
    if bbytes == tuned {
        return Ok((
            base_ck,
            Method::Chunks,
            assemble(&[(K_BASE, 0..tuned.len(), Vec::new())]),
            "base",
        ));
    }
    // NeuZip: FM-Delta on the decoded floats, re-encoded on apply.
    if let Encoding::NeuZip {
        dtype,
        mantissa_bits,
    } = info.encoding
    {
        let (Ok(rb), Ok(rt)) = (
            decode_neuzip_raw(binfo, bbytes),
            decode_neuzip_raw(info, tuned),
        ) else {
            return copy();
        };
        let row_len = usize_of(info.shape.last().copied().unwrap_or(1).max(1))?;
        if let Some((p, layout)) = neuzip_params(dtype, mantissa_bits, &rt, row_len, tuned) {
            let method = Method::NeuZip {
                lanes: p.lanes,
                block_symbols: p.block_symbols,
                layout,
            };
            let ctx = Ctx::Float(float_width(dtype));
            if let Some(payload) =
                encode_payload(plan_chunks(ctx, rt.len()), ctx, &rb, &rt, threads)?
            {
                if payload.len() < tuned.len() {
                    return Ok((base_ck, method, payload, "neuzip"));
                }
            }
        }
        return copy();
    }
    let ctx = ctx_of(info, Method::Chunks)?;
    let name = match ctx {
        Ctx::Float(_) => "fm-delta",
        Ctx::Ternary { .. } => "ternary",
        Ctx::Ggml(_) => "ggml",
        Ctx::Other => "sparse-bytes",
    };
    let attempts = [
        (plan_chunks(ctx, tuned.len()), name),
        (sparse_plan(tuned.len()), "sparse-bytes"),
    ];
    for (plan, label) in attempts {
        let Some(payload) = encode_payload(plan, ctx, bbytes, tuned, threads)? else {
            continue;
        };
        if payload.len() >= tuned.len() {
            continue;
        }
        // Decode what we encoded: the codec must reproduce the tensor exactly.
        let chunks = parse_chunks(
            &payload,
            0..payload.len(),
            tuned.len(),
            ctx,
            true,
            &info.name,
        )?;
        let mut out = vec![0u8; tuned.len()];
        let ok = decode_chunks(&payload, &chunks, ctx, bbytes, &mut out, threads).is_ok()
            && out == tuned;
        if ok {
            return Ok((base_ck, Method::Chunks, payload, label));
        }
        log::debug!(
            "tensor {:?}: {label} does not reproduce it, trying the next",
            info.name
        );
    }
    copy()
}

/// Make a delta that turns `base` into `tuned`. Returns the `.ternd` bytes and a report.
pub fn create(
    base: &TernFile,
    tuned: &TernFile,
    threads: usize,
) -> Result<(Vec<u8>, CreateReport)> {
    let tb = tuned.file_bytes();
    let data = tuned
        .sections()
        .iter()
        .find(|s| s.kind == SECTION_DATA)
        .copied()
        .ok_or_else(|| FormatError::malformed("tuned file", "no data section"))?;
    let data_end = data.offset.saturating_add(data.size);
    let prefix = tb
        .get(..usize_of(data.offset)?)
        .ok_or_else(|| FormatError::malformed("tuned file", "data section out of range"))?;
    let suffix = tb
        .get(usize_of(data_end)?..)
        .ok_or_else(|| FormatError::malformed("tuned file", "data section out of range"))?;
    let mut payloads: Vec<Vec<u8>> = vec![prefix.to_vec(), suffix.to_vec()];
    let mut records = Vec::new();
    let mut report = Vec::new();
    for (i, info) in tuned.tensors().iter().enumerate() {
        let tv = tuned.tensor_at(i)?;
        let bv = match base.index_of(&info.name) {
            Some(j) => Some(base.tensor_at(j)?),
            None => None,
        };
        let (base_checksum, method, payload, label) =
            encode_tensor(info, tv.bytes, bv.map(|v| (v.info, v.bytes)), threads)?;
        report.push(TensorReport {
            name: info.name.clone(),
            encoding: info.encoding.name(),
            method: label.to_string(),
            tuned_bytes: info.size,
            delta_bytes: payload.len() as u64,
        });
        records.push(Record {
            info: info.clone(),
            base_checksum,
            method,
            payload: Blob {
                offset: 0,
                size: payload.len() as u64,
                checksum: xxh3_64(&payload),
            },
        });
        payloads.push(payload);
    }
    let blob = |p: &Vec<u8>| Blob {
        offset: 0,
        size: p.len() as u64,
        checksum: xxh3_64(p),
    };
    let mut index = Index {
        tuned_size: tb.len() as u64,
        tuned_hash: xxh3_64(tb),
        data_offset: data.offset,
        data_size: data.size,
        prefix: blob(&payloads[0]),
        suffix: blob(&payloads[1]),
        skeleton_hash: skeleton_hash(&payloads[0], &payloads[1]),
        tensors: records,
    };
    // The index's length depends on the offsets it holds: fix the offsets with a generous index
    // size estimate, then pad the index to that size.
    let est = serde_json::to_vec(&index)
        .map_err(|e| FormatError::InvalidArgument(format!("delta index: {e}")))?
        .len()
        + 32 * (index.tensors.len() + 2)
        + 64;
    let mut at = (HEADER_SIZE + est).div_ceil(8) as u64 * 8;
    let mut place = |b: &mut Blob| {
        b.offset = at;
        at = (at + b.size).div_ceil(8) * 8;
    };
    place(&mut index.prefix);
    place(&mut index.suffix);
    for r in &mut index.tensors {
        place(&mut r.payload);
    }
    let mut json = serde_json::to_vec(&index)
        .map_err(|e| FormatError::InvalidArgument(format!("delta index: {e}")))?;
    if json.len() > est {
        return Err(FormatError::InvalidArgument(
            "delta index estimate too small".into(),
        ));
    }
    json.resize(est, b' '); // JSON allows trailing whitespace
    let mut out = vec![0u8; HEADER_SIZE];
    out.extend_from_slice(&json);
    let blobs = std::iter::once(&index.prefix)
        .chain(std::iter::once(&index.suffix))
        .chain(index.tensors.iter().map(|r| &r.payload));
    for (b, p) in blobs.zip(&payloads) {
        out.resize(usize_of(b.offset)?, 0);
        out.extend_from_slice(p);
    }
    let total = out.len() as u64;
    let mut h = [0u8; HEADER_SIZE];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
    h[16..24].copy_from_slice(&base_identity(base)?.to_le_bytes());
    h[24..32].copy_from_slice(&(HEADER_SIZE as u64).to_le_bytes());
    h[32..40].copy_from_slice(&(json.len() as u64).to_le_bytes());
    h[40..48].copy_from_slice(&xxh3_64(&json).to_le_bytes());
    h[48..56].copy_from_slice(&total.to_le_bytes());
    let hh = xxh3_64(&h[0..56]);
    h[56..64].copy_from_slice(&hh.to_le_bytes());
    out[..HEADER_SIZE].copy_from_slice(&h);
    let rep = CreateReport {
        delta_bytes: total,
        tuned_bytes: tb.len() as u64,
        tensors: report,
    };
    Ok((out, rep))
}

/// [`create`] from and to paths.
pub fn create_file(base: &Path, tuned: &Path, out: &Path, threads: usize) -> Result<CreateReport> {
    let base = TernFile::open(base)?;
    let tuned = TernFile::open(tuned)?;
    let (bytes, rep) = create(&base, &tuned, threads)?;
    std::fs::write(out, bytes)?;
    Ok(rep)
}

// ------------------------------------------------------------------------------------------------
// Reading and applying

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

/// An open, fully validated delta (every checksum and chunk table checked).
pub struct DeltaFile {
    data: Backing,
    base_id: u64,
    index: Index,
    /// Parsed chunk tables, one per record.
    chunks: Vec<Vec<Chunk>>,
}

impl std::fmt::Debug for DeltaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaFile")
            .field("base_id", &self.base_id)
            .field("tensors", &self.index.tensors.len())
            .finish()
    }
}

impl DeltaFile {
    /// Map and validate a `.ternd` file.
    pub fn open(path: &Path) -> Result<Self> {
        let f = std::fs::File::open(path)?;
        // SAFETY: read-only mapping; tern never writes a file it has mapped (same caveat as TernFile).
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Self::from_backing(Backing::Mmap(map))
    }

    /// Validate a delta held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }

    fn from_backing(data: Backing) -> Result<Self> {
        let b: &[u8] = match &data {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        };
        let len = b.len() as u64;
        let trunc = |what: &str, start: u64, end: u64| FormatError::Truncated {
            what: what.into(),
            start,
            end,
            len,
        };
        if b.len() < 8 || b[0..8] != MAGIC {
            if b.len() < 8 && MAGIC.starts_with(b) {
                return Err(trunc("delta header", 0, HEADER_SIZE as u64));
            }
            if b.len() >= 8 && b[0..8] == crate::container::MAGIC {
                return Err(FormatError::BadMagic {
                    remedy: "this is a .tern model, not a .ternd delta (pass it as the base)",
                });
            }
            return Err(FormatError::BadMagic {
                remedy: "expected a .ternd delta written by `tern delta create`",
            });
        }
        if b.len() < HEADER_SIZE {
            return Err(trunc("delta header", 0, HEADER_SIZE as u64));
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let stored = u64_at(b, 56);
        let computed = xxh3_64(&b[0..56]);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "delta header".into(),
                stored,
                computed,
            });
        }
        let hsize = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        let (base_id, ioff, isize, ihash, fsize) = (
            u64_at(b, 16),
            u64_at(b, 24),
            u64_at(b, 32),
            u64_at(b, 40),
            u64_at(b, 48),
        );
        if fsize > len {
            return Err(trunc("delta", 0, fsize));
        }
        if fsize != len || hsize as usize != HEADER_SIZE || ioff != HEADER_SIZE as u64 {
            return Err(malformed(format!(
                "header: size {hsize}, index at {ioff}, file size {fsize} (file has {len})"
            )));
        }
        let iend = ioff
            .checked_add(isize)
            .filter(|&e| e <= len)
            .ok_or_else(|| trunc("delta index", ioff, ioff.saturating_add(isize)))?;
        let ib = &b[ioff as usize..iend as usize]; // ok: within len
        let computed = xxh3_64(ib);
        if computed != ihash {
            return Err(FormatError::Checksum {
                what: "delta index".into(),
                stored: ihash,
                computed,
            });
        }
        let index: Index =
            serde_json::from_slice(ib).map_err(|e| malformed(format!("index: {e}")))?;
        // Payloads: in the file after the index, not overlapping, checksums right.
        let mut ranges: Vec<(u64, u64, String)> = Vec::new();
        let mut check_blob = |blob: &Blob, what: String| -> Result<Range<usize>> {
            let end = blob
                .offset
                .checked_add(blob.size)
                .ok_or_else(|| malformed(format!("{what}: range overflows")))?;
            if blob.offset < iend || end > len {
                return Err(if end > len {
                    trunc(&what, blob.offset, end)
                } else {
                    malformed(format!(
                        "{what}: bytes {}..{end} overlap the index",
                        blob.offset
                    ))
                });
            }
            let r = blob.offset as usize..end as usize; // ok: ≤ len
            let computed = xxh3_64(&b[r.clone()]);
            if computed != blob.checksum {
                return Err(FormatError::Checksum {
                    what: what.clone(),
                    stored: blob.checksum,
                    computed,
                });
            }
            ranges.push((blob.offset, end, what));
            Ok(r)
        };
        let pre = check_blob(&index.prefix, "delta prefix".into())?;
        let suf = check_blob(&index.suffix, "delta suffix".into())?;
        let data_end = index
            .data_offset
            .checked_add(index.data_size)
            .ok_or_else(|| malformed("data section range overflows"))?;
        if pre.len() as u64 != index.data_offset
            || data_end.checked_add(suf.len() as u64) != Some(index.tuned_size)
        {
            return Err(malformed(format!(
                "prefix {} + data {} + suffix {} bytes do not make the tuned size {}",
                pre.len(),
                index.data_size,
                suf.len(),
                index.tuned_size
            )));
        }
        let mut chunks = Vec::with_capacity(index.tensors.len());
        let mut spans: Vec<(u64, u64, usize)> = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, r) in index.tensors.iter().enumerate() {
            let name = &r.info.name;
            if !names.insert(name.as_str()) {
                return Err(FormatError::DuplicateTensor(name.clone()));
            }
            let pr = check_blob(&r.payload, format!("delta payload of tensor {name:?}"))?;
            let end = r
                .info
                .offset
                .checked_add(r.info.size)
                .filter(|&e| e <= index.data_size)
                .ok_or_else(|| malformed(format!("tensor {name:?} outside the data section")))?;
            spans.push((r.info.offset, end, i));
            let ctx = ctx_of(&r.info, r.method)?;
            let target = match (r.method, ctx) {
                (Method::NeuZip { .. }, Ctx::Float(w)) => usize_of(element_count(&r.info.shape)?)?
                    .checked_mul(w.bytes())
                    .ok_or_else(|| malformed(format!("tensor {name:?} too large")))?,
                _ => usize_of(r.info.size)?,
            };
            chunks.push(parse_chunks(
                b,
                pr,
                target,
                ctx,
                r.base_checksum.is_some(),
                name,
            )?);
        }
        // The data section holds the tensors and at most one alignment gap before each: a larger
        // claim is refused before anything is allocated for it.
        let bound = spans
            .iter()
            .try_fold(0u64, |acc, (s, e, _)| {
                acc.checked_add(e - s)?.checked_add(256)
            })
            .and_then(|x| x.checked_add(256));
        if bound.is_none_or(|b| index.data_size > b) {
            return Err(malformed(format!(
                "data section of {} bytes for {} tensors of {} bytes",
                index.data_size,
                spans.len(),
                spans.iter().map(|(s, e, _)| e - s).sum::<u64>()
            )));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(malformed("tuned tensors overlap"));
            }
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(malformed(format!("{} and {} overlap", w[0].2, w[1].2)));
            }
        }
        // Every byte outside the header, index and payloads must be zero padding, so a flipped
        // bit anywhere in the file is detected.
        let mut at = iend;
        for (s, e, _) in
            ranges
                .iter()
                .map(|(s, e, w)| (*s, *e, w))
                .chain([(len, len, &String::new())])
        {
            if s > at && b[at as usize..s as usize].iter().any(|&x| x != 0) {
                return Err(FormatError::NonZeroPadding {
                    what: "delta padding between payloads".into(),
                    offset: at,
                });
            }
            at = at.max(e);
        }
        Ok(DeltaFile {
            data,
            base_id,
            index,
            chunks,
        })
    }

    /// The identity of the base this delta needs ([`base_identity`]).
    pub fn base_id(&self) -> u64 {
        self.base_id
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Size of the delta file.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// Refuse a base that is not the one this delta was made against.
    pub fn check_base(&self, base: &TernFile) -> Result<()> {
        let found = base_identity(base)?;
        if found != self.base_id {
            return Err(FormatError::Checksum {
                what: "delta base identity (this delta was made against a different base model: pass the base file it was created from)".into(),
                stored: self.base_id,
                computed: found,
            });
        }
        Ok(())
    }

    /// Rebuild the tuned `.tern` image in memory with [`default_threads`] workers.
    pub fn apply(&self, base: &TernFile) -> Result<Vec<u8>> {
        self.apply_with(base, default_threads())
    }

    /// Rebuild the tuned `.tern` image in memory: checks the base, decodes every tensor (chunks in
    /// parallel on `threads` workers), checks every tensor's checksum. The image is byte-identical
    /// to the tuned file the delta was made from ([`DeltaFile::apply_to_file`] also checks its hash).
    pub fn apply_with(&self, base: &TernFile, threads: usize) -> Result<Vec<u8>> {
        self.check_base(base)?;
        let t0 = std::time::Instant::now();
        let b = self.bytes();
        let idx = &self.index;
        // Resolve every base tensor first (checksums verified) — nothing is decoded before this.
        let mut base_bytes: Vec<&[u8]> = Vec::with_capacity(idx.tensors.len());
        for r in &idx.tensors {
            let Some(ck) = r.base_checksum else {
                base_bytes.push(&[]);
                continue;
            };
            let v = base.tensor(&r.info.name).map_err(|e| match e {
                FormatError::NoSuchTensor(n) => FormatError::malformed(
                    "delta base",
                    format!("tensor {n:?} is missing from the base"),
                ),
                e => e,
            })?;
            let same_size = matches!(r.method, Method::NeuZip { .. }) || v.info.size == r.info.size;
            if v.info.checksum != ck
                || v.info.encoding != r.info.encoding
                || v.info.shape != r.info.shape
                || !same_size
            {
                return Err(FormatError::Checksum {
                    what: format!(
                        "base tensor {:?} (the delta was made against a different base)",
                        r.info.name
                    ),
                    stored: ck,
                    computed: v.info.checksum,
                });
            }
            base_bytes.push(v.bytes);
        }
        let t_base = t0.elapsed();
        let mut image = vec![0u8; usize_of(idx.tuned_size)?];
        let d0 = usize_of(idx.data_offset)?;
        let d1 = d0 + usize_of(idx.data_size)?; // ok: validated at open to fit tuned_size
        let blob = |x: &Blob| &b[x.offset as usize..(x.offset + x.size) as usize]; // ok: validated
        let (pre, suf) = (blob(&idx.prefix), blob(&idx.suffix));
        let computed = skeleton_hash(pre, suf);
        if computed != idx.skeleton_hash {
            return Err(FormatError::Checksum {
                what: "tuned file header and tables rebuilt from the delta".into(),
                stored: idx.skeleton_hash,
                computed,
            });
        }
        image[..d0].copy_from_slice(pre);
        image[d1..].copy_from_slice(suf);
        // Split the data section into one slice per tensor (validated not to overlap).
        let mut order: Vec<usize> = (0..idx.tensors.len()).collect();
        order.sort_unstable_by_key(|&i| idx.tensors[i].info.offset);
        let mut slots: Vec<Option<&mut [u8]>> = (0..idx.tensors.len()).map(|_| None).collect();
        let mut rest: &mut [u8] = &mut image[d0..d1];
        let mut at = 0u64;
        for i in order {
            let info = &idx.tensors[i].info;
            let skip = usize_of(info.offset - at)?; // ok: sorted, non-overlapping
            let (_, r) = std::mem::take(&mut rest).split_at_mut(skip);
            let (t, r) = r.split_at_mut(usize_of(info.size)?);
            slots[i] = Some(t);
            rest = r;
            at = info.offset + info.size;
        }
        // Jobs: one per chunk of a `chunks` tensor, one per NeuZip tensor.
        enum Job<'a> {
            Chunk(u32, Ctx, &'a [u8], &'a [u8], &'a mut [u8]),
            NeuZip(usize, &'a mut [u8]),
        }
        let mut jobs = Vec::new();
        for (i, slot) in slots.into_iter().enumerate() {
            let r = &idx.tensors[i];
            let out = slot.ok_or_else(|| malformed("tensor slot missing"))?;
            match r.method {
                Method::NeuZip { .. } => jobs.push(Job::NeuZip(i, out)),
                Method::Chunks => {
                    let ctx = ctx_of(&r.info, r.method)?;
                    let mut rest: &mut [u8] = out;
                    for c in &self.chunks[i] {
                        let (o, tail) = std::mem::take(&mut rest).split_at_mut(c.out.len());
                        rest = tail;
                        let bb = if c.kind == K_COPY {
                            &[][..]
                        } else {
                            base_bytes[i]
                                .get(c.out.clone())
                                .ok_or_else(|| corrupt("chunk beyond the base tensor"))?
                        };
                        jobs.push(Job::Chunk(c.kind, ctx, &b[c.data.clone()], bb, o));
                    }
                }
            }
        }
        // Large jobs first so a big NeuZip tensor does not finish last alone.
        jobs.sort_by_key(|j| match j {
            Job::NeuZip(_, o) => std::cmp::Reverse(o.len() * 4),
            Job::Chunk(_, _, _, _, o) => std::cmp::Reverse(o.len()),
        });
        par_map(jobs, threads, |j| match j {
            Job::Chunk(kind, ctx, data, base, out) => decode_chunk(kind, ctx, data, base, out),
            Job::NeuZip(i, out) => self.decode_neuzip(i, base_bytes[i], out),
        })?;
        let t_decode = t0.elapsed();
        // Every tensor's checksum.
        let d = &image[d0..d1];
        let checks: Vec<(usize, &[u8])> = idx
            .tensors
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    i,
                    &d[r.info.offset as usize..(r.info.offset + r.info.size) as usize],
                )
            }) // ok: validated
            .collect();
        par_map(checks, threads, |(i, bytes)| {
            let info = &idx.tensors[i].info;
            let computed = xxh3_64(bytes);
            if computed != info.checksum {
                return Err(FormatError::Checksum {
                    what: format!("tensor {:?} rebuilt from the delta", info.name),
                    stored: info.checksum,
                    computed,
                });
            }
            Ok(())
        })?;
        log::debug!(
            "delta applied: base tensors checked {:.3}s, decoded {:.3}s, checksums {:.3}s",
            t_base.as_secs_f64(),
            (t_decode - t_base).as_secs_f64(),
            (t0.elapsed() - t_decode).as_secs_f64()
        );
        Ok(image)
    }

    fn decode_neuzip(&self, i: usize, base: &[u8], out: &mut [u8]) -> Result<()> {
        let r = &self.index.tensors[i];
        let (
            Method::NeuZip {
                lanes,
                block_symbols,
                layout,
            },
            Encoding::NeuZip {
                dtype,
                mantissa_bits,
            },
        ) = (r.method, &r.info.encoding)
        else {
            return Err(malformed("neuzip record"));
        };
        let mut binfo = r.info.clone();
        binfo.size = base.len() as u64;
        let raw_base = decode_neuzip_raw(&binfo, base)?;
        let w = float_width(*dtype);
        let mut raw = vec![0u8; raw_base.len()];
        let b = self.bytes();
        for c in &self.chunks[i] {
            let (Some(o), Some(bb)) = (raw.get_mut(c.out.clone()), raw_base.get(c.out.clone()))
            else {
                return Err(corrupt("neuzip chunk outside the tensor"));
            };
            decode_chunk(c.kind, Ctx::Float(w), &b[c.data.clone()], bb, o)?;
        }
        let row_len = usize_of(r.info.shape.last().copied().unwrap_or(1).max(1))?;
        let blob = neuzip_encode(
            layout,
            *dtype,
            *mantissa_bits,
            &raw,
            row_len,
            neuzip::Params {
                lanes,
                block_symbols,
            },
        )?;
        if blob.len() != out.len() {
            return Err(FormatError::Checksum {
                what: format!("tensor {:?} rebuilt from the delta (size)", r.info.name),
                stored: r.info.checksum,
                computed: xxh3_64(&blob),
            });
        }
        out.copy_from_slice(&blob);
        Ok(())
    }

    /// Rebuild the tuned model and open it (validated like any `.tern` file; tensors equal the
    /// delta's records).
    pub fn apply_open(&self, base: &TernFile, threads: usize) -> Result<TernFile> {
        let image = self.apply_with(base, threads)?;
        let f = TernFile::from_bytes(image)?;
        let same = f.tensors().len() == self.index.tensors.len()
            && f.tensors()
                .iter()
                .zip(&self.index.tensors)
                .all(|(a, r)| *a == r.info);
        if !same {
            return Err(malformed(
                "the rebuilt directory differs from the delta's records",
            ));
        }
        Ok(f)
    }

    /// Rebuild the tuned file at `out`; checks the whole file's hash first. Returns its size.
    pub fn apply_to_file(&self, base: &TernFile, out: &Path, threads: usize) -> Result<u64> {
        let image = self.apply_with(base, threads)?;
        let computed = xxh3_64(&image);
        if computed != self.index.tuned_hash {
            return Err(FormatError::Checksum {
                what: "tuned file rebuilt from the delta".into(),
                stored: self.index.tuned_hash,
                computed,
            });
        }
        // Written beside `out` and renamed: `out` may be the mapped base file itself, which must
        // not be truncated while mapped, and a failed write must not leave half a model.
        let mut part = out.as_os_str().to_owned();
        part.push(".part");
        let part = std::path::PathBuf::from(part);
        if let Err(e) = std::fs::write(&part, &image).and_then(|()| std::fs::rename(&part, out)) {
            let _ = std::fs::remove_file(&part);
            return Err(e.into());
        }
        Ok(image.len() as u64)
    }

    /// Per-tensor sizes: (name, tuned bytes, payload bytes, main chunk kind name).
    pub fn tensor_sizes(&self) -> Vec<(String, u64, u64, &'static str)> {
        self.index
            .tensors
            .iter()
            .zip(&self.chunks)
            .map(|(r, ch)| {
                let mut by: HashMap<u32, usize> = HashMap::new();
                for c in ch {
                    *by.entry(c.kind).or_default() += c.out.len();
                }
                let main = by.into_iter().max_by_key(|&(k, n)| (n, k)).map(|x| x.0);
                let name = match (r.method, main) {
                    (Method::NeuZip { .. }, _) => "neuzip",
                    (_, Some(K_BASE)) => "base",
                    (_, Some(K_COPY)) | (_, None) => "copy",
                    (_, Some(K_FM16 | K_FM32)) => "fm-delta",
                    (_, Some(K_SPARSE)) => "sparse-bytes",
                    (_, Some(K_TERNARY)) => "ternary",
                    (_, Some(K_GGML)) => "ggml",
                    _ => "?",
                };
                (r.info.name.clone(), r.info.size, r.payload.size, name)
            })
            .collect()
    }
}

/// Open `base`, apply the delta at `delta`, and return the tuned model as a validated in-memory
/// [`TernFile`] (nothing written to disk).
pub fn open_with_delta(base: &Path, delta: &Path) -> Result<TernFile> {
    let base = TernFile::open(base)?;
    let d = DeltaFile::open(delta)?;
    d.apply_open(&base, default_threads())
}

/// Decode all chunks of a payload (used by [`create`] to check what it encoded).
fn decode_chunks(
    payload: &[u8],
    chunks: &[Chunk],
    ctx: Ctx,
    base: &[u8],
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    let mut jobs = Vec::with_capacity(chunks.len());
    let mut rest: &mut [u8] = out;
    for c in chunks {
        let (o, tail) = std::mem::take(&mut rest).split_at_mut(c.out.len());
        rest = tail;
        let bb = if c.kind == K_COPY {
            &[][..]
        } else {
            base.get(c.out.clone())
                .ok_or_else(|| corrupt("chunk beyond the base tensor"))?
        };
        let data = payload
            .get(c.data.clone())
            .ok_or_else(|| corrupt("chunk data out of range"))?;
        jobs.push((c.kind, data, bb, o));
    }
    par_map(jobs, threads, |(k, d, b, o)| decode_chunk(k, ctx, d, b, o))?;
    Ok(())
}

#[doc(hidden)]
/// Fuzzing entry (`fuzz/fuzz_targets/delta_decode.rs`): first byte even → [`fuzz_chunk`] on the
/// rest; odd → the rest as a `.ternd` file: validated, then every `chunks` record decoded against
/// a zero base of its size (at most 16 MiB). Must never panic.
pub fn fuzz_input(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        return fuzz_chunk(rest);
    }
    let Ok(d) = DeltaFile::from_bytes(rest.to_vec()) else {
        return;
    };
    let _ = d.tensor_sizes();
    for (r, chunks) in d.index.tensors.iter().zip(&d.chunks) {
        if r.method != Method::Chunks || r.info.size > 1 << 24 {
            continue;
        }
        let Ok(ctx) = ctx_of(&r.info, r.method) else {
            continue;
        };
        let base = vec![0u8; r.info.size as usize]; // ok: ≤ 16 MiB
        let mut out = vec![0u8; base.len()];
        let _ = decode_chunks(d.bytes(), chunks, ctx, &base, &mut out, 1);
    }
}

/// The context and base bytes [`fuzz_chunk`] uses for selector byte `sel`.
fn fuzz_setup(sel: u8) -> (Ctx, Vec<u8>) {
    let len = (usize::from(sel >> 3) + 1) * 40;
    let mut base: Vec<u8> = (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let ctx = match sel % 4 {
        0 => Ctx::Float(Width::W16),
        1 => {
            let base3 = sel & 4 != 0;
            if !base3 {
                base.iter_mut().for_each(|b| *b &= 0x55); // valid 2-bit codes (0 or 1)
            }
            Ctx::Ternary {
                layout: if base3 {
                    TernaryLayout::Base3
                } else {
                    TernaryLayout::Bits2
                },
                cols: if base3 { 200 } else { 160 },
                row_bytes: 40,
                codes_len: len,
                scale: Width::W32,
            }
        }
        2 => Ctx::Ggml(GgmlLayout {
            block_bytes: 20,
            scales: [0, 2],
            n_scales: 2,
        }),
        _ => Ctx::Other,
    };
    (ctx, base)
}

#[doc(hidden)]
/// Fuzzing entry: the first byte selects a tensor context and base ([`fuzz_setup`]); the rest is
/// decoded as one chunk of every kind. Must never panic.
pub fn fuzz_chunk(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (ctx, base) = fuzz_setup(sel);
    let mut out = vec![0u8; base.len()];
    for kind in [K_FM16, K_FM32, K_SPARSE, K_TERNARY, K_GGML] {
        let _ = decode_chunk(kind, ctx, rest, &base, &mut out);
    }
}

#[doc(hidden)]
/// Valid inputs for `fuzz_input` (fuzz seeds): one chunk of each kind, each prefixed by the
/// even mode byte and its selector.
pub fn fuzz_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, sel, kind) in [
        ("fm16", 3u8 << 3, K_FM16),
        ("fm32", 3 | 2 << 3, K_FM32),
        ("sparse", 3 | 5 << 3, K_SPARSE),
        ("ternary_2bit", 1 | 4 << 3, K_TERNARY),
        ("ternary_base3", 1 | 4 | 4 << 3, K_TERNARY),
        ("ggml", 2 | 6 << 3, K_GGML),
    ] {
        let (ctx, base) = fuzz_setup(sel);
        let mut tuned = base.clone();
        for (i, t) in tuned.iter_mut().enumerate() {
            if i % 7 == 3 {
                *t = match ctx {
                    Ctx::Ternary {
                        layout: TernaryLayout::Bits2,
                        ..
                    } => *t ^ 0x01,
                    Ctx::Ternary { .. } => 128,
                    _ => t.wrapping_add(1),
                };
            }
        }
        if let Some(d) = encode_chunk(kind, ctx, &base, &tuned) {
            let mut out = vec![0u8; base.len()];
            if decode_chunk(kind, ctx, &d, &base, &mut out).is_ok() && out == tuned {
                let mut v = vec![0u8, sel];
                v.extend_from_slice(&d);
                seeds.push((format!("seed_chunk_{name}.bin"), v));
            }
        }
    }
    seeds
}
