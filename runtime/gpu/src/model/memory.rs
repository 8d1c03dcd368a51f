//! The memory plan: where every weight goes and what it costs, decided before anything is
//! allocated. The budget (`--max-memory`) caps everything the model and its sessions allocate on
//! the GPU — weights, just-in-time scratch, KV cache, activation scratch, staging; the context
//! enforces it on every allocation (`device/memory.rs`). NeuZip tensors are kept decoded (decoded
//! once at load) while the budget allows, and kept compressed and decoded just in time — chunk
//! by chunk of whole rows into a small scratch — otherwise; everything else stays as stored. A
//! budget below the smallest working configuration is refused before allocating, naming it.

use std::collections::{HashMap, HashSet};

use tern_format::{neuzip, Encoding, HParams, KvSpec, TernFile};

use crate::device::context::{GpuContext, UPLOAD_SLICE};
use crate::error::{GpuError, Result};
use crate::model::scratch::Scratch;
use crate::model::{GpuModel, KvCache};
use crate::tuning::GpuTuning;

/// Positions a model loaded under a budget leaves room for (the KV cache of one session of this
/// context, beside its activation scratch for [`RESERVE_BATCH`] tokens). A larger session is
/// checked when it is made (`GpuSession::new`).
pub const RESERVE_CTX: u64 = 512;
/// Batch (prefill chunk) of the session the budget leaves room for.
pub const RESERVE_BATCH: u64 = 16;
/// Bytes assumed per GPU buffer beyond its size (allocation granularity), per recorded kernel
/// parameter buffer, and for everything small (the NeuZip status readbacks, step inputs).
const SLACK: u64 = 256;
const OVERHEAD: u64 = 256 << 10;
/// Recorded plans a session keeps at most (see `GpuSession::plan_for`).
const PLANS: u64 = 9;
/// Scratch sizes tried for just-in-time decoding, largest first (capped by a binding).
const JIT_CHUNKS: [u64; 9] = [
    128 << 20,
    32 << 20,
    8 << 20,
    2 << 20,
    512 << 10,
    128 << 10,
    32 << 10,
    8 << 10,
    0,
];

/// Options of [`crate::GpuModel::load`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuModelOptions {
    /// GPU memory the model and its sessions may take (bytes): weights, just-in-time scratch,
    /// KV caches, activation scratch, staging. NeuZip tensors are kept decoded while it allows,
    /// and decoded just in time otherwise; loading fails with [`GpuError::OverBudget`] naming the
    /// smallest budget that works when even that does not fit. `None`: no limit.
    pub max_memory: Option<u64>,
    /// The KV-cache format the budget's session reserve is sized for (sessions pass their own
    /// to `GpuSession::new`).
    pub kv: KvSpec,
    /// The kernel and layout choices ([`GpuTuning`]; the caller parses the environment with
    /// [`GpuTuning::from_env`] at its edge, or leaves the defaults).
    pub tuning: GpuTuning,
}

/// How one tensor is held on the GPU (reported by `tern bench` and `-v`).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlacement {
    pub name: String,
    /// Encoding in the file.
    pub encoding: String,
    /// "resident" (as stored), "decoded" (NeuZip decoded once at load), "jit" (NeuZip kept
    /// compressed, decoded before each use), "host" (token embeddings looked up on the CPU).
    pub placement: &'static str,
    /// Bytes it takes on the GPU.
    pub gpu_bytes: u64,
}

/// What the memory plan decided, with the bytes of each part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPlan {
    pub budget: Option<u64>,
    pub tensors: Vec<TensorPlacement>,
    /// Bytes of the just-in-time decode scratch (one or two buffers of the largest chunk).
    pub jit_scratch_bytes: u64,
    /// The smallest budget this model loads and runs a session of [`RESERVE_CTX`] positions
    /// with (every NeuZip tensor decoded just in time through the smallest scratch).
    pub min_budget: u64,
    /// Bytes the load left for sessions (KV cache + scratch of [`RESERVE_CTX`] positions).
    pub session_reserve: u64,
}

