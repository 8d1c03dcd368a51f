//! Ternary weights kept as stored (tern's 2bit and base3 code layouts, `tern_format::ternary`) and
//! the dot products that run on the codes directly.
//!
//! **Memory.** A [`TernaryWeights`] holds the file's code bytes and scale bytes, nothing else: 2 or
//! 1.6 bits per weight instead of one byte per trit.
//!
//! **Integer activations (BitNet).** A row's value is `Σ_g scale_g · Σ_{c∈g} t_c · q_c` with i32
//! inner sums and f32 across groups in group order — the definition the GPU kernels and the old
//! unpacked reference use, so the results are bit-identical to it (integer sums do not depend on
//! their order). With codes `k = t + 1 ∈ {0, 1, 2}` (2bit: the code; base3: the digit),
//! `Σ t·q = Σ k·q − Σ q`; `Σ q` per group is computed once per token ([`TernActs`]). The codes are
//! read 32 bytes at a time (a *chunk*: 128 elements in 2bit, 160 in base3) as 4 or 5 *planes* of
//! 32 codes each — plane `p` of byte `i` is element `4i + p` (2bit, bits `2p..2p+2`) or `5i + p`
//! (base3 digit `p`) — and the activations are permuted once per token into the same plane order,
//! so a plane is one shift-and-mask (2bit) or one multiply-and-compare (base3) of the 32 bytes and
//! one `u8 × i8` multiply-add against 32 contiguous activations (AVX2 `vpmaddubsw` when available,
//! the same integer arithmetic in plain Rust otherwise). Padding elements after the last column
//! meet zero activations, so whatever their codes they add nothing.
//!
//! Scale groups at least a chunk long (any per-tensor scale; 256-element groups from TQ1_0/TQ2_0
//! blocks) split a chunk that straddles a group boundary into two passes, each against its own
//! group's activations (the others zeroed in the prepared copy). Shorter groups take the plain
//! path: the row's trits are decoded into a per-thread buffer and dotted as before. So do float
//! activations ([`TernaryWeights::dot_f32`]), whose sums are order-dependent.

use tern_format::ternary::{codes_bytes, scale_count, words_per_row};
use tern_format::{Encoding, FloatType, FormatError, TernaryLayout};

use crate::error::{check_len, ReferenceError, Result};

/// Code bytes read at a time.
const CHUNK_BYTES: usize = 32;

/// Ternary weights as stored: the codes region and the scales region of the file.
#[derive(Debug, Clone)]
pub struct TernaryWeights {
    layout: TernaryLayout,
    rows: usize,
    cols: usize,
    /// Bytes of one row's codes (a whole number of `u32` words).
    row_bytes: usize,
    codes: Vec<u8>,
    scale_type: FloatType,
    /// The scales as stored (`scale_type`, little-endian), all finite.
    scales: Vec<u8>,
    /// Consecutive elements of a row sharing a scale; `0` = one scale for the whole tensor.
    group: usize,
}

/// Activations of a block of tokens prepared for the packed integer dots: quantized values
/// permuted into plane order and zero-padded to whole chunks, and `Σ q` per scale group.
pub(crate) struct TernActs {
    qp: Vec<i8>,
    /// `qp` elements per token (the runs' chunks).
    stride: usize,
    qsum: Vec<i32>,
    /// Scale groups per row.
    n_groups: usize,
    /// A row's chunks as runs of consecutive chunks within one scale group, in order; a chunk that
    /// straddles a group boundary is in two runs, each seeing only its group's activations.
    runs: Vec<Run>,
}

/// Chunks `c0 .. c0 + n` of a row, against activations of scale group `group` only.
#[derive(Debug, Clone, Copy)]
struct Run {
    c0: usize,
    n: usize,
    group: usize,
}

fn planes(layout: TernaryLayout) -> usize {
    match layout {
        TernaryLayout::Bits2 => 4,
        TernaryLayout::Base3 => 5,
    }
}

