//! tern's own ternary tensor layouts (`Encoding::Ternary`).
//!
//! A ternary tensor is viewed as a matrix of `rows × cols` (cols = the last, contiguous dimension)
//! holding trits `t ∈ {−1, 0, +1}` and scales; the value of element `(r, c)` is `t · scale(r, c)`.
//!
//! # Bytes
//!
//! 1. The codes region: `rows` rows, each a whole number of little-endian `u32` words
//!    ([`codes_bytes`]), row `r` starting at byte `r · words_per_row · 4`.
//! 2. The scales region, right after: [`scale_count`] scales, each f32, f16 or bf16 little-endian
//!    per `scale_type`. `group == 0`: one scale for the whole tensor; `group > 0`: `group`
//!    consecutive elements of a row share a scale (`cols % group == 0` is required), scales in
//!    row-major order, so element `(r, c)` uses scale `r · cols/group + c/group`.
//!
//! The codes region is always a multiple of 4 bytes, so the scales start word-aligned too.
//!
//! # Code layouts
//!
//! * **2bit** ([`TernaryLayout::Bits2`], 2 bits per weight): `ceil(cols/16)` words per row. Element `j`
//!   of a row is in word `j/16` at bits `2·(j%16)..2·(j%16)+2` (equivalently byte `j/4`, bits
//!   `2·(j%4)`), as the code `t + 1 ∈ {0, 1, 2}`. Code 3 is invalid.
//! * **base3** ([`TernaryLayout::Base3`], 1.6 bits per weight): `ceil(cols/20)` words per row, each
//!   word 4 bytes of 5 trits. Element `j` of a row is in byte `j/5` of the row's byte stream (word
//!   `j/20`, byte `(j/5)%4` of the little-endian word) at trit position `n = j%5`, with TQ1_0's
//!   fixed-point encoding: digits `d_n = t_n + 1`, `v = Σ_n d_n·3^(4−n)` (the first element is the
//!   most significant digit), stored as `ceil(v·256/243)`; decoded with `q = (byte·3^n) mod 256`,
//!   `d = (q·3) >> 8` — a branch-free multiply-shift on the GPU, no division or table. Of the 256
//!   byte values 243 are encodings; the other 13 (1, 20, 40, 60, 79, 99, 119, 138, 158, 178, 197,
//!   217, 237) still decode to digits but are never written, and [`TernaryRef::validate`] reports them.
//!
//! In both layouts the padding elements after the last column of a row (up to the word boundary)
//! are trit 0 (code 1 / digit 1; a base3 byte of five padding trits is 128), so a kernel can run over
//! whole words without masking the weight side: padding contributes `0 · x`.
//!
//! # Why this layout reads coalesced on a GPU
//!
//! Each row starts on a `u32` word, so a GEMV invocation (or a subgroup lane) assigned to a row
//! reads `array<u32>` at word indices with no byte shifting of the row start; consecutive
//! invocations of a workgroup that split a row read consecutive words, so one memory transaction
//! serves the whole subgroup. One word gives 16 (2bit) or 20 (base3) *consecutive* elements, which
//! pair with one contiguous slice of the activation vector. Unlike ggml's TQ1_0/TQ2_0 blocks (which
//! interleave an f16 `d` every 54/66 bytes and scatter a block's elements over strided bytes), the
//! code stream holds nothing but code words, and the scales live in their own region, read once
//! per group (or once per tensor).

use crate::dtype::{FloatType, TernaryLayout};
use crate::error::{FormatError, Result};

/// Elements per `u32` word of a layout.
pub fn elems_per_word(layout: TernaryLayout) -> u64 {
    match layout {
        TernaryLayout::Bits2 => 16,
        TernaryLayout::Base3 => 20,
    }
}

/// `u32` words per row.
pub fn words_per_row(layout: TernaryLayout, cols: u64) -> u64 {
    cols.div_ceil(elems_per_word(layout))
}

