//! The reference KV cache: any [`KvSpec`] (`tern_format::kv`), preallocated once, written in
//! place, never concatenated; attention reads it position by position (dequantizing a tile of
//! rows at a time, never a decompressed copy of the cache).
//!
//! # Storage
//!
//! The cache is a list of *streams* (`kv_store`): one per unmerged layer, and one per MiniCache
//! pair holding the pair's merged directions. A stream stores the keys (after RoPE) and values of
//! up to `n_ctx` positions in the session's format, exactly as `tern_format::kv` specifies
//! (codes/scales/zero points, the KIVI f16 window of `R` rows at slot `p mod R`, a3's 4-bit
//! position 0), through the quantizers of [`crate::kv_codec`]. The plain f32 format without
//! MiniCache keeps the original `[layer][pos][row]` slabs and attention path (bit-identical to
//! what tern did before compressed caches).
//!
//! # MiniCache (arXiv 2405.14366), the design both backends implement
//!
//! **Pairs.** From layer `S` on, layers are merged in pairs `(a, b) = (S, S+1), (S+2, S+3), …`
//! ([`MiniCache::pairs`]); a last layer without a partner stays unmerged. Per pair there is one
//! direction stream, in the session's `KvQuant` format, for K and V.
//!
//! **Merge** (per position `p`, kv-head `h`, separately for K and V; [`crate::kv_merge`]): with
//! `x_a`, `x_b` the two layers' `head_dim` vectors, `u = x/‖x‖`, `θ = acos(clamp(u_a·u_b, −1,
//! 1))`, the angular distance `d = θ/π`, the stored direction is the SLERP
//! `e = (sin((1−t)θ)·u_a + sin(tθ)·u_b)/sin θ` (linear blend when `sin θ < 1e-6`): layer `a`
//! (the shallower, `l−1`) gets weight `1 − t`, layer `b` weight `t`.
//!
//! **Retention.** A (p, h) whose layers disagree — `d > γ` (absolute threshold on the angular
//! distance; the paper's "highly distinct pairs are kept") — is *retained*: the direction slot
//! stores `u_a` (layer `a`'s own direction) and layer `b`'s raw vector goes to the pair's pool
//! (f16). The rule is local to the token, so the cache does not depend on the batching and
//! truncation stays exact.
//!
//! **Storage per pair, for K and for V:**
//! * `dir`: the direction stream (a layer of the base format) — `e`, or `u_a` when retained;
//! * `mag`: `[n_ctx][2][n_head_kv]` u16: `mag[p][0][h] = f16(‖x_a‖)`;
//!   `mag[p][1][h] = f16(‖x_b‖)`, or, when retained, `0x8000 | slot` (the sign bit is free:
//!   norms are ≥ 0; f16 values saturate at 65504 so a norm never sets it);
//! * `pool`: `[cap][head_dim]` f16, layer `b`'s retained vectors, and `pool_pos: [cap]` u32 (the
//!   position of each entry), filled in position order (slot = entries before it), so truncation
//!   to `m` keeps the entries with `pool_pos < m`. `cap = ⌈n_ctx·n_head_kv/8⌉` (≤ 32768,
//!   [`MiniCache::pool_capacity`]); when it is full, further distinct tokens are merged like the
//!   others (the pool never grows).
//!
//! **Read:** layer `a`: `x̂ = f32(mag[p][0][h]) · ê`; layer `b`: retained ? `pool[slot]` :
//! `f32(mag[p][1][h]) · ê` (`ê` the dequantized direction; not renormalized).
//!
//! **When:** the merge happens when layer `b`'s keys and values of a batch are computed (at
//! prefill and at every decoded token). Layer `a` attends before that: its batch's own positions
//! are read as computed (f32, not yet merged); earlier positions from the merged store. So a
//! prompt run in one batch sees layer `a` exact (as in the paper, which merges after prefill),
//! and decoding sees it merged: perplexity measured with large batches flatters MiniCache, and
//! the measurements below use decode-like batches (`-b 64`) to decide.
//!
//! **Bytes:** [`KvSpec::bytes_held`] with the pools' entries in use.
//!
//! # Measured defaults (`--minicache on`) and the paper's unverified points
//!
//! Decided on SmolLM2-135M-Instruct, GPL-3, perplexity of the second half of each window, f16
//! directions, `kv_sweep` example (`runtime/engine/examples/kv_sweep.rs`), `-c 512`, 2 windows,
//! **batches of 64 tokens** (decode-like: with one big batch layer `a` would read its own rows
//! unmerged and every setting with `t = 1` would look free — measured equal to f16 at
//! `-b 512`). f16 without merging: 17.683.
//!
//! | S (pairs) | t | retention | ppl (Δ vs f16) | bytes/token |
//! |---|---|---|---|---|
//! | 15 (7) | 0.7 | none | 101.684 (+475.0 %) | 17832 |
//! | 22 (4) | 0.7 | none | 27.513 (+55.6 %) | 20064 |
//! | 26 (2) | 0.0 | none | 23.016 (+30.2 %) | 21552 |
//! | 26 (2) | 0.5 | none | 19.887 (+12.5 %) | 21552 |
//! | 26 (2) | 0.7 | none | 19.865 (+12.3 %) | 21552 |
//! | 26 (2) | 1.0 | none | 20.370 (+15.2 %) | 21552 |
//! | 26 (2) | 0.7 | distinct, d > 0.55 (7.3 % retained) | 19.272 (+9.0 %) | 21668 |
//! | 26 (2) | 0.7 | similar, d < 0.45 (9.4 % retained) | 19.626 (+11.0 %) | 21701 |
//!
//! * **Which layer gets `1 − t`:** the shallower one (`a`); `t = 0.7` (the deeper layer's
//!   direction weighs more) measured best of 0, 0.5, 0.7, 1.0 (0.5 is within 0.1 %; at
//!   `-b 512` the order is the same but every value is flattered by the batching).
//! * **Retention:** keeping the most *distinct* pairs (the paper's wording) beats keeping the
//!   most similar ones (the third-party variant) while retaining fewer tokens. Threshold:
//!   absolute on `d = θ/π`, not relative to the tokens' range — a relative rule needs the range
//!   over the sequence, which changes as tokens arrive (the cache would depend on the batching
//!   and could not be truncated exactly); not measured.
//! * **Start layer:** the model's adjacent layers are not similar: the median angular distance
//!   between layer `l−1`'s and `l`'s per-head K and V vectors is 0.46–0.54 at every depth
//!   (`kv_sweep … stats`: orthogonal vectors have 0.5), unlike the large models of the paper. So
//!   merging costs perplexity in proportion to the pairs merged, and the default merges only the
//!   last four layers (`S = n_layer − 4`): on SmolLM2-135M MiniCache is **not** worth it (see
//!   docs/measurements.md); it is implemented, accounted and tested for models where it is.
//!
//! # Truncation
//!
//! `truncate(m)` keeps the largest length `≤ m` that equals a cache filled from scratch with
//! that many positions (in the same batches) and returns it (`tern_format::kv`, "Truncation": only KIVI, inside an
//! already quantized block, keeps less — the block's start); the caller re-runs the tokens in
//! between. A pass that fails or is stopped half way leaves some streams written past the length;
//! `truncate` takes that into account.
//!
//! # GPU and CPU
//!
//! The GPU kernels store and read every format exactly as this cache does: fed the same rows
//! they produce the same words, bit for bit (the GPU parity harness, including SmolLM2's real
//! keys and values). End to end the backends compute K and V ~1e-6 apart (summation order), and a
//! quantized format turns a value near a rounding boundary into codes one step apart, after which
//! the passes diverge: in q8…a3 SmolLM2's perplexity moves by percents under such rounding-level
//! differences — the CPU against itself does too ([`KvCache::set_input_jitter`]). f16 agrees to
//! ~0.03 %. docs/measurements.md, "The quantized-KV GPU/CPU gap: cause".
//!
//! # Context full
//!
//! A pass that does not fit is refused before anything is written
//! ([`crate::ReferenceError::ContextOverflow`]); the cache is unchanged. There is no context
//! shift (a KIVI block or a merged pair cannot be shifted in place).