impl MemoryPlan {
    /// Resident weight bytes by encoding name, sorted by name.
    pub fn by_encoding(&self) -> Vec<(String, u64)> {
        let mut m: HashMap<String, u64> = HashMap::new();
        for t in &self.tensors {
            let k = if t.placement == "resident" || t.placement == "host" {
                t.encoding.clone()
            } else {
                format!("{} ({})", t.encoding, t.placement)
            };
            *m.entry(k).or_default() += t.gpu_bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }

    /// All weight bytes on the GPU.
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.gpu_bytes).sum()
    }
}

/// What [`decide`] chose: the NeuZip matrices decoded at load, the just-in-time chunk size and
/// scratch buffers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decision {
    pub(crate) decode: HashSet<String>,
    /// Largest decoded bytes of one just-in-time chunk.
    pub(crate) jit_chunk: u64,
    /// Scratch buffers decoded chunks alternate between (1 or 2).
    pub(crate) jit_buffers: u64,
    pub(crate) min_budget: u64,
    pub(crate) session_reserve: u64,
}

/// A NeuZip matrix of the file.
struct Nz {
    name: String,
    decoded: u64,
    blob: u64,
    /// Decoded bytes of its smallest chunk of whole rows.
    row_group: u64,
    /// Kept compressed, it is multiplied by the fused decode + GEMV kernel: no scratch, chunks
    /// as large as a binding.
    fused: bool,
}

impl Nz {
    /// GPU bytes kept compressed with chunks of at most `chunk` decoded bytes.
    fn compressed(&self, chunk: u64) -> u64 {
        let chunk = if self.fused { self.decoded } else { chunk };
        let chunks = self.decoded / chunk.max(self.row_group).max(1) + 1;
        self.blob + 3 * SLACK + chunks * 2 * SLACK
    }
}

/// Whether a NeuZip matrix of `cols` columns kept compressed runs through the fused decode +
/// GEMV kernel (blocks of whole rows) rather than being decoded into a scratch before each use.
pub(crate) fn fusable(plan: &neuzip::Plan, cols: u64) -> bool {
    plan.blocks_per_row == 1 && plan.row_len == cols
}

/// GPU bytes of a session of `n_ctx` positions in the KV format `kv` and batches of `batch`
/// tokens, with its recorded plans' parameter buffers.
pub(crate) fn session_bytes(
    ctx: &GpuContext,
    hp: &HParams,
    n_ctx: u64,
    batch: u64,
    kv: &KvSpec,
) -> u64 {
    session_parts(ctx, hp, n_ctx, batch, kv).total()
}

/// Decide, before allocating anything, which NeuZip matrices are decoded at load and how the
/// others are decoded just in time, so that the model, a session of [`RESERVE_CTX`] positions
/// and the load's transients fit `budget`; `Err(OverBudget)` naming the smallest budget when
/// nothing fits. No budget: everything decoded.
/// Bytes a q/k/v matrix gains when `load.rs`'s `concat_rows` stacks it: a per-tensor scale
/// becomes one per row (`rows − 1` more scales; counted whether or not the three stack).
fn stacked_scale_bytes(t: &tern_format::TensorInfo) -> u64 {
    let qkv = ["attn_q.weight", "attn_k.weight", "attn_v.weight"];
    match (&t.encoding, t.shape.as_slice()) {
        (
            Encoding::Ternary {
                group: 0,
                scale_type,
                ..
            },
            [rows, _],
        ) if qkv.iter().any(|n| t.name.ends_with(n)) => {
            rows.saturating_sub(1) * scale_type.size() as u64
        }
        _ => 0,
    }
}

