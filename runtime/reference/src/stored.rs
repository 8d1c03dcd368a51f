//! Float weights kept in their stored form (f16, bf16, Q6_K, NeuZip), decoded to f32 a row or a
//! row tile at a time when a product or an embedding lookup needs them.
//!
//! The decoded values are exactly those a whole-tensor decode gives (f16/bf16 → f32 is exact, Q6_K
//! and NeuZip decode deterministically), and the products then run the same f32 code on them, so
//! results are bit-identical to widening everything to f32 at load — at half (f16/bf16), ~0.2×
//! (Q6_K) or less (NeuZip) of the memory.
//!
//! **NeuZip** blobs are cut into independently decodable blocks that follow rows
//! (`tern_format::neuzip`, "Blocks and rows"), so they stay compressed: a product decodes one tile
//! of whole blocks at a time ([`NeuZipRows::tile_rows`] rows, the matmul's row chunks are aligned
//! to it), an embedding lookup decodes the block holding its row up to that row. The blob is parsed
//! once at load and every block is decoded once there (tile by tile, nothing kept) so that a
//! damaged stream is refused at load, not in the middle of a generation.

use half::slice::HalfFloatSliceExt;
use tern_format::neuzip::Plan;
use tern_format::FloatType;

use crate::error::{check_len, try_zeroed, ReferenceError, Result};

/// A NeuZip-compressed `[rows, cols]` float tensor.
#[derive(Debug, Clone)]
pub struct NeuZipRows {
    blob: Vec<u8>,
    plan: Plan,
}

impl NeuZipRows {
    /// Keep `blob` (a NeuZip stream of `rows × cols` elements of `dtype` with `mantissa_bits`),
    /// after checking that it describes this tensor and that every block decodes.
    pub fn new(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: FloatType,
        mantissa_bits: u8,
        blob: &[u8],
    ) -> Result<Self> {
        let nz = Self::parse(name, rows, cols, dtype, mantissa_bits, blob)?;
        let tile = tile_of(&nz.plan);
        let mut r = 0;
        while r < rows {
            let n = tile.min(rows - r);
            nz.raw_rows(r, n)?;
            r += n;
        }
        Ok(nz)
    }

    /// [`Self::new`] without the decode pass: only the stream's structure is checked.
    fn parse(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: FloatType,
        mantissa_bits: u8,
        blob: &[u8],
    ) -> Result<Self> {
        Ok(Self {
            plan: plan_of(name, rows, cols, dtype, mantissa_bits, blob)?,
            blob: blob.to_vec(),
        })
    }

    /// Decode a whole stream at load into 16-bit floats `T` (f16/bf16 streams stay 16-bit), tile
    /// by tile so that the peak is the decoded tensor plus one tile. Every block is decoded, so a
    /// damaged stream is refused here too.
    pub fn decode_whole<T: bytemuck::Pod + Default>(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: FloatType,
        mantissa_bits: u8,
        blob: &[u8],
        from: fn([u8; 2]) -> T,
    ) -> Result<Vec<T>> {
        let plan = plan_of(name, rows, cols, dtype, mantissa_bits, blob)?;
        let tile = tile_of(&plan);
        let mut out: Vec<T> = try_zeroed(
            &format!("NeuZip tensor {name:?} decoded at load"),
            rows.saturating_mul(cols),
        )?;
        let mut r = 0;
        while r < rows {
            let k = tile.min(rows - r);
            let raw = plan.decode_rows(blob, r as u64, k as u64)?;
            let dst = out.get_mut(r * cols..(r + k) * cols).unwrap_or_default();
            for (o, b) in dst.iter_mut().zip(raw.chunks_exact(2)) {
                if let &[x, y] = b {
                    *o = from([x, y]);
                }
            }
            r += k;
        }
        Ok(out)
    }

    /// The decoded element type.
    pub fn dtype(&self) -> FloatType {
        self.plan.dtype
    }

    /// Rows per NeuZip block (1 when a row spans several blocks): tiles of a multiple of this
    /// decode no block twice.
    pub fn tile_rows(&self) -> usize {
        block_rows(&self.plan)
    }

    /// Bytes held (the compressed stream).
    pub fn resident_bytes(&self) -> usize {
        self.blob.len()
    }

