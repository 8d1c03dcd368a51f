//! Float matrices on the GPU (f32 / f16 / bf16, row-major): raw float heads and NeuZip tensors
//! decoded into scratch, split by rows into parts that each fit one binding — and the kernels
//! around the model's ends: the float GEMV (lm heads), the token-embedding lookup
//! ([`embed_rows`], float or ggml-block tables) and the top-k of the logits ([`topk`]).

use bytemuck::{Pod, Zeroable};
use tern_format::FloatType;

use crate::context::{split_rows, GpuContext};
use crate::error::{GpuError, Result};
use crate::ops::GgmlWeight;
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

use crate::ops::u32_of;

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

// ---------------------------------------------------------------------------------------------
// Embedding lookup

/// A token-embedding table on the GPU: a float matrix, or ggml blocks kept as stored.
#[derive(Debug, Clone, Copy)]
pub enum EmbedTable<'a> {
    Float(&'a FloatWeight),
    Ggml(&'a GgmlWeight),
}

impl EmbedTable<'_> {
    pub fn rows(&self) -> u64 {
        match self {
            EmbedTable::Float(w) => w.rows,
            EmbedTable::Ggml(w) => w.rows,
        }
    }
    pub fn cols(&self) -> u64 {
        match self {
            EmbedTable::Float(w) => w.cols,
            EmbedTable::Ggml(w) => w.cols,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct EmbedParams {
    cols: u32,
    row0: u32,
    rows: u32,
    total_rows: u32,
    elem_offset: u32,
    row_bytes: u32,
    first_part: u32,
    n: u32,
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
            let row_bytes = w.cols / w.qtype.block_elems() * w.qtype.block_bytes();
            params.row_bytes = u32_of(OP, "row bytes", row_bytes)?;
            for (i, (row0, rows, buffer)) in w.part_views().enumerate() {
                params.row0 = u32_of(OP, "row0", row0)?;
                params.rows = u32_of(OP, "rows", rows)?;
                params.first_part = u32::from(i == 0);
                launch(KernelKey::EmbedGgml(w.qtype), &params, buffer)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Top-k

/// Largest `k` the top-k kernel takes.
pub const TOPK_MAX_K: u32 = 64;
/// Logits per workgroup of the top-k kernel's first pass.
const TOPK_PER_WG: u64 = 2048;

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct TopkParams {
    n_in: u32,
    k: u32,
    per: u32,
    _pad: u32,
}

/// The `k` largest of the `n` logits in `logits` (one row), sorted by value descending, ties to
/// the lower index: `out` = `[k]` pairs of (u32 id, f32 value as bits). Slots past `n` (when
/// `n < k`) hold `(u32::MAX, -inf)`; NaN logits are never picked. For sampling on the GPU: the
/// host reads `8·k` bytes instead of the vocabulary. Two passes when `n` exceeds one workgroup's
/// slice (2048 logits): per-workgroup top-k into a scratch buffer allocated here (once per
/// recording), then their merge.
pub fn topk(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    logits: &wgpu::Buffer,
    n: u64,
    k: u32,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "topk";
    if n == 0 || k == 0 || k > TOPK_MAX_K {
        return Err(GpuError::shape(
            OP,
            format!("n = {n}, k = {k}: n must be ≥ 1 and k in 1..={TOPK_MAX_K}"),
        ));
    }
    let lb = n.saturating_mul(4);
    let ob = u64::from(k) * 8;
    if logits.size() < lb || out.size() < ob {
        return Err(GpuError::shape(
            OP,
            format!(
                "logits holds {} bytes (needs {lb}), out {} (needs {ob})",
                logits.size(),
                out.size()
            ),
        ));
    }
    if lb > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: "top-k logits".into(),
            detail: format!("{lb} bytes, the binding limit is {}", ctx.binding_limit()),
        });
    }
    let n_wg = n.div_ceil(TOPK_PER_WG);
    let p1 = TopkParams {
        n_in: u32_of(OP, "n", n)?,
        k,
        per: TOPK_PER_WG as u32, // ok: a small constant
        _pad: 0,
    };
    let params1 = ctx.uniform(bytemuck::bytes_of(&p1))?;
    let gx = u32_of(OP, "workgroups", n_wg)?;
    let pass1 = KernelKey::TopK { merge: false };
    if n_wg == 1 {
        return ctx.dispatch(enc, pass1, &[&params1, logits, out], (1, 1, 1));
    }
    let scratch = ctx.zeroed("top-k candidates", n_wg * ob)?;
    ctx.dispatch(enc, pass1, &[&params1, logits, &scratch], (gx, 1, 1))?;
    let p2 = TopkParams {
        n_in: u32_of(OP, "candidates", n_wg * u64::from(k))?,
        k,
        per: 0,
        _pad: 0,
    };
    let params2 = ctx.uniform(bytemuck::bytes_of(&p2))?;
    ctx.dispatch(
        enc,
        KernelKey::TopK { merge: true },
        &[&params2, &scratch, out],
        (1, 1, 1),
    )
}
