//! The KV cache as a type: it owns its buffers, its element format and layout, its byte
//! accounting and how it maps onto bindings.
//!
//! Layout (the only one today, [`KvFormat::F32`]): per layer one key and one value buffer of
//! `[n_ctx][n_head_kv][head_dim]` f32, keys stored after RoPE, preallocated for `n_ctx`
//! positions and written in place by `kv_store` (never concatenated). Each buffer is one storage
//! binding, so a layer's keys must fit [`GpuContext::binding_limit`]: [`KvCache::new`] refuses a
//! larger context with [`GpuError::TooLarge`] naming the largest that fits
//! ([`KvCache::max_positions`]). The format is part of the KV-store and attention pipeline keys
//! (`kv_store_f32`, `attention_f32_wg256`); a compressed format is a new [`KvFormat`] variant with
//! its own kernels, and this type's accounting is what the engine, `tern bench` and the C ABI
//! report. The CPU reference's cache (`tern_reference::KvCache`) reports the same
//! `bytes_per_token` for the same model and format.

use tern_format::HParams;

use crate::device::context::GpuContext;
use crate::device::memory::Tracked;
pub use crate::device::pipeline::KvFormat;
use crate::error::{GpuError, Result};
use crate::kernels::attention::kv_binding;

/// One layer's keys and values.
#[derive(Debug)]
pub struct KvLayer {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
}

/// A preallocated KV cache for `n_ctx` positions of every layer (see the module doc).
#[derive(Debug)]
pub struct KvCache {
    format: KvFormat,
    n_ctx: u64,
    /// Values per position per layer (`n_head_kv · head_dim`).
    row: u64,
    layers: Vec<KvLayer>,
    /// Releases these bytes from the context's own count when the cache goes.
    _tracked: Tracked,
}

impl KvCache {
    /// Values per position per layer for `hp`.
    pub fn row(hp: &HParams) -> u64 {
        u64::from(hp.n_head_kv) * u64::from(hp.head_dim)
    }

    /// Bytes one position takes over all layers, keys and values, in `format`.
    pub fn bytes_per_token_for(hp: &HParams, format: KvFormat) -> u64 {
        2 * u64::from(hp.n_layer) * format.row_bytes(Self::row(hp))
    }

    /// Bytes a cache of `n_ctx` positions takes (before allocating: the memory budget).
    pub fn bytes_for(hp: &HParams, n_ctx: u64, format: KvFormat) -> u64 {
        let per_buffer = n_ctx.saturating_mul(format.row_bytes(Self::row(hp)));
        per_buffer
            .max(4)
            .div_ceil(4)
            .saturating_mul(4)
            .saturating_mul(2 * u64::from(hp.n_layer))
    }

    /// The largest context whose per-layer buffers fit one binding of `ctx`.
    pub fn max_positions(ctx: &GpuContext, hp: &HParams, format: KvFormat) -> u64 {
        ctx.binding_limit() / format.row_bytes(Self::row(hp)).max(1)
    }

    /// Allocate (zeroed) a cache of `n_ctx` positions for the model `hp` describes.
    pub fn new(ctx: &GpuContext, hp: &HParams, n_ctx: u64, format: KvFormat) -> Result<Self> {
        if n_ctx == 0 {
            return Err(GpuError::invalid("kv cache", "a context of 0 positions"));
        }
        let row = Self::row(hp);
        if row == 0 {
            return Err(GpuError::bad_model("n_head_kv · head_dim is 0"));
        }
        kv_binding(ctx, format, n_ctx, row)?;
        let bytes = n_ctx.saturating_mul(format.row_bytes(row));
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(hp.n_layer as usize)
            .map_err(|_| GpuError::OutOfMemory {
                what: "KV cache layer table".into(),
                bytes: u64::from(hp.n_layer),
            })?;
        for _ in 0..hp.n_layer {
            layers.push(KvLayer {
                k: ctx.zeroed("k cache", bytes)?,
                v: ctx.zeroed("v cache", bytes)?,
            });
        }
        Ok(KvCache {
            format,
            n_ctx,
            row,
            layers,
            _tracked: ctx.track(Self::bytes_for(hp, n_ctx, format)),
        })
    }

    pub fn format(&self) -> KvFormat {
        self.format
    }

    /// Positions it holds.
    pub fn n_ctx(&self) -> u64 {
        self.n_ctx
    }

    /// Values per position per layer.
    pub fn row_values(&self) -> u64 {
        self.row
    }

    /// Bytes one position takes over all layers (keys and values).
    pub fn bytes_per_token(&self) -> u64 {
        2 * self.layers.len() as u64 * self.format.row_bytes(self.row)
    }

    /// Bytes of the whole cache.
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
