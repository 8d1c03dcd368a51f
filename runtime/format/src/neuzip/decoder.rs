//! The CPU decoders: the lockstep fast path, row lookups, statistics and the scalar reference.

use super::*;

impl Plan {
    /// Decode the first `upto` exponent symbols of block `b` into `out[..upto]`, all lanes in
    /// lockstep (the CPU fast path; same arithmetic as [`decode_lane`]). When the whole block is
    /// decoded, checks that every lane ends on `2^15` with all its words read.
    fn decode_block(
        &self,
        blob: &[u8],
        lut: &[u32; LUT_SIZE],
        b: u32,
        out: &mut [u8],
    ) -> Result<()> {
        let (_, len) = self.block_span(b);
        let upto = out.len();
        let lanes = self.lanes as usize;
        let words = blob
            .get(self.words.range())
            .ok_or_else(|| trunc(blob.len(), self.words.offset as usize, 0))?;
        let base = self.block_word_base(blob, b)? as usize;
        let bend = self.block_word_base(blob, b + 1)? as usize;
        // This block's words; lanes index them relative to `base`.
        let bw = words
            .get(2 * base..2 * bend)
            .ok_or_else(|| corrupt("block words outside the word section"))?;
        let mut x = [0u32; MAX_LANES as usize];
        let mut p = [0usize; MAX_LANES as usize];
        let mut e = [0usize; MAX_LANES as usize];
        for l in 0..lanes {
            let r = self.lane_words(blob, b, l as u32)?;
            x[l] = self.lane_state(blob, b, l as u32)?;
            p[l] = r.start - base;
            e[l] = r.end - base;
        }
        // Branch-free step: every lane reads the word at its cursor (0 past the block's end) and
        // keeps it only when renormalizing. A lane that runs past its own words reads its
        // neighbour's; that is caught after the loop (`p > e`), so no error check per step.
        let mut wbuf: Vec<u16> = bw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        wbuf.push(0);
        let mut x32 = [0u32; MAX_LANES as usize];
        let mut p32 = [0u32; MAX_LANES as usize];
        for l in 0..lanes {
            x32[l] = x[l];
            p32[l] = u32::try_from(p[l]).map_err(|_| corrupt("lane start"))?;
        }
        match (lanes, self.group) {
            (32, 1) => lockstep::<32>(lut, &wbuf, &mut x32, &mut p32, out),
            (64, 1) => lockstep::<64>(lut, &wbuf, &mut x32, &mut p32, out),
            (_, 1) => lockstep_dyn(lut, &wbuf, &mut x32[..lanes], &mut p32[..lanes], out),
            (32, 4) => lockstep_grouped::<32, 4>(lut, &wbuf, &mut x32, &mut p32, out),
            (_, g) => lockstep_grouped_dyn(
                lut,
                &wbuf,
                &mut x32[..lanes],
                &mut p32[..lanes],
                g as usize,
                out,
            ),
        }
        for l in 0..lanes {
            x[l] = x32[l];
            p[l] = p32[l] as usize;
        }
        let whole = upto == len as usize;
        for l in 0..lanes {
            if p[l] > e[l] || (whole && (x[l] != RANS_L || p[l] != e[l])) {
                return Err(corrupt(format!(
                    "lane {l} of block {b} ends in state {:#x} at word {} (its words end at {}; expected 0x8000 there)",
                    x[l], p[l], e[l]
                )));
            }
        }
        Ok(())
    }

