//! Causal GQA attention over the KV cache (decode and prefill), reading the cache in its stored
//! format ([`KvLayout`]: f32, f16, q8, KIVI q4/q3/q2, absmax a4/a3, rotated q4r/q3r/q2r —
//! dequantized in registers; the rotated formats' queries rotated and each head's output rotated
//! back inside the kernel).
//!
//! It reads `p0` (tokens already cached) from a small step buffer ([`StepParams`]) that the
//! caller rewrites with `queue.write_buffer` before each submit, so a plan recorded once serves
//! every position. The number of tokens per batch is fixed when the launcher records.

use crate::device::check::{check_binding as binding, check_buffer as need, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::AttnParams;
pub use crate::device::params::StepParams;
use crate::device::pipeline::{KernelKey, KvRole};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::kv::KvLayout;

/// Query heads sharing one kv head that one attention workgroup handles (`attention.wgsl`'s GM).
const HEADS_PER_WG: u64 = 4;
/// Shortest key chunk of a split (`attention.wgsl` / `attention_combine.wgsl`'s MIN_CHUNK): a
/// chunk is max(ceil(n_kv / n_split), this) keys, so short contexts use few splits.
const ATTN_MIN_CHUNK: u64 = 32;
/// Workgroups the split-K attention aims for: several per compute unit of a discrete GPU (so that
/// enough K/V loads are in flight; the merge reads ~1/8 of the K/V bytes at worst), fewer on an
/// integrated one, and a few per core on a software adapter (where every workgroup and barrier
/// costs time and more parallelism than cores buys nothing).
fn attn_target_wgs(ctx: &GpuContext) -> u64 {
    match ctx.info.device_type.as_str() {
        "cpu" => 16,
        "integrated" => 256,
        _ => 1024,
    }
}
/// At most this many key chunks per (token, head group) (attention_combine.wgsl's WG).
const ATTN_MAX_SPLIT: u64 = 128;
/// Query tokens per workgroup of the prefill kernel (`attention_prefill.wgsl`'s TQ).
const PREFILL_TOKENS_PER_WG: u64 = 4;
/// Batches shorter than this keep `attention.wgsl` (a few tokens over a long cache want its
/// split-K; the prefill kernel runs one workgroup over all of a token tile's keys).
const PREFILL_MIN_TOKENS: u64 = 16;

/// Which kernel and how many key chunks a call asks for.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// The prefill kernel where it applies and pays, else the adapter's split count.
    Auto,
    /// `attention.wgsl` with this many key chunks.
    Split(u64),
    /// No split-K: the prefill kernel where it applies and pays, else one chunk.
    Unsplit,
    /// The prefill kernel, or an error saying why it does not apply.
    Prefill,
}

/// Why `attention_prefill.wgsl` cannot run this call (`None`: it can).
fn prefill_unfit(
    layout: &KvLayout,
    read: KvRead,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
) -> Option<String> {
    use tern_format::KvQuant;
    if !matches!(read, KvRead::Own) {
        return Some("a MiniCache pair's layer".into());
    }
    if !matches!(layout.quant, KvQuant::F32 | KvQuant::F16) {
        return Some(format!(
            "the {} cache (f32 and f16 only)",
            layout.quant.name()
        ));
    }
    if layout.head_dim > 128 || !layout.head_dim.is_multiple_of(16) {
        return Some(format!(
            "head_dim {} (a multiple of 16, at most 128)",
            layout.head_dim
        ));
    }
    if !k_cache.size().is_multiple_of(16) || !v_cache.size().is_multiple_of(16) {
        return Some("cache buffers not a multiple of 16 bytes".into());
    }
    None
}

