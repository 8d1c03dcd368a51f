//! The attention block's decode fusions over the concatenated q/k/v projection (issues 15, 14):
//! [`rope_kv_store`] rotates the queries in place and writes the rotated keys and the values into
//! the cache in its format (one dispatch for rope(q), rope(k), kv_store(K), kv_store(V); the
//! quantizing stores are `kv_store.wgsl`'s own code, `kv_quant.wgsl`; the rotated formats rotate
//! each key and value head before quantizing it, a workgroup per head), and [`qkv_split`]
//! splits the projection's rows into planar q, k, v for the paths it does not take.
//!
//! The projection is one buffer, row t (`stride` = q_dim + 2·kv_dim words) =
//! `[q | k | v]`: the output of one GEMV/GEMM over the rows `[Wq; Wk; Wv]`
//! (`model/load.rs`'s `concat_rows`). CPU references: `tern_reference::rope` and the store of
//! `tern_reference::kv_codec` (parity: `tests/parity/rope_kv.rs`, bit for bit).

use crate::device::check::{check_binding, check_buffer as need, groups_1d, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{QkvSplitParams, RopeKvParams, StepParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::kv::KvLayout;

/// Whether [`rope_kv_store`] writes caches of this layout: every format of a layer of its own
/// (not a MiniCache pair, whose store follows the merge). KIVI formats fuse one token at a time
/// ([`rope_kv_fuses_batch`]).
pub fn rope_kv_fuses(layout: &KvLayout) -> bool {
    !layout.pair
}

/// Whether [`rope_kv_store`] takes a batch of `n_tokens` for this layout: the whole-row formats
/// any batch; KIVI one token (the one-token step of `kv_store.wgsl`: the blocks that fill, then
/// the window row, in one dispatch).
pub fn rope_kv_fuses_batch(layout: &KvLayout, n_tokens: u64) -> bool {
    rope_kv_fuses(layout) && (n_tokens == 1 || !layout.quant.is_kivi())
}

/// The shapes of the concatenated projection: query heads, RoPE dimensions, pairing.
#[derive(Debug, Clone, Copy)]
pub struct QkvShape {
    pub n_head: u64,
    pub rope_dim: u64,
    pub neox: bool,
}

/// RoPE of the `n_tokens` rows of `qkv` (queries rotated in place; keys rotated as they are
/// stored, their rows in `qkv` left as they are) with the cos/sin `table` (`[n][rope_dim/2]`
/// vec2, `rope_table`), and the rotated keys and the values stored into the layer's caches at
/// positions `p0..` (p0 from `step`), as `kv_store` stores them.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_store(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    shape: QkvShape,
    step: &wgpu::Buffer,
    qkv: &wgpu::Buffer,
    table: &wgpu::Buffer,
    (k_cache, v_cache): (&wgpu::Buffer, &wgpu::Buffer),
    n_tokens: u64,
) -> Result<()> {
    const OP: &str = "rope_kv_store";
    if !rope_kv_fuses_batch(layout, n_tokens) {
        return Err(GpuError::internal(
            OP,
            format!(
                "{} cache{}, {n_tokens} tokens: use rope + kv_store",
                layout.quant.name(),
                if layout.pair {
                    " of a MiniCache pair"
                } else {
                    ""
                }
            ),
        ));
    }
    let (hd, rd) = (layout.head_dim, shape.rope_dim);
    if rd > hd || rd % 2 != 0 || shape.n_head == 0 || shape.n_head % layout.heads != 0 {
        return Err(GpuError::shape(
            OP,
            format!(
                "rope_dim {rd} (even, ≤ head_dim {hd}), {} query heads over {} kv heads",
                shape.n_head, layout.heads
            ),
        ));
    }
    let stride = (shape.n_head + 2 * layout.heads).saturating_mul(hd);
    let bytes = n_tokens.saturating_mul(stride).saturating_mul(4);
    need(OP, "qkv", qkv, bytes)?;
    check_binding(ctx, "qkv", bytes)?;
    let half = rd / 2;
    need(
        OP,
        "cos/sin table",
        table,
        n_tokens.saturating_mul(half) * 8,
    )?;
    need(OP, "k cache", k_cache, layout.buffer_bytes(true))?;
    need(OP, "v cache", v_cache, layout.buffer_bytes(false))?;
    need(OP, "step", step, std::mem::size_of::<StepParams>() as u64)?;
    layout.check_binding(ctx)?;
    let p = RopeKvParams {
        n_head: u32_of(OP, "n_head", shape.n_head)?,
        n_head_kv: u32_of(OP, "n_head_kv", layout.heads)?,
        head_dim: u32_of(OP, "head_dim", hd)?,
        rope_dim: u32_of(OP, "rope_dim", rd)?,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        stride: u32_of(OP, "stride", stride)?,
        n_ctx: u32_of(OP, "n_ctx", layout.n_ctx)?,
        wpr: u32_of(OP, "wpr", layout.wpr())?,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    // the geometry of the store (`kv_store.wgsl`'s; `is_key` is the kernel's own per range)
    let geom = ctx.uniform(bytemuck::bytes_of(&layout.geom(n_tokens, true)?))?;
    if layout.quant.is_rotated() {
        // rope_kv.wgsl PASS 2: the query pairs' workgroups, then a workgroup per (token, unit of
        // kv heads) for the keys, then for the values
        let q_groups = n_tokens.saturating_mul(shape.n_head * half).div_ceil(256);
        let units = n_tokens.saturating_mul(layout.rot_units());
        let groups = q_groups.saturating_add(units.saturating_mul(2));
        u32_of(OP, "invocations", groups.saturating_mul(256))?;
        return ctx.dispatch(
            enc,
            KernelKey::RopeKv {
                quant: layout.quant,
                neox: shape.neox,
            },
            &[&params, step, qkv, table, k_cache, v_cache, &geom],
            groups_1d(ctx, groups.max(1)),
        );
    }
    let invocations = n_tokens
        .saturating_mul(shape.n_head * half)
        .saturating_add(store_invocations(layout, n_tokens, true))
        .saturating_add(store_invocations(layout, n_tokens, false));
    u32_of(OP, "invocations", invocations)?;
    if layout.quant.is_absmax() {
        // the scales pass first (rope_kv.wgsl PASS 1): the keys' workgroups, then the values'
        let g = crate::kernels::kv::scales_groups(layout, n_tokens).saturating_mul(2);
        ctx.dispatch(
            enc,
            KernelKey::RopeKvScales {
                quant: layout.quant,
                neox: shape.neox,
            },
            &[&params, step, qkv, table, k_cache, v_cache, &geom],
            groups_1d(ctx, g),
        )?;
    }
    let key = KernelKey::RopeKv {
        quant: layout.quant,
        neox: shape.neox,
    };
    let groups = groups_1d(ctx, invocations.div_ceil(256).max(1));
    ctx.dispatch(
        enc,
        key,
        &[&params, step, qkv, table, k_cache, v_cache, &geom],
        groups,
    )
}

/// Invocations of the keys' (`key`) or values' store of `n_tokens` rows (`kv_quant.wgsl`'s
/// `store_count`: stage 0's code words; KIVI's one-token step: the rows of the blocks
/// that can fill, then the window row's words).
fn store_invocations(layout: &KvLayout, n_tokens: u64, key: bool) -> u64 {
    let q = layout.quant;
    if q.is_kivi() {
        let positions = n_tokens + u64::from(layout.kivi.residual.max(1));
        let rows = if key {
            positions.div_ceil(u64::from(layout.kivi.group.max(1)))
        } else {
            positions
        };
        return rows * layout.wpr() + layout.row() / 2;
    }
    // the code words (the absmax scales: the pass before, `rope_kv_store`)
    n_tokens.saturating_mul(layout.wpr().max(layout.wpr0()))
}

/// `q`, `k`, `v` (planar, `[n][q_dim]`, `[n][kv_dim]`, `[n][kv_dim]`) ← the `n_tokens` rows of
/// `qkv` (`[n][q_dim + 2·kv_dim]`).
pub fn qkv_split(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    qkv: &wgpu::Buffer,
    (q_dim, kv_dim): (u64, u64),
    (q, k, v): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
    n_tokens: u64,
) -> Result<()> {
    const OP: &str = "qkv_split";
    let stride = q_dim + 2 * kv_dim;
    let total = n_tokens.saturating_mul(stride);
    need(OP, "qkv", qkv, total.saturating_mul(4))?;
    check_binding(ctx, "qkv", total.saturating_mul(4))?;
    need(OP, "q", q, n_tokens.saturating_mul(q_dim) * 4)?;
    need(OP, "k", k, n_tokens.saturating_mul(kv_dim) * 4)?;
    need(OP, "v", v, n_tokens.saturating_mul(kv_dim) * 4)?;
    u32_of(OP, "values", total)?;
    let p = QkvSplitParams {
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        q_dim: u32_of(OP, "q_dim", q_dim)?,
        kv_dim: u32_of(OP, "kv_dim", kv_dim)?,
        stride: u32_of(OP, "stride", stride)?,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let groups = groups_1d(ctx, total.div_ceil(256).max(1));
    ctx.dispatch(enc, KernelKey::QkvSplit, &[&params, qkv, q, k, v], groups)
}