/// The file's tensors as [`decide`] and [`plan_load`] count them (one pass, one definition).
struct Tally {
    /// Bytes of every tensor kept as stored (vectors as f32), with the per-buffer allowance.
    fixed: u64,
    /// The allowance inside `fixed` (allocation granularity of each buffer).
    slack: u64,
    nz: Vec<Nz>,
    /// The largest tensor's stored bytes (the upload staging of one slice).
    largest: u64,
}

fn tally(file: &TernFile) -> Tally {
    let hp = &file.meta().hparams;
    let tied = hp.tied_embeddings;
    let mut t_ = Tally {
        fixed: 0,
        slack: 0,
        nz: Vec::new(),
        largest: 0,
    };
    for t in file.tensors() {
        if t.name == "token_embd.weight" && !tied {
            continue; // looked up on the host
        }
        let elems = t.shape.iter().product::<u64>();
        match (&t.encoding, t.shape.as_slice()) {
            (_, [_]) => {
                t_.fixed += elems * 4 + SLACK;
                t_.slack += SLACK;
            }
            (Encoding::NeuZip { dtype, .. }, [rows, cols]) => {
                let es = dtype.size() as u64;
                let plan = file
                    .tensor(&t.name)
                    .ok()
                    .and_then(|v| neuzip::Plan::parse(v.bytes).ok());
                let rows_per_group = plan
                    .as_ref()
                    .map_or(1, |p| u64::from(p.rows_per_block.max(1)));
                t_.nz.push(Nz {
                    name: t.name.clone(),
                    decoded: rows * cols * es,
                    blob: t.size,
                    row_group: rows_per_group.min(*rows) * cols * es + 8,
                    fused: plan.is_some_and(|p| fusable(&p, *cols)),
                });
                t_.largest = t_.largest.max(t.size);
            }
            _ => {
                t_.fixed += t.size + 4 * SLACK + stacked_scale_bytes(t);
                t_.slack += 4 * SLACK;
                t_.largest = t_.largest.max(t.size);
            }
        }
    }
    t_
}

pub(crate) fn decide(
    ctx: &GpuContext,
    file: &TernFile,
    budget: Option<u64>,
    kv: &KvSpec,
) -> Result<Decision> {
    let hp = &file.meta().hparams;
    let Tally {
        fixed, nz, largest, ..
    } = tally(file);
    let session_reserve = session_bytes(ctx, hp, RESERVE_CTX, RESERVE_BATCH, kv);
    let base = ctx.live_bytes() + fixed + session_reserve + largest.min(UPLOAD_SLICE) + OVERHEAD;
    let all_decoded: u64 = nz.iter().map(|n| n.decoded + SLACK).sum();
    // Scratch only for the matrices the fused kernel cannot multiply.
    let unfused = || nz.iter().filter(|n| !n.fused);
    let any_unfused = unfused().next().is_some();
    let max_decoded = unfused().map(|n| n.decoded).max().unwrap_or(0);
    // The smallest chunk: a row group of every tensor, and at most 16 chunks of the largest tensor.
    let min_group = unfused()
        .map(|n| n.row_group)
        .max()
        .unwrap_or(0)
        .max(max_decoded / 16);
    let max_blob = nz
        .iter()
        .map(|n| n.compressed(min_group))
        .max()
        .unwrap_or(0);
    let jit_total = |chunk: u64, bufs: u64| -> u64 {
        let c = chunk.max(min_group);
        let scratch = if any_unfused { bufs * (c + SLACK) } else { 0 };
        nz.iter().map(|n| n.compressed(c)).sum::<u64>() + scratch
    };
    let min_budget = if nz.is_empty() {
        base
    } else {
        base + jit_total(0, 1)
    };
    let mut d = Decision {
        min_budget,
        session_reserve,
        ..Decision::default()
    };
    let Some(budget) = budget else {
        d.decode = nz.into_iter().map(|n| n.name).collect();
        return Ok(d);
    };
    if budget < min_budget {
        return Err(GpuError::OverBudget {
            what: format!(
                "this model ({fixed} bytes of fixed weights, {} bytes of NeuZip tensors kept \
                 compressed, a session of {RESERVE_CTX} positions: {session_reserve} bytes)",
                jit_total(0, 0)
            ),
            budget,
            minimum: min_budget,
            detail: String::new(),
        });
    }
    if base + all_decoded + max_blob <= budget {
        d.decode = nz.into_iter().map(|n| n.name).collect();
        return Ok(d);
    }
    // The largest just-in-time chunk that fits, two scratch buffers when they fit.
    let binding = ctx.binding_limit();
    let (chunk, bufs) = JIT_CHUNKS
        .iter()
        .map(|&c| c.min(binding).min(max_decoded).max(min_group))
        .flat_map(|c| [(c, 2), (c, 1)])
        .find(|&(c, b)| base + jit_total(c, b) <= budget)
        .unwrap_or((min_group, 1));
    let mut left = budget.saturating_sub(base + jit_total(chunk, bufs));
    let mut order: Vec<&Nz> = nz.iter().collect();
    order.sort_by(|a, b| b.decoded.cmp(&a.decoded));
    for n in order {
        // While it decodes at load its compressed copy is alive too (counted in `jit_total`).
        if n.decoded + SLACK <= left {
            left -= (n.decoded + SLACK).saturating_sub(n.compressed(chunk));
            d.decode.insert(n.name.clone());
        }
    }
    d.jit_chunk = chunk.max(min_group);
    d.jit_buffers = bufs;
    Ok(d)
}

