//! A decode step that samples: the token runs and the next one is picked from what the backend
//! sends back — on the GPU the argmax (greedy) or the sampling candidates
//! ([`crate::sampler::Candidates`], a few hundred bytes), the full row of logits only when the
//! candidates cannot decide exactly (see `sampler/candidates.rs`); on the CPU the logits.

use std::sync::atomic::Ordering;

use super::Session;
use crate::backend::{Logits, StepOut};
use crate::capabilities::Verb;
use crate::error::Result;
use crate::report::HostTransfers;
use crate::sampler::{Draw, Sampler};

/// What a step left for the sampler.
pub(super) enum Pending {
    Logits(Vec<f32>),
    Out(StepOut),
}

impl Session<'_> {
    /// Run `token` after the history, then sample the next token with `sampler` from its logits
    /// (not run: feed it to the next call). The same token as [`Sampler::sample`] on the full row
    /// for the same sampler state; on the GPU only a few hundred bytes come back per step (see
    /// the README, "GPU sampling").
    pub fn eval_next(&mut self, token: u32, sampler: &mut Sampler) -> Result<u32> {
        self.cancel.store(false, Ordering::SeqCst);
        let p = self.run_for_sampling(token, sampler)?;
        self.pick(sampler, p)
    }

    /// Sample on the device when the backend can (on by default); `false`: always read the full
    /// row of logits and sample on the host (the reference the GPU path is tested against).
    pub fn set_device_sampling(&mut self, on: bool) {
        self.device_sampling = on;
    }

    /// What this session's steps read back from the GPU since it was made or
    /// [`Session::reset_host_transfers`] ([`Verb::HostTransfers`]: the GPU; elsewhere
    /// [`crate::EngineError::Unsupported`]).
    pub fn host_transfers(&self) -> Result<HostTransfers> {
        self.state.host_transfers()
    }

    /// Zero the counters of [`Session::host_transfers`] ([`Verb::HostTransfers`]).
    pub fn reset_host_transfers(&mut self) -> Result<()> {
        self.state.reset_host_transfers()
    }

    /// Run one token for `sampler`'s next pick: on the device's sampling path when the backend
    /// has one ([`Verb::DeviceSampling`]), else from the full logits.
    pub(super) fn run_for_sampling(&mut self, token: u32, sampler: &Sampler) -> Result<Pending> {
        if self.device_sampling && self.model.capabilities().has(Verb::DeviceSampling) {
            let n = sampler.params().repeat_last_n;
            let start = (self.history.len() + 1).saturating_sub(n);
            let mut recent: Vec<u32> = self.history.get(start..).unwrap_or_default().to_vec();
            recent.push(token);
            let penalized = sampler.penalized_tokens(&recent);
            let temperature = sampler.params().temperature;
            let out = self.run_with(&[token], |state, stop| {
                state.eval_sample(token, &penalized, temperature, stop)
            })?;
            if let Some(o) = out {
                return Ok(Pending::Out(o));
            }
        }
        Ok(Pending::Logits(self.run(&[token], Logits::Last)?))
    }

    /// The sampler's pick from what a step left.
    pub(super) fn pick(&mut self, sampler: &mut Sampler, p: Pending) -> Result<u32> {
        match p {
            Pending::Logits(l) => sampler.sample(&l, &self.history),
            Pending::Out(StepOut::Token(t)) => Ok(t),
            Pending::Out(StepOut::Candidates(c)) => match sampler.sample_candidates(&c) {
                Draw::Token(t) => Ok(t),
                Draw::Full(u) => {
                    let mut l = self.state.last_logits()?;
                    for &(id, v) in &c.hist {
                        if let Some(x) = l.get_mut(id as usize) {
                            *x = v;
                        }
                    }
                    sampler.sample_with(&l, &self.history, u)
                }
            },
        }
    }
}
