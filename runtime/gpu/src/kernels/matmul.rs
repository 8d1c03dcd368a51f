//! Every matmul of the engine and the choice between them.
//!
//! * GEMV kernels (`ternary_gemv.wgsl`, `float_gemv.wgsl`; `ggml_gemv.wgsl` in `ggml.rs`) put tokens on grid
//!   y, so every workgroup re-reads its weight rows once per token: decode.
//! * Tiled GEMM kernels (`ternary_gemm.wgsl`, `ternary_gemm_t128.wgsl`, `ggml_gemm.wgsl` launched
//!   from `ggml.rs`) compute a tile of [`GEMM_TILE_ROWS`] rows × 32, 64 or 128 tokens
//!   ([`GemmTile`]) per workgroup, staging decoded weights and activations in workgroup memory,
//!   so each weight word is read once per tile of tokens: prefill. Same operands, same output (`y = [n_tokens][rows]` f32) and the same
//!   split-by-rows weights as the GEMVs. [`ternary_gemm`] is bit-exact with [`ternary_gemv`] and
//!   `tern_reference` (i32 sums per scale group, then the same f32 operations in the same
//!   order), so the choice never changes a result; the ggml GEMM sums in another f32 order than
//!   the GEMV (NMSE ~1e-14 against the reference).
//! * [`ternary_matmul`] / [`float_matmul`] (and `ggml.rs`'s `ggml_matmul`) are what the graph calls: GEMV
//!   below [`GEMM_MIN_TOKENS`] tokens, GEMM from there on (floats: GEMV always).

use tern_format::ternary;

use crate::device::check::{check_binding, check_buffer, u32_of};
use crate::device::context::GpuContext;
pub use crate::device::kinds::GemmTile;
use crate::device::params::{FloatParams, TernaryParams};
use crate::device::pipeline::{ActBits, KernelKey};
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::kernels::act_quant::ActInt8;
use crate::tuning::{GemmTileChoice, GemvKernel};
use crate::weights::ternary::{GEMV_ROWS_PER_WG, TERNARY_WIDE_MAX_GROUPS_PER_ROW};
use crate::weights::{FloatWeight, Part, TernaryWeight};

/// Weight rows per GEMM workgroup (`TR` in the shaders).
pub const GEMM_TILE_ROWS: u64 = 64;
/// Tokens per GEMM workgroup (`TT` in the shaders) of [`GemmTile::Narrow`] and of the ggml GEMM.
pub const GEMM_TILE_TOKENS: u64 = 32;
/// Tokens per workgroup of [`GemmTile::Wide`].
pub const GEMM_WIDE_TILE_TOKENS: u64 = 64;
/// [`ternary_gemm`] takes [`GemmTile::Wide`] (2bit only) when it gives at least this many
/// workgroups: below it (640-row k/v projections, short prompts) the narrow tile's twice as many
/// workgroups fill a large GPU better.
pub const GEMM_WIDE_MIN_WORKGROUPS: u64 = 256;

/// Tokens per workgroup of [`GemmTile::Tall`].
pub const GEMM_TALL_TILE_TOKENS: u64 = 128;
/// [`ternary_gemm`] takes [`GemmTile::Tall`] (2bit, group 0) when it gives at least this many
/// workgroups, else [`GemmTile::TallHalf`]. H100, 512 tokens (docs/bench/h-gemm-2026-11-24/call2):
/// at 864 (13824-row gate/up pairs) Tall is 0–4% faster than TallHalf, at 432 (6912 rows) 12%
/// slower, at 240 (3840-row stacked q/k/v) the same.
pub const GEMM_TALL_MIN_WORKGROUPS: u64 = 864;

