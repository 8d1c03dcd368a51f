//! Scoring and perplexity without logit matrices.
//!
//! [`Model::score`] returns `log p(tokens[i+1] | tokens[..=i])` for every `i` in `0..n-1`: the
//! tokens are run through the forward pass in batches with a fresh KV cache (on the GPU: the
//! model's one cached scoring session, cleared first; [`crate::Session::score`] scores in a
//! session's own cache), and each batch's final
//! hidden states go to the fused Cut-Cross-Entropy scorer ([`tern_reference::cce`]), which computes
//! the head product tile by tile with an online log-sum-exp. No `[n, n_vocab]` logit matrix is ever
//! held: the extra memory of the scoring stage is a few hundred KB whatever the text length.
//!
//! [`Model::perplexity`] follows `llama-perplexity` (llama.cpp `tools/perplexity/perplexity.cpp`,
//! default mode): the text is tokenized with BOS (when the model adds one) and without parsing
//! special tokens; it must have at least `2·c` tokens; it is cut into `⌊tokens / c⌋` windows of `c`
//! tokens, each evaluated with an empty cache and its first token replaced by BOS when the model
//! adds one. Two figures come back:
//!
//! * `ppl`: `exp(mean NLL)` over every predicted token of every window (positions `0..c-1` predict
//!   tokens `1..c`);
//! * `ppl_second_half`: llama-perplexity's number, over only the second half of each window
//!   (positions `c/2 .. c-2` predict tokens `c/2+1 .. c-1`, `c - 1 - c/2` per window), so that every
//!   scored token has at least `c/2` tokens of context.

use tern_reference::{CceOptions, KvCache};

use crate::error::{EngineError, Result};
use crate::session::Model;

pub use crate::options::{KvSpec, NoObserver, ScoreObserver, ScoreOptions};

/// Options of [`Model::perplexity`].
#[derive(Debug, Clone, PartialEq)]
pub struct PerplexityOptions {
    /// Window size `c` (llama-perplexity's `-c`).
    pub n_ctx: usize,
    /// Tokens per forward call (0 = `min(c, 512)`).
    pub batch: usize,
    /// Score only these windows (indices into the `⌊tokens / c⌋` windows); `None` = all.
    pub windows: Option<Vec<usize>>,
    /// Block sizes of the fused scorer.
    pub cce: CceOptions,
    /// The KV-cache format (default f32, the reference numerics of the goldens; `tern
    /// perplexity` passes the user's `--kv`, q8 by default).
    pub kv: KvSpec,
}

impl Default for PerplexityOptions {
    fn default() -> Self {
        Self {
            n_ctx: 512,
            batch: 0,
            windows: None,
            cce: CceOptions::default(),
            kv: KvSpec::f32(),
        }
    }
}

/// One window's negative log-likelihood sums.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowScore {
    /// Window index (tokens `index·c .. (index+1)·c`).
    pub index: usize,
    /// `−Σ log p` over all `c − 1` predicted tokens.
    pub nll: f64,
    /// `−Σ log p` over the second half (`c − 1 − c/2` tokens).
    pub nll_second_half: f64,
    /// `Σ (log p)²` over the second half (for llama-perplexity's uncertainty estimate).
    pub nll2_second_half: f64,
}

/// The result of [`Model::perplexity`].
#[derive(Debug, Clone, PartialEq)]
pub struct Perplexity {
    /// `exp(mean NLL)` over every predicted token.
    pub ppl: f64,
    /// `exp(mean NLL)` over the second half of each window: llama-perplexity's figure.
    pub ppl_second_half: f64,
    /// llama-perplexity's ± on `ppl_second_half`: `ppl · sqrt(var(NLL) / (count − 1))`.
    pub ppl_second_half_stderr: f64,
    /// Tokens of the input (the tokenized text, BOS included when the model adds one).
    pub tokens: usize,
    /// Window size.
    pub n_ctx: usize,
    /// Tokens counted in `ppl` and in `ppl_second_half`.
    pub scored: usize,
    pub scored_second_half: usize,
    /// Per window, in the order scored.
    pub windows: Vec<WindowScore>,
    /// All KV-cache bytes in use over the positions held, at the end of each window (codes,
    /// scales, zero points, f16 window, magnitudes, retained tokens), averaged over the windows;
    /// 0 when the backend does not report it.
    pub kv_bytes_per_token: f64,
}

