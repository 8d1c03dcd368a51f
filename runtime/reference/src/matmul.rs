//! Weight matrices and `y = W·x` for every weight encoding, batched over tokens.
//!
//! A [`Matrix`] is `[rows, cols]` (PyTorch `[out_features, in_features]`). [`Matrix::matmul`]
//! computes, for `n` tokens of `cols` activations each, `y[t][r] = Σ_c W[r][c] · x[t][c]`:
//!
//! | weights | activations `ActQuant::None` | quantized activations (BitNet) |
//! |---|---|---|
//! | f32; f16 / bf16 / Q6_K, Q5_0, Q5_1, IQ4_NL, Q2_K..Q5_K / NeuZip (kept as stored, [`crate::stored`]) | row (tile) decoded to f32, then [`dot_f32`] | dot with `x_q / s` |
//! | Q8_0 / Q4_0 / Q4_1 | row dequantized, then [`dot_f32`]; or llama.cpp-style Q8 activation blocks | dot with `x_q / s` |
//! | ternary (packed codes as stored, [`crate::packed`]) | `Σ_g scale_g · Σ t·x` (f32) | `(Σ_g scale_g · Σ t·x_q) / s`, inner sums in i32 on the codes |
//!
//! Weights stay in their stored form ([`Matrix::resident_bytes`] ≈ the file's bytes); rows are
//! decoded per tile when a product or a lookup needs them.
//!
//! Each output element is computed by the same sequential code whatever the batch size or thread
//! count, so a batched prefill gives bit-identical results to one token at a time.

use tern_format::ggml::BlockType;
use tern_format::{ActQuant, Encoding, FloatType};

use crate::error::{check_len, ReferenceError, Result};
use crate::ggml_cpu;
use crate::ggml_dot;
use crate::kernels::dot_f32;
use crate::packed::TernActs;
pub use crate::packed::{ternary_from_values, TernaryWeights};
use crate::par_map;
use crate::quant::quantize_act;
use crate::stored::{halves, raw_to_f32, NeuZipRows};

/// The stored form of a weight matrix.
#[derive(Debug, Clone)]
pub enum WeightData {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    Bf16(Vec<half::bf16>),
    /// Q6_K super-blocks, each row a whole number of them.
    Q6K(Vec<u8>),
    /// Other ggml blocks decoded a row at a time to f32 as Q6_K is (Q5_0, Q5_1, IQ4_NL and the
    /// K-quants Q2_K..Q5_K; [`tern_format::ggml`] dequantizes them as llama.cpp does), each row a
    /// whole number of blocks.
    Blocks(BlockType, Vec<u8>),
    NeuZip(NeuZipRows),
    Q8_0(Vec<u8>),
    Q4_0(Vec<u8>),
    Q4_1(Vec<u8>),
    Ternary(TernaryWeights),
}

/// A `[rows, cols]` weight matrix.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: WeightData,
}

/// Where a NeuZip-compressed matrix lives on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NeuZipResidency {
    /// Kept as the compressed stream; products and lookups decode tiles of blocks when they run
    /// (least memory; every use of a large tensor such as the head pays a decode).
    #[default]
    Compressed,
    /// Decoded once at load into its float type (f16/bf16 stay 16-bit): bit-identical results,
    /// the speed and the memory of a raw tensor of that type.
    Decoded,
}

/// How a float-activation product with ggml-block weights is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GgmlActivations {
    /// f32 activations times dequantized blocks (the reference semantics).
    #[default]
    F32,
    /// Quantize activations per 32-block as llama.cpp's CPU backend does (Q8_0 for Q8_0/Q4_0
    /// weights, Q8_1 for Q4_1) and use integer block dots with llama.cpp's x86 lane order
    /// ([`ggml_cpu::dot_q4_1_q8_1`], [`ggml_cpu::dot_q8_0_q8_0_tinyblas`]).
    LlamaCpp,
}

/// Knobs of the matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulOptions {
    pub ggml_activations: GgmlActivations,
    /// Split rows over the rayon thread pool (feature `parallel`); otherwise one thread.
    pub parallel: bool,
}

