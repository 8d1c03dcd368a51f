//! Fused Cut-Cross-Entropy scoring on the GPU (Wijmans et al., arXiv 2411.09009): per-token
//! `log p(target)` from the final normed hidden states without writing the `[n][n_vocab]` logits.
//! The CPU counterpart is `tern_reference::cce::log_probs`.
//!
//! * **Pass A** (`cce.wgsl`, one dispatch per head part): a workgroup takes [`POSITION_BLOCK`]
//!   = 64 positions × [`VOCAB_BLOCK`] = 512 head rows, as 8 tiles of 64 rows (up to
//!   [`SMALL_MAX_POSITIONS`] positions: 16 positions × 2 tiles of 256 rows). Each tile's logits
//!   are an SGEMM tile in workgroup memory (head rows dequantized in registers on the way in, each
//!   one used for 64 positions: the head is read `⌈n / 64⌉` times, not `n` times), folded at once
//!   into a running max and `Σ exp(z − max)` per position. The workgroup writes one partial
//!   `(max, sum)` per position to a scratch buffer, and the target's logit when the target row
//!   was in its tiles (exactly one writer per position).
//! * **Pass B** (`cce_combine.wgsl`): per position, the partials of every vocab block of every
//!   part are merged in block order (`M = max m_j`, `S = Σ s_j·exp(m_j − M)`), then
//!   `log p = z_target − (M + ln S)`. Fixed order, no float atomics: the result is deterministic.
//!
//! Scratch: `n × (2 · n_vocab_blocks + 1)` f32 (a vocab block is 512 rows), never `n × n_vocab`.
//! When that exceeds one binding the positions go in chunks, each reusing the scratch.
//!
//! [`materialized_logprobs`] is the plain path for comparison: the existing GEMV/GEMM writes the
//! `[n][n_vocab]` logits (in position chunks that fit a binding), then `log_softmax_target.wgsl`
//! reads each row.
//!
//! A target `≥ n_vocab` gives NaN (targets live on the GPU; the launcher cannot check them).

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{CceCombineParams, CceParams, LogSoftmaxParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::{ggml, matmul};
use crate::weights::{FloatWeight, GgmlWeight};

/// Positions per pass-A workgroup (`BP` in `cce.wgsl`) with 64-row tiles.
pub const POSITION_BLOCK: u64 = 64;
/// Positions per workgroup of the few-positions variant (256-row tiles), used up to
/// [`SMALL_MAX_POSITIONS`] positions: a 64-position tile would compute mostly padding.
pub const SMALL_POSITION_BLOCK: u64 = 16;
pub const SMALL_MAX_POSITIONS: u64 = 32;
/// Positions per workgroup from [`LARGE_MIN_POSITIONS`] on: each invocation computes 8 × 4 logits
/// instead of 4 × 4 (more arithmetic per workgroup-memory read and per barrier; the head is read
/// `⌈n / 128⌉` times).
pub const LARGE_POSITION_BLOCK: u64 = 128;
pub const LARGE_MIN_POSITIONS: u64 = 256;
/// Head rows one pass-A workgroup folds into its running (max, sum) (8 tiles of 64 rows, or 2 of
/// 256), giving one partial per position. More rows per workgroup mean less scratch and a
/// shorter merge, fewer mean more workgroups; at 512 rows a 49152-row head at 512 positions is
/// 96 × 8 = 768 workgroups, a 128256-row one 2008.
pub const VOCAB_BLOCK: u64 = 512;
/// Pass-A workgroups per dimension at most (WebGPU's guaranteed 65535).
const MAX_GROUPS: u64 = 65535;

/// The output projection to score with: ggml blocks or a float matrix, split by rows into parts.
#[derive(Debug, Clone, Copy)]
pub enum Head<'a> {
    Ggml(&'a GgmlWeight),
    Float(&'a FloatWeight),
}

/// One binding of the head: rows `row0 .. row0 + rows`, from element `elem_offset`.
struct HeadPart<'a> {
    row0: u64,
    rows: u64,
    buffer: &'a wgpu::Buffer,
    elem_offset: u64,
}

impl<'a> Head<'a> {
    /// Vocabulary size (head rows).
    pub fn rows(&self) -> u64 {
        match self {
            Head::Ggml(w) => w.rows,
            Head::Float(w) => w.rows,
        }
    }

    /// Hidden size (head columns).
    pub fn cols(&self) -> u64 {
        match self {
            Head::Ggml(w) => w.cols,
            Head::Float(w) => w.cols,
        }
    }

    fn key(&self, bp: u64) -> KernelKey {
        let bp = bp as u32; // ok: 64 or 16
        match self {
            Head::Ggml(w) => KernelKey::CceGgml(w.qtype, bp),
            Head::Float(w) => KernelKey::CceFloat(w.dtype, bp),
        }
    }

    fn blocks_per_row(&self) -> u64 {
        match self {
            Head::Ggml(w) => w.cols / w.qtype.block_elems() as u64,
            Head::Float(_) => 0,
        }
    }

    fn parts(&self) -> Vec<HeadPart<'a>> {
        match *self {
            Head::Ggml(w) => w
                .part_views()
                .map(|(row0, rows, buffer)| HeadPart {
                    row0,
                    rows,
                    buffer,
                    elem_offset: 0,
                })
                .collect(),
            Head::Float(w) => w
                .parts()
                .iter()
                .map(|p| HeadPart {
                    row0: p.row0,
                    rows: p.rows,
                    buffer: &p.buffer,
                    elem_offset: p.elem_offset,
                })
                .collect(),
        }
    }
}

