//! The end of a recorded pass ([`Graph::head`]): the output norm and the head, by what the step
//! wants (last logits and their argmax or sampling candidates, every token's logits, or scores
//! through the fused CCE kernel).

use super::{Graph, Input, Wanted};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::{self, cce};
use crate::model::Lin;

impl Graph<'_> {
    /// The output norm and head: logits of the last token (and their argmax), of every token,
    /// or — for scoring — `log p(target)` of every token through the fused CCE kernel.
    pub(super) fn head(&mut self, wanted: Wanted) -> Result<()> {
        let (ctx, s, n, m) = (self.ctx, self.s, self.n, self.m);
        let (d, eps) = (u64::from(m.spec.n_embd), self.eps());
        let (x, other) = (self.cur, self.other);
        match wanted {
            Wanted::Score => {
                kernels::rmsnorm(ctx, &mut self.p, x, &m.output_norm, &s.a, d, n, eps)?;
                let head = match &m.head {
                    Lin::Ggml(gw) => cce::Head::Ggml(gw),
                    Lin::Float(fw) => cce::Head::Float(fw),
                    _ => {
                        return Err(GpuError::Unsupported {
                            adapter: ctx.info.name.clone(),
                            detail: "GPU scoring needs a float or ggml head resident on the GPU \
                                     (not ternary, not decoded just in time)"
                                .into(),
                        })
                    }
                };
                cce::score(ctx, &mut self.p, &s.a, n, head, &s.targets, &s.logprobs)
            }
            Wanted::All => {
                kernels::rmsnorm(ctx, &mut self.p, x, &m.output_norm, &s.a, d, n, eps)?;
                let input = Input {
                    f32: Some(&s.a),
                    int8: None,
                    sparse: false,
                    norm: None,
                };
                self.linear(&m.head, input, n, &s.logits)
            }
            Wanted::Last | Wanted::Argmax | Wanted::Sample => {
                // the last row (a decode step's only row is already at offset 0)
                let last = if n == 1 {
                    x
                } else {
                    self.p.record_copy(x, (n - 1) * d * 4, other, 0, d * 4);
                    other
                };
                kernels::rmsnorm(ctx, &mut self.p, last, &m.output_norm, &s.last, d, 1, eps)?;
                let input = Input {
                    f32: Some(&s.last),
                    int8: None,
                    sparse: false,
                    norm: None,
                };
                self.linear(&m.head, input, 1, &s.logits)?;
                let vocab = u64::from(m.spec.n_vocab);
                if wanted == Wanted::Argmax {
                    kernels::argmax(ctx, &mut self.p, &s.logits, vocab, 1, &s.argmax)?;
                }
                if wanted == Wanted::Sample {
                    let bufs = s.sample.as_ref().ok_or_else(|| {
                        GpuError::internal("sample", "sampling buffers not allocated")
                    })?;
                    kernels::sample_candidates(ctx, &mut self.p, &s.logits, vocab, bufs)?;
                }
                Ok(())
            }
        }
    }
}