impl GemmTile {
    /// The tile for `w` at `n_tokens` tokens under `pick` ([`crate::GpuTuning::gemm_tile`]).
    /// [`GemmTileChoice::Auto`]: where the 4 × 8 micro-tiles fit ([`GemmTile::tall_fits`]),
    /// [`GemmTile::Tall`] from [`GEMM_TALL_MIN_WORKGROUPS`] of its workgroups on, else
    /// [`GemmTile::TallHalf`] where the 64-token tiles give ≥ [`GEMM_WIDE_MIN_WORKGROUPS`];
    /// otherwise (and always with [`GemmTileChoice::Old`], the choice before the 4 × 8 tiles)
    /// [`GemmTile::Wide`] (2bit) from [`GEMM_WIDE_MIN_WORKGROUPS`] on, else [`GemmTile::Narrow`].
    /// The other choices force a tile (measurements; `Tall` and `TallHalf` fall back to `Wide`
    /// where they do not fit, every tile to `Narrow` on base3).
    ///
    /// `coop`: the device has cooperative matrices ([`GpuContext::coop_matrix`]); then
    /// [`GemmTileChoice::Auto`] and [`GemmTileChoice::Coop`] take [`GemmTile::Coop`] where it
    /// fits ([`GemmTile::coop_fits`]) from [`GEMM_COOP_MIN_TOKENS`] tokens on.
    pub fn choose(w: &TernaryWeight, n_tokens: u64, pick: GemmTileChoice, coop: bool) -> GemmTile {
        if w.layout != tern_format::TernaryLayout::Bits2 {
            return GemmTile::Narrow;
        }
        if coop
            && matches!(pick, GemmTileChoice::Auto | GemmTileChoice::Coop)
            && GemmTile::coop_fits(w)
            && n_tokens >= GEMM_COOP_MIN_TOKENS
        {
            return GemmTile::Coop;
        }
        let mut tall = GemmTile::tall_fits(w);
        match pick {
            GemmTileChoice::Narrow => return GemmTile::Narrow,
            GemmTileChoice::Wide => return GemmTile::Wide,
            GemmTileChoice::Tall if tall => return GemmTile::Tall,
            GemmTileChoice::TallHalf if tall => return GemmTile::TallHalf,
            GemmTileChoice::Tall | GemmTileChoice::TallHalf => return GemmTile::Wide,
            GemmTileChoice::Old => tall = false,
            GemmTileChoice::Auto | GemmTileChoice::Coop | GemmTileChoice::Classic => {}
        }
        let row_tiles = w.rows.div_ceil(GEMM_TILE_ROWS);
        let wide = row_tiles * n_tokens.div_ceil(GEMM_WIDE_TILE_TOKENS) >= GEMM_WIDE_MIN_WORKGROUPS;
        if tall && row_tiles * n_tokens.div_ceil(GEMM_TALL_TILE_TOKENS) >= GEMM_TALL_MIN_WORKGROUPS
        {
            GemmTile::Tall
        } else if tall && wide {
            GemmTile::TallHalf
        } else if wide {
            GemmTile::Wide
        } else {
            GemmTile::Narrow
        }
    }

    /// Whether [`GemmTile::Tall`] takes `w`: 2bit codes with one scale group or groups of a
    /// multiple of 64 columns (TQ2_0's 256; other weights keep the 64-row × 32/64-token tiles).
    pub fn tall_fits(w: &TernaryWeight) -> bool {
        w.layout == tern_format::TernaryLayout::Bits2 && w.group.is_multiple_of(64)
    }

    /// Whether [`GemmTile::Coop`] takes `w`: 2bit codes with one scale group (per-tensor scales,
    /// gate/up pairs included) or f16/bf16 scales in groups of a multiple of its 32-column K step
    /// (TQ2_0's 256), and at most [`GEMM_COOP_MAX_COLS`] columns (the f32 accumulators stay exact
    /// integers). f32 scales in groups stay on the classic tiles: the H200's compiler fuses the
    /// group flush's `sum + f32(acc) · scale` into an FMA, 2 ulp from the reference's rounded
    /// product when the scale has a full f32 mantissa (measured, docs/bench/i30-coopmat); an f16
    /// or bf16 scale times an integer below 2^24 is exact, so the fusion cannot show.
    pub fn coop_fits(w: &TernaryWeight) -> bool {
        let groups_ok = w.group == 0
            || (w.group.is_multiple_of(32) && w.scale_type != tern_format::FloatType::F32);
        w.layout == tern_format::TernaryLayout::Bits2 && groups_ok && w.cols <= GEMM_COOP_MAX_COLS
    }

