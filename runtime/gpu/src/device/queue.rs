//! Submission, waiting, readback, and the device's health: device loss (its own error, so that
//! the engine can fall back) and errors wgpu raised outside an error scope.

use std::sync::atomic::Ordering;

use crate::device::context::GpuContext;
use crate::error::{GpuError, Result};

impl GpuContext {
    /// `Err(DeviceLost)` once the device is gone; every launcher calls this first.
    pub fn check_alive(&self) -> Result<()> {
        if self.lost_flag.load(Ordering::SeqCst) {
            let msg = self
                .lost
                .lock()
                .ok()
                .and_then(|g| g.clone())
                .unwrap_or_default();
            return Err(GpuError::DeviceLost(msg));
        }
        Ok(())
    }

    /// Errors wgpu raised outside an error scope since the last call, as one typed error.
    pub fn take_uncaptured(&self) -> Result<()> {
        let mut v = match self.uncaptured.lock() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        if v.is_empty() {
            return Ok(());
        }
        let detail = v.join("; ");
        v.clear();
        Err(GpuError::Wgpu {
            what: "a submitted command".into(),
            detail,
        })
    }

    /// Submit and wait until the GPU is done (the synchronous path used by tests and benches).
    pub fn submit_wait(&self, enc: wgpu::CommandEncoder) -> Result<()> {
        let idx = self.submit(enc)?;
        self.wait(idx)
    }

    /// Submit without waiting (a later [`GpuContext::wait`] collects errors).
    pub fn submit(&self, enc: wgpu::CommandEncoder) -> Result<wgpu::SubmissionIndex> {
        self.check_alive()?;
        // Staged writes are alive until this submission completes: their peak is now.
        self.sample();
        self.mem.staged.store(0, Ordering::Relaxed);
        Ok(self.queue.submit([enc.finish()]))
    }

    /// Wait until submission `idx` is done. A failure on a device that turns out to be lost
    /// (a destroyed device fails the wait or raises validation errors before its lost callback
    /// runs) is reported as [`GpuError::DeviceLost`], not as the failure it caused.
    pub fn wait(&self, idx: wgpu::SubmissionIndex) -> Result<()> {
        let r = self
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(idx),
                timeout: None,
            })
            .map_err(|e| GpuError::Wgpu {
                what: "waiting for the GPU".into(),
                detail: e.to_string(),
            })
            .and_then(|_| self.check_alive())
            .and_then(|()| self.take_uncaptured());
        r.map_err(|e| self.lost_or(e))
    }

    /// `e`, or [`GpuError::DeviceLost`] when the device is gone (polled once so that a pending
    /// lost callback runs).
    pub fn lost_or(&self, e: GpuError) -> GpuError {
        if matches!(e, GpuError::DeviceLost(_)) {
            return e;
        }
        let _ = self.device.poll(wgpu::PollType::Poll);
        match self.check_alive() {
            Err(lost) => lost,
            Ok(()) => e,
        }
    }

    /// Whether the device is lost (the lost callback ran): every later call fails with
    /// [`GpuError::DeviceLost`] and the model must be loaded again.
    pub fn is_lost(&self) -> bool {
        self.lost_flag.load(Ordering::SeqCst)
    }

    /// Destroy the device (`wgpu::Device::destroy`) to simulate a device loss in tests: the next
    /// submission fails with [`GpuError::DeviceLost`].
    #[doc(hidden)]
    pub fn simulate_device_loss(&self) {
        log::warn!("simulating a GPU device loss (wgpu::Device::destroy)");
        self.device.destroy();
    }

    /// Copy `len` bytes from `offset` of `buf` back to the host (submits and waits).
    pub fn read_bytes(&self, buf: &wgpu::Buffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.check_alive()?;
        let size = len.div_ceil(4) * 4;
        if size == 0 {
            return Ok(Vec::new());
        }
        let staging = self.create_buffer(
            "readback",
            size,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        )?;
        let mut enc = self.encoder();
        enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size);
        self.submit_wait(enc)?;
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Readback {
                what: "buffer".into(),
                detail: e.to_string(),
            })?;
        let mapped = rx.recv().map_err(|e| GpuError::Readback {
            what: "buffer".into(),
            detail: e.to_string(),
        })?;
        mapped.map_err(|e| GpuError::Readback {
            what: "buffer".into(),
            detail: e.to_string(),
        })?;
        let view = slice.get_mapped_range().map_err(|e| GpuError::Readback {
            what: "buffer".into(),
            detail: e.to_string(),
        })?;
        let mut out = view.to_vec();
        drop(view);
        staging.unmap();
        drop(staging);
        self.mem.release(size);
        out.truncate(len as usize); // ok: len ≤ size = out.len()
        Ok(out)
    }

    /// `n` f32 values from the start of `buf`.
    pub fn read_f32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<f32>> {
        let b = self.read_bytes(buf, 0, (n * 4) as u64)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// `n` u32 values from the start of `buf`.
    pub fn read_u32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<u32>> {
        let b = self.read_bytes(buf, 0, (n * 4) as u64)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}
