//! A KV cache's layout on the GPU ([`KvLayout`]) and the store that writes (and quantizes) a
//! batch's keys or values into it ([`kv_store`]).
//!
//! Every format of `tern_format::kv` (the spec: the math of each format, its packing and its byte
//! accounting). One layer's keys, and its values, are one `array<u32>` buffer each (one binding),
//! in sections: codes (a position's row of codes starts at a word boundary; f32 as raw bits, f16
//! as pairs of halves), then the f16 parameters (absmax scales two per word; KIVI and the rotated
//! formats' (scale, min) pairs one per word), then — KIVI — the f16 window as a ring of `R` rows.
//! The rotated formats (q4r, q3r, q2r) store each kv head rotated by `H` (`tern_format::kv`),
//! one (scale, min) per (position, kv head); q3r's codes dense (a row is one bit string). `kv_store.wgsl`
//! documents the sections and the stages; [`KvLayout::geom`] is what the kernels read.
//!
//! A MiniCache pair's buffer ([`KvLayout::pair`]: the design of `tern_reference::kv`) holds the
//! pair's merged directions in those sections, then (from the same word in the key and the
//! value buffer) the magnitudes `[n_ctx][2][n_head_kv]` f16 (`heads` words per position), the
//! retained pool `[cap][head_dim]` f16, its positions `[cap]` u32 and its count (one u32).

use tern_format::{Kivi, KvQuant};

use crate::device::check::{check_buffer as need, u32_of};
use crate::device::context::GpuContext;
use crate::device::params::{KvGeom, StepParams};
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};

/// Where everything of one layer's keys and values lives (word offsets), for `n_ctx` positions of
/// `heads × head_dim` values in `quant` (KIVI with `kivi`'s G and R).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    pub quant: KvQuant,
    pub kivi: Kivi,
    pub heads: u64,
    pub head_dim: u64,
    pub n_ctx: u64,
    /// A MiniCache pair's buffer (magnitudes and the retained pool after the directions).
    pub pair: bool,
}

impl KvLayout {
    /// A layout, checked: a non-empty even row (f16 pairs), a context of at least one position,
    /// KIVI's G and R valid with a window of at least one group (`R ≥ G`: with `R = 0` a key
    /// group would be quantized before its G positions exist).
    pub fn new(quant: KvQuant, kivi: Kivi, heads: u64, head_dim: u64, n_ctx: u64) -> Result<Self> {
        let row = heads.saturating_mul(head_dim);
        if row == 0 || !row.is_multiple_of(2) || row > u64::from(u32::MAX) / 64 {
            return Err(GpuError::invalid(
                "kv cache",
                format!("{heads} kv heads × {head_dim}: the row must be even and non-zero"),
            ));
        }
        if n_ctx == 0 {
            return Err(GpuError::invalid("kv cache", "a context of 0 positions"));
        }
        if quant.is_rotated() {
            // The rotated formats: a power-of-two head_dim (the spec's check, typed), at most 256
            // (one head per workgroup of 256 invocations in the store and in attention).
            let hd = u32::try_from(head_dim).unwrap_or(u32::MAX);
            if !hd.is_power_of_two() {
                return Err(GpuError::invalid(
                    "kv cache",
                    tern_format::kv::KvSpecError::RotationHeadDim {
                        format: quant.name(),
                        head_dim: hd,
                    }
                    .to_string(),
                ));
            }
            if head_dim > 256 {
                return Err(GpuError::invalid(
                    "kv cache",
                    format!(
                        "KV format {} on the GPU takes head_dim up to 256, not {head_dim} (load \
                         with --device cpu)",
                        quant.name()
                    ),
                ));
            }
        }
        if quant.is_kivi() {
            kivi.check()
                .map_err(|e| GpuError::invalid("kv cache", e.to_string()))?;
            if kivi.residual < kivi.group {
                return Err(GpuError::invalid(
                    "kv cache",
                    format!(
                        "KIVI window R = {} below its group G = {}: the GPU cache needs R ≥ G",
                        kivi.residual, kivi.group
                    ),
                ));
            }
        }
        Ok(KvLayout {
            quant,
            kivi,
            heads,
            head_dim,
            n_ctx,
            pair: false,
        })
    }