use half::f16;
use tern_format::kv::{KvSpec, MiniCache};
use tern_format::HParams;

use crate::error::{too_large, try_zeroed, ReferenceError, Result};
use crate::kv_merge::{norm, slerp_merge, unit};
use crate::kv_store::Stream;

/// `--minicache on` for a model of `n_layer` layers (module doc, "Measured defaults"): the last
/// four layers merged in two pairs, `t = 0.7` (the deeper layer of a pair weighs 0.7), tokens
/// whose angular distance exceeds `γ = 0.55` retained.
pub fn minicache_default(n_layer: u32) -> MiniCache {
    MiniCache {
        start_layer: n_layer.saturating_sub(4),
        t: 0.7,
        gamma: 0.55,
    }
}

/// Marks a retained `mag[p][1][h]` (the low 15 bits are the pool slot).
pub const RETAINED: u16 = 0x8000;

/// Which token pairs MiniCache retains (the design's rule is [`Retention::Distinct`]; the other
/// exists to measure the alternative that a third-party implementation uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Retain `d > γ` (the most distinct pairs).
    #[default]
    Distinct,
    /// Retain `d < γ` (the most similar pairs; the rest are merged).
    Similar,
}

/// Where a layer's keys and values live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Its own stream.
    Own(usize),
    /// The first layer of merged pair `.0`.
    First(usize),
    /// The second layer of merged pair `.0`.
    Second(usize),
}