impl GpuModel {
    /// The batch a session of `n_ctx` positions in the KV format `kv` can have under the budget:
    /// `max_batch`, or a smaller one when only that fits; `Err(OverBudget)` naming the budget a
    /// session of `n_ctx` positions needs and the largest context that fits in what is left.
    pub(crate) fn fit_session(&self, n_ctx: u64, max_batch: u64, kv: &KvSpec) -> Result<u64> {
        let ctx = &*self.ctx;
        let Some(budget) = ctx.budget() else {
            return Ok(max_batch);
        };
        let hp = &self.hp;
        // the cos/sin tables of the layers' other RoPE frequency sets (Gemma 3's global layers),
        // each the size of the scratch's one table
        let extra = self.rope_freqs.len().saturating_sub(1) as u64;
        let session_bytes = |ctx: &GpuContext, hp: &HParams, n_ctx: u64, b: u64, kv: &KvSpec| {
            let table = (b * u64::from(hp.rope_dim / 2).max(1) * 8).next_multiple_of(256);
            session_bytes(ctx, hp, n_ctx, b, kv).saturating_add(extra * table)
        };
        ctx.free_deferred();
        let live = ctx.live_bytes();
        let avail = budget.saturating_sub(live);
        let mut b = max_batch.max(1);
        loop {
            if session_bytes(ctx, hp, n_ctx, b, kv) <= avail {
                if b < max_batch {
                    log::info!("GPU memory budget: batches of {b} tokens (not {max_batch})");
                }
                return Ok(b);
            }
            if b == 1 {
                break;
            }
            b /= 2;
        }
        // the largest context that fits (session bytes grow with the context)
        let (mut lo, mut hi) = (0u64, n_ctx);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if session_bytes(ctx, hp, mid, 1, kv) <= avail {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let max_ctx = lo;
        Err(GpuError::OverBudget {
            what: format!("a session of {n_ctx} positions"),
            budget,
            minimum: live + session_bytes(ctx, hp, n_ctx, 1, kv),
            detail: format!(
                "; {live} bytes are allocated already, the largest context that fits is \
                 {max_ctx} positions"
            ),
        })
    }
}

/// What [`GpuModel::load`] would allocate under `opts`, computed from the file's tensor table
/// alone (nothing decoded or uploaded): the loader's own decision ([`decide`]) and the sizes it
/// places. `tern_engine::plan` builds on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadPlan {
    /// Weight bytes as the loader places them: what [`MemoryPlan::weight_bytes`] reports after
    /// the load (tensors kept as stored as their stored bytes, vectors as f32, NeuZip tensors
    /// decoded or kept compressed as the budget decides) plus the just-in-time scratch.
    pub weights_bytes: u64,
    /// The just-in-time decode scratch inside `weights_bytes`.
    pub jit_scratch_bytes: u64,
    /// The allowance the budget keeps beside the weights: the allocation granularity of each
    /// weight buffer, the small buffers (NeuZip status, step inputs) and what the context held
    /// before the load. Live bytes after the load are at most `weights_bytes + reserve_bytes`.
    pub reserve_bytes: u64,
    /// The smallest budget the model loads with ([`MemoryPlan::min_budget`]).
    pub min_budget: u64,
    /// Whether the load fits `opts.max_memory` (`false`: it would fail with
    /// [`GpuError::OverBudget`] naming `min_budget`).
    pub fits: bool,
}

