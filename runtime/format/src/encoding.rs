//! Tensor encodings: what the bytes of one tensor mean, how many there must be, and how to turn
//! them back into numbers.

use serde::{Deserialize, Serialize};

pub use crate::dtype::{full_mantissa_bits, FloatType, TernaryLayout};
use crate::error::{FormatError, Result};
use crate::{ggml, neuzip, ternary};

/// How one tensor's bytes are encoded. Serialized into the tensor directory as
/// `{"type": "...", ...params}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Encoding {
    /// Raw little-endian floats, row-major.
    F32,
    F16,
    Bf16,
    /// ggml blocks kept as they are (32 elements per block, blocks of one row contiguous).
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q4_0")]
    Q4_0,
    #[serde(rename = "q4_1")]
    Q4_1,
    /// ggml's Q6_K super-blocks (256 elements, 210 bytes; rows a whole number of blocks), kept as
    /// they are: llama-quantize gives the token embedding of ternary models this type.
    #[serde(rename = "q6_k")]
    Q6K,
    /// ggml's Q5_0 / Q5_1 / IQ4_NL blocks (32 elements) and the K-quant super-blocks Q2_K, Q3_K,
    /// Q4_K, Q5_K (256 elements; rows a whole number of blocks), kept as they are
    /// ([`ggml::BlockType`] has their sizes and byte layouts).
    #[serde(rename = "q5_0")]
    Q5_0,
    #[serde(rename = "q5_1")]
    Q5_1,
    #[serde(rename = "q2_k")]
    Q2K,
    #[serde(rename = "q3_k")]
    Q3K,
    #[serde(rename = "q4_k")]
    Q4K,
    #[serde(rename = "q5_k")]
    Q5K,
    #[serde(rename = "iq4_nl")]
    Iq4Nl,
    /// Ternary codes followed by the scales. `group` is the number of consecutive elements of a row
    /// sharing one scale (0 = one scale for the whole tensor). Scales are `scale_type` (f32 or f16).
    Ternary {
        layout: TernaryLayout,
        group: u32,
        scale_type: FloatType,
    },
    /// NeuZip-compressed floats (see [`crate::neuzip`]); `dtype` is the type the tensor decodes to,
    /// `mantissa_bits` the number of mantissa bits kept (the full width for lossless).
    #[serde(rename = "neuzip")]
    NeuZip {
        dtype: FloatType,
        mantissa_bits: u8,
    },
}

impl Encoding {
    /// A short name for tables and JSON (`inspect`).
    pub fn name(&self) -> String {
        match self {
            Encoding::F32 => "f32".into(),
            Encoding::F16 => "f16".into(),
            Encoding::Bf16 => "bf16".into(),
            Encoding::Q8_0
            | Encoding::Q4_0
            | Encoding::Q4_1
            | Encoding::Q6K
            | Encoding::Q5_0
            | Encoding::Q5_1
            | Encoding::Q2K
            | Encoding::Q3K
            | Encoding::Q4K
            | Encoding::Q5K
            | Encoding::Iq4Nl => self.ggml_block().map_or("", |b| b.name()).into(),
            Encoding::Ternary {
                layout: TernaryLayout::Bits2,
                ..
            } => "ternary-2bit".into(),
            Encoding::Ternary {
                layout: TernaryLayout::Base3,
                ..
            } => "ternary-base3".into(),
            Encoding::NeuZip {
                dtype,
                mantissa_bits,
            } => {
                let full = full_mantissa_bits(*dtype);
                let d = dtype.name();
                if *mantissa_bits >= full {
                    format!("neuzip-{d}")
                } else {
                    format!("neuzip-{d}-m{mantissa_bits}")
                }
            }
        }
    }

    /// The ggml block type of a ggml encoding (its sizes are in the [`ggml::BlockType`] table),
    /// `None` for the others.
    pub fn ggml_block(&self) -> Option<ggml::BlockType> {
        match self {
            Encoding::Q8_0 => Some(ggml::BlockType::Q8_0),
            Encoding::Q4_0 => Some(ggml::BlockType::Q4_0),
            Encoding::Q4_1 => Some(ggml::BlockType::Q4_1),
            Encoding::Q6K => Some(ggml::BlockType::Q6K),
            Encoding::Q5_0 => Some(ggml::BlockType::Q5_0),
            Encoding::Q5_1 => Some(ggml::BlockType::Q5_1),
            Encoding::Q2K => Some(ggml::BlockType::Q2K),
            Encoding::Q3K => Some(ggml::BlockType::Q3K),
            Encoding::Q4K => Some(ggml::BlockType::Q4K),
            Encoding::Q5K => Some(ggml::BlockType::Q5K),
            Encoding::Iq4Nl => Some(ggml::BlockType::Iq4Nl),
            _ => None,
        }
    }