/// Elements per chunk.
fn chunk_elems(layout: TernaryLayout) -> usize {
    planes(layout) * CHUNK_BYTES
}

fn usize_of(x: u64, what: &str) -> Result<usize> {
    usize::try_from(x).map_err(|_| ReferenceError::shape("ternary weights", format!("{what} {x}")))
}

fn read_scale(t: FloatType, b: &[u8]) -> f32 {
    match (t, b) {
        (FloatType::F32, [a, b, c, d, ..]) => f32::from_le_bytes([*a, *b, *c, *d]),
        (FloatType::F16, [a, b, ..]) => half::f16::from_le_bytes([*a, *b]).to_f32(),
        (FloatType::Bf16, [a, b, ..]) => half::bf16::from_le_bytes([*a, *b]).to_f32(),
        _ => f32::NAN,
    }
}

/// Digit `n` (0..5) of a base-3 byte: `((byte · 3^n) mod 256 · 3) >> 8`.
#[inline(always)]
fn base3_digit(byte: u8, n: usize) -> u8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let q = byte.wrapping_mul(POW3.get(n).copied().unwrap_or(1));
    ((u16::from(q) * 3) >> 8) as u8 // ok: ≤ 2
}

impl TernaryWeights {
    /// Keep a ternary tensor's stored bytes (`encoding` must be `Encoding::Ternary`). Checks the
    /// length, that no 2bit code of a real element is the invalid code 3, and that every scale is
    /// finite.
    pub fn from_stored(
        name: &str,
        rows: usize,
        cols: usize,
        encoding: &Encoding,
        bytes: &[u8],
    ) -> Result<Self> {
        let Encoding::Ternary {
            layout,
            group,
            scale_type,
        } = *encoding
        else {
            return Err(ReferenceError::NotTernary {
                name: name.into(),
                detail: format!("encoding {} is not ternary", encoding.name()),
            });
        };
        // Checks the length exactly (codes + scales for this shape and group).
        let view = tern_format::ternary::TernaryRef::new(
            layout,
            rows as u64,
            cols as u64,
            group,
            scale_type,
            bytes,
        )?;
        let n_code = usize_of(codes_bytes(layout, rows as u64, cols as u64)?, "codes")?;
        let row_bytes = usize_of(
            words_per_row(layout, cols as u64).saturating_mul(4),
            "row bytes",
        )?;
        let n_scales = usize_of(scale_count(rows as u64, cols as u64, group)?, "scales")?;
        let w = Self {
            layout,
            rows,
            cols,
            row_bytes,
            codes: view.codes().get(..n_code).unwrap_or_default().to_vec(),
            scale_type,
            scales: view.scales().to_vec(),
            group: group as usize,
        };
        for i in 0..n_scales {
            let s = w.scale(i);
            if !s.is_finite() {
                return Err(ReferenceError::NotTernary {
                    name: name.into(),
                    detail: format!("scale {i} is {s}"),
                });
            }
        }
        if layout == TernaryLayout::Bits2 {
            w.check_codes()?;
        }
        Ok(w)
    }

    /// 2bit: no real element has code 3 (padding codes are never used against a non-zero
    /// activation, so they are not checked, as before).
    fn check_codes(&self) -> Result<()> {
        let full = self.cols / 4;
        let tail = self.cols % 4;
        for (r, row) in self
            .codes
            .chunks_exact(self.row_bytes.max(1))
            .enumerate()
            .take(self.rows)
        {
            let mut bad = row
                .get(..full)
                .unwrap_or_default()
                .iter()
                .position(|&b| b & (b >> 1) & 0x55 != 0)
                .map(|i| (i, row.get(i).copied().unwrap_or(0)));
            if bad.is_none() && tail > 0 {
                let b = row.get(full).copied().unwrap_or(0);
                let mask = (1u8 << (2 * tail)) - 1; // ok: tail ≤ 3
                if b & (b >> 1) & 0x55 & mask != 0 {
                    bad = Some((full, b));
                }
            }
            if let Some((i, b)) = bad {
                let k = (0..4).find(|k| (b >> (2 * k)) & 3 == 3).unwrap_or(0);
                return Err(FormatError::Corrupt {
                    codec: "ternary 2bit",
                    detail: format!("invalid code 3 at row {r}, column {}", i * 4 + k),
                }
                .into());
            }
        }
        Ok(())
    }

