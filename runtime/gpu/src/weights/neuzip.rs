//! NeuZip blobs on the GPU: the compressed stream cut into chunks of whole blocks whose data and
//! decoded output each fit one binding. The decode kernel's launchers are in
//! `kernels/neuzip.rs`.

use tern_format::{neuzip, FloatType};

use crate::device::check::check_binding;
use crate::device::context::GpuContext;
use crate::device::params::NeuzipParams;
use crate::error::{GpuError, Result};
use crate::weights::FloatPart;

#[derive(Debug)]
pub(crate) struct NzChunk {
    pub(crate) params: NeuzipParams,
    pub(crate) n_blocks: u32,
    pub(crate) data: wgpu::Buffer,
    /// Elements `elems` of the tensor; the output buffer starts at element `params.out_base`.
    pub(crate) elems: std::ops::Range<u64>,
    pub(crate) out: wgpu::Buffer,
    /// Bytes of this chunk's decoded output.
    pub(crate) out_bytes: u64,
}

/// A NeuZip blob on the GPU, cut into chunks of whole blocks whose compressed data and decoded
/// output each fit one binding. [`NeuzipTensor::decode`] fills the chunks' output buffers.
#[derive(Debug)]
pub struct NeuzipTensor {
    pub plan: neuzip::Plan,
    pub(crate) meta: wgpu::Buffer,
    pub(crate) status: wgpu::Buffer,
    pub(crate) chunks: Vec<NzChunk>,
    /// Uploaded with [`NeuzipTensor::upload_compressed`]: no output buffers of its own; decode
    /// with [`NeuzipTensor::decode_into`].
    pub(crate) compressed_only: bool,
}

impl NeuzipTensor {
    /// Parse and validate `blob` (`Plan::parse`) and upload it in chunks, each with an output
    /// buffer of its own (the tensor decoded stays resident after [`NeuzipTensor::decode`]).
    pub fn upload(ctx: &GpuContext, blob: &[u8]) -> Result<Self> {
        Self::upload_impl(ctx, blob, false, ctx.binding_limit())
    }

    /// Upload only the compressed data, cut into chunks of whole rows whose decoded output is at
    /// most `max_chunk_out` bytes (when one row group fits; at most a binding): decode just in
    /// time chunk by chunk with [`NeuzipTensor::decode_chunk_into`] into a scratch shared with
    /// other tensors.
    pub fn upload_compressed(ctx: &GpuContext, blob: &[u8], max_chunk_out: u64) -> Result<Self> {
        Self::upload_impl(ctx, blob, true, max_chunk_out.min(ctx.binding_limit()))
    }

    /// Bytes of GPU memory the compressed tensor takes (index, data, status, placeholders).
    pub fn compressed_bytes(&self) -> u64 {
        let chunks: u64 = self.chunks.iter().map(|c| c.data.size()).sum();
        self.meta.size() + self.status.size() + chunks + 4 * self.chunks.len() as u64
    }

