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
// ggml types

/// A ggml tensor element type as found in GGUF tensor infos.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's own names (Q4_0 …) read better than Q40
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
    /// bitnet.cpp: 2-bit ternary codes, x86 128-element layout, one f32 scale (id 36 in the fork).
    I2_S,
    /// bitnet.cpp fork id 37 (activations; never a weight in published files).
    I8_S,
    /// bitnet.cpp fork id 38 (lookup-table kernel layout).
    TL1,
    /// bitnet.cpp fork id 39 (lookup-table kernel layout).
    TL2,
    /// An id this build does not know.
    Unknown(u32),
}

/// Whether an architecture's files use bitnet.cpp's type ids for 36..=39 (see the module doc).
fn fork_ids(arch: &str) -> (bool, bool) {
    match arch {
        "bitnet-25" | "bitnet-b1.58" => (true, true),
        "bitnet" => (true, false),
        _ => (false, false),
    }
}

impl GgmlType {
    /// The type for an id found in a file of architecture `arch` (which decides ids 36..=39).
    pub fn from_id(id: u32, arch: &str) -> GgmlType {
        use GgmlType::*;
        let (fork_36_38, fork_39) = fork_ids(arch);
        match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            36 if fork_36_38 => I2_S,
            37 if fork_36_38 => I8_S,
            38 if fork_36_38 => TL1,
            39 if fork_39 => TL2,
            39 => MXFP4,
            40 if !fork_39 => NVFP4,
            41 if !fork_39 => Q1_0,
            42 if !fork_39 => Q2_0,
            other => Unknown(other),
        }
    }

    /// ggml's lower-case type name (`"q4_0"`, `"tq2_0"`, `"i2_s"`, …); `"unknown"` for unknown ids.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q8_1 => "q8_1",
            Q2_K => "q2_K",
            Q3_K => "q3_K",
            Q4_K => "q4_K",
            Q5_K => "q5_K",
            Q6_K => "q6_K",
            Q8_K => "q8_K",
            IQ2_XXS => "iq2_xxs",
            IQ2_XS => "iq2_xs",
            IQ3_XXS => "iq3_xxs",
            IQ1_S => "iq1_s",
            IQ4_NL => "iq4_nl",
            IQ3_S => "iq3_s",
            IQ2_S => "iq2_s",
            IQ4_XS => "iq4_xs",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            F64 => "f64",
            IQ1_M => "iq1_m",
            BF16 => "bf16",
            TQ1_0 => "tq1_0",
            TQ2_0 => "tq2_0",
            MXFP4 => "mxfp4",
            NVFP4 => "nvfp4",
            Q1_0 => "q1_0",
            Q2_0 => "q2_0",
            I2_S => "i2_s",
            I8_S => "i8_s",
            TL1 => "tl1",
            TL2 => "tl2",
            Unknown(_) => "unknown",
        }
    }

    /// `(elements per block, bytes per block)` as in ggml's `type_traits`, or `None` when the size
    /// does not follow that rule (I2_S: see [`GgmlType::byte_size`]) or is unknown.
    pub fn block(self) -> Option<(u64, u64)> {
        use GgmlType::*;
        if let Some(bt) = self.block_type() {
            // the types tern reads: from tern-format's one table
            return Some((bt.block_elems() as u64, bt.block_bytes() as u64));
        }
        Some(match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_1 => (32, 40),
            Q2_K => (256, 84),
            Q3_K => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q8_K => (256, 292),
            IQ2_XXS => (256, 66),
            IQ2_XS => (256, 74),
            IQ3_XXS => (256, 98),
            IQ1_S => (256, 50),
            IQ4_NL => (32, 18),
            IQ3_S => (256, 110),
            IQ2_S => (256, 82),
            IQ4_XS => (256, 136),
            IQ1_M => (256, 56),
            MXFP4 => (32, 17),
            NVFP4 => (64, 36),
            Q1_0 => (128, 18),
            Q2_0 => (64, 18),
            Q4_0 | Q4_1 | Q8_0 | Q6_K | TQ1_0 | TQ2_0 => return None, // handled above
            I2_S | I8_S | TL1 | TL2 | Unknown(_) => return None,
        })
    }

    /// Byte size of a tensor of this type with `ne` (innermost first), or `Ok(None)` when this build
    /// does not know the type's size. Errors when `ne[0]` is not a multiple of the block size or the
    /// size overflows.
    pub fn byte_size(self, ne: &[u64]) -> std::result::Result<Option<u64>, String> {
        let n = ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or("element count overflows")?;
        if self == GgmlType::I2_S {
            // bitnet.cpp's ggml_nbytes special case: n/4 bytes of codes and a 32-byte tail whose
            // first 4 bytes hold the f32 scale.
            return Ok(Some(n / 4 + 32));
        }
        let Some((blck, size)) = self.block() else {
            return Ok(None);
        };
        let ne0 = ne.first().copied().unwrap_or(1);
        if ne0 % blck != 0 {
            return Err(format!(
                "row length ne[0] = {ne0} is not a multiple of the {} block size {blck}",
                self.name()
            ));
        }
        (n / blck)
            .checked_mul(size)
            .map(Some)
            .ok_or_else(|| "byte size overflows".to_string())
    }

    /// The matching `tern-format` block type (the table of block sizes, names and GPU kernels), for
    /// the types tern can dequantize as ggml blocks.
    pub fn block_type(self) -> Option<tern_format::ggml::BlockType> {
        use tern_format::ggml::BlockType;
        match self {
            GgmlType::Q8_0 => Some(BlockType::Q8_0),
            GgmlType::Q4_0 => Some(BlockType::Q4_0),
            GgmlType::Q4_1 => Some(BlockType::Q4_1),
            GgmlType::Q6_K => Some(BlockType::Q6K),
            GgmlType::TQ1_0 => Some(BlockType::Tq1_0),
            GgmlType::TQ2_0 => Some(BlockType::Tq2_0),
            _ => None,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgmlType::Unknown(id) => write!(f, "unknown type {id}"),
            t => f.write_str(t.name()),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// metadata values

/// GGUF metadata value type ids.
pub mod value_type {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value, stored unboxed per element type (so memory stays proportional to the file).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl GgufArray {
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// GGUF type id of the elements.
    pub fn elem_type(&self) -> u32 {
        use value_type as vt;
        match self {
            GgufArray::U8(_) => vt::U8,
            GgufArray::I8(_) => vt::I8,
            GgufArray::U16(_) => vt::U16,
            GgufArray::I16(_) => vt::I16,
            GgufArray::U32(_) => vt::U32,
            GgufArray::I32(_) => vt::I32,
            GgufArray::F32(_) => vt::F32,
            GgufArray::Bool(_) => vt::BOOL,
            GgufArray::String(_) => vt::STRING,
            GgufArray::U64(_) => vt::U64,
            GgufArray::I64(_) => vt::I64,
            GgufArray::F64(_) => vt::F64,
        }
    }
    /// Every element as an `i64` (integer arrays only; u64 values above `i64::MAX` give `None`).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match self {
            GgufArray::U8(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I8(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::U16(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I16(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::U32(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I32(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I64(v) => v.clone(),
            GgufArray::U64(v) => v
                .iter()
                .map(|&x| i64::try_from(x).ok())
                .collect::<Option<_>>()?,
            _ => return None,
        })
    }
}

impl GgufValue {
    /// GGUF type id of the value.
    pub fn type_id(&self) -> u32 {
        use value_type as vt;
        match self {
            GgufValue::U8(_) => vt::U8,
            GgufValue::I8(_) => vt::I8,
            GgufValue::U16(_) => vt::U16,
            GgufValue::I16(_) => vt::I16,
            GgufValue::U32(_) => vt::U32,
            GgufValue::I32(_) => vt::I32,
            GgufValue::F32(_) => vt::F32,
            GgufValue::Bool(_) => vt::BOOL,
            GgufValue::String(_) => vt::STRING,
            GgufValue::Array(_) => vt::ARRAY,
            GgufValue::U64(_) => vt::U64,
            GgufValue::I64(_) => vt::I64,
            GgufValue::F64(_) => vt::F64,
        }
    }

    /// A short type description for messages (`"u32"`, `"array[string]"`).
    pub fn type_name(&self) -> String {
        match self {
            GgufValue::Array(a) => format!("array[{}]", value_type_name(a.elem_type())),
            v => value_type_name(v.type_id()).to_string(),
        }
    }

    /// The value as an integer, for any integer width (and bool as 0/1 is not included).
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            GgufValue::U8(x) => x.into(),
            GgufValue::I8(x) => x.into(),
            GgufValue::U16(x) => x.into(),
            GgufValue::I16(x) => x.into(),
            GgufValue::U32(x) => x.into(),
            GgufValue::I32(x) => x.into(),
            GgufValue::U64(x) => x.into(),
            GgufValue::I64(x) => x.into(),
            _ => return None,
        })
    }
}

/// Name of a GGUF value type id.
pub fn value_type_name(t: u32) -> &'static str {
    use value_type as vt;
    match t {
        vt::U8 => "u8",
        vt::I8 => "i8",
        vt::U16 => "u16",
        vt::I16 => "i16",
        vt::U32 => "u32",
        vt::I32 => "i32",
        vt::F32 => "f32",
        vt::BOOL => "bool",
        vt::STRING => "string",
        vt::ARRAY => "array",
        vt::U64 => "u64",
        vt::I64 => "i64",
        vt::F64 => "f64",
        _ => "invalid",
    }
}

impl fmt::Display for GgufValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufValue::U8(x) => write!(f, "{x}"),
            GgufValue::I8(x) => write!(f, "{x}"),
            GgufValue::U16(x) => write!(f, "{x}"),
            GgufValue::I16(x) => write!(f, "{x}"),
            GgufValue::U32(x) => write!(f, "{x}"),
            GgufValue::I32(x) => write!(f, "{x}"),
            GgufValue::F32(x) => write!(f, "{x}"),
            GgufValue::Bool(x) => write!(f, "{x}"),
            GgufValue::String(s) => write!(f, "{s:?}"),
            GgufValue::Array(a) => write!(f, "[{} × {}]", a.len(), value_type_name(a.elem_type())),
            GgufValue::U64(x) => write!(f, "{x}"),
            GgufValue::I64(x) => write!(f, "{x}"),
            GgufValue::F64(x) => write!(f, "{x}"),
        }
    }
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

