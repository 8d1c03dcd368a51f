//! Sampling from what the GPU leaves of a row of logits ([`Candidates`]: the top-K of the
//! logits that are not repetition-penalized, the raw logits of the penalized tokens, and the
//! max and Σ exp((x − max)/T) of the non-penalized ones), with the same result as
//! [`Sampler::sample`] on the full row for the same seed, or a request for the full row.
//!
//! The penalized tokens' logits come back raw and are penalized here with the CPU's f32
//! operations, then merged with the top-K. Every token outside the merged set is a
//! non-penalized token ranked after all K of the top-K (the GPU ranks by value descending,
//! lower id first, as the CPU; −0 and +0 tie there but not in the CPU's `total_cmp`, so a
//! K-th value of ±0 is sent to the full row), so the first K of the merged set, sorted as the
//! CPU sorts, are the CPU's first K: the *exact prefix*.
//!
//! * Greedy (temperature 0, penalty on): the first of the merged set.
//! * The CPU's list after top-k lies inside the exact prefix (top-k in 1..=K, or the row has
//!   fewer than K non-penalized logits): the CPU's own code runs on it — bit-identical.
//! * Otherwise (top-k off or above K: the softmax's sum runs over logits the host does not have)
//!   the decision is certified with intervals: the sum of the tail lies in
//!   [S·(1 − η) − A, S·(1 + η) − A] (S from the GPU's sum, η = 1e-4 bounds its error, ~100× what
//!   the parity harness sees; A the prefix's part); top-p's cut, min-p's cut and the draw
//!   `u · total` are evaluated at both ends with a slack for the CPU's f32 roundings
//!   (`u` drawn from the same RNG, once, as the CPU draws it). If every decision is the same at
//!   both ends and falls inside the prefix, that token is the CPU's; if not (the cut or the
//!   draw lands in the tail, or within the slack of a boundary) the caller reads the full row
//!   and runs [`Sampler::sample_with`] with the same `u`: [`Draw::Full`].

use super::{sorted_order, Sampler};

/// Relative error bound of the GPU's Σ exp((x − max)/T) (f32, per-workgroup then merged).
const ETA: f64 = 1e-4;
/// Slack for the CPU's f32 roundings over at most a few hundred terms (in units of the total).
const SLACK: f64 = 1e-5;

/// What the GPU left of a row of logits (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidates {
    /// Non-penalized, non-NaN logits: the top `k`, sorted (value desc, id asc, ±0 equal).
    pub top: Vec<(u32, f32)>,
    /// How many the GPU keeps (`top` has fewer only when the row has fewer).
    pub k: usize,
    /// Max and Σ exp((x − max)/T) over every non-penalized, non-NaN logit.
    pub max: f32,
    pub sum: f32,
    /// Raw logits of the penalized tokens (NaN: outside the vocabulary).
    pub hist: Vec<(u32, f32)>,
    /// Logits in the row.
    pub n_vocab: usize,
}

/// The outcome of [`Sampler::sample_candidates`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Draw {
    /// The token the CPU sampler picks on the full row.
    Token(u32),
    /// The full row is needed: run [`Sampler::sample_with`] with this draw (`None`: nothing was
    /// drawn yet).
    Full(Option<f32>),
}

