//! A session's activation scratch: every intermediate of the graph for batches of up to
//! `max_batch` tokens, allocated once and shared by every recorded plan.

use tern_format::HParams;

use crate::device::context::GpuContext;
use crate::device::memory::Tracked;
use crate::device::params::StepParams;
use crate::error::Result;
use crate::kernels::act_quant::{act_stride_words, ActInt8};

/// Rows of logits one `eval_all` batch produces (small: scoring uses the fused path).
/// f32 words of the attention partials for batches of up to `b` tokens.
fn partials_words(ctx: &GpuContext, hp: &HParams, b: u64) -> u64 {
    let (nh, nkv, hd) = (
        u64::from(hp.n_head),
        u64::from(hp.n_head_kv),
        u64::from(hp.head_dim),
    );
    crate::kernels::attention::attn_partials_bytes(ctx, b, nh, nkv, hd) / 4
}

fn logits_rows(ctx: &GpuContext, vocab: u64, b: u64) -> u64 {
    b.min(32)
        .min((ctx.binding_limit() / (vocab * 4).max(1)).max(1))
}

/// A buffer's bytes as `GpuContext::create_buffer` rounds them.
fn rounded(n: u64) -> u64 {
    n.max(4).div_ceil(4) * 4
}

/// Scratch for batches of up to `max_batch` tokens.
pub(crate) struct Scratch {
    pub(crate) x0: wgpu::Buffer,
    pub(crate) x1: wgpu::Buffer,
    pub(crate) a: wgpu::Buffer,
    pub(crate) q: wgpu::Buffer,
    pub(crate) k: wgpu::Buffer,
    pub(crate) v: wgpu::Buffer,
    pub(crate) o: wgpu::Buffer,
    pub(crate) o2: wgpu::Buffer,
    pub(crate) proj: wgpu::Buffer,
    /// `[b][2 · n_ff]`: the gate (split weights) or the gate/up pairs side by side.
    pub(crate) g: wgpu::Buffer,
    pub(crate) h: wgpu::Buffer,
    pub(crate) h2: wgpu::Buffer,
    pub(crate) act_embd: ActInt8,
    pub(crate) act_q: ActInt8,
    pub(crate) act_ff: ActInt8,
    pub(crate) last: wgpu::Buffer,
    pub(crate) logits: wgpu::Buffer,
    pub(crate) argmax: wgpu::Buffer,
    pub(crate) ids: wgpu::Buffer,
    pub(crate) targets: wgpu::Buffer,
    pub(crate) logprobs: wgpu::Buffer,
    pub(crate) rope: wgpu::Buffer,
    /// The cos/sin tables of the model's other RoPE frequency sets (`GpuModel::rope_freqs`
    /// 1..: Gemma 3's global layers), each the size of `rope`.
    pub(crate) rope_extra: Vec<wgpu::Buffer>,
    /// Split-K attention partials, shared by every layer of a recording.
    pub(crate) attn_partials: wgpu::Buffer,
    pub(crate) step: wgpu::Buffer,
    pub(crate) staging: wgpu::Buffer,
    /// Activation-sparsity counters while a measurement is on (`model/sparsity.rs`).
    pub(crate) act_stats: Option<wgpu::Buffer>,
    /// GPU sampling's buffers, allocated on the first sampled step (`GpuSession::step_sample`).
    pub(crate) sample: Option<crate::kernels::SampleBufs>,
    /// Releases these bytes from the context's own count when the session goes.
    _tracked: Tracked,
}

impl Scratch {
    /// The cos/sin table of RoPE frequency set `i` (`GpuModel::rope_freqs`).
    pub(crate) fn rope_table(&self, i: usize) -> Result<&wgpu::Buffer> {
        match i {
            0 => Ok(&self.rope),
            _ => self.rope_extra.get(i - 1).ok_or_else(|| {
                crate::error::GpuError::internal("plan", "RoPE table not allocated")
            }),
        }
    }

    pub(crate) fn alloc(ctx: &GpuContext, hp: &HParams, max_batch: u64) -> Result<Self> {
        let (d, ff, vocab) = (
            u64::from(hp.n_embd),
            u64::from(hp.n_ff),
            u64::from(hp.n_vocab),
        );
        let q_dim = u64::from(hp.n_head) * u64::from(hp.head_dim);
        let kv_dim = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);
        let b = max_batch;
        let f = |what: &str, n: u64| ctx.zeroed(what, n.max(1) * 4);
        let logits_rows = logits_rows(ctx, vocab, b);
        let half = u64::from(hp.rope_dim / 2).max(1);
        let s = Scratch {
            x0: f("x0", b * d)?,
            x1: f("x1", b * d)?,
            a: f("a", b * d)?,
            q: f("q", b * q_dim)?,
            k: f("k", b * kv_dim)?,
            v: f("v", b * kv_dim)?,
            o: f("o", b * q_dim)?,
            o2: f("o2", b * q_dim)?,
            proj: f("proj", b * d)?,
            g: f("g", b * 2 * ff)?,
            h: f("h", b * ff)?,
            h2: f("h2", b * ff)?,
            act_embd: ActInt8::alloc(&ctx, b, d)?,
            act_q: ActInt8::alloc(&ctx, b, q_dim)?,
            act_ff: ActInt8::alloc(&ctx, b, ff)?,
            last: f("last hidden", d)?,
            logits: f("logits", logits_rows * vocab)?,
            argmax: f("argmax", 1)?,
            ids: f("token ids", b)?,
            targets: f("score targets", b)?,
            logprobs: f("log-probabilities", b)?,
            rope: f("rope table", b * half * 2)?,
            rope_extra: Vec::new(),
            attn_partials: f("attention partials", partials_words(ctx, hp, b))?,
            step: ctx.create_buffer(
                "step params",
                std::mem::size_of::<StepParams>() as u64,
                wgpu::BufferUsages::UNIFORM
                    | wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST,
            )?,
            staging: ctx.create_buffer(
                "logits readback",
                logits_rows * vocab * 4,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?,
            act_stats: None,
            sample: None,
            _tracked: ctx.track(Self::bytes_for(ctx, hp, max_batch)),
        };
        Ok(s)
    }

