//! [`GpuSession`]: one conversation on the GPU — KV cache, activation scratch, recorded plans,
//! and the verbs the engine calls (eval, eval_all, score, step_argmax, truncate).

use std::collections::HashMap;
use std::sync::Arc;

use crate::device::context::GpuContext;
use crate::device::params::StepParams;
use crate::device::plan::Plan;
use crate::error::{GpuError, Result};
use crate::kernels::SampleCandidates;
use crate::model::graph::{self, Wanted};
use crate::model::scratch::Scratch;
use crate::model::{GpuModel, KvCache};
use tern_format::KvSpec;

mod lookahead;

/// GPU memory of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionMemory {
    pub kv_bytes: u64,
    pub scratch_bytes: u64,
}

/// Batches of at least this many tokens are submitted one layer at a time (smaller ones, decode
/// steps included, in one submission). The session checks for cancellation between submissions,
/// so a cancel waits for at most about one layer of the batch (~3 ms for 512 tokens of the 2B4T
/// shape on a desktop GPU, seconds on lavapipe). Two submissions are kept in flight, so the GPU
/// does not idle between them; the cost is the CPU's encoding and submitting, ~0.1 ms a layer.
pub const LAYERED_SUBMIT_MIN_TOKENS: u64 = 8;

/// A check that says whether to stop (cancellation), called between GPU submissions.
pub type Stop<'a> = &'a dyn Fn() -> bool;

/// A recorded plan's key: tokens per batch, output, and whether every key of the batch lies
/// within [`graph::short_attention_keys`] of the model's tuning (a plan whose attention is not
/// split).
pub(crate) type PlanKey = (u64, Wanted, bool);

/// One conversation on the GPU: KV cache, scratch, recorded plans.
pub struct GpuSession {
    pub(crate) model: Arc<GpuModel>,
    pub(crate) n_ctx: u64,
    pub(crate) max_batch: u64,
    pub(crate) len: u64,
    /// Positions any layer may have written (≥ `len` after a failed or stopped batch): what the
    /// KIVI truncation rule looks at.
    pub(crate) written: u64,
    pub(crate) kv: KvCache,
    pub(crate) s: Scratch,
    /// Per batch size, output and context class (short: attention unsplit): the recorded pass,
    /// in submission segments.
    pub(crate) plans: HashMap<PlanKey, Vec<Plan>>,
    mem: SessionMemory,
    /// Greedy steps run ahead ([`lookahead`]): on, the step in flight, its readback buffers, and
    /// whether such a step replaced the last step's logits.
    lookahead: bool,
    ahead: Option<lookahead::Ahead>,
    ahead_staging: Vec<wgpu::Buffer>,
    logits_stale: bool,
}