impl Sampler {
    /// The distinct tokens whose logits the repetition penalty changes (none when it is off), in
    /// first-seen order: what the GPU sets aside.
    pub(crate) fn penalized_tokens(&self, history: &[u32]) -> Vec<u32> {
        if !self.penalizes() {
            return Vec::new();
        }
        let start = history.len().saturating_sub(self.params.repeat_last_n);
        let mut out: Vec<u32> = Vec::new();
        for &t in history.get(start..).unwrap_or_default() {
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// The token [`Sampler::sample`] would pick on the full row `c` came from, or
    /// [`Draw::Full`] (see the module doc).
    pub(crate) fn sample_candidates(&mut self, c: &Candidates) -> Draw {
        let mut merged: Vec<(u32, f32)> = c.top.clone();
        merged.extend(
            c.hist
                .iter()
                .filter(|h| !h.1.is_nan())
                .map(|&(id, v)| (id, self.penalize(v))),
        );
        let complete = c.top.len() < c.k;
        let all_finite = merged.iter().all(|m| m.1.is_finite()) && c.max.is_finite();
        let zero_edge = !complete && c.top.last().is_some_and(|t| t.1 == 0.0);
        if merged.is_empty() || !all_finite || zero_edge {
            return Draw::Full(None);
        }
        let (temperature, top_k) = (self.params.temperature, self.params.top_k);
        if temperature == 0.0 {
            // argmax, lowest id on ties (±0 equal, as `argmax` compares with `>`).
            let best = merged.iter().fold(None::<(u32, f32)>, |b, &m| match b {
                Some(b) if !(m.1 > b.1 || (m.1 == b.1 && m.0 < b.0)) => Some(b),
                _ => Some(m),
            });
            return best.map_or(Draw::Full(None), |b| Draw::Token(b.0));
        }
        merged.sort_by(sorted_order);
        let prefix = if complete {
            merged.len()
        } else {
            c.k.min(merged.len())
        };
        merged.truncate(prefix);
        let u = self.rng_draw();
        if complete || (top_k > 0 && top_k <= prefix) {
            self.cand = merged;
            return Draw::Token(self.finish(Some(u)));
        }
        match self.certify(&merged, c, u) {
            Some(t) => Draw::Token(t),
            None => Draw::Full(Some(u)),
        }
    }

    fn rng_draw(&mut self) -> f32 {
        use rand::Rng;
        self.rng.random::<f32>()
    }

    /// The certified pick over the exact prefix `pre` (sorted, non-empty) when the CPU's list
    /// runs past it (see the module doc); `None` when undecided.
    fn certify(&self, pre: &[(u32, f32)], c: &Candidates, u: f32) -> Option<u32> {
        let p = &self.params;
        let t = p.temperature;
        let m = pre.first()?.1;
        // e_i exactly as the CPU computes them.
        let e: Vec<f64> = pre.iter().map(|x| (((x.1 - m) / t) as f64).exp()).collect();
        let a: f64 = e.iter().sum();
        // Σ over every token: non-penalized from the GPU, penalized exactly.
        let hist_sum: f64 = c
            .hist
            .iter()
            .filter(|h| !h.1.is_nan())
            .map(|h| (((self.penalize(h.1) - m) / t) as f64).exp())
            .sum();
        let gpu = f64::from(c.sum) * ((f64::from(c.max) - f64::from(m)) / f64::from(t)).exp();
        if !gpu.is_finite() {
            return None;
        }
        let all_hi = gpu * (1.0 + ETA) + hist_sum;
        let all_lo = gpu * (1.0 - ETA) + hist_sum;
        let tail_hi = (all_hi - a).max(0.0);
        // With top-k above the prefix only part of the tail is in the sum: its lower bound is 0.
        let tail_lo = if p.top_k == 0 {
            (all_lo - a).max(0.0)
        } else {
            0.0
        };
        let (sum_lo, sum_hi) = (a + tail_lo, a + tail_hi);
        // top-p: the first i with Σ_{j≤i} p_j ≥ top_p, the same at both ends of the sum.
        let mut kept = None;
        if p.top_p < 1.0 {
            let tp = f64::from(p.top_p);
            let mut cum = 0.0;
            for (i, ei) in e.iter().enumerate() {
                cum += ei;
                // f32 probabilities summed in f32: absolute errors of a few ulps of 1.
                let (lo, hi) = (cum / sum_hi - SLACK, cum / sum_lo + SLACK);
                if lo >= tp {
                    kept = Some(i + 1);
                    break;
                }
                if hi >= tp {
                    return None; // the cut is within the slack here
                }
            }
            kept?; // the cut is in the tail
        }
        // min-p: p_i ≥ p_1·min_p ⇔ e_i ≥ e_1·min_p (the sum cancels).
        if p.min_p > 0.0 {
            let thr = e.first()? * f64::from(p.min_p);
            let upto = kept.unwrap_or(e.len());
            let mut stop = None;
            for (i, ei) in e.iter().enumerate().take(upto).skip(1) {
                if *ei < thr * (1.0 - SLACK) {
                    stop = Some(i);
                    break;
                }
                if *ei < thr * (1.0 + SLACK) {
                    return None;
                }
            }
            match (stop, kept) {
                (Some(s), _) => kept = Some(s),
                (None, Some(_)) => {}
                (None, None) => return None, // min-p's cut is in the tail
            }
        }
        // The draw: the first i with u·Σ_kept e ≤ Σ_{j≤i} e_j.
        let (tot_lo, tot_hi, slack) = match kept {
            Some(k) => {
                let s: f64 = e.iter().take(k).sum();
                (s, s, SLACK)
            }
            None => {
                // The whole tail is kept: the CPU's f32 total over it may be off by up to half
                // an ulp per term, and by no more than the tail's mass.
                let terms = c.k as f64 + 1.0;
                let tail_p = tail_hi / sum_lo;
                let err = terms * 6e-8 + tail_p.min(c.n_vocab as f64 * 6e-8);
                (sum_lo, sum_hi, SLACK + 4.0 * err)
            }
        };
        // The CPU's `r = u·total − Σ p_j` carries absolute errors of a few ulps of `total`
        // (more when the tail is summed): the slack is a fraction of the total, not of `u·total`.
        let u = f64::from(u);
        let upto = kept.unwrap_or(e.len());
        let mut cum = 0.0;
        for (i, ei) in e.iter().enumerate().take(upto) {
            cum += ei;
            if (u + slack) * tot_hi <= cum {
                return pre.get(i).map(|x| x.0);
            }
            if (u - slack) * tot_lo <= cum {
                return None; // too close to this boundary
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::SamplingParams;
    use super::*;

    /// What the GPU computes (`kernels::sample_candidates`), done on the CPU: penalized ids set
    /// aside raw, the top-k of the rest by (value desc, ±0 equal, id asc), max and an f32 sum.
    fn gpu_like(logits: &[f32], penalized: &[u32], t: f32, k: usize) -> Candidates {
        let mut rest: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as u32, v))
            .filter(|(i, v)| !v.is_nan() && !penalized.contains(i))
            .collect();
        rest.sort_by(|a, b| {
            b.1.partial_cmp(&a.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.0.cmp(&b.0))
        });
        let max = rest.first().map_or(f32::NEG_INFINITY, |r| r.1);
        let tt = if t > 0.0 { t } else { 1.0 };
        let sum: f32 = rest.iter().map(|r| ((r.1 - max) / tt).exp()).sum();
        rest.truncate(k);
        Candidates {
            top: rest,
            k,
            max,
            sum,
            hist: penalized
                .iter()
                .map(|&id| (id, logits.get(id as usize).copied().unwrap_or(f32::NAN)))
                .collect(),
            n_vocab: logits.len(),
        }
    }

    struct Lcg(u64);
    impl Lcg {
        fn unit(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    /// Same tokens from the candidates (with the full row read only when they cannot decide) as
    /// from the full row, over many rows and every sampler setting; the fallback stays rare.
    #[test]
    fn candidates_pick_what_the_full_row_picks() {
        let settings = [
            ("greedy", 0.0, 0, 1.0, 0.0, 1.0),
            ("greedy+penalty", 0.0, 0, 1.0, 0.0, 1.3),
            ("temperature", 0.8, 0, 1.0, 0.0, 1.0),
            ("hot", 1.5, 0, 1.0, 0.0, 1.0),
            ("top-k 40", 0.8, 40, 1.0, 0.0, 1.0),
            ("top-k 200", 0.8, 200, 1.0, 0.0, 1.0),
            ("top-p 0.9", 0.8, 0, 0.9, 0.0, 1.0),
            ("min-p 0.05", 0.8, 0, 1.0, 0.05, 1.0),
            ("all", 0.7, 0, 0.95, 0.05, 1.1),
            ("penalty", 1.0, 0, 1.0, 0.0, 1.5),
        ];
        let mut rng = Lcg(5);
        for (name, temperature, top_k, top_p, min_p, repeat_penalty) in settings {
            let params = SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                repeat_penalty,
                repeat_last_n: 16,
                seed: 11,
            };
            let mut full = Sampler::new(params.clone()).unwrap();
            let mut cand = Sampler::new(params).unwrap();
            // (rows, fallbacks) for flat rows and for LLM-like ones (a few tokens far ahead)
            let (mut flat, mut peaked) = ((0, 0), (0, 0));
            let mut history: Vec<u32> = vec![1, 2, 3];
            for step in 0..400 {
                // vocabularies below and above K, flat and peaked rows, ties
                let n = [50usize, 3000, 5000][step % 3];
                let is_peaked = step % 2 == 0;
                let scale = [2.0f32, 6.0][step % 5 % 2];
                let mut logits: Vec<f32> = (0..n)
                    .map(|_| (rng.unit() + rng.unit() + rng.unit() - 1.5) * scale)
                    .collect();
                if is_peaked {
                    for j in 0..4 {
                        let i = (rng.unit() * n as f32) as usize % n;
                        logits[i] = 10.0 + 2.0 * j as f32 + rng.unit();
                    }
                }
                if step % 7 == 0 {
                    for x in logits.iter_mut() {
                        *x = x.round();
                    }
                }
                let want = full.sample(&logits, &history).unwrap();
                let pen = cand.penalized_tokens(&history);
                let c = gpu_like(&logits, &pen, temperature, 64);
                let (got, fell) = match cand.sample_candidates(&c) {
                    Draw::Token(t) => (t, 0),
                    Draw::Full(u) => (cand.sample_with(&logits, &history, u).unwrap(), 1),
                };
                assert_eq!(got, want, "{name}: step {step}");
                let kind = if is_peaked { &mut peaked } else { &mut flat };
                kind.0 += 1;
                kind.1 += fell;
                history.push(want);
            }
            eprintln!(
                "{name}: full row read for {} of {} flat rows, {} of {} peaked rows",
                flat.1, flat.0, peaked.1, peaked.0
            );
            // top-k ≤ 64 and greedy never need the row; LLM-like rows seldom do.
            if top_k > 0 && top_k <= 64 || temperature == 0.0 {
                assert_eq!(flat.1 + peaked.1, 0, "{name}");
            } else {
                assert!(peaked.1 * 10 < peaked.0, "{name}: {} fallbacks", peaked.1);
            }
        }
    }
}
