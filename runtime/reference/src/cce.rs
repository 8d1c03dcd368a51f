//! Fused Cut-Cross-Entropy scoring: `log p(target)` per position without an `[n, n_vocab]` logit
//! matrix (Wijmans et al., "Cut Your Losses in Large-Vocabulary Language Models", arXiv 2411.09009).
//!
//! For final hidden states `h_i` (after the output norm) and targets `y_i`:
//!
//! ```text
//! z_i,v  = W_v · h_i                        the head row v (output, or tok_embd when tied)
//! lse_i  = log Σ_v exp(z_i,v)
//! lp_i   = z_i,y_i − lse_i                  = log softmax(z_i)[y_i]
//! ```
//!
//! **Blocking.** Positions go in blocks of [`CceOptions::position_block`]; for each block the
//! activations are prepared once ([`Matrix::prepare_acts`]: exactly what [`Matrix::matmul`] does, so
//! a float head, ggml blocks with f32 or llama.cpp-style Q8 activations, or ternary rows give the
//! same logits as [`crate::Model::logits`], bit for bit). The vocabulary is cut into blocks of
//! [`CceOptions::vocab_block`] rows; each vocab block computes its `[rows][positions]` logit tile
//! ([`Matrix::row_tile`], which decodes one head row at a time: the head is never decoded whole)
//! and reduces it at once to a partial per position: the tile maximum `m_j`, `s_j = Σ exp(z − m_j)`
//! (f32 `exp`, f64 sum) and the target's logit when the target falls in the block.
//!
//! **Combining without atomics.** The vocab blocks of one position block run in parallel (rayon,
//! feature `parallel`), each on its own thread with its own tile; their partials are collected in
//! block order and merged sequentially: `M = max_j m_j`, `S = Σ_j s_j · exp(m_j − M)` in `j` order,
//! `lse = M + ln S`. Every partial is computed by the same sequential code and the merge order is
//! fixed, so the result is bit-identical whatever the thread count.
//!
//! **Memory.** Per position block: the prepared activations (`position_block × n_embd` floats), one
//! tile of `vocab_block × position_block` floats per running thread, and `ceil(V / vocab_block)`
//! partials per position (24 bytes each). Nothing grows with `n × n_vocab`.

use crate::error::{check_len, ReferenceError, Result};
use crate::matmul::{MatmulOptions, Matrix};
use crate::model::{ForwardOptions, Model};
use crate::par_map;
use tern_format::ActQuant;

/// Block sizes of the fused scorer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CceOptions {
    /// Positions scored together (activations prepared once, each head row decoded once per block).
    pub position_block: usize,
    /// Head rows per logit tile.
    pub vocab_block: usize,
}

impl Default for CceOptions {
    fn default() -> Self {
        Self {
            position_block: 128,
            vocab_block: 512,
        }
    }
}

/// One vocab block's summary of its positions' logits (per position: the block's largest logit,
/// `Σ exp(z − max)` over the block, and the target's logit when the target is in the block).
struct Partial {
    max: Vec<f32>,
    sum: Vec<f64>,
    target: Vec<Option<f32>>,
}

