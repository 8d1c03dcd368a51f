//! ggml tensor types: ids, block sizes, byte sizes (incl. the bitnet.cpp fork's ids).

use super::*;

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
pub(super) fn fork_ids(arch: &str) -> (bool, bool) {
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
            GgmlType::Q5_0 => Some(BlockType::Q5_0),
            GgmlType::Q5_1 => Some(BlockType::Q5_1),
            GgmlType::Q2_K => Some(BlockType::Q2K),
            GgmlType::Q3_K => Some(BlockType::Q3K),
            GgmlType::Q4_K => Some(BlockType::Q4K),
            GgmlType::Q5_K => Some(BlockType::Q5K),
            GgmlType::IQ4_NL => Some(BlockType::Iq4Nl),
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