/// One retained-token pool (a pair's K or V).
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    pub(crate) data: Vec<f16>,
    pub(crate) pos: Vec<u32>,
    pub(crate) len: usize,
}

/// One merged pair's magnitudes and pools (its directions are stream `stream`).
#[derive(Debug, Clone)]
pub(crate) struct Pair {
    pub(crate) stream: usize,
    pub(crate) mag_k: Vec<u16>,
    pub(crate) mag_v: Vec<u16>,
    pub(crate) pool_k: Pool,
    pub(crate) pool_v: Pool,
}

/// Keys and values of every layer for up to `n_ctx` positions, in the format of a [`KvSpec`]
/// (module doc).
#[derive(Debug, Clone)]
pub struct KvCache {
    spec: KvSpec,
    hp: HParams,
    pub(crate) streams: Vec<Stream>,
    pub(crate) roles: Vec<Role>,
    pub(crate) pairs: Vec<Pair>,
    pub(crate) n_layer: usize,
    /// `n_head_kv · head_dim`: values per position per layer.
    pub(crate) row: usize,
    pub(crate) head_dim: usize,
    pub(crate) n_ctx: usize,
    pub(crate) len: usize,
    retention: Retention,
    /// [`KvCache::set_input_jitter`]: (relative amplitude, seed); amplitude 0 = off.
    jitter: (f32, u32),
}

impl KvCache {
    /// An f32 cache for a model of hyperparameters `hp` holding `n_ctx` positions (all memory is
    /// allocated here, fallibly: a cache the system cannot hold is an out-of-range error naming
    /// the bytes, not an abort). `KvCache::new(&model, n_ctx)` (in `model.rs`, which uses this
    /// module, not the reverse) reads `hp` from a [`crate::Model`].
    pub fn for_hparams(hp: &HParams, n_ctx: usize) -> Result<Self> {
        Self::for_spec(hp, n_ctx, &KvSpec::f32())
    }

    /// A cache in the format `spec` (checked against `hp`).
    pub fn for_spec(hp: &HParams, n_ctx: usize, spec: &KvSpec) -> Result<Self> {
        spec.check(hp)
            .map_err(|e| ReferenceError::BadHParams(format!("KV cache: {e}")))?;
        let n_layer = hp.n_layer as usize;
        let head_dim = hp.head_dim as usize;
        let row = hp.n_head_kv as usize * head_dim;
        let heads = hp.n_head_kv as usize;
        let full = KvSpec {
            minicache: None,
            ..*spec
        }
        .bytes_held(hp, n_ctx as u64, 0);
        if full > isize::MAX as u64 {
            return Err(too_large(
                &format!("a KV cache of {n_ctx} positions"),
                u128::from(full),
            ));
        }
        let pairs_at: Vec<(u32, u32)> = spec
            .minicache
            .map(|m| m.pairs(hp.n_layer))
            .unwrap_or_default();
        let mut roles = Vec::with_capacity(n_layer);
        let mut streams = Vec::new();
        let mut pairs = Vec::new();
        let cap = spec
            .minicache
            .map_or(0, |_| MiniCache::pool_capacity(hp, n_ctx as u64) as usize);
        let what = format!("MiniCache storage of {n_ctx} positions");
        for l in 0..n_layer as u32 {
            if let Some(i) = pairs_at.iter().position(|&(a, _)| a == l) {
                roles.push(Role::First(i));
                continue;
            }
            if let Some(i) = pairs_at.iter().position(|&(_, b)| b == l) {
                roles.push(Role::Second(i));
                continue;
            }
            roles.push(Role::Own(streams.len()));
            streams.push(Stream::new(spec.quant, spec.kivi, row, head_dim, n_ctx)?);
        }
        for _ in &pairs_at {
            let pool = || -> Result<Pool> {
                Ok(Pool {
                    data: try_zeroed(&what, cap * head_dim)?,
                    pos: try_zeroed(&what, cap)?,
                    len: 0,
                })
            };
            pairs.push(Pair {
                stream: streams.len(),
                mag_k: try_zeroed(&what, n_ctx * 2 * heads)?,
                mag_v: try_zeroed(&what, n_ctx * 2 * heads)?,
                pool_k: pool()?,
                pool_v: pool()?,
            });
            streams.push(Stream::new(spec.quant, spec.kivi, row, head_dim, n_ctx)?);
        }
        Ok(Self {
            spec: *spec,
            hp: hp.clone(),
            streams,
            roles,
            pairs,
            n_layer,
            row,
            head_dim,
            n_ctx,
            len: 0,
            retention: Retention::default(),
            jitter: (0.0, 0),
        })
    }

