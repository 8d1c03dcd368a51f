//! A linear layer's input and matmul in a recorded pass: [`Graph::input`] (the input as the
//! activation plan says: normed, quantized, fused into the GEMV's prologue) and [`Graph::linear`]
//! / [`Graph::linear_epi`] (the matmul for the weight's storage, with the decode epilogues).

use super::*;

impl<'a> Graph<'a> {
    /// The input of a linear whose rows are `x` (`width` values each), preceded by `norm` when
    /// there is one: what the plan's producer says — the norm alone into `f32_out`, the norm
    /// fused with INT8 quantization into `act`, or a separate quantization pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn input(
        &mut self,
        x: &'a wgpu::Buffer,
        norm: Option<&'a wgpu::Buffer>,
        width: u64,
        li: &LinearInput,
        f32_out: &'a wgpu::Buffer,
        acts: Acts<'a>,
        ws: &[&Lin],
    ) -> Result<Input<'a>> {
        let (ctx, n, eps) = (self.ctx, self.n, self.eps());
        let act = if li.producer.is_int4() {
            acts.i4
        } else {
            acts.i8
        };
        let sparse = li.sparse;
        let ggml = !ws.is_empty() && ws.iter().all(|w| matches!(w, Lin::Ggml(_)));
        let float_fuses =
            n < GEMM_MIN_TOKENS && li.producer == Producer::Norm && self.m.tuning.fuse_float_norm;
        if let (Some(weight), true) = (norm, ggml && float_fuses) {
            let norm = Some(NormPrologue {
                x,
                weight,
                eps,
                topk: false,
            });
            let (f32, int8) = (None, None);
            return Ok(Input {
                f32,
                int8,
                sparse,
                norm,
            });
        }
        if let (Some(weight), true) = (norm, self.prologue_fuses(li, ws, act)) {
            let topk = li.producer == Producer::NormTopK;
            return Ok(Input {
                f32: None,
                int8: Some(act),
                sparse,
                norm: Some(NormPrologue {
                    x,
                    weight,
                    eps,
                    topk,
                }),
            });
        }
        let stats = self.s.act_stats.as_ref().zip(li.linear.stats_slot());
        let p = &mut self.p;
        let normed = |p: &mut Plan| -> Result<&'a wgpu::Buffer> {
            match norm {
                Some(w) => {
                    kernels::rmsnorm(ctx, p, x, w, f32_out, width, n, eps)?;
                    Ok(f32_out)
                }
                None => Ok(x),
            }
        };
        let input = match li.producer {
            Producer::Direct | Producer::Norm => Input {
                f32: Some(normed(p)?),
                int8: None,
                sparse,
                norm: None,
            },
            Producer::NormQuantInt8 | Producer::NormQuantInt4 | Producer::NormTopK => {
                let w = norm.ok_or_else(|| {
                    GpuError::internal("plan", "fused norm+quantization without a norm")
                })?;
                match li.producer {
                    Producer::NormQuantInt4 => {
                        let k = A48Quant::Int4Absmean;
                        kernels::quantize_act_a48_into(ctx, p, x, Some((w, eps)), k, act)?
                    }
                    Producer::NormTopK => {
                        let k = A48Quant::TopK50Int8;
                        kernels::quantize_act_a48_into(ctx, p, x, Some((w, eps)), k, act)?
                    }
                    _ => kernels::rmsnorm_quant_int8(ctx, p, x, w, width, eps, act)?,
                }
                Input {
                    f32: None,
                    int8: Some(act),
                    sparse,
                    norm: None,
                }
            }
            Producer::QuantInt8 | Producer::QuantInt4 | Producer::QuantTopK => {
                let rows = normed(p)?;
                match li.producer {
                    Producer::QuantInt4 => {
                        let k = A48Quant::Int4Absmean;
                        kernels::quantize_act_a48_into(ctx, p, rows, None, k, act)?
                    }
                    Producer::QuantTopK => {
                        let k = A48Quant::TopK50Int8;
                        kernels::quantize_act_a48_into(ctx, p, rows, None, k, act)?
                    }
                    _ => kernels::quantize_act_int8_into(ctx, p, rows, act)?,
                }
                Input {
                    f32: Some(rows),
                    int8: Some(act),
                    sparse,
                    norm: None,
                }
            }
            Producer::Unsupported => {
                return Err(GpuError::internal(
                    "plan",
                    format!("{} input has no GPU kernel", li.linear.name()),
                ))
            }
        };
        if let (Some((buf, slot)), Some(a)) = (stats, input.int8) {
            kernels::act_stats(ctx, p, a, slot, buf)?;
        }
        Ok(input)
    }

    /// Whether the ternary GEMVs of `ws` compute the input `li` (norm + quantization) themselves:
    /// a decode batch, [`fuse_norm_for`], ternary weights the kernel takes, a fused norm + INT8 /
    /// INT4 / TopK producer, the dense GEMV, no sparsity measurement (it reads the q buffers).
    pub(super) fn prologue_fuses(&self, li: &LinearInput, ws: &[&Lin], act: &ActInt8) -> bool {
        let topk = li.producer == Producer::NormTopK;
        let (on, wide) = fuse_norm_for(self.m.tuning.fuse_norm, li.linear, topk);
        let gemv = self.m.tuning.gemv;
        self.n < GEMM_MIN_TOKENS
            && on
            && matches!(
                li.producer,
                Producer::NormQuantInt8 | Producer::NormQuantInt4 | Producer::NormTopK
            )
            && !ws.is_empty()
            && ws
                .iter()
                .all(|w| matches!(w, Lin::Ternary(tw) if kernels::norm_fits(tw, act, wide, gemv)))
            && !(li.sparse && SPARSE_MAX_DENSITY > 0.0)
            && self.s.act_stats.is_none()
    }

    /// Whether `w`'s matmul for this batch is a GEMV that can apply an [`Epilogue`].
    pub(super) fn epilogue_fuses(&self, w: &Lin, sparse: bool) -> bool {
        self.n < GEMM_MIN_TOKENS
            && match w {
                Lin::Ternary(_) => !(sparse && SPARSE_MAX_DENSITY > 0.0),
                Lin::Ggml(_) => true,
                _ => false,
            }
    }

    /// `y` ← `w · input` for `n` tokens, by the weight's storage.
    pub(super) fn linear(
        &mut self,
        w: &Lin,
        input: Input<'_>,
        n: u64,
        y: &wgpu::Buffer,
    ) -> Result<()> {
        self.linear_epi(w, input, n, y, Epilogue::Store)
    }

    /// [`Graph::linear`] whose GEMV applies `epi` (only where [`Graph::epilogue_fuses`] says so;
    /// a fused-norm input always goes to the fused ternary GEMV).
    pub(super) fn linear_epi(
        &mut self,
        w: &Lin,
        input: Input<'_>,
        n: u64,
        y: &wgpu::Buffer,
        epi: Epilogue,
    ) -> Result<()> {
        let (ctx, tuning) = (self.ctx, &self.m.tuning);
        if input.norm.is_some() || epi != Epilogue::Store {
            let p = &mut self.p;
            return match (w, input.int8) {
                (Lin::Ternary(tw), Some(a)) => {
                    kernels::ternary_gemv_fused(ctx, p, tw, a, input.norm, epi, y, tuning.gemv)
                }
                (Lin::Ggml(gw), None) => {
                    let (x, norm) = match (input.norm, input.f32) {
                        (Some(np), _) => (np.x, Some(GgmlNorm::from(np))),
                        (None, Some(x)) => (x, None),
                        (None, None) => {
                            return Err(GpuError::internal("plan", "ggml GEMV without input"))
                        }
                    };
                    kernels::ggml_gemv_fused(ctx, p, gw, x, n, norm, epi, y)
                }
                _ => Err(GpuError::internal(
                    "plan",
                    "a fused GEMV prologue or epilogue on a weight without one",
                )),
            };
        }
        let (ctx, m) = (self.ctx, self.m);
        let f32_in = || {
            input
                .f32
                .ok_or_else(|| GpuError::internal("plan", "float weight given INT8 input"))
        };
        match w {
            Lin::Ternary(tw) => {
                let a = input
                    .int8
                    .ok_or_else(|| GpuError::internal("plan", "ternary weight given f32 input"))?;
                let pick = (tuning.gemv, tuning.gemm_tile);
                if input.sparse {
                    kernels::ternary_matmul_sparse(ctx, &mut self.p, tw, a, y, pick)
                } else {
                    kernels::ternary_matmul(ctx, &mut self.p, tw, a, y, pick)
                }
            }
            Lin::Ggml(gw) => kernels::ggml_matmul(ctx, &mut self.p, gw, f32_in()?, n, y),
            Lin::Float(fw) => kernels::float_matmul(ctx, &mut self.p, fw, f32_in()?, n, y),
            Lin::Jit(i) => {
                m.record_jit_linear(ctx, &mut self.p, *i, &mut self.jit_turn, f32_in()?, n, y)
            }
        }
    }
}
