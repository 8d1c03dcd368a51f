//! One "stream" of the reference KV cache: the keys and values of one layer (or of one MiniCache
//! pair's merged directions) for up to `n_ctx` positions, in one [`KvQuant`] format, laid out as
//! `kv`'s module doc says. Written in place (`write`), read one position at a time (`read`),
//! truncated exactly (`safe_len`, `set_len`).

use half::f16;
use tern_format::kv::{Kivi, KvQuant};

use crate::error::{try_zeroed, ReferenceError, Result};
use crate::kv_codec::{
    absmax_dequantize_row, absmax_format_at, absmax_quantize_row, kivi_dequantize_key,
    kivi_dequantize_values, kivi_quantize_keys, kivi_quantize_values, row_words, words_per_row,
};

/// Codes and one f16 scale per head, per position (q8, a4, a3).
#[derive(Debug, Clone)]
pub(crate) struct AbsmaxRows {
    pub(crate) codes: Vec<u32>,
    pub(crate) scales: Vec<f16>,
    /// a3 only: position 0 at 4 bits.
    pub(crate) codes0: Vec<u32>,
    pub(crate) scales0: Vec<f16>,
}

/// Rotated formats: codes and one f16 `(s, m)` per head, per position (keys and values alike).
#[derive(Debug, Clone)]
pub(crate) struct RotRows {
    pub(crate) codes: Vec<u32>,
    pub(crate) scales: Vec<f16>,
    pub(crate) mins: Vec<f16>,
}

