//! One chunk of a tensor payload: the contexts a chunk is coded in, and each chunk kind's encoder and decoder.

use super::*;

// ------------------------------------------------------------------------------------------------
// Per-encoding context

/// What a chunk decoder needs to know about the tensor.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ctx {
    /// Raw floats or decoded NeuZip floats of this width.
    Float(Width),
    Ternary {
        layout: TernaryLayout,
        cols: usize,
        row_bytes: usize,
        codes_len: usize,
        scale: Width,
    },
    Ggml(GgmlLayout),
    Other,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct GgmlLayout {
    pub(super) block_bytes: usize,
    /// Byte offsets of the f16 scale fields in a block (1 or 2 of them).
    pub(super) scales: [usize; 2],
    pub(super) n_scales: usize,
}

impl GgmlLayout {
    fn of(e: &Encoding) -> Option<Self> {
        use std::mem::offset_of;
        let bt = e.ggml_block()?;
        let (scales, n) = match bt {
            ggml::BlockType::Q8_0 => ([offset_of!(ggml::BlockQ8_0, d), 0], 1),
            ggml::BlockType::Q4_0 => ([offset_of!(ggml::BlockQ4_0, d), 0], 1),
            ggml::BlockType::Q4_1 => (
                [
                    offset_of!(ggml::BlockQ4_1, d),
                    offset_of!(ggml::BlockQ4_1, m),
                ],
                2,
            ),
            ggml::BlockType::Q6K => ([offset_of!(ggml::BlockQ6K, d), 0], 1),
            ggml::BlockType::Q5_0 => ([offset_of!(ggml::BlockQ5_0, d), 0], 1),
            ggml::BlockType::Q5_1 => (
                [
                    offset_of!(ggml::BlockQ5_1, d),
                    offset_of!(ggml::BlockQ5_1, m),
                ],
                2,
            ),
            ggml::BlockType::Iq4Nl => ([offset_of!(ggml::BlockIq4Nl, d), 0], 1),
            ggml::BlockType::Q3K => ([offset_of!(ggml::BlockQ3K, d), 0], 1),
            ggml::BlockType::Q2K => (
                [
                    offset_of!(ggml::BlockQ2K, d),
                    offset_of!(ggml::BlockQ2K, dmin),
                ],
                2,
            ),
            ggml::BlockType::Q4K => (
                [
                    offset_of!(ggml::BlockQ4K, d),
                    offset_of!(ggml::BlockQ4K, dmin),
                ],
                2,
            ),
            ggml::BlockType::Q5K => (
                [
                    offset_of!(ggml::BlockQ5K, d),
                    offset_of!(ggml::BlockQ5K, dmin),
                ],
                2,
            ),
            // not a `.tern` encoding (re-laid out as ternary)
            ggml::BlockType::Tq1_0 | ggml::BlockType::Tq2_0 => return None,
        };
        Some(GgmlLayout {
            block_bytes: bt.block_bytes(),
            scales,
            n_scales: n,
        })
    }
    fn is_scale_byte(&self, o: usize) -> bool {
        self.scales[..self.n_scales]
            .iter()
            .any(|&s| o == s || o == s + 1)
    }
    /// Split whole blocks into (scale words as little-endian u16 bytes, code bytes).
    fn split(&self, b: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut sc = Vec::with_capacity(b.len() / self.block_bytes * 2 * self.n_scales);
        let mut codes = Vec::with_capacity(b.len());
        for blk in b.chunks_exact(self.block_bytes) {
            for &s in &self.scales[..self.n_scales] {
                sc.extend_from_slice(&blk[s..s + 2]);
            }
            for (o, &x) in blk.iter().enumerate() {
                if !self.is_scale_byte(o) {
                    codes.push(x);
                }
            }
        }
        (sc, codes)
    }
}

pub(super) fn float_width(t: FloatType) -> Width {
    match t {
        FloatType::F32 => Width::W32,
        FloatType::F16 | FloatType::Bf16 => Width::W16,
    }
}