    /// Decode elements `start..end` (whole blocks decoded as needed) into raw little-endian bytes.
    fn decode_elements(&self, blob: &[u8], start: u64, end: u64) -> Result<Vec<u8>> {
        let size = self.dtype.size();
        let count = usize::try_from(end - start)
            .map_err(|_| FormatError::out_of_range("neuzip decode", "too many elements"))?;
        let mut out = vec![0u8; count * size];
        if count == 0 {
            return Ok(out);
        }
        let lut = self.lut(blob)?;
        let l = Layout::of(self.dtype);
        let k = u32::from(self.mantissa_bits);
        let w = k + 1;
        let raw = blob
            .get(self.raw.range())
            .ok_or_else(|| trunc(blob.len(), self.raw.offset as usize, 0))?;
        let mut exps = vec![0u8; self.block_len as usize];
        let first_block = self.block_of(start);
        for b in first_block..self.n_blocks {
            let (bs, blen) = self.block_span(b);
            if bs >= end {
                break;
            }
            let upto = (end.min(bs + u64::from(blen)) - bs) as usize; // ok: ≤ blen
            let ex = exps
                .get_mut(..upto)
                .ok_or_else(|| corrupt("block longer than block_len"))?;
            self.decode_block(blob, &lut, b, ex)?;
            // Merge elements max(bs, start) .. bs + upto.
            let from = bs.max(start);
            let skip = (from - bs) as usize;
            let o0 = ((from - start) as usize) * size;
            let dst = out
                .get_mut(o0..o0 + (upto - skip) * size)
                .ok_or_else(|| corrupt("block outside the requested range"))?;
            let ex = ex.get(skip..).unwrap_or(&[]);
            merge_into(l, k, w, raw, from, ex, dst);
        }
        Ok(out)
    }

    /// The block holding element `i`.
    fn block_of(&self, i: u64) -> u32 {
        let b = if self.blocks_per_row == 1 {
            i / u64::from(self.block_len)
        } else {
            let row = i / self.row_len;
            row * u64::from(self.blocks_per_row) + (i % self.row_len) / u64::from(self.block_len)
        };
        b.min(u64::from(self.n_blocks)) as u32 // ok: ≤ n_blocks
    }
}

/// One decode step of one lane (the arithmetic of [`decode_lane`], branch-free word read).
#[inline(always)]
fn lane_step(lut: &[u32; LUT_SIZE], wbuf: &[u16], o: &mut u8, xl: &mut u32, pl: &mut u32) {
    let xv = *xl;
    let ent = lut[(xv & (PROB_SCALE - 1)) as usize];
    *o = ent as u8; // ok: the low byte is the symbol
    let xn = ((ent >> 8) & 0xFFF) * (xv >> PROB_BITS) + (ent >> 20);
    let need = xn < RANS_L;
    let w = u32::from(wbuf.get(*pl as usize).copied().unwrap_or(0));
    *xl = if need { (xn << 16) | w } else { xn };
    *pl += u32::from(need);
}

/// All `L` lanes in lockstep over `out` (symbol `j` → lane `j mod L`); `L` known at compile time.
fn lockstep<const L: usize>(
    lut: &[u32; LUT_SIZE],
    wbuf: &[u16],
    x: &mut [u32; MAX_LANES as usize],
    p: &mut [u32; MAX_LANES as usize],
    out: &mut [u8],
) {
    let mut xs = [0u32; L];
    let mut ps = [0u32; L];
    xs.copy_from_slice(&x[..L]);
    ps.copy_from_slice(&p[..L]);
    let mut chunks = out.chunks_exact_mut(L);
    for c in &mut chunks {
        for ((o, xl), pl) in c.iter_mut().zip(xs.iter_mut()).zip(ps.iter_mut()) {
            lane_step(lut, wbuf, o, xl, pl);
        }
    }
    for ((o, xl), pl) in chunks
        .into_remainder()
        .iter_mut()
        .zip(xs.iter_mut())
        .zip(ps.iter_mut())
    {
        lane_step(lut, wbuf, o, xl, pl);
    }
    x[..L].copy_from_slice(&xs);
    p[..L].copy_from_slice(&ps);
}

/// Layout 2: `L` lanes in lockstep over `out`, symbol `j` → lane `(j / G) mod L`. Within a span
/// of `L·G` symbols, step `s` of every lane runs before step `s + 1` (independent chains side by
/// side, as in [`lockstep`]); each lane still sees its symbols in increasing order.
fn lockstep_grouped<const L: usize, const G: usize>(
    lut: &[u32; LUT_SIZE],
    wbuf: &[u16],
    x: &mut [u32; MAX_LANES as usize],
    p: &mut [u32; MAX_LANES as usize],
    out: &mut [u8],
) {
    let mut xs = [0u32; L];
    let mut ps = [0u32; L];
    xs.copy_from_slice(&x[..L]);
    ps.copy_from_slice(&p[..L]);
    let mut chunks = out.chunks_exact_mut(L * G);
    for c in &mut chunks {
        for s in 0..G {
            for (l, (xl, pl)) in xs.iter_mut().zip(ps.iter_mut()).enumerate() {
                if let Some(o) = c.get_mut(l * G + s) {
                    lane_step(lut, wbuf, o, xl, pl);
                }
            }
        }
    }
    for (q, o) in chunks.into_remainder().iter_mut().enumerate() {
        let l = q / G;
        if let (Some(xl), Some(pl)) = (xs.get_mut(l), ps.get_mut(l)) {
            lane_step(lut, wbuf, o, xl, pl);
        }
    }
    x[..L].copy_from_slice(&xs);
    p[..L].copy_from_slice(&ps);
}