impl std::fmt::Debug for GpuSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSession")
            .field("n_ctx", &self.n_ctx)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl GpuSession {
    /// A session holding up to `n_ctx` positions in the KV format `kv` (`tern_format::kv`),
    /// running batches of up to `max_batch` tokens.
    pub fn new(model: Arc<GpuModel>, n_ctx: u64, max_batch: u64, kv: &KvSpec) -> Result<Self> {
        let ctx = Arc::clone(&model.ctx);
        let hp = &model.hp;
        if n_ctx == 0 || max_batch == 0 {
            return Err(GpuError::invalid(
                "session",
                "n_ctx and max_batch must be > 0",
            ));
        }
        let window = model
            .spec
            .layers
            .iter()
            .any(|l| l.attn.sliding_window.is_some());
        if window && kv.minicache.is_some() {
            // a MiniCache pair would merge a sliding layer with a global one
            return Err(GpuError::Unsupported {
                adapter: ctx.info.name.clone(),
                detail: "MiniCache with sliding-window attention is not implemented; use \
                         --kv without MiniCache"
                    .into(),
            });
        }
        // Under a budget: a smaller batch when needed, or `OverBudget` naming what fits.
        let max_batch = model.fit_session(n_ctx, max_batch, kv)?;
        let kv = KvCache::new(&ctx, hp, n_ctx, kv, max_batch)?;
        let mut s = Scratch::alloc(&ctx, hp, max_batch)?;
        for _ in 1..model.rope_freqs.len() {
            let bytes = s.rope.size();
            s.rope_extra.push(ctx.zeroed("rope table", bytes)?);
        }
        let scratch_bytes = s.bytes();
        let lookahead = model.tuning.lookahead;
        Ok(GpuSession {
            mem: SessionMemory {
                kv_bytes: kv.bytes(),
                scratch_bytes,
            },
            model,
            n_ctx,
            max_batch,
            len: 0,
            written: 0,
            kv,
            s,
            plans: HashMap::new(),
            lookahead,
            ahead: None,
            ahead_staging: Vec::new(),
            logits_stale: false,
        })
    }

    /// Layers per submission for a batch of `n` tokens (0: all in one).
    fn layers_per_segment(n: u64) -> usize {
        usize::from(n >= LAYERED_SUBMIT_MIN_TOKENS)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Logits per row.
    pub fn n_vocab(&self) -> u64 {
        u64::from(self.model.hp.n_vocab)
    }

    pub fn n_ctx(&self) -> u64 {
        self.n_ctx
    }

    pub fn memory(&self) -> SessionMemory {
        self.mem
    }

    /// `kv_bytes_per_token`: all bytes of the cache in use (codes, scales, zero points, the
    /// full-precision window) over the positions held; at an empty cache, what a full one takes.
    /// (MiniCache: the retained rows are read back from the GPU; when that fails, counted as
    /// none.)
    pub fn kv_bytes_per_token(&self) -> f64 {
        if self.len == 0 {
            return self.kv.bytes_per_token(self.n_ctx, 0);
        }
        let retained = self.kv.retained(&self.model.ctx, self.len).unwrap_or(0);
        self.kv.bytes_per_token(self.len, retained)
    }

    /// Exact bytes of the KV cache in use at `len()` positions (the spec's accounting:
    /// `tern_format::KvSpec::bytes_held`).
    pub fn kv_bytes_in_use(&self) -> Result<u64> {
        let retained = self.kv.retained(&self.model.ctx, self.len)?;
        Ok(self.kv.bytes_in_use(self.len, retained))
    }

    /// The KV cache (format, accounting).
    pub fn kv_cache(&self) -> &KvCache {
        &self.kv
    }

    /// Forget the cache beyond the first `n` positions (the KV rows are overwritten later) and
    /// return the length kept: `min(n, len())`, except in a KIVI cache where the block of `R`
    /// positions holding `n` was quantized already — its f16 rows are gone — where it keeps the
    /// block's start `R·⌊n/R⌋` (`tern_format::kv`, "Truncation"); the caller re-runs the tokens
    /// between the two.
    pub fn truncate(&mut self, n: u64) -> u64 {
        // A step run ahead wrote position `len()` only: kept by a truncate that keeps `len()`
        // (the engine's bookkeeping calls it after every step), dropped by any other (a failed
        // wait shows at the next step).
        if n < self.len {
            let _ = self.settle_ahead();
        }
        let m = n.min(self.len);
        let q = self.kv.layout().quantized(m);
        let block_quantized = self.kv.layout().quantized(self.written) > q;
        self.len = if m != q && block_quantized { q } else { m };
        self.written = self.len;
        self.len
    }

    /// Largest batch whose every-token logits fit the logits buffer.
    fn all_rows(&self) -> u64 {
        self.s.logits.size() / (u64::from(self.model.hp.n_vocab) * 4).max(1)
    }

    /// The key of the recorded plan for `n` tokens at the current position (built on first use).
    pub(crate) fn plan_for(&mut self, n: u64, wanted: Wanted) -> Result<PlanKey> {
        self.plan_at(self.len, n, wanted)
    }

    /// [`GpuSession::plan_for`] for a batch starting at position `pos`.
    fn plan_at(&mut self, pos: u64, n: u64, wanted: Wanted) -> Result<PlanKey> {
        let short = pos.saturating_add(n) <= graph::short_attention_keys(&self.model.tuning);
        let key = (n, wanted, short);
        if self.plans.contains_key(&key) {
            return Ok(key);
        }
        if self.plans.len() > 8 {
            // Keep decode plans; drop odd prefill sizes.
            self.plans.retain(|(k, ..), _| *k == 1);
        }
        if wanted == Wanted::Sample && self.s.sample.is_none() {
            self.s.sample = Some(crate::kernels::SampleBufs::alloc(&self.model.ctx)?);
        }
        let per = Self::layers_per_segment(n);
        let plan = graph::record(&self.model, &self.s, &self.kv, n, wanted, per, short)?;
        self.plans.insert(key, plan);
        Ok(key)
    }

    /// Write a step's inputs: embeddings of `tokens` into `x0`, the RoPE table of positions
    /// `len()..`, and the step parameters.
    pub(crate) fn write_inputs(&mut self, tokens: &[u32]) -> Result<()> {
        self.write_inputs_at(self.len, Some(tokens), tokens.len() as u64)
    }

    /// [`GpuSession::write_inputs`] for `n` tokens at position `pos`; `tokens` `None`: the ids
    /// the previous step left in the id buffer (GPU embedding only).
    fn write_inputs_at(&mut self, pos: u64, tokens: Option<&[u32]>, n: u64) -> Result<()> {
        let m = Arc::clone(&self.model);
        let ctx = &*m.ctx;
        let hp = &m.hp;
        match (&m.embed, tokens) {
            (Some(_), None) => {
                return Err(GpuError::internal(
                    "embedding",
                    "a host-side embedding needs the token ids",
                ))
            }
            (None, None) => {}
            (Some(e), Some(tokens)) => {
                let mut emb = Vec::with_capacity(tokens.len() * hp.n_embd as usize);
                for &t in tokens {
                    e.row(u64::from(t), &mut emb)?;
                }
                ctx.queue
                    .write_buffer(&self.s.x0, 0, bytemuck::cast_slice(&emb));
            }
            (None, Some(tokens)) => {
                if let Some(&bad) = tokens.iter().find(|&&t| t >= hp.n_vocab) {
                    return Err(GpuError::invalid(
                        "embedding",
                        format!("token {bad} outside the vocabulary (0..{})", hp.n_vocab),
                    ));
                }
                ctx.queue
                    .write_buffer(&self.s.ids, 0, bytemuck::cast_slice(tokens));
            }
        }
        let positions: Vec<u64> = (pos..pos + n).collect();
        // one cos/sin table per distinct RoPE of the layers (Gemma 3: local and global)
        for (i, f) in m.rope_freqs.iter().enumerate() {
            let table = f.table(&positions);
            if !table.is_empty() {
                ctx.queue.write_buffer(self.s.rope_table(i)?, 0, &table);
            }
        }
        let sp = StepParams {
            p0: pos as u32,     // ok: pos < n_ctx, which fits a binding
            n_tokens: n as u32, // ok: n ≤ max_batch, checked by the caller
            ..StepParams::default()
        };
        ctx.queue
            .write_buffer(&self.s.step, 0, bytemuck::bytes_of(&sp));
        Ok(())
    }

    /// Run `tokens` at positions `len()..` and return logits as `wanted` says (`Argmax`: a
    /// one-element vector holding the token id as f32 bits — use [`GpuSession::step_argmax`]).
    /// `Ok(None)` when `stop` said so between two submissions; `len()` advances only on success.
    fn run(&mut self, tokens: &[u32], wanted: Wanted, stop: Stop<'_>) -> Result<Option<Vec<f32>>> {
        self.settle_ahead()?;
        let n = tokens.len() as u64;
        if n == 0 {
            return Err(GpuError::invalid("eval", "no tokens"));
        }
        if n > self.max_batch {
            return Err(GpuError::invalid(
                "eval",
                format!(
                    "{n} tokens in one batch, the session runs at most {}",
                    self.max_batch
                ),
            ));
        }
        if self.len + n > self.n_ctx {
            return Err(GpuError::invalid(
                "eval",
                format!(
                    "{} positions needed, the KV cache holds {}",
                    self.len + n,
                    self.n_ctx
                ),
            ));
        }
        if wanted == Wanted::All && n > self.all_rows() {
            return Err(GpuError::invalid(
                "eval",
                "too many rows of logits for one batch",
            ));
        }
        let key = self.plan_for(n, wanted)?;
        self.write_inputs(tokens)?;
        self.written = self.written.max(self.len + n);
        let m = Arc::clone(&self.model);
        let ctx = &*m.ctx;
        let hp = &m.hp;
        let segments = self
            .plans
            .get(&key)
            .ok_or_else(|| GpuError::internal("eval", "plan missing"))?;
        let (last, rest) = segments
            .split_last()
            .ok_or_else(|| GpuError::internal("eval", "empty plan"))?;
        // Two submissions in flight at most: the GPU never idles between segments, and a stop
        // is seen within two segments' time.
        let mut in_flight = None;
        for seg in rest {
            if stop() {
                return Ok(None);
            }
            let mut enc = ctx.encoder();
            seg.encode(&mut enc);
            let idx = ctx.submit(enc)?;
            if let Some(prev) = in_flight.replace(idx) {
                ctx.wait(prev)?;
            }
        }
        if stop() {
            return Ok(None);
        }
        let mut enc = ctx.encoder();
        last.encode(&mut enc);
        let mut staging = &self.s.staging;
        let (src, bytes) = match wanted {
            Wanted::Score => (&self.s.logprobs, n * 4),
            Wanted::All => (&self.s.logits, n * u64::from(hp.n_vocab) * 4),
            Wanted::Last => (&self.s.logits, u64::from(hp.n_vocab) * 4),
            Wanted::Argmax => (&self.s.argmax, 4),
            Wanted::Sample => {
                let b = self
                    .s
                    .sample
                    .as_ref()
                    .ok_or_else(|| GpuError::internal("eval", "sampling buffers missing"))?;
                staging = &b.staging;
                (&b.out, SampleCandidates::READBACK_BYTES)
            }
        };
        enc.copy_buffer_to_buffer(src, 0, staging, 0, bytes);
        ctx.submit_wait(enc)?;
        let out = read_mapped(ctx, staging, bytes)?;
        self.len += n;
        self.logits_stale = false;
        Ok(Some(out))
    }

    /// Run `f` and put `len()` back where it was when it fails or is stopped: a failed or
    /// cancelled call leaves the session at its last good position (a KIVI cache whose block
    /// holding it was quantized meanwhile: at that block's start, [`GpuSession::truncate`]).
    fn rollback_on_failure<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let len0 = self.len;
        let r = f(self);
        if !matches!(r, Ok(Some(_))) {
            self.truncate(len0);
        }
        r
    }

    /// Run `tokens` (any number, in batches of at most `max_batch`) and return the last
    /// token's logits.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        never_stopped(self.eval_with(tokens, &|| false))
    }

    /// [`GpuSession::eval`] that checks `stop` between GPU submissions (every layer of a batch of
    /// [`LAYERED_SUBMIT_MIN_TOKENS`] or more) and returns `Ok(None)` when it says so. After `Ok(None)` or an error, `len()` is what it was before the call
    /// (KIVI: or the start of the block holding it, see [`GpuSession::truncate`]).
    pub fn eval_with(&mut self, tokens: &[u32], stop: Stop<'_>) -> Result<Option<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(GpuError::invalid("eval", "no tokens"));
        }
        self.rollback_on_failure(|s| {
            let mut out = None;
            for c in tokens.chunks(s.max_batch.max(1) as usize) {
                out = s.run(c, Wanted::Last, stop)?;
                if out.is_none() {
                    break;
                }
            }
            Ok(out)
        })
    }

    /// Run `tokens` and return every token's logits, `[n][n_vocab]`.
    pub fn eval_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        never_stopped(self.eval_all_with(tokens, &|| false))
    }

    /// [`GpuSession::eval_all`] with the `stop` check of [`GpuSession::eval_with`].
    pub fn eval_all_with(&mut self, tokens: &[u32], stop: Stop<'_>) -> Result<Option<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(GpuError::invalid("eval", "no tokens"));
        }
        let b = self.all_rows().min(self.max_batch).max(1) as usize;
        self.rollback_on_failure(|s| {
            let mut out = Vec::with_capacity(tokens.len() * s.model.hp.n_vocab as usize);
            for c in tokens.chunks(b) {
                match s.run(c, Wanted::All, stop)? {
                    Some(v) => out.extend(v),
                    None => return Ok(None),
                }
            }
            Ok(Some(out))
        })
    }

    /// `log p(tokens[i+1] | tokens[..=i])` for `i` in `0..n-1` from an empty cache, through the
    /// fused Cut-Cross-Entropy kernel (no logits materialized; the session's cache holds
    /// `tokens[..n-1]` afterwards).
    pub fn score(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        never_stopped(self.score_with(tokens, &|| false))
    }

    /// [`GpuSession::score`] with the `stop` check of [`GpuSession::eval_with`]; after `Ok(None)`
    /// or an error the cache is empty.
    pub fn score_with(&mut self, tokens: &[u32], stop: Stop<'_>) -> Result<Option<Vec<f32>>> {
        self.truncate(0);
        self.rollback_on_failure(|s| s.score_batches(tokens, stop))
    }

    fn score_batches(&mut self, tokens: &[u32], stop: Stop<'_>) -> Result<Option<Vec<f32>>> {
        let n_in = tokens.len().saturating_sub(1);
        let mut out = Vec::with_capacity(n_in);
        let b = self.max_batch.max(1) as usize;
        let mut start = 0;
        while start < n_in {
            let end = (start + b).min(n_in);
            let (Some(inputs), Some(targets)) =
                (tokens.get(start..end), tokens.get(start + 1..end + 1))
            else {
                break;
            };
            if let Some(&bad) = targets.iter().find(|&&t| t >= self.model.hp.n_vocab) {
                return Err(GpuError::invalid(
                    "score",
                    format!("token {bad} outside the vocabulary"),
                ));
            }
            self.model
                .ctx
                .queue
                .write_buffer(&self.s.targets, 0, bytemuck::cast_slice(targets));
            match self.run(inputs, Wanted::Score, stop)? {
                Some(lp) => out.extend(lp),
                None => return Ok(None),
            }
            start = end;
        }
        Ok(Some(out))
    }

    /// Run one token and return its sampling candidates ([`SampleCandidates`]: the top-k of the
    /// logits other than `penalized`'s, their max and `Σ exp((x − max)/temperature)`, and the raw
    /// logits of `penalized`, distinct ids, at most [`crate::kernels::SAMPLE_HIST_MAX`]):
    /// [`SampleCandidates::READBACK_BYTES`] read back instead of the logits. The logits stay on
    /// the GPU ([`GpuSession::last_logits`]) until the next step.
    pub fn step_sample(
        &mut self,
        token: u32,
        penalized: &[u32],
        temperature: f32,
    ) -> Result<SampleCandidates> {
        self.plan_for(1, Wanted::Sample)?;
        let bufs = self
            .s
            .sample
            .as_ref()
            .ok_or_else(|| GpuError::internal("sample", "sampling buffers missing"))?;
        bufs.write_ctl(&self.model.ctx, penalized, temperature)?;
        let v = never_stopped(
            self.rollback_on_failure(|s| s.run(&[token], Wanted::Sample, &|| false)),
        )?;
        let words: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        SampleCandidates::from_words(&words, penalized)
    }

    /// The logits of the last token of the last step (after [`GpuSession::step_sample`]: with
    /// the penalized tokens' logits NaN — they are in its [`SampleCandidates::hist`]).
    pub fn last_logits(&self) -> Result<Vec<f32>> {
        if self.logits_stale {
            return Err(GpuError::invalid(
                "logits",
                "a greedy step run ahead replaced the last step's logits (eval or step_sample \
                 keeps them; see GpuSession::set_lookahead)",
            ));
        }
        let ctx = &*self.model.ctx;
        let bytes = u64::from(self.model.hp.n_vocab) * 4;
        let mut enc = ctx.encoder();
        enc.copy_buffer_to_buffer(&self.s.logits, 0, &self.s.staging, 0, bytes);
        ctx.submit_wait(enc)?;
        read_mapped(ctx, &self.s.staging, bytes)
    }

    /// Run one token and return the greedy next token, argmax taken on the GPU (4 bytes read
    /// back instead of the logits). Runs the step after it ahead where it can ([`lookahead`]):
    /// feed the result back and the next call finds its work done or under way.
    pub fn step_argmax(&mut self, token: u32) -> Result<u32> {
        if self.use_ahead() {
            return self.step_argmax_ahead(token);
        }
        let v = never_stopped(self.run(&[token], Wanted::Argmax, &|| false))?;
        Ok(v.first().map(|x| x.to_bits()).unwrap_or(0))
    }
}

