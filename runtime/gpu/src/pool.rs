//! A buffer pool: scratch buffers are returned after use and handed out again for a request of
//! the same size class and usage, so a decode loop does not allocate per token.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::context::GpuContext;
use crate::error::Result;

/// Free buffers by (size rounded up to a power of two, usage bits).
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<HashMap<(u64, u32), Vec<wgpu::Buffer>>>,
}

fn class(size: u64) -> u64 {
    size.max(256).next_power_of_two()
}

impl GpuContext {
    /// A storage buffer of at least `size` bytes from the pool (contents unspecified), or a new
    /// one. Give it back with [`GpuContext::recycle`].
    pub fn scratch(&self, what: &str, size: u64) -> Result<wgpu::Buffer> {
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC;
        let c = class(size);
        if let Ok(mut free) = self.pool.free.lock() {
            if let Some(b) = free.get_mut(&(c, usage.bits())).and_then(|v| v.pop()) {
                return Ok(b);
            }
        }
        // The class may exceed the binding limit; fall back to the exact size then.
        let alloc = if c <= self.binding_limit() { c } else { size };
        self.create_buffer(what, alloc, usage)
    }

    /// Return a buffer from [`GpuContext::scratch`] to the pool.
    pub fn recycle(&self, buf: wgpu::Buffer) {
        let key = (class(buf.size()), buf.usage().bits());
        if buf.size() != key.0 {
            return; // exact-size allocation: not poolable, drop it
        }
        if let Ok(mut free) = self.pool.free.lock() {
            free.entry(key).or_default().push(buf);
        }
    }

    /// Buffers waiting in the pool.
    pub fn pooled_buffers(&self) -> usize {
        self.pool
            .free
            .lock()
            .map(|f| f.values().map(Vec::len).sum())
            .unwrap_or(0)
    }
}