    /// Bytes of the largest chunk's decoded output.
    pub fn max_chunk_output_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.out_bytes).max().unwrap_or(0)
    }

    fn upload_impl(
        ctx: &GpuContext,
        blob: &[u8],
        compressed_only: bool,
        out_limit: u64,
    ) -> Result<Self> {
        const OP: &str = "neuzip upload";
        let plan = neuzip::Plan::parse(blob)?;
        let (man, exp_bits, width): (u32, u32, u32) = match plan.dtype {
            FloatType::F32 => (23, 8, 32),
            FloatType::F16 => (10, 5, 16),
            FloatType::Bf16 => (7, 8, 16),
        };
        let w = u64::from(plan.mantissa_bits) + 1;
        let n = plan.n_elements;
        if n.checked_mul(w).is_none_or(|b| b >= 1 << 32) || plan.row_len >= 1 << 32 {
            return Err(GpuError::TooLarge {
                what: "neuzip tensor".into(),
                detail: format!("{n} elements of {w} raw bits: bit offsets exceed u32"),
            });
        }
        let limit = ctx.binding_limit();
        let meta_bytes = blob.get(..plan.words.offset as usize).unwrap_or_default();
        check_binding(
            ctx,
            "neuzip index (header, table, states, lane starts)",
            meta_bytes.len() as u64,
        )?;
        // The fused GEMV's status word (`neuzip_gemv.wgsl`) follows the index.
        let status_word = meta_bytes.len() as u32 / 4; // ok: the word section starts 4-aligned
        let mut meta_st = meta_bytes.to_vec();
        meta_st.extend_from_slice(&[0; 4]);
        let meta = ctx.upload("neuzip index", &meta_st)?;
        let bpw = (256 / plan.lanes).max(1);
        // Layout 2 writes whole u32 words when every block starts on an even element.
        let even_starts = if plan.blocks_per_row == 1 {
            plan.block_len % 2 == 0 || plan.n_blocks <= 1
        } else {
            plan.row_len % 2 == 0 && plan.block_len % 2 == 0
        };
        let whole_words = u32::from(width == 16 && plan.group % 2 == 0 && even_starts);
        let status = ctx.zeroed("neuzip status", 4)?;
        let words = blob.get(plan.words.range()).unwrap_or_default();
        let raw = blob.get(plan.raw.range()).unwrap_or_default();
        let esize = u64::from(width / 8);
        let base = |b: u32| -> Result<u64> { Ok(u64::from(plan.block_word_base(blob, b)?)) };
        let end_of = |b: u32| -> u64 {
            let (s, l) = plan.block_span(b);
            s + u64::from(l)
        };
        // Sizes of a chunk of blocks b0..b1: (data bytes, output bytes).
        let sizes = |b0: u32, b1: u32| -> Result<(u64, u64)> {
            let wb0 = base(b0)? & !1;
            let wbytes = ((base(b1)? - wb0) * 2).div_ceil(4) * 4;
            let e0 = plan.block_span(b0).0;
            let e1 = end_of(b1 - 1);
            let rb0 = (e0 * w) & !31;
            let rbytes = (e1 * w - rb0).div_ceil(32) * 4 + 4;
            let ob0 = if width == 16 { e0 & !1 } else { e0 };
            let obytes = ((e1 - ob0) * esize).div_ceil(4) * 4;
            Ok((wbytes + rbytes, obytes))
        };
        let max_groups = ctx.limits.max_compute_workgroups_per_dimension;
        // Chunks end on row boundaries (blocks of one row group) when one group fits.
        let unit = plan.blocks_per_row.max(1);
        let mut chunks = Vec::new();
        let mut b0 = 0u32;
        while b0 < plan.n_blocks {
            let fits = |b1: u32| -> Result<bool> {
                let (d, o) = sizes(b0, b1)?;
                Ok(d <= limit && o <= limit && (b1 - b0).div_ceil(bpw) <= max_groups)
            };
            let fits_out =
                |b1: u32| -> Result<bool> { Ok(fits(b1)? && sizes(b0, b1)?.1 <= out_limit) };
            if !fits(b0 + 1)? {
                return Err(GpuError::TooLarge {
                    what: "neuzip block".into(),
                    detail: format!("block {b0} alone exceeds a binding of {limit} bytes"),
                });
            }
            // Largest b1 that fits (sizes grow with b1): binary search.
            let (mut lo, mut hi) = (b0 + 1, plan.n_blocks);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(mid)? {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let mut b1 = lo;
            // Within `out_limit` (a JIT scratch) and on a row boundary when possible.
            if out_limit < limit {
                let (mut lo, mut hi) = (b0 + 1, b1);
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if fits_out(mid)? {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                b1 = lo;
            }
            if b1 < plan.n_blocks && b1 % unit != 0 && (b1 / unit) * unit > b0 {
                b1 = (b1 / unit) * unit;
            }
            let wb0 = base(b0)? & !1;
            let wb1 = base(b1)?;
            let e0 = plan.block_span(b0).0;
            let e1 = end_of(b1 - 1);
            let rb0 = (e0 * w) & !31;
            let ob0 = if width == 16 { e0 & !1 } else { e0 };
            let mut data = words
                .get((wb0 * 2) as usize..((wb1 * 2) as usize).min(words.len()))
                .unwrap_or_default()
                .to_vec();
            data.resize(data.len().div_ceil(4) * 4, 0);
            let raw_word_offset = data.len() as u64 / 4;
            let r_end = ((e1 * w).div_ceil(8) as usize).min(raw.len());
            data.extend_from_slice(raw.get((rb0 / 8) as usize..r_end).unwrap_or_default());
            data.extend_from_slice(&[0; 4]);
            let (_, obytes) = sizes(b0, b1)?;
            let params = NeuzipParams {
                lanes: plan.lanes,
                block_len: plan.block_len,
                blocks_per_row: plan.blocks_per_row,
                row_len: plan.row_len as u32, // ok: checked < 2^32 above
                n_elements: n as u32,         // ok: n·w < 2^32
                b0,
                n_syms: plan.n_syms,
                table_word: plan.table.offset / 4,
                block_words_word: plan.block_words.offset / 4,
                states_word: plan.states.offset / 4,
                lane_starts_word: plan.lane_starts.offset / 4,
                words_base: wb0 as u32,                  // ok: ≤ n_words (u32)
                raw_word_offset: raw_word_offset as u32, // ok: ≤ limit / 4
                raw_bit_base: rb0 as u32,                // ok: < n·w < 2^32
                out_base: ob0 as u32,                    // ok: ≤ n < 2^32
                man,
                exp_bits,
                k: u32::from(plan.mantissa_bits),
                width,
                group: plan.group,
                bpw,
                b_end: b1,
                status_word,
                whole_words,
            };
            chunks.push(NzChunk {
                params,
                n_blocks: b1 - b0,
                data: ctx.upload("neuzip data", &data)?,
                elems: e0..e1,
                out: ctx.zeroed("neuzip output", if compressed_only { 4 } else { obytes })?,
                out_bytes: obytes,
            });
            b0 = b1;
        }
        let _ = OP;
        Ok(NeuzipTensor {
            plan,
            meta,
            status,
            chunks,
            compressed_only,
        })
    }

    /// Number of chunks (bindings) the blob was cut into.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Decoded bytes of each chunk (the scratch [`NeuzipTensor::decode_into`] needs).
    pub fn chunk_output_bytes(&self) -> Vec<u64> {
        self.chunks.iter().map(|c| c.out_bytes).collect()
    }

    /// Decoded bytes of the whole tensor (all chunks).
    pub fn output_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.out_bytes).sum()
    }

    /// Rows of each chunk's output as `(first row, rows, element offset in the chunk's buffer)`
    /// for a matrix of `row_len` columns; an error when a chunk does not hold whole rows.
    pub fn row_spans(&self, row_len: u64) -> Result<Vec<(u64, u64, u64)>> {
        let mut v = Vec::with_capacity(self.chunks.len());
        for c in &self.chunks {
            let (e0, e1) = (c.elems.start, c.elems.end);
            if row_len == 0 || e0 % row_len != 0 || e1 % row_len != 0 {
                return Err(GpuError::shape(
                    "neuzip rows",
                    format!("chunk {e0}..{e1} does not hold whole rows of {row_len}"),
                ));
            }
            v.push((
                e0 / row_len,
                (e1 - e0) / row_len,
                e0 - u64::from(c.params.out_base),
            ));
        }
        Ok(v)
    }

    /// The decoded tensor (after [`NeuzipTensor::decode`]) as float-matrix parts over the
    /// chunks' own output buffers.
    pub fn float_parts(&self, row_len: u64) -> Result<Vec<FloatPart>> {
        if self.compressed_only {
            return Err(GpuError::shape(
                "neuzip rows",
                "uploaded compressed-only: no output buffers",
            ));
        }
        Ok(self
            .row_spans(row_len)?
            .into_iter()
            .zip(&self.chunks)
            .map(|((row0, rows, elem_offset), c)| FloatPart {
                buffer: c.out.clone(),
                row0,
                rows,
                elem_offset,
            })
            .collect())
    }
}