/// Checks shared by both paths: operand sizes and the one-binding limits of hidden/targets/out.
fn check_operands(
    op: &'static str,
    ctx: &GpuContext,
    hidden: &wgpu::Buffer,
    n: u64,
    head: Head<'_>,
    targets: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<()> {
    ctx.check_alive()?;
    let (rows, d) = (head.rows(), head.cols());
    if rows == 0 || d == 0 {
        return Err(GpuError::shape(op, format!("head is {rows} × {d}")));
    }
    u32_of(op, "n_vocab", rows)?;
    u32_of(op, "n_embd", d)?;
    let hb = n.saturating_mul(d).saturating_mul(4);
    check_buffer(op, "hidden", hidden, hb)?;
    check_binding(ctx, "hidden states", hb)?;
    check_buffer(op, "targets", targets, n.saturating_mul(4))?;
    check_buffer(op, "out", out, n.saturating_mul(4))?;
    check_binding(ctx, "targets", n.saturating_mul(4))?;
    // Positions index the hidden rows in u32 arithmetic inside the kernels.
    u32_of(op, "n · n_embd", n.saturating_mul(d))?;
    Ok(())
}

/// Vocab blocks of every part (pass-A workgroups along x), and each part's first block.
fn vocab_blocks(parts: &[HeadPart<'_>]) -> (u64, Vec<u64>) {
    let mut firsts = Vec::with_capacity(parts.len());
    let mut nb = 0;
    for p in parts {
        firsts.push(nb);
        nb += p.rows.div_ceil(VOCAB_BLOCK);
    }
    (nb, firsts)
}

/// Bytes of pass A's scratch for `n` positions (one position chunk; see the module doc).
pub fn scratch_bytes(ctx: &GpuContext, n: u64, head: Head<'_>) -> Result<u64> {
    let (nb, _) = vocab_blocks(&head.parts());
    let per_pos = (2 * nb + 1) * 4;
    let chunk = positions_per_chunk(ctx, per_pos)?;
    Ok(n.min(chunk).max(1) * per_pos)
}

fn positions_per_chunk(ctx: &GpuContext, per_pos_bytes: u64) -> Result<u64> {
    let c = (ctx.binding_limit() / per_pos_bytes.max(1)).min(MAX_GROUPS * POSITION_BLOCK);
    if c == 0 {
        return Err(GpuError::TooLarge {
            what: "CCE partials".into(),
            detail: format!(
                "{per_pos_bytes} bytes per position, a binding holds {}",
                ctx.binding_limit()
            ),
        });
    }
    Ok(c)
}

/// `out[i] = log softmax(W · hidden[i])[targets[i]]` for `n` positions, fused (see the module
/// doc): `hidden` `[n][n_embd]` f32 (final normed hidden states), `targets` `[n]` u32 vocab ids,
/// `out` `[n]` f32. Records the dispatches into `enc`.
pub fn score(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    hidden: &wgpu::Buffer,
    n: u64,
    head: Head<'_>,
    targets: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "cce::score";
    check_operands(OP, ctx, hidden, n, head, targets, out)?;
    if n == 0 {
        return Ok(());
    }
    let parts = head.parts();
    let (nb, firsts) = vocab_blocks(&parts);
    let per_pos = (2 * nb + 1) * 4;
    let chunk = positions_per_chunk(ctx, per_pos)?.min(n);
    let scratch = ctx.zeroed("cce partials", chunk * per_pos)?;
    let (bp, tile_rows) = if n <= SMALL_MAX_POSITIONS {
        (SMALL_POSITION_BLOCK, 256)
    } else if n < LARGE_MIN_POSITIONS {
        (POSITION_BLOCK, 64)
    } else {
        (LARGE_POSITION_BLOCK, 64)
    };
    let key = head.key(bp);
    let d = head.cols();
    let mut pos0 = 0;
    while pos0 < n {
        let nc = chunk.min(n - pos0);
        let gy = u32_of(OP, "position blocks", nc.div_ceil(bp))?;
        for (part, &block0) in parts.iter().zip(&firsts) {
            let p = CceParams {
                rows: u32_of(OP, "rows", part.rows)?,
                cols: u32_of(OP, "cols", d)?,
                blocks_per_row: u32_of(OP, "blocks", head.blocks_per_row())?,
                row0: u32_of(OP, "row0", part.row0)?,
                n_pos: u32_of(OP, "positions", nc)?,
                pos0: u32_of(OP, "pos0", pos0)?,
                block0: u32_of(OP, "block0", block0)?,
                n_blocks: u32_of(OP, "vocab blocks", nb)?,
                tiles: (VOCAB_BLOCK / tile_rows) as u32, // ok: 8 or 2
                elem_offset: u32_of(OP, "elem_offset", part.elem_offset)?,
                _pad1: 0,
                _pad2: 0,
            };
            let params = ctx.uniform(bytemuck::bytes_of(&p))?;
            let gx = u32_of(OP, "vocab blocks", part.rows.div_ceil(VOCAB_BLOCK))?;
            ctx.dispatch(
                enc,
                key,
                &[&params, part.buffer, hidden, targets, &scratch],
                (gx, gy, 1),
            )?;
        }
        let q = CceCombineParams {
            n_pos: u32_of(OP, "positions", nc)?,
            pos0: u32_of(OP, "pos0", pos0)?,
            n_blocks: u32_of(OP, "vocab blocks", nb)?,
            vocab: u32_of(OP, "n_vocab", head.rows())?,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&q))?;
        let gx = u32_of(OP, "workgroups", nc.div_ceil(256))?;
        ctx.dispatch(
            enc,
            KernelKey::CceCombine,
            &[&params, &scratch, targets, out],
            (gx, 1, 1),
        )?;
        pos0 += nc;
    }
    Ok(())
}

/// The materialized path with [`score`]'s contract: the GEMV/GEMM ([`ggml::ggml_matmul`],
/// [`matmul::float_matmul`]) writes `[chunk][n_vocab]` logits for as many positions as fit one
/// binding, then one workgroup per position computes `logits[t] − logsumexp(logits)`.
pub fn materialized_logprobs(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    hidden: &wgpu::Buffer,
    n: u64,
    head: Head<'_>,
    targets: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "cce::materialized_logprobs";
    check_operands(OP, ctx, hidden, n, head, targets, out)?;
    if n == 0 {
        return Ok(());
    }
    let (vocab, d) = (head.rows(), head.cols());
    let row_bytes = vocab * 4;
    let chunk = (ctx.binding_limit() / row_bytes).min(MAX_GROUPS).min(n);
    if chunk == 0 {
        return Err(GpuError::TooLarge {
            what: "logits".into(),
            detail: format!("one row is {row_bytes} bytes"),
        });
    }
    let logits = ctx.zeroed("logits", chunk * row_bytes)?;
    let xchunk = if chunk < n {
        Some(ctx.zeroed("hidden chunk", chunk * d * 4)?)
    } else {
        None
    };
    let mut pos0 = 0;
    while pos0 < n {
        let nc = chunk.min(n - pos0);
        let x = match &xchunk {
            Some(xc) => {
                enc.record_copy(hidden, pos0 * d * 4, xc, 0, nc * d * 4);
                xc
            }
            None => hidden,
        };
        match head {
            Head::Ggml(w) => ggml::ggml_matmul(ctx, enc, w, x, nc, &logits)?,
            Head::Float(w) => matmul::float_matmul(ctx, enc, w, x, nc, &logits)?,
        }
        let q = LogSoftmaxParams {
            vocab: u32_of(OP, "n_vocab", vocab)?,
            n_pos: u32_of(OP, "positions", nc)?,
            pos0: u32_of(OP, "pos0", pos0)?,
            _pad: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&q))?;
        ctx.dispatch(
            enc,
            KernelKey::LogSoftmaxTarget,
            &[&params, &logits, targets, out],
            (q.n_pos, 1, 1),
        )?;
        pos0 += nc;
    }
    Ok(())
}