    /// Rows `r0 .. r0 + n` as raw little-endian elements of [`Self::dtype`].
    pub fn raw_rows(&self, r0: usize, n: usize) -> Result<Vec<u8>> {
        Ok(self.plan.decode_rows(&self.blob, r0 as u64, n as u64)?)
    }
}

/// Rows per NeuZip block of `plan` (1 when a row spans several blocks).
fn block_rows(plan: &Plan) -> usize {
    if plan.blocks_per_row == 1 {
        (plan.rows_per_block as usize).max(1)
    } else {
        1
    }
}

/// Rows decoded at once at load: at least 64, whole blocks.
fn tile_of(plan: &Plan) -> usize {
    let b = block_rows(plan);
    b * 64usize.div_ceil(b)
}

/// Parse `blob` and check that it is a stream of `rows × cols` elements of `dtype` with
/// `mantissa_bits`.
fn plan_of(
    name: &str,
    rows: usize,
    cols: usize,
    dtype: FloatType,
    mantissa_bits: u8,
    blob: &[u8],
) -> Result<Plan> {
    let plan = Plan::parse(blob)?;
    if plan.dtype != dtype
        || plan.mantissa_bits != mantissa_bits
        || plan.row_len != cols.max(1) as u64
        || Some(plan.n_elements) != (rows as u64).checked_mul(cols as u64)
    {
        return Err(ReferenceError::TensorShape {
            name: name.into(),
            expected: vec![rows as u64, cols as u64],
            found: vec![plan.n_elements / plan.row_len.max(1), plan.row_len],
        });
    }
    Ok(plan)
}

/// Raw little-endian elements of `t` into f32 (`out.len()` elements).
pub(crate) fn raw_to_f32(t: FloatType, raw: &[u8], out: &mut [f32]) -> Result<()> {
    check_len("raw_to_f32", "raw", raw.len(), out.len() * t.size())?;
    match t {
        FloatType::F32 => {
            for (o, b) in out.iter_mut().zip(raw.chunks_exact(4)) {
                if let &[a, b, c, d] = b {
                    *o = f32::from_le_bytes([a, b, c, d]);
                }
            }
        }
        FloatType::F16 => match bytemuck::try_cast_slice::<u8, half::f16>(raw) {
            Ok(h) => h.convert_to_f32_slice(out),
            Err(_) => {
                for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
                    if let &[a, b] = b {
                        *o = half::f16::from_le_bytes([a, b]).to_f32();
                    }
                }
            }
        },
        FloatType::Bf16 => {
            for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
                if let &[a, b] = b {
                    *o = half::bf16::from_le_bytes([a, b]).to_f32();
                }
            }
        }
    }
    Ok(())
}

