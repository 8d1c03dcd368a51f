//! Element types: the raw float types and the ternary code layouts. A leaf module (it uses nothing
//! of this crate), so the codecs ([`crate::neuzip`], [`crate::ternary`]) and the [`crate::encoding`]
//! that dispatches to them all name these types without importing each other.

use serde::{Deserialize, Serialize};

/// A raw float element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FloatType {
    F32,
    F16,
    Bf16,
}

impl FloatType {
    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            FloatType::F32 => 4,
            FloatType::F16 | FloatType::Bf16 => 2,
        }
    }

    /// Lowercase name (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            FloatType::F32 => "f32",
            FloatType::F16 => "f16",
            FloatType::Bf16 => "bf16",
        }
    }
}

/// Number of mantissa bits of a float type (the lossless `mantissa_bits` of NeuZip).
pub fn full_mantissa_bits(t: FloatType) -> u8 {
    match t {
        FloatType::F32 => 23,
        FloatType::F16 => 10,
        FloatType::Bf16 => 7,
    }
}

/// Ternary code layouts. Both keep each row starting on a 4-byte word so a GPU invocation reads
/// whole `u32` words of one row (see [`crate::ternary`] for the exact bit positions and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TernaryLayout {
    /// 2-bit codes `t + 1`, 16 per little-endian `u32`, element `j` of the word at bits `2j..2j+2`.
    #[serde(rename = "2bit")]
    Bits2,
    /// Base-3, 5 trits per byte (1.6 bits per weight), 20 per `u32` word.
    Base3,
}
