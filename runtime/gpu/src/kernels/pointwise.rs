//! Row-wise and element-wise kernels of the graph: RMSNorm, rotary embedding (host-computed
//! cos/sin table), SwiGLU / ReLU² GLU / residual add.

use crate::device::check::{check_binding, check_buffer, groups_1d, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{EltParams, RmsNormParams, RopeParams};
use crate::device::pipeline::{EltOp, KernelKey};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

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
    let p = RmsNormParams {
        n: u32_of(OP, "n", n)?,
        n_rows: u32_of(OP, "n_rows", n_rows)?,
        eps,
        _pad: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::RmsNorm,
        &[&params, x, weight, out],
        (p.n_rows, 1, 1),
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
    let p = RopeParams {
        n_heads: u32_of(OP, "n_heads", n_heads)?,
        head_dim: u32_of(OP, "head_dim", head_dim)?,
        rope_dim: u32_of(OP, "rope_dim", rope_dim)?,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let gx = u32_of(OP, "workgroups", half.div_ceil(64))?;
    ctx.dispatch(
        enc,
        KernelKey::Rope { neox },
        &[&params, x, table],
        (gx, p.n_heads, p.n_tokens),
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
    let p = EltParams {
        n: u32_of(OP, "n", n)?,
        ..EltParams::default()
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

/// The GLU `op` (SwiGLU or ReLU²) over gate/up pairs: `out[i] = glu(gu[2i]) · gu[2i + 1]` for
/// `n` outputs, `gu` = `[n][2]` f32 (a GEMM over gate/up rows interleaved at load); the same f32
/// operations as [`elementwise`] over separate gate and up rows, so the same bits.
pub fn glu_pairs(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    op: EltOp,
    gu: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n: u64,
) -> Result<()> {
    const OP: &str = "glu_pairs";
    if op == EltOp::Add {
        return Err(GpuError::invalid(OP, "pairs take a GLU, not the add"));
    }
    let bytes = n.saturating_mul(4);
    check_buffer(OP, "gate/up", gu, bytes.saturating_mul(2))?;
    check_buffer(OP, "out", out, bytes)?;
    check_binding(ctx, "gate/up operand", bytes.saturating_mul(2))?;
    let p = EltParams {
        n: u32_of(OP, "n", n)?,
        pairs: 1,
        ..EltParams::default()
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let groups = groups_1d(ctx, n.div_ceil(256));
    ctx.dispatch(
        enc,
        KernelKey::Elementwise(op),
        &[&params, gu, gu, out],
        groups,
    )
}
