//! Measured activation sparsity: a session can count, per linear kind, the zero codes of every
//! quantized input it produces (`act_stats.wgsl`, one extra dispatch after each quantization,
//! recorded only while the measurement is on — timed runs never carry it). `tern bench` turns it
//! on for one separate pass and prints the fractions (BitNet a4.8: TopK makes the attention
//! output input exactly half zeros, ReLU² makes the down input mostly zeros).

use crate::error::{GpuError, Result};
use crate::model::activation::Linear;
use crate::model::session::GpuSession;

/// Zero codes and codes counted for one linear kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SparsityCount {
    pub linear: Linear,
    pub zeros: u64,
    pub total: u64,
}

impl SparsityCount {
    /// The fraction of zero codes (`None` when nothing was counted).
    pub fn fraction(&self) -> Option<f64> {
        (self.total > 0).then(|| self.zeros as f64 / self.total as f64)
    }
}

impl GpuSession {
    /// Start (`true`: counters zeroed) or stop counting the zero codes of the quantized linear
    /// inputs; recorded plans are dropped either way (they are recorded again on next use).
    pub fn measure_activation_sparsity(&mut self, on: bool) -> Result<()> {
        self.plans.clear();
        self.s.act_stats = if on {
            Some(self.model.ctx.zeroed("activation sparsity counters", 32)?)
        } else {
            None
        };
        Ok(())
    }

    /// The counts since [`GpuSession::measure_activation_sparsity`] was turned on, per linear
    /// kind (q/k/v, attention output, gate/up, down); `None` when it is off.
    pub fn activation_sparsity(&self) -> Result<Option<Vec<SparsityCount>>> {
        let Some(buf) = &self.s.act_stats else {
            return Ok(None);
        };
        let b = self.model.ctx.read_bytes(buf, 0, 32)?;
        let word = |i: usize| -> Result<u64> {
            b.get(4 * i..4 * i + 4)
                .and_then(|w| <[u8; 4]>::try_from(w).ok())
                .map(|w| u64::from(u32::from_le_bytes(w)))
                .ok_or_else(|| GpuError::internal("activation_sparsity", "short readback"))
        };
        let mut out = Vec::new();
        for l in [Linear::Qkv, Linear::AttnOut, Linear::GateUp, Linear::Down] {
            if let Some(s) = l.stats_slot() {
                let s = s as usize;
                out.push(SparsityCount {
                    linear: l,
                    zeros: word(2 * s)?,
                    total: word(2 * s + 1)?,
                });
            }
        }
        Ok(Some(out))
    }
}
