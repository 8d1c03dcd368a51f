//! A GGUF v3 (and v2) reader with typed errors that treats the file as hostile input.
//!
//! We write our own instead of using the `gguf-rs` crate: it returns `anyhow` errors, computes
//! wrong byte sizes for BF16 (every type id ≥ 10 gets 256-element blocks) and for id 36 (bitnet.cpp's
//! I2_S), and does not bound counts by the file size, while tern needs typed errors and full
//! validation of untrusted files (see `methods-and-formats.md` §10).
//!
//! # File layout (all little-endian; `ggml-org/ggml: include/gguf.h, src/gguf.cpp`)
//!
//! 1. magic `"GGUF"` (47 47 55 46);
//! 2. `u32` version: 3 (2 has the same layout and is accepted; 1 is rejected; a version whose low
//!    16 bits are zero is a big-endian file read on a little-endian host and is rejected as such);
//! 3. `u64` tensor count, `u64` key/value count (both must be ≤ `i64::MAX`);
//! 4. key/value pairs: key string, `u32` value type, value. Types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32,
//!    5 i32, 6 f32, 7 bool (one byte, 0 or 1), 8 string, 9 array, 10 u64, 11 i64, 12 f64. A string is
//!    a `u64` byte length and that many UTF-8 bytes (no NUL). An array is a `u32` element type, a
//!    `u64` count and the elements. Arrays of arrays are rejected, as llama.cpp does;
//! 5. tensor infos: name string, `u32` n_dims (≤ 4), `u64 ne[n_dims]` (ne\[0\] innermost, so a PyTorch
//!    `[out, in]` weight is written `ne = [in, out]`), `u32` ggml type, `u64` offset relative to the
//!    data section;
//! 6. padding to `general.alignment` (a `u32` power of two, default 32), then the data section.
//!
//! # What is checked
//!
//! Every count is bounded by the bytes left in the file before anything is allocated (each element
//! needs at least one byte), so a hostile count cannot cause a large allocation. Keys must be
//! non-empty, unique UTF-8; tensor names unique; `ne[0]` a multiple of the type's block size; the
//! element count and byte size must not overflow; every offset must be a multiple of the alignment
//! and every tensor of known size must lie inside the file without overlapping another one. Unlike
//! ggml's loader, the offsets need not be the running sum of the padded sizes (bitnet.cpp's I2_S
//! files are laid out with their own sizes), and a file may end right after the last tensor's bytes.
//!
//! A tensor whose type id tern does not know is still listed (with `size == None`), so `inspect` can
//! show it; reading its bytes is an [`ImportError::UnsupportedGgufType`].
//!
//! # Type ids that depend on the architecture
//!
//! bitnet.cpp's llama.cpp fork adds I2_S = 36, I8_S = 37, TL1 = 38, TL2 = 39, and upstream later
//! gave 39 to MXFP4. The ids are read the fork's way when `general.architecture` is `bitnet-25` or
//! `bitnet-b1.58` (the fork's own architectures). For `bitnet` (used by both) 36–38 are read as the
//! fork's types, since upstream never writes those ids into files, and 39 as MXFP4.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use crate::error::{ImportError, Result};

mod parser;
mod types;
mod value;

use parser::*;
pub use types::*;
pub use value::*;

/// `"GGUF"` as the first four bytes of the file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;

fn gguf_err(msg: impl Into<String>) -> ImportError {
    ImportError::Gguf(msg.into())
}

// ------------------------------------------------------------------------------------------------
// tensor infos

/// One tensor as described in the file's tensor-info table.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Dimensions as written: `ne[0]` is the innermost (contiguous) one.
    pub ne: Vec<u64>,
    /// The raw ggml type id.
    pub type_id: u32,
    /// The type, read for this file's architecture (see the module doc on ids 36..=39).
    pub ggml_type: GgmlType,
    /// Offset of the first byte relative to the start of the data section.
    pub offset: u64,
    /// Byte size, or `None` when this build does not know the type's size.
    pub size: Option<u64>,
}

impl GgufTensorInfo {
    /// The shape outermost-first, as PyTorch writes it (`[out_features, in_features]`).
    pub fn shape(&self) -> Vec<u64> {
        self.ne.iter().rev().copied().collect()
    }
    /// Number of elements (the parser checked it fits in i64; saturates for hand-made infos).
    pub fn n_elements(&self) -> u64 {
        self.ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .unwrap_or(u64::MAX)
    }
}