/// Whether a batch of `n_tokens` goes to the prefill kernel: only when opted in (`opt_in`:
/// [`crate::GpuTuning::attn_prefill`]), when the batch is long enough and its workgroups
/// (`wgs_x` per token tile) fill the GPU. Off by default because on the one GPU measured it loses:
/// H100, 2B4T pp512, three calls (docs/bench/session6-2026-11-24): 0.3–1.7 % slower end to end
/// than `attention.wgsl` one token per workgroup + the separate RoPE/KV store (its kernel 7.8 ms
/// against 6.9 per prefill; the fused RoPE + store saves ~1.0 ms). What it saves — a quarter of
/// the K/V reads, 120 fewer dispatches per 30-layer prefill — is what a phone GPU without a large
/// L2 pays for, which is unmeasured.
fn prefill_pays(ctx: &GpuContext, n_tokens: u64, wgs_x: u64, opt_in: bool) -> bool {
    n_tokens >= PREFILL_MIN_TOKENS
        && wgs_x.saturating_mul(n_tokens.div_ceil(PREFILL_TOKENS_PER_WG))
            >= attn_target_wgs(ctx) / 8
        && opt_in
}

/// Whether [`attention_into`] with no split forced (or `Some(1)`) runs a batch of `n_tokens`
/// through the prefill kernel (opted in with `prefill`), which alone reads strided query rows
/// (`q_row`): the graph then leaves the queries in the stacked q/k/v rows (RoPE fused with the
/// KV store).
pub(crate) fn prefill_takes(
    ctx: &GpuContext,
    layout: &KvLayout,
    (k_cache, v_cache): (&wgpu::Buffer, &wgpu::Buffer),
    n_tokens: u64,
    n_head: u64,
    prefill: bool,
) -> bool {
    let n_hg = (n_head / layout.heads.max(1)).div_ceil(HEADS_PER_WG);
    prefill_unfit(layout, KvRead::Own, k_cache, v_cache).is_none()
        && prefill_pays(ctx, n_tokens, layout.heads * n_hg, prefill)
}

/// Key chunks (workgroups per (token, head group)) that [`attention`] records for a batch of
/// `n_tokens` over a cache of `n_ctx` positions (reported by benchmarks).
pub fn attention_splits(
    ctx: &GpuContext,
    n_tokens: u64,
    n_head: u64,
    n_head_kv: u64,
    n_ctx: u64,
) -> u64 {
    let n_hg = (n_head / n_head_kv.max(1)).div_ceil(HEADS_PER_WG);
    splits_for(attn_target_wgs(ctx), n_tokens, n_head_kv * n_hg, n_ctx)
}

/// Key chunks for a batch: 1 when the (token, head group) workgroups already fill the GPU,
/// else enough to reach `target` ([`attn_target_wgs`]), at most one per [`ATTN_MIN_CHUNK`] keys
/// of the cache.
fn splits_for(target: u64, n_tokens: u64, wgs_per_token: u64, n_ctx: u64) -> u64 {
    let base = n_tokens.saturating_mul(wgs_per_token).max(1);
    target
        .div_ceil(base)
        .min(ATTN_MAX_SPLIT)
        .min(n_ctx.div_ceil(ATTN_MIN_CHUNK))
        .max(1)
}

/// Causal GQA attention: `out[t][h]` = softmax over keys `0..=p0+t` of
/// `q[t][h] · k[key][h / group] · scale`, applied to `v`.
///
/// Split-K: the keys of each (token, head) are cut into chunks processed by separate workgroups
/// (chosen here from the batch shape; the chunk length follows `p0` on the GPU), whose partial
/// softmax states a second kernel merges. Partials go to a buffer allocated here (a
/// [`crate::Plan`] keeps it); a session passes its scratch's instead ([`attention_into`]).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
) -> Result<()> {
    attention_with_split(
        ctx, enc, layout, step, q, k_cache, v_cache, out, n_tokens, n_head, scale, None,
    )
}

/// [`attention`] with the number of key chunks forced (benchmarks, and parity of the split counts
/// that other adapters pick; `None` = its choice for this adapter).
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn attention_with_split(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
    forced_split: Option<u64>,
) -> Result<()> {
    attention_role(
        ctx,
        enc,
        layout,
        step,
        q,
        (k_cache, v_cache),
        out,
        n_tokens,
        n_head,
        scale,
        forced_split,
        KvRead::Own,
    )
}