/// Bytes of the codes region of a `rows × cols` tensor.
pub fn codes_bytes(layout: TernaryLayout, rows: u64, cols: u64) -> Result<u64> {
    words_per_row(layout, cols)
        .checked_mul(4)
        .and_then(|b| b.checked_mul(rows))
        .ok_or_else(|| {
            FormatError::out_of_range("ternary codes", format!("{rows} × {cols} overflows"))
        })
}

/// Number of scales: 1 when `group == 0`, else `rows · cols/group` (`cols % group == 0` required).
pub fn scale_count(rows: u64, cols: u64, group: u32) -> Result<u64> {
    if group == 0 {
        return Ok(1);
    }
    let g = u64::from(group);
    if cols % g != 0 {
        return Err(FormatError::BadShape {
            what: "ternary tensor".into(),
            detail: format!("row length {cols} is not a multiple of the scale group {group}"),
        });
    }
    rows.checked_mul(cols / g).ok_or_else(|| {
        FormatError::out_of_range(
            "ternary scales",
            format!("{rows} × {cols} / {group} overflows"),
        )
    })
}

/// Powers of three for the base-3 digit positions.
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// The base-3 byte holding digits `d[0..5]` (each 0..=2, `d[0]` most significant).
fn base3_encode(d: [u8; 5]) -> u8 {
    let v = d.iter().fold(0u32, |acc, &x| acc * 3 + u32::from(x));
    ((v * 256).div_ceil(243)) as u8 // ok: v ≤ 242, so the result is ≤ 255
}

/// Digit `n` (0..5) of a base-3 byte.
fn base3_digit(byte: u8, n: usize) -> u8 {
    let q = byte.wrapping_mul(POW3[n % 5]);
    ((u16::from(q) * 3) >> 8) as u8
}

/// Whether `byte` is one of the 243 encodings of five digits.
fn base3_valid(byte: u8) -> bool {
    let d = [0, 1, 2, 3, 4].map(|n| base3_digit(byte, n));
    base3_encode(d) == byte
}

fn to_usize(x: u64, what: &str) -> Result<usize> {
    usize::try_from(x)
        .map_err(|_| FormatError::out_of_range(what, format!("{x} does not fit this platform")))
}

fn scale_bytes(t: FloatType, x: f32) -> Vec<u8> {
    match t {
        FloatType::F32 => x.to_le_bytes().to_vec(),
        FloatType::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
        FloatType::Bf16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
    }
}

