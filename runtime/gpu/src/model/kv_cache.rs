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
//! Bytes: [`KvCache::bytes`] is what is allocated (the memory budget counts it);
//! [`KvCache::bytes_in_use`] / [`KvCache::bytes_per_token`] are the spec's exact accounting of the
//! positions held (`KvQuant::layer_bytes`: codes, scales, zero points, the f16 window), the same
//! numbers the CPU reference's cache reports. A full cache is a typed error when a batch would
//! pass `n_ctx` (`GpuSession::eval`: no context shift).

use tern_format::{HParams, KvSpec};

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

/// A preallocated KV cache for `n_ctx` positions of every layer (see the module doc).
#[derive(Debug)]
pub struct KvCache {
    spec: KvSpec,
    layout: KvLayout,
    hp: HParams,
    layers: Vec<KvLayer>,
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
        if spec.minicache.is_some() {
            return Err(GpuError::invalid(
                "kv cache",
                "MiniCache is not implemented on the GPU",
            ));
        }
        KvLayout::new(
            spec.quant,
            spec.kivi,
            u64::from(hp.n_head_kv),
            u64::from(hp.head_dim),
            n_ctx,
        )
    }

    /// Bytes a cache of `n_ctx` positions allocates (before allocating: the memory budget).
    pub fn bytes_for(hp: &HParams, n_ctx: u64, spec: &KvSpec) -> u64 {
        let Ok(l) = Self::layout_for(hp, n_ctx.max(1), spec) else {
            return u64::MAX;
        };
        let per_layer = [true, false]
            .map(|k| l.buffer_bytes(k).max(4).div_ceil(4) * 4)
            .iter()
            .sum::<u64>();
        per_layer.saturating_mul(u64::from(hp.n_layer))
    }

    /// The largest context whose per-layer buffers fit one binding of `ctx`.
    pub fn max_positions(ctx: &GpuContext, hp: &HParams, spec: &KvSpec) -> u64 {
        Self::layout_for(hp, 1, spec)
            .map(|l| l.max_positions_within(ctx.binding_limit()))
            .unwrap_or(0)
    }

    /// Allocate (zeroed) a cache of `n_ctx` positions in `spec` for the model `hp` describes.
    pub fn new(ctx: &GpuContext, hp: &HParams, n_ctx: u64, spec: &KvSpec) -> Result<Self> {
        let layout = Self::layout_for(hp, n_ctx, spec)?;
        layout.check_binding(ctx)?;
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(hp.n_layer as usize)
            .map_err(|_| GpuError::OutOfMemory {
                what: "KV cache layer table".into(),
                bytes: u64::from(hp.n_layer),
            })?;
        for _ in 0..hp.n_layer {
            layers.push(KvLayer {
                k: ctx.zeroed("k cache", layout.buffer_bytes(true))?,
                v: ctx.zeroed("v cache", layout.buffer_bytes(false))?,
            });
        }
        Ok(KvCache {
            spec: *spec,
            layout,
            hp: hp.clone(),
            layers,
            _tracked: ctx.track(Self::bytes_for(hp, n_ctx, spec)),
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

    /// Exact bytes of every layer holding `n` positions (the spec's accounting).
    pub fn bytes_in_use(&self, n: u64) -> u64 {
        (self.layers.len() as u64).saturating_mul(self.layout.layer_bytes_in_use(&self.hp, n))
    }

    /// `kv_bytes_per_token` at `n` positions held: all bytes in use over the positions (0 when
    /// empty).
    pub fn bytes_per_token(&self, n: u64) -> f64 {
        let n = n.min(self.n_ctx());
        if n == 0 {
            return 0.0;
        }
        self.bytes_in_use(n) as f64 / n as f64
    }

    /// Bytes of the whole cache as allocated.
    pub fn bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.k.size() + l.v.size()).sum()
    }

    /// Layer `i`'s buffers.
    pub fn layer(&self, i: usize) -> Result<&KvLayer> {
        self.layers
            .get(i)
            .ok_or_else(|| GpuError::internal("kv cache", format!("no layer {i}")))
    }
}