// ------------------------------------------------------------------------------------------------
// the file

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file: metadata, tensor infos and access to the tensor bytes.
pub struct GgufFile {
    data: Backing,
    version: u32,
    kv: Vec<(String, GgufValue)>,
    index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    architecture: String,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("architecture", &self.architecture)
            .field("kv_count", &self.kv.len())
            .field("tensor_count", &self.tensors.len())
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Memory-map and parse a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = std::fs::File::open(path)
            .map_err(|e| ImportError::Gguf(format!("cannot open {}: {e}", path.display())))?;
        // SAFETY: the map is read-only and private to this process. The file must not be truncated
        // or modified while the map lives (the usual contract of memory-mapped model files); tern
        // never writes to files it has mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| ImportError::Gguf(format!("cannot memory-map {}: {e}", path.display())))?;
        Self::parse(Backing::Mmap(map))
    }

    /// Parse a GGUF file held in memory (tests and fuzzing).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(Backing::Owned(bytes))
    }

    fn parse(data: Backing) -> Result<GgufFile> {
        let parsed = Parser {
            buf: data.bytes(),
            pos: 0,
        }
        .parse()?;
        let Parsed {
            version,
            kv,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
            architecture,
        } = parsed;
        Ok(GgufFile {
            data,
            version,
            kv,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
            architecture,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }
    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }
    /// `general.alignment`, or 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }
    /// `general.architecture`, or `""` when the key is absent.
    pub fn architecture(&self) -> &str {
        &self.architecture
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.kv.iter().map(|(k, v)| (k.as_str(), v))
    }
    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.index
            .get(key)
            .and_then(|&i| self.kv.get(i))
            .map(|(_, v)| v)
    }

    fn wrong_type(key: &str, want: &str, v: &GgufValue) -> ImportError {
        gguf_err(format!(
            "key {key:?} is {} ({v}), expected {want}",
            v.type_name()
        ))
    }

    fn require<'a>(&'a self, key: &str) -> Result<&'a GgufValue> {
        self.get(key)
            .ok_or_else(|| ImportError::MissingKey(key.to_string()))
    }

    /// An unsigned 32-bit value; any integer width is accepted when the value fits.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let i = v
            .as_i128()
            .ok_or_else(|| Self::wrong_type(key, "an integer", v))?;
        u32::try_from(i)
            .map(Some)
            .map_err(|_| gguf_err(format!("key {key:?} = {i} does not fit in u32")))
    }
    /// Like [`GgufFile::opt_u32`], but the key must exist.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.opt_u32(key)?
            .ok_or_else(|| ImportError::MissingKey(key.to_string()))
    }
    /// A u64 value; any non-negative integer is accepted.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let i = v
            .as_i128()
            .ok_or_else(|| Self::wrong_type(key, "an integer", v))?;
        u64::try_from(i)
            .map(Some)
            .map_err(|_| gguf_err(format!("key {key:?} = {i} does not fit in u64")))
    }
    /// An f32 value; f64 (rounded) and integers are accepted too.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v {
            GgufValue::F32(x) => Ok(Some(*x)),
            GgufValue::F64(x) => Ok(Some(*x as f32)),
            v => v
                .as_i128()
                .map(|i| Some(i as f32))
                .ok_or_else(|| Self::wrong_type(key, "a number", v)),
        }
    }
    /// Like [`GgufFile::opt_f32`], but the key must exist.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.opt_f32(key)?
            .ok_or_else(|| ImportError::MissingKey(key.to_string()))
    }
    /// A string value.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::String(s)) => Ok(Some(s)),
            Some(v) => Err(Self::wrong_type(key, "a string", v)),
        }
    }
    /// Like [`GgufFile::opt_str`], but the key must exist.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.opt_str(key)?
            .ok_or_else(|| ImportError::MissingKey(key.to_string()))
    }
    /// A bool value; integer 0/1 of any width is accepted too.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => match v.as_i128() {
                Some(0) => Ok(Some(false)),
                Some(1) => Ok(Some(true)),
                _ => Err(Self::wrong_type(key, "a bool", v)),
            },
        }
    }
    /// Like [`GgufFile::opt_bool`], but the key must exist.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.opt_bool(key)?
            .ok_or_else(|| ImportError::MissingKey(key.to_string()))
    }
    /// An array value of any element type.
    pub fn get_array(&self, key: &str) -> Result<&GgufArray> {
        match self.require(key)? {
            GgufValue::Array(a) => Ok(a),
            v => Err(Self::wrong_type(key, "an array", v)),
        }
    }
    /// An array of strings (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
    pub fn get_str_array(&self, key: &str) -> Result<&[String]> {
        match self.get_array(key)? {
            GgufArray::String(v) => Ok(v),
            a => Err(gguf_err(format!(
                "key {key:?} is array[{}], expected array[string]",
                value_type_name(a.elem_type())
            ))),
        }
    }
    /// An array of integers as i32 (`tokenizer.ggml.token_type`); any integer width is accepted
    /// when every value fits.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        let a = self.get_array(key)?;
        if let GgufArray::I32(v) = a {
            return Ok(v.clone());
        }
        let wide = a.to_i64_vec().ok_or_else(|| {
            gguf_err(format!(
                "key {key:?} is array[{}], expected an integer array",
                value_type_name(a.elem_type())
            ))
        })?;
        wide.iter()
            .enumerate()
            .map(|(i, &x)| {
                i32::try_from(x)
                    .map_err(|_| gguf_err(format!("key {key:?}[{i}] = {x} does not fit in i32")))
            })
            .collect()
    }
    /// An array of f32 (`tokenizer.ggml.scores`); f64 arrays are rounded to f32.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        match self.get_array(key)? {
            GgufArray::F32(v) => Ok(v.clone()),
            GgufArray::F64(v) => Ok(v.iter().map(|&x| x as f32).collect()),
            a => Err(gguf_err(format!(
                "key {key:?} is array[{}], expected array[f32]",
                value_type_name(a.elem_type())
            ))),
        }
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }
    /// One tensor info by name.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensor_index
            .get(name)
            .and_then(|&i| self.tensors.get(i))
    }

    /// The raw bytes of one tensor (a slice of the map). Errors for a tensor whose size is unknown.
    pub fn tensor_bytes(&self, info: &GgufTensorInfo) -> Result<&[u8]> {
        let size = info.size.ok_or_else(|| ImportError::UnsupportedGgufType {
            name: info.name.clone(),
            ty: info.type_id,
            type_name: info.ggml_type.to_string(),
        })?;
        let range = self
            .data_offset
            .checked_add(info.offset)
            .and_then(|s| Some((s, s.checked_add(size)?)))
            .and_then(|(s, e)| Some(usize::try_from(s).ok()?..usize::try_from(e).ok()?));
        range.and_then(|r| self.bytes().get(r)).ok_or_else(|| {
            gguf_err(format!(
                "tensor {:?}: bytes at data offset {} (+{size}) are not in this file",
                info.name, info.offset
            ))
        })
    }
}