/// [`lockstep_grouped`] for any lane count and group.
fn lockstep_grouped_dyn(
    lut: &[u32; LUT_SIZE],
    wbuf: &[u16],
    xs: &mut [u32],
    ps: &mut [u32],
    group: usize,
    out: &mut [u8],
) {
    let lanes = xs.len().max(1);
    let g = group.max(1);
    for (q, o) in out.iter_mut().enumerate() {
        let l = (q / g) % lanes;
        if let (Some(xl), Some(pl)) = (xs.get_mut(l), ps.get_mut(l)) {
            lane_step(lut, wbuf, o, xl, pl);
        }
    }
}

/// [`lockstep`] for any lane count.
fn lockstep_dyn(
    lut: &[u32; LUT_SIZE],
    wbuf: &[u16],
    xs: &mut [u32],
    ps: &mut [u32],
    out: &mut [u8],
) {
    let lanes = xs.len().max(1);
    let mut chunks = out.chunks_exact_mut(lanes);
    for c in &mut chunks {
        for ((o, xl), pl) in c.iter_mut().zip(xs.iter_mut()).zip(ps.iter_mut()) {
            lane_step(lut, wbuf, o, xl, pl);
        }
    }
    for ((o, xl), pl) in chunks
        .into_remainder()
        .iter_mut()
        .zip(xs.iter_mut())
        .zip(ps.iter_mut())
    {
        lane_step(lut, wbuf, o, xl, pl);
    }
}

