//! The entropy-coding pieces of a delta chunk: static-model rANS symbol streams (NeuZip's coder,
//! [`crate::neuzip::rans`], one lane), an LSB-first raw bit stream, FM-Delta's float symbols and
//! the sparse change lists. Byte layouts are specified in the parent module's documentation.

use crate::error::{FormatError, Result};
use crate::neuzip::rans::{self, LUT_SIZE, PROB_SCALE, RANS_L};

pub(crate) const CODEC: &str = "tern delta";

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt(CODEC, detail)
}

// ------------------------------------------------------------------------------------------------
// Byte cursor

/// Reads little-endian fields from a chunk; every read is bounds-checked.
pub(crate) struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Cursor { b, at: 0 }
    }
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                corrupt(format!(
                    "{what}: needs {n} bytes at {}, the chunk has {}",
                    self.at,
                    self.b.len()
                ))
            })?;
        let s = &self.b[self.at..end]; // ok: at ≤ end ≤ len checked above
        self.at = end;
        Ok(s)
    }
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]])) // ok: take returned exactly 2 bytes
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]])) // ok: exactly 4 bytes
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        let lo = u64::from(self.u32(what)?);
        let hi = u64::from(self.u32(what)?);
        Ok(lo | hi << 32)
    }
    /// Skip zero padding up to a multiple of 4; non-zero padding is corrupt (one encoding per content).
    pub(crate) fn align4(&mut self, what: &str) -> Result<()> {
        let pad = (4 - self.at % 4) % 4;
        if self.take(pad, what)?.iter().any(|&x| x != 0) {
            return Err(corrupt(format!("{what}: non-zero padding")));
        }
        Ok(())
    }
    pub(crate) fn is_done(&self) -> bool {
        self.at == self.b.len()
    }
    pub(crate) fn expect_done(&self, what: &str) -> Result<()> {
        if self.is_done() {
            Ok(())
        } else {
            Err(corrupt(format!(
                "{what}: {} unused bytes at the end",
                self.b.len() - self.at
            )))
        }
    }
}

