//! One launcher per kernel: check shapes and sizes (typed errors) → key → bind → dispatch.
//! Launchers record into a caller's `wgpu::CommandEncoder`; nothing waits on the GPU here.

use bytemuck::{Pod, Zeroable};
use tern_format::{neuzip, ternary, FloatType, TernaryLayout};

use crate::context::{split_rows, GpuContext};
use crate::error::{GpuError, Result};
use crate::pipeline::{EltOp, GgmlType, KernelKey};
use crate::plan::Recorder;

/// Rows per workgroup of the GEMV kernels (256 invocations, 32 per row).
const GEMV_ROWS_PER_WG: u64 = 8;
/// Per-row group sums the ternary kernel keeps in workgroup memory (`GSUM` / rows per workgroup).
pub const TERNARY_MAX_GROUPS_PER_ROW: u64 = 2048 / GEMV_ROWS_PER_WG;

pub(crate) fn u32_of(op: &'static str, what: &str, v: u64) -> Result<u32> {
    u32::try_from(v).map_err(|_| GpuError::shape(op, format!("{what} = {v} does not fit in u32")))
}

pub(crate) fn check_binding(ctx: &GpuContext, what: &str, bytes: u64) -> Result<()> {
    if bytes > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: what.into(),
            detail: format!(
                "{bytes} bytes in one binding, the limit is {}",
                ctx.binding_limit()
            ),
        });
    }
    Ok(())
}

pub(crate) fn check_buffer(
    op: &'static str,
    what: &str,
    buf: &wgpu::Buffer,
    need: u64,
) -> Result<()> {
    if buf.size() < need {
        return Err(GpuError::shape(
            op,
            format!("{what} holds {} bytes, needs {need}", buf.size()),
        ));
    }
    Ok(())
}

fn groups_1d(ctx: &GpuContext, n: u64) -> (u32, u32, u32) {
    // Spread over y when x would exceed the per-dimension limit.
    let max = u64::from(ctx.limits.max_compute_workgroups_per_dimension.max(1));
    let x = n.min(max);
    let y = n.div_ceil(max.max(1));
    (x as u32, y.max(1) as u32, 1) // ok: x ≤ max ≤ u32::MAX; y is checked by dispatch
}

// ---------------------------------------------------------------------------------------------
// INT8 activation quantization

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct ActParams {
    cols: u32,
    q_stride: u32,
    n_tokens: u32,
    _pad: u32,
}

/// INT8 activations on the GPU: `q` = `[n_tokens][stride]` u32 words (4 int8 each, zero past
/// `cols`), `s` = `[n_tokens]` f32 multipliers (`x ≈ q / s`).
#[derive(Debug)]
pub struct ActInt8 {
    pub q: wgpu::Buffer,
    pub s: wgpu::Buffer,
    pub n_tokens: u32,
    pub cols: u32,
    /// u32 words per token: `ceil(cols / 80) · 20`, so both ternary layouts (16 and 20 codes per
    /// word) read whole activation words.
    pub stride: u32,
}

/// Words per token of [`ActInt8`] for `cols` activations.
pub fn act_stride_words(cols: u64) -> u64 {
    cols.div_ceil(80) * 20
}

impl ActInt8 {
    /// Buffers for `n_tokens` rows of `cols` activations, filled by [`quantize_act_int8_into`].
    pub fn alloc(ctx: &GpuContext, n_tokens: u64, cols: u64) -> Result<Self> {
        const OP: &str = "quantize_act_int8";
        let stride = act_stride_words(cols);
        let qb = n_tokens.saturating_mul(stride).saturating_mul(4);
        check_binding(ctx, "int8 activations", qb)?;
        Ok(ActInt8 {
            q: ctx.zeroed("int8 activations", qb)?,
            s: ctx.zeroed("activation scales", n_tokens * 4)?,
            n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
            cols: u32_of(OP, "cols", cols)?,
            stride: u32_of(OP, "stride", stride)?,
        })
    }

    /// The same buffers seen as holding only the first `n_tokens` rows.
    pub fn prefix(&self, n_tokens: u32) -> Result<Self> {
        if n_tokens > self.n_tokens {
            return Err(GpuError::shape(
                "quantize_act_int8",
                format!("{n_tokens} rows asked of {}", self.n_tokens),
            ));
        }
        Ok(ActInt8 {
            q: self.q.clone(),
            s: self.s.clone(),
            n_tokens,
            cols: self.cols,
            stride: self.stride,
        })
    }
}

