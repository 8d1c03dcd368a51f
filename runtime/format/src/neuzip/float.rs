//! Splitting floats into an exponent symbol and a raw sign+mantissa field, NeuZip's lossy
//! mantissa rounding, and the bit-packed raw plane.

use crate::dtype::FloatType;
use crate::error::{FormatError, Result};

/// Bit layout of one float type, element bits held in the low `width` bits of a `u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// 16 or 32.
    pub width: u32,
    /// Mantissa (fraction) bits: 23, 10, 7.
    pub man: u32,
    /// Exponent bits: 8, 5, 8. The exponent is the entropy-coded symbol.
    pub exp: u32,
}

impl Layout {
    pub fn of(t: FloatType) -> Self {
        match t {
            FloatType::F32 => Layout {
                width: 32,
                man: 23,
                exp: 8,
            },
            FloatType::F16 => Layout {
                width: 16,
                man: 10,
                exp: 5,
            },
            FloatType::Bf16 => Layout {
                width: 16,
                man: 7,
                exp: 8,
            },
        }
    }
    /// Number of distinct exponent symbols (256 or 32).
    pub fn alphabet(self) -> usize {
        1 << self.exp
    }
    /// The all-ones exponent (inf/NaN).
    pub fn emax(self) -> u32 {
        (1 << self.exp) - 1
    }
    fn sign_shift(self) -> u32 {
        self.man + self.exp
    }
    fn man_mask(self) -> u32 {
        (1 << self.man) - 1
    }
}

/// Round `x` (element bits) to `k < man` kept mantissa bits, NeuZip style: round half up on the
/// magnitude (`(mag + half) >> drop << drop`), so a mantissa overflow carries into the exponent
/// (a subnormal can become the smallest normal, 1.9375 → 2.0 for k=3). Special cases:
/// * ±inf stays ±inf (its mantissa is zero, nothing to round).
/// * NaN stays NaN: its mantissa is truncated, not rounded; if the kept bits would all be zero the
///   top kept bit (the quiet bit) is set. With `k = 0` a NaN cannot be told from inf, so it is an
///   error (`InvalidArgument`).
/// * A finite value whose rounding would carry into the all-ones exponent saturates to the largest
///   finite value with `k` mantissa bits (round toward zero) instead of becoming inf.
pub fn round_lossy(l: Layout, k: u32, x: u32) -> Result<u32> {
    let sign = x & (1 << l.sign_shift());
    let mag = x & ((1 << l.sign_shift()) - 1);
    let exp = mag >> l.man;
    let drop = l.man - k;
    let kept_mask = ((1u32 << k) - 1) << drop;
    if exp == l.emax() {
        let mant = mag & l.man_mask();
        if mant == 0 {
            return Ok(x);
        }
        let mut kept = mant & kept_mask;
        if kept == 0 {
            if k == 0 {
                return Err(FormatError::InvalidArgument(
                    "NaN cannot be stored with 0 mantissa bits (it would decode as inf): keep at least 1 mantissa bit, or use lossless NeuZip".into(),
                ));
            }
            kept = 1 << (l.man - 1);
        }
        return Ok(sign | (exp << l.man) | kept);
    }
    let half = 1u32 << (drop - 1);
    let r = ((mag + half) >> drop) << drop;
    if r >> l.man == l.emax() {
        return Ok(sign | ((l.emax() - 1) << l.man) | kept_mask);
    }
    Ok(sign | r)
}

/// Exponent symbol of (already rounded) element bits.
#[inline]
pub fn symbol(l: Layout, x: u32) -> u8 {
    ((x >> l.man) & l.emax()) as u8 // ok: emax ≤ 255
}

/// The raw field of `k` kept mantissa bits: `sign << k | top k mantissa bits` (`k + 1` bits).
#[inline]
pub fn field(l: Layout, k: u32, x: u32) -> u32 {
    let sign = (x >> l.sign_shift()) & 1;
    let kept = (x & l.man_mask()) >> (l.man - k);
    (sign << k) | kept
}

/// Rebuild element bits from the exponent symbol and the raw field (dropped mantissa bits zero).
#[inline]
pub fn merge(l: Layout, k: u32, sym: u8, f: u32) -> u32 {
    let sign = (f >> k) & 1;
    let kept = f & ((1 << k) - 1);
    (sign << l.sign_shift()) | (u32::from(sym) << l.man) | (kept << (l.man - k))
}

/// LSB-first bit packer: field `i` of width `w` occupies bits `i·w .. i·w + w` of the
/// little-endian byte stream (bit `t` is bit `t mod 8` of byte `t / 8`; equivalently bit
/// `t mod 32` of little-endian `u32` word `t / 32`).
pub struct BitWriter {
    pub bytes: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    pub fn with_capacity(bytes: usize) -> Self {
        BitWriter {
            bytes: Vec::with_capacity(bytes),
            acc: 0,
            n: 0,
        }
    }
    /// Append the low `w ≤ 32` bits of `v`.
    #[inline]
    pub fn put(&mut self, v: u32, w: u32) {
        self.acc |= u64::from(v) << self.n;
        self.n += w;
        while self.n >= 8 {
            self.bytes.push(self.acc as u8); // ok: low byte
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    pub fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.bytes.push(self.acc as u8); // ok: low byte, the rest is zero
        }
        self.bytes
    }
}

/// Sequential reader of the packed plane, starting at any field. Bytes past the end read as zero
/// (the caller validated the plane's length, so a valid range never gets there).
pub struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    n: u32,
}

impl<'a> BitReader<'a> {
    pub fn at_bit(data: &'a [u8], bit: u64) -> Self {
        let pos = usize::try_from(bit / 8).unwrap_or(usize::MAX);
        let mut r = BitReader {
            data,
            pos,
            acc: 0,
            n: 0,
        };
        let skip = (bit % 8) as u32; // ok: < 8
        if skip > 0 {
            r.get(skip);
        }
        r
    }
    /// The next `w ≤ 32` bits.
    #[inline]
    pub fn get(&mut self, w: u32) -> u32 {
        while self.n < w {
            let b = self.data.get(self.pos).copied().unwrap_or(0);
            self.acc |= u64::from(b) << self.n;
            self.pos = self.pos.saturating_add(1);
            self.n += 8;
        }
        let v = (self.acc & ((1u64 << w) - 1)) as u32; // ok: w ≤ 32
        self.acc >>= w;
        self.n -= w;
        v
    }
}
