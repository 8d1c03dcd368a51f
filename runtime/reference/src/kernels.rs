//! Float kernels, one plain function per op: [`rmsnorm`], [`rope`], [`softmax`], [`attention`],
//! [`swiglu`], [`relu2_glu`], [`dot_f32`].
//!
//! Every kernel checks its slice lengths first and returns [`ReferenceError::Shape`] on a mismatch;
//! loops then walk slices with iterators, so nothing can index out of bounds. Accumulation is f32
//! unless stated otherwise. These are the oracles the GPU kernels are compared against: keep them
//! obvious.

use crate::error::{check_len, ReferenceError, Result};

/// Dot product with f32 accumulation.
///
/// Summation order: 8 interleaved partial sums (lane `j % 8`), added pairwise at the end, then the
/// tail. This order lets the compiler vectorize the loop; it is part of the definition, so results
/// are the same on every machine.
#[inline(always)]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        // fixed-size views so the compiler keeps the 8 lanes in one vector register
        let (Ok(x), Ok(y)) = (<&[f32; 8]>::try_from(x), <&[f32; 8]>::try_from(y)) else {
            continue;
        };
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    // opaque to the optimizer: otherwise it splits the lanes to match the final adds below and
    // the loop runs on shuffled half-vectors (measured 2× slower); the arithmetic is unchanged
    let acc = std::hint::black_box(acc);
    let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (&x, &y) in ta.iter().zip(tb) {
        sum += x * y;
    }
    sum
}

/// RMSNorm over rows of `weight.len()` elements: `out = x / sqrt(mean(x²) + eps) * weight`.
///
/// `x` and `out` hold any whole number of rows. The mean of squares is accumulated in f32.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) -> Result<()> {
    let n = weight.len();
    if n == 0 || x.len() % n != 0 {
        return Err(ReferenceError::shape(
            "rmsnorm",
            format!("input of {} elements is not whole rows of {n}", x.len()),
        ));
    }
    check_len("rmsnorm", "out", out.len(), x.len())?;
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let ss: f32 = xr.iter().map(|v| v * v).sum();
        let scale = 1.0 / (ss / n as f32 + eps).sqrt();
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = v * scale * w;
        }
    }
    Ok(())
}

/// Rotary position embedding, in place, for one token: `x` holds `n_heads` heads of `head_dim`.
///
/// The first `rope_dim` dimensions of each head are rotated; dimension pair `i` (i < rope_dim/2)
/// turns by the angle `pos · theta^(-2i/rope_dim)`:
/// * `neox == false` (GPT-J / llama.cpp "normal"): the pair is `(2i, 2i+1)`;
/// * `neox == true` (GPT-NeoX, HF `rotate_half`): the pair is `(i, i + rope_dim/2)`.
///
/// `(a, b) → (a·cos − b·sin, a·sin + b·cos)`. Angles, cos and sin are computed in f64 and rounded
/// to f32, so the oracle carries no angle drift at long positions.
pub fn rope(
    x: &mut [f32],
    n_heads: usize,
    head_dim: usize,
    rope_dim: usize,
    pos: usize,
    theta: f32,
    neox: bool,
) -> Result<()> {
    rope_ext(x, n_heads, head_dim, rope_dim, pos, theta, neox, 1.0, None)
}