    pub fn layout(&self) -> TernaryLayout {
        self.layout
    }

    /// Scale group size (`0` = one scale for the whole tensor).
    pub fn group(&self) -> usize {
        self.group
    }

    /// Bytes held (codes + scales).
    pub fn resident_bytes(&self) -> usize {
        self.codes.len() + self.scales.len()
    }

    /// Scale number `i` (row-major order of the groups; `0` when `group == 0`).
    pub fn scale(&self, i: usize) -> f32 {
        let sz = self.scale_type.size();
        i.checked_mul(sz)
            .and_then(|s| self.scales.get(s..s + sz))
            .map_or(0.0, |b| read_scale(self.scale_type, b))
    }

    /// Scales per row (1 for a per-tensor scale, whose index is then 0 for every row).
    fn groups_per_row(&self) -> usize {
        if self.group == 0 {
            1
        } else {
            self.cols / self.group
        }
    }

    /// The scale index of group `g` of row `r`.
    fn scale_index(&self, r: usize, g: usize) -> usize {
        if self.group == 0 {
            0
        } else {
            r * self.groups_per_row() + g
        }
    }

    fn row_codes(&self, r: usize) -> &[u8] {
        self.codes
            .get(r * self.row_bytes..(r + 1) * self.row_bytes)
            .unwrap_or_default()
    }

    /// Row `r`'s trits into `out` (`cols` of them).
    pub fn row_trits(&self, r: usize, out: &mut [i8]) -> Result<()> {
        check_len("TernaryWeights::row_trits", "out", out.len(), self.cols)?;
        if r >= self.rows {
            return Err(ReferenceError::shape(
                "TernaryWeights::row_trits",
                format!("row {r} of {}", self.rows),
            ));
        }
        self.decode_row(r, out);
        Ok(())
    }

    #[inline(always)]
    fn decode_row(&self, r: usize, out: &mut [i8]) {
        let row = self.row_codes(r);
        match self.layout {
            TernaryLayout::Bits2 => {
                for (&b, o) in row.iter().zip(out.chunks_mut(4)) {
                    for (k, t) in o.iter_mut().enumerate() {
                        *t = ((b >> (2 * k)) & 3) as i8 - 1;
                    }
                }
            }
            TernaryLayout::Base3 => {
                for (&b, o) in row.iter().zip(out.chunks_mut(5)) {
                    for (n, t) in o.iter_mut().enumerate() {
                        *t = base3_digit(b, n) as i8 - 1;
                    }
                }
            }
        }
    }

    /// Row `r` as f32 (`t · scale`).
    pub fn row_f32(&self, r: usize, out: &mut [f32], trits: &mut Vec<i8>) -> Result<()> {
        check_len("TernaryWeights::row_f32", "out", out.len(), self.cols)?;
        trits.resize(self.cols, 0);
        self.row_trits(r, trits)?;
        let g = if self.group == 0 {
            self.cols.max(1)
        } else {
            self.group
        };
        for (gi, (og, tg)) in out.chunks_mut(g).zip(trits.chunks(g)).enumerate() {
            let s = self.scale(self.scale_index(r, gi));
            for (o, &t) in og.iter_mut().zip(tg) {
                // a zero is +0.0 whatever the scale's sign (as the values' trits always gave)
                let v = t as f32 * s;
                *o = if v == 0.0 { 0.0 } else { v };
            }
        }
        Ok(())
    }

    /// Whether the packed integer dots apply: a chunk meets at most two scale groups.
    fn packed_dots(&self) -> bool {
        self.group == 0 || self.group >= chunk_elems(self.layout)
    }