/// Quantize `a.n_tokens` rows of `a.cols` f32 activations from `x` into `a`'s buffers.
pub fn quantize_act_int8_into(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    a: &ActInt8,
) -> Result<()> {
    const OP: &str = "quantize_act_int8";
    let (n_tokens, cols) = (u64::from(a.n_tokens), u64::from(a.cols));
    if cols == 0 {
        return Err(GpuError::shape(OP, "zero columns"));
    }
    let xb = n_tokens.saturating_mul(cols).saturating_mul(4);
    check_buffer(OP, "x", x, xb)?;
    check_binding(ctx, "activations", xb)?;
    check_buffer(OP, "q", &a.q, n_tokens * u64::from(a.stride) * 4)?;
    check_buffer(OP, "s", &a.s, n_tokens * 4)?;
    let p = ActParams {
        cols: a.cols,
        q_stride: a.stride,
        n_tokens: a.n_tokens,
        _pad: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::ActQuantInt8,
        &[&params, x, &a.q, &a.s],
        (p.n_tokens, 1, 1),
    )
}

/// Quantize `n_tokens` rows of `cols` f32 activations in `x` (bit-exact with
/// `tern_reference::quant::quantize_act_int8`).
pub fn quantize_act_int8(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    n_tokens: u64,
    cols: u64,
) -> Result<ActInt8> {
    const OP: &str = "quantize_act_int8";
    if cols == 0 {
        return Err(GpuError::shape(OP, "zero columns"));
    }
    let xb = n_tokens.saturating_mul(cols).saturating_mul(4);
    check_buffer(OP, "x", x, xb)?;
    check_binding(ctx, "activations", xb)?;
    let stride = act_stride_words(cols);
    let qb = n_tokens.saturating_mul(stride).saturating_mul(4);
    check_binding(ctx, "int8 activations", qb)?;
    let p = ActParams {
        cols: u32_of(OP, "cols", cols)?,
        q_stride: u32_of(OP, "stride", stride)?,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        _pad: 0,
    };
    let q = ctx.zeroed("int8 activations", qb)?;
    let s = ctx.zeroed("activation scales", n_tokens * 4)?;
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::ActQuantInt8,
        &[&params, x, &q, &s],
        (p.n_tokens, 1, 1),
    )?;
    Ok(ActInt8 {
        q,
        s,
        n_tokens: p.n_tokens,
        cols: p.cols,
        stride: p.q_stride,
    })
}

// ---------------------------------------------------------------------------------------------
// Ternary GEMV/GEMM

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct TernaryParams {
    rows: u32,
    cols: u32,
    words_per_row: u32,
    group: u32,
    groups_per_row: u32,
    scale_word_offset: u32,
    act_stride: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

/// One binding of a row-split weight (also read by the tiled GEMMs in `gemm.rs`).
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) row0: u64,
    pub(crate) rows: u64,
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) scale_word_offset: u64,
}

/// A ternary weight on the GPU, in tern's packed layout, split by rows into bindings of at most
/// [`GpuContext::binding_limit`] bytes (each part: its rows' code words, then its scales).
#[derive(Debug)]
pub struct TernaryWeight {
    pub layout: TernaryLayout,
    pub rows: u64,
    pub cols: u64,
    pub group: u32,
    pub scale_type: FloatType,
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
        let scale_bytes = |r: u64| -> u64 {
            let n = if group == 0 { 1 } else { r * gpr };
            (n * ss).div_ceil(4) * 4
        };
        let ranges = split_rows(
            "ternary weight",
            rows,
            row_bytes,
            ctx.binding_limit(),
            scale_bytes,
        )?;
        let codes = t.codes();
        let scales = t.scales();
        let mut parts = Vec::with_capacity(ranges.len());
        for r in ranges {
            let cb = (r.start * row_bytes) as usize..(r.end * row_bytes) as usize;
            let sb = if group == 0 {
                0..ss as usize
            } else {
                (r.start * gpr * ss) as usize..(r.end * gpr * ss) as usize
            };
            let mut data = Vec::with_capacity(cb.len() + sb.len() + 4);
            data.extend_from_slice(codes.get(cb).unwrap_or_default());
            let off = data.len() as u64 / 4;
            data.extend_from_slice(scales.get(sb).unwrap_or_default());
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
            parts,
        })
    }

    /// Number of bindings the weight was split into.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }
}

