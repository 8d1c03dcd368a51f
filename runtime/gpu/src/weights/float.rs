//! Float matrices on the GPU (f32 / f16 / bf16, row-major): raw float heads and NeuZip tensors
//! decoded into buffers, split by rows into parts that each fit one binding.

use tern_format::FloatType;

use crate::device::check::{split_rows, u32_of};
use crate::device::context::GpuContext;
use crate::error::{GpuError, Result};

/// Rows `row0 .. row0 + rows` of a float matrix, starting at element `elem_offset` of `buffer`.
#[derive(Debug, Clone)]
pub struct FloatPart {
    pub buffer: wgpu::Buffer,
    pub row0: u64,
    pub rows: u64,
    pub elem_offset: u64,
}

/// A row-major float matrix in parts.
#[derive(Debug, Clone)]
pub struct FloatWeight {
    pub dtype: FloatType,
    pub rows: u64,
    pub cols: u64,
    pub(crate) parts: Vec<FloatPart>,
}

impl FloatWeight {
    /// Upload `rows × cols` elements of `dtype` (little-endian, row-major).
    pub fn upload(
        ctx: &GpuContext,
        dtype: FloatType,
        rows: u64,
        cols: u64,
        bytes: &[u8],
    ) -> Result<Self> {
        const OP: &str = "float upload";
        let es = dtype.size() as u64;
        if rows == 0
            || cols == 0
            || rows.checked_mul(cols).and_then(|n| n.checked_mul(es)) != Some(bytes.len() as u64)
        {
            return Err(GpuError::shape(
                OP,
                format!("{} bytes for {rows} × {cols} {dtype:?}", bytes.len()),
            ));
        }
        u32_of(OP, "cols", cols)?;
        let row_bytes = cols * es;
        let ranges = split_rows("float weight", rows, row_bytes, ctx.binding_limit(), |_| 4)?;
        let mut parts = Vec::with_capacity(ranges.len());
        for r in ranges {
            let b = (r.start * row_bytes) as usize..(r.end * row_bytes) as usize;
            parts.push(FloatPart {
                buffer: ctx.upload("float weight", bytes.get(b).unwrap_or_default())?,
                row0: r.start,
                rows: r.end - r.start,
                elem_offset: 0,
            });
        }
        Ok(FloatWeight {
            dtype,
            rows,
            cols,
            parts,
        })
    }

    /// A matrix over existing buffers (e.g. NeuZip chunks decoded into scratch). The parts must
    /// cover rows `0..rows` in order, each inside its buffer.
    pub fn from_parts(
        dtype: FloatType,
        rows: u64,
        cols: u64,
        parts: Vec<FloatPart>,
    ) -> Result<Self> {
        const OP: &str = "float parts";
        let es = dtype.size() as u64;
        let mut next = 0;
        for p in &parts {
            if p.row0 != next {
                return Err(GpuError::shape(
                    OP,
                    format!("part starts at row {}, expected {next}", p.row0),
                ));
            }
            let end_elem = p.elem_offset + p.rows * cols;
            if end_elem.saturating_mul(es) > p.buffer.size() + 3 || end_elem >= 1 << 32 {
                return Err(GpuError::shape(OP, "part extends past its buffer"));
            }
            next += p.rows;
        }
        if next != rows {
            return Err(GpuError::shape(
                OP,
                format!("parts cover {next} of {rows} rows"),
            ));
        }
        Ok(FloatWeight {
            dtype,
            rows,
            cols,
            parts,
        })
    }

    pub fn parts(&self) -> &[FloatPart] {
        &self.parts
    }

    /// Bytes of the matrix's elements.
    pub fn bytes(&self) -> u64 {
        self.rows * self.cols * self.dtype.size() as u64
    }
}