/// [`rope`] with frequency scaling: pair `i`'s angle is `pos · freq_scale · θ_i / factors[i]`
/// (`freq_scale` = 1 / the linear factor; `factors`: Llama 3's `rope_freqs.weight`, `rope_dim/2`
/// values), as `ggml_rope_cache_init` / `rope_yarn` (no YaRN ramp) scale it. With `1.0` and
/// `None` this is [`rope`] exactly (a division by 1 and a product with 1 are exact).
#[allow(clippy::too_many_arguments)]
pub fn rope_ext(
    x: &mut [f32],
    n_heads: usize,
    head_dim: usize,
    rope_dim: usize,
    pos: usize,
    theta: f32,
    neox: bool,
    freq_scale: f32,
    factors: Option<&[f32]>,
) -> Result<()> {
    check_len("rope", "x", x.len(), n_heads * head_dim)?;
    if rope_dim > head_dim || rope_dim % 2 != 0 {
        return Err(ReferenceError::shape(
            "rope",
            format!("rope_dim {rope_dim} must be even and ≤ head_dim {head_dim}"),
        ));
    }
    let half = rope_dim / 2;
    if half == 0 {
        return Ok(());
    }
    if let Some(f) = factors {
        check_len("rope", "frequency factors", f.len(), half)?;
    }
    let (cos, sin) = rope_cos_sin(half, rope_dim, pos, theta, freq_scale, factors);
    for head in x.chunks_exact_mut(head_dim) {
        let rot = &mut head[..rope_dim]; // ok: rope_dim ≤ head_dim checked above
        if neox {
            let (lo, hi) = rot.split_at_mut(half);
            for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(&cos).zip(&sin) {
                let (x0, x1) = (*a, *b);
                *a = x0 * c - x1 * s;
                *b = x0 * s + x1 * c;
            }
        } else {
            for ((pair, &c), &s) in rot.chunks_exact_mut(2).zip(&cos).zip(&sin) {
                let (x0, x1) = (pair[0], pair[1]); // ok: chunks of exactly 2
                pair[0] = x0 * c - x1 * s;
                pair[1] = x0 * s + x1 * c;
            }
        }
    }
    Ok(())
}

fn rope_cos_sin(
    half: usize,
    rope_dim: usize,
    pos: usize,
    theta: f32,
    freq_scale: f32,
    factors: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    (0..half)
        .map(|i| {
            let inv_freq = (theta as f64).powf(-2.0 * i as f64 / rope_dim as f64);
            let ff = factors.and_then(|f| f.get(i)).map_or(1.0, |&v| v as f64);
            let angle = pos as f64 * inv_freq / ff * freq_scale as f64;
            (angle.cos() as f32, angle.sin() as f32)
        })
        .unzip()
}

/// Llama 3.1's per-frequency RoPE divisors (HF `rope_type: "llama3"`), as llama.cpp's converter
/// computes `rope_freqs.weight` (`LlamaModel.generate_extra_tensors`): wavelengths shorter than
/// `original_context / high_freq_factor` keep their frequency, longer than
/// `original_context / low_freq_factor` are divided by `factor`, the band between is smoothed.
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

/// Softmax in place: subtract the max, exponentiate, divide by the f32 sum. An empty slice is left
/// as is; `-inf` entries become 0.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return;
    }
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Causal grouped-query attention for ONE query token over `n_kv` cached positions.
///
/// * `q`: `[n_head][head_dim]` (already rotated);
/// * `k`, `v`: the layer's cache, `[pos][n_head_kv][head_dim]`, at least `n_kv` positions;
/// * `out`: `[n_head][head_dim]`.
///
/// Query head `h` reads kv head `h / (n_head / n_head_kv)`. Scores are `q·k / sqrt(head_dim)`,
/// softmaxed over positions `0..n_kv` (the caller passes `n_kv = pos + 1`: that is the causal mask),
/// and `out = Σ_p softmax_p · v_p`, accumulated in f32 in position order.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_kv: usize,
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
    out: &mut [f32],
) -> Result<()> {
    if n_head_kv == 0 || n_head % n_head_kv != 0 {
        return Err(ReferenceError::shape(
            "attention",
            format!("n_head {n_head} is not a multiple of n_head_kv {n_head_kv}"),
        ));
    }
    check_len("attention", "q", q.len(), n_head * head_dim)?;
    check_len("attention", "out", out.len(), n_head * head_dim)?;
    let row = n_head_kv * head_dim;
    if k.len() < n_kv * row || v.len() < n_kv * row {
        return Err(ReferenceError::shape(
            "attention",
            format!("cache holds fewer than {n_kv} positions"),
        ));
    }
    let group = n_head / n_head_kv;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut scores = vec![0.0f32; n_kv];
    for (h, (qh, oh)) in q
        .chunks_exact(head_dim)
        .zip(out.chunks_exact_mut(head_dim))
        .enumerate()
    {
        let kvh = h / group;
        let off = kvh * head_dim;
        for (s, kp) in scores.iter_mut().zip(k.chunks_exact(row)) {
            *s = dot_f32(qh, &kp[off..off + head_dim]) * scale; // ok: off + head_dim ≤ row
        }
        softmax(&mut scores);
        oh.fill(0.0);
        for (&p, vp) in scores.iter().zip(v.chunks_exact(row)) {
            for (o, &vv) in oh.iter_mut().zip(&vp[off..off + head_dim]) {
                // ok: off + head_dim ≤ row
                *o += p * vv;
            }
        }
    }
    Ok(())
}

