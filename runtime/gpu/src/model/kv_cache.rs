//! The KV cache as a type: it owns its buffers, its format ([`KvSpec`]: `tern_format::kv`), its
//! layout, its byte accounting and how it maps onto bindings.
//!
//! Every format of the spec (f32, f16, q8, KIVI q4/q3/q2, absmax a4/a3): per layer one key and
//! one value buffer ([`KvLayout`]: codes, f16 parameters, KIVI's f16 window as a ring of `R`
//! rows, a3's 4-bit position-0 row), preallocated for `n_ctx` positions and written in place by
//! `kv_store` (quantizing on write), read in place by the attention kernel (dequantizing in
//! registers). Each buffer is one storage binding, so a layer's keys must fit
//! [`GpuContext::binding_limit`]: [`KvCache::new`] refuses a larger context with
//! [`GpuError::TooLarge`] naming the largest that fits ([`KvCache::max_positions`]).
//!
//! MiniCache (the design of `tern_reference::kv`): from the start layer on, each pair of layers
//! `(a, b)` shares one buffer pair ([`KvLayout::pair`]: the merged directions in the cache's
//! format, the magnitudes, the retained pool); layer `a` attends over `mag[0]·direction` (its own
//! batch's rows unmerged, kept in [`KvCache::mc_scratch`]), layer `b` merges the pair
//! (`kernels::minicache::merge`), stores the directions and attends over `mag[1]·direction` or its
//! retained rows. Layers without a partner keep their own buffers.
//!
//! Bytes: [`KvCache::bytes`] is what is allocated (the memory budget counts it);
//! [`KvCache::bytes_in_use`] / [`KvCache::bytes_per_token`] are the spec's exact accounting of the
//! positions held (`KvSpec::bytes_held`: codes, scales, zero points, the f16 window, magnitudes,
//! retained rows), the same numbers the CPU reference's cache reports. A full cache is a typed
//! error when a batch would pass `n_ctx` (`GpuSession::eval`: no context shift).

use tern_format::{HParams, KvSpec};

pub use crate::device::pipeline::KvRole;

use crate::device::context::GpuContext;
use crate::device::memory::Tracked;
pub use crate::device::pipeline::KvFormat;
use crate::error::{GpuError, Result};
use crate::kernels::kv::KvLayout;

/// One layer's keys and values.
#[derive(Debug)]
pub struct KvLayer {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
}

/// MiniCache's per-batch scratch: `qkv` holds layer `a`'s queries, then its keys and values
/// (`[max_batch][q_dim]`, then `[n][row]` twice for a batch of `n`: its attention reads its own
/// rows from there, the merge at layer `b` too); the merged directions, keys and values,
/// `[max_batch][row]` f32 each.
#[derive(Debug)]
pub struct McScratch {
    pub qkv: wgpu::Buffer,
    pub dir_k: wgpu::Buffer,
    pub dir_v: wgpu::Buffer,
}

/// Words of MiniCache's `qkv` scratch for batches of `b` tokens.
fn qkv_words(hp: &HParams, b: u64) -> u64 {
    let q_dim = u64::from(hp.n_head) * u64::from(hp.head_dim);
    b.max(1).saturating_mul(q_dim + 2 * KvCache::row(hp))
}

/// A preallocated KV cache for `n_ctx` positions of every layer (see the module doc).
#[derive(Debug)]
pub struct KvCache {
    spec: KvSpec,
    layout: KvLayout,
    /// The layout of the MiniCache pairs' buffers.
    pair_layout: KvLayout,
    hp: HParams,
    /// Layers' own buffers, then one per MiniCache pair.
    pub(crate) layers: Vec<KvLayer>,
    /// Per model layer: its buffers (index into `layers`) and how it reads them.
    roles: Vec<(usize, KvRole)>,
    /// Layers with buffers of their own (the pairs' come after them in `layers`).
    own: usize,
    mc: Option<McScratch>,
    /// Releases these bytes from the context's own count when the cache goes.
    _tracked: Tracked,
}

impl KvCache {
    /// Values per position per layer for `hp`.
    pub fn row(hp: &HParams) -> u64 {
        u64::from(hp.n_head_kv) * u64::from(hp.head_dim)
    }