    /// The runs of [`TernActs::runs`] for this tensor's shape.
    fn runs(&self) -> Vec<Run> {
        let k = chunk_elems(self.layout);
        let g = self.group_len();
        let n_chunks = self.row_bytes.div_ceil(CHUNK_BYTES);
        let mut runs: Vec<Run> = Vec::new();
        for c in 0..n_chunks {
            let lo = (c * k).min(self.cols.saturating_sub(1)) / g;
            let hi = ((c + 1) * k).min(self.cols).saturating_sub(1) / g;
            for group in lo..=hi.max(lo) {
                match runs.last_mut() {
                    Some(r) if r.group == group && r.c0 + r.n == c => r.n += 1,
                    _ => runs.push(Run { c0: c, n: 1, group }),
                }
            }
        }
        runs
    }

    /// Prepare `n` tokens of quantized activations `q` (`[n][cols]`) for [`Self::dot_int`], or
    /// `None` when this tensor takes the plain path.
    pub(crate) fn prepare(&self, q: &[i8], n: usize) -> Option<TernActs> {
        if !self.packed_dots() || self.cols == 0 {
            return None;
        }
        let p = planes(self.layout);
        let k = chunk_elems(self.layout);
        let runs = self.runs();
        let stride = runs.iter().map(|r| r.n).sum::<usize>() * k;
        let n_groups = self.groups_per_row();
        let g = self.group_len();
        let mut qp = vec![0i8; stride * n];
        let mut qsum = vec![0i32; n_groups * n];
        for ((qt, pt), st) in q
            .chunks_exact(self.cols)
            .zip(qp.chunks_exact_mut(stride.max(1)))
            .zip(qsum.chunks_exact_mut(n_groups))
        {
            let chunks = runs
                .iter()
                .flat_map(|r| (r.c0..r.c0 + r.n).map(move |c| (c, r.group)));
            for ((c, group), pc) in chunks.zip(pt.chunks_exact_mut(k)) {
                let base = c * k;
                for (plane, pp) in pc.chunks_exact_mut(CHUNK_BYTES).enumerate() {
                    for (i, d) in pp.iter_mut().enumerate() {
                        let e = base + p * i + plane;
                        *d = match qt.get(e) {
                            Some(&v) if e / g == group => v,
                            _ => 0,
                        };
                    }
                }
            }
            for (s, qg) in st.iter_mut().zip(qt.chunks(g)) {
                *s = qg.iter().map(|&v| i32::from(v)).sum();
            }
        }
        Some(TernActs {
            qp,
            stride,
            qsum,
            n_groups,
            runs,
        })
    }

    /// `Σ_g scale_g · Σ_{c∈g} t_c · q_c` of row `r` and prepared token `t` (integer inner sums,
    /// f32 across groups in group order).
    #[inline(always)]
    pub(crate) fn dot_packed(&self, r: usize, acts: &TernActs, t: usize) -> f32 {
        let row = self.row_codes(r);
        let qp = acts
            .qp
            .get(t * acts.stride..(t + 1) * acts.stride)
            .unwrap_or_default();
        let qs = acts
            .qsum
            .get(t * acts.n_groups..(t + 1) * acts.n_groups)
            .unwrap_or_default();
        let k = chunk_elems(self.layout);
        let mut sum = 0.0f32;
        let mut off = 0;
        let mut cur: Option<(usize, i32)> = None; // (group, Σ k·q so far)
        let flush = |sum: &mut f32, (g, acc): (usize, i32)| {
            let acc = acc.wrapping_sub(qs.get(g).copied().unwrap_or(0));
            *sum += acc as f32 * self.scale(self.scale_index(r, g));
        };
        for run in &acts.runs {
            let codes = row
                .get(run.c0 * CHUNK_BYTES..((run.c0 + run.n) * CHUNK_BYTES).min(row.len()))
                .unwrap_or_default();
            let q = qp.get(off..off + run.n * k).unwrap_or_default();
            off += run.n * k;
            let d = codes_dot(self.layout, codes, q);
            cur = match cur {
                Some((g, acc)) if g == run.group => Some((g, acc.wrapping_add(d))),
                Some(prev) => {
                    flush(&mut sum, prev);
                    Some((run.group, d))
                }
                None => Some((run.group, d)),
            };
        }
        if let Some(last) = cur {
            flush(&mut sum, last);
        }
        sum
    }

