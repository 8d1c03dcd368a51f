//! GPU memory accounting, in one place: every buffer tern creates goes through
//! `GpuContext::create_buffer`, which refuses an allocation beyond the budget
//! (`GpuError::OverBudget`) and samples the peak.
//!
//! What "live bytes" means: on backends whose driver allocator counts buffer memory (Vulkan,
//! Direct3D 12 — wgpu-hal's `buffer_memory` counter, the `counters` feature) it is that count:
//! every live buffer, wgpu's own staging buffers included, measured rather than estimated, and
//! lowered when a buffer is really freed. Elsewhere (Metal, GL) it is tern's own count: bytes of
//! the buffers it created, less those of the transient ones it dropped (readback staging, a
//! session's KV cache and scratch, the compressed copy of a NeuZip tensor decoded at load).
//! The peak is sampled after every allocation, after every staged write and before every
//! submission (when staged writes are still alive), so it is the peak of live bytes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Live-byte counters of one device (see the module doc).
#[derive(Debug)]
pub(crate) struct MemoryCounter {
    /// tern's own count of live buffer bytes.
    pub(crate) own: Arc<AtomicU64>,
    /// Highest live-byte sample.
    pub(crate) peak: AtomicU64,
    /// The budget; `u64::MAX` = none.
    pub(crate) budget: AtomicU64,
    /// The driver allocator counts buffer memory (measured, not tern's own count).
    pub(crate) driver: AtomicBool,
    /// Bytes written with `queue.write_buffer` since the last submission (staged by wgpu).
    pub(crate) staged: AtomicU64,
}

impl MemoryCounter {
    pub(crate) fn new() -> Self {
        MemoryCounter {
            own: Arc::new(AtomicU64::new(0)),
            peak: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            driver: AtomicBool::new(false),
            staged: AtomicU64::new(0),
        }
    }

    /// tern's own count: `bytes` of dropped buffers.
    pub(crate) fn release(&self, bytes: u64) {
        sub(&self.own, bytes);
    }

    /// A guard that releases `bytes` from tern's own count when dropped (held by owners of
    /// transient buffers: a session's KV cache and scratch).
    pub(crate) fn track(&self, bytes: u64) -> Tracked {
        Tracked {
            counter: Arc::clone(&self.own),
            bytes,
        }
    }
}

fn sub(c: &AtomicU64, bytes: u64) {
    let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(bytes))
    });
}

/// Releases its bytes from tern's own live count when dropped (see [`MemoryCounter::track`]).
#[derive(Debug)]
pub struct Tracked {
    counter: Arc<AtomicU64>,
    bytes: u64,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        sub(&self.counter, self.bytes);
    }
}

/// What [`crate::GpuContext::memory_stats`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of GPU buffers alive now.
    pub live: u64,
    /// Highest `live` seen since the context was made (or [`crate::GpuContext::reset_peak`]).
    pub peak: u64,
    /// The budget (`--max-memory`), if any.
    pub budget: Option<u64>,
    /// `true`: measured by the driver's allocator (Vulkan, D3D12); `false`: tern's own count.
    pub measured: bool,
}