    /// Bytes every buffer of [`Scratch::alloc`] takes for `max_batch` (computed before
    /// allocating, for the memory budget; a test checks it against the buffers).
    pub(crate) fn bytes_for(ctx: &GpuContext, hp: &HParams, max_batch: u64) -> u64 {
        let (d, ff, vocab) = (
            u64::from(hp.n_embd),
            u64::from(hp.n_ff),
            u64::from(hp.n_vocab),
        );
        let q_dim = u64::from(hp.n_head) * u64::from(hp.head_dim);
        let kv_dim = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);
        let b = max_batch;
        let f = |n: u64| rounded(n.max(1).saturating_mul(4));
        let act = |cols: u64| {
            rounded(b.saturating_mul(act_stride_words(cols)).saturating_mul(4)) + rounded(b * 4)
        };
        let lr = logits_rows(ctx, vocab, b);
        let half = u64::from(hp.rope_dim / 2).max(1);
        4 * f(b * d)
            + 3 * f(b * q_dim)
            + 2 * f(b * kv_dim)
            + f(b * 2 * ff)
            + 2 * f(b * ff)
            + act(d)
            + act(q_dim)
            + act(ff)
            + f(d)
            + f(lr * vocab)
            + f(1)
            + 3 * f(b)
            + f(b * half * 2)
            + f(partials_words(ctx, hp, b))
            + rounded(std::mem::size_of::<StepParams>() as u64)
            + rounded(lr * vocab * 4)
    }

    /// Bytes of every buffer (what [`Scratch::bytes_for`] computes).
    #[cfg(test)]
    pub(crate) fn all_bytes(&self) -> u64 {
        [
            &self.x0,
            &self.x1,
            &self.a,
            &self.q,
            &self.k,
            &self.v,
            &self.o,
            &self.o2,
            &self.proj,
            &self.g,
            &self.h,
            &self.h2,
            &self.act_embd.q,
            &self.act_embd.s,
            &self.act_q.q,
            &self.act_q.s,
            &self.act_ff.q,
            &self.act_ff.s,
            &self.last,
            &self.logits,
            &self.argmax,
            &self.ids,
            &self.targets,
            &self.logprobs,
            &self.rope,
            &self.attn_partials,
            &self.step,
            &self.staging,
        ]
        .iter()
        .map(|b| b.size())
        .sum()
    }

    /// Bytes of the activation buffers (reported as the session's scratch).
    pub(crate) fn bytes(&self) -> u64 {
        [
            &self.x0,
            &self.x1,
            &self.a,
            &self.q,
            &self.k,
            &self.v,
            &self.o,
            &self.o2,
            &self.proj,
            &self.g,
            &self.h,
            &self.h2,
            &self.act_embd.q,
            &self.act_q.q,
            &self.act_ff.q,
            &self.last,
            &self.logits,
            &self.rope,
            &self.attn_partials,
            &self.staging,
        ]
        .iter()
        .map(|b| b.size())
        .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the memory budget plans for a session's scratch are the bytes allocated.
    #[test]
    fn bytes_for_matches_the_buffers() {
        let Ok(ctx) = GpuContext::new(crate::DevicePreference::Auto) else {
            assert!(!crate::tuning::gpu_required());
            return;
        };
        let hp = HParams {
            n_embd: 48,
            n_ff: 96,
            n_head: 6,
            n_head_kv: 2,
            head_dim: 8,
            rope_dim: 8,
            n_vocab: 320,
            n_layer: 2,
            n_ctx_train: 256,
            rope_theta: 10000.0,
            rope_neox: false,
            rms_eps: 1e-5,
            ffn_act: tern_format::FfnAct::Silu,
            tied_embeddings: false,
            sub_norms: false,
        };
        for b in [1, 7, 64] {
            let s = Scratch::alloc(&ctx, &hp, b).unwrap();
            assert_eq!(s.all_bytes(), Scratch::bytes_for(&ctx, &hp, b), "batch {b}");
        }
    }
}