/// `log softmax(W·h_i)[targets[i]]` for every position `i`, with `head` `[n_vocab, n_embd]` and
/// `hidden` `[n, n_embd]`; the head takes float activations (`ActQuant::None`) with `mm`'s
/// ggml-activation mode, as [`crate::Model::logits`] does. `mm.parallel` spreads the vocab blocks
/// over threads; the result does not depend on it.
///
/// A position whose logits are not all finite gets a non-finite result (NaN or ±∞).
pub fn log_probs(
    head: &Matrix,
    hidden: &[f32],
    targets: &[u32],
    mm: &MatmulOptions,
    opts: &CceOptions,
) -> Result<Vec<f32>> {
    let d = head.cols;
    if d == 0 || head.rows == 0 {
        return Err(ReferenceError::shape(
            "cce::log_probs",
            format!("head is {} × {}", head.rows, head.cols),
        ));
    }
    check_len("cce::log_probs", "hidden", hidden.len(), targets.len() * d)?;
    if let Some(&bad) = targets.iter().find(|&&t| t as usize >= head.rows) {
        return Err(ReferenceError::TokenOutOfRange {
            token: bad,
            n_vocab: u32::try_from(head.rows).unwrap_or(u32::MAX),
        });
    }
    let pb = opts.position_block.max(1);
    let vb = opts.vocab_block.max(1);
    let n_vblocks = head.rows.div_ceil(vb);
    let mut out = Vec::with_capacity(targets.len());
    for (h_blk, t_blk) in hidden.chunks(pb * d).zip(targets.chunks(pb)) {
        let acts = head.prepare_acts(h_blk, ActQuant::None, mm)?;
        let np = t_blk.len();
        let partials: Vec<Result<Partial>> = par_map(n_vblocks, mm.parallel, |j| {
            let r0 = j * vb;
            let r1 = (r0 + vb).min(head.rows);
            let mut tile = vec![0.0f32; (r1 - r0) * np];
            head.row_tile(r0, r1, &acts, &mut tile)?;
            Ok(reduce_tile(&tile, r0, r1, t_blk))
        });
        // Merge in vocab-block order (fixed, whatever the thread count).
        let mut m_acc = vec![f32::NEG_INFINITY; np];
        let mut s_acc = vec![0.0f64; np];
        let mut z_acc = vec![f32::NAN; np];
        for (j, p) in partials.into_iter().enumerate() {
            let p = p?;
            for i in 0..np {
                let (pm, ps) = (
                    p.max.get(i).copied().unwrap_or(f32::NAN),
                    p.sum.get(i).copied().unwrap_or(f64::NAN),
                );
                let (am, as_) = (m_acc.get(i).copied(), s_acc.get(i).copied());
                let (Some(am), Some(as_)) = (am, as_) else {
                    continue;
                };
                let (m, s) = if j == 0 {
                    (pm, ps)
                } else {
                    // NaN-propagating max: a NaN anywhere makes the result NaN.
                    let m = if pm.is_nan() || am.is_nan() {
                        f32::NAN
                    } else {
                        am.max(pm)
                    };
                    let s = as_ * ((am - m) as f64).exp() + ps * ((pm - m) as f64).exp();
                    (m, s)
                };
                if let (Some(dm), Some(ds)) = (m_acc.get_mut(i), s_acc.get_mut(i)) {
                    (*dm, *ds) = (m, s);
                }
                if let (Some(Some(z)), Some(dz)) = (p.target.get(i), z_acc.get_mut(i)) {
                    *dz = *z;
                }
            }
        }
        out.extend(
            m_acc
                .iter()
                .zip(&s_acc)
                .zip(&z_acc)
                .map(|((&m, &s), &z)| (z as f64 - (m as f64 + s.ln())) as f32),
        );
    }
    Ok(out)
}

/// Reduce a `[r1 - r0][np]` logit tile (rows `r0..r1` of the head) to one partial per position.
fn reduce_tile(tile: &[f32], r0: usize, r1: usize, targets: &[u32]) -> Partial {
    let np = targets.len();
    let mut max = vec![f32::NEG_INFINITY; np];
    let mut sum = vec![0.0f64; np];
    let target = targets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let t = t as usize;
            if (r0..r1).contains(&t) {
                tile.get((t - r0) * np + i).copied()
            } else {
                None
            }
        })
        .collect();
    if np == 0 {
        return Partial { max, sum, target };
    }
    // Two passes (max, then sum of exponentials) over the cache-resident tile.
    for row in tile.chunks_exact(np) {
        for (m, &z) in max.iter_mut().zip(row) {
            if z > *m || z.is_nan() {
                *m = z;
            }
        }
    }
    for row in tile.chunks_exact(np) {
        for ((s, &m), &z) in sum.iter_mut().zip(&max).zip(row) {
            *s += (z - m).exp() as f64;
        }
    }
    Partial { max, sum, target }
}