/// [`attention`] through the query-tiled prefill kernel (`attention_prefill.wgsl`: 4 tokens per
/// workgroup; f32 / f16 caches of a layer of its own, head_dim a multiple of 16 up to 128), or a
/// shape error saying why it does not apply. The graph's attention takes it by itself for batches
/// of 16 tokens and more with [`crate::GpuTuning::attn_prefill`] (parity tests and benchmarks
/// call this).
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn attention_prefill(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
) -> Result<()> {
    attention_in(
        ctx,
        enc,
        layout,
        step,
        q,
        k_cache,
        v_cache,
        out,
        n_tokens,
        n_head,
        scale,
        Pick::Prefill,
        None,
        KvRead::Own,
        None,
        true,
        None,
    )
}

/// How a layer reads its cache: its own, or as the first / second layer of a MiniCache pair
/// (`attention.wgsl`'s `MC`). The first layer's own batch rows are read unmerged from the query
/// buffer: keys `[n_tokens][row]` f32 from word `pend` (after the queries), then the values (a
/// mobile GPU binds only 4 storage buffers per kernel).
#[derive(Debug, Clone, Copy)]
pub enum KvRead {
    Own,
    First { pend: u64 },
    Second,
}

impl KvRead {
    fn role(&self) -> KvRole {
        match self {
            KvRead::Own => KvRole::Own,
            KvRead::First { .. } => KvRole::First,
            KvRead::Second => KvRole::Second,
        }
    }
}

/// [`attention_with_split`] reading the cache as `read` says (MiniCache pairs; parity tests).
/// These public launchers keep `attention.wgsl` (the prefill kernel is the graph's opt-in,
/// [`crate::GpuTuning::attn_prefill`]; [`attention_prefill`] forces it).
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn attention_role(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    (k_cache, v_cache): (&wgpu::Buffer, &wgpu::Buffer),
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
    forced_split: Option<u64>,
    read: KvRead,
) -> Result<()> {
    attention_in(
        ctx,
        enc,
        layout,
        step,
        q,
        k_cache,
        v_cache,
        out,
        n_tokens,
        n_head,
        scale,
        forced_split.map_or(Pick::Auto, Pick::Split),
        None,
        read,
        None,
        false,
        None,
    )
}

/// [`attention_with_split`] with a sliding window: query `t` attends only the last
/// `min(p0 + t + 1, window)` keys (`tern_reference`'s `first_key`: Gemma 3's local layers).
/// `attention.wgsl` only (the prefill kernel does not take a window).
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn attention_windowed(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    (k_cache, v_cache): (&wgpu::Buffer, &wgpu::Buffer),
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
    forced_split: Option<u64>,
    window: u64,
) -> Result<()> {
    attention_in(
        ctx,
        enc,
        layout,
        step,
        q,
        k_cache,
        v_cache,
        out,
        n_tokens,
        n_head,
        scale,
        forced_split.map_or(Pick::Auto, Pick::Split),
        None,
        KvRead::Own,
        None,
        false,
        Some(window),
    )
}

/// [`attention`] writing its split-K partials into `partials` (a session's scratch, shared by
/// every layer of a recording and sized by [`attn_partials_bytes`]) instead of a buffer of its
/// own per call; `split`: the key chunks forced (`Some(1)`: no split, no combine dispatch — a
/// plan recorded for short contexts), else the adapter's choice; `prefill`: the prefill kernel
/// where it applies and pays ([`crate::GpuTuning::attn_prefill`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_into(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
    partials: &wgpu::Buffer,
    read: KvRead,
    split: Option<u64>,
    q_row: Option<u64>,
    prefill: bool,
    window: Option<u64>,
) -> Result<()> {
    attention_in(
        ctx,
        enc,
        layout,
        step,
        q,
        k_cache,
        v_cache,
        out,
        n_tokens,
        n_head,
        scale,
        match split {
            Some(1) => Pick::Unsplit,
            Some(s) => Pick::Split(s),
            None => Pick::Auto,
        },
        Some(partials),
        read,
        q_row,
        prefill,
        window,
    )
}

