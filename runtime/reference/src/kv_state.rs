//! A [`KvCache`]'s contents as byte sections, and back: what a saved session
//! (`tern_engine::Session::save_state`) holds of the CPU cache.
//!
//! The sections are the cache's own storage, exactly (codes, scales, zero points, the KIVI f16
//! window, MiniCache magnitudes and pools), in a fixed order: first one section of lengths (the
//! cache's length, every stream's written length, every pool's entries, as u64 LE), then every
//! stream's buffers, then every MiniCache pair's magnitudes and pools. A restore checks that
//! the counts and byte lengths are this cache's (same model, spec and `n_ctx`), else
//! [`ReferenceError::CacheMismatch`], and writes nothing then.

use std::borrow::Cow;

use crate::error::{ReferenceError, Result};
use crate::kv::KvCache;
use crate::kv_store::{Store, Stream};

fn bytes<T: bytemuck::Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Every buffer of a stream, in a fixed order.
fn stream_buffers(s: &Stream) -> Vec<&[u8]> {
    match &s.store {
        Store::F32 { k, v } => vec![bytes(k), bytes(v)],
        Store::F16 { k, v } => vec![bytes(k), bytes(v)],
        Store::Absmax { k, v } => [k, v]
            .into_iter()
            .flat_map(|r| {
                [
                    bytes(&r.codes),
                    bytes(&r.scales),
                    bytes(&r.codes0),
                    bytes(&r.scales0),
                ]
            })
            .collect(),
        Store::Rot { k, v } => [k, v]
            .into_iter()
            .flat_map(|r| [bytes(&r.codes), bytes(&r.scales), bytes(&r.mins)])
            .collect(),
        Store::Kivi {
            k_codes,
            v_codes,
            k_scales,
            k_mins,
            v_scales,
            v_mins,
            k_win,
            v_win,
        } => vec![
            bytes(k_codes),
            bytes(v_codes),
            bytes(k_scales),
            bytes(k_mins),
            bytes(v_scales),
            bytes(v_mins),
            bytes(k_win),
            bytes(v_win),
        ],
    }
}

fn bytes_mut<T: bytemuck::Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

fn stream_buffers_mut(s: &mut Stream) -> Vec<&mut [u8]> {
    match &mut s.store {
        Store::F32 { k, v } => vec![bytes_mut(k), bytes_mut(v)],
        Store::F16 { k, v } => vec![bytes_mut(k), bytes_mut(v)],
        Store::Absmax { k, v } => {
            let mut out = Vec::with_capacity(8);
            for r in [k, v] {
                out.push(bytes_mut(&mut r.codes));
                out.push(bytes_mut(&mut r.scales));
                out.push(bytes_mut(&mut r.codes0));
                out.push(bytes_mut(&mut r.scales0));
            }
            out
        }
        Store::Rot { k, v } => {
            let mut out = Vec::with_capacity(6);
            for r in [k, v] {
                out.push(bytes_mut(&mut r.codes));
                out.push(bytes_mut(&mut r.scales));
                out.push(bytes_mut(&mut r.mins));
            }
            out
        }
        Store::Kivi {
            k_codes,
            v_codes,
            k_scales,
            k_mins,
            v_scales,
            v_mins,
            k_win,
            v_win,
        } => vec![
            bytes_mut(k_codes),
            bytes_mut(v_codes),
            bytes_mut(k_scales),
            bytes_mut(k_mins),
            bytes_mut(v_scales),
            bytes_mut(v_mins),
            bytes_mut(k_win),
            bytes_mut(v_win),
        ],
    }
}

impl KvCache {
    /// The lengths section: the cache's length, each stream's written length, each pool's
    /// entries (u64 LE).
    fn state_lengths(&self) -> Vec<u64> {
        let mut l = vec![self.len as u64];
        l.extend(self.streams.iter().map(|s| s.written as u64));
        for p in &self.pairs {
            l.push(p.pool_k.len as u64);
            l.push(p.pool_v.len as u64);
        }
        l
    }