/// Packs trits (row-major, `rows · cols` of them, each −1, 0 or +1) and scales into the bytes of a
/// ternary tensor. Scales are given as f32 and stored as `scale_type` (rounded to nearest for
/// f16/bf16); they must be finite after that conversion.
pub fn pack(
    layout: TernaryLayout,
    rows: u64,
    cols: u64,
    trits: &[i8],
    group: u32,
    scale_type: FloatType,
    scales: &[f32],
) -> Result<Vec<u8>> {
    let n_scales = to_usize(scale_count(rows, cols, group)?, "scale count")?;
    let code_len = to_usize(codes_bytes(layout, rows, cols)?, "codes size")?;
    let (r, c) = (to_usize(rows, "rows")?, to_usize(cols, "cols")?);
    if Some(trits.len()) != r.checked_mul(c) {
        return Err(FormatError::InvalidArgument(format!(
            "{} trits for a {rows} × {cols} tensor",
            trits.len()
        )));
    }
    if scales.len() != n_scales {
        return Err(FormatError::InvalidArgument(format!(
            "{} scales, a {rows} × {cols} tensor with group {group} needs {n_scales}",
            scales.len()
        )));
    }
    if let Some(i) = trits.iter().position(|t| !(-1..=1).contains(t)) {
        return Err(FormatError::InvalidArgument(format!(
            "trit {i} is {}, not -1, 0 or 1",
            trits[i]
        )));
    }
    let mut out = Vec::with_capacity(code_len + n_scales * scale_type.size());
    let row_bytes = code_len.checked_div(r).unwrap_or(0);
    for row in trits.chunks_exact(c.max(1)).take(r) {
        let start = out.len();
        match layout {
            TernaryLayout::Bits2 => {
                for chunk in row.chunks(4) {
                    let mut b = 0u8;
                    for k in 0..4 {
                        let code = chunk.get(k).map_or(1, |&t| (t + 1) as u8);
                        b |= code << (2 * k);
                    }
                    out.push(b);
                }
                out.resize(start + row_bytes, 0b0101_0101); // whole padding bytes: four trit-0 codes
            }
            TernaryLayout::Base3 => {
                for chunk in row.chunks(5) {
                    let d = [0, 1, 2, 3, 4].map(|k| chunk.get(k).map_or(1, |&t| (t + 1) as u8));
                    out.push(base3_encode(d));
                }
                out.resize(start + row_bytes, base3_encode([1; 5]));
            }
        }
    }
    if c == 0 {
        out.resize(code_len, 0); // zero columns: no codes at all (code_len is 0)
    }
    for (i, &s) in scales.iter().enumerate() {
        let b = scale_bytes(scale_type, s);
        let back = read_scale(scale_type, &b);
        if !back.is_finite() {
            return Err(FormatError::InvalidArgument(format!(
                "scale {i} = {s} is not finite as {scale_type:?}"
            )));
        }
        out.extend_from_slice(&b);
    }
    Ok(out)
}

fn read_scale(t: FloatType, b: &[u8]) -> f32 {
    match (t, b) {
        (FloatType::F32, [a, b, c, d, ..]) => f32::from_le_bytes([*a, *b, *c, *d]),
        (FloatType::F16, [a, b, ..]) => half::f16::from_le_bytes([*a, *b]).to_f32(),
        (FloatType::Bf16, [a, b, ..]) => half::bf16::from_le_bytes([*a, *b]).to_f32(),
        _ => f32::NAN, // unreachable for slices cut to scale_type.size()
    }
}

/// BitNet b1.58's absmean ternarization of one weight matrix: `alpha = max(mean|W|, 1e-5)`,
/// `t = clamp(round_half_even(W · (1/alpha)), −1, 1)`. Returns the trits and `alpha` (so
/// `W ≈ t · alpha`).
///
/// The operation order is Hugging Face's `WeightQuant` (`s = 1 / mean.clamp(min=1e-5)`, then
/// `(w * s).round().clamp(-1, 1)`): a multiply by the f32 reciprocal, not a division, which can
/// differ from `w / alpha` exactly at ±0.5 and ±1.5. The mean is summed in f64 and rounded once
/// to f32 (torch sums in f32 in an unspecified order, so the last bit of `alpha` may differ from
/// torch's on large tensors). Non-finite weights give trit 0.
pub fn absmean_ternarize(w: &[f32]) -> (Vec<i8>, f32) {
    let mean = if w.is_empty() {
        0.0
    } else {
        (w.iter().map(|&x| f64::from(x.abs())).sum::<f64>() / w.len() as f64) as f32
    };
    let alpha = mean.max(1e-5);
    let s = 1.0 / alpha;
    let t = w
        .iter()
        .map(|&x| {
            let q = (x * s).round_ties_even().clamp(-1.0, 1.0);
            if q.is_nan() {
                0
            } else {
                q as i8
            }
        })
        .collect();
    (t, alpha)
}

/// A ternary tensor's bytes, checked for length, with element access.
#[derive(Debug, Clone, Copy)]
pub struct TernaryRef<'a> {
    layout: TernaryLayout,
    rows: usize,
    cols: usize,
    group: usize,
    scale_type: FloatType,
    row_bytes: usize,
    codes: &'a [u8],
    scales: &'a [u8],
}

