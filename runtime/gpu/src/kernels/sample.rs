//! Sampling on the GPU: greedy argmax of rows of logits, the top-k of one row (the host then
//! reads `8·k` bytes instead of the vocabulary), and [`sample_candidates`]: what the engine's
//! sampler needs of one row — the repetition-penalty tokens' raw logits, the top-k of the rest,
//! and the rest's log-sum-exp at the sampling temperature ([`SampleCandidates`]).

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{ArgmaxParams, SampleParams, TopkParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

/// Greedy sampling: `out[r]` = index of the largest of row `r`'s `n` logits (first on ties).
pub fn argmax(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    logits: &wgpu::Buffer,
    n: u64,
    n_rows: u64,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "argmax";
    let bytes = n.saturating_mul(n_rows).saturating_mul(4);
    check_buffer(OP, "logits", logits, bytes)?;
    check_buffer(OP, "out", out, n_rows * 4)?;
    check_binding(ctx, "logits", bytes)?;
    let p = ArgmaxParams {
        n: u32_of(OP, "n", n)?,
        n_rows: u32_of(OP, "n_rows", n_rows)?,
        ..ArgmaxParams::default()
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::Argmax,
        &[&params, logits, out],
        (p.n_rows, 1, 1),
    )
}

/// Largest `k` the top-k kernel takes.
pub const TOPK_MAX_K: u32 = 64;
/// Logits per workgroup of the top-k kernel's first pass.
const TOPK_PER_WG: u64 = 2048;

/// The `k` largest of the `n` logits in `logits` (one row), sorted by value descending, ties to
/// the lower index: `out` = `[k]` pairs of (u32 id, f32 value as bits). Slots past `n` (when
/// `n < k`) hold `(u32::MAX, -inf)`; NaN logits are never picked. For sampling on the GPU: the
/// host reads `8·k` bytes instead of the vocabulary. Two passes when `n` exceeds one workgroup's
/// slice (2048 logits): per-workgroup top-k into a scratch buffer allocated here (once per
/// recording), then their merge.
pub fn topk(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    logits: &wgpu::Buffer,
    n: u64,
    k: u32,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "topk";
    if n == 0 || k == 0 || k > TOPK_MAX_K {
        return Err(GpuError::shape(
            OP,
            format!("n = {n}, k = {k}: n must be ≥ 1 and k in 1..={TOPK_MAX_K}"),
        ));
    }
    let lb = n.saturating_mul(4);
    let ob = u64::from(k) * 8;
    if logits.size() < lb || out.size() < ob {
        return Err(GpuError::shape(
            OP,
            format!(
                "logits holds {} bytes (needs {lb}), out {} (needs {ob})",
                logits.size(),
                out.size()
            ),
        ));
    }
    if lb > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: "top-k logits".into(),
            detail: format!("{lb} bytes, the binding limit is {}", ctx.binding_limit()),
        });
    }
    let n_wg = n.div_ceil(TOPK_PER_WG);
    let p1 = TopkParams {
        n_in: u32_of(OP, "n", n)?,
        k,
        per: TOPK_PER_WG as u32, // ok: a small constant
        _pad: 0,
    };
    let params1 = ctx.uniform(bytemuck::bytes_of(&p1))?;
    let gx = u32_of(OP, "workgroups", n_wg)?;
    let pass1 = KernelKey::TopK { merge: false };
    if n_wg == 1 {
        return ctx.dispatch(enc, pass1, &[&params1, logits, out], (1, 1, 1));
    }
    let scratch = ctx.zeroed("top-k candidates", n_wg * ob)?;
    ctx.dispatch(enc, pass1, &[&params1, logits, &scratch], (gx, 1, 1))?;
    let p2 = TopkParams {
        n_in: u32_of(OP, "candidates", n_wg * u64::from(k))?,
        k,
        per: 0,
        _pad: 0,
    };
    let params2 = ctx.uniform(bytemuck::bytes_of(&p2))?;
    ctx.dispatch(
        enc,
        KernelKey::TopK { merge: true },
        &[&params2, &scratch, out],
        (1, 1, 1),
    )
}

