//! MiniCache on the GPU: the merge of a pair of layers' keys or values for one batch
//! (`minicache_merge.wgsl`; the design of `tern_reference::kv`, the math of
//! `tern_reference::kv_merge`). Layer `a`'s rows (kept from its attention block) and layer `b`'s
//! go in; the merged directions come out as `[n_tokens][row]` f32 rows that [`kv_store`] then
//! stores in the pair's buffer in the cache's format; the magnitudes, the retained pool (slots
//! in position order), its positions and its count are written into the pair's buffer here.
//!
//! [`kv_store`]: crate::kernels::kv_store

use crate::device::check::{check_buffer as need, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{MergeParams, StepParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::kv::KvLayout;

/// Record the merge of `xa` (layer a's rows from word `xa_off`) and `xb` (layer b's),
/// `[n_tokens][row]` f32 each, at the step's positions into `dir` (directions) and the pair
/// buffer `cache` (keys when `key`): SLERP parameter `t` (layer a gets `1 − t`), retention
/// threshold `gamma` on `θ/π`.
#[allow(clippy::too_many_arguments)]
pub fn merge(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    (t, gamma): (f32, f32),
    (xa, xa_off): (&wgpu::Buffer, u64),
    xb: &wgpu::Buffer,
    dir: &wgpu::Buffer,
    cache: &wgpu::Buffer,
    n_tokens: u64,
    key: bool,
) -> Result<()> {
    const OP: &str = "minicache merge";
    if !layout.pair {
        return Err(GpuError::internal(OP, "not a MiniCache pair's layout"));
    }
    if !(0.0..=1.0).contains(&t) || !(0.0..=1.0).contains(&gamma) {
        return Err(GpuError::invalid(
            OP,
            format!("t {t} and gamma {gamma}: both in [0, 1]"),
        ));
    }
    let rows = n_tokens.saturating_mul(layout.row()).saturating_mul(4);
    need(
        OP,
        "layer a rows",
        xa,
        rows.saturating_add(xa_off.saturating_mul(4)),
    )?;
    need(OP, "layer b rows", xb, rows)?;
    need(OP, "directions", dir, rows)?;
    need(OP, "pair buffer", cache, layout.buffer_bytes(key))?;
    need(OP, "step", step, std::mem::size_of::<StepParams>() as u64)?;
    layout.check_binding(ctx)?;
    let geom = ctx.uniform(bytemuck::bytes_of(&layout.geom(n_tokens, key)?))?;
    let mp = MergeParams {
        t,
        gamma,
        xa_off: u32_of(OP, "layer a rows", xa_off)?,
        cos_gamma: (f64::from(gamma) * std::f64::consts::PI).cos() as f32,
    };
    let mp = ctx.uniform(bytemuck::bytes_of(&mp))?;
    u32_of(OP, "n_tokens", n_tokens)?;
    ctx.dispatch(
        enc,
        KernelKey::MinicacheMerge,
        &[&geom, step, &mp, xa, xb, dir, cache],
        (1, 1, 1),
    )
}