impl Default for MatmulOptions {
    fn default() -> Self {
        Self {
            ggml_activations: GgmlActivations::F32,
            parallel: true,
        }
    }
}

/// Activations of a block of tokens prepared once by [`Matrix::prepare_acts`] (float, quantized
/// integers, or llama.cpp activation blocks, as the matrix's encoding and options ask), then shared
/// by every [`Matrix::row_tile`].
pub struct PreparedActs {
    acts: Acts,
    n: usize,
}

impl PreparedActs {
    /// Number of tokens.
    pub fn tokens(&self) -> usize {
        self.n
    }
}

/// Activations prepared once per matmul (per token), then shared by all rows.
enum Acts {
    F32(Vec<f32>),
    /// `[n][cols]` integers and the per-token multipliers `s` (x ≈ q / s); for packed ternary
    /// weights also in the plane order of their codes.
    Int {
        q: Vec<i8>,
        s: Vec<f32>,
        tern: Option<TernActs>,
    },
    /// `[n][cols/32]` llama.cpp activation blocks.
    Blocks(Vec<ggml_dot::ActBlock>),
}

impl Matrix {
    /// Build from decoded f32 values, checking the length.
    pub fn from_f32(rows: usize, cols: usize, values: Vec<f32>) -> Result<Self> {
        check_len("Matrix::from_f32", "values", values.len(), rows * cols)?;
        Ok(Self {
            rows,
            cols,
            data: WeightData::F32(values),
        })
    }

    /// Build from a tensor's stored bytes and encoding, kept as stored: ggml blocks, f16/bf16,
    /// Q6_K (rows of whole super-blocks), NeuZip streams and ternary codes + scales are copied as
    /// they are (f32 too); only a Q6_K tensor whose rows are not whole super-blocks is widened to
    /// f32.
    pub fn from_encoded(
        name: &str,
        rows: usize,
        cols: usize,
        encoding: &Encoding,
        bytes: &[u8],
    ) -> Result<Self> {
        Self::from_encoded_with(
            name,
            rows,
            cols,
            encoding,
            bytes,
            NeuZipResidency::Compressed,
        )
    }