    /// The plain path for integer activations: the row's trits decoded into `trits`, then
    /// `Σ_g scale_g · Σ t·q` (i32 inner sums).
    #[inline(always)]
    pub(crate) fn dot_int_plain(&self, r: usize, q: &[i8], trits: &mut Vec<i8>) -> f32 {
        trits.resize(self.cols, 0);
        self.decode_row(r, trits);
        let g = self.group_len();
        let mut sum = 0.0f32;
        for (gi, (tg, qg)) in trits.chunks(g).zip(q.chunks(g)).enumerate() {
            let mut acc = 0i32;
            for (&t, &x) in tg.iter().zip(qg) {
                acc = acc.wrapping_add(i32::from(t) * i32::from(x));
            }
            sum += acc as f32 * self.scale(self.scale_index(r, gi));
        }
        sum
    }

    /// `Σ_g scale_g · Σ_{c∈g} t_c · x_c` with f32 activations (sequential f32 sums per group).
    #[inline(always)]
    pub fn dot_f32(&self, r: usize, x: &[f32], trits: &mut Vec<i8>) -> f32 {
        trits.resize(self.cols, 0);
        self.decode_row(r, trits);
        let g = self.group_len();
        let mut sum = 0.0f32;
        for (gi, (tg, xg)) in trits.chunks(g).zip(x.chunks(g)).enumerate() {
            let acc: f32 = tg.iter().zip(xg).map(|(&t, &v)| t as f32 * v).sum();
            sum += acc * self.scale(self.scale_index(r, gi));
        }
        sum
    }

    fn group_len(&self) -> usize {
        if self.group == 0 {
            self.cols.max(1)
        } else {
            self.group
        }
    }
}

/// `Σ k·q` over code bytes `codes` (whole chunks, the last one possibly partial) and their
/// plane-ordered activations `qp` (whole chunks).
#[inline(always)]
fn codes_dot(layout: TernaryLayout, codes: &[u8], qp: &[i8]) -> i32 {
    let k = chunk_elems(layout);
    let full = codes.len() / CHUNK_BYTES * CHUNK_BYTES;
    let (head, tail) = codes.split_at(full);
    let (qh, qt) = qp.split_at((full / CHUNK_BYTES * k).min(qp.len()));
    let mut acc = chunks_dot(layout, head, qh);
    if !tail.is_empty() {
        let mut buf = [0u8; CHUNK_BYTES];
        for (d, &s) in buf.iter_mut().zip(tail) {
            *d = s;
        }
        acc = acc.wrapping_add(chunks_dot(layout, &buf, qt));
    }
    acc
}

/// `Σ k·q` over whole chunks.
#[inline(always)]
fn chunks_dot(layout: TernaryLayout, codes: &[u8], qp: &[i8]) -> i32 {
    use crate::simd::{note, path, Path};
    #[cfg(target_arch = "x86_64")]
    if path() == Path::Avx2 {
        note(Path::Avx2);
        // SAFETY: path() checked the CPU features (AVX2) these functions use.
        return unsafe {
            match layout {
                TernaryLayout::Bits2 => x86::dot_2bit(codes, qp),
                TernaryLayout::Base3 => x86::dot_base3(codes, qp),
            }
        };
    }
    #[cfg(target_arch = "aarch64")]
    match path() {
        Path::NeonDotprod => {
            note(Path::NeonDotprod);
            // SAFETY: path() checked the CPU features (NEON + dotprod) these functions use.
            return unsafe { arm::dot_dotprod(layout, codes, qp) };
        }
        Path::Neon => {
            note(Path::Neon);
            // SAFETY: NEON is part of every AArch64 target's baseline (and path() checked it).
            return unsafe { arm::dot_neon(layout, codes, qp) };
        }
        _ => {}
    }
    note(Path::Scalar);
    chunks_dot_plain(layout, codes, qp)
}

