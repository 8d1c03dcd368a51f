//! NeuZip decode on the GPU (`neuzip_decode.wgsl`): every chunk of a [`NeuzipTensor`] decoded
//! into its own output buffers (kept resident) or into a caller's scratch (just in time),
//! bit-exact with `tern_format::neuzip::decode`.

use crate::device::check::check_buffer;
use crate::device::context::GpuContext;
use crate::device::params::NeuzipGemvParams;
use crate::device::pipeline::KernelKey;
use crate::device::plan::Recorder;
use crate::error::{GpuError, Result};
use crate::weights::neuzip::NzChunk;
use crate::weights::NeuzipTensor;

/// One chunk's dispatch: `⌈blocks / bpw⌉` workgroups. 16-bit elements OR-ed into their words
/// (layout 1, or odd block starts) need a zeroed output; whole-word and f32 writes do not.
fn record_chunk(
    ctx: &GpuContext,
    enc: &mut impl Recorder,
    c: &NzChunk,
    meta: &wgpu::Buffer,
    out: &wgpu::Buffer,
    status: &wgpu::Buffer,
) -> Result<()> {
    if c.params.width == 16 && c.params.whole_words == 0 {
        enc.record_clear(out);
    }
    let params = ctx.uniform(bytemuck::bytes_of(&c.params))?;
    ctx.dispatch(
        enc,
        KernelKey::NeuzipDecode,
        &[&params, meta, &c.data, out, status],
        (c.n_blocks.div_ceil(c.params.bpw.max(1)), 1, 1),
    )
}

impl NeuzipTensor {
    /// Record the decode of chunk `i` into `out` (caller-owned scratch of at least that chunk's
    /// output bytes). The status is not cleared (it is sticky: 1 once any lane of any decode
    /// failed); clear it with [`NeuzipTensor::clear_status`], read it with
    /// [`NeuzipTensor::check_status`].
    pub fn decode_chunk_into(
        &self,
        ctx: &GpuContext,
        enc: &mut impl Recorder,
        i: usize,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let c = self.chunks.get(i).ok_or_else(|| {
            GpuError::shape(
                "neuzip decode",
                format!("chunk {i} of {}", self.chunks.len()),
            )
        })?;
        check_buffer("neuzip decode", "scratch", out, c.out_bytes)?;
        record_chunk(ctx, enc, c, &self.meta, out, &self.status)
    }

    /// Record clearing the status (before a verify pass): the decode kernel's buffer and the
    /// fused GEMV's word after the table in the index buffer (copied from the cleared buffer).
    pub fn clear_status(&self, enc: &mut impl Recorder) {
        enc.record_clear(&self.status);
        enc.record_copy(&self.status, 0, &self.meta, self.fused_status_offset(), 4);
    }

    /// Byte offset of the fused GEMV's status word in the index buffer (its last word).
    fn fused_status_offset(&self) -> u64 {
        self.meta.size().saturating_sub(4)
    }

    /// Record the decode of every chunk into its output buffer.
    pub fn decode(&self, ctx: &GpuContext, enc: &mut impl Recorder) -> Result<()> {
        if self.compressed_only {
            return Err(GpuError::shape(
                "neuzip decode",
                "uploaded compressed-only: decode chunk by chunk with decode_chunk_into",
            ));
        }
        enc.record_clear(&self.status);
        for c in &self.chunks {
            record_chunk(ctx, enc, c, &self.meta, &c.out, &self.status)?;
        }
        Ok(())
    }

    /// After a submitted decode: `Err(Corrupt)` if any lane of any decode since the status was
    /// last cleared failed its checks.
    pub fn check_status(&self, ctx: &GpuContext) -> Result<()> {
        let s = ctx.read_u32(&self.status, 1)?;
        let f = ctx.read_bytes(&self.meta, self.fused_status_offset(), 4)?;
        if s.first().copied().unwrap_or(1) != 0 || f.iter().any(|&b| b != 0) {
            return Err(GpuError::Corrupt {
                what: "neuzip stream".into(),
                detail: "a lane read past its words or did not end in state 0x8000".into(),
            });
        }
        Ok(())
    }