    /// [`Self::from_encoded`], with NeuZip tensors kept compressed or decoded at load as `neuzip`
    /// says.
    pub fn from_encoded_with(
        name: &str,
        rows: usize,
        cols: usize,
        encoding: &Encoding,
        bytes: &[u8],
        neuzip: NeuZipResidency,
    ) -> Result<Self> {
        let shape = [rows as u64, cols as u64];
        let data = match (encoding, encoding.ggml_block()) {
            // Q8_0/Q4_0/Q4_1 stay blocks (the block dots of `ggml_dot`/`ggml_cpu`); Q6_K is
            // widened to f32 below.
            (_, Some(bt @ (BlockType::Q8_0 | BlockType::Q4_0 | BlockType::Q4_1))) => {
                if cols % bt.block_elems() != 0
                    || Some(bytes.len())
                        != (cols / bt.block_elems())
                            .checked_mul(bt.block_bytes())
                            .and_then(|rb| rb.checked_mul(rows))
                {
                    return Err(ReferenceError::TensorShape {
                        name: name.into(),
                        expected: shape.to_vec(),
                        found: vec![bytes.len() as u64],
                    });
                }
                let b = bytes.to_vec();
                match bt {
                    BlockType::Q8_0 => WeightData::Q8_0(b),
                    BlockType::Q4_0 => WeightData::Q4_0(b),
                    _ => WeightData::Q4_1(b),
                }
            }
            (Encoding::Ternary { .. }, _) => WeightData::Ternary(TernaryWeights::from_stored(
                name, rows, cols, encoding, bytes,
            )?),
            (Encoding::F16 | Encoding::Bf16, _) => {
                if Some(bytes.len()) != rows.checked_mul(cols).and_then(|n| n.checked_mul(2)) {
                    return Err(ReferenceError::TensorShape {
                        name: name.into(),
                        expected: shape.to_vec(),
                        found: vec![bytes.len() as u64],
                    });
                }
                if *encoding == Encoding::F16 {
                    WeightData::F16(halves(bytes, half::f16::from_le_bytes))
                } else {
                    WeightData::Bf16(halves(bytes, half::bf16::from_le_bytes))
                }
            }
            (_, Some(BlockType::Q6K))
                if cols % BlockType::Q6K.block_elems() == 0
                    && Some(bytes.len())
                        == (cols / BlockType::Q6K.block_elems())
                            .checked_mul(BlockType::Q6K.block_bytes())
                            .and_then(|rb| rb.checked_mul(rows)) =>
            {
                WeightData::Q6K(bytes.to_vec())
            }
            (
                _,
                Some(
                    bt @ (BlockType::Q5_0
                    | BlockType::Q5_1
                    | BlockType::Iq4Nl
                    | BlockType::Q2K
                    | BlockType::Q3K
                    | BlockType::Q4K
                    | BlockType::Q5K),
                ),
            ) => {
                if cols % bt.block_elems() != 0
                    || Some(bytes.len())
                        != (cols / bt.block_elems())
                            .checked_mul(bt.block_bytes())
                            .and_then(|rb| rb.checked_mul(rows))
                {
                    return Err(ReferenceError::TensorShape {
                        name: name.into(),
                        expected: shape.to_vec(),
                        found: vec![bytes.len() as u64],
                    });
                }
                WeightData::Blocks(bt, bytes.to_vec())
            }
            (
                Encoding::NeuZip {
                    dtype: dt @ (FloatType::F16 | FloatType::Bf16),
                    mantissa_bits,
                },
                _,
            ) if neuzip == NeuZipResidency::Decoded => {
                if *dt == FloatType::F16 {
                    WeightData::F16(NeuZipRows::decode_whole(
                        name,
                        rows,
                        cols,
                        *dt,
                        *mantissa_bits,
                        bytes,
                        half::f16::from_le_bytes,
                    )?)
                } else {
                    WeightData::Bf16(NeuZipRows::decode_whole(
                        name,
                        rows,
                        cols,
                        *dt,
                        *mantissa_bits,
                        bytes,
                        half::bf16::from_le_bytes,
                    )?)
                }
            }
            (
                Encoding::NeuZip {
                    dtype,
                    mantissa_bits,
                },
                _,
            ) if neuzip == NeuZipResidency::Compressed => WeightData::NeuZip(NeuZipRows::new(
                name,
                rows,
                cols,
                *dtype,
                *mantissa_bits,
                bytes,
            )?),
            // f32, Q6_K with partial rows, an f32 NeuZip stream decoded at load
            _ => WeightData::F32(encoding.decode_f32(&shape, bytes)?),
        };
        Ok(Self { rows, cols, data })
    }