#[derive(Debug, Clone)]
pub(crate) enum Store {
    F32 {
        k: Vec<f32>,
        v: Vec<f32>,
    },
    F16 {
        k: Vec<f16>,
        v: Vec<f16>,
    },
    Absmax {
        k: AbsmaxRows,
        v: AbsmaxRows,
    },
    Rot {
        k: RotRows,
        v: RotRows,
    },
    Kivi {
        /// `[n_ctx][wpp]` codes of quantized keys / values.
        k_codes: Vec<u32>,
        v_codes: Vec<u32>,
        /// Keys: `[n_ctx / G][row]` per-channel scale and zero point of each group.
        k_scales: Vec<f16>,
        k_mins: Vec<f16>,
        /// Values: `[n_ctx][⌈row / G⌉]`.
        v_scales: Vec<f16>,
        v_mins: Vec<f16>,
        /// The f16 window: `[R][row]`, position `p` at slot `p mod R`.
        k_win: Vec<f16>,
        v_win: Vec<f16>,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Stream {
    pub(crate) quant: KvQuant,
    kivi: Kivi,
    pub(crate) store: Store,
    row: usize,
    head_dim: usize,
    n_ctx: usize,
    /// Positions written (≥ the cache's length while a pass runs or after it failed).
    pub(crate) written: usize,
}

fn zeroed<T: Copy + Default>(what: &str, n: usize) -> Result<Vec<T>> {
    try_zeroed(what, n)
}

impl Stream {
    pub(crate) fn new(
        quant: KvQuant,
        kivi: Kivi,
        row: usize,
        head_dim: usize,
        n_ctx: usize,
    ) -> Result<Self> {
        let what = format!("a {} KV-cache layer of {n_ctx} positions", quant.name());
        let total = n_ctx
            .checked_mul(row)
            .ok_or_else(|| ReferenceError::shape("KV cache", format!("{what} overflows")))?;
        let heads = row / head_dim.max(1);
        let store = match quant {
            KvQuant::F32 => Store::F32 {
                k: zeroed(&what, total)?,
                v: zeroed(&what, total)?,
            },
            KvQuant::F16 => Store::F16 {
                k: zeroed(&what, total)?,
                v: zeroed(&what, total)?,
            },
            KvQuant::Q8 | KvQuant::Absmax4 | KvQuant::Absmax3 => {
                let wpp = words_per_row(quant.bits(), row);
                let rows = || -> Result<AbsmaxRows> {
                    let first = quant == KvQuant::Absmax3;
                    Ok(AbsmaxRows {
                        codes: zeroed(&what, n_ctx * wpp)?,
                        scales: zeroed(&what, n_ctx * heads)?,
                        codes0: zeroed(&what, if first { words_per_row(4, row) } else { 0 })?,
                        scales0: zeroed(&what, if first { heads } else { 0 })?,
                    })
                };
                Store::Absmax {
                    k: rows()?,
                    v: rows()?,
                }
            }
            KvQuant::Rot4 | KvQuant::Rot3 | KvQuant::Rot2 => {
                let wpp = row_words(quant, row);
                let rows = || -> Result<RotRows> {
                    Ok(RotRows {
                        codes: zeroed(&what, n_ctx * wpp)?,
                        scales: zeroed(&what, n_ctx * heads)?,
                        mins: zeroed(&what, n_ctx * heads)?,
                    })
                };
                Store::Rot {
                    k: rows()?,
                    v: rows()?,
                }
            }
            KvQuant::Kivi4 | KvQuant::Kivi3 | KvQuant::Kivi2 => {
                let (g, r) = (kivi.group as usize, kivi.residual as usize);
                let wpp = words_per_row(quant.bits(), row);
                let win = r.min(n_ctx.max(1)) * row;
                Store::Kivi {
                    k_codes: zeroed(&what, n_ctx * wpp)?,
                    v_codes: zeroed(&what, n_ctx * wpp)?,
                    k_scales: zeroed(&what, n_ctx.div_ceil(g.max(1)) * row)?,
                    k_mins: zeroed(&what, n_ctx.div_ceil(g.max(1)) * row)?,
                    v_scales: zeroed(&what, n_ctx * row.div_ceil(g.max(1)))?,
                    v_mins: zeroed(&what, n_ctx * row.div_ceil(g.max(1)))?,
                    k_win: zeroed(&what, win)?,
                    v_win: zeroed(&what, win)?,
                }
            }
        };
        Ok(Self {
            quant,
            kivi,
            store,
            row,
            head_dim,
            n_ctx,
            written: 0,
        })
    }

    /// Bytes allocated.
    pub(crate) fn bytes(&self) -> usize {
        fn b<T>(v: &[T]) -> usize {
            std::mem::size_of_val(v)
        }
        match &self.store {
            Store::F32 { k, v } => b(k) + b(v),
            Store::F16 { k, v } => b(k) + b(v),
            Store::Absmax { k, v } => [k, v]
                .iter()
                .map(|r| b(&r.codes) + b(&r.scales) + b(&r.codes0) + b(&r.scales0))
                .sum(),
            Store::Rot { k, v } => [k, v]
                .iter()
                .map(|r| b(&r.codes) + b(&r.scales) + b(&r.mins))
                .sum(),
            Store::Kivi {
                k_codes,
                v_codes,
                k_scales,
                k_mins,
                v_scales,
                v_mins,
                k_win,
                v_win,
            } => {
                b(k_codes)
                    + b(v_codes)
                    + b(k_scales)
                    + b(k_mins)
                    + b(v_scales)
                    + b(v_mins)
                    + b(k_win)
                    + b(v_win)
            }
        }
    }

    /// The f32 slabs (`[pos][row]`), for the plain f32 attention path.
    pub(crate) fn f32_slabs(&self) -> Option<(&[f32], &[f32])> {
        match &self.store {
            Store::F32 { k, v } => Some((k, v)),
            _ => None,
        }
    }

    pub(crate) fn f32_slabs_mut(&mut self) -> Option<(&mut [f32], &mut [f32])> {
        match &mut self.store {
            Store::F32 { k, v } => Some((k, v)),
            _ => None,
        }
    }

    /// Write positions `p0..p0 + n` (`k`, `v`: `n` rows). `p0` must be the stream's written
    /// length or an exact truncation point below it.
    pub(crate) fn write(&mut self, p0: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let row = self.row;
        let n = k.len() / row.max(1);
        if k.len() != n * row || v.len() != k.len() || p0 + n > self.n_ctx {
            return Err(ReferenceError::shape(
                "KV cache write",
                format!(
                    "{} values at position {p0} of {} (rows of {row})",
                    k.len(),
                    self.n_ctx
                ),
            ));
        }
        if p0 != self.written {
            if p0 < self.written && self.safe_len(p0) == p0 {
                self.written = p0;
            } else {
                return Err(ReferenceError::CacheMismatch {
                    detail: format!(
                        "write at position {p0} but the layer holds {} (truncate first)",
                        self.written
                    ),
                });
            }
        }
        let (quant, hd) = (self.quant, self.head_dim);
        let heads = row / hd.max(1);
        let (g, r) = (self.kivi.group as usize, self.kivi.residual as usize);
        for i in 0..n {
            let p = p0 + i;
            let (kr, vr) = (&k[i * row..(i + 1) * row], &v[i * row..(i + 1) * row]); // ok: n·row = len
            match &mut self.store {
                Store::F32 { k, v } => {
                    k[p * row..(p + 1) * row].copy_from_slice(kr); // ok: p < n_ctx
                    v[p * row..(p + 1) * row].copy_from_slice(vr); // ok: p < n_ctx
                }
                Store::F16 { k, v } => {
                    for (d, s) in k[p * row..(p + 1) * row].iter_mut().zip(kr) {
                        *d = crate::kv_codec::f16_sat(*s); // ok: p < n_ctx
                    }
                    for (d, s) in v[p * row..(p + 1) * row].iter_mut().zip(vr) {
                        *d = crate::kv_codec::f16_sat(*s); // ok: p < n_ctx
                    }
                }
                Store::Absmax { k, v } => {
                    let q = absmax_format_at(quant, p);
                    for (rows, x) in [(k, kr), (v, vr)] {
                        if q != quant {
                            absmax_quantize_row(q, x, hd, &mut rows.codes0, &mut rows.scales0)?;
                        } else {
                            let wpp = words_per_row(quant.bits(), row);
                            let codes = rows.codes.get_mut(p * wpp..(p + 1) * wpp);
                            let scales = rows.scales.get_mut(p * heads..(p + 1) * heads);
                            if let (Some(c), Some(s)) = (codes, scales) {
                                absmax_quantize_row(q, x, hd, c, s)?;
                            }
                        }
                    }
                }
                Store::Rot { k, v } => {
                    let wpp = row_words(quant, row);
                    for (rows, x) in [(k, kr), (v, vr)] {
                        let codes = rows.codes.get_mut(p * wpp..(p + 1) * wpp);
                        let scales = rows.scales.get_mut(p * heads..(p + 1) * heads);
                        let mins = rows.mins.get_mut(p * heads..(p + 1) * heads);
                        if let (Some(c), Some(s), Some(m)) = (codes, scales, mins) {
                            kivi_quantize_values(quant, hd, x, c, s, m)?;
                        }
                    }
                }
                Store::Kivi { k_win, v_win, .. } => {
                    let slot = p % r.max(1);
                    for (d, s) in k_win[slot * row..(slot + 1) * row].iter_mut().zip(kr) {
                        *d = crate::kv_codec::f16_sat(*s); // ok: slot < R, win = R rows
                    }
                    for (d, s) in v_win[slot * row..(slot + 1) * row].iter_mut().zip(vr) {
                        *d = crate::kv_codec::f16_sat(*s); // ok: slot < R
                    }
                    if (p + 1) % r.max(1) == 0 {
                        self.quantize_block(p + 1 - r, g, r)?;
                    }
                }
            }
        }
        self.written = p0 + n;
        Ok(())
    }

    /// KIVI: quantize the block of `r` positions starting at `b0` from its f16 window rows.
    fn quantize_block(&mut self, b0: usize, g: usize, r: usize) -> Result<()> {
        let (quant, row) = (self.quant, self.row);
        let wpp = words_per_row(quant.bits(), row);
        let vg = row.div_ceil(g.max(1));
        let Store::Kivi {
            k_codes,
            v_codes,
            k_scales,
            k_mins,
            v_scales,
            v_mins,
            k_win,
            v_win,
        } = &mut self.store
        else {
            return Ok(());
        };
        let to_f32 = |w: &[f16]| -> Vec<f32> { w.iter().map(|h| h.to_f32()).collect() };
        let keys = to_f32(k_win.get(..r * row).unwrap_or_default());
        let vals = to_f32(v_win.get(..r * row).unwrap_or_default());
        // The window holds positions b0.. at slots 0.. (b0 is a multiple of R).
        for j in 0..r / g.max(1) {
            let p = b0 + j * g;
            let gi = p / g;
            let x = keys.get(j * g * row..(j + 1) * g * row).unwrap_or_default();
            let (Some(c), Some(s), Some(m)) = (
                k_codes.get_mut(p * wpp..(p + g) * wpp),
                k_scales.get_mut(gi * row..(gi + 1) * row),
                k_mins.get_mut(gi * row..(gi + 1) * row),
            ) else {
                return Err(ReferenceError::shape("KIVI block", "out of the cache"));
            };
            kivi_quantize_keys(quant, row, x, c, s, m)?;
        }
        for j in 0..r {
            let p = b0 + j;
            let x = vals.get(j * row..(j + 1) * row).unwrap_or_default();
            let (Some(c), Some(s), Some(m)) = (
                v_codes.get_mut(p * wpp..(p + 1) * wpp),
                v_scales.get_mut(p * vg..(p + 1) * vg),
                v_mins.get_mut(p * vg..(p + 1) * vg),
            ) else {
                return Err(ReferenceError::shape("KIVI block", "out of the cache"));
            };
            kivi_quantize_values(quant, g, x, c, s, m)?;
        }
        Ok(())
    }

    /// Dequantize position `p` (`< written`) into `k`, `v` (`row` values each).
    pub(crate) fn read(&self, p: usize, k: &mut [f32], v: &mut [f32]) -> Result<()> {
        let (quant, row, hd) = (self.quant, self.row, self.head_dim);
        let heads = row / hd.max(1);
        let bad = || ReferenceError::shape("KV cache read", format!("position {p} out of range"));
        match &self.store {
            Store::F32 { k: ks, v: vs } => {
                k.copy_from_slice(ks.get(p * row..(p + 1) * row).ok_or_else(bad)?);
                v.copy_from_slice(vs.get(p * row..(p + 1) * row).ok_or_else(bad)?);
            }
            Store::F16 { k: ks, v: vs } => {
                let (kk, vv) = (
                    ks.get(p * row..(p + 1) * row).ok_or_else(bad)?,
                    vs.get(p * row..(p + 1) * row).ok_or_else(bad)?,
                );
                for (d, s) in k.iter_mut().zip(kk) {
                    *d = s.to_f32();
                }
                for (d, s) in v.iter_mut().zip(vv) {
                    *d = s.to_f32();
                }
            }
            Store::Absmax { k: kr, v: vr } => {
                let q = absmax_format_at(quant, p);
                for (rows, out) in [(kr, k), (vr, v)] {
                    if q != quant {
                        absmax_dequantize_row(q, &rows.codes0, &rows.scales0, hd, out)?;
                    } else {
                        let wpp = words_per_row(quant.bits(), row);
                        let c = rows.codes.get(p * wpp..(p + 1) * wpp).ok_or_else(bad)?;
                        let s = rows
                            .scales
                            .get(p * heads..(p + 1) * heads)
                            .ok_or_else(bad)?;
                        absmax_dequantize_row(q, c, s, hd, out)?;
                    }
                }
            }
            Store::Rot { k: kr, v: vr } => {
                let wpp = row_words(quant, row);
                for (rows, out) in [(kr, k), (vr, v)] {
                    let c = rows.codes.get(p * wpp..(p + 1) * wpp).ok_or_else(bad)?;
                    let s = rows.scales.get(p * heads..(p + 1) * heads);
                    let m = rows.mins.get(p * heads..(p + 1) * heads);
                    let (s, m) = (s.ok_or_else(bad)?, m.ok_or_else(bad)?);
                    kivi_dequantize_values(quant, hd, c, s, m, out)?;
                }
            }
            Store::Kivi {
                k_codes,
                v_codes,
                k_scales,
                k_mins,
                v_scales,
                v_mins,
                k_win,
                v_win,
            } => {
                let (g, r) = (self.kivi.group as usize, self.kivi.residual.max(1) as usize);
                if p < r * (self.written / r) {
                    let wpp = words_per_row(quant.bits(), row);
                    let vg = row.div_ceil(g.max(1));
                    let gi = p / g.max(1);
                    kivi_dequantize_key(
                        quant,
                        k_codes.get(p * wpp..(p + 1) * wpp).ok_or_else(bad)?,
                        k_scales.get(gi * row..(gi + 1) * row).ok_or_else(bad)?,
                        k_mins.get(gi * row..(gi + 1) * row).ok_or_else(bad)?,
                        k,
                    )?;
                    kivi_dequantize_values(
                        quant,
                        g,
                        v_codes.get(p * wpp..(p + 1) * wpp).ok_or_else(bad)?,
                        v_scales.get(p * vg..(p + 1) * vg).ok_or_else(bad)?,
                        v_mins.get(p * vg..(p + 1) * vg).ok_or_else(bad)?,
                        v,
                    )?;
                } else {
                    let slot = p % r;
                    let kk = k_win.get(slot * row..(slot + 1) * row).ok_or_else(bad)?;
                    let vv = v_win.get(slot * row..(slot + 1) * row).ok_or_else(bad)?;
                    for (d, s) in k.iter_mut().zip(kk) {
                        *d = s.to_f32();
                    }
                    for (d, s) in v.iter_mut().zip(vv) {
                        *d = s.to_f32();
                    }
                }
            }
        }
        Ok(())
    }

    /// The largest length `≤ m` this stream can be truncated to exactly (module doc,
    /// "Truncation"): `m` except for KIVI inside a block that was quantized, where it is the
    /// block's start.
    pub(crate) fn safe_len(&self, m: usize) -> usize {
        let m = m.min(self.written);
        if !self.quant.is_kivi() {
            return m;
        }
        let r = self.kivi.residual.max(1) as usize;
        if m % r == 0 || m / r == self.written / r {
            m
        } else {
            r * (m / r)
        }
    }

    /// Keep `m` positions (`m` from [`Stream::safe_len`]).
    pub(crate) fn set_len(&mut self, m: usize) {
        self.written = self.written.min(m);
    }
}
