//! Float matrices on the GPU (f32 / f16 / bf16, row-major): raw float heads and NeuZip tensors
//! decoded into scratch, split by rows into parts that each fit one binding.

use bytemuck::{Pod, Zeroable};
use tern_format::FloatType;

use crate::context::{split_rows, GpuContext};
use crate::error::{GpuError, Result};
use crate::pipeline::KernelKey;
use crate::plan::Recorder;

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
    parts: Vec<FloatPart>,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    elem_offset: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

fn u32_of(op: &'static str, what: &str, v: u64) -> Result<u32> {
    u32::try_from(v).map_err(|_| GpuError::shape(op, format!("{what} = {v} does not fit in u32")))
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

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` with f32 activations `x` = `[n_tokens][cols]`.
pub fn float_gemv(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &FloatWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "float_gemv";
    let xb = n_tokens.saturating_mul(w.cols).saturating_mul(4);
    let yb = n_tokens.saturating_mul(w.rows).saturating_mul(4);
    if x.size() < xb || y.size() < yb {
        return Err(GpuError::shape(OP, "x or y too small"));
    }
    if xb > ctx.binding_limit() || yb > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: "float_gemv operand".into(),
            detail: format!(
                "{xb} / {yb} bytes, the binding limit is {}",
                ctx.binding_limit()
            ),
        });
    }
    let nt = u32_of(OP, "n_tokens", n_tokens)?;
    for part in &w.parts {
        let p = Params {
            rows: u32_of(OP, "rows", part.rows)?,
            cols: u32_of(OP, "cols", w.cols)?,
            elem_offset: u32_of(OP, "elem_offset", part.elem_offset)?,
            out_stride: u32_of(OP, "rows", w.rows)?,
            row0: u32_of(OP, "row0", part.row0)?,
            n_tokens: nt,
            _pad0: 0,
            _pad1: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(8))?;
        ctx.dispatch(
            enc,
            KernelKey::FloatGemv(w.dtype),
            &[&params, &part.buffer, x, y],
            (gx, nt, 1),
        )?;
    }
    Ok(())
}