/// Little-endian 16-bit floats as a vector of `T` (aligned, so rows convert with SIMD).
pub(crate) fn halves<T: bytemuck::Pod>(bytes: &[u8], from: fn([u8; 2]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(2)
        .map(|b| match b {
            &[x, y] => from([x, y]),
            _ => from([0, 0]),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::matmul::{MatmulOptions, Matrix, WeightData};
    use tern_format::neuzip::{encode_with, Params};
    use tern_format::{ActQuant, Encoding, FloatType};

    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Every stored float encoding gives bit for bit what widening it to f32 at load gave (the
    /// previous CPU path): products with float and quantized activations, row tiles, row lookups;
    /// and holds only the stored bytes.
    #[test]
    fn stored_floats_equal_widened_f32() {
        let mut r = rng(9);
        let mut cases: Vec<(usize, usize, Encoding, Vec<u8>)> = Vec::new();
        for (rows, cols) in [(70, 37), (9, 250), (130, 64)] {
            let v: Vec<f32> = (0..rows * cols).map(|_| r() * 0.3).collect();
            let f16: Vec<u8> = v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect();
            let bf16: Vec<u8> = v
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect();
            cases.push((rows, cols, Encoding::F16, f16.clone()));
            cases.push((rows, cols, Encoding::Bf16, bf16.clone()));
            // small blocks: several rows per block (cols 37, 64) or several blocks per row (250)
            let p = Params {
                lanes: 4,
                block_symbols: 100,
            };
            for (dt, raw, k) in [(FloatType::F16, &f16, 10u8), (FloatType::Bf16, &bf16, 3u8)] {
                let blob = encode_with(dt, k, raw, cols, p).unwrap();
                let enc = Encoding::NeuZip {
                    dtype: dt,
                    mantissa_bits: k,
                };
                cases.push((rows, cols, enc, blob));
            }
        }
        // Q6_K: rows of whole 256-element super-blocks with a sane scale
        let (rows, cols) = (5, 512);
        let mut q6: Vec<u8> = (0..rows * cols / 256 * 210)
            .map(|_| (r() * 127.0) as i8 as u8)
            .collect();
        for b in q6.chunks_exact_mut(210) {
            b[208..].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
        cases.push((rows, cols, Encoding::Q6K, q6));

        for (rows, cols, enc, bytes) in cases {
            let what = format!("{} {rows}×{cols}", enc.name());
            let m = Matrix::from_encoded("w", rows, cols, &enc, &bytes).unwrap();
            assert!(!matches!(m.data, WeightData::F32(_)), "{what} was widened");
            assert_eq!(m.resident_bytes(), bytes.len(), "{what}");
            let wide = enc.decode_f32(&[rows as u64, cols as u64], &bytes).unwrap();
            let f = Matrix::from_f32(rows, cols, wide).unwrap();
            let n = 3;
            let x: Vec<f32> = (0..n * cols).map(|_| r()).collect();
            for act in [ActQuant::None, ActQuant::Int8] {
                for parallel in [false, true] {
                    let mm = MatmulOptions {
                        parallel,
                        ..Default::default()
                    };
                    let (mut a, mut b) = (vec![0.0; n * rows], vec![0.0; n * rows]);
                    m.matmul(&x, act, &mm, &mut a).unwrap();
                    f.matmul(&x, act, &mm, &mut b).unwrap();
                    assert_eq!(bits(&a), bits(&b), "{what} {act:?}");
                }
            }
            let acts = m
                .prepare_acts(&x, ActQuant::None, &MatmulOptions::default())
                .unwrap();
            let (r0, r1) = (rows / 3, rows - 1);
            let (mut a, mut b) = (vec![0.0; (r1 - r0) * n], vec![0.0; (r1 - r0) * n]);
            m.row_tile(r0, r1, &acts, &mut a).unwrap();
            let facts = f
                .prepare_acts(&x, ActQuant::None, &MatmulOptions::default())
                .unwrap();
            f.row_tile(r0, r1, &facts, &mut b).unwrap();
            assert_eq!(bits(&a), bits(&b), "{what} tile");
            let (mut a, mut b) = (vec![0.0; cols], vec![0.0; cols]);
            for row in [0, rows / 2, rows - 1] {
                m.row_f32(row, &mut a).unwrap();
                f.row_f32(row, &mut b).unwrap();
                assert_eq!(bits(&a), bits(&b), "{what} row {row}");
            }
            assert!(m.row_f32(rows, &mut a).is_err());
        }
    }

    #[test]
    fn damaged_neuzip_stream_is_refused_at_load() {
        let v: Vec<u8> = (0..40 * 64)
            .flat_map(|i| half::f16::from_f32((i % 17) as f32 * 0.01 - 0.08).to_le_bytes())
            .collect();
        let p = Params {
            lanes: 4,
            block_symbols: 256,
        };
        let blob = encode_with(FloatType::F16, 10, &v, 64, p).unwrap();
        let plan = tern_format::neuzip::Plan::parse(&blob).unwrap();
        let enc = Encoding::NeuZip {
            dtype: FloatType::F16,
            mantissa_bits: 10,
        };
        Matrix::from_encoded("w", 40, 64, &enc, &blob).unwrap();
        // flip bits in the words of the last block: parses, but a lane no longer ends right
        let mut bad = blob.clone();
        let w = plan.words.offset as usize + plan.words.len as usize - 8;
        for b in &mut bad[w..w + 6] {
            *b ^= 0x5a;
        }
        assert!(Matrix::from_encoded("w", 40, 64, &enc, &bad).is_err());
        // a blob describing another shape
        assert!(Matrix::from_encoded("w", 20, 128, &enc, &blob).is_err());
    }
}
