//! Activation quantization for ternary matmuls, bit-exact with `tern_reference::quant`: INT8
//! absmax per token (BitNet b1.58), as a pass of its own (`act_quant_int8.wgsl`) or fused into the
//! preceding RMSNorm (`rmsnorm_quant.wgsl`); BitNet a4.8's INT4 absmean (`act_quant_a48.wgsl`) and
//! TopK-50% + INT8 (`act_quant_topk.wgsl`), alone or fused with the norm
//! ([`quantize_act_a48_into`]). Which linear
//! gets which is decided once, by the activation plan (`model/activation.rs`).

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{ActQuantParams, ActStatsParams, RmsNormQuantParams};
use crate::device::pipeline::{ActBits, KernelKey};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

/// Quantized activations on the GPU: `q` = `[n_tokens][stride]` u32 words (4 int8 or 8 int4
/// each, as `act` says; zero past `cols`), `s` = `[n_tokens]` f32 multipliers (`x ≈ q / s`).
#[derive(Debug)]
pub struct ActInt8 {
    pub q: wgpu::Buffer,
    pub s: wgpu::Buffer,
    pub n_tokens: u32,
    pub cols: u32,
    /// u32 words per token: `ceil(cols / 80) · 20` for INT8, `ceil(cols / 160) · 20` for INT4, so
    /// both ternary layouts (16 and 20 codes per word) read whole activation words and rows stay
    /// 16-byte aligned.
    pub stride: u32,
    /// INT8 (4 per word) or INT4 (8 per word, packed as `act_quant_a48.wgsl` says).
    pub act: ActBits,
}

/// Words per token of INT8 [`ActInt8`] for `cols` activations.
pub fn act_stride_words(cols: u64) -> u64 {
    cols.div_ceil(80) * 20
}

/// Words per token of INT4 activations for `cols` (≤ the INT8 stride, so INT8 buffers hold them).
pub fn act4_stride_words(cols: u64) -> u64 {
    cols.div_ceil(160) * 20
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
            act: ActBits::Int8,
        })
    }

    /// The same buffers holding INT4 activations (their stride is never longer).
    pub fn as_int4(&self) -> Result<Self> {
        let stride = act4_stride_words(u64::from(self.cols));
        Ok(ActInt8 {
            q: self.q.clone(),
            s: self.s.clone(),
            n_tokens: self.n_tokens,
            cols: self.cols,
            stride: u32_of("quantize_act_int4", "stride", stride)?,
            act: ActBits::Int4,
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
            act: self.act,
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
    if cols == 0 || a.act != ActBits::Int8 {
        return Err(GpuError::shape(OP, "zero columns or not INT8 activations"));
    }
    let xb = n_tokens.saturating_mul(cols).saturating_mul(4);
    check_buffer(OP, "x", x, xb)?;
    check_binding(ctx, "activations", xb)?;
    check_buffer(OP, "q", &a.q, n_tokens * u64::from(a.stride) * 4)?;
    check_buffer(OP, "s", &a.s, n_tokens * 4)?;
    let p = ActQuantParams {
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
    let p = ActQuantParams {
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
        act: ActBits::Int8,
    })
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
    if n == 0 || u64::from(a.cols) != n || a.act != ActBits::Int8 {
        return Err(GpuError::shape(
            OP,
            format!(
                "rows of {n} values into {:?} activations of {} columns",
                a.act, a.cols
            ),
        ));
    }
    let rows = u64::from(a.n_tokens);
    let bytes = n.saturating_mul(rows).saturating_mul(4);
    check_buffer(OP, "x", x, bytes)?;
    check_buffer(OP, "weight", weight, n * 4)?;
    check_buffer(OP, "q", &a.q, rows * u64::from(a.stride) * 4)?;
    check_buffer(OP, "s", &a.s, rows * 4)?;
    check_binding(ctx, "rmsnorm rows", bytes)?;
    let p = RmsNormQuantParams {
        n: u32_of(OP, "n", n)?,
        n_rows: a.n_tokens,
        eps,
        q_stride: a.stride,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::RmsNormQuant,
        &[&params, x, weight, &a.q, &a.s],
        (a.n_tokens, 1, 1),
    )
}

/// Which a4.8 quantizer [`quantize_act_a48_into`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum A48Quant {
    /// INT4 absmean (`tern_reference::quantize_act_int4`) into INT4 activations.
    Int4Absmean,
    /// TopK 50% then INT8 absmax (`tern_reference::topk50_int8`) into INT8 activations.
    TopK50Int8,
}

/// BitNet a4.8 quantization of `a.n_tokens` rows of `a.cols` values of `x` into `a`, after the
/// RMSNorm with `norm = Some((weight, eps))` fused in (same bits as `rmsnorm` then the unfused
/// pass; the f32 row is not written). Bit-exact with `tern_reference::quant` (the INT4 `β` in its
/// `lane_tree_sum` order, the TopK tie rule of its module doc).
pub fn quantize_act_a48_into(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    norm: Option<(&wgpu::Buffer, f32)>,
    kind: A48Quant,
    a: &ActInt8,
) -> Result<()> {
    const OP: &str = "quantize_act_a48";
    let (rows, n) = (u64::from(a.n_tokens), u64::from(a.cols));
    let want = match kind {
        A48Quant::Int4Absmean => ActBits::Int4,
        A48Quant::TopK50Int8 => ActBits::Int8,
    };
    if n == 0 || a.act != want {
        return Err(GpuError::shape(
            OP,
            format!("{kind:?} into {:?} activations of {n} columns", a.act),
        ));
    }
    let bytes = n.saturating_mul(rows).saturating_mul(4);
    check_buffer(OP, "x", x, bytes)?;
    check_binding(ctx, "activations", bytes)?;
    check_buffer(OP, "q", &a.q, rows * u64::from(a.stride) * 4)?;
    check_buffer(OP, "s", &a.s, rows * 4)?;
    let (weight, eps) = match norm {
        Some((w, eps)) => {
            check_buffer(OP, "weight", w, n * 4)?;
            (w, eps)
        }
        None => (x, 0.0),
    };
    let p = RmsNormQuantParams {
        n: u32_of(OP, "n", n)?,
        n_rows: a.n_tokens,
        eps,
        q_stride: a.stride,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let key = KernelKey::ActQuantA48 {
        topk: kind == A48Quant::TopK50Int8,
        norm: norm.is_some(),
    };
    ctx.dispatch(
        enc,
        key,
        &[&params, x, weight, &a.q, &a.s],
        (a.n_tokens, 1, 1),
    )
}

/// Add `(zero codes, codes)` of `a`'s rows to `stats[2·slot]`, `stats[2·slot + 1]` (u32 counters;
/// `stats` holds at least `2·(slot + 1)`): the activation-sparsity measurement.
pub fn act_stats(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    a: &ActInt8,
    slot: u32,
    stats: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "act_stats";
    check_buffer(
        OP,
        "q",
        &a.q,
        u64::from(a.n_tokens) * u64::from(a.stride) * 4,
    )?;
    check_buffer(OP, "stats", stats, 8 * (u64::from(slot) + 1))?;
    let p = ActStatsParams {
        cols: a.cols,
        stride: a.stride,
        n_tokens: a.n_tokens,
        slot,
        int4: u32::from(a.act == ActBits::Int4),
        ..ActStatsParams::default()
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::ActStats,
        &[&params, &a.q, stats],
        (a.n_tokens, 1, 1),
    )
}