    pub(crate) fn tokens(self) -> u64 {
        match self {
            GemmTile::Narrow => GEMM_TILE_TOKENS,
            GemmTile::Wide | GemmTile::TallHalf | GemmTile::Coop => GEMM_WIDE_TILE_TOKENS,
            GemmTile::Tall => GEMM_TALL_TILE_TOKENS,
        }
    }
}
/// Columns the cooperative-matrix GEMM takes: every partial sum of trit × code products is an
/// integer of magnitude ≤ cols · 127, exact in its f32 accumulators while ≤ 2^24.
pub const GEMM_COOP_MAX_COLS: u64 = (1 << 24) / 127;

/// From this many tokens on, [`GemmTile::choose`] takes [`GemmTile::Coop`] where it may (every
/// batch the GEMM gets: the tile is 64 tokens wide either way).
pub const GEMM_COOP_MIN_TOKENS: u64 = GEMM_MIN_TOKENS;

/// From this many tokens on, [`ternary_matmul`] / `ggml.rs`'s `ggml_matmul` use the GEMM. Below it the
/// GEMV's per-token weight re-reads cost less than a mostly empty 32-token tile. Measured on an
/// H100 (`gpu_bench --only prefill`, 2bit 6912 × 2560): GEMV 62 µs at 1 token, ~+27 µs per
/// token; GEMM ~75 µs flat up to 32 tokens (one row tile per SM, latency-bound). On 640-row
/// matrices the GEMM has only 10 workgroups and the GEMV wins up to ~16 tokens; 4 is the
/// compromise.
pub const GEMM_MIN_TOKENS: u64 = 4;

/// The parameters of one row part of a ternary weight (GEMV and GEMM share the struct).
pub(crate) fn ternary_params(
    op: &'static str,
    w: &TernaryWeight,
    part: &Part,
    a: &ActInt8,
    words_per_row: u64,
) -> Result<TernaryParams> {
    let groups_per_row = if w.group == 0 {
        1
    } else {
        w.cols / u64::from(w.group)
    };
    Ok(TernaryParams {
        rows: u32_of(op, "rows", part.rows)?,
        cols: u32_of(op, "cols", w.cols)?,
        words_per_row: u32_of(op, "words per row", words_per_row)?,
        group: w.group,
        groups_per_row: u32_of(op, "groups", groups_per_row)?,
        scale_word_offset: u32_of(op, "scale offset", part.scale_word_offset)?,
        act_stride: a.stride,
        out_stride: u32_of(op, "rows", w.rows)?,
        row0: u32_of(op, "row0", part.row0)?,
        n_tokens: a.n_tokens,
        sparse_max_words: 0,
        mode: 0,
        eps: 0.0,
        _pad2: 0,
        _pad3: 0,
        _pad4: 0,
    })
}

/// `p.mode` bit 5 of the ternary kernels: `w`'s rows are gate/up pairs (two per-tensor scales; the
/// GEMV's GLU epilogues combine each pair).
fn pair_bit(w: &TernaryWeight) -> u32 {
    if w.pairs {
        1 << 5
    } else {
        0
    }
}

/// Activations per u32 word of `a` (4 INT8 or 8 INT4).
fn act_per_word(a: &ActInt8) -> u64 {
    match a.act {
        ActBits::Int8 => 4,
        ActBits::Int4 => 8,
    }
}

/// What a decode GEMV does with its result (issue 15's fusions, `p.mode` bits 2..3 of
/// `ternary_gemv.wgsl`, `mode` of `ggml_gemv.wgsl`): store it, add it to `y` in place (the
/// residual add), or multiply it into the GLU of the gate already in `y` (the same f32 operations
/// as `elementwise.wgsl`, so the same bits as the separate pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Epilogue {
    #[default]
    Store,
    Add,
    Relu2Glu,
    SwiGlu,
}