    /// The encoding that keeps blocks of `bt` as they are, `None` for the block types tern re-lays
    /// out (TQ1_0/TQ2_0 become [`Encoding::Ternary`]). The inverse of [`Encoding::ggml_block`].
    pub fn from_ggml_block(bt: ggml::BlockType) -> Option<Encoding> {
        match bt {
            ggml::BlockType::Q8_0 => Some(Encoding::Q8_0),
            ggml::BlockType::Q4_0 => Some(Encoding::Q4_0),
            ggml::BlockType::Q4_1 => Some(Encoding::Q4_1),
            ggml::BlockType::Q6K => Some(Encoding::Q6K),
            ggml::BlockType::Q5_0 => Some(Encoding::Q5_0),
            ggml::BlockType::Q5_1 => Some(Encoding::Q5_1),
            ggml::BlockType::Q2K => Some(Encoding::Q2K),
            ggml::BlockType::Q3K => Some(Encoding::Q3K),
            ggml::BlockType::Q4K => Some(Encoding::Q4K),
            ggml::BlockType::Q5K => Some(Encoding::Q5K),
            ggml::BlockType::Iq4Nl => Some(Encoding::Iq4Nl),
            ggml::BlockType::Tq1_0 | ggml::BlockType::Tq2_0 => None,
        }
    }

    /// [`Encoding::ggml_block`] of an encoding matched as a ggml one.
    fn block(&self) -> Result<ggml::BlockType> {
        self.ggml_block().ok_or_else(|| {
            FormatError::InvalidArgument(format!("{} has no ggml block type", self.name()))
        })
    }

    /// Bits of the `.tern` header `required_features` that a reader must know to decode this.
    pub fn required_feature(&self) -> u64 {
        match self {
            Encoding::NeuZip { .. } => crate::FEATURE_NEUZIP,
            Encoding::Ternary {
                layout: TernaryLayout::Base3,
                ..
            } => crate::FEATURE_TERNARY_BASE3,
            Encoding::Ternary { .. } => crate::FEATURE_TERNARY_2BIT,
            _ => 0,
        }
    }

    /// The exact byte size a tensor of this shape must have, or `None` when the size is only known
    /// from the stream itself (NeuZip: the blob is self-describing and validated on decode).
    pub fn expected_bytes(&self, shape: &[u64]) -> Result<Option<u64>> {
        let n = element_count(shape)?;
        let (rows, cols) = rows_cols(shape)?;
        let mul = |a: u64, b: u64| {
            a.checked_mul(b).ok_or_else(|| FormatError::BadShape {
                what: "tensor".into(),
                detail: format!("byte size of shape {shape:?} overflows"),
            })
        };
        Ok(Some(match self {
            Encoding::F32 => mul(n, 4)?,
            Encoding::F16 | Encoding::Bf16 => mul(n, 2)?,
            Encoding::Q8_0
            | Encoding::Q4_0
            | Encoding::Q4_1
            | Encoding::Q6K
            | Encoding::Q5_0
            | Encoding::Q5_1
            | Encoding::Q2K
            | Encoding::Q3K
            | Encoding::Q4K
            | Encoding::Q5K
            | Encoding::Iq4Nl => {
                let bt = self.block()?;
                let (be, bb) = (bt.block_elems() as u64, bt.block_bytes() as u64);
                if cols % be != 0 {
                    return Err(FormatError::BadShape {
                        what: self.name(),
                        detail: format!("row length {cols} is not a multiple of {be}"),
                    });
                }
                mul(rows, mul(cols / be, bb)?)?
            }
            Encoding::Ternary {
                layout,
                group,
                scale_type,
            } => {
                let codes = ternary::codes_bytes(*layout, rows, cols)?;
                let groups = ternary::scale_count(rows, cols, *group)?;
                codes
                    .checked_add(mul(groups, scale_type.size() as u64)?)
                    .ok_or_else(|| FormatError::out_of_range("ternary tensor", "size overflows"))?
            }
            Encoding::NeuZip { .. } => return Ok(None),
        }))
    }