impl<'a> TernaryRef<'a> {
    /// Views `bytes` as a `rows × cols` ternary tensor; errors unless the length is exactly
    /// codes + scales for this shape and `group` divides `cols`.
    pub fn new(
        layout: TernaryLayout,
        rows: u64,
        cols: u64,
        group: u32,
        scale_type: FloatType,
        bytes: &'a [u8],
    ) -> Result<Self> {
        let code_len = to_usize(codes_bytes(layout, rows, cols)?, "codes size")?;
        let n_scales = to_usize(scale_count(rows, cols, group)?, "scale count")?;
        let scale_len = n_scales
            .checked_mul(scale_type.size())
            .ok_or_else(|| FormatError::out_of_range("ternary scales", "size overflows"))?;
        let total = code_len.checked_add(scale_len);
        if total != Some(bytes.len()) {
            return Err(FormatError::malformed(
                "ternary tensor",
                format!(
                    "{rows} × {cols} ({layout:?}, group {group}, {scale_type:?} scales) needs {code_len} + {scale_len} bytes, found {}",
                    bytes.len()
                ),
            ));
        }
        let (codes, scales) = bytes.split_at(code_len);
        let rows = to_usize(rows, "rows")?;
        Ok(TernaryRef {
            layout,
            rows,
            cols: to_usize(cols, "cols")?,
            group: group as usize,
            scale_type,
            row_bytes: to_usize(
                words_per_row(layout, cols)
                    .checked_mul(4)
                    .ok_or_else(|| FormatError::out_of_range("ternary row", "size overflows"))?,
                "row size",
            )?,
            codes,
            scales,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn layout(&self) -> TernaryLayout {
        self.layout
    }
    /// The codes region.
    pub fn codes(&self) -> &'a [u8] {
        self.codes
    }
    /// The scales region.
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }

    fn row_code_bytes(&self, r: usize) -> Result<&'a [u8]> {
        let start = r.checked_mul(self.row_bytes);
        start
            .and_then(|s| self.codes.get(s..s.checked_add(self.row_bytes)?))
            .filter(|_| r < self.rows)
            .ok_or_else(|| {
                FormatError::out_of_range("ternary row", format!("row {r} of {}", self.rows))
            })
    }

    /// The code (`t + 1`; 0..=3 for 2bit, the digit 0..=2 for base3) of element `j` of a row.
    fn code_in_row(&self, row: &[u8], j: usize) -> u8 {
        match self.layout {
            TernaryLayout::Bits2 => row.get(j / 4).map_or(1, |b| (b >> (2 * (j % 4))) & 3),
            TernaryLayout::Base3 => row.get(j / 5).map_or(1, |&b| base3_digit(b, j % 5)),
        }
    }

    fn bad_code(&self, r: usize, c: usize) -> FormatError {
        FormatError::corrupt(
            "ternary 2bit",
            format!("invalid code 3 at row {r}, column {c}"),
        )
    }

    /// The trit of element `(r, c)`.
    pub fn trit(&self, r: usize, c: usize) -> Result<i8> {
        if c >= self.cols {
            return Err(FormatError::out_of_range(
                "ternary column",
                format!("column {c} of {}", self.cols),
            ));
        }
        let row = self.row_code_bytes(r)?;
        match self.code_in_row(row, c) {
            3 => Err(self.bad_code(r, c)),
            code => Ok(code as i8 - 1),
        }
    }