pub(super) fn ctx_of(info: &TensorInfo, method: Method) -> Result<Ctx> {
    if let Method::NeuZip { .. } = method {
        return match info.encoding {
            Encoding::NeuZip { dtype, .. } => Ok(Ctx::Float(float_width(dtype))),
            _ => Err(malformed(format!(
                "tensor {:?}: method neuzip on a {} tensor",
                info.name,
                info.encoding.name()
            ))),
        };
    }
    Ok(match &info.encoding {
        Encoding::F32 => Ctx::Float(Width::W32),
        Encoding::F16 | Encoding::Bf16 => Ctx::Float(Width::W16),
        Encoding::Ternary {
            layout, scale_type, ..
        } => {
            let (rows, cols) = rows_cols(&info.shape)?;
            Ctx::Ternary {
                layout: *layout,
                cols: usize_of(cols)?,
                row_bytes: usize_of(ternary::codes_bytes(*layout, 1, cols)?)?,
                codes_len: usize_of(ternary::codes_bytes(*layout, rows, cols)?)?,
                scale: float_width(*scale_type),
            }
        }
        e => GgmlLayout::of(e).map_or(Ctx::Other, Ctx::Ggml),
    })
}

// ------------------------------------------------------------------------------------------------
// Chunk tables

#[derive(Debug, Clone)]
pub(super) struct Chunk {
    pub(super) kind: u32,
    /// Range of the chunk's data in the delta file.
    pub(super) data: Range<usize>,
    /// Range of the target it writes.
    pub(super) out: Range<usize>,
}

/// Parse and validate a payload's chunk table against the record's target.
pub(super) fn parse_chunks(
    file: &[u8],
    payload: Range<usize>,
    target_len: usize,
    ctx: Ctx,
    has_base: bool,
    name: &str,
) -> Result<Vec<Chunk>> {
    let p = file
        .get(payload.clone())
        .ok_or_else(|| malformed("payload out of range"))?;
    let mut c = Cursor::new(p);
    let n = c.u32("chunk count")? as usize;
    if c.u32("chunk table")? != 0 {
        return Err(corrupt(format!("tensor {name:?}: reserved field not zero")));
    }
    if n.checked_mul(CHUNK_ENTRY).is_none_or(|b| b > p.len()) {
        return Err(corrupt(format!(
            "tensor {name:?}: {n} chunks do not fit the payload"
        )));
    }
    let mut chunks = Vec::with_capacity(n);
    let mut heads = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = c.u32("chunk entry")?;
        let len = c.u32("chunk entry")? as usize;
        let s = c.u64("chunk entry")?;
        let e = c.u64("chunk entry")?;
        heads.push((kind, len, s, e));
    }
    let mut at = 8 + n * CHUNK_ENTRY; // ok: ≤ p.len() checked above
    let mut expect = 0u64;
    for (i, (kind, len, s, e)) in heads.into_iter().enumerate() {
        let bad = |d: String| corrupt(format!("tensor {name:?}, chunk {i}: {d}"));
        if s != expect || e < s || e > target_len as u64 {
            return Err(bad(format!(
                "output range {s}..{e} does not continue at {expect} within {target_len}"
            )));
        }
        expect = e;
        let out = s as usize..e as usize; // ok: ≤ target_len, a usize
        let olen = out.len();
        let end = at
            .checked_add(len)
            .filter(|&x| x <= p.len())
            .ok_or_else(|| bad(format!("data of {len} bytes beyond the payload")))?;
        let pad_end = end.div_ceil(4) * 4;
        if p.get(end..pad_end.min(p.len()))
            .is_some_and(|z| z.iter().any(|&x| x != 0))
        {
            return Err(bad("non-zero padding".into()));
        }
        let whole = |unit: usize| unit > 0 && out.start % unit == 0 && olen % unit == 0;
        let ok = match (kind, ctx) {
            (K_BASE, _) => len == 0 && has_base,
            (K_COPY, _) => len == olen,
            (K_FM16, _) => has_base && whole(2),
            (K_FM32, _) => has_base && whole(4),
            (K_SPARSE, _) => has_base,
            (
                K_TERNARY,
                Ctx::Ternary {
                    row_bytes,
                    codes_len,
                    ..
                },
            ) => has_base && whole(row_bytes) && out.end <= codes_len,
            (K_GGML, Ctx::Ggml(g)) => has_base && whole(g.block_bytes),
            _ => false,
        };
        if !ok {
            return Err(bad(format!(
                "kind {kind} ({len} bytes) does not fit output {s}..{e} of this tensor{}",
                if has_base { "" } else { " (no base tensor)" }
            )));
        }
        chunks.push(Chunk {
            kind,
            data: payload.start + at..payload.start + end,
            out,
        });
        at = pad_end;
    }
    if expect != target_len as u64 {
        return Err(corrupt(format!(
            "tensor {name:?}: chunks cover {expect} of {target_len} bytes"
        )));
    }
    if at != p.len() {
        return Err(corrupt(format!(
            "tensor {name:?}: payload has {} bytes after its chunks",
            p.len().saturating_sub(at)
        )));
    }
    Ok(chunks)
}

