//! Float weights kept in their stored form (f16, bf16, Q6_K, NeuZip), decoded to f32 a row or a
//! row tile at a time when a product or an embedding lookup needs them.
//!
//! The decoded values are exactly those a whole-tensor decode gives (f16/bf16 → f32 is exact, Q6_K
//! and NeuZip decode deterministically), and the products then run the same f32 code on them, so
//! results are bit-identical to widening everything to f32 at load — at half (f16/bf16), ~0.2×
//! (Q6_K) or less (NeuZip) of the memory.
//!
//! **NeuZip** blobs are cut into independently decodable blocks that follow rows
//! (`tern_format::neuzip`, "Blocks and rows"), so they stay compressed: a product decodes one tile
//! of whole blocks at a time ([`NeuZipRows::tile_rows`] rows, the matmul's row chunks are aligned
//! to it), an embedding lookup decodes the block holding its row up to that row. The blob is parsed
//! once at load and every block is decoded once there (tile by tile, nothing kept) so that a
//! damaged stream is refused at load, not in the middle of a generation.

use half::slice::HalfFloatSliceExt;
use tern_format::neuzip::Plan;
use tern_format::FloatType;

use crate::error::{check_len, ReferenceError, Result};

/// A NeuZip-compressed `[rows, cols]` float tensor.
#[derive(Debug, Clone)]
pub struct NeuZipRows {
    blob: Vec<u8>,
    plan: Plan,
}

impl NeuZipRows {
    /// Keep `blob` (a NeuZip stream of `rows × cols` elements of `dtype` with `mantissa_bits`),
    /// after checking that it describes this tensor and that every block decodes.
    pub fn new(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: FloatType,
        mantissa_bits: u8,
        blob: &[u8],
    ) -> Result<Self> {
        let plan = Plan::parse(blob)?;
        if plan.dtype != dtype
            || plan.mantissa_bits != mantissa_bits
            || plan.row_len != cols.max(1) as u64
            || Some(plan.n_elements) != (rows as u64).checked_mul(cols as u64)
        {
            return Err(ReferenceError::TensorShape {
                name: name.into(),
                expected: vec![rows as u64, cols as u64],
                found: vec![plan.n_elements / plan.row_len.max(1), plan.row_len],
            });
        }
        let nz = Self {
            blob: blob.to_vec(),
            plan,
        };
        let tile = nz.tile_rows() * 64usize.div_ceil(nz.tile_rows());
        let mut r = 0;
        while r < rows {
            let n = tile.min(rows - r);
            nz.raw_rows(r, n)?;
            r += n;
        }
        Ok(nz)
    }

    /// The decoded element type.
    pub fn dtype(&self) -> FloatType {
        self.plan.dtype
    }

    /// Rows per NeuZip block (1 when a row spans several blocks): tiles of a multiple of this
    /// decode no block twice.
    pub fn tile_rows(&self) -> usize {
        if self.plan.blocks_per_row == 1 {
            (self.plan.rows_per_block as usize).max(1)
        } else {
            1
        }
    }

    /// Bytes held (the compressed stream).
    pub fn resident_bytes(&self) -> usize {
        self.blob.len()
    }

    /// Rows `r0 .. r0 + n` as raw little-endian elements of [`Self::dtype`].
    pub fn raw_rows(&self, r0: usize, n: usize) -> Result<Vec<u8>> {
        Ok(self.plan.decode_rows(&self.blob, r0 as u64, n as u64)?)
    }
}

/// Raw little-endian elements of `t` into f32 (`out.len()` elements).
pub(crate) fn raw_to_f32(t: FloatType, raw: &[u8], out: &mut [f32]) -> Result<()> {
    check_len("raw_to_f32", "raw", raw.len(), out.len() * t.size())?;
    match t {
        FloatType::F32 => {
            for (o, b) in out.iter_mut().zip(raw.chunks_exact(4)) {
                if let &[a, b, c, d] = b {
                    *o = f32::from_le_bytes([a, b, c, d]);
                }
            }
        }
        FloatType::F16 => match bytemuck::try_cast_slice::<u8, half::f16>(raw) {
            Ok(h) => h.convert_to_f32_slice(out),
            Err(_) => {
                for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
                    if let &[a, b] = b {
                        *o = half::f16::from_le_bytes([a, b]).to_f32();
                    }
                }
            }
        },
        FloatType::Bf16 => {
            for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
                if let &[a, b] = b {
                    *o = half::bf16::from_le_bytes([a, b]).to_f32();
                }
            }
        }
    }
    Ok(())
}

/// Little-endian 16-bit floats as a vector of `T` (aligned, so rows convert with SIMD).
pub(crate) fn halves<T: bytemuck::Pod>(bytes: &[u8], from: fn([u8; 2]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(2)
        .map(|b| match b {
            &[x, y] => from([x, y]),
            _ => from([0, 0]),
        })
        .collect()
}
