//! The kernels the model families beyond the llama baseline need (issue 31), each the GPU twin of
//! a `tern_reference` function:
//!
//! * [`bias_scale`] (`bias_scale.wgsl`) — the q/k/v projection biases of Qwen 2 / 2.5
//!   (`add_bias`) and Gemma's embedding scale (`x *= embed_scale`), in place, bit-exact;
//! * [`head_rmsnorm`] (`head_rmsnorm.wgsl`) — QK-norm (Qwen 3, Gemma 3): RMSNorm of each head of
//!   the queries and keys, in place, in planar rows or in the stacked `[n][q | k | v]` rows;
//! * [`RopeFreqs`] — a layer's RoPE frequencies (base, linear scaling, Llama 3's per-frequency
//!   divisors) as the host-computed cos/sin table that `rope.wgsl` / `rope_kv.wgsl` read:
//!   `rope_ext`'s angles (`pos · θ_i / factor_i · freq_scale`, in f64), so the same f32 cos/sin.
//!
//! GeGLU (Gemma's gated GELU-tanh) is `elementwise.wgsl`'s OP 3 ([`crate::kernels::elementwise`]
//! with [`EltOp::GeGlu`](crate::device::pipeline::EltOp)); the sliding window is a parameter of
//! the attention kernels ([`crate::kernels::attention`]).

