//! NeuZip matrices kept compressed. Blocks of whole rows (every layout-2 matrix up to 8192
//! columns): the fused decode + GEMV kernel multiplies them straight from the compressed stream,
//! no scratch. Otherwise decoded just in time: before each use, chunk by chunk (whole rows) into
//! one of the model's small scratch buffers, each chunk's rows multiplied right after it is
//! decoded, so the scratch is one chunk, not the decoded tensor. The decode status is sticky (a lane that
//! fails sets it); [`GpuModel::verify_jit`] runs every decode once at load and reads it, and
//! [`GpuModel::check_jit_status`] reads it after any run.

use crate::device::context::GpuContext;
use crate::device::plan::Plan;
use crate::error::{GpuError, Result};
use crate::kernels;
use crate::model::GpuModel;
use crate::weights::{FloatPart, FloatWeight};

impl GpuModel {
    /// Record `y ← W_i · x` for `n` tokens of the just-in-time matrix `i`, alternating scratch
    /// buffers from `*turn` on.
    pub(crate) fn record_jit_linear(
        &self,
        ctx: &GpuContext,
        p: &mut Plan,
        i: usize,
        turn: &mut usize,
        x: &wgpu::Buffer,
        n: u64,
        y: &wgpu::Buffer,
    ) -> Result<()> {
        let j = self
            .jit
            .get(i)
            .ok_or_else(|| GpuError::internal("plan", "jit index"))?;
        if j.nz.fusable(j.cols) {
            // Fused decode + GEMV: the decoded matrix is never written, no scratch.
            return j.nz.fused_gemv(ctx, p, x, n, y, j.rows);
        }
        let spans = j.nz.row_spans(j.cols)?;
        for (c, (row0, rows, elem_offset)) in spans.into_iter().enumerate() {
            let buf = self
                .jit_scratch
                .get(*turn % self.jit_scratch.len().max(1))
                .ok_or_else(|| GpuError::internal("plan", "jit scratch"))?;
            *turn += 1;
            j.nz.decode_chunk_into(ctx, p, c, buf)?;
            // Rows row0.. of the matrix (the output stride stays the whole matrix's rows).
            let w = FloatWeight {
                dtype: j.dtype,
                rows: j.rows,
                cols: j.cols,
                parts: vec![FloatPart {
                    buffer: buf.clone(),
                    row0,
                    rows,
                    elem_offset,
                }],
            };
            kernels::float_matmul(ctx, p, &w, x, n, y)?;
        }
        Ok(())
    }

    /// Decode every just-in-time matrix once (clearing its status first) and read the status:
    /// `Err(Corrupt)` naming the tensor whose stream passed the structural checks but not the
    /// decode's (a lane read past its words or did not end in its final state).
    pub fn verify_jit(&self) -> Result<()> {
        let ctx = &*self.ctx;
        for j in &self.jit {
            let mut enc = ctx.encoder();
            j.nz.clear_status(&mut enc);
            if j.nz.fusable(j.cols) {
                // One fused GEMV of a zero vector (small temporaries: one input, one output row).
                let x = ctx.zeroed("neuzip verify x", j.cols * 4)?;
                let y = ctx.zeroed("neuzip verify y", j.rows * 4)?;
                j.nz.fused_gemv(ctx, &mut enc, &x, 1, &y, j.rows)?;
                ctx.submit_wait(enc)?;
            } else {
                let buf = self
                    .jit_scratch
                    .first()
                    .ok_or_else(|| GpuError::internal("jit", "no scratch for an unfused matrix"))?;
                for c in 0..j.nz.chunks() {
                    j.nz.decode_chunk_into(ctx, &mut enc, c, buf)?;
                }
                ctx.submit_wait(enc)?;
            }
            self.status_of(j)?;
        }
        Ok(())
    }

    /// Read every just-in-time matrix's decode status (sticky since [`GpuModel::verify_jit`]):
    /// `Err(Corrupt)` when any decode since then failed.
    pub fn check_jit_status(&self) -> Result<()> {
        self.jit.iter().try_for_each(|j| self.status_of(j))
    }

    fn status_of(&self, j: &crate::model::JitTensor) -> Result<()> {
        j.nz.check_status(&self.ctx).map_err(|e| match e {
            GpuError::Corrupt { what, detail } => GpuError::Corrupt {
                what: format!("{what} of `{}` (decoded just in time)", j.name),
                detail,
            },
            e => e,
        })
    }
}
