//! Attention on the GPU: the KV-cache store and causal GQA attention (decode and prefill).
//!
//! Both read `p0` (tokens already cached) from a small step buffer ([`StepParams`]) that the
//! caller rewrites with `queue.write_buffer` before each submit, so a plan recorded once serves
//! every position. The number of tokens per batch is fixed when the launcher records.

use bytemuck::{Pod, Zeroable};

use crate::context::GpuContext;
use crate::error::{GpuError, Result};
use crate::pipeline::KernelKey;
use crate::plan::Recorder;

/// Per-step values (uniform): `p0` = position of the batch's first token.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, Default, PartialEq, Eq)]
pub struct StepParams {
    pub p0: u32,
    /// Informational: the recorded dispatches fix the batch size.
    pub n_tokens: u32,
    pub _pad: [u32; 2],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct KvParams {
    row: u32,
    n_tokens: u32,
    n_ctx: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct AttnParams {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    scale: f32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

fn u32_of(op: &'static str, what: &str, v: u64) -> Result<u32> {
    u32::try_from(v).map_err(|_| GpuError::shape(op, format!("{what} = {v} does not fit in u32")))
}

fn need(op: &'static str, what: &str, buf: &wgpu::Buffer, bytes: u64) -> Result<()> {
    if buf.size() < bytes {
        return Err(GpuError::shape(
            op,
            format!("{what} holds {} bytes, needs {bytes}", buf.size()),
        ));
    }
    Ok(())
}

fn binding(ctx: &GpuContext, what: &str, bytes: u64) -> Result<()> {
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

/// `cache[(p0 + t)·row ..][..row] = src[t·row ..][..row]` for `t < n_tokens`.
#[allow(clippy::too_many_arguments)]
pub fn kv_store(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    step: &wgpu::Buffer,
    src: &wgpu::Buffer,
    cache: &wgpu::Buffer,
    n_tokens: u64,
    row: u64,
    n_ctx: u64,
) -> Result<()> {
    const OP: &str = "kv_store";
    let sb = n_tokens.saturating_mul(row).saturating_mul(4);
    let cb = n_ctx.saturating_mul(row).saturating_mul(4);
    need(OP, "src", src, sb)?;
    need(OP, "cache", cache, cb)?;
    need(OP, "step", step, std::mem::size_of::<StepParams>() as u64)?;
    binding(ctx, "KV cache", cb)?;
    let p = KvParams {
        row: u32_of(OP, "row", row)?,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        n_ctx: u32_of(OP, "n_ctx", n_ctx)?,
        _pad: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let groups = (n_tokens * row).div_ceil(256);
    let max = u64::from(ctx.limits.max_compute_workgroups_per_dimension.max(1));
    let (gx, gy) = (groups.min(max), groups.div_ceil(max).max(1));
    ctx.dispatch(
        enc,
        KernelKey::KvStore,
        &[&params, step, src, cache],
        (u32_of(OP, "groups", gx)?, u32_of(OP, "groups", gy)?, 1),
    )
}

/// Causal GQA attention: `out[t][h]` = softmax over keys `0..=p0+t` of
/// `q[t][h] · k[key][h / group] · scale`, applied to `v`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    n_head_kv: u64,
    head_dim: u64,
    n_ctx: u64,
    scale: f32,
) -> Result<()> {
    const OP: &str = "attention";
    if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
        return Err(GpuError::shape(
            OP,
            format!("n_head {n_head} must be a positive multiple of n_head_kv {n_head_kv}"),
        ));
    }
    if head_dim == 0 || head_dim > 256 {
        return Err(GpuError::shape(
            OP,
            format!("head_dim {head_dim}: the kernel takes 1..=256"),
        ));
    }
    let qb = n_tokens * n_head * head_dim * 4;
    let cb = n_ctx.saturating_mul(n_head_kv * head_dim).saturating_mul(4);
    need(OP, "q", q, qb)?;
    need(OP, "out", out, qb)?;
    need(OP, "k cache", k_cache, cb)?;
    need(OP, "v cache", v_cache, cb)?;
    need(OP, "step", step, std::mem::size_of::<StepParams>() as u64)?;
    binding(ctx, "KV cache", cb)?;
    binding(ctx, "queries", qb)?;
    let p = AttnParams {
        n_head: u32_of(OP, "n_head", n_head)?,
        n_head_kv: u32_of(OP, "n_head_kv", n_head_kv)?,
        head_dim: u32_of(OP, "head_dim", head_dim)?,
        n_ctx: u32_of(OP, "n_ctx", n_ctx)?,
        scale,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        _pad0: 0,
        _pad1: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::Attention,
        &[&params, step, q, k_cache, v_cache, out],
        (p.n_head, p.n_tokens, 1),
    )
}