use crate::device::check::{check_binding, check_buffer, groups_1d, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{BiasScaleParams, HeadRmsNormParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

/// `x[i] = x[i] · scale + bias[i % bias_len]` over `n` values in place (`bias` `None`: the product
/// alone; `scale` 1 with a bias: the add alone). `tern_reference::kernels::add_bias` row by row
/// (`bias` is one row of the rows `x` holds), or the embedding scale: bit-exact.
pub fn bias_scale(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    bias: Option<(&wgpu::Buffer, u64)>,
    scale: f32,
    n: u64,
) -> Result<()> {
    const OP: &str = "bias_scale";
    let bytes = n.saturating_mul(4);
    check_buffer(OP, "x", x, bytes)?;
    check_binding(ctx, "scaled rows", bytes)?;
    if n == 0 {
        return Ok(());
    }
    let dummy;
    let (b, len) = match bias {
        Some((b, len)) => {
            if len == 0 || !n.is_multiple_of(len) {
                return Err(GpuError::shape(
                    OP,
                    format!("{n} values are not whole rows of the bias ({len})"),
                ));
            }
            check_buffer(OP, "bias", b, len * 4)?;
            (b, len)
        }
        None => {
            dummy = ctx.zeroed("bias_scale (no bias)", 4)?;
            (&dummy, 0)
        }
    };
    let p = BiasScaleParams {
        n: u32_of(OP, "n", n)?,
        len: u32_of(OP, "bias length", len)?,
        scale,
        _pad: 0,
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    let groups = groups_1d(ctx, n.div_ceil(256));
    ctx.dispatch(enc, KernelKey::BiasScale, &[&params, x, b], groups)
}

/// Where the heads [`head_rmsnorm`] normalizes lie: `n_tokens` rows of `row_stride` words, the
/// `n_heads` heads of `head_dim` values of a row starting at word `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRows {
    pub head_dim: u64,
    pub n_heads: u64,
    pub n_tokens: u64,
    pub row_stride: u64,
    pub offset: u64,
}

impl HeadRows {
    /// Planar rows: `[n_tokens][n_heads · head_dim]`.
    pub fn planar(head_dim: u64, n_heads: u64, n_tokens: u64) -> Self {
        HeadRows {
            head_dim,
            n_heads,
            n_tokens,
            row_stride: n_heads.saturating_mul(head_dim),
            offset: 0,
        }
    }
}

/// QK-norm: each head of `rows` in `x` ← `RMSNorm(head; weight, eps)` (`weight`: `head_dim`
/// floats), in place (`tern_reference::kernels::rmsnorm` over rows of `head_dim`; its sum of
/// squares in rmsnorm.wgsl's tree order).
pub fn head_rmsnorm(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    x: &wgpu::Buffer,
    weight: &wgpu::Buffer,
    rows: HeadRows,
    eps: f32,
) -> Result<()> {
    const OP: &str = "head_rmsnorm";
    let HeadRows {
        head_dim,
        n_heads,
        n_tokens,
        row_stride,
        offset,
    } = rows;
    if head_dim == 0 {
        return Err(GpuError::shape(OP, "zero-length heads"));
    }
    let row_end = offset.saturating_add(n_heads.saturating_mul(head_dim));
    if row_end > row_stride {
        return Err(GpuError::shape(
            OP,
            format!(
                "{n_heads} heads of {head_dim} from word {offset} overrun rows of {row_stride}"
            ),
        ));
    }
    if n_heads == 0 || n_tokens == 0 {
        return Ok(());
    }
    let words = (n_tokens - 1)
        .saturating_mul(row_stride)
        .saturating_add(row_end);
    check_buffer(OP, "x", x, words.saturating_mul(4))?;
    check_binding(ctx, "normed heads", words.saturating_mul(4))?;
    check_buffer(OP, "weight", weight, head_dim * 4)?;
    let p = HeadRmsNormParams {
        head_dim: u32_of(OP, "head_dim", head_dim)?,
        n_heads: u32_of(OP, "n_heads", n_heads)?,
        n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
        row_stride: u32_of(OP, "row_stride", row_stride)?,
        offset: u32_of(OP, "offset", offset)?,
        eps,
        ..HeadRmsNormParams::default()
    };
    let params = ctx.uniform(bytemuck::bytes_of(&p))?;
    ctx.dispatch(
        enc,
        KernelKey::HeadRmsNorm,
        &[&params, x, weight],
        (p.n_heads, p.n_tokens, 1),
    )
}

/// A layer's RoPE frequencies: pair `i` of the first `dim` dimensions turns by
/// `pos · θ^(-2i/dim) / factors[i] · freq_scale` (`tern_reference::kernels::rope_ext`: linear
/// scaling is `freq_scale` = 1 / factor, Llama 3's scaling the divisors `factors`).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeFreqs {
    pub dim: u64,
    pub theta: f32,
    pub freq_scale: f32,
    /// `dim / 2` divisors (Llama 3's `rope_freqs.weight`), or none.
    pub factors: Option<Vec<f32>>,
}

impl RopeFreqs {
    /// Plain RoPE.
    pub fn plain(dim: u64, theta: f32) -> Self {
        RopeFreqs {
            dim,
            theta,
            freq_scale: 1.0,
            factors: None,
        }
    }

    /// The cos/sin table of `positions` (`[n][dim / 2]` pairs of f32): each angle computed in
    /// f64 as `rope_ext` computes it, cos and sin rounded to f32. With no scaling and no divisors
    /// this is [`crate::kernels::rope_table`] exactly (a division by 1 and a product with 1 are
    /// exact).
    pub fn table(&self, positions: &[u64]) -> Vec<u8> {
        let half = self.dim / 2;
        let mut cs = Vec::with_capacity((positions.len() as u64 * half * 8) as usize);
        for &pos in positions {
            for i in 0..half {
                let inv_freq = f64::from(self.theta).powf(-2.0 * i as f64 / self.dim as f64);
                let ff = self
                    .factors
                    .as_ref()
                    .and_then(|f| f.get(i as usize))
                    .map_or(1.0, |&v| f64::from(v));
                let angle = pos as f64 * inv_freq / ff * f64::from(self.freq_scale);
                cs.extend_from_slice(&(angle.cos() as f32).to_le_bytes());
                cs.extend_from_slice(&(angle.sin() as f32).to_le_bytes());
            }
        }
        cs
    }
}

/// Llama 3.1's per-frequency RoPE divisors from HF's `rope_scaling` (`rope_type: "llama3"`):
/// `tern_reference::kernels::llama3_rope_factors`, the same f32 arithmetic (llama.cpp's converter
/// writes them as `rope_freqs.weight`).
pub fn llama3_rope_factors(
    theta: f32,
    rope_dim: usize,
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    original_context: u32,
) -> Vec<f32> {
    let old = original_context as f32;
    let (low_wl, high_wl) = (old / low_freq_factor, old / high_freq_factor);
    (0..rope_dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf((2 * i) as f32 / rope_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_wl {
                1.0
            } else if wavelen > low_wl {
                factor
            } else {
                let smooth =
                    (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}