    /// Row `r` as f32 (embedding lookup).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<()> {
        check_len("Matrix::row_f32", "out", out.len(), self.cols)?;
        if r >= self.rows {
            return Err(ReferenceError::shape(
                "Matrix::row_f32",
                format!("row {r} of {}", self.rows),
            ));
        }
        let c = self.cols;
        match &self.data {
            WeightData::F32(v) => {
                out.copy_from_slice(v.get(r * c..(r + 1) * c).unwrap_or_default())
            }
            WeightData::Q8_0(b) | WeightData::Q4_0(b) | WeightData::Q4_1(b) => {
                if let Some(bt) = self.block_type() {
                    let rb = c / bt.block_elems() * bt.block_bytes();
                    let row = b.get(r * rb..(r + 1) * rb).unwrap_or_default();
                    ggml_dot::dequantize_row(bt, row, out)?;
                }
            }
            WeightData::Ternary(t) => t.row_f32(r, out, &mut Vec::new())?,
            WeightData::F16(_)
            | WeightData::Bf16(_)
            | WeightData::Q6K(_)
            | WeightData::Blocks(..)
            | WeightData::NeuZip(_) => self.float_row(r, out)?,
        }
        Ok(())
    }

    /// Bytes of weights held in memory (as stored; per-call decode scratch not included).
    pub fn resident_bytes(&self) -> usize {
        match &self.data {
            WeightData::F32(v) => v.len() * 4,
            WeightData::F16(v) => v.len() * 2,
            WeightData::Bf16(v) => v.len() * 2,
            WeightData::Q6K(b)
            | WeightData::Blocks(_, b)
            | WeightData::Q8_0(b)
            | WeightData::Q4_0(b)
            | WeightData::Q4_1(b) => b.len(),
            WeightData::NeuZip(z) => z.resident_bytes(),
            WeightData::Ternary(t) => t.resident_bytes(),
        }
    }

    /// Row `r` (< rows, checked by the caller) of a float matrix decoded to f32 into `out`
    /// (`cols` elements).
    #[inline(always)]
    fn float_row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        let c = self.cols;
        match &self.data {
            WeightData::F32(v) => {
                out.copy_from_slice(v.get(r * c..(r + 1) * c).unwrap_or_default());
            }
            WeightData::F16(v) => {
                use half::slice::HalfFloatSliceExt;
                v.get(r * c..(r + 1) * c)
                    .unwrap_or_default()
                    .convert_to_f32_slice(out);
            }
            WeightData::Bf16(v) => {
                use half::slice::HalfFloatSliceExt;
                v.get(r * c..(r + 1) * c)
                    .unwrap_or_default()
                    .convert_to_f32_slice(out);
            }
            WeightData::Q6K(b) => {
                let rb = c / BlockType::Q6K.block_elems() * BlockType::Q6K.block_bytes();
                let row = b.get(r * rb..(r + 1) * rb).unwrap_or_default();
                tern_format::ggml::dequantize_into(BlockType::Q6K, row, out)?;
            }
            WeightData::Blocks(bt, b) => {
                let rb = c / bt.block_elems() * bt.block_bytes();
                let row = b.get(r * rb..(r + 1) * rb).unwrap_or_default();
                tern_format::ggml::dequantize_into(*bt, row, out)?;
            }
            WeightData::NeuZip(z) => raw_to_f32(z.dtype(), &z.raw_rows(r, 1)?, out)?,
            _ => {
                return Err(ReferenceError::shape(
                    "Matrix::float_row",
                    "not a float matrix",
                ))
            }
        }
        Ok(())
    }

    /// Rows per parallel chunk of a product: 64, rounded up to whole NeuZip blocks.
    fn row_chunk(&self) -> usize {
        match &self.data {
            WeightData::NeuZip(z) => z.tile_rows() * 64usize.div_ceil(z.tile_rows()),
            _ => 64,
        }
    }

    /// `y[t][r] = Σ_c W[r][c] · x[t][c]` for `n = x.len() / cols` tokens; `act` quantizes each
    /// token's activations first (BitNet), `ActQuant::None` keeps them float.
    pub fn matmul(
        &self,
        x: &[f32],
        act: ActQuant,
        opts: &MatmulOptions,
        y: &mut [f32],
    ) -> Result<()> {
        if self.cols == 0 || x.len() % self.cols != 0 {
            return Err(ReferenceError::shape(
                "matmul",
                format!("input of {} is not whole rows of {}", x.len(), self.cols),
            ));
        }
        let n = x.len() / self.cols;
        check_len("matmul", "y", y.len(), n * self.rows)?;
        let acts = self.prepare(x, n, act, opts)?;
        // Rows in chunks; each chunk fills a [chunk][n] block, scattered into y[t][r] afterwards.
        let chunk = self.row_chunk();
        let n_chunks = self.rows.div_ceil(chunk);
        let run = |ci: usize| -> Result<Vec<f32>> {
            let r0 = ci * chunk;
            let r1 = (r0 + chunk).min(self.rows);
            let mut out = vec![0.0f32; (r1 - r0) * n];
            self.rows_dots(r0, r1, &acts, n, &mut out)?;
            Ok(out)
        };
        let blocks: Vec<Result<Vec<f32>>> = par_map(n_chunks, opts.parallel, run);
        for (ci, blk) in blocks.into_iter().enumerate() {
            for (i, row) in blk?.chunks_exact(n.max(1)).enumerate() {
                let r = ci * chunk + i;
                for (t, &v) in row.iter().enumerate() {
                    if let Some(d) = y.get_mut(t * self.rows + r) {
                        *d = v;
                    }
                }
            }
        }
        Ok(())
    }

    /// Prepare the activations of `x.len() / cols` tokens once, exactly as [`Matrix::matmul`]
    /// does, for [`Matrix::row_tile`] calls over any subset of the rows (used by the fused scorer
    /// in [`crate::cce`], which never holds all rows' outputs at once).
    pub fn prepare_acts(
        &self,
        x: &[f32],
        act: ActQuant,
        opts: &MatmulOptions,
    ) -> Result<PreparedActs> {
        if self.cols == 0 || x.len() % self.cols != 0 {
            return Err(ReferenceError::shape(
                "prepare_acts",
                format!("input of {} is not whole rows of {}", x.len(), self.cols),
            ));
        }
        let n = x.len() / self.cols;
        Ok(PreparedActs {
            acts: self.prepare(x, n, act, opts)?,
            n,
        })
    }

    /// Rows `r0..r1` of `W·x` for every prepared token, into `out` laid out `[r1 - r0][n]`
    /// (row-major by weight row). The same code and order as [`Matrix::matmul`], so each value is
    /// bit-identical to the matching element of the full product. Runs on the calling thread.
    pub fn row_tile(
        &self,
        r0: usize,
        r1: usize,
        acts: &PreparedActs,
        out: &mut [f32],
    ) -> Result<()> {
        if r0 > r1 || r1 > self.rows {
            return Err(ReferenceError::shape(
                "row_tile",
                format!("rows {r0}..{r1} of {}", self.rows),
            ));
        }
        check_len("row_tile", "out", out.len(), (r1 - r0) * acts.n)?;
        if acts.n > 0 {
            self.rows_dots(r0, r1, &acts.acts, acts.n, out)?;
        }
        Ok(())
    }

    fn prepare(&self, x: &[f32], n: usize, act: ActQuant, opts: &MatmulOptions) -> Result<Acts> {
        let c = self.cols;
        if act != ActQuant::None {
            let mut q = vec![0i8; x.len()];
            let mut s = Vec::with_capacity(n);
            for (xt, qt) in x.chunks_exact(c).zip(q.chunks_exact_mut(c)) {
                s.push(quantize_act(act, xt, qt)?.unwrap_or(1.0));
            }
            if let WeightData::Ternary(tw) = &self.data {
                let tern = tw.prepare(&q, n);
                return Ok(Acts::Int { q, s, tern });
            }
            // Float or ggml weights with quantized activations: use the dequantized activations.
            let deq = q
                .chunks_exact(c)
                .zip(&s)
                .flat_map(|(qt, &st)| qt.iter().map(move |&v| v as f32 / st))
                .collect();
            return Ok(Acts::F32(deq));
        }
        if opts.ggml_activations == GgmlActivations::LlamaCpp {
            match self.data {
                WeightData::Q4_1(_) => return Ok(Acts::Blocks(ggml_dot::quantize_row_q8_1(x)?)),
                WeightData::Q8_0(_) | WeightData::Q4_0(_) => {
                    return Ok(Acts::Blocks(ggml_dot::quantize_row_q8_0(x)?))
                }
                _ => {}
            }
        }
        Ok(Acts::F32(x.to_vec()))
    }

    /// Rows `r0..r1` (all tokens each) into `out` `[r1 - r0][n]`, with AVX2 + FMA when available.
    fn rows_dots(
        &self,
        r0: usize,
        r1: usize,
        acts: &Acts,
        n: usize,
        out: &mut [f32],
    ) -> Result<()> {
        rows_dots(self, r0, r1, acts, n, out)
    }

    /// All tokens' dot products with row `r` (shapes were checked by the caller). The row is
    /// decoded once into `sc` and reused for every token.
    #[inline(always)]
    fn row_dots(&self, r: usize, acts: &Acts, n: usize, out: &mut [f32], sc: &mut Scratch) {
        let c = self.cols;
        let bt = self.block_type();
        let nb = c / ggml_dot::QK;
        fn xrow(x: &[f32], t: usize, c: usize) -> &[f32] {
            x.get(t * c..(t + 1) * c).unwrap_or_default()
        }
        let outs = out.iter_mut().enumerate().take(n);
        match (&self.data, acts, bt) {
            (WeightData::F32(w), Acts::F32(x), _) => {
                let wr = w.get(r * c..(r + 1) * c).unwrap_or_default();
                for (t, o) in outs {
                    *o = dot_f32(wr, xrow(x, t, c));
                }
            }
            // f16 / bf16 / Q6_K / the other K-quants, Q5_0/Q5_1/IQ4_NL / NeuZip: decode the row,
            // then the f32 dot
            (
                WeightData::F16(_)
                | WeightData::Bf16(_)
                | WeightData::Q6K(_)
                | WeightData::Blocks(..)
                | WeightData::NeuZip(_),
                Acts::F32(x),
                _,
            ) => {
                sc.w.resize(c, 0.0);
                if self.float_row(r, &mut sc.w).is_err() {
                    sc.w.fill(f32::NAN);
                }
                for (t, o) in outs {
                    *o = dot_f32(&sc.w, xrow(x, t, c));
                }
            }
            // f32 activations: dequantize the row, then an f32 dot per token
            (_, Acts::F32(x), Some(bt)) => {
                let bb = bt.block_bytes();
                let blocks = self
                    .bytes()
                    .get(r * nb * bb..(r + 1) * nb * bb)
                    .unwrap_or_default();
                sc.w.resize(c, 0.0);
                if ggml_dot::dequantize_row(bt, blocks, &mut sc.w).is_err() {
                    sc.w.fill(f32::NAN);
                }
                for (t, o) in outs {
                    *o = dot_f32(&sc.w, xrow(x, t, c));
                }
            }
            // llama.cpp style: integer block dots with Q8_0 / Q8_1 activation blocks
            (_, Acts::Blocks(a), Some(bt)) => {
                let bb = bt.block_bytes();
                let blocks = self
                    .bytes()
                    .get(r * nb * bb..(r + 1) * nb * bb)
                    .unwrap_or_default();
                #[cfg(target_arch = "x86_64")]
                if crate::simd::avx2_fma() && bt != BlockType::Q4_0 {
                    crate::simd::note(crate::simd::Path::Avx2);
                    for (t, o) in outs {
                        let at = a.get(t * nb..(t + 1) * nb).unwrap_or_default();
                        // SAFETY: avx2_fma() checked the CPU features these functions use.
                        *o = unsafe {
                            if bt == BlockType::Q4_1 {
                                ggml_cpu::x86::dot_q4_1_q8_1(blocks, at)
                            } else {
                                ggml_cpu::x86::dot_q8_0_q8_0(blocks, at)
                            }
                        };
                    }
                    return;
                }
                #[cfg(target_arch = "aarch64")]
                {
                    use crate::simd::{note, path, Path};
                    let p = path();
                    if p == Path::NeonDotprod || p == Path::Neon {
                        note(p);
                        for (t, o) in outs {
                            let at = a.get(t * nb..(t + 1) * nb).unwrap_or_default();
                            *o = if p == Path::NeonDotprod {
                                // SAFETY: path() checked the CPU feature (dotprod) it uses.
                                unsafe { ggml_cpu::arm::dot_dotprod(bt, blocks, at) }
                            } else {
                                // SAFETY: NEON is part of every AArch64 target's baseline (and
                                // path() checked it).
                                unsafe { ggml_cpu::arm::dot_neon(bt, blocks, at) }
                            };
                        }
                        return;
                    }
                }
                crate::simd::note(crate::simd::Path::Scalar);
                ggml_dot::unpack_row(bt, blocks, &mut sc.q, &mut sc.d, &mut sc.m);
                for (t, o) in outs {
                    let at = a.get(t * nb..(t + 1) * nb).unwrap_or_default();
                    *o = if bt == BlockType::Q4_1 {
                        ggml_cpu::dot_q4_1_q8_1(&sc.q, &sc.d, &sc.m, at)
                    } else {
                        ggml_cpu::dot_q8_0_q8_0_tinyblas(&sc.q, &sc.d, at)
                    };
                }
            }
            (WeightData::Ternary(tw), Acts::Int { q, s, tern }, _) => {
                for (t, o) in outs {
                    let st = s.get(t).copied().unwrap_or(1.0);
                    let dot = match tern {
                        Some(ta) => tw.dot_packed(r, ta, t),
                        None => {
                            let qt = q.get(t * c..(t + 1) * c).unwrap_or_default();
                            tw.dot_int_plain(r, qt, &mut sc.t)
                        }
                    };
                    *o = dot / st;
                }
            }
            (WeightData::Ternary(tw), Acts::F32(x), _) => {
                for (t, o) in outs {
                    *o = tw.dot_f32(r, xrow(x, t, c), &mut sc.t);
                }
            }
            // prepare() never pairs other combinations
            _ => outs.for_each(|(_, o)| *o = f32::NAN),
        }
    }

    fn block_type(&self) -> Option<BlockType> {
        match self.data {
            WeightData::Q8_0(_) => Some(BlockType::Q8_0),
            WeightData::Q4_0(_) => Some(BlockType::Q4_0),
            WeightData::Q4_1(_) => Some(BlockType::Q4_1),
            _ => None,
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            WeightData::Q8_0(b) | WeightData::Q4_0(b) | WeightData::Q4_1(b) => b,
            _ => &[],
        }
    }
}

