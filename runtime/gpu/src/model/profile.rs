//! Measuring a session: dispatches per decode step, per-kernel GPU timestamps of one step, and
//! decode loops for benchmarks.

use std::collections::HashMap;
use std::sync::Arc;

use crate::device::plan::Plan;
use crate::error::{GpuError, Result};
use crate::model::graph::Wanted;
use crate::model::session::read_mapped;
use crate::model::GpuSession;

impl GpuSession {
    /// Dispatches of a decode step (one token, last logits) at the current position (past
    /// [`crate::model::graph::SHORT_ATTENTION_KEYS`] positions, one more per layer: the split
    /// attention's combine).
    pub fn dispatches_per_token(&mut self) -> Result<usize> {
        let key = self.plan_for(1, Wanted::Last)?;
        Ok(self
            .plans
            .get(&key)
            .map(|segs| segs.iter().map(Plan::dispatches).sum())
            .unwrap_or(0))
    }

    /// Run one decode step of `token` with a GPU timestamp around every dispatch and return,
    /// per kernel label, (dispatches, total µs), largest first. Needs `TIMESTAMP_QUERY`.
    pub fn profile_decode_step(&mut self, token: u32) -> Result<Vec<(String, u32, f64)>> {
        self.profile_step(&[token])
    }

    /// [`GpuSession::profile_decode_step`] for a batch of `tokens` (a prefill: last logits);
    /// every submission segment of its plan is timed, so the totals cover the whole batch.
    pub fn profile_step(&mut self, tokens: &[u32]) -> Result<Vec<(String, u32, f64)>> {
        let m = Arc::clone(&self.model);
        let ctx = &*m.ctx;
        if !ctx.info.timestamp_query {
            return Err(GpuError::Unsupported {
                adapter: ctx.info.name.clone(),
                detail: "no TIMESTAMP_QUERY feature: per-kernel timings are unavailable".into(),
            });
        }
        self.settle_ahead()?;
        let n = tokens.len() as u64;
        if n == 0 || n > self.max_batch {
            return Err(GpuError::invalid(
                "profile",
                format!(
                    "{n} tokens: the session runs 1 to {} per batch",
                    self.max_batch
                ),
            ));
        }
        if self.len + n > self.n_ctx {
            return Err(GpuError::invalid("profile", "the KV cache is full"));
        }
        let key = self.plan_for(n, Wanted::Last)?;
        self.write_inputs(tokens)?;
        let plan = self
            .plans
            .get(&key)
            .ok_or_else(|| GpuError::internal("profile", "plan missing"))?;
        let period = f64::from(ctx.queue.get_timestamp_period()); // ns per tick
        let mut by: HashMap<String, (u32, f64)> = HashMap::new();
        for seg in plan {
            let keys = seg.keys();
            if keys.is_empty() {
                let mut enc = ctx.encoder();
                seg.encode(&mut enc);
                ctx.submit_wait(enc)?;
                continue;
            }
            let n_q = u32::try_from(keys.len() * 2)
                .map_err(|_| GpuError::internal("profile", "too many dispatches"))?;
            let qs = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("profile"),
                ty: wgpu::QueryType::Timestamp,
                count: n_q,
            });
            let bytes = u64::from(n_q) * 8;
            let resolve = ctx.create_buffer(
                "timestamps",
                bytes,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            )?;
            let staging = ctx.create_buffer(
                "timestamps readback",
                bytes,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?;
            let mut enc = ctx.encoder();
            seg.encode_timed(&mut enc, &qs);
            enc.resolve_query_set(&qs, 0..n_q, &resolve, 0);
            enc.copy_buffer_to_buffer(&resolve, 0, &staging, 0, bytes);
            ctx.submit_wait(enc)?;
            let raw = read_mapped(ctx, &staging, bytes)?;
            let ticks: Vec<u64> = bytemuck::pod_collect_to_vec::<f32, u64>(&raw);
            for (i, k) in keys.iter().enumerate() {
                let (a, b) = (ticks.get(2 * i), ticks.get(2 * i + 1));
                if let (Some(&a), Some(&b)) = (a, b) {
                    let e = by.entry(k.to_string()).or_default();
                    e.0 += 1;
                    e.1 += b.saturating_sub(a) as f64 * period / 1000.0;
                }
            }
        }
        self.len += n;
        let mut v: Vec<_> = by.into_iter().map(|(k, (c, us))| (k, c, us)).collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2));
        Ok(v)
    }

    /// Run `iters` greedy decode steps of one token each, feeding each argmax back (as greedy
    /// generation does; the first input is token 0), for benchmarks; the KV cache length
    /// advances by `iters`.
    pub fn bench_decode(&mut self, iters: u64) -> Result<()> {
        let mut t = 0;
        for _ in 0..iters {
            t = self.step_argmax(t)?;
        }
        Ok(())
    }
}