/// Bytes of split-K partials any batch of up to `max_tokens` tokens needs (whatever the context:
/// a short cache only lowers the split count); 0 when no batch is split.
pub(crate) fn attn_partials_bytes(
    ctx: &GpuContext,
    max_tokens: u64,
    n_head: u64,
    n_head_kv: u64,
    head_dim: u64,
) -> u64 {
    (1..=max_tokens.max(1))
        .map(
            |t| match attention_splits(ctx, t, n_head, n_head_kv, u64::MAX) {
                1 => 0,
                split => partials_bytes(t, n_head, split, head_dim),
            },
        )
        .max()
        .unwrap_or(0)
}

fn partials_bytes(n_tokens: u64, n_head: u64, n_split: u64, head_dim: u64) -> u64 {
    n_tokens
        .saturating_mul(n_head)
        .saturating_mul(n_split)
        .saturating_mul(head_dim + 2)
        .saturating_mul(4)
}

#[allow(clippy::too_many_arguments)]
fn attention_in(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    q: &wgpu::Buffer,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: u64,
    n_head: u64,
    scale: f32,
    pick: Pick,
    partials: Option<&wgpu::Buffer>,
    read: KvRead,
    q_row: Option<u64>,
    prefill_opt_in: bool,
    window: Option<u64>,
) -> Result<()> {
    const OP: &str = "attention";
    if window == Some(0) {
        return Err(GpuError::shape(OP, "a sliding window of 0 keys"));
    }
    let (n_head_kv, head_dim, n_ctx) = (layout.heads, layout.head_dim, layout.n_ctx);
    if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
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
    let qb = n_tokens
        .saturating_mul(n_head)
        .saturating_mul(head_dim)
        .saturating_mul(4);
    // token t's queries at word t · q_stride (planar: n_head · head_dim)
    let q_dim = n_head.saturating_mul(head_dim);
    let q_stride = q_row.unwrap_or(q_dim);
    if q_stride < q_dim {
        return Err(GpuError::shape(
            OP,
            format!("query rows of {q_stride} words hold {n_head} heads of {head_dim}"),
        ));
    }
    let q_words = n_tokens.saturating_sub(1).saturating_mul(q_stride) + q_dim;
    need(OP, "q", q, q_words.saturating_mul(4))?;
    binding(ctx, "queries", q_words.saturating_mul(4))?;
    need(OP, "out", out, qb)?;
    need(OP, "k cache", k_cache, layout.buffer_bytes(true))?;
    need(OP, "v cache", v_cache, layout.buffer_bytes(false))?;
    need(OP, "step", step, std::mem::size_of::<StepParams>() as u64)?;
    layout.check_binding(ctx)?;
    if layout.pair == matches!(read, KvRead::Own) {
        return Err(GpuError::internal(
            OP,
            "a MiniCache pair's buffers are read as its first or second layer, only",
        ));
    }
    let mut geom = layout.geom(n_tokens, false)?;
    if let KvRead::First { pend } = read {
        // the first layer's unmerged batch rows follow the queries
        let end = pend.saturating_add(2 * n_tokens * layout.row());
        need(OP, "queries and pending rows", q, end.saturating_mul(4))?;
        binding(ctx, "queries and pending rows", end.saturating_mul(4))?;
        geom.pend = u32_of(OP, "pending rows", pend)?;
    }
    binding(ctx, "queries", qb)?;
    let group = n_head / n_head_kv;
    let n_hg = group.div_ceil(HEADS_PER_WG);
    let wgs_x = n_head_kv * n_hg;
    let token_tiles = n_tokens.div_ceil(PREFILL_TOKENS_PER_WG);
    let unfit = match window {
        Some(_) => Some("a sliding window".to_string()),
        None => prefill_unfit(layout, read, k_cache, v_cache),
    };
    let pays = unfit.is_none() && prefill_pays(ctx, n_tokens, wgs_x, prefill_opt_in);
    let prefill = match pick {
        Pick::Prefill => true,
        Pick::Auto | Pick::Unsplit => pays,
        Pick::Split(_) => false,
    };
    if !prefill && n_tokens > 1 && q_stride != q_dim {
        return Err(GpuError::internal(
            OP,
            "strided query rows: only the prefill kernel reads them (check prefill_takes)",
        ));
    }
    let n_split = match pick {
        Pick::Split(s) if (1..=ATTN_MAX_SPLIT).contains(&s) => s,
        Pick::Split(s) => {
            return Err(GpuError::shape(
                OP,
                format!("{s} key chunks: 1..={ATTN_MAX_SPLIT}"),
            ))
        }
        Pick::Prefill => {
            if let Some(why) = unfit {
                return Err(GpuError::shape(
                    OP,
                    format!("the prefill kernel does not take {why}"),
                ));
            }
            1
        }
        Pick::Unsplit => 1,
        Pick::Auto if pays => 1,
        Pick::Auto => splits_for(attn_target_wgs(ctx), n_tokens, wgs_x, n_ctx),
    };
    let p = AttnParams {
        n_head: u32_of(OP, "n_head", n_head)?,
        n_head_kv: u32_of(OP, "n_head_kv", n_head_kv)?,
        head_dim: u32_of(OP, "head_dim", head_dim)?,
        n_ctx: u32_of(OP, "n_ctx", n_ctx)?,
        scale,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        n_split: u32_of(OP, "n_split", n_split)?,
        n_hg: u32_of(OP, "head groups", n_hg)?,
        q_stride: u32_of(OP, "query row", q_stride)?,
        // a window past the cache is no window (0 = none)
        window: u32_of(OP, "window", window.unwrap_or(0).min(n_ctx))?,
        ..AttnParams::default()
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let geom = ctx.uniform(bytemuck::bytes_of(&geom))?;
    if prefill {
        // attention_prefill.wgsl: one workgroup per (kv head · head group, 4-token tile)
        let groups = (
            u32_of(OP, "workgroups", wgs_x)?,
            u32_of(OP, "token tiles", token_tiles)?,
            1,
        );
        return ctx.dispatch(
            enc,
            KernelKey::AttentionPrefill(layout.quant),
            &[&params, step, q, k_cache, v_cache, out, &geom],
            groups,
        );
    }
    let groups = (u32_of(OP, "workgroups", wgs_x)?, p.n_tokens, p.n_split);
    // KIVI: the word path where one workgroup runs over all of a token's keys (prefill), the
    // per-channel path over the short chunks of a split step (lower latency per workgroup)
    let key = if n_split == 1 && layout.quant.is_kivi() {
        KernelKey::AttentionWords(layout.quant, read.role())
    } else {
        KernelKey::Attention(layout.quant, read.role())
    };
    if n_split == 1 {
        return ctx.dispatch(
            enc,
            key,
            &[&params, step, q, k_cache, v_cache, out, &geom],
            groups,
        );
    }
    let pb = partials_bytes(n_tokens, n_head, n_split, head_dim);
    binding(ctx, "attention partials", pb)?;
    let own;
    let partials = match partials {
        Some(b) => {
            need(OP, "partials", b, pb)?;
            b
        }
        None => {
            own = ctx.zeroed("attention partials", pb)?;
            &own
        }
    };
    ctx.dispatch(
        enc,
        key,
        &[&params, step, q, k_cache, v_cache, partials, &geom],
        groups,
    )?;
    // attention_combine.wgsl: one workgroup per 32 dims of a (head, token)
    let combine_x = u32_of(OP, "combine workgroups", n_head * head_dim.div_ceil(32))?;
    ctx.dispatch(
        enc,
        KernelKey::AttentionCombine,
        &[&params, step, partials, out],
        (combine_x, p.n_tokens, 1),
    )
}
