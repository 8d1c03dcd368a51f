//! GGUF metadata values and arrays.

use super::*;

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