/// `silu(x) = x / (1 + e^-x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// SwiGLU: `out = silu(gate) ⊙ up`.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    check_len("swiglu", "up", up.len(), gate.len())?;
    check_len("swiglu", "out", out.len(), gate.len())?;
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
    Ok(())
}

/// Squared-ReLU GLU (BitNet b1.58 2B4T): `out = relu(gate)² ⊙ up`.
pub fn relu2_glu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    check_len("relu2_glu", "up", up.len(), gate.len())?;
    check_len("relu2_glu", "out", out.len(), gate.len())?;
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let r = g.max(0.0);
        *o = r * r * u;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn rmsnorm_hand_computed() {
        // x = [1, 2, 3, 4]: mean(x²) = 30/4 = 7.5; eps = 0.5 → 1/sqrt(8) = 0.35355339.
        let x = [1.0, 2.0, 3.0, 4.0, -2.0, 0.0, 0.0, 0.0];
        let w = [1.0, 1.0, 2.0, 0.5];
        let mut out = [0.0; 8];
        rmsnorm(&x, &w, 0.5, &mut out).unwrap();
        let s = 1.0 / 8.0f32.sqrt();
        let want = [s, 2.0 * s, 6.0 * s, 2.0 * s];
        for (o, w) in out[..4].iter().zip(want) {
            assert!(close(*o, w, 1e-6), "{o} vs {w}");
        }
        // second row: mean(x²) = 1, + 0.5 → 1/sqrt(1.5)
        assert!(close(out[4], -2.0 / 1.5f32.sqrt(), 1e-6));
        assert!(rmsnorm(&x[..7], &w, 0.5, &mut out[..7]).is_err());
    }

    #[test]
    fn rope_pairings_hand_computed() {
        // head_dim 4, theta 100: pair 0 angle = pos, pair 1 angle = pos / 10.
        let pos = 2;
        let (a0, a1) = (2.0f64, 0.2f64);
        let v = [1.0f32, 2.0, 3.0, 4.0];
        // normal: pairs (0,1), (2,3)
        let mut x = v;
        rope(&mut x, 1, 4, 4, pos, 100.0, false).unwrap();
        let rot = |a: f64, b: f64, t: f64| {
            (
                (a * t.cos() - b * t.sin()) as f32,
                (a * t.sin() + b * t.cos()) as f32,
            )
        };
        let (p0, p1) = rot(1.0, 2.0, a0);
        let (p2, p3) = rot(3.0, 4.0, a1);
        for (o, w) in x.iter().zip([p0, p1, p2, p3]) {
            assert!(close(*o, w, 1e-6), "normal {o} vs {w}");
        }
        // neox: pairs (0,2), (1,3)
        let mut x = v;
        rope(&mut x, 1, 4, 4, pos, 100.0, true).unwrap();
        let (n0, n2) = rot(1.0, 3.0, a0);
        let (n1, n3) = rot(2.0, 4.0, a1);
        for (o, w) in x.iter().zip([n0, n1, n2, n3]) {
            assert!(close(*o, w, 1e-6), "neox {o} vs {w}");
        }
        // position 0 is the identity; partial rotation leaves the tail alone
        let mut x = v;
        rope(&mut x, 1, 4, 4, 0, 100.0, true).unwrap();
        assert_eq!(x, v);
        let mut x = v;
        rope(&mut x, 1, 4, 2, 3, 100.0, false).unwrap();
        assert_eq!(&x[2..], &v[2..]);
        assert!(rope(&mut x, 1, 4, 3, 0, 100.0, false).is_err());
    }

    #[test]
    fn softmax_hand_computed() {
        let mut x = [0.0, 1.0f32.ln(), 2.0f32.ln(), f32::NEG_INFINITY];
        softmax(&mut x);
        // exp = [1, 1, 2, 0] / 4
        for (o, w) in x.iter().zip([0.25, 0.25, 0.5, 0.0]) {
            assert!(close(*o, w, 1e-6));
        }
    }

    /// GQA attention against a naive loop that materializes each head's K and V.
    #[test]
    fn gqa_attention_matches_naive() {
        let (n_head, n_head_kv, hd, n_kv) = (4, 2, 3, 5);
        let gen = |i: usize| ((i * 7919 % 97) as f32 / 97.0 - 0.5) * 2.0;
        let q: Vec<f32> = (0..n_head * hd).map(gen).collect();
        let k: Vec<f32> = (0..n_kv * n_head_kv * hd).map(|i| gen(i + 1000)).collect();
        let v: Vec<f32> = (0..n_kv * n_head_kv * hd).map(|i| gen(i + 2000)).collect();
        let mut out = vec![0.0; n_head * hd];
        attention(&q, &k, &v, n_kv, n_head, n_head_kv, hd, &mut out).unwrap();
        for h in 0..n_head {
            let kvh = h / (n_head / n_head_kv);
            let mut w: Vec<f64> = (0..n_kv)
                .map(|p| {
                    (0..hd)
                        .map(|d| (q[h * hd + d] * k[(p * n_head_kv + kvh) * hd + d]) as f64)
                        .sum::<f64>()
                        / (hd as f64).sqrt()
                })
                .collect();
            let m = w.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = w.iter().map(|x| (x - m).exp()).sum();
            w.iter_mut().for_each(|x| *x = (*x - m).exp() / s);
            for d in 0..hd {
                let want: f64 = (0..n_kv)
                    .map(|p| w[p] * v[(p * n_head_kv + kvh) * hd + d] as f64)
                    .sum();
                assert!(
                    close(out[h * hd + d], want as f32, 1e-5),
                    "h{h} d{d}: {} vs {want}",
                    out[h * hd + d]
                );
            }
        }
        // one position: output is exactly v of that position
        attention(&q, &k, &v, 1, n_head, n_head_kv, hd, &mut out).unwrap();
        assert_eq!(&out[..hd], &v[..hd]);
        assert!(attention(&q, &k[..10], &v, 5, n_head, n_head_kv, hd, &mut out).is_err());
    }

    #[test]
    fn glu_hand_computed() {
        let g = [-1.0, 0.0, 2.0];
        let u = [3.0, 3.0, 3.0];
        let mut o = [0.0; 3];
        relu2_glu(&g, &u, &mut o).unwrap();
        assert_eq!(o, [0.0, 0.0, 12.0]);
        swiglu(&g, &u, &mut o).unwrap();
        assert!(close(o[0], -1.0 / (1.0 + 1f32.exp()) * 3.0, 1e-6));
        assert_eq!(o[1], 0.0);
        assert!(close(o[2], 2.0 / (1.0 + (-2f32).exp()) * 3.0, 1e-6));
    }

    #[test]
    fn dot_f32_matches_f64() {
        for n in [0, 1, 7, 8, 9, 33] {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.25).collect();
            let want: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (*x as f64) * (*y as f64))
                .sum();
            assert!(close(dot_f32(&a, &b), want as f32, 1e-6));
        }
    }
}

/// GELU with the tanh approximation, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (Gemma's
/// `gelu_pytorch_tanh`; ggml's `ggml_gelu_f32`).
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// GeGLU: `out = gelu_tanh(gate) ⊙ up` (Gemma's gated FFN).
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    check_len("geglu", "up", up.len(), gate.len())?;
    check_len("geglu", "out", out.len(), gate.len())?;
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = gelu_tanh(g) * u;
    }
    Ok(())
}

/// Soft-capping in place: `x = cap · tanh(x / cap)` (Gemma 2's logits), as ggml's
/// `scale(1/cap) → tanh → scale(cap)`.
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = (*v * (1.0 / cap)).tanh() * cap;
    }
}

/// `x += b` for every row of `b.len()` elements (a projection's bias).
pub fn add_bias(x: &mut [f32], b: &[f32]) -> Result<()> {
    if b.is_empty() || x.len() % b.len() != 0 {
        return Err(ReferenceError::shape(
            "bias",
            "input is not whole rows of the bias",
        ));
    }
    for row in x.chunks_exact_mut(b.len()) {
        for (v, &bv) in row.iter_mut().zip(b) {
            *v += bv;
        }
    }
    Ok(())
}
