//! A GPU session's KV cache as byte sections, and back: what a saved session
//! (`tern_engine::Session::save_state`) holds of the GPU cache.
//!
//! The sections are the cache's buffers as the kernels store them (every layer's own key and
//! value buffer, then every MiniCache pair's), read back through the context's host transfer
//! (`GpuContext::read_bytes`, in slices of [`SLICE`] bytes so that the staging buffer stays
//! small under a memory budget) and written back with `GpuContext::write`. The layout of a buffer
//! depends on the model, the KV spec and `n_ctx` only, so a restore checks the section count and
//! byte lengths (a state from another model, spec, context or backend is refused, typed, before
//! anything is written).

use super::session::GpuSession;
use crate::error::{GpuError, Result};

/// Bytes read back per transfer.
const SLICE: u64 = 4 << 20;

impl GpuSession {
    /// Every KV buffer of the session, read back (a greedy step run ahead is waited for first;
    /// it wrote only position `len()`, which the state does not count).
    pub fn kv_state(&mut self) -> Result<Vec<Vec<u8>>> {
        self.settle_ahead()?;
        let ctx = &*self.model.ctx;
        let mut out = Vec::with_capacity(self.kv.layers.len() * 2);
        for l in &self.kv.layers {
            for b in [&l.k, &l.v] {
                let size = b.size();
                let mut bytes = Vec::new();
                bytes
                    .try_reserve_exact(usize::try_from(size).unwrap_or(usize::MAX))
                    .map_err(|_| GpuError::OutOfMemory {
                        what: "a KV buffer read back to save the session".into(),
                        bytes: size,
                    })?;
                let mut at = 0u64;
                while at < size {
                    let n = SLICE.min(size - at);
                    bytes.extend_from_slice(&ctx.read_bytes(b, at, n)?);
                    at += n;
                }
                bytes.truncate(usize::try_from(size).unwrap_or(usize::MAX));
                out.push(bytes);
            }
        }
        Ok(out)
    }

    /// Make the cache hold `len` positions whose buffers are `sections` (from
    /// [`GpuSession::kv_state`] of a session of the same model, KV spec and `n_ctx`). A count or
    /// size that differs, or `len > n_ctx`, is [`GpuError::InvalidArgument`] and nothing is
    /// written.
    pub fn restore_kv_state(&mut self, len: u64, sections: &[&[u8]]) -> Result<()> {
        let want: Vec<u64> = self
            .kv
            .layers
            .iter()
            .flat_map(|l| [l.k.size(), l.v.size()])
            .collect();
        if sections.len() != want.len()
            || sections
                .iter()
                .zip(&want)
                .any(|(s, &w)| s.len() as u64 != w)
            || len > self.n_ctx
        {
            return Err(GpuError::invalid(
                "restore session",
                format!(
                    "the saved cache ({} buffers, {len} positions) does not fit this session's \
                     ({} buffers of {} positions)",
                    sections.len(),
                    want.len(),
                    self.n_ctx
                ),
            ));
        }
        // Drops a step run ahead; the plans stay (they do not depend on the contents).
        self.truncate(0);
        let ctx = &*self.model.ctx;
        for (l, pair) in self.kv.layers.iter().zip(sections.chunks_exact(2)) {
            if let [k, v] = pair {
                ctx.write(&l.k, k);
                ctx.write(&l.v, v);
            }
        }
        ctx.flush();
        ctx.check_alive()?;
        self.len = len;
        self.written = len;
        Ok(())
    }
}
