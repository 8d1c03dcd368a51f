//! Token-embedding row lookup on the GPU (`embed.wgsl`): rows of a float or ggml-block table
//! dequantized to f32, bit-exact with `tern_format`'s decoding.

use crate::device::check::u32_of;
use crate::device::context::GpuContext;
use crate::device::params::EmbedParams;
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::weights::{FloatWeight, GgmlWeight, NeuzipTensor};

/// A token-embedding table on the GPU: a float matrix, ggml blocks kept as stored, or a NeuZip
/// matrix kept compressed (rows decoded on lookup, [`NeuzipTensor::embed_rows`]).
#[derive(Debug, Clone, Copy)]
pub enum EmbedTable<'a> {
    Float(&'a FloatWeight),
    Ggml(&'a GgmlWeight),
    NeuZip(&'a NeuzipTensor),
}

impl EmbedTable<'_> {
    pub fn rows(&self) -> u64 {
        match self {
            EmbedTable::Float(w) => w.rows,
            EmbedTable::Ggml(w) => w.rows,
            EmbedTable::NeuZip(t) => t.plan.rows(),
        }
    }
    pub fn cols(&self) -> u64 {
        match self {
            EmbedTable::Float(w) => w.cols,
            EmbedTable::Ggml(w) => w.cols,
            EmbedTable::NeuZip(t) => t.plan.row_len,
        }
    }
}

/// `out[i] = table[ids[i]]` dequantized to f32 (`out` = `[n][cols]`), bit-exact with
/// `tern_format`'s decoding. An id ≥ the table's rows reads nothing and yields a row of zeros
/// (the host validates ids before writing them; this only keeps a bad id in bounds).
pub fn embed_rows(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    table: &EmbedTable<'_>,
    ids: &wgpu::Buffer,
    n: u64,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "embed_rows";
    let cols = table.cols();
    let ob = n.saturating_mul(cols).saturating_mul(4);
    if ids.size() < n.saturating_mul(4) || out.size() < ob {
        return Err(GpuError::shape(
            OP,
            format!(
                "ids holds {} bytes, out {} bytes, for {n} rows of {cols}",
                ids.size(),
                out.size()
            ),
        ));
    }
    if ob > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: "embedding output".into(),
            detail: format!("{ob} bytes, the binding limit is {}", ctx.binding_limit()),
        });
    }
    if let EmbedTable::NeuZip(t) = table {
        return t.embed_rows(ctx, enc, ids, n, out);
    }
    let gx = u32_of(OP, "column blocks", cols.div_ceil(256))?;
    let gy = u32_of(OP, "ids", n)?;
    let total_rows = u32_of(OP, "rows", table.rows())?;
    let mut params = EmbedParams {
        cols: u32_of(OP, "cols", cols)?,
        row0: 0,
        rows: 0,
        total_rows,
        elem_offset: 0,
        row_bytes: 0,
        first_part: 1,
        n: gy,
    };
    let mut launch = |key: KernelKey, p: &EmbedParams, buf: &wgpu::Buffer| -> Result<()> {
        let pbuf = ctx.uniform(bytemuck::bytes_of(p))?;
        ctx.dispatch(enc, key, &[&pbuf, buf, ids, out], (gx, gy, 1))
    };
    match table {
        EmbedTable::Float(w) => {
            for (i, part) in w.parts.iter().enumerate() {
                params.row0 = u32_of(OP, "row0", part.row0)?;
                params.rows = u32_of(OP, "rows", part.rows)?;
                params.elem_offset = u32_of(OP, "elem_offset", part.elem_offset)?;
                params.first_part = u32::from(i == 0);
                launch(KernelKey::EmbedFloat(w.dtype), &params, &part.buffer)?;
            }
        }
        EmbedTable::Ggml(w) => {
            let row_bytes = w.cols / w.qtype.block_elems() as u64 * w.qtype.block_bytes() as u64;
            params.row_bytes = u32_of(OP, "row bytes", row_bytes)?;
            for (i, (row0, rows, buffer)) in w.part_views().enumerate() {
                params.row0 = u32_of(OP, "row0", row0)?;
                params.rows = u32_of(OP, "rows", rows)?;
                params.first_part = u32::from(i == 0);
                launch(KernelKey::EmbedGgml(w.qtype), &params, buffer)?;
            }
        }
        EmbedTable::NeuZip(_) => {}
    }
    Ok(())
}