// ------------------------------------------------------------------------------------------------
// the parser

struct Parsed {
    version: u32,
    kv: Vec<(String, GgufValue)>,
    index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    architecture: String,
}

/// llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`: larger arrays are rejected outright.
const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;

struct Parser<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end.and_then(|e| self.buf.get(self.pos..e).map(|s| (e, s))) {
            Some((e, s)) => {
                self.pos = e;
                Ok(s)
            }
            None => Err(gguf_err(format!(
                "truncated at {}: needs {n} bytes at offset {}, the file has {}",
                what(),
                self.pos,
                self.buf.len()
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s); // ok: take returned exactly N bytes
        Ok(a)
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Checks that `count` elements of at least `min_size` bytes each can still be in the file, so
    /// that a capacity of `count` is bounded by the file size.
    fn check_count(&self, count: u64, min_size: u64, what: &dyn Fn() -> String) -> Result<usize> {
        let need = count.checked_mul(min_size);
        match need {
            Some(need) if need <= self.remaining() as u64 => Ok(count as usize), // ok: ≤ remaining
            _ => Err(gguf_err(format!(
                "{} count {count} cannot fit in the {} bytes left in the file (each needs at least {min_size})",
                what(),
                self.remaining()
            ))),
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let bytes = self.string_bytes(what)?;
        Ok(match std::str::from_utf8(bytes) {
            Ok(s) => s.to_string(),
            Err(e) => {
                log::warn!(
                    "GGUF {} is not valid UTF-8 ({e}); invalid bytes replaced by U+FFFD",
                    what()
                );
                String::from_utf8_lossy(bytes).into_owned()
            }
        })
    }

    fn string_bytes(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("{} (length)", what()))?;
        if len > self.remaining() as u64 {
            return Err(gguf_err(format!(
                "truncated at {}: string length {len} exceeds the {} bytes left in the file",
                what(),
                self.remaining()
            )));
        }
        self.take(len as usize, &|| format!("{} (bytes)", what())) // ok: len ≤ remaining
    }

    fn scalar(&mut self, ty: u32, what: &dyn Fn() -> String) -> Result<GgufValue> {
        use value_type as vt;
        Ok(match ty {
            vt::U8 => GgufValue::U8(self.array::<1>(what)?[0]),
            vt::I8 => GgufValue::I8(self.array::<1>(what)?[0] as i8),
            vt::U16 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            vt::I16 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            vt::U32 => GgufValue::U32(u32::from_le_bytes(self.array(what)?)),
            vt::I32 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            vt::F32 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            vt::U64 => GgufValue::U64(u64::from_le_bytes(self.array(what)?)),
            vt::I64 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            vt::F64 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            vt::BOOL => GgufValue::Bool(self.bool(what)?),
            vt::STRING => GgufValue::String(self.string(what)?),
            vt::ARRAY => {
                return Err(gguf_err(format!(
                    "{}: arrays of arrays are not supported (llama.cpp rejects them too)",
                    what()
                )))
            }
            other => return Err(gguf_err(format!("{}: invalid value type {other}", what()))),
        })
    }

    fn bool(&mut self, what: &dyn Fn() -> String) -> Result<bool> {
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(gguf_err(format!(
                "{}: bool byte is {b}, not 0 or 1",
                what()
            ))),
        }
    }

    fn fixed_array<T, const N: usize>(
        &mut self,
        n: usize,
        conv: fn([u8; N]) -> T,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<T>> {
        let bytes = self.take(n.saturating_mul(N), what)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c); // ok: chunks_exact yields N bytes
                conv(a)
            })
            .collect())
    }

    fn array_value(&mut self, what: &dyn Fn() -> String) -> Result<GgufArray> {
        use value_type as vt;
        let ty = self.u32(&|| format!("{} (array element type)", what()))?;
        let count = self.u64(&|| format!("{} (array length)", what()))?;
        if count > MAX_ARRAY_ELEMENTS {
            return Err(gguf_err(format!(
                "{}: array length {count} exceeds the limit of {MAX_ARRAY_ELEMENTS}",
                what()
            )));
        }
        let min_size = match ty {
            vt::U8 | vt::I8 | vt::BOOL => 1,
            vt::U16 | vt::I16 => 2,
            vt::U32 | vt::I32 | vt::F32 => 4,
            vt::U64 | vt::I64 | vt::F64 | vt::STRING => 8,
            vt::ARRAY => {
                return Err(gguf_err(format!(
                    "{}: arrays of arrays are not supported (llama.cpp rejects them too)",
                    what()
                )))
            }
            other => {
                return Err(gguf_err(format!(
                    "{}: invalid array element type {other}",
                    what()
                )))
            }
        };
        let n = self.check_count(count, min_size, &|| format!("{} array", what()))?;
        let elems = &|| format!("{} (array of {count} {})", what(), value_type_name(ty));
        Ok(match ty {
            vt::U8 => GgufArray::U8(self.take(n, elems)?.to_vec()),
            vt::I8 => GgufArray::I8(self.take(n, elems)?.iter().map(|&b| b as i8).collect()),
            vt::BOOL => {
                let bytes = self.take(n, elems)?;
                let mut v = Vec::with_capacity(n);
                for (i, &b) in bytes.iter().enumerate() {
                    match b {
                        0 => v.push(false),
                        1 => v.push(true),
                        b => {
                            return Err(gguf_err(format!(
                                "{}[{i}]: bool byte is {b}, not 0 or 1",
                                what()
                            )))
                        }
                    }
                }
                GgufArray::Bool(v)
            }
            vt::U16 => GgufArray::U16(self.fixed_array(n, u16::from_le_bytes, elems)?),
            vt::I16 => GgufArray::I16(self.fixed_array(n, i16::from_le_bytes, elems)?),
            vt::U32 => GgufArray::U32(self.fixed_array(n, u32::from_le_bytes, elems)?),
            vt::I32 => GgufArray::I32(self.fixed_array(n, i32::from_le_bytes, elems)?),
            vt::F32 => GgufArray::F32(self.fixed_array(n, f32::from_le_bytes, elems)?),
            vt::U64 => GgufArray::U64(self.fixed_array(n, u64::from_le_bytes, elems)?),
            vt::I64 => GgufArray::I64(self.fixed_array(n, i64::from_le_bytes, elems)?),
            vt::F64 => GgufArray::F64(self.fixed_array(n, f64::from_le_bytes, elems)?),
            _ => {
                // strings (the only type left after the min_size match)
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.string(&|| format!("{}[{i}]", what()))?);
                }
                GgufArray::String(v)
            }
        })
    }

    fn parse(mut self) -> Result<Parsed> {
        // 1. magic
        let magic: [u8; 4] = self.array(&|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(gguf_err(format!(
                "bad magic bytes {:02x?} (expected \"GGUF\" = 47 47 55 46): not a GGUF file",
                magic
            )));
        }
        // 2. version
        let version = self.u32(&|| "version".into())?;
        if version != 0 && version & 0xFFFF == 0 {
            return Err(gguf_err(format!(
                "version field is {version:#010x}: this is a big-endian (byte-swapped) GGUF file; tern reads little-endian GGUF only"
            )));
        }
        match version {
            2 | 3 => {}
            1 => {
                return Err(gguf_err(
                    "GGUF v1 is not supported (re-convert the model with a current llama.cpp)",
                ))
            }
            v => {
                return Err(gguf_err(format!(
                    "unsupported GGUF version {v} (tern reads v2 and v3)"
                )))
            }
        }
        // 3. counts
        let n_tensors = self.u64(&|| "header (tensor count)".into())?;
        let n_kv = self.u64(&|| "header (key/value count)".into())?;
        if n_tensors > i64::MAX as u64 || n_kv > i64::MAX as u64 {
            return Err(gguf_err(format!(
                "header counts out of range: {n_tensors} tensors, {n_kv} key/value pairs"
            )));
        }
        // A KV pair needs ≥ 8 (key length) + 1 (key) + 4 (type) + 1 bytes; a tensor info needs
        // ≥ 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
        let n_kv = self.check_count(n_kv, 14, &|| "key/value".into())?;
        let n_tensors_cap = self.check_count(n_tensors, 24, &|| "tensor".into())?;

        // 4. key/value pairs
        let mut kv: Vec<(String, GgufValue)> = Vec::with_capacity(n_kv);
        let mut index = HashMap::with_capacity(n_kv);
        for i in 0..n_kv {
            let key_bytes = self.string_bytes(&|| format!("key/value {i} (key)"))?;
            let key = std::str::from_utf8(key_bytes)
                .map_err(|e| gguf_err(format!("key/value {i}: key is not valid UTF-8 ({e})")))?
                .to_string();
            if key.is_empty() {
                return Err(gguf_err(format!("key/value {i}: empty key")));
            }
            if index.contains_key(&key) {
                return Err(gguf_err(format!("key/value {i}: duplicate key {key:?}")));
            }
            let what = || format!("key/value {i} ({key:?})");
            let ty = self.u32(&|| format!("{} (type)", what()))?;
            let value = if ty == value_type::ARRAY {
                GgufValue::Array(self.array_value(&what)?)
            } else {
                self.scalar(ty, &what)?
            };
            index.insert(key.clone(), kv.len());
            kv.push((key, value));
        }
        let lookup = |k: &str| {
            index
                .get(k)
                .and_then(|&i: &usize| kv.get(i))
                .map(|(_, v)| v)
        };

        let architecture = match lookup("general.architecture") {
            None => String::new(),
            Some(GgufValue::String(s)) => s.clone(),
            Some(v) => {
                return Err(gguf_err(format!(
                    "general.architecture is {}, expected a string",
                    v.type_name()
                )))
            }
        };
        let alignment = match lookup("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_i128() {
                Some(a) if a > 0 && a <= u32::MAX as i128 && (a as u64).is_power_of_two() => {
                    a as u64
                }
                _ => {
                    return Err(gguf_err(format!(
                        "general.alignment = {v} is not a power of two in u32 range"
                    )))
                }
            },
        };

        // 5. tensor infos
        let mut tensors: Vec<GgufTensorInfo> = Vec::with_capacity(n_tensors_cap);
        let mut tensor_index = HashMap::with_capacity(n_tensors_cap);
        for i in 0..n_tensors_cap {
            let name = self.string(&|| format!("tensor info {i} (name)"))?;
            if tensor_index.contains_key(&name) {
                return Err(gguf_err(format!(
                    "tensor info {i}: duplicate tensor name {name:?}"
                )));
            }
            let what = |field: &str| format!("tensor info {i} ({name:?}, {field})");
            let n_dims = self.u32(&|| what("n_dims"))?;
            if n_dims as usize > MAX_DIMS {
                return Err(gguf_err(format!(
                    "{}: {n_dims} dimensions, at most {MAX_DIMS}",
                    what("n_dims")
                )));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                let x = self.u64(&|| what(&format!("ne[{d}]")))?;
                if x > i64::MAX as u64 {
                    return Err(gguf_err(format!(
                        "{}: dimension {x} is negative as i64",
                        what(&format!("ne[{d}]"))
                    )));
                }
                ne.push(x);
            }
            let n_elems = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            if n_elems.is_none_or(|n| n > i64::MAX as u64) {
                return Err(gguf_err(format!(
                    "{}: element count of ne = {ne:?} overflows i64",
                    what("ne")
                )));
            }
            let type_id = self.u32(&|| what("type"))?;
            let offset = self.u64(&|| what("offset"))?;
            let ggml_type = GgmlType::from_id(type_id, &architecture);
            let size = ggml_type.byte_size(&ne).map_err(|e| {
                gguf_err(format!(
                    "tensor {name:?} of type {ggml_type} with ne = {ne:?}: {e}"
                ))
            })?;
            if offset % alignment != 0 {
                return Err(gguf_err(format!(
                    "tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}"
                )));
            }
            tensor_index.insert(name.clone(), tensors.len());
            tensors.push(GgufTensorInfo {
                name,
                ne,
                type_id,
                ggml_type,
                offset,
                size,
            });
        }

        // 6. data section
        let header_end = self.pos as u64;
        let data_offset = if tensors.is_empty() {
            header_end
        } else {
            header_end.div_ceil(alignment).saturating_mul(alignment)
        };
        let file_len = self.buf.len() as u64;
        if !tensors.is_empty() && data_offset > file_len {
            return Err(gguf_err(format!(
                "truncated before the data section: it starts at {data_offset}, the file has {file_len} bytes"
            )));
        }
        let data_len = file_len.saturating_sub(data_offset);

        // Every tensor inside the data section, no two overlapping.
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| tensors.get(i).map(|t| t.offset));
        let mut prev: Option<(&str, u64)> = None; // (name, end) of the previous tensor of known size
        for &i in &order {
            let Some(t) = tensors.get(i) else { continue };
            if t.offset > data_len {
                return Err(gguf_err(format!(
                    "tensor {:?}: offset {} is past the end of the data section ({data_len} bytes; file truncated?)",
                    t.name, t.offset
                )));
            }
            if let Some((pname, pend)) = prev {
                if t.offset < pend {
                    return Err(gguf_err(format!(
                        "tensor {:?} at data offset {} overlaps tensor {pname:?}, which ends at {pend}",
                        t.name, t.offset
                    )));
                }
            }
            if let Some(size) = t.size {
                let end = t.offset.checked_add(size).filter(|&e| e <= data_len).ok_or_else(|| {
                    gguf_err(format!(
                        "tensor {:?}: bytes {}..{} (+{size}) run past the end of the data section ({data_len} bytes; file truncated?)",
                        t.name,
                        t.offset,
                        t.offset.saturating_add(size),
                    ))
                })?;
                prev = Some((t.name.as_str(), end));
            }
        }

        Ok(Parsed {
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
}
