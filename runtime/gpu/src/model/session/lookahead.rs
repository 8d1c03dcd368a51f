//! Greedy decoding one step ahead (issue 15): [`GpuSession::step_argmax`] submits the next step
//! before it reads the current one back, with that step's input token taken from the current
//! step's argmax on the GPU (each argmax step ends by copying its token id into the embedding's
//! id buffer). The GPU then never idles while the host maps the result, returns it, decodes the
//! text and encodes the next step: the host round trip and the encoding leave the decode's
//! critical path.
//!
//! The step run ahead is a guess that the caller feeds the argmax back (what greedy generation
//! does). When the next call brings that token at that position, its work is already done or
//! under way; any other call (another token, `eval`, `score`, sampling, a `truncate` below
//! `len()`, profiling)
//! waits for it and drops it: it wrote the KV rows of position `len()` only, which the next step
//! overwrites, and `len()` never counted it. A dropped step also replaced the logits, so
//! [`GpuSession::last_logits`] refuses to answer until a step runs again.
//!
//! Only where dropping a step is free: the embedding looked up on the GPU (token ids in a
//! buffer; not the host-side embedding), and a step that writes the rows of its own position
//! only — what [`GpuSession::truncate`] undoes exactly. Every KV format qualifies (MiniCache
//! included: its merged directions, magnitudes and retained rows are kept per position) except
//! the one KIVI step in `R` that fills a block of the full-precision window and quantizes it
//! (its f16 rows are gone afterwards, which `truncate` cannot undo): that step is not run ahead.
//! [`crate::GpuTuning::lookahead`] (`TERN_GPU_LOOKAHEAD=0`) turns it off for the model's sessions
//! (A/B measurements); [`GpuSession::set_lookahead`] per session.

use super::{read_mapped_after, GpuSession};
use crate::error::{GpuError, Result};
use crate::model::graph::Wanted;

/// The argmax step submitted ahead.
pub(crate) struct Ahead {
    /// The position it runs at.
    pos: u64,
    /// Its input: the argmax of the step before it (set once the host has read that one).
    token: Option<u32>,
    /// The staging buffer its token id is copied to.
    slot: usize,
    submission: wgpu::SubmissionIndex,
}

impl GpuSession {
    /// Run greedy steps ahead (see the module doc) or not; off waits for a step in flight.
    pub fn set_lookahead(&mut self, on: bool) -> Result<()> {
        if !on {
            self.settle_ahead()?;
        }
        self.lookahead = on;
        Ok(())
    }

    /// Whether a step at position `pos` may be run ahead.
    fn ahead_allowed(&self, pos: u64) -> bool {
        let l = self.kv.layout();
        self.lookahead
            && self.model.embed.is_none()
            && (!l.quant.is_kivi() || l.quantized(pos + 1) == l.quantized(pos))
            && pos < self.n_ctx
    }

    /// Wait for a step run ahead and drop it (its logits replaced the last step's).
    pub(crate) fn settle_ahead(&mut self) -> Result<()> {
        if let Some(a) = self.ahead.take() {
            self.logits_stale = true;
            self.model.ctx.wait(a.submission)?;
        }
        Ok(())
    }

    /// Encode and submit the one-token argmax step at `pos`: its input `token`, or (`None`) the
    /// token id the step before it left in the id buffer; its argmax goes to the id buffer and
    /// to staging `slot`.
    fn submit_argmax_step(
        &mut self,
        pos: u64,
        token: Option<u32>,
        slot: usize,
    ) -> Result<wgpu::SubmissionIndex> {
        let key = self.plan_at(pos, 1, Wanted::Argmax)?;
        self.write_inputs_at(pos, token.as_ref().map(std::slice::from_ref), 1)?;
        self.written = self.written.max(pos + 1);
        if self.ahead_staging.is_empty() {
            for i in 0..2 {
                self.ahead_staging.push(self.model.ctx.create_buffer(
                    &format!("argmax readback {i}"),
                    16,
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                )?);
            }
        }
        let ctx = &*self.model.ctx;
        let plan = self
            .plans
            .get(&key)
            .ok_or_else(|| GpuError::internal("eval", "plan missing"))?;
        let staging = self
            .ahead_staging
            .get(slot)
            .ok_or_else(|| GpuError::internal("eval", "readback slot missing"))?;
        let mut enc = ctx.encoder();
        for seg in plan {
            seg.encode(&mut enc);
        }
        enc.copy_buffer_to_buffer(&self.s.argmax, 0, &self.s.ids, 0, 4);
        enc.copy_buffer_to_buffer(&self.s.argmax, 0, staging, 0, 4);
        ctx.submit(enc)
    }

    /// [`GpuSession::step_argmax`] with the step run ahead: use it when it ran `token` at `len()`,
    /// else drop it and run `token`; submit the step after it; then read this one.
    pub(super) fn step_argmax_ahead(&mut self, token: u32) -> Result<u32> {
        let cur = match self.ahead.take() {
            Some(a) if a.pos == self.len && a.token == Some(token) => a,
            other => {
                if let Some(a) = other {
                    self.logits_stale = true;
                    self.model.ctx.wait(a.submission)?;
                }
                if self.len + 1 > self.n_ctx {
                    return Err(GpuError::invalid(
                        "eval",
                        format!("the KV cache holds {} positions, all used", self.n_ctx),
                    ));
                }
                let submission = self.submit_argmax_step(self.len, Some(token), 0)?;
                Ahead {
                    pos: self.len,
                    token: Some(token),
                    slot: 0,
                    submission,
                }
            }
        };
        let next_pos = cur.pos + 1;
        let mut next = None;
        if self.ahead_allowed(next_pos) {
            let slot = 1 - cur.slot;
            let submission = self.submit_argmax_step(next_pos, None, slot)?;
            next = Some(Ahead {
                pos: next_pos,
                token: None,
                slot,
                submission,
            });
        }
        let staging = self
            .ahead_staging
            .get(cur.slot)
            .ok_or_else(|| GpuError::internal("eval", "readback slot missing"))?;
        let got = read_mapped_after(&self.model.ctx, staging, 4, cur.submission);
        let t = match got {
            Ok(v) => v.first().map(|x| x.to_bits()).unwrap_or(0),
            Err(e) => {
                if let Some(n) = next {
                    let _ = self.model.ctx.wait(n.submission);
                }
                return Err(e);
            }
        };
        self.len = next_pos;
        self.logits_stale = next.is_some();
        self.ahead = next.map(|a| Ahead {
            token: Some(t),
            ..a
        });
        Ok(t)
    }

    /// Whether [`GpuSession::step_argmax`] takes the run-ahead path for the next step.
    pub(super) fn use_ahead(&self) -> bool {
        self.ahead.is_some() || self.ahead_allowed(self.len + 1)
    }
}