/// [`chunks_dot`] in plain Rust (the definition the intrinsics must match).
#[inline(always)]
fn chunks_dot_plain(layout: TernaryLayout, codes: &[u8], qp: &[i8]) -> i32 {
    let k = chunk_elems(layout);
    let mut acc = 0i32;
    for (c, q) in codes.chunks_exact(CHUNK_BYTES).zip(qp.chunks_exact(k)) {
        for (p, qpl) in q.chunks_exact(CHUNK_BYTES).enumerate() {
            for (&b, &y) in c.iter().zip(qpl) {
                let code = match layout {
                    TernaryLayout::Bits2 => (b >> (2 * p)) & 3,
                    TernaryLayout::Base3 => base3_digit(b, p),
                };
                acc = acc.wrapping_add(i32::from(code) * i32::from(y));
            }
        }
    }
    acc
}

/// The plane dots with AVX2 on 32 code bytes at a time.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::CHUNK_BYTES;

    #[target_feature(enable = "avx2")]
    fn hsum_i32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }

    /// 2bit: plane `p` = `(bytes >> 2p) & 3`; `vpmaddubsw` of codes (≤ 3) and activations gives
    /// i16 pairs of at most 768 in magnitude, four planes at most 3072, then `vpmaddwd` to i32.
    #[target_feature(enable = "avx2")]
    pub(super) fn dot_2bit(codes: &[u8], qp: &[i8]) -> i32 {
        let m3 = _mm256_set1_epi8(3);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_si256();
        for (c, q) in codes
            .chunks_exact(CHUNK_BYTES)
            .zip(qp.chunks_exact(4 * CHUNK_BYTES))
        {
            // SAFETY: `c` holds 32 bytes and `q` 128; unaligned loads.
            let (v, y0, y1, y2, y3) = unsafe {
                let p = q.as_ptr();
                (
                    _mm256_loadu_si256(c.as_ptr().cast()),
                    _mm256_loadu_si256(p.cast()),
                    _mm256_loadu_si256(p.add(32).cast()),
                    _mm256_loadu_si256(p.add(64).cast()),
                    _mm256_loadu_si256(p.add(96).cast()),
                )
            };
            let c0 = _mm256_and_si256(v, m3);
            let c1 = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
            let c2 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3);
            let c3 = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
            let s = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(c0, y0), _mm256_maddubs_epi16(c1, y1)),
                _mm256_add_epi16(_mm256_maddubs_epi16(c2, y2), _mm256_maddubs_epi16(c3, y3)),
            );
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s, ones));
        }
        hsum_i32(acc)
    }

    /// base3: plane `n` holds `q_n = byte · 3^n mod 256` (three byte-wise wrapping adds from
    /// `q_{n-1}`), digit `(3·q_n) >> 8` = `[q_n ≥ 86] + [q_n ≥ 171]` (unsigned compares); each
    /// `vpmaddubsw` pair is at most 512, five planes at most 2560.
    #[target_feature(enable = "avx2")]
    pub(super) fn dot_base3(codes: &[u8], qp: &[i8]) -> i32 {
        let t1 = _mm256_set1_epi8(86u8 as i8);
        let t2 = _mm256_set1_epi8(171u8 as i8);
        let zero = _mm256_setzero_si256();
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_si256();
        for (c, q) in codes
            .chunks_exact(CHUNK_BYTES)
            .zip(qp.chunks_exact(5 * CHUNK_BYTES))
        {
            // SAFETY: `c` holds 32 bytes; unaligned load.
            let mut v = unsafe { _mm256_loadu_si256(c.as_ptr().cast()) };
            let mut s = _mm256_setzero_si256();
            for y in q.chunks_exact(CHUNK_BYTES) {
                let ge1 = _mm256_cmpeq_epi8(_mm256_max_epu8(v, t1), v);
                let ge2 = _mm256_cmpeq_epi8(_mm256_max_epu8(v, t2), v);
                let d = _mm256_sub_epi8(zero, _mm256_add_epi8(ge1, ge2));
                // SAFETY: `y` holds 32 bytes; unaligned load.
                let yv = unsafe { _mm256_loadu_si256(y.as_ptr().cast()) };
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(d, yv));
                v = _mm256_add_epi8(v, _mm256_add_epi8(v, v));
            }
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s, ones));
        }
        hsum_i32(acc)
    }
}