    /// The layout of one layer of a cache of `n_ctx` positions in `spec` (checked).
    pub fn layout_for(hp: &HParams, n_ctx: u64, spec: &KvSpec) -> Result<KvLayout> {
        spec.check(hp)
            .map_err(|e| GpuError::invalid("kv cache", e.to_string()))?;
        KvLayout::new(
            spec.quant,
            spec.kivi,
            u64::from(hp.n_head_kv),
            u64::from(hp.head_dim),
            n_ctx,
        )
    }

    /// Layer pairs merged by MiniCache, and layers with buffers of their own.
    fn counts(hp: &HParams, spec: &KvSpec) -> (u64, u64) {
        let pairs = spec
            .minicache
            .map_or(0, |m| m.pairs(hp.n_layer).len() as u64);
        (pairs, u64::from(hp.n_layer) - 2 * pairs)
    }

    /// Bytes a cache of `n_ctx` positions allocates for batches of up to `max_batch` tokens
    /// (before allocating: the memory budget).
    pub fn bytes_for(hp: &HParams, n_ctx: u64, spec: &KvSpec, max_batch: u64) -> u64 {
        let Ok(l) = Self::layout_for(hp, n_ctx.max(1), spec) else {
            return u64::MAX;
        };
        let both = |l: &KvLayout| -> u64 {
            [true, false]
                .map(|k| l.buffer_bytes(k).max(4).div_ceil(4) * 4)
                .iter()
                .sum()
        };
        let (pairs, own) = Self::counts(hp, spec);
        let mut total = own.saturating_mul(both(&l));
        if pairs > 0 {
            let Ok(pl) = l.pair() else {
                return u64::MAX;
            };
            let scratch = (2 * max_batch.max(1).saturating_mul(l.row()))
                .saturating_add(qkv_words(hp, max_batch))
                .saturating_mul(4);
            total = total
                .saturating_add(pairs.saturating_mul(both(&pl)))
                .saturating_add(scratch);
        }
        total
    }

    /// The largest context whose per-layer buffers fit one binding of `ctx`.
    pub fn max_positions(ctx: &GpuContext, hp: &HParams, spec: &KvSpec) -> u64 {
        let limit = ctx.binding_limit();
        Self::layout_for(hp, 1, spec)
            .map(|l| match (spec.minicache, l.pair()) {
                (Some(_), Ok(pl)) => l
                    .max_positions_within(limit)
                    .min(pl.max_positions_within(limit)),
                // a pair the GPU refuses (MiniCache over a rotated cache): nothing fits
                (Some(_), Err(_)) => 0,
                (None, _) => l.max_positions_within(limit),
            })
            .unwrap_or(0)
    }

    /// Allocate (zeroed) a cache of `n_ctx` positions in `spec` for the model `hp` describes,
    /// for batches of up to `max_batch` tokens (MiniCache's scratch).
    pub fn new(
        ctx: &GpuContext,
        hp: &HParams,
        n_ctx: u64,
        spec: &KvSpec,
        max_batch: u64,
    ) -> Result<Self> {
        let layout = Self::layout_for(hp, n_ctx, spec)?;
        layout.check_binding(ctx)?;
        let pairs = spec
            .minicache
            .map(|m| m.pairs(hp.n_layer))
            .unwrap_or_default();
        let pair_layout = if pairs.is_empty() {
            layout
        } else {
            let pl = layout.pair()?;
            pl.check_binding(ctx)?;
            pl
        };
        let n_layer = hp.n_layer as usize;
        let oom = |what: &str, n: usize| GpuError::OutOfMemory {
            what: what.into(),
            bytes: n as u64,
        };
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(n_layer)
            .map_err(|_| oom("KV cache layer table", n_layer))?;
        let mut roles = Vec::new();
        roles
            .try_reserve_exact(n_layer)
            .map_err(|_| oom("KV cache layer table", n_layer))?;
        let own = n_layer - 2 * pairs.len();
        for l in 0..hp.n_layer {
            let role = match pairs.iter().position(|&(a, b)| a == l || b == l) {
                Some(i) => {
                    let first = pairs.get(i).is_some_and(|&(a, _)| a == l);
                    let r = if first { KvRole::First } else { KvRole::Second };
                    (own + i, r)
                }
                None => {
                    layers.push(KvLayer {
                        k: ctx.zeroed("k cache", layout.buffer_bytes(true))?,
                        v: ctx.zeroed("v cache", layout.buffer_bytes(false))?,
                    });
                    (layers.len() - 1, KvRole::Own)
                }
            };
            roles.push(role);
        }
        for _ in &pairs {
            layers.push(KvLayer {
                k: ctx.zeroed("minicache k", pair_layout.buffer_bytes(true))?,
                v: ctx.zeroed("minicache v", pair_layout.buffer_bytes(false))?,
            });
        }
        let mc = if pairs.is_empty() {
            None
        } else {
            let b = max_batch
                .max(1)
                .saturating_mul(layout.row())
                .saturating_mul(4);
            Some(McScratch {
                qkv: ctx.zeroed("minicache layer a rows", qkv_words(hp, max_batch) * 4)?,
                dir_k: ctx.zeroed("minicache key directions", b)?,
                dir_v: ctx.zeroed("minicache value directions", b)?,
            })
        };
        Ok(KvCache {
            spec: *spec,
            layout,
            pair_layout,
            hp: hp.clone(),
            layers,
            roles,
            own,
            mc,
            _tracked: ctx.track(Self::bytes_for(hp, n_ctx, spec, max_batch)),
        })
    }