impl Model {
    /// `log p(tokens[i+1] | tokens[..=i])` for `i` in `0..n-1` (natural log; `n − 1` values; the
    /// first token is context only). Fresh KV cache, batches of 512 tokens, at most the model's
    /// training context.
    pub fn score(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.score_with(tokens, &ScoreOptions::default(), &mut NoObserver)
    }

    /// [`Model::score`] with options and an observer.
    pub fn score_with(
        &self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(EngineError::NothingToScore("no tokens given".into()));
        }
        self.check_tokens(tokens)?;
        let limit = if opts.max_tokens == 0 {
            self.meta().hparams.n_ctx_train as usize
        } else {
            opts.max_tokens
        };
        if tokens.len() > limit {
            return Err(EngineError::PromptTooLong {
                prompt: tokens.len(),
                ctx: limit,
            });
        }
        // The last token predicts nothing that is scored: run only the first n − 1.
        let n_in = tokens.len() - 1;
        if n_in == 0 {
            return Ok(Vec::new());
        }
        // CPU: a fresh cache of n − 1 positions; GPU: the model's cached scoring session.
        self.backend().score(tokens, opts, obs)
    }

    /// [`Model::score_with`] in a caller's KV cache (e.g. a session's preallocated one) instead of
    /// a fresh one: the cache is cleared first, must hold `tokens.len() − 1` positions, and holds
    /// `tokens[..n−1]` afterwards (a prefix of them after an error). `opts.max_tokens` is not used:
    /// the cache's capacity is the limit. A CPU verb ([`crate::Verb::ScoreInCache`]; the cache
    /// is `tern_reference::KvCache::for_spec(&model.meta().hparams, ..)`):
    /// [`EngineError::Unsupported`] on the GPU.
    pub fn score_in_cache(
        &self,
        cache: &mut KvCache,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(EngineError::NothingToScore("no tokens given".into()));
        }
        self.check_tokens(tokens)?;
        let n_in = tokens.len() - 1;
        if n_in > cache.capacity() {
            return Err(EngineError::PromptTooLong {
                prompt: tokens.len(),
                ctx: cache.capacity() + 1,
            });
        }
        self.backend().score_in_cache(cache, tokens, opts, obs)
    }

    /// Tokenize a text for [`Model::perplexity`] as llama-perplexity does: BOS when the model adds
    /// one, special-token text kept as plain text.
    pub fn perplexity_tokens(&self, text: &str) -> Result<Vec<u32>> {
        if text.is_empty() {
            return Err(EngineError::NothingToScore("the text is empty".into()));
        }
        self.tokenizer()?
            .encode_with(text, true, false)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))
    }

    /// llama-perplexity-compatible perplexity of `tokens` (see the module doc). Errors: no tokens,
    /// fewer than `2·c` tokens, `c` larger than the training context or below 4, a window index
    /// out of range.
    pub fn perplexity(
        &self,
        tokens: &[u32],
        opts: &PerplexityOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Perplexity> {
        let c = opts.n_ctx;
        let n_ctx_train = self.meta().hparams.n_ctx_train as usize;
        if c < 4 {
            return Err(EngineError::InvalidArgument(format!(
                "context {c} is too small: windows need at least 4 tokens"
            )));
        }
        if c > n_ctx_train {
            return Err(EngineError::ContextTooLarge {
                requested: c,
                n_ctx_train,
            });
        }
        if tokens.is_empty() {
            return Err(EngineError::NothingToScore("no tokens given".into()));
        }
        let needed = 2 * c;
        if tokens.len() < needed {
            return Err(EngineError::TooFewTokens {
                tokens: tokens.len(),
                n_ctx: c,
                needed,
            });
        }
        self.check_tokens(tokens)?;
        let n_windows = tokens.len() / c;
        let selected: Vec<usize> = match &opts.windows {
            Some(w) => {
                if let Some(&bad) = w.iter().find(|&&i| i >= n_windows) {
                    return Err(EngineError::InvalidArgument(format!(
                        "window {bad} does not exist: the text has {n_windows} windows of {c} tokens"
                    )));
                }
                w.clone()
            }
            None => (0..n_windows).collect(),
        };
        if selected.is_empty() {
            return Err(EngineError::NothingToScore("no windows selected".into()));
        }
        let bos = self
            .tokenizer()
            .ok()
            .filter(|t| t.add_bos())
            .and_then(|t| t.bos());
        let first = c / 2;
        let score_opts = ScoreOptions {
            batch: if opts.batch == 0 {
                c.min(512)
            } else {
                opts.batch
            },
            max_tokens: c,
            cce: opts.cce,
            kv: opts.kv,
        };
        let total = selected.len() * (c - 1);
        let mut windows = Vec::with_capacity(selected.len());
        let mut kv_per_token = Vec::new();
        for (k, &w) in selected.iter().enumerate() {
            let mut win = tokens
                .get(w * c..(w + 1) * c)
                .map(<[u32]>::to_vec)
                .unwrap_or_default();
            if let (Some(b), Some(t0)) = (bos, win.first_mut()) {
                *t0 = b;
            }
            let mut sub = Offset {
                inner: obs,
                done: k * (c - 1),
                total,
                kv: None,
            };
            let lp = self.score_with(&win, &score_opts, &mut sub)?;
            if let Some((bytes, n)) = sub.kv.filter(|&(_, n)| n > 0) {
                kv_per_token.push(bytes as f64 / n as f64);
            }
            let second = lp.get(first..).unwrap_or_default();
            windows.push(WindowScore {
                index: w,
                nll: -lp.iter().map(|&v| v as f64).sum::<f64>(),
                nll_second_half: -second.iter().map(|&v| v as f64).sum::<f64>(),
                nll2_second_half: second.iter().map(|&v| (v as f64).powi(2)).sum::<f64>(),
            });
        }
        let scored = windows.len() * (c - 1);
        let scored_second_half = windows.len() * (c - 1 - first);
        let nll: f64 = windows.iter().map(|w| w.nll).sum();
        let nll_h: f64 = windows.iter().map(|w| w.nll_second_half).sum();
        let nll2_h: f64 = windows.iter().map(|w| w.nll2_second_half).sum();
        let mean_h = nll_h / scored_second_half as f64;
        let var = nll2_h / scored_second_half as f64 - mean_h * mean_h;
        let ppl_second_half = mean_h.exp();
        let stderr = if var > 0.0 && scored_second_half > 1 {
            ppl_second_half * (var / (scored_second_half - 1) as f64).sqrt()
        } else {
            0.0
        };
        Ok(Perplexity {
            ppl: (nll / scored as f64).exp(),
            ppl_second_half,
            ppl_second_half_stderr: stderr,
            tokens: tokens.len(),
            n_ctx: c,
            scored,
            scored_second_half,
            windows,
            kv_bytes_per_token: if kv_per_token.is_empty() {
                0.0
            } else {
                kv_per_token.iter().sum::<f64>() / kv_per_token.len() as f64
            },
        })
    }
}

/// Reports a window's progress as part of the whole run.
struct Offset<'a> {
    inner: &'a mut dyn ScoreObserver,
    done: usize,
    total: usize,
    /// The scoring cache's (bytes in use, positions) when the backend reported them.
    kv: Option<(u64, usize)>,
}

impl ScoreObserver for Offset<'_> {
    fn scoring_started(&mut self) {
        self.inner.scoring_started();
    }
    fn scoring_finished(&mut self) {
        self.inner.scoring_finished();
    }
    fn progress(&mut self, done: usize, _total: usize) {
        self.inner.progress(self.done + done, self.total);
    }
    fn cancelled(&mut self) -> bool {
        self.inner.cancelled()
    }
    fn kv_cache(&mut self, bytes_in_use: u64, positions: usize) {
        self.kv = Some((bytes_in_use, positions));
        self.inner.kv_cache(bytes_in_use, positions);
    }
}
