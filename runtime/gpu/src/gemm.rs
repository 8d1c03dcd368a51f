//! Tiled GEMMs for prefill, and `*_matmul` launchers that pick GEMV or GEMM by token count.
//!
//! The GEMV kernels ([`ops::ternary_gemv`], [`ops::ggml_gemv`]) put tokens on grid y, so every
//! workgroup re-reads its weight rows once per token. The GEMM kernels here
//! (`ternary_gemm.wgsl`, `ggml_gemm.wgsl`) compute a tile of [`GEMM_TILE_ROWS`] rows ×
//! [`GEMM_TILE_TOKENS`] tokens per workgroup, staging decoded weights and activations in
//! workgroup memory, so each weight word is read once per 32 tokens. Same operands, same output
//! (`y = [n_tokens][rows]` f32) and same split-by-rows weights as the GEMVs:
//!
//! * [`ternary_gemm`]: bit-exact with [`ops::ternary_gemv`] and `tern_reference` (i32 sums per
//!   scale group, then the same f32 operations in the same order), so the choice between the two
//!   never changes a result;
//! * [`ggml_gemm`]: Q8_0 / Q4_0 / Q4_1 / Q6_K with f32 activations, another f32 summation order
//!   than the GEMV (NMSE ~1e-14 against the reference).
//!
//! [`ternary_matmul`] / [`ggml_matmul`] are what a forward pass calls: GEMV below
//! [`GEMM_MIN_TOKENS`] tokens (decode), GEMM from there on (prefill).

use bytemuck::{Pod, Zeroable};
use tern_format::ternary;

use crate::context::GpuContext;
use crate::error::{GpuError, Result};
use crate::ops::{self, check_binding, check_buffer, u32_of, ActInt8, GgmlWeight, TernaryWeight};
use crate::pipeline::KernelKey;
use crate::plan::Recorder;

/// Weight rows per GEMM workgroup (`TR` in the shaders).
pub const GEMM_TILE_ROWS: u64 = 64;
/// Tokens per GEMM workgroup (`TT` in the shaders).
pub const GEMM_TILE_TOKENS: u64 = 32;
/// From this many tokens on, [`ternary_matmul`] / [`ggml_matmul`] use the GEMM. Below it the
/// GEMV's per-token weight re-reads cost less than a mostly empty 32-token tile. Measured on an
/// H100 (`gpu_bench --only prefill`, 2bit 6912 × 2560): GEMV 62 µs at 1 token, ~+27 µs per
/// token; GEMM ~75 µs flat up to 32 tokens (one row tile per SM, latency-bound). On 640-row
/// matrices the GEMM has only 10 workgroups and the GEMV wins up to ~16 tokens; 4 is the
/// compromise.
pub const GEMM_MIN_TOKENS: u64 = 4;

/// Same layout as the GEMV's parameters (ternary_gemv.wgsl / ternary_gemm.wgsl `Params`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct TernaryParams {
    rows: u32,
    cols: u32,
    words_per_row: u32,
    group: u32,
    groups_per_row: u32,
    scale_word_offset: u32,
    act_stride: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

/// ggml_gemm.wgsl `Params`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct GgmlParams {
    rows: u32,
    cols: u32,
    blocks_per_row: u32,
    out_stride: u32,
    row0: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