// ------------------------------------------------------------------------------------------------
// Chunk codecs

/// The code (t + 1, 0..=2) of element `j` of a packed ternary row; `None` for an invalid code.
pub(super) fn trit_code(layout: TernaryLayout, row: &[u8], j: usize) -> Option<u8> {
    match layout {
        TernaryLayout::Bits2 => {
            let c = (row.get(j / 4)? >> (2 * (j % 4))) & 3;
            (c < 3).then_some(c)
        }
        TernaryLayout::Base3 => {
            const POW3: [u8; 5] = [1, 3, 9, 27, 81];
            let q = row.get(j / 5)?.wrapping_mul(POW3[j % 5]);
            Some(((u16::from(q) * 3) >> 8) as u8) // ok: < 3
        }
    }
}

/// Set element `j` of a packed ternary row to code `c` (0..=2).
pub(super) fn set_trit_code(layout: TernaryLayout, row: &mut [u8], j: usize, c: u8) -> Result<()> {
    match layout {
        TernaryLayout::Bits2 => {
            let b = row
                .get_mut(j / 4)
                .ok_or_else(|| corrupt("ternary change outside its row"))?;
            let sh = 2 * (j % 4);
            *b = (*b & !(3 << sh)) | (c << sh);
        }
        TernaryLayout::Base3 => {
            let old = *row
                .get(j / 5)
                .ok_or_else(|| corrupt("ternary change outside its row"))?;
            let mut d = [0u8; 5];
            for (n, dn) in d.iter_mut().enumerate() {
                *dn = trit_code(layout, &[old], n).unwrap_or(1);
            }
            d[j % 5] = c;
            let v = d.iter().fold(0u32, |acc, &x| acc * 3 + u32::from(x));
            if let Some(b) = row.get_mut(j / 5) {
                *b = (v * 256).div_ceil(243) as u8; // ok: v ≤ 242
            }
        }
    }
    Ok(())
}

/// Encode one chunk of `base` → `tuned` (same range) with `kind`; `None` when the codec cannot
/// express it (e.g. invalid ternary codes).
pub(super) fn encode_chunk(kind: u32, ctx: Ctx, base: &[u8], tuned: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match (kind, ctx) {
        (K_FM16, _) => coder::fm_encode(Width::W16, base, tuned, &mut out),
        (K_FM32, _) => coder::fm_encode(Width::W32, base, tuned, &mut out),
        (K_SPARSE, _) => {
            let ch: Vec<(usize, u8)> = base
                .iter()
                .zip(tuned)
                .enumerate()
                .filter(|(_, (b, t))| b != t)
                .map(|(i, (b, t))| (i, t.wrapping_sub(*b)))
                .collect();
            coder::sparse_encode(&ch, &mut out);
        }
        (
            K_TERNARY,
            Ctx::Ternary {
                layout,
                cols,
                row_bytes,
                ..
            },
        ) => {
            let mut ch = Vec::new();
            for (r, (rb, rt)) in base
                .chunks_exact(row_bytes)
                .zip(tuned.chunks_exact(row_bytes))
                .enumerate()
            {
                if rb == rt {
                    continue;
                }
                for j in 0..cols {
                    let b = trit_code(layout, rb, j)?;
                    let t = trit_code(layout, rt, j)?;
                    if b != t {
                        ch.push((r * cols + j, u8::from(t != (b + 1) % 3)));
                    }
                }
            }
            coder::sparse_encode(&ch, &mut out);
        }
        (K_GGML, Ctx::Ggml(g)) => {
            let (sb, cb) = g.split(base);
            let (st, ct) = g.split(tuned);
            let mut fm = Vec::new();
            coder::fm_encode(Width::W16, &sb, &st, &mut fm);
            out.extend_from_slice(&(fm.len() as u32).to_le_bytes()); // ok: small chunk
            out.extend_from_slice(&fm);
            let ch: Vec<(usize, u8)> = cb
                .iter()
                .zip(&ct)
                .enumerate()
                .filter(|(_, (b, t))| b != t)
                .map(|(i, (b, t))| (i, t.wrapping_sub(*b)))
                .collect();
            coder::sparse_encode(&ch, &mut out);
        }
        _ => return None,
    }
    Some(out)
}

