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

mod chunk;
mod coder;
mod create;
mod file;
mod fuzz;

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
use chunk::*;
use coder::{Cursor, Width, CODEC};
use create::*;
pub use create::{create, create_file, CreateReport, TensorReport};
use file::*;
pub use file::{open_with_delta, DeltaFile};
pub use fuzz::{fuzz_chunk, fuzz_input, fuzz_seeds, reseal_index};

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

/// The largest NeuZip blob a tensor of `raw` bytes of floats can encode to: the exponents' rANS
/// words cost at most 16 bits per symbol (a symbol's probability is ≥ 1/2048), the raw sign and
/// mantissa plane is at most the input, and the header, frequency table and per-block and
/// per-lane tables stay far below 1 MiB + raw/16. A declared size above this is a lie.
pub(super) fn neuzip_size_bound(raw: u64) -> u64 {
    raw.saturating_mul(3)
        .saturating_add(raw / 16)
        .saturating_add(1 << 20)
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