/// A session's GPU bytes by part (their sum is what the budget check of `GpuSession::new`
/// counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBytes {
    /// The KV cache's buffers ([`KvCache::bytes_for`]).
    pub kv: u64,
    /// The activation scratch, logits and staging of batches of `batch` tokens (every buffer
    /// the session's scratch allocates).
    pub scratch: u64,
    /// The allowance for the recorded plans' parameter buffers and small per-session buffers.
    pub params: u64,
}

impl SessionBytes {
    pub fn total(&self) -> u64 {
        self.kv
            .saturating_add(self.scratch)
            .saturating_add(self.params)
    }
}

/// [`session_bytes`] by part.
pub fn session_parts(
    ctx: &GpuContext,
    hp: &HParams,
    n_ctx: u64,
    batch: u64,
    kv: &KvSpec,
) -> SessionBytes {
    let dispatches = u64::from(hp.n_layer) * 36 + 32;
    SessionBytes {
        kv: KvCache::bytes_for(hp, n_ctx, kv, batch),
        scratch: Scratch::bytes_for(ctx, hp, batch),
        params: 40 * SLACK + PLANS * dispatches * SLACK,
    }
}

/// The load's sizes under `opts` (see [`LoadPlan`]); the same checks as the load run first
/// (hyperparameters, features, activation kernels), so a file the GPU would refuse is refused
/// here, typed, with nothing allocated.
pub fn plan_load(ctx: &GpuContext, file: &TernFile, opts: &GpuModelOptions) -> Result<LoadPlan> {
    GpuModel::preflight(ctx, file)?;
    let t = tally(file);
    let live0 = ctx.live_bytes();
    let (d, fits) = match decide(ctx, file, opts.max_memory, &opts.kv) {
        Ok(d) => (d, true),
        Err(GpuError::OverBudget { .. }) => (decide(ctx, file, None, &opts.kv)?, false),
        Err(e) => return Err(e),
    };
    let nz_bytes: u64 =
        t.nz.iter()
            .map(|n| {
                if d.decode.contains(&n.name) {
                    n.decoded
                } else {
                    n.compressed(d.jit_chunk)
                }
            })
            .sum();
    let any_jit = t.nz.iter().any(|n| !n.fused && !d.decode.contains(&n.name));
    let jit_scratch_bytes = if any_jit {
        d.jit_buffers.clamp(1, 2) * d.jit_chunk.max(4).div_ceil(4) * 4
    } else {
        0
    };
    let weights_bytes = t.fixed - t.slack + nz_bytes + jit_scratch_bytes;
    Ok(LoadPlan {
        weights_bytes,
        jit_scratch_bytes,
        reserve_bytes: live0 + t.slack + OVERHEAD + t.nz.len() as u64 * SLACK,
        min_budget: d.min_budget,
        fits,
    })
}