impl Epilogue {
    /// A GLU (the epilogue that takes a gate/up pair's result).
    pub fn is_glu(self) -> bool {
        matches!(self, Epilogue::Relu2Glu | Epilogue::SwiGlu)
    }

    pub(crate) fn mode(self) -> u32 {
        match self {
            Epilogue::Store => 0,
            Epilogue::Add => 1,
            Epilogue::Relu2Glu => 2,
            Epilogue::SwiGlu => 3,
        }
    }
}

/// Activation words a ternary GEMV workgroup stages in workgroup memory (`ASH` in the shader):
/// the fused norm prologue needs the row to fit.
pub const GEMV_STAGED_ACT_WORDS: u32 = 2048;

/// An RMSNorm a ternary GEMV applies to its f32 input rows itself, then quantizes as its
/// activations say (INT8 absmax or INT4 absmean, or with `topk` a4.8's TopK 50% + INT8):
/// `rmsnorm_quant_int8` / the a4.8 quantizers fused into the GEMV's prologue, bit for bit.
#[derive(Clone, Copy)]
pub struct NormPrologue<'a> {
    /// `[n_tokens][cols]` f32 rows.
    pub x: &'a wgpu::Buffer,
    /// `[cols]` f32 norm weight.
    pub weight: &'a wgpu::Buffer,
    pub eps: f32,
    /// TopK 50% + INT8 absmax (`rmsnorm_quant_topk50_int8`'s bits; INT8 activations, the decode
    /// kernel only: [`dec_norm_fits`]).
    pub topk: bool,
}

/// Columns the fused norm prologue takes (bounded by the staged row, `GEMV_STAGED_ACT_WORDS`, too).
pub const GEMV_FUSED_NORM_MAX_COLS: u32 = 8192;

/// Whether a ternary GEMV of `w` fuses the norm producing `a` in the decode kernel
/// ([`dec_norm_fits`] under `gemv`) or, with `wide`, in either kernel ([`fused_norm_fits`]).
pub fn norm_fits(w: &TernaryWeight, a: &ActInt8, wide: bool, gemv: GemvKernel) -> bool {
    fused_norm_fits(w, a) && (wide || dec_norm_fits(w, a, gemv))
}

/// Whether a ternary GEMV of `w` can fuse the norm and quantization producing `a` (the row fits
/// the wide kernel's staging memory, its group sums the weight's scale groups).
pub fn fused_norm_fits(w: &TernaryWeight, a: &ActInt8) -> bool {
    a.stride <= GEMV_STAGED_ACT_WORDS
        && a.cols <= GEMV_FUSED_NORM_MAX_COLS
        && w.groups_per_row() <= TERNARY_WIDE_MAX_GROUPS_PER_ROW
}

/// Whether the decode kernel (`ternary_gemv_dec.wgsl`: 2-bit codes, 64 per vec4 load) takes a
/// ternary GEMV of `w` (`wpr` code words per row): rows start 16-byte aligned, scale groups are
/// whole 64-column chunks and the group sums fit its workgroup memory. [`GemvKernel::Plain`]
/// keeps every GEMV on `ternary_gemv.wgsl` (A/B measurements).
pub fn dec_gemv_fits(w: &TernaryWeight, wpr: u64, gemv: GemvKernel) -> bool {
    if gemv == GemvKernel::Plain {
        return false;
    }
    w.layout == tern_format::TernaryLayout::Bits2
        && wpr % 4 == 0
        && (w.group == 0 || w.group % 64 == 0)
        && w.groups_per_row() <= TERNARY_DEC_MAX_GROUPS_PER_ROW
}

/// Scale groups per row the decode kernel's workgroup memory holds (1024 sums, 8 rows).
pub const TERNARY_DEC_MAX_GROUPS_PER_ROW: u64 = 1024 / GEMV_ROWS_PER_WG;