/// Candidates [`sample_candidates`] keeps (the top-k kernel's largest k).
pub const SAMPLE_K: u32 = TOPK_MAX_K;
/// Distinct recent tokens whose logits [`sample_candidates`] sets aside (repetition penalty).
pub const SAMPLE_HIST_MAX: usize = 64;
/// Logits per workgroup of the log-sum-exp's first pass.
const LSE_PER_WG: u64 = 4096;
/// Words of the control buffer: `[n_hist, temperature bits, 0, 0, ids[SAMPLE_HIST_MAX]]`.
const CTL_WORDS: usize = 4 + SAMPLE_HIST_MAX;
/// Word offset of (max, sum) in the output: after the `SAMPLE_K` (id, value) pairs.
const OUT_LSE: usize = 2 * SAMPLE_K as usize;
/// Word offset of the set-aside raw logits.
const OUT_HIST: usize = OUT_LSE + 4;
/// Words of the output (what the host reads back: 784 bytes).
pub const SAMPLE_OUT_WORDS: usize = OUT_HIST + SAMPLE_HIST_MAX;

/// The buffers of [`sample_candidates`]: the control words the host writes before each step, the
/// output it reads back after, and a mappable copy of it.
#[derive(Debug)]
pub struct SampleBufs {
    pub ctl: wgpu::Buffer,
    pub out: wgpu::Buffer,
    pub staging: wgpu::Buffer,
}

impl SampleBufs {
    pub fn alloc(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            ctl: ctx.zeroed("sampling control", CTL_WORDS as u64 * 4)?,
            out: ctx.zeroed("sampling candidates", SAMPLE_OUT_WORDS as u64 * 4)?,
            staging: ctx.create_buffer(
                "sampling readback",
                SAMPLE_OUT_WORDS as u64 * 4,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?,
        })
    }

    /// Write the control words: the distinct recent tokens `hist` (at most [`SAMPLE_HIST_MAX`])
    /// whose logits are set aside, and the temperature of the log-sum-exp (0: taken as 1).
    pub fn write_ctl(&self, ctx: &GpuContext, hist: &[u32], temperature: f32) -> Result<()> {
        let words = ctl_words(hist, temperature)?;
        ctx.queue
            .write_buffer(&self.ctl, 0, bytemuck::cast_slice(&words));
        Ok(())
    }
}

/// The control words for `hist` and `temperature` (checked: at most [`SAMPLE_HIST_MAX`]
/// distinct ids).
fn ctl_words(hist: &[u32], temperature: f32) -> Result<Vec<u32>> {
    const OP: &str = "sample_candidates";
    if hist.len() > SAMPLE_HIST_MAX {
        return Err(GpuError::invalid(
            OP,
            format!("{} penalized tokens, at most {SAMPLE_HIST_MAX}", hist.len()),
        ));
    }
    let mut sorted = hist.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(GpuError::invalid(
            OP,
            "penalized token ids must be distinct",
        ));
    }
    let mut words = vec![0u32; CTL_WORDS];
    words[0] = hist.len() as u32; // ok: ≤ SAMPLE_HIST_MAX
    words[1] = temperature.to_bits();
    words[4..4 + hist.len()].copy_from_slice(hist); // ok: length checked above
    Ok(words)
}

/// What [`sample_candidates`] leaves for the host, read back from [`SampleBufs::out`].
#[derive(Debug, Clone, PartialEq)]
pub struct SampleCandidates {
    /// The `SAMPLE_K` largest logits that are not set aside and not NaN, `(id, logit)`, sorted
    /// by (logit descending, id ascending); fewer when the row has fewer such logits.
    pub top: Vec<(u32, f32)>,
    /// Max `M` and `S = Σ exp((x − M) / T)` over the same logits (all of them, not only the top):
    /// f32 on the GPU (the max exact, the sum approximate). `(−inf, 0)` when there are none.
    pub max: f32,
    pub sum: f32,
    /// The raw logits of the set-aside tokens, in the order given (NaN for an id ≥ n).
    pub hist: Vec<(u32, f32)>,
}