/// `y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t` for every token of `a`
/// (GEMV for one token, GEMM for several); `y` is `[n_tokens][rows]` f32.
pub fn ternary_gemv(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "ternary_gemv";
    if u64::from(a.cols) != w.cols {
        return Err(GpuError::shape(
            OP,
            format!("activations have {} columns, the weight {}", a.cols, w.cols),
        ));
    }
    let epw = ternary::elems_per_word(w.layout);
    let wpr = ternary::words_per_row(w.layout, w.cols);
    if u64::from(a.stride) * 4 < wpr * epw {
        return Err(GpuError::shape(
            OP,
            "activation stride shorter than a code row",
        ));
    }
    let yb = u64::from(a.n_tokens) * w.rows * 4;
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ternary output", yb)?;
    let key = KernelKey::TernaryGemv {
        layout: w.layout,
        scale_type: w.scale_type,
    };
    let gpr = if w.group == 0 {
        1
    } else {
        w.cols / u64::from(w.group)
    };
    for part in &w.parts {
        let p = TernaryParams {
            rows: u32_of(OP, "rows", part.rows)?,
            cols: u32_of(OP, "cols", w.cols)?,
            words_per_row: u32_of(OP, "words per row", wpr)?,
            group: w.group,
            groups_per_row: u32_of(OP, "groups", gpr)?,
            scale_word_offset: u32_of(OP, "scale offset", part.scale_word_offset)?,
            act_stride: a.stride,
            out_stride: u32_of(OP, "rows", w.rows)?,
            row0: u32_of(OP, "row0", part.row0)?,
            n_tokens: a.n_tokens,
            _pad0: 0,
            _pad1: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(GEMV_ROWS_PER_WG))?;
        ctx.dispatch(
            enc,
            key,
            &[&params, &part.buffer, &a.q, &a.s, y],
            (gx, a.n_tokens, 1),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ggml Q8_0 / Q4_0 / Q4_1 GEMV/GEMM

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct GgmlParams {
    rows: u32,
    cols: u32,
    blocks_per_row: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

/// A ggml-block weight on the GPU, blocks kept as stored, split by rows into bindings.
#[derive(Debug)]
pub struct GgmlWeight {
    pub qtype: GgmlType,
    pub rows: u64,
    pub cols: u64,
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
        const OP: &str = "ggml upload";
        let be = qtype.block_elems();
        if cols == 0 || cols % be != 0 || rows == 0 {
            return Err(GpuError::shape(
                OP,
                format!("{rows} × {cols} (columns must be a positive multiple of {be})"),
            ));
        }
        u32_of(OP, "rows", rows)?;
        let row_bytes = cols / be * qtype.block_bytes();
        if rows.checked_mul(row_bytes) != Some(bytes.len() as u64) {
            return Err(GpuError::shape(
                OP,
                format!("{} bytes for {rows} × {cols} {qtype:?}", bytes.len()),
            ));
        }
        // +4: the kernel's unaligned 32-bit loads may touch the word after the last byte.
        let ranges = split_rows("ggml weight", rows, row_bytes, ctx.binding_limit(), |_| 4)?;
        let mut parts = Vec::with_capacity(ranges.len());
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
            parts,
        })
    }

    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// `(first row, rows, buffer)` of each part, for kernels in other modules (`cce`).
    pub(crate) fn part_views(&self) -> impl Iterator<Item = (u64, u64, &wgpu::Buffer)> {
        self.parts.iter().map(|p| (p.row0, p.rows, &p.buffer))
    }
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` with f32 activations `x` = `[n_tokens][cols]`.
pub fn ggml_gemv(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "ggml_gemv";
    let xb = n_tokens.saturating_mul(w.cols).saturating_mul(4);
    check_buffer(OP, "x", x, xb)?;
    check_binding(ctx, "activations", xb)?;
    let yb = n_tokens.saturating_mul(w.rows).saturating_mul(4);
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ggml output", yb)?;
    let nt = u32_of(OP, "n_tokens", n_tokens)?;
    for part in &w.parts {
        let p = GgmlParams {
            rows: u32_of(OP, "rows", part.rows)?,
            cols: u32_of(OP, "cols", w.cols)?,
            blocks_per_row: u32_of(OP, "blocks", w.cols / 32)?,
            out_stride: u32_of(OP, "rows", w.rows)?,
            row0: u32_of(OP, "row0", part.row0)?,
            n_tokens: nt,
            _pad0: 0,
            _pad1: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(GEMV_ROWS_PER_WG))?;
        ctx.dispatch(
            enc,
            KernelKey::GgmlGemv(w.qtype),
            &[&params, &part.buffer, x, y],
            (gx, nt, 1),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// NeuZip decode

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct NeuzipParams {
    lanes: u32,
    block_len: u32,
    blocks_per_row: u32,
    row_len: u32,
    n_elements: u32,
    b0: u32,
    n_syms: u32,
    table_word: u32,
    block_words_word: u32,
    states_word: u32,
    lane_starts_word: u32,
    words_base: u32,
    raw_word_offset: u32,
    raw_bit_base: u32,
    out_base: u32,
    man: u32,
    exp_bits: u32,
    k: u32,
    width: u32,
    _pad: u32,
}

#[derive(Debug)]
struct NzChunk {
    params: NeuzipParams,
    n_blocks: u32,
    data: wgpu::Buffer,
    /// Elements `elems` of the tensor; the output buffer starts at element `params.out_base`.
    elems: std::ops::Range<u64>,
    out: wgpu::Buffer,
    /// Bytes of this chunk's decoded output.
    out_bytes: u64,
}

/// A NeuZip blob on the GPU, cut into chunks of whole blocks whose compressed data and decoded
/// output each fit one binding. [`NeuzipTensor::decode`] fills the chunks' output buffers.
#[derive(Debug)]
pub struct NeuzipTensor {
    pub plan: neuzip::Plan,
    meta: wgpu::Buffer,
    status: wgpu::Buffer,
    chunks: Vec<NzChunk>,
    /// Uploaded with [`NeuzipTensor::upload_compressed`]: no output buffers of its own; decode
    /// with [`NeuzipTensor::decode_into`].
    compressed_only: bool,
}

impl NeuzipTensor {
    /// Parse and validate `blob` (`Plan::parse`) and upload it in chunks, each with an output
    /// buffer of its own (the tensor decoded stays resident after [`NeuzipTensor::decode`]).
    pub fn upload(ctx: &GpuContext, blob: &[u8]) -> Result<Self> {
        Self::upload_impl(ctx, blob, false)
    }

    /// Upload only the compressed data: decode just in time with
    /// [`NeuzipTensor::decode_into`] into a scratch shared with other tensors.
    pub fn upload_compressed(ctx: &GpuContext, blob: &[u8]) -> Result<Self> {
        Self::upload_impl(ctx, blob, true)
    }

    fn upload_impl(ctx: &GpuContext, blob: &[u8], compressed_only: bool) -> Result<Self> {
        const OP: &str = "neuzip upload";
        let plan = neuzip::Plan::parse(blob)?;
        let (man, exp_bits, width): (u32, u32, u32) = match plan.dtype {
            FloatType::F32 => (23, 8, 32),
            FloatType::F16 => (10, 5, 16),
            FloatType::Bf16 => (7, 8, 16),
        };
        let w = u64::from(plan.mantissa_bits) + 1;
        let n = plan.n_elements;
        if n.checked_mul(w).is_none_or(|b| b >= 1 << 32) || plan.row_len >= 1 << 32 {
            return Err(GpuError::TooLarge {
                what: "neuzip tensor".into(),
                detail: format!("{n} elements of {w} raw bits: bit offsets exceed u32"),
            });
        }
        let limit = ctx.binding_limit();
        let meta_bytes = blob.get(..plan.words.offset as usize).unwrap_or_default();
        check_binding(
            ctx,
            "neuzip index (header, table, states, lane starts)",
            meta_bytes.len() as u64,
        )?;
        let meta = ctx.upload("neuzip index", meta_bytes)?;
        let status = ctx.zeroed("neuzip status", 4)?;
        let words = blob.get(plan.words.range()).unwrap_or_default();
        let raw = blob.get(plan.raw.range()).unwrap_or_default();
        let esize = u64::from(width / 8);
        let base = |b: u32| -> Result<u64> { Ok(u64::from(plan.block_word_base(blob, b)?)) };
        let end_of = |b: u32| -> u64 {
            let (s, l) = plan.block_span(b);
            s + u64::from(l)
        };
        // Sizes of a chunk of blocks b0..b1: (data bytes, output bytes).
        let sizes = |b0: u32, b1: u32| -> Result<(u64, u64)> {
            let wb0 = base(b0)? & !1;
            let wbytes = ((base(b1)? - wb0) * 2).div_ceil(4) * 4;
            let e0 = plan.block_span(b0).0;
            let e1 = end_of(b1 - 1);
            let rb0 = (e0 * w) & !31;
            let rbytes = (e1 * w - rb0).div_ceil(32) * 4 + 4;
            let ob0 = if width == 16 { e0 & !1 } else { e0 };
            let obytes = ((e1 - ob0) * esize).div_ceil(4) * 4;
            Ok((wbytes + rbytes, obytes))
        };
        let max_groups = ctx.limits.max_compute_workgroups_per_dimension;
        let mut chunks = Vec::new();
        let mut b0 = 0u32;
        while b0 < plan.n_blocks {
            let fits = |b1: u32| -> Result<bool> {
                let (d, o) = sizes(b0, b1)?;
                Ok(d <= limit && o <= limit && b1 - b0 <= max_groups)
            };
            if !fits(b0 + 1)? {
                return Err(GpuError::TooLarge {
                    what: "neuzip block".into(),
                    detail: format!("block {b0} alone exceeds a binding of {limit} bytes"),
                });
            }
            // Largest b1 that fits (sizes grow with b1): binary search.
            let (mut lo, mut hi) = (b0 + 1, plan.n_blocks);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(mid)? {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let b1 = lo;
            let wb0 = base(b0)? & !1;
            let wb1 = base(b1)?;
            let e0 = plan.block_span(b0).0;
            let e1 = end_of(b1 - 1);
            let rb0 = (e0 * w) & !31;
            let ob0 = if width == 16 { e0 & !1 } else { e0 };
            let mut data = words
                .get((wb0 * 2) as usize..((wb1 * 2) as usize).min(words.len()))
                .unwrap_or_default()
                .to_vec();
            data.resize(data.len().div_ceil(4) * 4, 0);
            let raw_word_offset = data.len() as u64 / 4;
            let r_end = ((e1 * w).div_ceil(8) as usize).min(raw.len());
            data.extend_from_slice(raw.get((rb0 / 8) as usize..r_end).unwrap_or_default());
            data.extend_from_slice(&[0; 4]);
            let (_, obytes) = sizes(b0, b1)?;
            let params = NeuzipParams {
                lanes: plan.lanes,
                block_len: plan.block_len,
                blocks_per_row: plan.blocks_per_row,
                row_len: plan.row_len as u32, // ok: checked < 2^32 above
                n_elements: n as u32,         // ok: n·w < 2^32
                b0,
                n_syms: plan.n_syms,
                table_word: plan.table.offset / 4,
                block_words_word: plan.block_words.offset / 4,
                states_word: plan.states.offset / 4,
                lane_starts_word: plan.lane_starts.offset / 4,
                words_base: wb0 as u32,                  // ok: ≤ n_words (u32)
                raw_word_offset: raw_word_offset as u32, // ok: ≤ limit / 4
                raw_bit_base: rb0 as u32,                // ok: < n·w < 2^32
                out_base: ob0 as u32,                    // ok: ≤ n < 2^32
                man,
                exp_bits,
                k: u32::from(plan.mantissa_bits),
                width,
                _pad: 0,
            };
            chunks.push(NzChunk {
                params,
                n_blocks: b1 - b0,
                data: ctx.upload("neuzip data", &data)?,
                elems: e0..e1,
                out: ctx.zeroed("neuzip output", if compressed_only { 4 } else { obytes })?,
                out_bytes: obytes,
            });
            b0 = b1;
        }
        let _ = OP;
        Ok(NeuzipTensor {
            plan,
            meta,
            status,
            chunks,
            compressed_only,
        })
    }

    /// Number of chunks (bindings) the blob was cut into.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Decoded bytes of each chunk (the scratch [`NeuzipTensor::decode_into`] needs).
    pub fn chunk_output_bytes(&self) -> Vec<u64> {
        self.chunks.iter().map(|c| c.out_bytes).collect()
    }

    /// Decoded bytes of the whole tensor (all chunks).
    pub fn output_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.out_bytes).sum()
    }

    /// Rows of each chunk's output as `(first row, rows, element offset in the chunk's buffer)`
    /// for a matrix of `row_len` columns; an error when a chunk does not hold whole rows.
    pub fn row_spans(&self, row_len: u64) -> Result<Vec<(u64, u64, u64)>> {
        let mut v = Vec::with_capacity(self.chunks.len());
        for c in &self.chunks {
            let (e0, e1) = (c.elems.start, c.elems.end);
            if row_len == 0 || e0 % row_len != 0 || e1 % row_len != 0 {
                return Err(GpuError::shape(
                    "neuzip rows",
                    format!("chunk {e0}..{e1} does not hold whole rows of {row_len}"),
                ));
            }
            v.push((
                e0 / row_len,
                (e1 - e0) / row_len,
                e0 - u64::from(c.params.out_base),
            ));
        }
        Ok(v)
    }

    /// The decoded tensor (after [`NeuzipTensor::decode`]) as float-matrix parts over the
    /// chunks' own output buffers.
    pub fn float_parts(&self, row_len: u64) -> Result<Vec<crate::float_ops::FloatPart>> {
        if self.compressed_only {
            return Err(GpuError::shape(
                "neuzip rows",
                "uploaded compressed-only: no output buffers",
            ));
        }
        Ok(self
            .row_spans(row_len)?
            .into_iter()
            .zip(&self.chunks)
            .map(
                |((row0, rows, elem_offset), c)| crate::float_ops::FloatPart {
                    buffer: c.out.clone(),
                    row0,
                    rows,
                    elem_offset,
                },
            )
            .collect())
    }

    /// Record the decode of every chunk into `outs[i]` (caller-owned scratch, at least
    /// [`NeuzipTensor::chunk_output_bytes`] each).
    pub fn decode_into(
        &self,
        ctx: &GpuContext,
        enc: &mut impl Recorder,
        outs: &[wgpu::Buffer],
    ) -> Result<()> {
        if outs.len() < self.chunks.len() {
            return Err(GpuError::shape(
                "neuzip decode",
                format!(
                    "{} scratch buffers for {} chunks",
                    outs.len(),
                    self.chunks.len()
                ),
            ));
        }
        enc.record_clear(&self.status);
        for (c, out) in self.chunks.iter().zip(outs) {
            check_buffer("neuzip decode", "scratch", out, c.out_bytes)?;
            enc.record_clear(out);
            let params = ctx.uniform(bytemuck::bytes_of(&c.params))?;
            ctx.dispatch(
                enc,
                KernelKey::NeuzipDecode,
                &[&params, &self.meta, &c.data, out, &self.status],
                (c.n_blocks, 1, 1),
            )?;
        }
        Ok(())
    }

    /// Record the decode of every chunk into its output buffer.
    pub fn decode(&self, ctx: &GpuContext, enc: &mut impl Recorder) -> Result<()> {
        if self.compressed_only {
            return Err(GpuError::shape(
                "neuzip decode",
                "uploaded compressed-only: use decode_into with a scratch",
            ));
        }
        enc.record_clear(&self.status);
        for c in &self.chunks {
            enc.record_clear(&c.out);
            let params = ctx.uniform(bytemuck::bytes_of(&c.params))?;
            ctx.dispatch(
                enc,
                KernelKey::NeuzipDecode,
                &[&params, &self.meta, &c.data, &c.out, &self.status],
                (c.n_blocks, 1, 1),
            )?;
        }
        Ok(())
    }

    /// After a submitted [`NeuzipTensor::decode`]: `Err(Corrupt)` if any lane failed its checks.
    pub fn check_status(&self, ctx: &GpuContext) -> Result<()> {
        let s = ctx.read_u32(&self.status, 1)?;
        if s.first().copied().unwrap_or(1) != 0 {
            return Err(GpuError::Corrupt {
                what: "neuzip stream".into(),
                detail: "a lane read past its words or did not end in state 0x8000".into(),
            });
        }
        Ok(())
    }

    /// Decode on the GPU, wait, check the status and read back the whole tensor as raw
    /// little-endian elements (what `tern_format::neuzip::decode` returns).
    pub fn decode_to_host(&self, ctx: &GpuContext) -> Result<Vec<u8>> {
        let mut enc = ctx.encoder();
        self.decode(ctx, &mut enc)?;
        ctx.submit_wait(enc)?;
        self.check_status(ctx)?;
        let esize = self.plan.dtype.size() as u64;
        let mut out = Vec::with_capacity((self.plan.n_elements * esize) as usize);
        for c in &self.chunks {
            let skip = (c.elems.start - u64::from(c.params.out_base)) * esize;
            let len = (c.elems.end - c.elems.start) * esize;
            let b = ctx.read_bytes(&c.out, 0, skip + len)?;
            out.extend_from_slice(b.get(skip as usize..).unwrap_or_default());
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Float kernels

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Quad {
    a: u32,
    b: u32,
    c: u32,
    d: u32,
}

/// RMSNorm of `n_rows` rows of `n` values: `out = x / sqrt(mean(x²) + eps) · weight`.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    weight: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n: u64,
    n_rows: u64,
    eps: f32,
) -> Result<()> {
    const OP: &str = "rmsnorm";
    if n == 0 {
        return Err(GpuError::shape(OP, "zero-length rows"));
    }
    let bytes = n.saturating_mul(n_rows).saturating_mul(4);
    check_buffer(OP, "x", x, bytes)?;
    check_buffer(OP, "out", out, bytes)?;
    check_buffer(OP, "weight", weight, n * 4)?;
    check_binding(ctx, "rmsnorm rows", bytes)?;
    let p = Quad {
        a: u32_of(OP, "n", n)?,
        b: u32_of(OP, "n_rows", n_rows)?,
        c: eps.to_bits(),
        d: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::RmsNorm,
        &[&params, x, weight, out],
        (p.b, 1, 1),
    )
}

/// cos/sin table of [`rope_with_table`] for `positions`: `[n_tokens][rope_dim / 2]` pairs of
/// f32 (cos, sin), computed in f64 and rounded to f32 as the reference does.
pub fn rope_table(positions: &[u64], rope_dim: u64, theta: f32) -> Vec<u8> {
    let half = rope_dim / 2;
    let mut cs = Vec::with_capacity((positions.len() as u64 * half * 8) as usize);
    for &pos in positions {
        for i in 0..half {
            let inv_freq = f64::from(theta).powf(-2.0 * i as f64 / rope_dim as f64);
            let angle = pos as f64 * inv_freq;
            cs.extend_from_slice(&(angle.cos() as f32).to_le_bytes());
            cs.extend_from_slice(&(angle.sin() as f32).to_le_bytes());
        }
    }
    cs
}

/// RMSNorm of `a.n_tokens` rows of `n` values fused with INT8 quantization of the result into
/// `a` (same bits as [`rmsnorm`] then [`quantize_act_int8_into`]; the f32 row is not written).
pub fn rmsnorm_quant_int8(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    weight: &wgpu::Buffer,
    n: u64,
    eps: f32,
    a: &ActInt8,
) -> Result<()> {
    const OP: &str = "rmsnorm_quant_int8";
    if n == 0 || u64::from(a.cols) != n {
        return Err(GpuError::shape(
            OP,
            format!("rows of {n} values into activations of {} columns", a.cols),
        ));
    }
    let rows = u64::from(a.n_tokens);
    let bytes = n.saturating_mul(rows).saturating_mul(4);
    check_buffer(OP, "x", x, bytes)?;
    check_buffer(OP, "weight", weight, n * 4)?;
    check_buffer(OP, "q", &a.q, rows * u64::from(a.stride) * 4)?;
    check_buffer(OP, "s", &a.s, rows * 4)?;
    check_binding(ctx, "rmsnorm rows", bytes)?;
    let p = Quad {
        a: u32_of(OP, "n", n)?,
        b: a.n_tokens,
        c: eps.to_bits(),
        d: a.stride,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::RmsNormQuant,
        &[&params, x, weight, &a.q, &a.s],
        (a.n_tokens, 1, 1),
    )
}

/// Rotary embedding in place on `x` = `[n_tokens][n_heads][head_dim]`, token `t` at position
/// `positions[t]`. cos/sin are computed here in f64 and rounded to f32, as the reference does.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    n_heads: u64,
    head_dim: u64,
    rope_dim: u64,
    positions: &[u64],
    theta: f32,
    neox: bool,
) -> Result<()> {
    let cs = rope_table(positions, rope_dim, theta);
    if cs.is_empty() {
        return Ok(());
    }
    check_binding(ctx, "rope cos/sin", cs.len() as u64)?;
    let csb = ctx.upload("rope cos/sin", &cs)?;
    rope_with_table(
        ctx,
        enc,
        x,
        &csb,
        n_heads,
        head_dim,
        rope_dim,
        positions.len() as u64,
        neox,
    )
}

/// [`rope`] with a caller-owned cos/sin table ([`rope_table`]) that may be rewritten between
/// executions of a recorded [`crate::Plan`].
#[allow(clippy::too_many_arguments)]
pub fn rope_with_table(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    table: &wgpu::Buffer,
    n_heads: u64,
    head_dim: u64,
    rope_dim: u64,
    n_tokens: u64,
    neox: bool,
) -> Result<()> {
    const OP: &str = "rope";
    if rope_dim > head_dim || rope_dim % 2 != 0 {
        return Err(GpuError::shape(
            OP,
            format!("rope_dim {rope_dim} must be even and ≤ head_dim {head_dim}"),
        ));
    }
    let bytes = n_tokens
        .saturating_mul(n_heads)
        .saturating_mul(head_dim)
        .saturating_mul(4);
    check_buffer(OP, "x", x, bytes)?;
    check_binding(ctx, "rope input", bytes)?;
    let half = rope_dim / 2;
    if half == 0 || n_tokens == 0 {
        return Ok(());
    }
    check_buffer(OP, "cos/sin table", table, n_tokens * half * 8)?;
    let p = Quad {
        a: u32_of(OP, "n_heads", n_heads)?,
        b: u32_of(OP, "head_dim", head_dim)?,
        c: u32_of(OP, "rope_dim", rope_dim)?,
        d: u32_of(OP, "n_tokens", n_tokens)?,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let gx = u32_of(OP, "workgroups", half.div_ceil(64))?;
    ctx.dispatch(
        enc,
        KernelKey::Rope { neox },
        &[&params, x, table],
        (gx, p.a, p.d),
    )
}

/// `out = op(a, b)` over `n` elements (SwiGLU, ReLU² GLU, residual add).
pub fn elementwise(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    op: EltOp,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n: u64,
) -> Result<()> {
    const OP: &str = "elementwise";
    let bytes = n.saturating_mul(4);
    for (what, buf) in [("a", a), ("b", b), ("out", out)] {
        check_buffer(OP, what, buf, bytes)?;
    }
    check_binding(ctx, "elementwise operand", bytes)?;
    let p = Quad {
        a: u32_of(OP, "n", n)?,
        b: 0,
        c: 0,
        d: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let groups = groups_1d(ctx, n.div_ceil(256));
    ctx.dispatch(
        enc,
        KernelKey::Elementwise(op),
        &[&params, a, b, out],
        groups,
    )
}

/// Greedy sampling: `out[r]` = index of the largest of row `r`'s `n` logits (first on ties).
pub fn argmax(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    logits: &wgpu::Buffer,
    n: u64,
    n_rows: u64,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "argmax";
    let bytes = n.saturating_mul(n_rows).saturating_mul(4);
    check_buffer(OP, "logits", logits, bytes)?;
    check_buffer(OP, "out", out, n_rows * 4)?;
    check_binding(ctx, "logits", bytes)?;
    let p = Quad {
        a: u32_of(OP, "n", n)?,
        b: u32_of(OP, "n_rows", n_rows)?,
        c: 0,
        d: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(enc, KernelKey::Argmax, &[&params, logits, out], (p.b, 1, 1))
}