/// Rows per workgroup of the decode GEMV with the fused norm prologue
/// (`ternary_gemv_dec_norm.wgsl`: 256 invocations, 8 per row).
pub const GEMV_DEC_NORM_ROWS_PER_WG: u64 = 32;

/// Whether the decode kernel with the fused norm prologue (`ternary_gemv_dec_norm.wgsl`) takes a
/// norm-fused GEMV of `w` with activations `a`: the decode kernel takes the weight, the
/// quantized row fits its workgroup memory and the group sums of its 32 rows do too. Else the
/// fused norm goes to the wide kernel.
pub fn dec_norm_fits(w: &TernaryWeight, a: &ActInt8, gemv: GemvKernel) -> bool {
    let wpr = ternary::words_per_row(w.layout, w.cols);
    dec_gemv_fits(w, wpr, gemv)
        && fused_norm_fits(w, a)
        && w.groups_per_row() * GEMV_DEC_NORM_ROWS_PER_WG <= 1024
}

/// `y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t` for every token of `a`
/// (GEMV for one token, GEMM for several); `y` is `[n_tokens][rows]` f32. `a` holds INT8 or INT4
/// activations (BitNet a4.8); the integer dot product is the context's ([`GpuContext::dot_kind`]).
/// The kernel is [`GemvKernel::Auto`]'s pick; [`ternary_gemv_fused`] takes another.
pub fn ternary_gemv(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
) -> Result<()> {
    ternary_gemv_fused(ctx, enc, w, a, None, Epilogue::Store, y, GemvKernel::Auto)
}