    /// Decode a whole tensor of this encoding into f32 values (row-major, `shape` order).
    pub fn decode_f32(&self, shape: &[u64], bytes: &[u8]) -> Result<Vec<f32>> {
        let n = usize::try_from(element_count(shape)?).map_err(|_| {
            FormatError::out_of_range("tensor", "too many elements for this platform")
        })?;
        if let Some(expect) = self.expected_bytes(shape)? {
            if expect != bytes.len() as u64 {
                return Err(FormatError::malformed(
                    self.name(),
                    format!(
                        "expected {expect} bytes for shape {shape:?}, found {}",
                        bytes.len()
                    ),
                ));
            }
        }
        let (rows, cols) = rows_cols(shape)?;
        match self {
            Encoding::F32 => Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()),
            Encoding::F16 => Ok(bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()),
            Encoding::Bf16 => Ok(bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()),
            Encoding::Q8_0
            | Encoding::Q4_0
            | Encoding::Q4_1
            | Encoding::Q6K
            | Encoding::Q5_0
            | Encoding::Q5_1
            | Encoding::Q2K
            | Encoding::Q3K
            | Encoding::Q4K
            | Encoding::Q5K
            | Encoding::Iq4Nl => ggml::dequantize(self.block()?, bytes, n),
            Encoding::Ternary {
                layout,
                group,
                scale_type,
            } => {
                let t = ternary::TernaryRef::new(*layout, rows, cols, *group, *scale_type, bytes)?;
                t.dequantize()
            }
            Encoding::NeuZip {
                dtype,
                mantissa_bits,
            } => {
                // The blob is self-describing: it must describe this tensor before we decode it
                // (a mismatch would otherwise decode to wrongly typed or wrongly sized values).
                let plan = neuzip::Plan::parse(bytes)?;
                let row_len = shape.last().copied().unwrap_or(1).max(1);
                if plan.dtype != *dtype
                    || plan.mantissa_bits != *mantissa_bits
                    || plan.n_elements != n as u64
                    || plan.row_len != row_len
                {
                    return Err(FormatError::malformed(
                        "neuzip tensor",
                        format!(
                            "blob holds {} {:?} elements in rows of {} with {} mantissa bits, directory says shape {shape:?} {dtype:?} with {mantissa_bits}",
                            plan.n_elements, plan.dtype, plan.row_len, plan.mantissa_bits
                        ),
                    ));
                }
                let raw = neuzip::decode(bytes)?;
                let dec = FloatType::size(*dtype);
                if Some(raw.len()) != n.checked_mul(dec) {
                    return Err(FormatError::malformed(
                        "neuzip tensor",
                        format!(
                            "decoded {} bytes, shape {shape:?} needs {n} × {dec}",
                            raw.len()
                        ),
                    ));
                }
                let as_raw = match dtype {
                    FloatType::F32 => Encoding::F32,
                    FloatType::F16 => Encoding::F16,
                    FloatType::Bf16 => Encoding::Bf16,
                };
                as_raw.decode_f32(shape, &raw)
            }
        }
    }
}

impl From<FloatType> for Encoding {
    /// The raw encoding of a float type.
    fn from(t: FloatType) -> Self {
        match t {
            FloatType::F32 => Encoding::F32,
            FloatType::F16 => Encoding::F16,
            FloatType::Bf16 => Encoding::Bf16,
        }
    }
}

/// Product of the dimensions, checked for overflow. An empty shape is a scalar (1 element).
pub fn element_count(shape: &[u64]) -> Result<u64> {
    if shape.len() > 4 {
        return Err(FormatError::BadShape {
            what: "tensor".into(),
            detail: format!("{} dimensions (at most 4)", shape.len()),
        });
    }
    shape.iter().try_fold(1u64, |acc, &d| {
        acc.checked_mul(d).ok_or_else(|| FormatError::BadShape {
            what: "tensor".into(),
            detail: format!("element count of shape {shape:?} overflows"),
        })
    })
}

/// A tensor viewed as a matrix: `cols` is the last (contiguous) dimension, `rows` the product of the
/// others. Shapes are outermost-first, as in PyTorch (`[out_features, in_features]`).
pub fn rows_cols(shape: &[u64]) -> Result<(u64, u64)> {
    let n = element_count(shape)?;
    match shape.last() {
        None => Ok((1, 1)),
        Some(&0) => Ok((0, 0)),
        Some(&c) => Ok((n / c, c)),
    }
}