    /// The layout of a MiniCache pair's buffers (directions in this format, then magnitudes and
    /// the retained pool); the GPU merge needs an even head_dim and at most 256 kv heads.
    pub fn pair(self) -> Result<Self> {
        if self.quant.is_rotated() {
            return Err(GpuError::invalid(
                "kv cache",
                format!(
                    "MiniCache with the rotated KV format {} runs on the CPU only (load with \
                     --device cpu)",
                    self.quant.name()
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) || self.heads > 256 {
            return Err(GpuError::invalid(
                "kv cache",
                format!(
                    "MiniCache on the GPU needs an even head_dim and at most 256 kv heads, not \
                     {} × {}",
                    self.heads, self.head_dim
                ),
            ));
        }
        Ok(KvLayout { pair: true, ..self })
    }

    /// Retained-pool entries of a pair holding up to `n` positions
    /// (`tern_format::MiniCache::pool_capacity`); 0 for a layer of its own.
    pub fn pool_cap(&self, n: u64) -> u64 {
        if self.pair {
            n.saturating_mul(self.heads).div_ceil(8).min(32768)
        } else {
            0
        }
    }

    /// Word offsets of a pair's magnitudes, pool, pool positions and count (for `n` positions).
    fn pair_words(&self, n: u64) -> [u64; 4] {
        let base = self.base_words(n, true).max(self.base_words(n, false));
        let mag = base;
        let pool = mag + n.saturating_mul(self.heads);
        let pos = pool + self.pool_cap(n) * self.head_dim / 2;
        [mag, pool, pos, pos + self.pool_cap(n)]
    }

    /// Values per position (`n_head_kv · head_dim`).
    pub fn row(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// Code words of one position's row (a3: of positions after the first).
    pub fn wpr(&self) -> u64 {
        self.quant.code_bytes(self.row()) / 4
    }

    /// Code words of position 0's row (a3 keeps it at 4 bits).
    pub fn wpr0(&self) -> u64 {
        match self.quant {
            KvQuant::Absmax3 => KvQuant::Absmax4.code_bytes(self.row()) / 4,
            _ => self.wpr(),
        }
    }

    fn code_words(&self, n: u64) -> u64 {
        match (self.quant, n) {
            (_, 0) => 0,
            (KvQuant::Absmax3, n) => self.wpr0() + (n - 1).saturating_mul(self.wpr()),
            (_, n) => n.saturating_mul(self.wpr()),
        }
    }

    /// Rotated formats: kv heads per store unit (`kv_quant.wgsl`'s `rot_unit_heads`: the fewest
    /// whole heads whose codes fill whole words, `u · head_dim · bits` a multiple of 32).
    pub fn rot_unit_heads(&self) -> u64 {
        let tz = (u64::from(self.quant.bits()) * self.head_dim)
            .trailing_zeros()
            .min(5);
        1 << (5 - tz)
    }

    /// Rotated formats: store units (workgroups) per position.
    pub fn rot_units(&self) -> u64 {
        self.heads.div_ceil(self.rot_unit_heads())
    }

    /// KIVI value groups per row.
    fn ngroups(&self) -> u64 {
        self.row().div_ceil(u64::from(self.kivi.group.max(1)))
    }

    /// Parameter words of `n` positions (keys or values).
    fn param_words(&self, n: u64, key: bool) -> u64 {
        match self.quant {
            KvQuant::F32 | KvQuant::F16 => 0,
            q if q.is_kivi() && key => (n / u64::from(self.kivi.group.max(1))) * self.row(),
            q if q.is_kivi() => n.saturating_mul(self.ngroups()),
            // rotated: one (scale, min) word per (position, kv head)
            q if q.is_rotated() => n.saturating_mul(self.heads),
            _ => n.saturating_mul(self.heads).div_ceil(2),
        }
    }

    /// Words of the KIVI window of a cache of `n` positions (`min(R, n)` f16 rows).
    fn window_words(&self, n: u64) -> u64 {
        if self.quant.is_kivi() {
            u64::from(self.kivi.residual).min(n) * self.row() / 2
        } else {
            0
        }
    }

    /// Word offset of position `p`'s codes in a buffer.
    pub fn code_word(&self, p: u64) -> u64 {
        match (self.quant, p) {
            (KvQuant::Absmax3, p) if p > 0 => self.wpr0() + (p - 1) * self.wpr(),
            _ => p * self.wpr(),
        }
    }

    /// Word offset of the parameter section (absmax scales, KIVI (scale, min) pairs).
    pub fn param_word(&self) -> u64 {
        self.code_words(self.n_ctx)
    }

    /// Word offset of the KIVI window of the key (`key`) or value buffer.
    pub fn window_word(&self, key: bool) -> u64 {
        self.param_word() + self.param_words(self.n_ctx, key)
    }

    /// Positions whose keys and values are quantized when `n` are held (KIVI: `R·⌊n/R⌋`, the
    /// rest in the f16 window; every other format: all of them).
    pub fn quantized(&self, n: u64) -> u64 {
        if self.quant.is_kivi() {
            let r = u64::from(self.kivi.residual.max(1));
            r * (n / r)
        } else {
            n
        }
    }

    /// Words of the directions' (or a layer's) sections of a buffer holding `n` positions.
    fn base_words(&self, n: u64, key: bool) -> u64 {
        self.code_words(n) + self.param_words(n, key) + self.window_words(n)
    }

    /// Words of one layer's key (or value) buffer holding `n` positions.
    fn words_for(&self, n: u64, key: bool) -> u64 {
        if self.pair {
            self.pair_words(n)[3] + 1
        } else {
            self.base_words(n, key)
        }
    }

    /// Word offsets of a pair buffer's magnitudes, pool, pool positions and count.
    pub fn pair_sections(&self) -> [u64; 4] {
        self.pair_words(self.n_ctx)
    }

    /// Bytes of one layer's key (`key`) or value buffer.
    pub fn buffer_bytes(&self, key: bool) -> u64 {
        self.words_for(self.n_ctx, key).saturating_mul(4)
    }

    /// The largest context whose buffers each fit `limit` bytes (0 when none does).
    pub fn max_positions_within(&self, limit: u64) -> u64 {
        let fits = |n: u64| (0..2).all(|k| self.words_for(n, k == 0).saturating_mul(4) <= limit);
        let (mut lo, mut hi) = (0u64, limit.max(1));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// Each buffer must fit one binding: else `TooLarge` naming the largest context that fits.
    pub fn check_binding(&self, ctx: &GpuContext) -> Result<()> {
        let limit = ctx.binding_limit();
        let bytes = self.buffer_bytes(true).max(self.buffer_bytes(false));
        if bytes > limit {
            return Err(GpuError::TooLarge {
                what: "KV cache".into(),
                detail: format!(
                    "{} positions × {} {} values = {bytes} bytes in one binding, the limit is \
                     {limit} bytes: use a context of at most {} positions",
                    self.n_ctx,
                    self.row(),
                    self.quant.name(),
                    self.max_positions_within(limit)
                ),
            });
        }
        Ok(())
    }

    /// The kernels' view (`kv_store.wgsl`'s `Geom`) for a batch of `n_tokens`.
    pub(crate) fn geom(&self, n_tokens: u64, key: bool) -> Result<KvGeom> {
        const OP: &str = "kv layout";
        let (par, k_win, v_win) = (
            self.param_word(),
            self.window_word(true),
            self.window_word(false),
        );
        let [mag, pool, pool_pos, count] = if self.pair {
            self.pair_sections()
        } else {
            [0; 4]
        };
        Ok(KvGeom {
            row: u32_of(OP, "row", self.row())?,
            heads: u32_of(OP, "heads", self.heads)?,
            head_dim: u32_of(OP, "head_dim", self.head_dim)?,
            n_ctx: u32_of(OP, "n_ctx", self.n_ctx)?,
            wpr: u32_of(OP, "wpr", self.wpr())?,
            wpr0: u32_of(OP, "wpr0", self.wpr0())?,
            par: u32_of(OP, "par", par)?,
            k_win: u32_of(OP, "k_win", k_win)?,
            v_win: u32_of(OP, "v_win", v_win)?,
            group: self.kivi.group.max(1),
            resid: self.kivi.residual.max(1),
            ngroups: u32_of(OP, "ngroups", self.ngroups())?,
            n_tokens: u32_of(OP, "n_tokens", n_tokens)?,
            is_key: u32::from(key),
            mag: u32_of(OP, "mag", mag)?,
            pool: u32_of(OP, "pool", pool)?,
            pool_pos: u32_of(OP, "pool_pos", pool_pos)?,
            count: u32_of(OP, "count", count)?,
            cap: u32_of(OP, "cap", self.pool_cap(self.n_ctx))?,
            pend: 0,
            rot_c: tern_format::kv::rot_scale(u32_of(OP, "head_dim", self.head_dim)?),
            ..KvGeom::default()
        })
    }

    /// Bytes of one layer's keys and values holding `n` positions as laid out here (codes,
    /// parameters, the window rows in use): the spec's accounting without the model's
    /// hyperparameters (benchmarks' traffic).
    pub fn layer_bytes_in_use_rows(&self, n: u64) -> u64 {
        let n = n.min(self.n_ctx);
        let q = self.quantized(n);
        let win_rows = if self.quant.is_kivi() { n - q } else { 0 };
        let per =
            |key| (self.code_words(q) + self.param_words(q, key)) * 4 + win_rows * self.row() * 2;
        per(true) + per(false)
    }

    /// Exact bytes one layer's keys and values take holding `n` positions (the spec's
    /// `KvQuant::layer_bytes`).
    pub fn layer_bytes_in_use(&self, hp: &tern_format::HParams, n: u64) -> u64 {
        self.quant.layer_bytes(hp, self.kivi, n.min(self.n_ctx))
    }
}

/// Record the store of `n_tokens` rows of `src` (`[n_tokens][row]` f32) into one layer's keys
/// (`key`) or values `cache` at positions `p0..` (p0 from `step`), quantizing as the format says:
/// one dispatch for whole-row formats; KIVI: the blocks of R positions that fill (keys per
/// channel over groups of G positions, values per position over groups of G channels), then
/// the new window rows.
#[allow(clippy::too_many_arguments)]
pub fn kv_store(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    layout: &KvLayout,
    step: &wgpu::Buffer,
    src: &wgpu::Buffer,
    cache: &wgpu::Buffer,
    n_tokens: u64,
    key: bool,
) -> Result<()> {
    const OP: &str = "kv_store";
    let row = layout.row();
    need(
        OP,
        "src",
        src,
        n_tokens.saturating_mul(row).saturating_mul(4),
    )?;
    need(OP, "cache", cache, layout.buffer_bytes(key))?;
    need(OP, "step", step, std::mem::size_of::<StepParams>() as u64)?;
    layout.check_binding(ctx)?;
    let geom = layout.geom(n_tokens, key)?;
    let params = ctx.uniform(bytemuck::bytes_of(&geom))?;
    let run = |enc: &mut _, key_: KernelKey, invocations: u64| -> Result<()> {
        let groups = invocations.div_ceil(256).max(1);
        let max = u64::from(ctx.limits.max_compute_workgroups_per_dimension.max(1));
        let (gx, gy) = (groups.min(max), groups.div_ceil(max).max(1));
        ctx.dispatch(
            enc,
            key_,
            &[&params, step, src, cache],
            (u32_of(OP, "groups", gx)?, u32_of(OP, "groups", gy)?, 1),
        )
    };
    let q = layout.quant;
    if q.is_rotated() {
        // kv_store.wgsl STAGE 7: a workgroup per (position, unit of kv heads)
        let groups = n_tokens.saturating_mul(layout.rot_units());
        return run(enc, KernelKey::KvStore(q), groups.saturating_mul(256));
    }
    if !q.is_kivi() {
        if q.is_absmax() {
            // the scales first (kv_store.wgsl STAGE 6: 8 entries per workgroup), then the codes
            run(
                enc,
                KernelKey::KvScales(q),
                scales_groups(layout, n_tokens) * 256,
            )?;
        }
        let words = layout.wpr().max(layout.wpr0());
        return run(enc, KernelKey::KvStore(q), n_tokens * words);
    }
    // the blocks of R positions that can fill in one batch: those overlapping [p0, p0 + n)
    let r = u64::from(layout.kivi.residual);
    let positions = n_tokens + r;
    let rows = if key {
        positions.div_ceil(u64::from(layout.kivi.group))
    } else {
        positions
    };
    // One token: a block that fills takes the token itself (below Q(n)), so the window gets no
    // row and the two stages never touch the same ring row: one dispatch
    // (kv_store.wgsl's STAGE 4 / 5), else the window after the blocks.
    let step1 = n_tokens == 1;
    run(
        enc,
        KernelKey::KvKivi {
            quant: q,
            keys: key,
            step: step1,
        },
        rows * layout.wpr() + if step1 { row / 2 } else { 0 },
    )?;
    if step1 {
        return Ok(());
    }
    run(enc, KernelKey::KvWindow, n_tokens * (row / 2))
}

/// Workgroups of the absmax scales pass for one cache and a batch of `n_tokens`
/// (`kv_quant.wgsl`'s `scales_groups`: 8 entries (position, kv head) each, from the word-aligned
/// entry before the batch's first).
pub(crate) fn scales_groups(layout: &KvLayout, n_tokens: u64) -> u64 {
    (n_tokens.saturating_mul(layout.heads) + 1).div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_format::HParams;

    fn hp(heads: u32, hd: u32) -> HParams {
        HParams {
            n_vocab: 10,
            n_embd: 64,
            n_layer: 1,
            n_head: heads,
            n_head_kv: heads,
            head_dim: hd,
            n_ff: 64,
            n_ctx_train: 64,
            rope_theta: 1e4,
            rope_dim: hd,
            rope_neox: true,
            rms_eps: 1e-5,
            ffn_act: tern_format::FfnAct::Silu,
            tied_embeddings: true,
            sub_norms: false,
        }
    }

    /// The preallocated buffers hold at least the spec's bytes at a full context; the whole-row
    /// formats at most the padding of a half-filled scale word more (one per buffer).
    #[test]
    fn buffers_cover_the_spec_bytes() {
        for (heads, hd) in [(3u64, 64u64), (5, 128), (1, 18), (2, 72)] {
            let h = hp(heads as u32, hd as u32);
            for q in KvQuant::ALL {
                if q.is_rotated() && !hd.is_power_of_two() {
                    assert!(KvLayout::new(q, Kivi::default(), heads, hd, 8).is_err());
                    continue;
                }
                for n in [1u64, 31, 128, 129, 1000] {
                    let kivi = Kivi::default();
                    let l = KvLayout::new(q, kivi, heads, hd, n).unwrap();
                    let alloc = l.buffer_bytes(true) + l.buffer_bytes(false);
                    let spec = q.layer_bytes(&h, kivi, n);
                    // KIVI: every position's codes and parameters are preallocated, and a
                    // whole window of R rows each for keys and values
                    assert!(alloc >= spec, "{q:?} n={n}: {alloc} < {spec}");
                    if !q.is_kivi() {
                        assert!(alloc >= spec && alloc <= spec + 8, "{q:?} n={n}");
                    }
                }
            }
        }
    }

    /// The rotated formats: the refusals are typed (a head_dim that is not a power of two, as the
    /// CPU's spec check; above 256; MiniCache over a rotated cache), the store units cover the row
    /// in whole words, one (scale, min) word per (position, kv head).
    #[test]
    fn rotated_layouts_and_refusals() {
        let k = Kivi::default();
        let bad = |r: Result<KvLayout>, what: &str| match r {
            Err(GpuError::InvalidArgument { detail, .. }) => {
                assert!(detail.contains(what), "{detail}")
            }
            other => panic!("expected InvalidArgument ({what}), got {other:?}"),
        };
        for q in [KvQuant::Rot4, KvQuant::Rot3, KvQuant::Rot2] {
            bad(KvLayout::new(q, k, 2, 96, 8), "not a power of two");
            bad(KvLayout::new(q, k, 1, 512, 8), "up to 256");
            let l = KvLayout::new(q, k, 3, 64, 10).unwrap();
            bad(l.pair(), "MiniCache");
            assert_eq!(l.window_word(true), l.param_word() + 10 * 3);
            for hd in [2u64, 4, 8, 16, 32, 64, 128, 256] {
                let l = KvLayout::new(q, k, 5, hd, 4).unwrap();
                let u = l.rot_unit_heads();
                // a unit's codes fill whole words; from head_dim 32 on a unit is one head
                assert_eq!(u * hd * u64::from(q.bits()) % 32, 0, "{q:?} {hd}");
                assert!(u * hd <= 256 && (hd < 32 || u == 1), "{q:?} {hd}: {u}");
                assert_eq!(l.rot_units(), 5u64.div_ceil(u));
            }
        }
        assert_eq!(
            KvLayout::new(KvQuant::Rot3, k, 4, 16, 1)
                .unwrap()
                .rot_unit_heads(),
            2
        );
    }

    #[test]
    fn max_positions_is_the_largest_that_fits() {
        let l = KvLayout::new(KvQuant::Kivi3, Kivi::default(), 5, 128, 1).unwrap();
        let limit = 1 << 20;
        let n = l.max_positions_within(limit);
        let fits = |n| {
            let l2 = KvLayout { n_ctx: n, ..l };
            l2.buffer_bytes(true).max(l2.buffer_bytes(false)) <= limit
        };
        assert!(fits(n) && !fits(n + 1), "{n}");
        assert!(KvLayout::new(
            KvQuant::Kivi4,
            Kivi {
                group: 32,
                residual: 0
            },
            1,
            64,
            8
        )
        .is_err());
        assert!(KvLayout::new(KvQuant::F16, Kivi::default(), 1, 7, 8).is_err());
    }
}
