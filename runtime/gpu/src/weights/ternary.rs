//! Ternary weights in tern's packed layouts (2-bit, base-3), with their scales.

use tern_format::{ternary, FloatType, TernaryLayout};

use crate::device::check::{split_rows, u32_of};
use crate::device::context::GpuContext;
use crate::error::{GpuError, Result};
use crate::weights::Part;

/// Rows per workgroup of the GEMV kernels (256 invocations, 32 per row).
pub(crate) const GEMV_ROWS_PER_WG: u64 = 8;
/// Per-row group sums the ternary GEMV keeps in workgroup memory (`GSUM` / rows per workgroup):
/// a weight with more scale groups per row is refused at upload.
pub const TERNARY_MAX_GROUPS_PER_ROW: u64 = 2048 / GEMV_ROWS_PER_WG;
/// The same for the wide GEMV (`ternary_gemv_wide.wgsl`, `GSUM` = 1024): weights with more groups
/// per row take the unfused path.
pub const TERNARY_WIDE_MAX_GROUPS_PER_ROW: u64 = 1024 / GEMV_ROWS_PER_WG;

/// A ternary weight on the GPU, in tern's packed layout, split by rows into bindings of at most
/// [`GpuContext::binding_limit`] bytes (each part: its rows' code words, then its scales).
#[derive(Debug)]
pub struct TernaryWeight {
    pub layout: TernaryLayout,
    pub rows: u64,
    pub cols: u64,
    pub group: u32,
    pub scale_type: FloatType,
    /// Rows interleaved in pairs (a gate row, then its up row: `model/load.rs`'s
    /// `interleave_gate_up`); a per-tensor scale (`group` 0) is then two scales, the gate's and
    /// the up projection's, for even and odd rows. Parts hold whole pairs.
    pub(crate) pairs: bool,
    pub(crate) parts: Vec<Part>,
}

impl TernaryWeight {
    /// Upload the bytes of an `Encoding::Ternary` tensor (`rows × cols`).
    pub fn upload(
        ctx: &GpuContext,
        layout: TernaryLayout,
        rows: u64,
        cols: u64,
        group: u32,
        scale_type: FloatType,
        bytes: &[u8],
    ) -> Result<Self> {
        const OP: &str = "ternary upload";
        let t = ternary::TernaryRef::new(layout, rows, cols, group, scale_type, bytes)?;
        if cols == 0 || rows == 0 {
            return Err(GpuError::shape(OP, format!("empty {rows} × {cols} tensor")));
        }
        Self::from_codes(
            ctx,
            (layout, rows, cols, group, scale_type),
            t.codes(),
            t.scales(),
            false,
        )
    }

    /// Upload rows interleaved in pairs (see [`TernaryWeight::pairs`]): `codes` of `rows` (even)
    /// rows, `scales` as the pairs say (group 0: two scales). The caller interleaved them from two
    /// checked tensors (`model/load.rs`).
    pub(crate) fn upload_pairs(
        ctx: &GpuContext,
        shape: (TernaryLayout, u64, u64, u32, FloatType),
        codes: &[u8],
        scales: &[u8],
    ) -> Result<Self> {
        Self::from_codes(ctx, shape, codes, scales, true)
    }

    fn from_codes(
        ctx: &GpuContext,
        (layout, rows, cols, group, scale_type): (TernaryLayout, u64, u64, u32, FloatType),
        codes: &[u8],
        scales: &[u8],
        pairs: bool,
    ) -> Result<Self> {
        const OP: &str = "ternary upload";
        if cols == 0 || rows == 0 || (pairs && rows % 2 != 0) {
            return Err(GpuError::shape(
                OP,
                format!("{rows} × {cols} tensor (empty, or odd rows for row pairs)"),
            ));
        }
        u32_of(OP, "cols", cols)?;
        u32_of(OP, "rows", rows)?;
        let gpr = if group == 0 {
            1
        } else {
            cols / u64::from(group)
        };
        if gpr > TERNARY_MAX_GROUPS_PER_ROW {
            return Err(GpuError::shape(
                OP,
                format!(
                    "{gpr} scale groups per row (group {group}); the kernel holds at most {TERNARY_MAX_GROUPS_PER_ROW}"
                ),
            ));
        }
        let ss = scale_type.size() as u64;
        let row_bytes = ternary::words_per_row(layout, cols) * 4;
        // a per-tensor scale: one (two for pairs) in every part
        let n_tensor_scales = if pairs { 2 } else { 1 };
        let scale_bytes = |r: u64| -> u64 {
            let n = if group == 0 { n_tensor_scales } else { r * gpr };
            (n * ss).div_ceil(4) * 4
        };
        // pairs: split whole pairs (units of 2 rows)
        let unit = if pairs { 2 } else { 1 };
        let ranges = split_rows(
            "ternary weight",
            rows / unit,
            row_bytes * unit,
            ctx.binding_limit(),
            |r| scale_bytes(r * unit) + 12, // + the padding to 16 bytes
        )?
        .into_iter()
        .map(|r| r.start * unit..r.end * unit);
        let mut parts = Vec::new();
        for r in ranges {
            let cb = (r.start * row_bytes) as usize..(r.end * row_bytes) as usize;
            let sb = if group == 0 {
                0..(n_tensor_scales * ss) as usize
            } else {
                (r.start * gpr * ss) as usize..(r.end * gpr * ss) as usize
            };
            let mut data = Vec::with_capacity(cb.len() + sb.len() + 4);
            data.extend_from_slice(codes.get(cb).unwrap_or_default());
            let off = data.len() as u64 / 4;
            data.extend_from_slice(scales.get(sb).unwrap_or_default());
            // the GEMV reads the part as vec4<u32>: a whole number of 16-byte units
            data.resize(data.len().div_ceil(16) * 16, 0);
            let buffer = ctx.upload("ternary weight", &data)?;
            parts.push(Part {
                row0: r.start,
                rows: r.end - r.start,
                buffer,
                scale_word_offset: off,
            });
        }
        Ok(TernaryWeight {
            layout,
            rows,
            cols,
            group,
            scale_type,
            pairs,
            parts,
        })
    }

    /// Scale groups per row (1 for a per-tensor scale).
    pub fn groups_per_row(&self) -> u64 {
        if self.group == 0 {
            1
        } else {
            self.cols / u64::from(self.group)
        }
    }

    /// Number of bindings the weight was split into.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }
}