impl SampleCandidates {
    /// Parse the output words for the set-aside ids `hist`.
    pub fn from_words(words: &[u32], hist: &[u32]) -> Result<Self> {
        if words.len() < SAMPLE_OUT_WORDS || hist.len() > SAMPLE_HIST_MAX {
            return Err(GpuError::internal(
                "sample_candidates",
                "short readback".to_string(),
            ));
        }
        let top = words[..OUT_LSE] // ok: length checked above
            .chunks_exact(2)
            .filter(|p| p[0] != u32::MAX)
            .map(|p| (p[0], f32::from_bits(p[1])))
            .collect();
        let hist = hist
            .iter()
            .zip(&words[OUT_HIST..]) // ok: length checked above
            .map(|(&id, &w)| (id, f32::from_bits(w)))
            .collect();
        Ok(Self {
            top,
            max: f32::from_bits(words[OUT_LSE]), // ok: length checked above
            sum: f32::from_bits(words[OUT_LSE + 1]), // ok: length checked above
            hist,
        })
    }

    /// Bytes the host reads back per step.
    pub const READBACK_BYTES: u64 = SAMPLE_OUT_WORDS as u64 * 4;
}

/// GPU side of sampling one row of `n` logits (the engine's sampler finishes on the host):
/// the logits of the token ids in `bufs.ctl` are copied out and set to NaN in `logits` (the
/// host applies the repetition penalty to them: a GPU division is not correctly rounded), then
/// the top-[`SAMPLE_K`] of the rest ([`topk`]: exact, ties to the lower id) and their
/// `(max, Σ exp((x − max)/T))` (two passes). Everything lands in `bufs.out`
/// ([`SampleCandidates::from_words`]). `logits` keeps the NaNs until the next step writes it.
pub fn sample_candidates(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    logits: &wgpu::Buffer,
    n: u64,
    bufs: &SampleBufs,
) -> Result<()> {
    const OP: &str = "sample_candidates";
    check_buffer(OP, "logits", logits, n.saturating_mul(4))?;
    check_buffer(OP, "out", &bufs.out, SAMPLE_OUT_WORDS as u64 * 4)?;
    let nn = u32_of(OP, "n", n)?;
    let p0 = SampleParams {
        n: nn,
        per: 0,
        out_off: OUT_LSE as u32,   // ok: a small constant
        hist_off: OUT_HIST as u32, // ok: a small constant
    };
    let params0 = ctx.uniform(bytemuck::bytes_of(&p0))?;
    ctx.dispatch(
        enc,
        KernelKey::TopkSample(0),
        &[&params0, &bufs.ctl, logits, &bufs.out],
        (1, 1, 1),
    )?;
    topk(ctx, enc, logits, n, SAMPLE_K, &bufs.out)?;
    let n_wg = n.div_ceil(LSE_PER_WG);
    let gx = u32_of(OP, "workgroups", n_wg)?;
    let p1 = SampleParams {
        per: LSE_PER_WG as u32,                              // ok: a small constant
        out_off: if n_wg == 1 { OUT_LSE as u32 } else { 0 }, // ok: a small constant
        ..p0
    };
    let params1 = ctx.uniform(bytemuck::bytes_of(&p1))?;
    if n_wg == 1 {
        return ctx.dispatch(
            enc,
            KernelKey::TopkSample(1),
            &[&params1, &bufs.ctl, logits, &bufs.out],
            (1, 1, 1),
        );
    }
    let partials = ctx.zeroed("log-sum-exp partials", n_wg * 8)?;
    ctx.dispatch(
        enc,
        KernelKey::TopkSample(1),
        &[&params1, &bufs.ctl, logits, &partials],
        (gx, 1, 1),
    )?;
    let p2 = SampleParams {
        n: gx,
        per: 0,
        ..p0
    };
    let params2 = ctx.uniform(bytemuck::bytes_of(&p2))?;
    ctx.dispatch(
        enc,
        KernelKey::TopkSample(2),
        &[&params2, &bufs.ctl, &partials, &bufs.out],
        (1, 1, 1),
    )
}