    /// All trits of row `r` into `out` (`cols` of them).
    pub fn row_trits(&self, r: usize, out: &mut [i8]) -> Result<()> {
        if out.len() != self.cols {
            return Err(FormatError::InvalidArgument(format!(
                "output has {} trits, a row has {}",
                out.len(),
                self.cols
            )));
        }
        let row = self.row_code_bytes(r)?;
        match self.layout {
            TernaryLayout::Bits2 => {
                for (bi, (b, chunk)) in row.iter().zip(out.chunks_mut(4)).enumerate() {
                    for (k, t) in chunk.iter_mut().enumerate() {
                        let code = (b >> (2 * k)) & 3;
                        if code == 3 {
                            return Err(self.bad_code(r, bi * 4 + k));
                        }
                        *t = code as i8 - 1;
                    }
                }
            }
            TernaryLayout::Base3 => {
                for (&b, chunk) in row.iter().zip(out.chunks_mut(5)) {
                    for (n, t) in chunk.iter_mut().enumerate() {
                        *t = base3_digit(b, n) as i8 - 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// The scale of element `(r, c)`.
    pub fn scale_at(&self, r: usize, c: usize) -> Result<f32> {
        if r >= self.rows || c >= self.cols {
            return Err(FormatError::out_of_range(
                "ternary element",
                format!("({r}, {c}) of {} × {}", self.rows, self.cols),
            ));
        }
        let i = match (self.cols.checked_div(self.group), c.checked_div(self.group)) {
            (Some(per_row), Some(g)) => r * per_row + g,
            _ => 0, // group 0: one scale
        };
        self.scale(i)
    }

    /// Scale number `i` (row-major order of the groups).
    pub fn scale(&self, i: usize) -> Result<f32> {
        let sz = self.scale_type.size();
        let b = i
            .checked_mul(sz)
            .and_then(|s| self.scales.get(s..s.checked_add(sz)?))
            .ok_or_else(|| FormatError::out_of_range("ternary scale", format!("scale {i}")))?;
        Ok(read_scale(self.scale_type, b))
    }

    /// Every element as f32 (`t · scale`), row-major.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.rows * self.cols];
        let mut trits = vec![0i8; self.cols];
        let per_row = self.cols.checked_div(self.group).unwrap_or(0);
        let whole = if self.group == 0 { self.scale(0)? } else { 0.0 };
        for (r, y) in out
            .chunks_exact_mut(self.cols.max(1))
            .enumerate()
            .take(self.rows)
        {
            self.row_trits(r, &mut trits)?;
            if self.group == 0 {
                for (y, &t) in y.iter_mut().zip(&trits) {
                    *y = t as f32 * whole;
                }
            } else {
                for (g, (yg, tg)) in y
                    .chunks_mut(self.group)
                    .zip(trits.chunks(self.group))
                    .enumerate()
                {
                    let s = self.scale(r * per_row + g)?;
                    for (y, &t) in yg.iter_mut().zip(tg) {
                        *y = t as f32 * s;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Σ_c t(r, c) · x\[c\] over the columns `c0 .. c0 + x.len()` of row `r` (scalar reference for
    /// the int8-activation path; one call per scale group when `group > 0`).
    pub fn dot_i8_cols(&self, r: usize, c0: usize, x: &[i8]) -> Result<i32> {
        let end = c0
            .checked_add(x.len())
            .filter(|&e| e <= self.cols)
            .ok_or_else(|| {
                FormatError::out_of_range(
                    "ternary dot",
                    format!("columns {c0}..+{} of {}", x.len(), self.cols),
                )
            })?;
        let row = self.row_code_bytes(r)?;
        let mut acc = 0i64;
        for (c, &xv) in (c0..end).zip(x) {
            let code = self.code_in_row(row, c);
            if code == 3 {
                return Err(self.bad_code(r, c));
            }
            acc += i64::from(code as i8 - 1) * i64::from(xv);
        }
        i32::try_from(acc).map_err(|_| {
            FormatError::out_of_range("ternary dot", format!("sum {acc} overflows i32"))
        })
    }

    /// Σ_c t(r, c) · x\[c\] over a whole row (`x.len() == cols`).
    pub fn dot_i8(&self, r: usize, x: &[i8]) -> Result<i32> {
        if x.len() != self.cols {
            return Err(FormatError::InvalidArgument(format!(
                "activation has {} values, a row has {}",
                x.len(),
                self.cols
            )));
        }
        self.dot_i8_cols(r, 0, x)
    }

    /// Checks every code: no 2bit code 3, no base3 byte outside the 243 encodings, padding trits 0,
    /// and finite scales.
    pub fn validate(&self) -> Result<()> {
        let codec = match self.layout {
            TernaryLayout::Bits2 => "ternary 2bit",
            TernaryLayout::Base3 => "ternary base3",
        };
        let per_byte = match self.layout {
            TernaryLayout::Bits2 => 4,
            TernaryLayout::Base3 => 5,
        };
        // (with zero columns there are no code bytes, whatever the row count)
        for r in (0..self.rows).take_while(|_| self.row_bytes > 0) {
            let row = self.row_code_bytes(r)?;
            for (k, &b) in row.iter().enumerate() {
                if self.layout == TernaryLayout::Base3 && !base3_valid(b) {
                    return Err(FormatError::corrupt(
                        codec,
                        format!("row {r}, byte {k}: {b} is not a base-3 encoding"),
                    ));
                }
                for n in 0..per_byte {
                    let c = k * per_byte + n;
                    let code = match self.layout {
                        TernaryLayout::Bits2 => (b >> (2 * n)) & 3,
                        TernaryLayout::Base3 => base3_digit(b, n),
                    };
                    if code == 3 {
                        return Err(self.bad_code(r, c));
                    }
                    if c >= self.cols && code != 1 {
                        return Err(FormatError::NonZeroPadding {
                            what: format!(
                                "{codec} row {r}, padding element {c} (of {} columns) has trit {}",
                                self.cols,
                                code as i8 - 1
                            ),
                            offset: (r * self.row_bytes + k) as u64,
                        });
                    }
                }
            }
        }
        let n_scales = self.scales.len() / self.scale_type.size();
        for i in 0..n_scales {
            let s = self.scale(i)?;
            if !s.is_finite() {
                return Err(FormatError::corrupt(codec, format!("scale {i} is {s}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::Encoding;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    fn random_trits(n: usize, seed: &mut u64) -> Vec<i8> {
        (0..n).map(|_| (lcg(seed) % 3) as i8 - 1).collect()
    }

    #[test]
    fn base3_has_243_encodings_and_13_invalid_bytes() {
        let invalid: Vec<u8> = (0..=255u8).filter(|&b| !base3_valid(b)).collect();
        assert_eq!(
            invalid,
            vec![1, 20, 40, 60, 79, 99, 119, 138, 158, 178, 197, 217, 237]
        );
        assert_eq!(base3_encode([1; 5]), 128);
    }

    #[test]
    fn hand_computed_bytes() {
        // 2bit, one row of 5: codes 0,1,2,2,0 → byte0 = 0b10_10_01_00 = 0xA4, byte1 = code 0 then
        // padding code 1 ×3 = 0b01_01_01_00 = 0x54, bytes 2,3 padding 0x55.
        let b = pack(
            TernaryLayout::Bits2,
            1,
            5,
            &[-1, 0, 1, 1, -1],
            0,
            FloatType::F32,
            &[2.0],
        )
        .unwrap();
        assert_eq!(b, vec![0xA4, 0x54, 0x55, 0x55, 0, 0, 0, 0x40]);
        // base3, one row of 6: digits 0,1,2,2,0 → v = 0·81+1·27+2·9+2·3+0 = 51 → ceil(51·256/243) = 54;
        // then digit 0 + four padding 1s → v = 0·81+27+9+3+1 = 40 → ceil(40·256/243) = 43; 128, 128.
        let b = pack(
            TernaryLayout::Base3,
            1,
            6,
            &[-1, 0, 1, 1, -1, -1],
            0,
            FloatType::F16,
            &[1.0],
        )
        .unwrap();
        assert_eq!(b, vec![54, 43, 128, 128, 0x00, 0x3C]);
        let t = TernaryRef::new(TernaryLayout::Base3, 1, 6, 0, FloatType::F16, &b).unwrap();
        t.validate().unwrap();
        assert_eq!(
            t.dequantize().unwrap(),
            vec![-1.0, 0.0, 1.0, 1.0, -1.0, -1.0]
        );
    }

    #[test]
    fn round_trip_odd_shapes_groups_and_scale_types() {
        let mut seed = 7;
        for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
            for (rows, cols, group) in [
                (1, 1, 0),
                (3, 5, 5),
                (2, 16, 8),
                (4, 17, 0),
                (3, 19, 19),
                (2, 20, 4),
                (5, 21, 7),
                (3, 37, 0),
                (2, 64, 32),
                (0, 8, 0),
                (3, 0, 0),
            ] {
                for st in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
                    let n = rows * cols;
                    let trits = random_trits(n, &mut seed);
                    let ns = scale_count(rows as u64, cols as u64, group).unwrap() as usize;
                    let scales: Vec<f32> = (0..ns).map(|i| 0.5 + i as f32 * 0.25).collect();
                    let bytes =
                        pack(layout, rows as u64, cols as u64, &trits, group, st, &scales).unwrap();
                    let enc = Encoding::Ternary {
                        layout,
                        group,
                        scale_type: st,
                    };
                    let shape = [rows as u64, cols as u64];
                    assert_eq!(
                        enc.expected_bytes(&shape).unwrap(),
                        Some(bytes.len() as u64)
                    );
                    let t = TernaryRef::new(layout, rows as u64, cols as u64, group, st, &bytes)
                        .unwrap();
                    t.validate().unwrap();
                    assert_eq!(t.codes().len() % 4, 0);
                    let mut row = vec![0i8; cols];
                    for r in 0..rows {
                        t.row_trits(r, &mut row).unwrap();
                        assert_eq!(row, trits[r * cols..][..cols]);
                        for c in 0..cols {
                            assert_eq!(t.trit(r, c).unwrap(), trits[r * cols + c]);
                        }
                        let x: Vec<i8> = (0..cols).map(|c| (c as i8).wrapping_mul(37)).collect();
                        let want: i32 =
                            row.iter().zip(&x).map(|(&a, &b)| a as i32 * b as i32).sum();
                        assert_eq!(t.dot_i8(r, &x).unwrap(), want);
                    }
                    assert!(t.trit(rows, 0).is_err());
                    let deq = enc.decode_f32(&shape, &bytes).unwrap();
                    for (i, v) in deq.iter().enumerate() {
                        let (r, c) = (i / cols, i % cols);
                        let s = t.scale_at(r, c).unwrap();
                        assert_eq!(*v, trits[i] as f32 * s);
                        let gi = if group == 0 {
                            0
                        } else {
                            r * (cols / group as usize) + c / group as usize
                        };
                        assert_eq!(s, read_scale(st, &scale_bytes(st, scales[gi])));
                    }
                }
            }
        }
    }

    #[test]
    fn validate_rejects_bad_codes_and_padding() {
        let t2 = pack(
            TernaryLayout::Bits2,
            2,
            5,
            &[0; 10],
            0,
            FloatType::F32,
            &[1.0],
        )
        .unwrap();
        let mut bad = t2.clone();
        bad[4] |= 3; // row 1, element 0 → code 3
        let r = TernaryRef::new(TernaryLayout::Bits2, 2, 5, 0, FloatType::F32, &bad).unwrap();
        assert!(matches!(r.validate(), Err(FormatError::Corrupt { .. })));
        assert!(r.trit(1, 0).is_err());
        assert!(r.dequantize().is_err());
        let mut pad = t2.clone();
        pad[1] = 0b0101_1001; // row 0: element 4 code 1, element 5 (padding) code 2
        let r = TernaryRef::new(TernaryLayout::Bits2, 2, 5, 0, FloatType::F32, &pad).unwrap();
        assert!(matches!(
            r.validate(),
            Err(FormatError::NonZeroPadding { .. })
        ));
        r.dequantize().unwrap(); // padding does not affect values

        let t3 = pack(
            TernaryLayout::Base3,
            1,
            7,
            &[1; 7],
            0,
            FloatType::F32,
            &[1.0],
        )
        .unwrap();
        let mut bad = t3.clone();
        bad[0] = 20; // not an encoding
        let r = TernaryRef::new(TernaryLayout::Base3, 1, 7, 0, FloatType::F32, &bad).unwrap();
        assert!(matches!(r.validate(), Err(FormatError::Corrupt { .. })));
        let mut pad = t3.clone();
        pad[3] = base3_encode([1, 1, 2, 1, 1]); // padding byte with a +1
        let r = TernaryRef::new(TernaryLayout::Base3, 1, 7, 0, FloatType::F32, &pad).unwrap();
        assert!(matches!(
            r.validate(),
            Err(FormatError::NonZeroPadding { .. })
        ));
        let mut nan = t3.clone();
        let l = nan.len();
        nan[l - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
        let r = TernaryRef::new(TernaryLayout::Base3, 1, 7, 0, FloatType::F32, &nan).unwrap();
        assert!(r.validate().is_err());
    }

    #[test]
    fn argument_errors() {
        assert!(pack(
            TernaryLayout::Bits2,
            1,
            4,
            &[0, 0, 2, 0],
            0,
            FloatType::F32,
            &[1.0]
        )
        .is_err());
        assert!(pack(
            TernaryLayout::Bits2,
            1,
            4,
            &[0, 0, 0],
            0,
            FloatType::F32,
            &[1.0]
        )
        .is_err());
        assert!(pack(
            TernaryLayout::Bits2,
            1,
            4,
            &[0; 4],
            0,
            FloatType::F32,
            &[1.0, 2.0]
        )
        .is_err());
        assert!(pack(
            TernaryLayout::Bits2,
            1,
            6,
            &[0; 6],
            4,
            FloatType::F32,
            &[1.0]
        )
        .is_err());
        assert!(pack(
            TernaryLayout::Bits2,
            1,
            4,
            &[0; 4],
            0,
            FloatType::F16,
            &[1e6]
        )
        .is_err());
        assert!(TernaryRef::new(TernaryLayout::Bits2, 1, 4, 0, FloatType::F32, &[0; 7]).is_err());
        assert!(TernaryRef::new(
            TernaryLayout::Bits2,
            u64::MAX,
            u64::MAX,
            0,
            FloatType::F32,
            &[0; 8]
        )
        .is_err());
        // A huge row count with zero columns validates without looping over the rows.
        let r =
            TernaryRef::new(TernaryLayout::Bits2, 1 << 40, 0, 0, FloatType::F32, &[0; 4]).unwrap();
        r.validate().unwrap();
        assert!(r.dequantize().unwrap().is_empty());
    }

    #[test]
    fn absmean_matches_bitnet_formula() {
        // mean|w| = (0.1 + 0.5 + 0.05 + 1.0 + 0.35) / 5 = 0.4; w/alpha = 0.25, -1.25, 0.125, 2.5, -0.875
        let (t, a) = absmean_ternarize(&[0.1, -0.5, 0.05, 1.0, -0.35]);
        assert!((a - 0.4).abs() < 1e-7);
        assert_eq!(t, vec![0, -1, 0, 1, -1]);
        // ties round to even: 0.5 → 0, -0.5 → 0, 1.5 → 1 (clamped from 2)
        let (t, a) = absmean_ternarize(&[0.5, -0.5, 1.5, 1.5]);
        assert_eq!(a, 1.0);
        assert_eq!(t, vec![0, 0, 1, 1]);
        let (t, a) = absmean_ternarize(&[0.0; 3]);
        assert_eq!((t, a), (vec![0; 3], 1e-5));
        let (t, _) = absmean_ternarize(&[f32::NAN, 1.0]);
        assert_eq!(t[0], 0);
    }
}