/// The plain materialized reference: `log softmax(logits_i)[targets[i]]` from a full `[n, n_vocab]`
/// logit matrix (e.g. [`crate::Model::logits`]), computed in f64 (max-shifted).
pub fn materialized_log_probs(logits: &[f32], n_vocab: usize, targets: &[u32]) -> Result<Vec<f32>> {
    check_len(
        "materialized_log_probs",
        "logits",
        logits.len(),
        targets.len() * n_vocab,
    )?;
    if n_vocab == 0 {
        return Err(ReferenceError::shape(
            "materialized_log_probs",
            "n_vocab is 0",
        ));
    }
    targets
        .iter()
        .zip(logits.chunks_exact(n_vocab))
        .map(|(&t, row)| {
            let z = *row.get(t as usize).ok_or(ReferenceError::TokenOutOfRange {
                token: t,
                n_vocab: u32::try_from(n_vocab).unwrap_or(u32::MAX),
            })? as f64;
            let m = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
            let s: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
            Ok((z - m - s.ln()) as f32)
        })
        .collect()
}

impl Model {
    /// `log p(targets[i] | position i)` for final hidden states `[n, n_embd]` (the output of
    /// [`Model::forward_hidden`]), fused over vocab blocks ([`log_probs`] with default blocks): the
    /// head sees the same float activations as in [`Model::logits`], so the result equals
    /// [`Model::score_hidden_materialized`] up to the log-sum-exp's rounding.
    pub fn score_hidden(&self, hidden: &[f32], targets: &[u32]) -> Result<Vec<f32>> {
        self.score_hidden_with(hidden, targets, &CceOptions::default())
    }

    /// [`Model::score_hidden`] with explicit block sizes.
    pub fn score_hidden_with(
        &self,
        hidden: &[f32],
        targets: &[u32],
        opts: &CceOptions,
    ) -> Result<Vec<f32>> {
        self.score_hidden_opts(&self.options(), hidden, targets, opts)
    }

    /// [`Model::score_hidden_with`] with the forward options `fwd` instead of the model's own.
    pub fn score_hidden_opts(
        &self,
        fwd: &ForwardOptions,
        hidden: &[f32],
        targets: &[u32],
        opts: &CceOptions,
    ) -> Result<Vec<f32>> {
        log_probs(self.head(), hidden, targets, &fwd.matmul, opts)
    }

    /// The plain reference for [`Model::score_hidden`]: all logits ([`Model::logits`], `n ×
    /// n_vocab` floats), then a log-softmax in f64.
    pub fn score_hidden_materialized(&self, hidden: &[f32], targets: &[u32]) -> Result<Vec<f32>> {
        check_len(
            "score_hidden_materialized",
            "hidden",
            hidden.len(),
            targets.len() * self.head().cols,
        )?;
        let logits = self.logits(hidden)?;
        materialized_log_probs(&logits, self.head().rows, targets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::{GgmlActivations, WeightData};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    fn check(head: &Matrix, n: usize, mm: MatmulOptions, seed: u64) {
        let mut rng = Rng(seed);
        let d = head.cols;
        let hidden: Vec<f32> = (0..n * d).map(|_| rng.next() * 2.0).collect();
        let targets: Vec<u32> = (0..n)
            .map(|i| ((i * 7919 + seed as usize) % head.rows) as u32)
            .collect();
        let mut logits = vec![0.0; n * head.rows];
        head.matmul(&hidden, ActQuant::None, &mm, &mut logits)
            .unwrap();
        let want = materialized_log_probs(&logits, head.rows, &targets).unwrap();
        let mut last: Option<Vec<f32>> = None;
        for (pb, vb) in [(1, 1), (3, 7), (128, 512), (5, 1000), (64, 33)] {
            for parallel in [false, true] {
                let mm = MatmulOptions { parallel, ..mm };
                let opts = CceOptions {
                    position_block: pb,
                    vocab_block: vb,
                };
                let got = log_probs(head, &hidden, &targets, &mm, &opts).unwrap();
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5, "{g} vs {w} (pb {pb}, vb {vb})");
                }
                // Bit-reproducible across thread counts (same blocking).
                if parallel {
                    let prev = last.take().unwrap();
                    assert_eq!(
                        prev.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                    );
                } else {
                    last = Some(got);
                }
            }
        }
    }

