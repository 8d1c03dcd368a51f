//! NeuZip (PLACEHOLDER signatures; being written by the NeuZip helper).
use crate::encoding::FloatType;
use crate::error::{FormatError, Result};

pub fn encode(_dtype: FloatType, _mantissa_bits: u8, _data: &[u8], _row_len: usize) -> Result<Vec<u8>> {
    Err(FormatError::InvalidArgument("not yet written".into()))
}
pub fn decode(_blob: &[u8]) -> Result<Vec<u8>> { Err(FormatError::InvalidArgument("not yet written".into())) }