    pub fn spec(&self) -> &KvSpec {
        &self.spec
    }

    pub fn format(&self) -> KvFormat {
        self.spec.quant
    }

    /// The layout every layer shares (what the kernels read).
    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Positions it holds.
    pub fn n_ctx(&self) -> u64 {
        self.layout.n_ctx
    }

    /// Values per position per layer.
    pub fn row_values(&self) -> u64 {
        self.layout.row()
    }

    /// Exact bytes of every layer holding `n` positions with `retained` MiniCache pool entries
    /// in use (the spec's accounting, `KvSpec::bytes_held`).
    pub fn bytes_in_use(&self, n: u64, retained: u64) -> u64 {
        self.spec
            .bytes_held(&self.hp, n.min(self.n_ctx()), retained)
    }

    /// `kv_bytes_per_token` at `n` positions held: all bytes in use over the positions (0 when
    /// empty).
    pub fn bytes_per_token(&self, n: u64, retained: u64) -> f64 {
        let n = n.min(self.n_ctx());
        if n == 0 {
            return 0.0;
        }
        self.bytes_in_use(n, retained) as f64 / n as f64
    }

    /// MiniCache pool entries in use at `n` positions held (all pairs, keys and values): read
    /// back from the GPU (each pool's count and positions; entries at positions `≥ n`, left by
    /// a truncation or a failed pass, are not counted). 0 without MiniCache.
    pub fn retained(&self, ctx: &GpuContext, n: u64) -> Result<u64> {
        if self.mc.is_none() {
            return Ok(0);
        }
        let [_, _, pos, count] = self.pair_layout.pair_sections();
        let cap = self.pair_layout.pool_cap(self.n_ctx());
        let mut total = 0u64;
        for l in self.layers.get(self.own..).unwrap_or_default() {
            for b in [&l.k, &l.v] {
                let c = ctx.read_bytes(b, count * 4, 4)?;
                let c = c
                    .get(..4)
                    .map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
                let c = u64::from(c).min(cap);
                if c == 0 {
                    continue;
                }
                let p = ctx.read_bytes(b, pos * 4, c * 4)?;
                total += p
                    .chunks_exact(4)
                    .take_while(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])) < n)
                    .count() as u64;
            }
        }
        Ok(total)
    }

    /// The pairs' layout (MiniCache).
    pub fn pair_layout(&self) -> &KvLayout {
        &self.pair_layout
    }

    /// MiniCache's scratch (`None` without MiniCache).
    pub fn mc_scratch(&self) -> Option<&McScratch> {
        self.mc.as_ref()
    }

    /// Bytes of the whole cache as allocated.
    pub fn bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.k.size() + l.v.size()).sum()
    }

    /// Model layer `i`'s buffers and how it reads them (a MiniCache pair's layers share theirs).
    pub fn layer(&self, i: usize) -> Result<(&KvLayer, KvRole)> {
        self.roles
            .get(i)
            .and_then(|&(b, r)| Some((self.layers.get(b)?, r)))
            .ok_or_else(|| GpuError::internal("kv cache", format!("no layer {i}")))
    }
}
