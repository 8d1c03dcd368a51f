//! ggml-block weights (Q8_0, Q4_0, Q4_1, Q6_K), blocks kept as stored.

use crate::device::check::{split_rows, u32_of};
use crate::device::context::GpuContext;
use crate::device::pipeline::GgmlType;
use crate::error::{GpuError, Result};
use crate::weights::Part;

/// A ggml-block weight on the GPU, blocks kept as stored, split by rows into bindings.
#[derive(Debug)]
pub struct GgmlWeight {
    pub qtype: GgmlType,
    pub rows: u64,
    pub cols: u64,
    /// Rows interleaved in pairs (a gate row, then its up row: `model/load.rs`'s
    /// `interleave_gate_up`); parts hold whole pairs.
    pub(crate) pairs: bool,
    pub(crate) parts: Vec<Part>,
}

impl GgmlWeight {
    /// Upload `rows × cols` elements of `qtype` blocks (`cols` a multiple of the block:
    /// 32 elements, 256 for Q6_K).
    pub fn upload(
        ctx: &GpuContext,
        qtype: GgmlType,
        rows: u64,
        cols: u64,
        bytes: &[u8],
    ) -> Result<Self> {
        Self::upload_rows(ctx, qtype, rows, cols, bytes, false)
    }

    /// [`GgmlWeight::upload`] of rows interleaved in pairs (`rows` even; see
    /// [`GgmlWeight::pairs`]).
    pub(crate) fn upload_pairs(
        ctx: &GpuContext,
        qtype: GgmlType,
        rows: u64,
        cols: u64,
        bytes: &[u8],
    ) -> Result<Self> {
        Self::upload_rows(ctx, qtype, rows, cols, bytes, true)
    }

    fn upload_rows(
        ctx: &GpuContext,
        qtype: GgmlType,
        rows: u64,
        cols: u64,
        bytes: &[u8],
        pairs: bool,
    ) -> Result<Self> {
        const OP: &str = "ggml upload";
        if qtype.gpu_qtype().is_none() {
            return Err(GpuError::shape(
                OP,
                format!("{} blocks have no GPU kernel", qtype.name()),
            ));
        }
        let be = qtype.block_elems() as u64;
        if cols == 0 || cols % be != 0 || rows == 0 || (pairs && rows % 2 != 0) {
            return Err(GpuError::shape(
                OP,
                format!(
                    "{rows} × {cols} (columns must be a positive multiple of {be}; rows even \
                     for row pairs)"
                ),
            ));
        }
        u32_of(OP, "rows", rows)?;
        let row_bytes = cols / be * qtype.block_bytes() as u64;
        if rows.checked_mul(row_bytes) != Some(bytes.len() as u64) {
            return Err(GpuError::shape(
                OP,
                format!("{} bytes for {rows} × {cols} {qtype:?}", bytes.len()),
            ));
        }
        // +4: the kernel's unaligned 32-bit loads may touch the word after the last byte.
        // pairs: split whole pairs (units of 2 rows)
        let unit = if pairs { 2 } else { 1 };
        let ranges = split_rows(
            "ggml weight",
            rows / unit,
            row_bytes * unit,
            ctx.binding_limit(),
            |_| 4,
        )?
        .into_iter()
        .map(|r| r.start * unit..r.end * unit);
        let mut parts = Vec::new();
        for r in ranges {
            let b = (r.start * row_bytes) as usize..(r.end * row_bytes) as usize;
            let mut data = bytes.get(b).unwrap_or_default().to_vec();
            data.extend_from_slice(&[0; 4]);
            parts.push(Part {
                row0: r.start,
                rows: r.end - r.start,
                buffer: ctx.upload("ggml weight", &data)?,
                scale_word_offset: 0,
            });
        }
        Ok(GgmlWeight {
            qtype,
            rows,
            cols,
            pairs,
            parts,
        })
    }

    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// `(first row, rows, buffer)` of each part, for kernels that bind the parts themselves (`cce`).
    pub(crate) fn part_views(&self) -> impl Iterator<Item = (u64, u64, &wgpu::Buffer)> {
        self.parts.iter().map(|p| (p.row0, p.rows, &p.buffer))
    }
}
