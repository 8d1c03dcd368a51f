//! The sampler chain: repetition penalty → temperature → top-k → top-p → min-p → draw.
//! Temperature 0 is greedy (argmax, lowest id on ties).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{EngineError, Result};

mod candidates;
pub(crate) use candidates::{Candidates, Draw};

/// Sampling parameters (llama.cpp's defaults where a field is "off").
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off. Applied to the logits of tokens seen in the last `repeat_last_n` tokens
    /// (positive logits divided, negative multiplied, as llama.cpp does).
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// Where a model's default sampling came from ([`SamplingParams::recommended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplingSource {
    /// The file's own `general.sampling.*` keys (GGUF metadata kept on import).
    File,
    /// llama.cpp's defaults ([`SamplingParams::llama_cpp`]).
    LlamaCpp,
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self::default()
    }

    /// llama.cpp's default sampling (`common_params_sampling` in llama.cpp's `common/common.h`:
    /// `temp = 0.80f`, `top_k = 40`, `top_p = 0.95f`, `min_p = 0.05f`, `penalty_repeat = 1.00f`,
    /// `penalty_last_n = 64`). llama.cpp draws a random seed; tern keeps seed 0 so that a run
    /// repeats (give `--seed` for another draw).
    pub fn llama_cpp() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }

    /// A model's default sampling: the file's recommended values (the GGUF keys
    /// `general.sampling.temp`, `.top_k`, `.top_p`, `.min_p`, `.penalty_repeat`,
    /// `.penalty_last_n`, kept in the metadata's `extra` on import) over llama.cpp's defaults
    /// ([`SamplingParams::llama_cpp`]); the source says whether the file gave any.
    pub fn recommended(meta: &tern_format::ModelMeta) -> (Self, SamplingSource) {
        let mut p = Self::llama_cpp();
        let num = |k: &str| {
            meta.extra
                .get(&format!("general.sampling.{k}"))
                .and_then(serde_json::Value::as_f64)
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let mut any = false;
        if let Some(v) = num("temp") {
            p.temperature = v as f32;
            any = true;
        }
        if let Some(v) = num("top_k") {
            p.top_k = v as usize;
            any = true;
        }
        if let Some(v) = num("top_p").filter(|v| *v > 0.0 && *v <= 1.0) {
            p.top_p = v as f32;
            any = true;
        }
        if let Some(v) = num("min_p").filter(|v| *v <= 1.0) {
            p.min_p = v as f32;
            any = true;
        }
        if let Some(v) = num("penalty_repeat").filter(|v| *v > 0.0) {
            p.repeat_penalty = v as f32;
            any = true;
        }
        if let Some(v) = num("penalty_last_n") {
            p.repeat_last_n = v as usize;
            any = true;
        }
        let src = if any {
            SamplingSource::File
        } else {
            SamplingSource::LlamaCpp
        };
        (p, src)
    }

    /// Check every field's range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidArgument(m));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!("temperature {} must be ≥ 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(format!(
                "repeat_penalty {} must be > 0",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

/// Index of the largest value (lowest index on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// A stateful sampler (owns the RNG).
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// Scratch: (id, logit/prob) candidates.
    cand: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = StdRng::seed_from_u64(params.seed);
        Ok(Self {
            params,
            rng,
            cand: Vec::new(),
        })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Pick the next token from `logits` given the `history` of tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        self.sample_with(logits, history, None)
    }

    /// Whether the repetition penalty is on.
    fn penalizes(&self) -> bool {
        self.params.repeat_penalty != 1.0 && self.params.repeat_last_n > 0
    }

    /// A logit after the repetition penalty (positive divided, negative multiplied).
    fn penalize(&self, v: f32) -> f32 {
        if v > 0.0 {
            v / self.params.repeat_penalty
        } else {
            v * self.params.repeat_penalty
        }
    }

    /// [`Sampler::sample`] with the uniform draw given (`Some`: drawn already, by
    /// [`Sampler::sample_candidates`]) or taken from the RNG (`None`).
    pub(crate) fn sample_with(
        &mut self,
        logits: &[f32],
        history: &[u32],
        u: Option<f32>,
    ) -> Result<u32> {
        if logits.is_empty() {
            return Err(EngineError::InvalidArgument("empty logits".into()));
        }
        let penalize = self.penalizes();
        if self.params.temperature == 0.0 && !penalize {
            return argmax(logits)
                .map(|i| i as u32)
                .ok_or_else(|| EngineError::Numeric("all logits are NaN".into()));
        }
        let mut cand = std::mem::take(&mut self.cand);
        cand.clear();
        cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan())
                .map(|(i, &v)| (i as u32, v)),
        );
        if penalize {
            let start = history.len().saturating_sub(self.params.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &t in &history[start..] {
                if seen.insert(t) {
                    if let Some(c) = cand.get_mut(t as usize).filter(|c| c.0 == t) {
                        c.1 = self.penalize(c.1);
                    } else if let Some(c) = cand.iter_mut().find(|c| c.0 == t) {
                        c.1 = self.penalize(c.1);
                    }
                }
            }
        }
        self.cand = cand;
        if self.cand.is_empty() {
            return Err(EngineError::Numeric("all logits are NaN".into()));
        }
        if self.params.temperature == 0.0 {
            let scores: Vec<f32> = self.cand.iter().map(|c| c.1).collect();
            return argmax(&scores)
                .map(|i| self.cand[i].0)
                .ok_or_else(|| EngineError::Numeric("no candidate".into()));
        }
        // Sort descending by logit (ties: lower id first, deterministic).
        self.cand.sort_by(sorted_order);
        Ok(self.finish(u))
    }

    /// Top-k, softmax with temperature, top-p, min-p and the draw over `self.cand` (non-empty,
    /// sorted by [`sorted_order`]); `u` the uniform draw (`None`: from the RNG).
    fn finish(&mut self, u: Option<f32>) -> u32 {
        let p = &self.params;
        if p.top_k > 0 && p.top_k < self.cand.len() {
            self.cand.truncate(p.top_k);
        }
        // Softmax with temperature.
        let m = self.cand.first().map_or(0.0, |c| c.1);
        let mut sum = 0.0f64;
        for c in self.cand.iter_mut() {
            let e = (((c.1 - m) / p.temperature) as f64).exp();
            c.1 = e as f32;
            sum += e;
        }
        for c in self.cand.iter_mut() {
            c.1 = (c.1 as f64 / sum) as f32;
        }
        if p.top_p < 1.0 {
            let mut acc = 0.0f32;
            let mut keep = self.cand.len();
            for (i, c) in self.cand.iter().enumerate() {
                acc += c.1;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            self.cand.truncate(keep.max(1));
        }
        if p.min_p > 0.0 {
            let thr = self.cand.first().map_or(0.0, |c| c.1) * p.min_p;
            let keep = self.cand.iter().take_while(|c| c.1 >= thr).count().max(1);
            self.cand.truncate(keep);
        }
        let total: f32 = self.cand.iter().map(|c| c.1).sum();
        let u = u.unwrap_or_else(|| self.rng.random::<f32>());
        let mut r = u * total;
        for c in &self.cand {
            r -= c.1;
            if r <= 0.0 {
                return c.0;
            }
        }
        self.cand.last().map_or(0, |c| c.0)
    }
}