/// `y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t` for every token of `a`, by
/// 64 × 32 tiles; `y` is `[n_tokens][rows]` f32. Bit-exact with [`ops::ternary_gemv`].
pub fn ternary_gemm(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "ternary_gemm";
    if u64::from(a.cols) != w.cols {
        return Err(GpuError::shape(
            OP,
            format!("activations have {} columns, the weight {}", a.cols, w.cols),
        ));
    }
    let epw = ternary::elems_per_word(w.layout);
    let wpr = ternary::words_per_row(w.layout, w.cols);
    let stride = u64::from(a.stride);
    if stride * 4 < wpr * epw || stride % 4 != 0 {
        return Err(GpuError::shape(
            OP,
            format!(
                "activation stride {stride} words: needs ≥ {} and a multiple of 4",
                (wpr * epw).div_ceil(4)
            ),
        ));
    }
    let n_tokens = u64::from(a.n_tokens);
    check_buffer(OP, "q", &a.q, n_tokens * stride * 4)?;
    check_buffer(OP, "s", &a.s, n_tokens * 4)?;
    let yb = n_tokens * w.rows * 4;
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ternary output", yb)?;
    let key = KernelKey::TernaryGemm {
        layout: w.layout,
        scale_type: w.scale_type,
    };
    let gpr = if w.group == 0 {
        1
    } else {
        w.cols / u64::from(w.group)
    };
    let gy = u32_of(OP, "token tiles", n_tokens.div_ceil(GEMM_TILE_TOKENS))?;
    for part in &w.parts {
        let p = TernaryParams {
            rows: u32_of(OP, "rows", part.rows)?,
            cols: u32_of(OP, "cols", w.cols)?,
            words_per_row: u32_of(OP, "words per row", wpr)?,
            group: w.group,
            groups_per_row: u32_of(OP, "groups", gpr)?,
            scale_word_offset: u32_of(OP, "scale offset", part.scale_word_offset)?,
            act_stride: a.stride,
            out_stride: u32_of(OP, "rows", w.rows)?,
            row0: u32_of(OP, "row0", part.row0)?,
            n_tokens: a.n_tokens,
            _pad0: 0,
            _pad1: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "row tiles", part.rows.div_ceil(GEMM_TILE_ROWS))?;
        ctx.dispatch(
            enc,
            key,
            &[&params, &part.buffer, &a.q, &a.s, y],
            (gx, gy, 1),
        )?;
    }
    Ok(())
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` with f32 activations `x` = `[n_tokens][cols]`, by 64 × 32
/// tiles; the [`ops::ggml_gemv`] contract (NMSE ~1e-14 against the reference).
pub fn ggml_gemm(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "ggml_gemm";
    let xb = n_tokens.saturating_mul(w.cols).saturating_mul(4);
    check_buffer(OP, "x", x, xb)?;
    check_binding(ctx, "activations", xb)?;
    let yb = n_tokens.saturating_mul(w.rows).saturating_mul(4);
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ggml output", yb)?;
    let nt = u32_of(OP, "n_tokens", n_tokens)?;
    let gy = u32_of(OP, "token tiles", n_tokens.div_ceil(GEMM_TILE_TOKENS))?;
    for part in &w.parts {
        let p = GgmlParams {
            rows: u32_of(OP, "rows", part.rows)?,
            cols: u32_of(OP, "cols", w.cols)?,
            blocks_per_row: u32_of(OP, "blocks", w.cols / 32)?,
            out_stride: u32_of(OP, "rows", w.rows)?,
            row0: u32_of(OP, "row0", part.row0)?,
            n_tokens: nt,
            _pad0: 0,
            _pad1: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "row tiles", part.rows.div_ceil(GEMM_TILE_ROWS))?;
        ctx.dispatch(
            enc,
            KernelKey::GgmlGemm(w.qtype),
            &[&params, &part.buffer, x, y],
            (gx, gy, 1),
        )?;
    }
    Ok(())
}

/// [`ops::ternary_gemv`] below [`GEMM_MIN_TOKENS`] tokens, [`ternary_gemm`] from there on (the
/// two are bit-identical, so the choice never shows in the result).
pub fn ternary_matmul(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
) -> Result<()> {
    if u64::from(a.n_tokens) < GEMM_MIN_TOKENS {
        ops::ternary_gemv(ctx, enc, w, a, y)
    } else {
        ternary_gemm(ctx, enc, w, a, y)
    }
}

/// [`ops::ggml_gemv`] below [`GEMM_MIN_TOKENS`] tokens, [`ggml_gemm`] from there on.
pub fn ggml_matmul(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    if n_tokens < GEMM_MIN_TOKENS {
        ops::ggml_gemv(ctx, enc, w, x, n_tokens, y)
    } else {
        ggml_gemm(ctx, enc, w, x, n_tokens, y)
    }
}