    fn q8_0_bytes(v: &[f32]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in v.chunks_exact(32) {
            let amax = b.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend(half::f16::from_f32(d).to_le_bytes());
            out.extend(b.iter().map(|x| (x * id).round() as i8 as u8));
        }
        out
    }

    fn q4_1_bytes(v: &[f32]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in v.chunks_exact(32) {
            let min = b.iter().cloned().fold(f32::MAX, f32::min);
            let max = b.iter().cloned().fold(f32::MIN, f32::max);
            let d = (max - min) / 15.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend(half::f16::from_f32(d).to_le_bytes());
            out.extend(half::f16::from_f32(min).to_le_bytes());
            for j in 0..16 {
                let q0 = (((b[j] - min) * id + 0.5) as u8).min(15);
                let q1 = (((b[j + 16] - min) * id + 0.5) as u8).min(15);
                out.push(q0 | (q1 << 4));
            }
        }
        out
    }

    #[test]
    fn every_encoding_matches_materialized_softmax() {
        let (rows, cols) = (1037, 64); // odd vocab: not a multiple of any block size used
        let mut rng = Rng(5);
        let w: Vec<f32> = (0..rows * cols).map(|_| rng.next() * 0.5).collect();
        let f32m = Matrix::from_f32(rows, cols, w.clone()).unwrap();
        let q8 = Matrix::from_encoded(
            "h",
            rows,
            cols,
            &tern_format::Encoding::Q8_0,
            &q8_0_bytes(&w),
        )
        .unwrap();
        let q41 = Matrix::from_encoded(
            "h",
            rows,
            cols,
            &tern_format::Encoding::Q4_1,
            &q4_1_bytes(&w),
        )
        .unwrap();
        let trits: Vec<f32> = w
            .iter()
            .map(|&x| {
                if x > 0.15 {
                    0.3
                } else if x < -0.15 {
                    -0.3
                } else {
                    0.0
                }
            })
            .collect();
        let tern = Matrix {
            rows,
            cols,
            data: WeightData::Ternary(
                crate::matmul::ternary_from_values("h", rows, cols, 0, &trits).unwrap(),
            ),
        };
        let llama = MatmulOptions {
            ggml_activations: GgmlActivations::LlamaCpp,
            parallel: true,
        };
        for (i, m) in [&f32m, &q8, &q41, &tern].into_iter().enumerate() {
            check(m, 13, MatmulOptions::default(), i as u64);
            check(m, 130, MatmulOptions::default(), 10 + i as u64);
            check(m, 13, llama, 20 + i as u64);
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let m = Matrix::from_f32(10, 4, vec![0.5; 40]).unwrap();
        let mm = MatmulOptions::default();
        let o = CceOptions::default();
        assert!(log_probs(&m, &[0.0; 8], &[1, 10], &mm, &o).is_err());
        assert!(log_probs(&m, &[0.0; 7], &[1, 2], &mm, &o).is_err());
        assert_eq!(log_probs(&m, &[], &[], &mm, &o).unwrap(), Vec::<f32>::new());
        // uniform logits: log(1/10)
        let lp = log_probs(&m, &[1.0; 4], &[3], &mm, &o).unwrap();
        assert!((lp[0] + 10f32.ln()).abs() < 1e-6);
    }
}