    pub fn spec(&self) -> &KvSpec {
        &self.spec
    }

    /// Use another retention rule (measurements of the design's alternatives; the cache must be
    /// empty for the results to mean anything).
    #[doc(hidden)]
    pub fn set_retention(&mut self, r: Retention) {
        self.retention = r;
    }

    /// Multiply every key and value written from now on by `1 + rel·(u − ½)`, `u` uniform in
    /// [0, 1) from a hash of (`seed`, layer, position, channel) — so the perturbation does not
    /// depend on the batching; `rel = 0` turns it off. A measurement knob, never used by the
    /// engine: with `rel` of a few f32 ulps (1e-6) it shows how far a format's perplexity moves
    /// under rounding-level differences of its inputs, such as the GPU's (which computes K and V
    /// in another summation order) — docs/measurements.md, "GPU/CPU gap".
    #[doc(hidden)]
    pub fn set_input_jitter(&mut self, rel: f32, seed: u32) {
        self.jitter = (rel, seed);
    }

    /// `x` (rows of `layer` from position `p0`) perturbed by [`KvCache::set_input_jitter`], or
    /// `None` when it is off.
    fn jittered(&self, layer: usize, p0: usize, x: &[f32]) -> Option<Vec<f32>> {
        let (rel, seed) = self.jitter;
        if rel == 0.0 {
            return None;
        }
        let row = self.row.max(1);
        let mix = |mut h: u32| {
            h ^= h >> 16;
            h = h.wrapping_mul(0x7feb_352d);
            h ^= h >> 15;
            h = h.wrapping_mul(0x846c_a68b);
            h ^ (h >> 16)
        };
        Some(
            x.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (p, c) = ((p0 + i / row) as u32, (i % row) as u32);
                    let h =
                        mix(seed ^ mix((layer as u32) ^ mix(p ^ mix(c.wrapping_add(0x9e37_79b9)))));
                    let u = (h >> 8) as f32 / (1u32 << 24) as f32;
                    v * (1.0 + rel * (u - 0.5))
                })
                .collect(),
        )
    }

    /// Number of positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum number of positions.
    pub fn capacity(&self) -> usize {
        self.n_ctx
    }

    /// Retained-token pool entries in use (all pairs, K and V).
    pub fn retained(&self) -> usize {
        self.pairs.iter().map(|p| p.pool_k.len + p.pool_v.len).sum()
    }

    /// Exact bytes in use for the positions held ([`KvSpec::bytes_held`]).
    pub fn bytes_in_use(&self) -> u64 {
        self.spec
            .bytes_held(&self.hp, self.len as u64, self.retained() as u64)
    }

    /// All bytes in use over the positions held — codes, scales, zero points, the f16 window,
    /// magnitudes, retained tokens (`kv_bytes_per_token`). An empty cache reports the bytes per
    /// position of a full one with no retained tokens.
    pub fn kv_bytes_per_token(&self) -> f64 {
        if self.len == 0 {
            let n = self.n_ctx.max(1) as u64;
            return self.spec.bytes_held(&self.hp, n, 0) as f64 / n as f64;
        }
        self.bytes_in_use() as f64 / self.len as f64
    }

    /// Bytes one position takes over all layers, keys and values, rounded (see
    /// [`KvCache::kv_bytes_per_token`]); `2 × n_layer × n_head_kv × head_dim × 4` for f32.
    pub fn bytes_per_token(&self) -> usize {
        self.kv_bytes_per_token().round() as usize
    }

    /// Bytes of the whole cache as allocated (every position, filled or not; full pools).
    pub fn bytes(&self) -> usize {
        let pairs: usize = self
            .pairs
            .iter()
            .map(|p| {
                2 * (p.mag_k.len() + p.mag_v.len())
                    + 2 * (p.pool_k.data.len() + p.pool_v.data.len())
                    + 4 * (p.pool_k.pos.len() + p.pool_v.pos.len())
            })
            .sum();
        self.streams.iter().map(Stream::bytes).sum::<usize>() + pairs
    }

    /// Keep the largest length `≤ n` that can be kept exactly and return it (module doc,
    /// "Truncation"; no-op when `n >= len` but for streams a failed pass wrote past `len`).
    pub fn truncate(&mut self, n: usize) -> usize {
        let m = n.min(self.len);
        let keep = self
            .streams
            .iter()
            .map(|s| s.safe_len(m))
            .min()
            .unwrap_or(m);
        for s in &mut self.streams {
            s.set_len(keep);
        }
        for p in &mut self.pairs {
            for pool in [&mut p.pool_k, &mut p.pool_v] {
                let used = pool.pos.get(..pool.len).unwrap_or_default();
                pool.len = used.partition_point(|&q| (q as usize) < keep);
            }
        }
        self.len = keep;
        keep
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// The layer's `[pos][kv_head][head_dim]` key and value slabs (all `n_ctx` positions) when
    /// it is stored as plain f32 in its own stream; empty slices otherwise.
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        match self.roles.get(layer) {
            Some(Role::Own(s)) => self
                .streams
                .get(*s)
                .and_then(Stream::f32_slabs)
                .unwrap_or_default(),
            _ => (&[], &[]),
        }
    }

    /// Append positions `len..len + n` for every layer, as the forward pass stores them (keys
    /// after RoPE): `k[l]`, `v[l]` are layer `l`'s `n` rows; MiniCache pairs are merged. For
    /// tests and GPU parity checks that need a cache with given contents.
    pub fn append_rows(&mut self, k: &[&[f32]], v: &[&[f32]]) -> Result<()> {
        if k.len() != self.n_layer || v.len() != self.n_layer {
            return Err(ReferenceError::shape(
                "KV cache append",
                "one slice per layer",
            ));
        }
        let p0 = self.len;
        let n = k.first().map_or(0, |x| x.len() / self.row.max(1));
        if p0 + n > self.n_ctx {
            return Err(ReferenceError::ContextOverflow {
                needed: p0 + n,
                capacity: self.n_ctx,
            });
        }
        let mut first = None;
        for l in 0..self.n_layer {
            let (kl, vl) = (
                k.get(l).copied().unwrap_or_default(),
                v.get(l).copied().unwrap_or_default(),
            );
            if kl.len() != n * self.row || vl.len() != n * self.row {
                return Err(ReferenceError::shape(
                    "KV cache append",
                    "rows differ between layers",
                ));
            }
            match self.role(l)? {
                Role::Own(_) => self.write_own(l, p0, kl, vl)?,
                Role::First(_) => first = Some((kl, vl)),
                Role::Second(pair) => {
                    let a = first.take().ok_or_else(|| {
                        ReferenceError::shape("KV cache append", "pair without its first layer")
                    })?;
                    self.write_pair(pair, p0, a, (kl, vl))?;
                }
            }
        }
        self.len = p0 + n;
        Ok(())
    }

    /// Layer `layer`'s key and value rows at position `p < len()`, dequantized (MiniCache layers
    /// rescaled / restored), `n_head_kv · head_dim` values each: what attention reads.
    pub fn read_row(&self, layer: usize, p: usize, k: &mut [f32], v: &mut [f32]) -> Result<()> {
        if p >= self.len || k.len() != self.row || v.len() != self.row {
            return Err(ReferenceError::shape(
                "KV cache read",
                format!("position {p} of {} with rows of {}", self.len, self.row),
            ));
        }
        self.read(layer, p, None, k, v)
    }

    /// Whether layer `layer` uses the plain f32 path (own f32 stream).
    pub(crate) fn is_plain_f32(&self, layer: usize) -> bool {
        !self.layer(layer).0.is_empty()
    }

    pub(crate) fn layer_mut(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        match self.roles.get(layer) {
            Some(Role::Own(s)) => match self.streams.get_mut(*s) {
                Some(st) => st.f32_slabs_mut().unwrap_or_default(),
                None => (&mut [], &mut []),
            },
            _ => (&mut [], &mut []),
        }
    }

    /// After writing a plain f32 layer's slabs directly: it holds `n` positions.
    pub(crate) fn mark_written(&mut self, layer: usize, n: usize) {
        if let Some(Role::Own(s)) = self.roles.get(layer) {
            if let Some(st) = self.streams.get_mut(*s) {
                st.written = n;
            }
        }
    }

    pub(crate) fn role(&self, layer: usize) -> Result<Role> {
        self.roles
            .get(layer)
            .copied()
            .ok_or_else(|| ReferenceError::shape("KV cache", format!("no layer {layer}")))
    }

    /// Write an unmerged layer's rows for positions `p0..` (`k`, `v`: whole rows).
    pub(crate) fn write_own(
        &mut self,
        layer: usize,
        p0: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<()> {
        let (jk, jv) = (
            self.jittered(2 * layer, p0, k),
            self.jittered(2 * layer + 1, p0, v),
        );
        let (k, v) = (jk.as_deref().unwrap_or(k), jv.as_deref().unwrap_or(v));
        match self.role(layer)? {
            Role::Own(s) => match self.streams.get_mut(s) {
                Some(st) => st.write(p0, k, v),
                None => Err(ReferenceError::shape("KV cache", "missing stream")),
            },
            _ => Err(ReferenceError::shape("KV cache", "layer is merged")),
        }
    }

    /// Merge and write pair `pair`'s rows for positions `p0..` (`ka`, `va`: layer `a`'s rows;
    /// `kb`, `vb`: layer `b`'s).
    pub(crate) fn write_pair(
        &mut self,
        pair: usize,
        p0: usize,
        (ka, va): (&[f32], &[f32]),
        (kb, vb): (&[f32], &[f32]),
    ) -> Result<()> {
        let Some(m) = self.spec.minicache else {
            return Err(ReferenceError::shape("KV cache", "no MiniCache"));
        };
        let (row, hd) = (self.row, self.head_dim);
        let heads = row / hd.max(1);
        if ka.len() != kb.len()
            || va.len() != vb.len()
            || ka.len() != va.len()
            || ka.len() % row != 0
        {
            return Err(ReferenceError::shape("MiniCache write", "rows differ"));
        }
        let n = ka.len() / row;
        let lj = 2 * self.n_layer + 4 * pair;
        let jit = [
            self.jittered(lj, p0, ka),
            self.jittered(lj + 1, p0, va),
            self.jittered(lj + 2, p0, kb),
            self.jittered(lj + 3, p0, vb),
        ];
        let [ka, va, kb, vb] = [(0, ka), (1, va), (2, kb), (3, vb)]
            .map(|(i, x)| jit.get(i).and_then(|j| j.as_deref()).unwrap_or(x));
        if p0 + n > self.n_ctx {
            return Err(ReferenceError::ContextOverflow {
                needed: p0 + n,
                capacity: self.n_ctx,
            });
        }
        let retention = self.retention;
        let Some(pr) = self.pairs.get_mut(pair) else {
            return Err(ReferenceError::shape("KV cache", format!("no pair {pair}")));
        };
        // A pass that failed after writing this pair at p0.. left entries past p0 in the pools.
        for pool in [&mut pr.pool_k, &mut pr.pool_v] {
            let used = pool.pos.get(..pool.len).unwrap_or_default();
            pool.len = used.partition_point(|&q| (q as usize) < p0);
        }
        let mut dk = vec![0.0f32; n * row];
        let mut dv = vec![0.0f32; n * row];
        for (xa, xb, dir, mag, pool) in [
            (ka, kb, &mut dk, &mut pr.mag_k, &mut pr.pool_k),
            (va, vb, &mut dv, &mut pr.mag_v, &mut pr.pool_v),
        ] {
            for i in 0..n {
                let p = p0 + i;
                for h in 0..heads {
                    let o = i * row + h * hd;
                    let (a, b) = (
                        xa.get(o..o + hd).unwrap_or_default(),
                        xb.get(o..o + hd).unwrap_or_default(),
                    );
                    let mg = slerp_merge(a, b, m.t);
                    let wants = match retention {
                        Retention::Distinct => mg.distance > m.gamma,
                        Retention::Similar => mg.distance < m.gamma,
                    };
                    let slot = pool.len;
                    let retain = wants && slot < pool.pos.len();
                    let d = dir.get_mut(o..o + hd).unwrap_or_default();
                    let mi = p * 2 * heads + h;
                    if let Some(x) = mag.get_mut(mi) {
                        *x = crate::kv_codec::f16_sat(mg.norm_a).to_bits();
                    }
                    let mb = crate::kv_codec::f16_sat(mg.norm_b).to_bits();
                    if retain {
                        for (d, u) in d.iter_mut().zip(unit(a, norm(a))) {
                            *d = u;
                        }
                        if let Some(dst) = pool.data.get_mut(slot * hd..(slot + 1) * hd) {
                            for (d, s) in dst.iter_mut().zip(b) {
                                *d = crate::kv_codec::f16_sat(*s);
                            }
                        }
                        if let Some(q) = pool.pos.get_mut(slot) {
                            *q = p as u32;
                        }
                        pool.len += 1;
                        if let Some(x) = mag.get_mut(mi + heads) {
                            *x = RETAINED | slot as u16;
                        }
                    } else {
                        d.copy_from_slice(&mg.dir);
                        if let Some(x) = mag.get_mut(mi + heads) {
                            *x = mb;
                        }
                    }
                }
            }
        }
        let stream = pr.stream;
        match self.streams.get_mut(stream) {
            Some(st) => st.write(p0, &dk, &dv),
            None => Err(ReferenceError::shape("KV cache", "missing stream")),
        }
    }

    /// Layer `layer`'s key and value rows of position `p` (`row` values each), dequantized;
    /// `pending`: layer `a`'s own rows for positions `pending.0..` not merged yet.
    pub(crate) fn read(
        &self,
        layer: usize,
        p: usize,
        pending: Option<(usize, &[f32], &[f32])>,
        k: &mut [f32],
        v: &mut [f32],
    ) -> Result<()> {
        let row = self.row;
        let role = self.role(layer)?;
        let stream = |i: usize| {
            self.streams
                .get(i)
                .ok_or_else(|| ReferenceError::shape("KV cache", "missing stream"))
        };
        match role {
            Role::Own(s) => stream(s)?.read(p, k, v),
            Role::First(pi) | Role::Second(pi) => {
                let second = matches!(role, Role::Second(_));
                if let (false, Some((p0, pk, pv))) = (second, pending) {
                    if p >= p0 {
                        let o = (p - p0) * row;
                        let bad = || ReferenceError::shape("MiniCache read", "pending rows");
                        k.copy_from_slice(pk.get(o..o + row).ok_or_else(bad)?);
                        v.copy_from_slice(pv.get(o..o + row).ok_or_else(bad)?);
                        return Ok(());
                    }
                }
                let pr = self
                    .pairs
                    .get(pi)
                    .ok_or_else(|| ReferenceError::shape("KV cache", "missing pair"))?;
                stream(pr.stream)?.read(p, k, v)?;
                let hd = self.head_dim;
                let heads = row / hd.max(1);
                for (out, mag, pool) in [(k, &pr.mag_k, &pr.pool_k), (v, &pr.mag_v, &pr.pool_v)] {
                    for (h, oh) in out.chunks_exact_mut(hd).enumerate() {
                        let bits = mag
                            .get(p * 2 * heads + usize::from(second) * heads + h)
                            .copied()
                            .unwrap_or(0);
                        if second && bits & RETAINED != 0 {
                            let slot = usize::from(bits & !RETAINED);
                            let src = pool
                                .data
                                .get(slot * hd..(slot + 1) * hd)
                                .unwrap_or_default();
                            for (d, s) in oh.iter_mut().zip(src) {
                                *d = s.to_f32();
                            }
                        } else {
                            let g = f16::from_bits(bits).to_f32();
                            for d in oh.iter_mut() {
                                *d *= g;
                            }
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[path = "kv_tests.rs"]
mod tests;