crate::simd::multiversion! {
    fn rows_dots(m: &Matrix, r0: usize, r1: usize, acts: &Acts, n: usize, out: &mut [f32]) -> Result<()> {
        let mut sc = Scratch::default();
        // NeuZip: decode the tile's blocks once (they hold many rows each), then row by row.
        if let (WeightData::NeuZip(z), Acts::F32(x)) = (&m.data, acts) {
            let c = m.cols;
            let raw = z.raw_rows(r0, r1 - r0)?;
            sc.w.resize(c, 0.0);
            let rb = (c * z.dtype().size()).max(1);
            for (rr, o) in raw.chunks_exact(rb).zip(out.chunks_exact_mut(n.max(1))) {
                raw_to_f32(z.dtype(), rr, &mut sc.w)?;
                for (t, ot) in o.iter_mut().enumerate() {
                    *ot = dot_f32(&sc.w, x.get(t * c..(t + 1) * c).unwrap_or_default());
                }
            }
            return Ok(());
        }
        for (r, o) in (r0..r1).zip(out.chunks_exact_mut(n.max(1))) {
            m.row_dots(r, acts, n, o, &mut sc);
        }
        Ok(())
    }
}

/// Per-thread buffers for one decoded weight row.
#[derive(Default)]
struct Scratch {
    w: Vec<f32>,
    q: Vec<i8>,
    d: Vec<f32>,
    m: Vec<f32>,
    /// One ternary row's trits (plain paths).
    t: Vec<i8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(w: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
        let n = x.len() / cols;
        let mut y = vec![0.0; n * rows];
        for t in 0..n {
            for r in 0..rows {
                y[t * rows + r] = (0..cols)
                    .map(|c| w[r * cols + c] as f64 * x[t * cols + c] as f64)
                    .sum::<f64>() as f32;
            }
        }
        y
    }

