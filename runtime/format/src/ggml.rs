//! ggml block formats (PLACEHOLDER signatures; being written by the ggml helper).
use crate::error::{FormatError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockType { Q8_0, Q4_0, Q4_1, Tq1_0, Tq2_0 }

impl BlockType {
    pub fn block_elems(self) -> usize { match self { BlockType::Tq1_0 | BlockType::Tq2_0 => 256, _ => 32 } }
    pub fn block_bytes(self) -> usize { match self { BlockType::Q8_0 => 34, BlockType::Q4_0 => 18, BlockType::Q4_1 => 20, BlockType::Tq1_0 => 54, BlockType::Tq2_0 => 66 } }
}

pub fn dequantize(_bt: BlockType, _bytes: &[u8], _n: usize) -> Result<Vec<f32>> {
    Err(FormatError::InvalidArgument("not yet written".into()))
}