/// Decode one chunk into `out`, reading the same range of the base.
pub(super) fn decode_chunk(
    kind: u32,
    ctx: Ctx,
    data: &[u8],
    base: &[u8],
    out: &mut [u8],
) -> Result<()> {
    let mut c = Cursor::new(data);
    let need_base = kind != K_COPY;
    if need_base && base.len() != out.len() {
        return Err(corrupt("chunk range outside the base tensor"));
    }
    match (kind, ctx) {
        (K_BASE, _) => out.copy_from_slice(base),
        (K_COPY, _) => {
            out.copy_from_slice(c.take(out.len(), "copy")?);
        }
        (K_FM16, _) => coder::fm_decode(Width::W16, &mut c, base, out)?,
        (K_FM32, _) => coder::fm_decode(Width::W32, &mut c, base, out)?,
        (K_SPARSE, _) => {
            out.copy_from_slice(base);
            let n = out.len();
            coder::sparse_decode(&mut c, n, 256, |i, v| {
                let o = out
                    .get_mut(i)
                    .ok_or_else(|| corrupt("sparse change outside the chunk"))?;
                if v == 0 {
                    return Err(corrupt("sparse change of zero"));
                }
                *o = o.wrapping_add(v);
                Ok(())
            })?;
        }
        (
            K_TERNARY,
            Ctx::Ternary {
                layout,
                cols,
                row_bytes,
                ..
            },
        ) => {
            out.copy_from_slice(base);
            let rows = out.len() / row_bytes.max(1);
            let n = rows
                .checked_mul(cols)
                .ok_or_else(|| corrupt("ternary chunk too large"))?;
            coder::sparse_decode(&mut c, n, 2, |i, v| {
                let (r, j) = (i / cols, i % cols); // ok: cols > 0 since n > i
                let row = out
                    .get_mut(r * row_bytes..(r + 1) * row_bytes)
                    .ok_or_else(|| corrupt("ternary change outside the chunk"))?;
                let old = trit_code(layout, row, j)
                    .ok_or_else(|| corrupt("ternary change on an invalid base code"))?;
                let new = if v == 0 { (old + 1) % 3 } else { (old + 2) % 3 };
                set_trit_code(layout, row, j, new)
            })?;
        }
        (K_GGML, Ctx::Ggml(g)) => {
            let fm_len = c.u32("ggml scales length")? as usize;
            let fm = c.take(fm_len, "ggml scales")?;
            let (sb, cb) = g.split(base);
            let mut sc = vec![0u8; sb.len()];
            let mut fc = Cursor::new(fm);
            coder::fm_decode(Width::W16, &mut fc, &sb, &mut sc)?;
            fc.expect_done("ggml scales")?;
            let mut codes = cb;
            let n = codes.len();
            coder::sparse_decode(&mut c, n, 256, |i, v| {
                let o = codes
                    .get_mut(i)
                    .ok_or_else(|| corrupt("ggml change outside the chunk"))?;
                if v == 0 {
                    return Err(corrupt("sparse change of zero"));
                }
                *o = o.wrapping_add(v);
                Ok(())
            })?;
            // Interleave scales and codes back into blocks.
            let (mut si, mut ci) = (sc.iter(), codes.iter());
            for blk in out.chunks_exact_mut(g.block_bytes) {
                for &s in &g.scales[..g.n_scales] {
                    for k in 0..2 {
                        blk[s + k] = *si.next().ok_or_else(|| corrupt("ggml scales short"))?;
                    }
                }
                for (o, x) in blk.iter_mut().enumerate() {
                    if !g.is_scale_byte(o) {
                        *x = *ci.next().ok_or_else(|| corrupt("ggml codes short"))?;
                    }
                }
            }
        }
        _ => return Err(corrupt(format!("chunk kind {kind} on this tensor"))),
    }
    c.expect_done("chunk")
}
