//! Activation quantization for ternary matmuls: INT8 absmax per token (BitNet b1.58), as a pass
//! of its own (`act_quant_int8.wgsl`) or fused into the preceding RMSNorm
//! (`rmsnorm_quant.wgsl`), both bit-exact with `tern_reference::quant`. Which linear gets which
//! is decided once, by the activation plan (`model/activation.rs`).

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{ActQuantParams, RmsNormQuantParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

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
