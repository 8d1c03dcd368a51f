//! The reference KV cache: preallocated once, written in place, never concatenated.

use tern_format::HParams;

use crate::error::{too_large, try_zeroed, Result};

/// Keys and values of every layer, `[layer][pos][kv_head][head_dim]` f32, for up to `n_ctx`
/// positions. Keys are stored after RoPE.
#[derive(Debug, Clone)]
pub struct KvCache {
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) n_layer: usize,
    /// `n_head_kv · head_dim`: floats per position per layer.
    pub(crate) row: usize,
    pub(crate) n_ctx: usize,
    pub(crate) len: usize,
}

impl KvCache {
    /// A cache for a model of hyperparameters `hp` holding `n_ctx` positions (all memory is
    /// allocated here, fallibly: a cache the system cannot hold is an out-of-range error naming the bytes,
    /// not an abort). `KvCache::new(&model, n_ctx)` (in `model.rs`, which uses this module, not
    /// the reverse) reads `hp` from a [`crate::Model`].
    pub fn for_hparams(hp: &HParams, n_ctx: usize) -> Result<Self> {
        let n_layer = hp.n_layer as usize;
        let row = hp.n_head_kv as usize * hp.head_dim as usize;
        let total = n_layer
            .checked_mul(n_ctx)
            .and_then(|v| v.checked_mul(row))
            .ok_or_else(|| {
                too_large(
                    &format!("a KV cache of {n_ctx} positions"),
                    8 * n_layer as u128 * n_ctx as u128 * row as u128,
                )
            })?;
        let what =
            format!("a KV cache of {n_ctx} positions ({n_layer} layers × {row} floats, K and V)");
        Ok(Self {
            k: try_zeroed(&what, total)?,
            v: try_zeroed(&what, total)?,
            n_layer,
            row,
            n_ctx,
            len: 0,
        })
    }

    /// Number of positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum number of positions.
    pub fn capacity(&self) -> usize {
        self.n_ctx
    }

    /// Bytes one position takes over all layers, keys and values, as this cache stores them
    /// (`2 × n_layer × n_head_kv × head_dim × 4` for today's f32 storage).
    pub fn bytes_per_token(&self) -> usize {
        fn elem<T>(_: &[T]) -> usize {
            std::mem::size_of::<T>()
        }
        self.n_layer * self.row * (elem(&self.k) + elem(&self.v))
    }

    /// Bytes of the whole cache (every position, filled or not).
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(self.k.as_slice()) + std::mem::size_of_val(self.v.as_slice())
    }

    /// Forget positions `n..` (no-op when `n >= len`). Used to rewind or to reuse a prefix.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The layer's `[pos][kv_head][head_dim]` key and value slabs (all `n_ctx` positions).
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        let span = self.n_ctx * self.row;
        let r = layer * span..(layer + 1) * span;
        (
            self.k.get(r.clone()).unwrap_or_default(),
            self.v.get(r).unwrap_or_default(),
        )
    }

    pub(crate) fn layer_mut(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        let span = self.n_ctx * self.row;
        let r = layer * span..(layer + 1) * span;
        (
            self.k.get_mut(r.clone()).unwrap_or_default(),
            self.v.get_mut(r).unwrap_or_default(),
        )
    }
}
