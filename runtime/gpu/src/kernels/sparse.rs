//! The sparse ternary GEMV (`ternary_gemv_sparse.wgsl`): BitNet a4.8's inputs of the attention
//! output projection (TopK 50%) and of the FFN down projection (ReLU²) are mostly zeros, and a
//! decode step's GEMV can skip them. Each workgroup compacts the token's non-zero INT8 activation
//! words, then walks only those when there are at most `max_density × words` of them, the whole
//! row otherwise — a per-token switch inside the kernel, so a recorded plan stays valid whatever
//! the data. Bit-exact with [`ternary_gemv`](super::ternary_gemv) either way.
//!
//! [`ternary_matmul_sparse`] is what the graph calls for those two inputs: the sparse kernel where
//! it applies (one token at a time, 2-bit codes, scale groups of a multiple of 4 columns, at most
//! [`SPARSE_MAX_WORDS`] activation words), [`ternary_matmul`](super::ternary_matmul) otherwise.

use tern_format::{ternary, TernaryLayout};

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::pipeline::{ActBits, KernelKey};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::act_quant::ActInt8;
use crate::kernels::matmul::{ternary_matmul, ternary_params, GEMM_MIN_TOKENS};
use crate::tuning::{GemmTileChoice, GemvKernel};
use crate::weights::TernaryWeight;

/// Activation words (4 columns each) the kernel's list holds (`MAXW` in the shader).
pub const SPARSE_MAX_WORDS: u64 = 1792;
/// Rows per workgroup × scale groups per row the kernel's group sums hold (`GSUM`).
const SPARSE_GSUM: u64 = 1536;
/// Rows per workgroup (256 invocations, 32 per row).
const SPARSE_ROWS_PER_WG: u64 = 8;

/// The largest fraction of non-zero activation words for which [`ternary_matmul_sparse`] runs
/// the sparse walk; `0.0` turns the sparse kernel off (the dense GEMV runs). Measured on an H100
/// (`a48_bench`, 2026-11-24, docs/bench/a48-h100-run1): one token, 2560 × 6912 down projection,
/// dense GEMV 32.6–34.7 µs; the sparse walk 40.6 µs at 7% zero words (50% zero inputs), 35.5 µs at
/// 41% (80%), 31.3 µs at 66% (90%) — it pays only beyond ~90% zero inputs, and by 4%, while the
/// in-kernel compaction costs ~3 µs whenever the kernel runs (2560 × 2560: the same picture).
/// The random models' inputs are 13% (down) and 50% (attention output) zeros, the paper's trained
/// ones 80–86% and 50%: below the break-even either way, so the switch is off until the kernel is
/// cheaper (bigger rows per workgroup, a compaction shared by the workgroups).
pub const SPARSE_MAX_DENSITY: f64 = 0.0;

/// Whether the sparse kernel takes `w` with activations `a`.
pub fn sparse_applies(w: &TernaryWeight, a: &ActInt8) -> bool {
    let groups = if w.group == 0 {
        1
    } else {
        w.cols / u64::from(w.group)
    };
    // gate/up row pairs (two per-tensor scales) take the dense kernels
    !w.pairs
        && w.layout == TernaryLayout::Bits2
        && a.act == ActBits::Int8
        && u64::from(a.n_tokens) < GEMM_MIN_TOKENS
        && (w.group == 0 || w.group % 4 == 0)
        && w.cols.div_ceil(4) <= SPARSE_MAX_WORDS
        && SPARSE_ROWS_PER_WG * groups <= SPARSE_GSUM
}

/// The sparse GEMV (see the module doc) with the switch at `max_density` of the activation words
/// (0: always the dense walk; 1: always the sparse walk).
pub fn ternary_gemv_sparse(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
    max_density: f64,
) -> Result<()> {
    const OP: &str = "ternary_gemv_sparse";
    if u64::from(a.cols) != w.cols || !sparse_applies(w, a) {
        return Err(GpuError::shape(
            OP,
            format!(
                "{:?} weights ({} × {}, group {}) with {:?} activations of {} columns × {} \
                 tokens: not a sparse-GEMV case",
                w.layout, w.rows, w.cols, w.group, a.act, a.cols, a.n_tokens
            ),
        ));
    }
    let wpr = ternary::words_per_row(w.layout, w.cols);
    if u64::from(a.stride) * 4 < wpr * 16 {
        return Err(GpuError::shape(
            OP,
            "activation stride shorter than a code row",
        ));
    }
    check_buffer(
        OP,
        "q",
        &a.q,
        u64::from(a.n_tokens) * u64::from(a.stride) * 4,
    )?;
    check_buffer(OP, "s", &a.s, u64::from(a.n_tokens) * 4)?;
    let yb = u64::from(a.n_tokens) * w.rows * 4;
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ternary output", yb)?;
    let words = w.cols.div_ceil(4);
    let max_words = (words as f64 * max_density.clamp(0.0, 1.0)).floor() as u64;
    let key = KernelKey::TernaryGemvSparse {
        scale_type: w.scale_type,
        dot: ctx.dot_kind(),
    };
    for part in &w.parts {
        let mut p = ternary_params(OP, w, part, a, wpr)?;
        p.sparse_max_words = u32_of(OP, "sparse words", max_words)?;
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(SPARSE_ROWS_PER_WG))?;
        ctx.dispatch(
            enc,
            key,
            &[&params, &part.buffer, &a.q, &a.s, y],
            (gx, a.n_tokens, 1),
        )?;
    }
    Ok(())
}

/// The matmul of an input that is often sparse: [`ternary_gemv_sparse`] at
/// [`SPARSE_MAX_DENSITY`] where it applies, [`ternary_matmul`] (with `pick`) otherwise (same
/// result).
pub fn ternary_matmul_sparse(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
    pick: (GemvKernel, GemmTileChoice),
) -> Result<()> {
    if SPARSE_MAX_DENSITY > 0.0 && u64::from(a.cols) == w.cols && sparse_applies(w, a) {
        ternary_gemv_sparse(ctx, enc, w, a, y, SPARSE_MAX_DENSITY)
    } else {
        ternary_matmul(ctx, enc, w, a, y, pick)
    }
}
