//! # The `.tern` packed model format, version 1
//!
//! One file holds a whole model: metadata (architecture, hyperparameters, tokenizer, chat template,
//! per-sublayer activation scheme, provenance), a tensor directory, and the tensor bytes, laid out
//! so the data can be memory-mapped and uploaded to a GPU without copies or re-alignment.
//! This crate knows nothing about GPUs (**invariant**: `tern-format` never depends on wgpu).
//!
//! ## Byte layout
//!
//! All integers are little-endian. Offsets are absolute file offsets unless stated otherwise.
//!
//! 1. **Header**, 64 bytes at offset 0:
//!    | bytes | field |
//!    |---|---|
//!    | 0..8 | magic `"TERN\0\r\n\x1a"` |
//!    | 8..12 | `u32` format version (= 1) |
//!    | 12..16 | `u32` header size (= 64) |
//!    | 16..24 | `u64` required features: bits a reader must understand ([`FEATURE_NEUZIP`], [`FEATURE_TERNARY_2BIT`], [`FEATURE_TERNARY_BASE3`]); an unknown bit is refused with "upgrade tern" |
//!    | 24..32 | `u64` optional features (a reader may ignore unknown bits) |
//!    | 32..40 | `u64` offset of the section table |
//!    | 40..44 | `u32` number of sections |
//!    | 44..48 | reserved, zero |
//!    | 48..56 | `u64` total file size (catches truncation) |
//!    | 56..64 | `u64` xxh3-64 of bytes 0..56 |
//! 2. **Zero padding** up to offset 4096 ([`container::DATA_OFFSET`]).
//! 3. **Data section** at 4096: the tensors' bytes in directory order, each starting at a multiple of
//!    256 bytes ([`container::TENSOR_ALIGN`]) from the data section start (so, page-aligned file +
//!    256 = every tensor is a valid GPU storage-buffer binding offset), zero padding between tensors.
//!    The encodings of the bytes are defined in [`encoding::Encoding`] and its codec modules:
//!    raw f32/f16/bf16, ggml Q8_0/Q4_0/Q4_1/Q6_K blocks ([`ggml`]), ternary 2-bit and base-3 ([`ternary`]),
//!    NeuZip ([`neuzip`]).
//! 4. **Metadata section** (8-aligned): UTF-8 JSON of [`meta::ModelMeta`].
//! 5. **Tensor directory section** (8-aligned): UTF-8 JSON `{"tensors": [TensorInfo...]}` with, per
//!    tensor, `name`, `shape` (outermost first, PyTorch order), `encoding` (`{"type": ...,params}`),
//!    `offset` (relative to the data section), `size` in bytes, `checksum` (xxh3-64 of the bytes).
//! 6. **Section table** (8-aligned), the last bytes of the file: `count` entries of 32 bytes
//!    (`u32 kind`, `u32 flags`, `u64 offset`, `u64 size`, `u64 xxh3-64 of the section`), then
//!    `u64` xxh3-64 of the entries. Kinds: 1 metadata, 2 tensor directory, 3 data (its checksum
//!    field is 0: per-tensor checksums cover it). Flag bit 0 = required: a reader refuses a required
//!    section kind it does not know and skips an unknown optional one.
//!
//! ## Integrity
//! Opening a file ([`TernFile::open`]) checks the header checksum, version, features, file size,
//! the section table (checksum, ranges, overlaps), the metadata and directory checksums, and every
//! tensor's shape, encoding, byte size, alignment and range (no overlaps) — before anything is used.
//! Tensor checksums are checked lazily on first access. [`TernFile::verify`] decodes every tensor,
//! checks every checksum, and requires every byte not covered by a checksum to be zero, so a
//! flipped bit anywhere in the file is detected.
//!
//! ## Writing
//! [`TernWriter`] streams: tensor bytes go to disk as they are added, and only the directory is
//! kept in memory; header and tables are written by [`TernWriter::finish`].

pub mod check;
pub mod container;
pub mod delta;
pub mod dtype;
pub mod encoding;
pub mod error;
pub mod features;
pub mod ggml;
pub mod kv;
pub mod meta;
pub mod neuzip;
pub mod output;
pub mod spec;
pub mod sysmem;
pub mod ternary;

pub use check::{check_hparams, check_hparams_alone};
pub use container::{hash_file, Section, TensorInfo, TensorView, TernFile, TernWriter};
pub use dtype::{FloatType, TernaryLayout};
pub use encoding::Encoding;
pub use error::{FormatError, Result};
pub use kv::{Kivi, KvQuant, KvSpec, KvSpecError, MiniCache};
pub use meta::*;
pub use spec::{Caps, Feature, LayerSpec, ModelSpec, Unsupported};

/// Required-feature bit: some tensor uses NeuZip.
pub const FEATURE_NEUZIP: u64 = 1 << 0;
/// Required-feature bit: some tensor uses the 2-bit ternary layout.
pub const FEATURE_TERNARY_2BIT: u64 = 1 << 1;
/// Required-feature bit: some tensor uses the base-3 ternary layout.
pub const FEATURE_TERNARY_BASE3: u64 = 1 << 2;