/// The plane dots with NEON on 16 code bytes (half a chunk) at a time: plane `p` of the 16 bytes
/// against the matching 16 plane-ordered activations. With the dot-product extension each plane
/// is one `sdot` into four i32 lanes; without it, `smull`/`smull2` (i8 × i8 → i16, exact: codes are
/// at most 3) and pairwise widening adds into i32. Integer sums wrap like the plain code's
/// `wrapping_add`, so the result equals [`chunks_dot_plain`] for any input.
#[cfg(target_arch = "aarch64")]
pub(super) mod arm {
    use std::arch::aarch64::*;

    use tern_format::TernaryLayout;

    use super::CHUNK_BYTES;
    use crate::simd::neon::{dot_i8_neon, sdot};

    const HALF: usize = CHUNK_BYTES / 2;

    /// The codes of the next plane of 16 code bytes, whose remaining state `st` is the bytes
    /// shifted right by `2p` (2bit: the code is the low two bits) or multiplied by `3^p`, wrapping
    /// (base3: the digit is `[st ≥ 86] + [st ≥ 171]` = `(3·st) >> 8`, as [`super::base3_digit`]);
    /// `st` advances to the next plane.
    #[inline]
    #[target_feature(enable = "neon")]
    fn next_plane(layout: TernaryLayout, st: &mut uint8x16_t) -> int8x16_t {
        let v = *st;
        match layout {
            TernaryLayout::Bits2 => {
                *st = vshrq_n_u8::<2>(v);
                vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(3)))
            }
            TernaryLayout::Base3 => {
                *st = vaddq_u8(v, vaddq_u8(v, v));
                let ge1 = vcgeq_u8(v, vdupq_n_u8(86));
                let ge2 = vcgeq_u8(v, vdupq_n_u8(171));
                // each mask is 0 or −1 as i8: the digit is minus their sum
                vnegq_s8(vreinterpretq_s8_u8(vaddq_u8(ge1, ge2)))
            }
        }
    }

    /// `Σ k·q` over whole chunks, one integer dot per plane and half chunk.
    #[inline]
    #[target_feature(enable = "neon")]
    fn dot_with(
        layout: TernaryLayout,
        codes: &[u8],
        qp: &[i8],
        mut dot: impl FnMut(int32x4_t, int8x16_t, int8x16_t) -> int32x4_t,
    ) -> i32 {
        let planes = super::planes(layout);
        // one accumulator per half chunk (two independent `sdot` chains)
        let mut acc = [vdupq_n_s32(0); 2];
        for (c, q) in codes
            .chunks_exact(CHUNK_BYTES)
            .zip(qp.chunks_exact(planes * CHUNK_BYTES))
        {
            // SAFETY: `c` holds 32 bytes; unaligned loads.
            let mut st = unsafe { [vld1q_u8(c.as_ptr()), vld1q_u8(c.as_ptr().add(HALF))] };
            for qpl in q.chunks_exact(CHUNK_BYTES) {
                // SAFETY: `qpl` holds 32 bytes; unaligned loads.
                let y = unsafe { [vld1q_s8(qpl.as_ptr()), vld1q_s8(qpl.as_ptr().add(HALF))] };
                for ((s, a), y) in st.iter_mut().zip(acc.iter_mut()).zip(y) {
                    *a = dot(*a, next_plane(layout, s), y);
                }
            }
        }
        vaddvq_s32(vaddq_s32(acc[0], acc[1]))
    }

    /// With `sdot` (the CPU must have the dotprod feature).
    #[target_feature(enable = "neon,dotprod")]
    pub(crate) fn dot_dotprod(layout: TernaryLayout, codes: &[u8], qp: &[i8]) -> i32 {
        dot_with(layout, codes, qp, |acc, a, b| sdot(acc, a, b))
    }

    /// With widening multiplies (any AArch64 CPU: NEON is part of the base ISA and enabled for
    /// every AArch64 Rust target, so no run-time check is needed).
    #[target_feature(enable = "neon")]
    pub(crate) fn dot_neon(layout: TernaryLayout, codes: &[u8], qp: &[i8]) -> i32 {
        dot_with(layout, codes, qp, |acc, a, b| {
            vaddq_s32(acc, dot_i8_neon(a, b))
        })
    }
}