    /// Decode on the GPU, wait, check the status and read back the whole tensor as raw
    /// little-endian elements (what `tern_format::neuzip::decode` returns).
    pub fn decode_to_host(&self, ctx: &GpuContext) -> Result<Vec<u8>> {
        let mut enc = ctx.encoder();
        self.decode(ctx, &mut enc)?;
        ctx.submit_wait(enc)?;
        self.check_status(ctx)?;
        let esize = self.plan.dtype.size() as u64;
        let mut out = Vec::with_capacity((self.plan.n_elements * esize) as usize);
        for c in &self.chunks {
            let skip = (c.elems.start - u64::from(c.params.out_base)) * esize;
            let len = (c.elems.end - c.elems.start) * esize;
            let b = ctx.read_bytes(&c.out, 0, skip + len)?;
            out.extend_from_slice(b.get(skip as usize..).unwrap_or_default());
        }
        Ok(out)
    }
}

/// Tokens per fused dispatch (the shader's `vec4` of accumulators).
pub const FUSED_TOKENS: u64 = 4;

impl NeuzipTensor {
    /// Whether [`NeuzipTensor::fused_gemv`] can multiply this tensor as a `rows × cols` matrix:
    /// blocks of whole rows (`blocks_per_row = 1`) and every chunk of whole rows.
    pub fn fusable(&self, cols: u64) -> bool {
        self.plan.blocks_per_row == 1 && self.plan.row_len == cols && self.row_spans(cols).is_ok()
    }

    /// Record `y[t][row] = Σ_c W[row][c] · x[t][c]` for `n_tokens` tokens (`x`: `[n][cols]` f32,
    /// `y`: `[n][out_stride]` f32, `out_stride ≥ rows`) with the fused decode + GEMV kernel: the
    /// decoded matrix is never written, no scratch buffer. Lanes check their streams as the
    /// decode kernel does and set the (sticky) status.
    pub fn fused_gemv(
        &self,
        ctx: &GpuContext,
        enc: &mut impl Recorder,
        x: &wgpu::Buffer,
        n_tokens: u64,
        y: &wgpu::Buffer,
        out_stride: u64,
    ) -> Result<()> {
        const OP: &str = "neuzip fused gemv";
        let cols = self.plan.row_len;
        let rows = self.plan.rows();
        if !self.fusable(cols) {
            return Err(GpuError::shape(OP, "blocks do not hold whole rows"));
        }
        if out_stride < rows {
            return Err(GpuError::shape(
                OP,
                format!("out stride {out_stride} < {rows} rows"),
            ));
        }
        check_buffer(OP, "x", x, n_tokens * cols * 4)?;
        check_buffer(OP, "y", y, n_tokens * out_stride * 4)?;
        let mut tok0 = 0u64;
        while tok0 < n_tokens {
            let nt = (n_tokens - tok0).min(FUSED_TOKENS);
            let g = NeuzipGemvParams {
                rows_per_block: (u64::from(self.plan.rows_per_block).min(rows)) as u32, // ok: ≤ a u32
                n_tokens: nt as u32,                                                    // ok: ≤ 4
                tok0: tok0 as u32,     // ok: < n_tokens, bounded by the x binding
                x_stride: cols as u32, // ok: row_len < 2^32 (checked at upload)
                out_stride: out_stride as u32, // ok: y fits a binding
                ..NeuzipGemvParams::default()
            };
            let gp = ctx.uniform(bytemuck::bytes_of(&g))?;
            for c in &self.chunks {
                let params = ctx.uniform(bytemuck::bytes_of(&c.params))?;
                ctx.dispatch(
                    enc,
                    KernelKey::NeuzipGemv,
                    &[&params, &gp, &self.meta, &c.data, x, y],
                    (c.n_blocks.div_ceil(c.params.bpw.max(1)), 1, 1),
                )?;
            }
            tok0 += nt;
        }
        Ok(())
    }
}
