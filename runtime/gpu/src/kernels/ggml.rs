//! The ggml-block matmuls (Q8_0, Q4_0, Q4_1, Q6_K rows as llama.cpp stores them) with f32
//! activations: the decode GEMV (`ggml_gemv.wgsl`, with the residual-add / GLU [`Epilogue`]s),
//! the tiled prefill GEMM (`ggml_gemm.wgsl`) and the choice between them. Both sum in their own
//! f32 order (NMSE ~1e-14 against `tern_reference`'s `dot_f32`; parity bound 1e-6).

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::GgmlParams;
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::Result;
use crate::kernels::matmul::{
    Epilogue, NormPrologue, GEMM_MIN_TOKENS, GEMM_TILE_ROWS, GEMM_TILE_TOKENS,
};
use crate::weights::{GgmlWeight, Part};

/// Rows per workgroup of `ggml_gemv.wgsl` (256 invocations, 32 per row).
pub const GGML_GEMV_ROWS_PER_WG: u64 = 8;

/// Rows per workgroup of its fused-norm variants (8 invocations per row): every workgroup computes
/// the token's norm, so four times fewer of them repeat it.
pub const GGML_GEMV_NORM_ROWS_PER_WG: u64 = 32;

/// The parameters of one row part of a ggml-block weight (GEMV and GEMM share the struct;
/// `blocks_per_row` counts 32-column units).
fn ggml_params(op: &'static str, w: &GgmlWeight, part: &Part, n_tokens: u32) -> Result<GgmlParams> {
    Ok(GgmlParams {
        mode: 0,
        rows: u32_of(op, "rows", part.rows)?,
        cols: u32_of(op, "cols", w.cols)?,
        blocks_per_row: u32_of(op, "blocks", w.cols / 32)?,
        out_stride: u32_of(op, "rows", w.rows)?,
        row0: u32_of(op, "row0", part.row0)?,
        n_tokens,
        eps: 0.0,
    })
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` with f32 activations `x` = `[n_tokens][cols]`.
pub fn ggml_gemv(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    ggml_gemv_epi(ctx, enc, w, x, n_tokens, Epilogue::Store, y)
}

/// [`ggml_gemv`] with an [`Epilogue`] (the residual add or the GLU fused into the store).
pub fn ggml_gemv_epi(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    epi: Epilogue,
    y: &wgpu::Buffer,
) -> Result<()> {
    ggml_gemv_fused(ctx, enc, w, x, n_tokens, None, epi, y)
}

/// The RMSNorm a ggml GEMV applies to its input rows itself (`ggml_gemv.wgsl`'s prologue,
/// `NORM` = 1): `y = W · rmsnorm(x) · weight`, the same bits as `rmsnorm` then the GEMV.
#[derive(Clone, Copy)]
pub struct GgmlNorm<'a> {
    /// `[cols]` f32 norm weight.
    pub weight: &'a wgpu::Buffer,
    pub eps: f32,
}

impl<'a> From<NormPrologue<'a>> for GgmlNorm<'a> {
    fn from(p: NormPrologue<'a>) -> Self {
        GgmlNorm {
            weight: p.weight,
            eps: p.eps,
        }
    }
}

/// [`ggml_gemv_epi`] whose input is `x`'s RMSNorm when `norm` is given (computed in the GEMV's
/// prologue: no separate norm pass, no normed rows written).
#[allow(clippy::too_many_arguments)]
pub fn ggml_gemv_fused(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    norm: Option<GgmlNorm<'_>>,
    epi: Epilogue,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "ggml_gemv";
    let xb = n_tokens.saturating_mul(w.cols).saturating_mul(4);
    check_buffer(OP, "x", x, xb)?;
    check_binding(ctx, "activations", xb)?;
    if let Some(nm) = &norm {
        check_buffer(OP, "norm weight", nm.weight, w.cols.saturating_mul(4))?;
    }
    // gate/up pairs with a GLU epilogue (mode bit 2) write one value per pair
    let pairs = w.pairs && epi.is_glu();
    let out_rows = if pairs { w.rows / 2 } else { w.rows };
    let yb = n_tokens.saturating_mul(out_rows).saturating_mul(4);
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ggml output", yb)?;
    let nt = u32_of(OP, "n_tokens", n_tokens)?;
    let (key, nw, rpw) = match &norm {
        Some(nm) => (
            KernelKey::GgmlGemvNorm(w.qtype),
            nm.weight,
            GGML_GEMV_NORM_ROWS_PER_WG,
        ),
        // the plain variant does not read its norm binding
        None => (KernelKey::GgmlGemv(w.qtype), x, GGML_GEMV_ROWS_PER_WG),
    };
    for part in &w.parts {
        let mut p = ggml_params(OP, w, part, nt)?;
        p.mode = epi.mode() | if pairs { 4 } else { 0 };
        p.eps = norm.map_or(0.0, |nm| nm.eps);
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(rpw))?;
        ctx.dispatch(enc, key, &[&params, &part.buffer, x, y, nw], (gx, nt, 1))?;
    }
    Ok(())
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` with f32 activations `x` = `[n_tokens][cols]`, by 64 × 32
/// tiles; the [`ggml_gemv`] contract (NMSE ~1e-14 against the reference).
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
        let p = ggml_params(OP, w, part, nt)?;
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

/// [`ggml_gemv`] below [`GEMM_MIN_TOKENS`] tokens, [`ggml_gemm`] from there on.
pub fn ggml_matmul(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &GgmlWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    if n_tokens < GEMM_MIN_TOKENS {
        ggml_gemv(ctx, enc, w, x, n_tokens, y)
    } else {
        ggml_gemm(ctx, enc, w, x, n_tokens, y)
    }
}