/// The sampler's order: logit descending (`total_cmp`), lower id first on ties.
fn sorted_order(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_argmax_lowest_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&[0.0, 3.0, 3.0, -1.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, -5.0, -7.0], &[]).unwrap(), 1);
    }

    #[test]
    fn repetition_penalty_changes_greedy_choice() {
        let p = SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        };
        let mut s = Sampler::new(p).unwrap();
        // token 0 (logit 3) seen → 1.5 < 2.0 of token 1
        assert_eq!(s.sample(&[3.0, 2.0, 0.0], &[0]).unwrap(), 1);
        assert_eq!(s.sample(&[3.0, 2.0, 0.0], &[2]).unwrap(), 0);
    }

    #[test]
    fn top_k_one_is_greedy_and_seed_is_deterministic() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 101) as f32 / 10.0).collect();
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 1,
            ..Default::default()
        };
        let mut s = Sampler::new(p).unwrap();
        assert_eq!(
            s.sample(&logits, &[]).unwrap() as usize,
            argmax(&logits).unwrap()
        );
        let p = SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            seed: 7,
            ..Default::default()
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(p.clone()).unwrap();
            (0..20).map(|_| s.sample(&logits, &[]).unwrap()).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(p).unwrap();
            (0..20).map(|_| s.sample(&logits, &[]).unwrap()).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn top_p_and_min_p_restrict_support() {
        // probs ≈ [0.64, 0.24, 0.09, 0.03]: top_p 0.5 keeps only token 0.
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.5,
            seed: 1,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..50 {
            assert_eq!(s.sample(&logits, &[]).unwrap(), 0);
        }
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            min_p: 0.3,
            seed: 2,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..50 {
            assert!(s.sample(&logits, &[]).unwrap() <= 1);
        }
    }

    #[test]
    fn bad_params_are_errors() {
        assert!(Sampler::new(SamplingParams {
            temperature: -1.0,
            ..Default::default()
        })
        .is_err());
        assert!(Sampler::new(SamplingParams {
            top_p: 0.0,
            ..Default::default()
        })
        .is_err());
        assert!(Sampler::new(SamplingParams {
            repeat_penalty: f32::NAN,
            ..Default::default()
        })
        .is_err());
    }
}