pub(crate) fn pad4(out: &mut Vec<u8>) {
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

// ------------------------------------------------------------------------------------------------
// rANS symbol streams

/// Append one symbol stream: `u16 n_syms, u16 0, n_syms × u32 (sym | pdf << 16), u32 state,
/// u32 n_words, n_words × u16, zero padding to 4`. The symbol count is known to the decoder from
/// context; `n_syms = 0` only for an empty stream.
pub(crate) fn put_stream(out: &mut Vec<u8>, syms: &[u8]) {
    let mut counts = [0u64; 256];
    for &s in syms {
        counts[usize::from(s)] += 1;
    }
    let table = rans::quantize(&counts);
    out.extend_from_slice(&(table.len() as u16).to_le_bytes()); // ok: ≤ 256 symbols
    out.extend_from_slice(&0u16.to_le_bytes());
    let mut enc = [(0u32, 0u32); 256];
    let mut cdf = 0;
    for &(s, pdf) in &table {
        out.extend_from_slice(&(u32::from(s) | pdf << 16).to_le_bytes());
        enc[usize::from(s)] = (pdf, cdf);
        cdf += pdf;
    }
    let mut words = Vec::with_capacity(syms.len() / 4);
    let state = if syms.is_empty() {
        RANS_L
    } else {
        rans::encode_lane(syms.iter().copied(), &enc, &mut words)
    };
    out.extend_from_slice(&state.to_le_bytes());
    out.extend_from_slice(&(words.len() as u32).to_le_bytes()); // ok: ≤ one word per symbol, chunks < 2^32 symbols
    for w in &words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    pad4(out);
}

/// Decode a stream of exactly `out.len()` symbols, each `< alphabet`. Checks the table, that the
/// lane ends on the initial state having read exactly its words.
pub(crate) fn get_stream(c: &mut Cursor<'_>, out: &mut [u8], alphabet: usize) -> Result<()> {
    let n_syms = usize::from(c.u16("stream header")?);
    if c.u16("stream header")? != 0 {
        return Err(corrupt("stream header: reserved field is not zero"));
    }
    let mut table = Vec::with_capacity(n_syms);
    let mut prev: Option<u32> = None;
    for _ in 0..n_syms {
        let e = c.u32("frequency table")?;
        let (sym, pdf) = (e & 0xFFFF, e >> 16);
        if sym as usize >= alphabet || prev.is_some_and(|p| sym <= p) || pdf == 0 {
            return Err(corrupt(format!(
                "frequency table entry {e:#x} (alphabet {alphabet})"
            )));
        }
        prev = Some(sym);
        table.push((sym as u8, pdf)); // ok: sym < alphabet ≤ 256
    }
    let state = c.u32("stream state")?;
    let n_words = c.u32("stream word count")? as usize;
    let words = c.take(
        n_words
            .checked_mul(2)
            .ok_or_else(|| corrupt("word count overflows"))?,
        "stream words",
    )?;
    c.align4("stream words")?;
    if out.is_empty() {
        if n_syms != 0 || n_words != 0 || state != RANS_L {
            return Err(corrupt("an empty stream holds data"));
        }
        return Ok(());
    }
    if n_syms == 0 {
        return Err(corrupt("a non-empty stream has no frequency table"));
    }
    if !(RANS_L..rans::RANS_MAX).contains(&state) {
        return Err(corrupt(format!("rANS state {state:#x} out of range")));
    }
    let lut: Box<[u32; LUT_SIZE]> = rans::build_lut(&table)?;
    let (end_state, end_word) = decode_symbols(&lut, state, words, out)?;
    if end_state != RANS_L || end_word != n_words {
        return Err(corrupt(format!(
            "symbol stream ends in state {end_state:#x} after {end_word} of {n_words} words"
        )));
    }
    Ok(())
}

/// The rANS decode loop of [`rans::decode_lane`], writing into a slice.
fn decode_symbols(
    lut: &[u32; LUT_SIZE],
    mut x: u32,
    words: &[u8],
    out: &mut [u8],
) -> Result<(u32, usize)> {
    let mut k = 0usize;
    let mut wi = words.chunks_exact(2);
    for o in out.iter_mut() {
        let e = lut[(x & (PROB_SCALE - 1)) as usize]; // ok: masked to < LUT_SIZE
        *o = e as u8; // ok: low byte is the symbol
        x = ((e >> 8) & 0xFFF) * (x >> rans::PROB_BITS) + (e >> 20);
        if x < RANS_L {
            let w = wi
                .next()
                .ok_or_else(|| corrupt("a symbol stream reads past its words"))?;
            x = (x << 16) | u32::from(u16::from_le_bytes([w[0], w[1]])); // ok: chunks of 2
            k += 1;
        }
    }
    Ok((x, k))
}

// ------------------------------------------------------------------------------------------------
// Raw bits

/// LSB-first bit writer: value `v` of width `w` occupies the next `w` bits.
pub(crate) struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    pub(crate) fn new() -> Self {
        BitWriter {
            out: Vec::new(),
            acc: 0,
            n: 0,
        }
    }
    /// `w ≤ 32`, `v < 2^w`.
    #[inline]
    pub(crate) fn put(&mut self, v: u32, w: u32) {
        if w == 0 {
            return;
        }
        self.acc |= u64::from(v) << self.n;
        self.n += w;
        while self.n >= 8 {
            self.out.push(self.acc as u8); // ok: low byte
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    /// Append `u32 byte length, bytes, zero padding to 4`.
    pub(crate) fn finish_into(mut self, out: &mut Vec<u8>) {
        if self.n > 0 {
            self.out.push(self.acc as u8); // ok: the last partial byte
        }
        out.extend_from_slice(&(self.out.len() as u32).to_le_bytes()); // ok: chunks are small
        out.extend_from_slice(&self.out);
        pad4(out);
    }
}

/// LSB-first bit reader over a raw section. Reading past the end yields zeros and is reported by
/// [`BitReader::finish`] (the hot loop stays branch-light).
pub(crate) struct BitReader<'a> {
    b: &'a [u8],
    at: usize,
    acc: u64,
    n: u32,
    overrun: bool,
}

impl<'a> BitReader<'a> {
    pub(crate) fn read(c: &mut Cursor<'a>) -> Result<Self> {
        let len = c.u32("raw bits length")? as usize;
        let b = c.take(len, "raw bits")?;
        c.align4("raw bits")?;
        Ok(BitReader {
            b,
            at: 0,
            acc: 0,
            n: 0,
            overrun: false,
        })
    }
    /// `w ≤ 32`.
    #[inline]
    pub(crate) fn get(&mut self, w: u32) -> u32 {
        if w == 0 {
            return 0;
        }
        if self.n < w {
            self.refill();
            if self.n < w {
                self.overrun = true;
                self.n = w; // zeros past the end
            }
        }
        let v = (self.acc & ((1u64 << w) - 1)) as u32; // ok: w ≤ 32
        self.acc >>= w;
        self.n -= w;
        v
    }
    #[inline]
    fn refill(&mut self) {
        if let Some(s) = self.b.get(self.at..self.at + 4) {
            if self.n <= 32 {
                let v = u32::from_le_bytes([s[0], s[1], s[2], s[3]]); // ok: 4 bytes
                self.acc |= u64::from(v) << self.n;
                self.n += 32;
                self.at += 4;
                return;
            }
        }
        while self.n <= 56 {
            match self.b.get(self.at) {
                Some(&x) => {
                    self.acc |= u64::from(x) << self.n;
                    self.n += 8;
                    self.at += 1;
                }
                None => break,
            }
        }
    }
    /// All bits must have been consumed exactly (up to the padding of the last byte, which must be zero).
    pub(crate) fn finish(self) -> Result<()> {
        if self.overrun {
            return Err(corrupt("raw bits: read past the end"));
        }
        let left_bytes = self.b.len() - self.at.min(self.b.len());
        if self.n >= 8 || left_bytes > 0 || self.acc != 0 {
            return Err(corrupt("raw bits: unused or non-zero trailing bits"));
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// FM-Delta floats

/// A float width FM-Delta codes: the raw bits of f16/bf16 (16) or f32 (32) elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    W16,
    W32,
}

impl Width {
    pub(crate) fn bytes(self) -> usize {
        match self {
            Width::W16 => 2,
            Width::W32 => 4,
        }
    }
    fn bits(self) -> u32 {
        match self {
            Width::W16 => 16,
            Width::W32 => 32,
        }
    }
    #[inline]
    fn load(self, b: &[u8], i: usize) -> u32 {
        match self {
            Width::W16 => u32::from(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
            Width::W32 => u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]),
        }
    }
    #[cfg(test)]
    fn store(self, b: &mut [u8], i: usize, v: u32) {
        match self {
            Width::W16 => b[2 * i..2 * i + 2].copy_from_slice(&(v as u16).to_le_bytes()), // ok: v < 2^16
            Width::W32 => b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
        }
    }
    /// fpzip's order-preserving map (FM-Delta `pcmap.h`): `r = !x; r ^= (−(r >> (N−1))) >> 1`.
    /// Positives become `0x80.. | bits`, negatives `!bits`, so a larger float is a larger integer.
    #[inline]
    pub(crate) fn map(self, x: u32) -> u32 {
        let n = self.bits();
        let mask = if n == 32 { u32::MAX } else { (1 << n) - 1 };
        let r = !x & mask;
        r ^ ((0u32.wrapping_sub(r >> (n - 1)) & mask) >> 1)
    }
    /// Inverse of [`Width::map`].
    #[inline]
    pub(crate) fn unmap(self, y: u32) -> u32 {
        let n = self.bits();
        let top = 1u32 << (n - 1);
        if y & top != 0 {
            y ^ top
        } else {
            !y & if n == 32 { u32::MAX } else { (1 << n) - 1 }
        }
    }
    /// Alphabet: `2N + 1` symbols.
    fn alphabet(self) -> usize {
        2 * self.bits() as usize + 1
    }
}

/// Encode the FM-Delta chunk of `base` → `tuned` (same length, whole elements of `w`):
/// one symbol stream (`N` = equal, `N + 1 + k` = larger by `d` with `2^k ≤ d < 2^(k+1)`,
/// `N − 1 − k` = smaller), then the raw bits: `k` low bits of `d − 2^k` per non-equal element.
pub(crate) fn fm_encode(w: Width, base: &[u8], tuned: &[u8], out: &mut Vec<u8>) {
    let n = tuned.len() / w.bytes();
    let nb = w.bits();
    let mut syms = Vec::with_capacity(n);
    let mut raw = BitWriter::new();
    for i in 0..n {
        let p = w.map(w.load(base, i));
        let r = w.map(w.load(tuned, i));
        let (sym, d) = if r > p {
            let d = r - p;
            let k = 31 - d.leading_zeros();
            (nb + 1 + k, d)
        } else if r < p {
            let d = p - r;
            let k = 31 - d.leading_zeros();
            (nb - 1 - k, d)
        } else {
            (nb, 0)
        };
        syms.push(sym as u8); // ok: sym ≤ 2N = 64
        if d != 0 {
            let k = 31 - d.leading_zeros();
            raw.put(d - (1 << k), k);
        }
    }
    put_stream(out, &syms);
    raw.finish_into(out);
}

/// Decode an FM-Delta chunk into `out` (same length as `base`).
pub(crate) fn fm_decode(w: Width, c: &mut Cursor<'_>, base: &[u8], out: &mut [u8]) -> Result<()> {
    let n = out.len() / w.bytes();
    if out.len() % w.bytes() != 0 || base.len() != out.len() {
        return Err(corrupt("fm-delta chunk: range is not whole elements"));
    }
    let mut syms = vec![0u8; n];
    get_stream(c, &mut syms, w.alphabet())?;
    let mut raw = BitReader::read(c)?;
    match w {
        Width::W16 => fm_apply::<2>(w, &syms, &mut raw, base, out),
        Width::W32 => fm_apply::<4>(w, &syms, &mut raw, base, out),
    }
    raw.finish()
}

/// The FM-Delta reconstruction loop for `B`-byte elements (`B` = `w.bytes()`); equal elements
/// (the common case of a light fine-tune) are copied without mapping.
#[inline(always)]
fn fm_apply<const B: usize>(
    w: Width,
    syms: &[u8],
    raw: &mut BitReader<'_>,
    base: &[u8],
    out: &mut [u8],
) {
    let nb = w.bits();
    let mask = if nb == 32 { u32::MAX } else { (1 << nb) - 1 };
    for ((&s, b), o) in syms
        .iter()
        .zip(base.chunks_exact(B))
        .zip(out.chunks_exact_mut(B))
    {
        let s = u32::from(s);
        if s == nb {
            o.copy_from_slice(b);
            continue;
        }
        let mut x = [0u8; 4];
        x[..B].copy_from_slice(b);
        let p = w.map(u32::from_le_bytes(x));
        let r = if s > nb {
            let k = s - nb - 1;
            p.wrapping_add((1 << k) | raw.get(k)) & mask
        } else {
            let k = nb - 1 - s;
            p.wrapping_sub((1 << k) | raw.get(k)) & mask
        };
        o.copy_from_slice(&w.unmap(r).to_le_bytes()[..B]);
    }
}

// ------------------------------------------------------------------------------------------------
// Sparse change lists

/// A sparse change list over `n` elements: `u32 n_changes`, a gap stream (symbol `k` for a gap
/// `g` with `2^k ≤ g + 1 < 2^(k+1)`), a value stream, then the raw bits (`k` low bits of
/// `g + 1 − 2^k` per change). `changes` are `(index, value symbol)` in increasing index order.
pub(crate) fn sparse_encode(changes: &[(usize, u8)], out: &mut Vec<u8>) {
    out.extend_from_slice(&(changes.len() as u32).to_le_bytes()); // ok: chunks < 2^32 elements
    let mut gaps = Vec::with_capacity(changes.len());
    let mut vals = Vec::with_capacity(changes.len());
    let mut raw = BitWriter::new();
    let mut next = 0usize;
    for &(i, v) in changes {
        let g1 = (i - next + 1) as u32; // ok: chunk indices < 2^32, increasing
        let k = 31 - g1.leading_zeros();
        gaps.push(k as u8); // ok: k < 32
        raw.put(g1 - (1 << k), k);
        vals.push(v);
        next = i + 1;
    }
    put_stream(out, &gaps);
    put_stream(out, &vals);
    raw.finish_into(out);
}

/// Decode a sparse change list over `n` elements, calling `apply(index, value symbol)` in order.
pub(crate) fn sparse_decode(
    c: &mut Cursor<'_>,
    n: usize,
    alphabet: usize,
    mut apply: impl FnMut(usize, u8) -> Result<()>,
) -> Result<()> {
    let m = c.u32("change count")? as usize;
    if m > n {
        return Err(corrupt(format!("{m} changes in a chunk of {n} elements")));
    }
    let mut gaps = vec![0u8; m];
    let mut vals = vec![0u8; m];
    get_stream(c, &mut gaps, 32)?;
    get_stream(c, &mut vals, alphabet)?;
    let mut raw = BitReader::read(c)?;
    let mut next = 0usize;
    for (&k, &v) in gaps.iter().zip(&vals) {
        let k = u32::from(k);
        let g1 = ((1u64 << k) | u64::from(raw.get(k))) as usize; // ok: < 2^32
        let i = next + g1 - 1;
        if i >= n {
            return Err(corrupt(format!(
                "change at {i} beyond the chunk's {n} elements"
            )));
        }
        apply(i, v)?;
        next = i + 1;
    }
    raw.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_is_order_preserving_and_invertible() {
        let xs = [
            -3.0f32,
            -1.0,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            0.5,
            2.0,
            f32::INFINITY,
        ];
        let m: Vec<u32> = xs.iter().map(|x| Width::W32.map(x.to_bits())).collect();
        assert!(m.windows(2).all(|w| w[0] < w[1]), "{m:x?}");
        for x in [0u32, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0x3f80_0000] {
            assert_eq!(Width::W32.unmap(Width::W32.map(x)), x);
        }
        for x in 0..=u16::MAX {
            let y = Width::W16.map(u32::from(x));
            assert!(y <= 0xffff);
            assert_eq!(Width::W16.unmap(y), u32::from(x));
        }
        let h =
            [-2.0f32, -0.5, 0.0, 0.25, 3.0].map(|v| u32::from(half::bf16::from_f32(v).to_bits()));
        let m: Vec<u32> = h.iter().map(|&x| Width::W16.map(x)).collect();
        assert!(m.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn fm_round_trip_all_16_bit_pairs_sampled() {
        let mut s = 0x1234_5678u32;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        for w in [Width::W16, Width::W32] {
            let n = 5000;
            let mut base = vec![0u8; n * w.bytes()];
            let mut tuned = vec![0u8; n * w.bytes()];
            for i in 0..n {
                let b = rnd();
                let t = match i % 4 {
                    0 => b,
                    1 => b ^ (rnd() & 7),
                    2 => rnd(),
                    _ => b.wrapping_add(1),
                };
                w.store(
                    &mut base,
                    i,
                    b & if w == Width::W16 { 0xffff } else { u32::MAX },
                );
                w.store(
                    &mut tuned,
                    i,
                    t & if w == Width::W16 { 0xffff } else { u32::MAX },
                );
            }
            let mut enc = Vec::new();
            fm_encode(w, &base, &tuned, &mut enc);
            let mut out = vec![0u8; tuned.len()];
            let mut c = Cursor::new(&enc);
            fm_decode(w, &mut c, &base, &mut out).unwrap();
            c.expect_done("chunk").unwrap();
            assert_eq!(out, tuned);
        }
    }

    #[test]
    fn sparse_round_trip() {
        let changes = vec![(0usize, 3u8), (1, 1), (7, 200), (1000, 5), (65535, 1)];
        let mut enc = Vec::new();
        sparse_encode(&changes, &mut enc);
        let mut got = Vec::new();
        let mut c = Cursor::new(&enc);
        sparse_decode(&mut c, 65536, 256, |i, v| {
            got.push((i, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, changes);
        let mut c = Cursor::new(&enc);
        assert!(sparse_decode(&mut c, 65535, 256, |_, _| Ok(())).is_err());
    }
}