    /// The cache's contents as byte sections (module doc): the lengths, then every buffer as
    /// stored (borrowed, no copy).
    pub fn state_sections(&self) -> Vec<Cow<'_, [u8]>> {
        let lengths: Vec<u8> = self
            .state_lengths()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = vec![Cow::Owned(lengths)];
        for s in &self.streams {
            out.extend(stream_buffers(s).into_iter().map(Cow::Borrowed));
        }
        for p in &self.pairs {
            for b in [
                bytes(&p.mag_k),
                bytes(&p.mag_v),
                bytes(&p.pool_k.data),
                bytes(&p.pool_k.pos),
                bytes(&p.pool_v.data),
                bytes(&p.pool_v.pos),
            ] {
                out.push(Cow::Borrowed(b));
            }
        }
        out
    }

    /// Byte lengths of the sections [`KvCache::state_sections`] gives (the lengths section
    /// first).
    fn state_layout(&self) -> Vec<usize> {
        self.state_sections().iter().map(|s| s.len()).collect()
    }

    /// Make the cache hold what `sections` (from [`KvCache::state_sections`] of a cache of the
    /// same model, spec and `n_ctx`) held. Checked first: a section count or byte length that
    /// differs from this cache's, or a length beyond `n_ctx`, is
    /// [`ReferenceError::CacheMismatch`] and the cache is unchanged.
    pub fn restore_sections(&mut self, sections: &[&[u8]]) -> Result<()> {
        let want = self.state_layout();
        let mismatch = |detail: String| ReferenceError::CacheMismatch { detail };
        if sections.len() != want.len() {
            return Err(mismatch(format!(
                "the saved cache has {} sections, this one {}",
                sections.len(),
                want.len()
            )));
        }
        for (i, (s, &w)) in sections.iter().zip(&want).enumerate() {
            if s.len() != w {
                return Err(mismatch(format!(
                    "section {i} of the saved cache has {} bytes, this one {w}",
                    s.len()
                )));
            }
        }
        let lengths: Vec<usize> = sections
            .first()
            .copied()
            .unwrap_or_default()
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                usize::try_from(u64::from_le_bytes(b)).unwrap_or(usize::MAX)
            })
            .collect();
        let cap = self.pairs.first().map_or(0, |p| p.pool_k.pos.len());
        let (len, rest) = lengths.split_first().unwrap_or((&0, &[]));
        let (written, pools) = rest.split_at(self.streams.len().min(rest.len()));
        if *len > self.n_ctx
            || written.iter().any(|&w| w > self.n_ctx || w < *len)
            || pools.iter().any(|&p| p > cap)
        {
            return Err(mismatch(format!(
                "the saved lengths {lengths:?} do not fit a cache of {} positions",
                self.n_ctx
            )));
        }
        let mut src = sections.iter().skip(1);
        for s in &mut self.streams {
            for dst in stream_buffers_mut(s) {
                dst.copy_from_slice(src.next().copied().unwrap_or_default());
            }
        }
        for p in &mut self.pairs {
            for dst in [
                bytes_mut(&mut p.mag_k),
                bytes_mut(&mut p.mag_v),
                bytes_mut(&mut p.pool_k.data),
                bytes_mut(&mut p.pool_k.pos),
                bytes_mut(&mut p.pool_v.data),
                bytes_mut(&mut p.pool_v.pos),
            ] {
                dst.copy_from_slice(src.next().copied().unwrap_or_default());
            }
        }
        for (s, &w) in self.streams.iter_mut().zip(written) {
            s.written = w;
        }
        for (p, l) in self.pairs.iter_mut().zip(pools.chunks_exact(2)) {
            p.pool_k.len = l.first().copied().unwrap_or(0);
            p.pool_v.len = l.get(1).copied().unwrap_or(0);
        }
        self.len = *len;
        Ok(())
    }
}