    #[test]
    fn ternary_integer_path_hand_computed() {
        // W = 0.5 · [[1, -1, 0, 1], [0, 0, -1, 1]], x = [1, -2, 3, 0.5]
        let w = [0.5, -0.5, 0.0, 0.5, 0.0, 0.0, -0.5, 0.5];
        let m = Matrix {
            rows: 2,
            cols: 4,
            data: WeightData::Ternary(ternary_from_values("w", 2, 4, 0, &w).unwrap()),
        };
        // int8: amax 3 → s = 127/3; q = round([42.33, -84.67, 127, 21.17]) = [42, -85, 127, 21]
        // row0: 42 + 85 + 21 = 148 → 148 · 0.5 / (127/3) = 1.7480315
        // row1: -127 + 21 = -106 → -106 · 0.5 · 3 / 127 = -1.2519685
        let mut y = [0.0; 2];
        m.matmul(
            &[1.0, -2.0, 3.0, 0.5],
            ActQuant::Int8,
            &MatmulOptions::default(),
            &mut y,
        )
        .unwrap();
        assert!(
            (y[0] - 148.0 * 0.5 / (127.0 / 3.0)).abs() < 1e-6,
            "{}",
            y[0]
        );
        assert!(
            (y[1] + 106.0 * 0.5 / (127.0 / 3.0)).abs() < 1e-6,
            "{}",
            y[1]
        );
        // float activations: row0 = 0.5·(1 + 2 + 0.5) = 1.75
        m.matmul(
            &[1.0, -2.0, 3.0, 0.5],
            ActQuant::None,
            &MatmulOptions::default(),
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [1.75, -1.25]);
    }