/// Recover trits and scales from dequantized ternary values (`w = t · scale`, exact in f32): the
/// scale of a group is its largest `|w|`, and every other non-zero `|w|` must equal it. The
/// result is packed in the 2bit layout with f32 scales.
pub fn ternary_from_values(
    name: &str,
    rows: usize,
    cols: usize,
    group: usize,
    values: &[f32],
) -> Result<TernaryWeights> {
    let (trits, scales) = trits_from_values(name, rows, cols, group, values)?;
    let group32 = u32::try_from(group)
        .map_err(|_| ReferenceError::shape("ternary weights", format!("group {group}")))?;
    let bytes = tern_format::ternary::pack(
        TernaryLayout::Bits2,
        rows as u64,
        cols as u64,
        &trits,
        group32,
        FloatType::F32,
        &scales,
    )?;
    let enc = Encoding::Ternary {
        layout: TernaryLayout::Bits2,
        group: group32,
        scale_type: FloatType::F32,
    };
    TernaryWeights::from_stored(name, rows, cols, &enc, &bytes)
}

/// Trits (one per weight) and per-group scales recovered from `w = t · scale` values.
pub(crate) fn trits_from_values(
    name: &str,
    rows: usize,
    cols: usize,
    group: usize,
    values: &[f32],
) -> Result<(Vec<i8>, Vec<f32>)> {
    check_len("ternary weights", "values", values.len(), rows * cols)?;
    let not_ternary = |detail: String| ReferenceError::NotTernary {
        name: name.into(),
        detail,
    };
    let mut trits = vec![0i8; values.len()];
    let mut scales = Vec::new();
    // Group the values the way the scales are laid out: per tensor, or per `group` columns of a row.
    let spans: Vec<(usize, usize)> = if group == 0 {
        vec![(0, values.len())]
    } else {
        (0..rows)
            .flat_map(|r| {
                (0..cols.div_ceil(group))
                    .map(move |g| (r * cols + g * group, r * cols + ((g + 1) * group).min(cols)))
            })
            .collect()
    };
    for (a, b) in spans {
        let vs = values.get(a..b).unwrap_or_default();
        let scale = vs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (t, &v)) in trits
            .get_mut(a..b)
            .unwrap_or_default()
            .iter_mut()
            .zip(vs)
            .enumerate()
        {
            *t = if v == 0.0 {
                0
            } else if v == scale {
                1
            } else if v == -scale {
                -1
            } else {
                return Err(not_ternary(format!(
                    "element {} is {v}, its group's scale is {scale}",
                    a + i
                )));
            };
        }
        scales.push(scale);
    }
    Ok((trits, scales))
}

#[cfg(test)]
#[path = "packed_tests.rs"]
mod tests;