/// [`ternary_gemv`] with the decode fusions: with `norm`, the GEMV computes its activations itself
/// from `norm.x` (RMSNorm then `a`'s quantization: `a` gives the scheme, columns and stride, its
/// buffers are not read); `epi` says what it does with the result; `gemv` picks the kernel
/// ([`crate::GpuTuning::gemv`]).
#[allow(clippy::too_many_arguments)]
pub fn ternary_gemv_fused(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    norm: Option<NormPrologue<'_>>,
    epi: Epilogue,
    y: &wgpu::Buffer,
    gemv: GemvKernel,
) -> Result<()> {
    const OP: &str = "ternary_gemv";
    if u64::from(a.cols) != w.cols {
        return Err(GpuError::shape(
            OP,
            format!("activations have {} columns, the weight {}", a.cols, w.cols),
        ));
    }
    let epw = ternary::elems_per_word(w.layout);
    let wpr = ternary::words_per_row(w.layout, w.cols);
    if u64::from(a.stride) * act_per_word(a) < wpr * epw {
        return Err(GpuError::shape(
            OP,
            "activation stride shorter than a code row",
        ));
    }
    let nt = u64::from(a.n_tokens);
    // gate/up pairs with a GLU epilogue write one value per pair
    let out_rows = if w.pairs && epi.is_glu() {
        w.rows / 2
    } else {
        w.rows
    };
    let yb = nt * out_rows * 4;
    check_buffer(OP, "y", y, yb)?;
    check_binding(ctx, "ternary output", yb)?;
    let (xa, xf, pro, eps) = match norm {
        Some(n) => {
            if !fused_norm_fits(w, a) {
                return Err(GpuError::shape(
                    OP,
                    format!(
                        "a fused norm needs ≤ {GEMV_STAGED_ACT_WORDS} activation words, \
                         ≤ {GEMV_FUSED_NORM_MAX_COLS} columns and ≤ \
                         {TERNARY_WIDE_MAX_GROUPS_PER_ROW} scale groups per row, not {} / {} / {}",
                        a.stride,
                        a.cols,
                        w.groups_per_row()
                    ),
                ));
            }
            let xb = nt * w.cols * 4;
            check_buffer(OP, "x", n.x, xb)?;
            check_binding(ctx, "activations", xb)?;
            check_buffer(OP, "norm weight", n.weight, w.cols * 4)?;
            if n.topk && (a.act != ActBits::Int8 || !dec_norm_fits(w, a, gemv)) {
                return Err(GpuError::shape(
                    OP,
                    "a fused TopK prologue needs INT8 activations and the decode kernel's shape",
                ));
            }
            (n.x, n.weight, 1, n.eps)
        }
        None => {
            check_buffer(OP, "q", &a.q, nt * u64::from(a.stride) * 4)?;
            check_buffer(OP, "s", &a.s, nt * 4)?;
            (&a.q, &a.s, 0, 0.0)
        }
    };
    let topk = norm.is_some_and(|n| n.topk);
    let vec_rows = if wpr % 4 == 0 { 1 << 4 } else { 0 };
    let (layout, scale_type, act, dot) = (w.layout, w.scale_type, a.act, ctx.dot_kind());
    // A fused norm: the decode kernel's fused variant where the shape fits, else the wide kernel.
    // Without: the decode kernel where the shape fits, else the plain one (the wide kernel
    // measured slower end to end on the H100: docs/measurements.md, issue 15).
    let dec_norm = pro == 1 && dec_norm_fits(w, a, gemv);
    let key = if dec_norm {
        KernelKey::TernaryGemvDecNorm {
            scale_type,
            act,
            dot,
            topk,
        }
    } else if pro == 1 {
        KernelKey::TernaryGemvWide {
            layout,
            scale_type,
            act,
            dot,
        }
    } else if dec_gemv_fits(w, wpr, gemv) {
        KernelKey::TernaryGemvDec {
            scale_type,
            act,
            dot,
        }
    } else {
        KernelKey::TernaryGemv {
            layout,
            scale_type,
            act,
            dot,
        }
    };
    for part in &w.parts {
        let mut p = ternary_params(OP, w, part, a, wpr)?;
        p.mode = pro | (epi.mode() << 2) | vec_rows | pair_bit(w);
        p.eps = eps;
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let rpw = if dec_norm {
            GEMV_DEC_NORM_ROWS_PER_WG
        } else {
            GEMV_ROWS_PER_WG
        };
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(rpw))?;
        ctx.dispatch(
            enc,
            key,
            &[&params, &part.buffer, xa, xf, y],
            (gx, a.n_tokens, 1),
        )?;
    }
    Ok(())
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` with f32 activations `x` = `[n_tokens][cols]`.
pub fn float_gemv(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &FloatWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    const OP: &str = "float_gemv";
    let xb = n_tokens.saturating_mul(w.cols).saturating_mul(4);
    let yb = n_tokens.saturating_mul(w.rows).saturating_mul(4);
    if x.size() < xb || y.size() < yb {
        return Err(GpuError::shape(OP, "x or y too small"));
    }
    if xb > ctx.binding_limit() || yb > ctx.binding_limit() {
        return Err(GpuError::TooLarge {
            what: "float_gemv operand".into(),
            detail: format!(
                "{xb} / {yb} bytes, the binding limit is {}",
                ctx.binding_limit()
            ),
        });
    }
    let nt = u32_of(OP, "n_tokens", n_tokens)?;
    for part in &w.parts {
        let p = FloatParams {
            rows: u32_of(OP, "rows", part.rows)?,
            cols: u32_of(OP, "cols", w.cols)?,
            elem_offset: u32_of(OP, "elem_offset", part.elem_offset)?,
            out_stride: u32_of(OP, "rows", w.rows)?,
            row0: u32_of(OP, "row0", part.row0)?,
            n_tokens: nt,
            _pad0: 0,
            _pad1: 0,
        };
        let params = ctx.uniform(bytemuck::bytes_of(&p))?;
        let gx = u32_of(OP, "workgroups", part.rows.div_ceil(8))?;
        ctx.dispatch(
            enc,
            KernelKey::FloatGemv(w.dtype),
            &[&params, &part.buffer, x, y],
            (gx, nt, 1),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Embedding lookup

/// `y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t` for every token of `a`, by
/// tiles of [`GemmTile::choose`] under `pick` ([`crate::GpuTuning::gemm_tile`]); `y` is
/// `[n_tokens][rows]` f32. Bit-exact with [`ternary_gemv`].
pub fn ternary_gemm(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
    pick: GemmTileChoice,
) -> Result<()> {
    let tile = GemmTile::choose(w, u64::from(a.n_tokens), pick, ctx.coop_matrix());
    ternary_gemm_tiled(ctx, enc, w, a, y, tile)
}

/// [`ternary_gemm`] with the tile given (an error for [`GemmTile::Wide`] on base3 weights and for
/// [`GemmTile::Tall`] where [`GemmTile::tall_fits`] says no).
pub fn ternary_gemm_tiled(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
    tile: GemmTile,
) -> Result<()> {
    const OP: &str = "ternary_gemm";
    if tile == GemmTile::Wide && w.layout != tern_format::TernaryLayout::Bits2 {
        return Err(GpuError::invalid(
            OP,
            "the 64 × 64 tile takes 2bit weights only",
        ));
    }
    if tile == GemmTile::Coop && !(ctx.coop_matrix() && GemmTile::coop_fits(w)) {
        return Err(GpuError::invalid(
            OP,
            "the cooperative-matrix tile needs a device with cooperative matrices and 2bit \
             weights with one scale group or groups of a multiple of 32 columns",
        ));
    }
    if tile == GemmTile::Coop {
        ctx.note_coop_prefill();
    }
    let tall = matches!(tile, GemmTile::Tall | GemmTile::TallHalf);
    if tall && !GemmTile::tall_fits(w) {
        return Err(GpuError::invalid(
            OP,
            "the 4 × 8 micro-tiles take 2bit weights with one scale group or groups of a multiple of 64 columns",
        ));
    }
    if u64::from(a.cols) != w.cols {
        return Err(GpuError::shape(
            OP,
            format!("activations have {} columns, the weight {}", a.cols, w.cols),
        ));
    }
    let epw = ternary::elems_per_word(w.layout);
    let wpr = ternary::words_per_row(w.layout, w.cols);
    let stride = u64::from(a.stride);
    let apw = act_per_word(a);
    if stride * apw < wpr * epw || stride % 4 != 0 {
        return Err(GpuError::shape(
            OP,
            format!(
                "activation stride {stride} words: needs ≥ {} and a multiple of 4",
                (wpr * epw).div_ceil(apw)
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
        act: a.act,
        dot: ctx.dot_kind(),
        tile,
        grouped: (tall || tile == GemmTile::Coop) && w.group != 0,
    };
    let gy = u32_of(OP, "token tiles", n_tokens.div_ceil(tile.tokens()))?;
    for part in &w.parts {
        let mut p = ternary_params(OP, w, part, a, wpr)?;
        p.mode = pair_bit(w);
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

/// [`ternary_gemv`] below [`GEMM_MIN_TOKENS`] tokens, [`ternary_gemm`] from there on (the
/// two are bit-identical, so the choice never shows in the result), with the GEMV kernel and
/// GEMM tile picked as `gemv` and `tile` say ([`crate::GpuTuning`]'s `gemv` and `gemm_tile`).
pub fn ternary_matmul(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &TernaryWeight,
    a: &ActInt8,
    y: &wgpu::Buffer,
    (gemv, tile): (GemvKernel, GemmTileChoice),
) -> Result<()> {
    if u64::from(a.n_tokens) < GEMM_MIN_TOKENS {
        ternary_gemv_fused(ctx, enc, w, a, None, Epilogue::Store, y, gemv)
    } else {
        ternary_gemm(ctx, enc, w, a, y, tile)
    }
}

/// The float GEMV (one path for any token count: float matrices are lm heads and decoded NeuZip
/// tensors, read once per token either way).
pub fn float_matmul(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    w: &FloatWeight,
    x: &wgpu::Buffer,
    n_tokens: u64,
    y: &wgpu::Buffer,
) -> Result<()> {
    float_gemv(ctx, enc, w, x, n_tokens, y)
}