    #[test]
    fn ternary_groups_and_rejection() {
        // group 2: scales per (row, pair)
        let w = [0.5, -0.5, 2.0, 0.0, 0.0, 0.25, -1.0, -1.0];
        let t = ternary_from_values("w", 2, 4, 2, &w).unwrap();
        assert_eq!(
            (0..4).map(|i| t.scale(i)).collect::<Vec<_>>(),
            [0.5, 2.0, 0.25, 1.0]
        );
        let mut tr = [0i8; 4];
        t.row_trits(0, &mut tr).unwrap();
        assert_eq!(tr, [1, -1, 1, 0]);
        t.row_trits(1, &mut tr).unwrap();
        assert_eq!(tr, [0, 1, -1, -1]);
        let m = Matrix {
            rows: 2,
            cols: 4,
            data: WeightData::Ternary(t),
        };
        let x = [1.0, 2.0, 3.0, 4.0];
        let mut y = [0.0; 2];
        m.matmul(&x, ActQuant::None, &MatmulOptions::default(), &mut y)
            .unwrap();
        assert_eq!(y, [0.5 - 1.0 + 6.0, 0.5 - 7.0]);
        let mut row = [0.0; 4];
        m.row_f32(1, &mut row).unwrap();
        assert_eq!(row, [0.0, 0.25, -1.0, -1.0]);
        assert!(ternary_from_values("w", 1, 4, 0, &[0.5, 0.25, 0.0, 0.0]).is_err());
    }

    #[test]
    fn batched_equals_per_token_and_parallel_equals_serial() {
        let (rows, cols, n) = (130, 64, 5);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0)
            .collect();
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 13 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let m = Matrix::from_f32(rows, cols, w.clone()).unwrap();
        let mut y = vec![0.0; n * rows];
        m.matmul(&x, ActQuant::None, &MatmulOptions::default(), &mut y)
            .unwrap();
        let want = naive(&w, rows, cols, &x);
        for (a, b) in y.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()));
        }
        let serial = MatmulOptions {
            parallel: false,
            ..Default::default()
        };
        let mut y1 = vec![0.0; rows];
        for t in 0..n {
            m.matmul(
                &x[t * cols..(t + 1) * cols],
                ActQuant::Int4,
                &serial,
                &mut y1,
            )
            .unwrap();
            let mut yb = vec![0.0; n * rows];
            m.matmul(&x, ActQuant::Int4, &MatmulOptions::default(), &mut yb)
                .unwrap();
            assert_eq!(&yb[t * rows..(t + 1) * rows], &y1[..]);
        }
        assert!(m.matmul(&x[..63], ActQuant::None, &serial, &mut y).is_err());
    }
}
