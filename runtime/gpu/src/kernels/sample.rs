//! Sampling on the GPU: greedy argmax of rows of logits, and the top-k of one row (the host then
//! reads `8·k` bytes instead of the vocabulary).

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{ArgmaxParams, TopkParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

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
    let p = ArgmaxParams {
        n: u32_of(OP, "n", n)?,
        n_rows: u32_of(OP, "n_rows", n_rows)?,
        ..ArgmaxParams::default()
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::Argmax,
        &[&params, logits, out],
        (p.n_rows, 1, 1),
    )
}

/// Largest `k` the top-k kernel takes.
pub const TOPK_MAX_K: u32 = 64;
/// Logits per workgroup of the top-k kernel's first pass.
const TOPK_PER_WG: u64 = 2048;

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