/// Write elements `from ..` (their exponents in `ex`) into `dst` as little-endian bytes.
fn merge_into(l: Layout, k: u32, w: u32, raw: &[u8], from: u64, ex: &[u8], dst: &mut [u8]) {
    let size = (l.width / 8) as usize;
    if l == Layout::of(FloatType::Bf16) && k == 7 {
        // bf16 lossless: the raw byte is sign << 7 | mantissa.
        let src = raw.get(from as usize..).unwrap_or(&[]);
        for ((d, &e), &r) in dst.chunks_exact_mut(2).zip(ex).zip(src) {
            let v = (u16::from(r & 0x80) << 8) | (u16::from(e) << 7) | u16::from(r & 0x7F);
            d.copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let mut rd = BitReader::at_bit(raw, from * u64::from(w));
    for (d, &e) in dst.chunks_exact_mut(size).zip(ex) {
        let v = float::merge(l, k, e, rd.get(w));
        if size == 2 {
            d.copy_from_slice(&(v as u16).to_le_bytes()); // ok: 16-bit element
        } else {
            d.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Decode the whole blob into raw little-endian elements of its dtype.
pub fn decode(blob: &[u8]) -> Result<Vec<u8>> {
    let plan = Plan::parse(blob)?;
    plan.decode_elements(blob, 0, plan.n_elements)
}

/// Decode rows `first_row .. first_row + n_rows` only (raw little-endian elements), touching only
/// the blocks holding them; each lane stops after the last requested symbol.
pub fn decode_rows(blob: &[u8], first_row: u64, n_rows: u64) -> Result<Vec<u8>> {
    Plan::parse(blob)?.decode_rows(blob, first_row, n_rows)
}

impl Plan {
    /// [`decode_rows`] with a plan already parsed from `blob` (a caller decoding many row tiles
    /// of one tensor, e.g. the CPU reference's per-tile decode, parses the blob once).
    pub fn decode_rows(&self, blob: &[u8], first_row: u64, n_rows: u64) -> Result<Vec<u8>> {
        let plan = self;
        let end_row = first_row
            .checked_add(n_rows)
            .filter(|&e| e <= plan.rows())
            .ok_or_else(|| {
                FormatError::out_of_range(
                    "neuzip rows",
                    format!(
                        "rows {first_row}..+{n_rows} of a tensor with {} rows",
                        plan.rows()
                    ),
                )
            })?;
        plan.decode_elements(blob, first_row * plan.row_len, end_row * plan.row_len)
    }
}

/// Compression statistics of one blob (decodes the exponents to measure their entropy).
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub dtype: FloatType,
    pub mantissa_bits: u8,
    pub n_elements: u64,
    pub blob_bytes: u64,
    /// Bytes spent on the exponents: header, table, block bases, states, lane starts, words.
    pub exponent_bytes: u64,
    /// Bytes of the raw sign+mantissa plane.
    pub raw_bytes: u64,
    /// `exponent_bytes · 8 / n`.
    pub exponent_bits_per_symbol: f64,
    /// Empirical (order-0) entropy of the exponent symbols, bits per symbol.
    pub exponent_entropy_bits: f64,
    /// `blob_bytes / (n · dtype size)`.
    pub ratio_vs_dtype: f64,
    /// `blob_bytes / (n · 2)`: size relative to bf16.
    pub ratio_vs_bf16: f64,
}

/// Measure a blob: sizes, exponent bits per symbol, and the exponents' empirical entropy.
pub fn stats(blob: &[u8]) -> Result<Stats> {
    let plan = Plan::parse(blob)?;
    let lut = plan.lut(blob)?;
    let mut counts = [0u64; 256];
    let mut exps = vec![0u8; plan.block_len as usize];
    for b in 0..plan.n_blocks {
        let (_, len) = plan.block_span(b);
        let ex = exps
            .get_mut(..len as usize)
            .ok_or_else(|| corrupt("block longer than block_len"))?;
        plan.decode_block(blob, &lut, b, ex)?;
        for &s in ex.iter() {
            counts[usize::from(s)] += 1;
        }
    }
    let n = plan.n_elements;
    let entropy = entropy_bits(&counts);
    let raw_bytes = u64::from(plan.raw.len);
    let exponent_bytes = u64::from(plan.blob_len) - raw_bytes;
    let per = |x: u64, d: u64| if d == 0 { 0.0 } else { x as f64 / d as f64 };
    Ok(Stats {
        dtype: plan.dtype,
        mantissa_bits: plan.mantissa_bits,
        n_elements: n,
        blob_bytes: u64::from(plan.blob_len),
        exponent_bytes,
        raw_bytes,
        exponent_bits_per_symbol: per(exponent_bytes * 8, n),
        exponent_entropy_bits: entropy,
        ratio_vs_dtype: per(u64::from(plan.blob_len), n * plan.dtype.size() as u64),
        ratio_vs_bf16: per(u64::from(plan.blob_len), n * 2),
    })
}

/// Order-0 entropy in bits per symbol of a histogram.
pub fn entropy_bits(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let t = total as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / t;
            -p * p.log2()
        })
        .sum()
}

/// Reference decoder: every lane of every block through the scalar [`decode_lane`], one lane
/// after another, exactly as the WGSL kernel's invocations do. Returns the exponent symbols in
/// element order. Tests check the fast path against it.
pub fn decode_exponents_reference(blob: &[u8]) -> Result<Vec<u8>> {
    let plan = Plan::parse(blob)?;
    let lut = plan.lut(blob)?;
    let words = blob.get(plan.words.range()).unwrap_or(&[]);
    let n = usize::try_from(plan.n_elements)
        .map_err(|_| FormatError::out_of_range("neuzip decode", "too many elements"))?;
    let mut out = vec![0u8; n];
    for b in 0..plan.n_blocks {
        let (start, len) = plan.block_span(b);
        for l in 0..plan.lanes {
            let r = plan.lane_words(blob, b, l)?;
            let state = plan.lane_state(blob, b, l)?;
            let count = lane_len(len, plan.lanes, plan.group, l);
            let mut bad = false;
            let (x, k) = decode_lane(&lut, state, words, r.start, r.end, count, |t, s| match out
                .get_mut(start as usize + lane_pos(plan.lanes, plan.group, l, t))
            {
                Some(o) => *o = s,
                None => bad = true,
            })?;
            if bad || x != RANS_L || k != r.end {
                return Err(corrupt(format!(
                    "lane {l} of block {b} did not end on 0x8000 with all words read"
                )));
            }
        }
    }
    Ok(out)
}