/// The result of a call whose `stop` never says yes.
fn never_stopped<T>(r: Result<Option<T>>) -> Result<T> {
    r?.ok_or_else(|| GpuError::internal("eval", "stopped without a stop request"))
}

/// Map `staging` and read its first `bytes` as f32 once submission `idx`, the last one writing
/// it, is done (later submissions may still run).
pub(crate) fn read_mapped_after(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    bytes: u64,
    idx: wgpu::SubmissionIndex,
) -> Result<Vec<f32>> {
    ctx.wait(idx)?;
    read_mapped_with(ctx, staging, bytes, false)
}

/// Map `staging` and read its first `bytes` as f32 (after a completed submission).
pub(crate) fn read_mapped(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    bytes: u64,
) -> Result<Vec<f32>> {
    read_mapped_with(ctx, staging, bytes, true)
}

/// `all`: wait for every submission (else the buffer's writer is done: poll until the map
/// lands, without waiting for later work).
fn read_mapped_with(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    bytes: u64,
    all: bool,
) -> Result<Vec<f32>> {
    let slice = staging.slice(..bytes);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    let err = |e: String| {
        ctx.lost_or(GpuError::Readback {
            what: "logits".into(),
            detail: e,
        })
    };
    let mapped = if all {
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| err(e.to_string()))?;
        rx.recv().map_err(|e| err(e.to_string()))?
    } else {
        // The writer is done: the map completes at the next polls (bounded, then wait for all).
        let mut got = None;
        for _ in 0..1000 {
            ctx.device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| err(e.to_string()))?;
            if let Ok(r) = rx.try_recv() {
                got = Some(r);
                break;
            }
            std::thread::yield_now();
        }
        match got {
            Some(r) => r,
            None => {
                ctx.device
                    .poll(wgpu::PollType::wait_indefinitely())
                    .map_err(|e| err(e.to_string()))?;
                rx.recv().map_err(|e| err(e.to_string()))?
            }
        }
    };
    mapped.map_err(|e| err(e.to_string()))?;
    let out = {
        let view = slice.get_mapped_range().map_err(|e| err(e.to_string()))?;
        bytemuck::pod_collect_to_vec::<u8, f32>(&view)
    };
    staging.unmap();
    Ok(out)
}
