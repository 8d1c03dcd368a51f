//! [`GpuModel::load`]: the model's spec built from the file (its hyperparameters checked
//! against its tensors) and checked against [`GPU_CAPS`](crate::model::GPU_CAPS), the weights
//! uploaded as stored, NeuZip tensors placed by the memory plan.

use std::sync::Arc;

use tern_format::spec::{Biases, LayerSpec, QkNorm, RopeScaling};
use tern_format::{Encoding, FloatType, ModelSpec, TensorView, TernFile};

use crate::device::context::GpuContext;
use crate::error::{GpuError, Result};
use crate::kernels::RopeFreqs;
use crate::model::memory::{self, Decision};
use crate::model::relayout::{concat_rows, ggml_gate_up, ggml_type, ternary_gate_up};
use crate::model::{
    ActivationPlan, GateUp, GpuModel, GpuModelOptions, JitTensor, Layer, Lin, MemoryPlan, Qkv,
    QkvBias, TensorPlacement,
};
use crate::tuning::{GateUpLayout, QkvLayout};
use crate::weights::{FloatWeight, GgmlWeight, NeuzipTensor, TernaryWeight};

/// Token embeddings, looked up on the host (any encoding; one row per token is decoded).
pub(crate) struct HostEmbedding {
    encoding: Encoding,
    rows: u64,
    cols: u64,
    bytes: Vec<u8>,
    /// A NeuZip table's plan, parsed (and validated) once at load, not per lookup.
    plan: Option<tern_format::neuzip::Plan>,
}

impl HostEmbedding {
    pub(crate) fn row(&self, r: u64, out: &mut Vec<f32>) -> Result<()> {
        if r >= self.rows {
            return Err(GpuError::invalid(
                "embedding",
                format!("token {r} outside the vocabulary (0..{})", self.rows),
            ));
        }
        match &self.encoding {
            Encoding::NeuZip { dtype, .. } => {
                let raw = match &self.plan {
                    Some(p) => p.decode_rows(&self.bytes, r, 1)?,
                    None => tern_format::neuzip::decode_rows(&self.bytes, r, 1)?,
                };
                let e = Encoding::from(*dtype);
                out.extend(e.decode_f32(&[1, self.cols], &raw)?);
            }
            e => {
                let rb = e
                    .expected_bytes(&[1, self.cols])?
                    .ok_or_else(|| GpuError::internal("embedding", "row size of this encoding"))?;
                let b = self
                    .bytes
                    .get((r * rb) as usize..((r + 1) * rb) as usize)
                    .ok_or_else(|| GpuError::bad_model("embedding row past the tensor"))?;
                out.extend(e.decode_f32(&[1, self.cols], b)?);
            }
        }
        Ok(())
    }
}

fn view<'a>(file: &'a TernFile, name: &str) -> Result<TensorView<'a>> {
    if file.index_of(name).is_none() {
        return Err(GpuError::bad_model(format!("tensor `{name}` is missing")));
    }
    Ok(file.tensor(name)?)
}

fn check_shape(v: &TensorView<'_>, want: &[u64]) -> Result<()> {
    if v.info.shape != want {
        return Err(GpuError::bad_model(format!(
            "tensor `{}` has shape {:?}, the hyperparameters say {want:?}",
            v.info.name, v.info.shape
        )));
    }
    Ok(())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

struct Loader<'a> {
    ctx: &'a GpuContext,
    file: &'a TernFile,
    /// What the memory plan decided (NeuZip tensors decoded at load, the JIT chunk size).
    decision: Decision,
    plan: MemoryPlan,
    jit: Vec<JitTensor>,
}

impl Loader<'_> {
    fn vector(&mut self, name: &str, n: u64) -> Result<wgpu::Buffer> {
        let v = view(self.file, name)?;
        check_shape(&v, &[n])?;
        let x = v.to_f32()?;
        let buf = self.ctx.upload(name, &f32_bytes(&x))?;
        self.plan.tensors.push(TensorPlacement {
            name: name.into(),
            encoding: v.info.encoding.name(),
            placement: if matches!(v.info.encoding, Encoding::NeuZip { .. }) {
                "decoded"
            } else {
                "resident"
            },
            gpu_bytes: n * 4,
        });
        Ok(buf)
    }

    /// A layer's RoPE frequencies: its base and dimensions, linear scaling as `freq_scale`, Llama
    /// 3's divisors (the file's `rope_freqs.weight`, or computed from HF's `rope_scaling`).
    /// YaRN is not in `GPU_CAPS` (refused before this).
    fn rope_freqs(&mut self, ls: &LayerSpec) -> Result<RopeFreqs> {
        let r = &ls.rope;
        let mut f = RopeFreqs::plain(u64::from(r.dim), r.theta);
        match r.scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => f.freq_scale = 1.0 / factor,
            RopeScaling::FreqFactors => {
                let name = "rope_freqs.weight";
                let v = view(self.file, name)?;
                check_shape(&v, &[u64::from(r.dim / 2)])?;
                f.factors = Some(v.to_f32()?);
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                f.factors = Some(crate::kernels::llama3_rope_factors(
                    r.theta,
                    r.dim as usize,
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_context,
                ))
            }
            RopeScaling::Yarn { .. } => {
                return Err(GpuError::Format(
                    tern_format::Unsupported {
                        backend: crate::model::GPU_CAPS.backend,
                        feature: tern_format::Feature::RopeYarn,
                        layer: None,
                    }
                    .into(),
                ))
            }
        }
        Ok(f)
    }

    /// Layer `l`'s q/k/v projection biases (`blk.{l}.attn_{q,k,v}.bias`) as `b` says, zeros for a
    /// projection without one; `None` when the layer has none.
    fn qkv_bias(
        &mut self,
        l: u32,
        b: Biases,
        (q_dim, kv_dim): (u64, u64),
    ) -> Result<Option<QkvBias>> {
        if !(b.q || b.k || b.v) {
            return Ok(None);
        }
        let mut parts = Vec::with_capacity(3);
        for (on, s, len) in [
            (b.q, "attn_q", q_dim),
            (b.k, "attn_k", kv_dim),
            (b.v, "attn_v", kv_dim),
        ] {
            if on {
                let name = format!("blk.{l}.{s}.bias");
                let v = view(self.file, &name)?;
                check_shape(&v, &[len])?;
                let x = v.to_f32()?;
                self.plan.tensors.push(TensorPlacement {
                    name,
                    encoding: v.info.encoding.name(),
                    placement: "resident",
                    gpu_bytes: 2 * len * 4,
                });
                parts.push(x);
            } else {
                parts.push(vec![0.0; len as usize]);
            }
        }
        let stacked: Vec<f32> = parts.iter().flatten().copied().collect();
        let ctx = self.ctx;
        let up = |what: &str, v: &[f32]| ctx.upload(what, &f32_bytes(v));
        match parts.as_slice() {
            [q, k, v] => Ok(Some(QkvBias {
                q: up("q bias", q)?,
                k: up("k bias", k)?,
                v: up("v bias", v)?,
                stacked: up("q/k/v bias", &stacked)?,
            })),
            _ => Err(GpuError::internal("load", "three biases")),
        }
    }

    /// Layer `l`'s q/k/v projections: one matrix over the stacked rows `[Wq; Wk; Wv]` when
    /// `stack` and [`concat_rows`] allow it (uploaded once: the stacked buffer replaces the
    /// three), else the three as stored.
    fn qkv(&mut self, l: u32, (q_dim, kv_dim): (u64, u64), cols: u64, stack: bool) -> Result<Qkv> {
        let names = ["attn_q", "attn_k", "attn_v"].map(|s| format!("blk.{l}.{s}.weight"));
        if stack {
            let file = self.file;
            let mut views = Vec::with_capacity(3);
            for (name, rows) in names.iter().zip([q_dim, kv_dim, kv_dim]) {
                let v = view(file, name)?;
                check_shape(&v, &[rows, cols])?;
                views.push(v);
            }
            if let Some(st) = concat_rows(&views)? {
                let ctx = self.ctx;
                let lin = match st.encoding {
                    Encoding::Ternary {
                        layout,
                        group,
                        scale_type,
                    } => Lin::Ternary(TernaryWeight::upload(
                        ctx, layout, st.rows, cols, group, scale_type, &st.bytes,
                    )?),
                    ref e => {
                        let t = ggml_type(e).ok_or_else(|| GpuError::internal("load", "ggml"))?;
                        Lin::Ggml(GgmlWeight::upload(ctx, t, st.rows, cols, &st.bytes)?)
                    }
                };
                for ((name, v), share) in names.iter().zip(&views).zip(&st.shares) {
                    self.plan.tensors.push(TensorPlacement {
                        name: name.clone(),
                        encoding: v.info.encoding.name(),
                        placement: "resident",
                        gpu_bytes: *share,
                    });
                }
                drop(views);
                for name in &names {
                    file.release_tensor(name);
                }
                return Ok(Qkv::Fused(lin));
            }
        }
        Ok(Qkv::Split {
            wq: self.matrix(&names[0], q_dim, cols)?,
            wk: self.matrix(&names[1], kv_dim, cols)?,
            wv: self.matrix(&names[2], kv_dim, cols)?,
        })
    }

    /// Layer `l`'s gate and up projections: one weight of interleaved row pairs where both are
    /// ternary of the same layout, group and scale type, or ggml blocks of the same type, and
    /// `as_stored` is not asked (their input is the sparse (a4.8 TopK) walk's, or
    /// `GateUpLayout::Split`); else the two matrices as stored.
    fn gate_up(&mut self, l: u32, rows: u64, cols: u64, as_stored: bool) -> Result<GateUp> {
        let (gn, un) = (
            format!("blk.{l}.ffn_gate.weight"),
            format!("blk.{l}.ffn_up.weight"),
        );
        let (g, u) = (view(self.file, &gn)?, view(self.file, &un)?);
        check_shape(&g, &[rows, cols])?;
        check_shape(&u, &[rows, cols])?;
        let paired = match (&g.info.encoding, &u.info.encoding) {
            _ if as_stored => None,
            (
                Encoding::Ternary {
                    layout,
                    group,
                    scale_type,
                },
                e2,
            ) if e2 == &g.info.encoding => Some(Lin::Ternary(ternary_gate_up(
                self.ctx,
                *layout,
                rows,
                cols,
                *group,
                *scale_type,
                g.bytes,
                u.bytes,
            )?)),
            (e1, e2) if e1 == e2 && ggml_type(e1).is_some() => {
                let t = ggml_type(e1).ok_or_else(|| GpuError::internal("load", "ggml type"))?;
                Some(Lin::Ggml(ggml_gate_up(
                    self.ctx, t, rows, cols, g.bytes, u.bytes,
                )?))
            }
            _ => None,
        };
        let Some(lin) = paired else {
            return Ok(GateUp::Split {
                gate: self.matrix(&gn, rows, cols)?,
                up: self.matrix(&un, rows, cols)?,
            });
        };
        for v in [&g, &u] {
            self.plan.tensors.push(TensorPlacement {
                name: v.info.name.clone(),
                encoding: v.info.encoding.name(),
                placement: "resident",
                gpu_bytes: v.bytes.len() as u64,
            });
        }
        self.file.release_tensor(&gn);
        self.file.release_tensor(&un);
        Ok(GateUp::Paired(lin))
    }

    fn matrix(&mut self, name: &str, rows: u64, cols: u64) -> Result<Lin> {
        let v = view(self.file, name)?;
        check_shape(&v, &[rows, cols])?;
        let ctx = self.ctx;
        let enc_name = v.info.encoding.name();
        let bytes = v.bytes.len() as u64;
        let place = |placement: &'static str, gpu_bytes: u64, plan: &mut MemoryPlan| {
            plan.tensors.push(TensorPlacement {
                name: name.into(),
                encoding: enc_name.clone(),
                placement,
                gpu_bytes,
            })
        };
        let lin = match &v.info.encoding {
            Encoding::Ternary {
                layout,
                group,
                scale_type,
            } => {
                place("resident", bytes, &mut self.plan);
                Lin::Ternary(TernaryWeight::upload(
                    ctx,
                    *layout,
                    rows,
                    cols,
                    *group,
                    *scale_type,
                    v.bytes,
                )?)
            }
            e if ggml_type(e).is_some() => {
                let t = ggml_type(e).ok_or_else(|| GpuError::internal("load", "ggml type"))?;
                place("resident", bytes, &mut self.plan);
                Lin::Ggml(GgmlWeight::upload(ctx, t, rows, cols, v.bytes)?)
            }
            Encoding::F32 | Encoding::F16 | Encoding::Bf16 => {
                let dt = match v.info.encoding {
                    Encoding::F32 => FloatType::F32,
                    Encoding::F16 => FloatType::F16,
                    _ => FloatType::Bf16,
                };
                place("resident", bytes, &mut self.plan);
                Lin::Float(FloatWeight::upload(ctx, dt, rows, cols, v.bytes)?)
            }
            Encoding::NeuZip { dtype, .. } => {
                let decoded = rows * cols * dtype.size() as u64;
                if self.decision.decode.contains(name) {
                    let nz = NeuzipTensor::upload(ctx, v.bytes)?;
                    let mut enc = ctx.encoder();
                    nz.decode(ctx, &mut enc)?;
                    ctx.submit_wait(enc)?;
                    nz.check_status(ctx)?;
                    let parts = nz.float_parts(cols)?;
                    // The compressed copy goes now (tern's own count; the driver's sees it).
                    ctx.mem
                        .release(nz.compressed_bytes() - 4 * nz.chunks() as u64);
                    place("decoded", decoded, &mut self.plan);
                    Lin::Float(FloatWeight::from_parts(*dtype, rows, cols, parts)?)
                } else {
                    // The fused decode + GEMV needs no scratch: chunks as large as a binding.
                    let fused = tern_format::neuzip::Plan::parse(v.bytes)
                        .is_ok_and(|p| crate::model::memory::fusable(&p, cols));
                    let chunk = if fused {
                        u64::MAX
                    } else {
                        self.decision.jit_chunk
                    };
                    let nz = NeuzipTensor::upload_compressed(ctx, v.bytes, chunk)?;
                    place("jit", nz.compressed_bytes(), &mut self.plan);
                    self.jit.push(JitTensor {
                        name: name.into(),
                        nz,
                        rows,
                        cols,
                        dtype: *dtype,
                    });
                    Lin::Jit(self.jit.len() - 1)
                }
            }
            e => {
                return Err(GpuError::Unsupported {
                    adapter: ctx.info.name.clone(),
                    detail: format!(
                    "tensor `{name}` is {}: the GPU engine has no kernel for it (use --device cpu)",
                    e.name()
                ),
                })
            }
        };
        // Uploaded (the GPU and the upload staging hold it now): the mapped pages need not stay
        // resident on the host beside it.
        self.file.release_tensor(name);
        Ok(lin)
    }
}

impl GpuModel {
    /// Upload the model's weights. Errors (typed) when an encoding or activation scheme has no
    /// GPU kernel, when a tensor exceeds the adapter's limits, or on out-of-memory; the caller
    /// can then fall back to the CPU reference.
    pub fn load(ctx: Arc<GpuContext>, file: &TernFile, opts: GpuModelOptions) -> Result<Self> {
        Self::load_checked(ctx, file, opts).map_err(|e| match e {
            // Every operand shape checked while loading comes from the file (tensor bytes and
            // shapes against the hyperparameters): a bad file, as on the CPU.
            GpuError::Shape { op, detail } => GpuError::BadModel(format!("{op}: {detail}")),
            e => e,
        })
    }

    fn load_checked(ctx: Arc<GpuContext>, file: &TernFile, opts: GpuModelOptions) -> Result<Self> {
        // Hyperparameters against each other and the tensors present, before anything is sized
        // from them (a hostile file must not make the loader allocate what it says).
        Self::load_spec(ctx, file, ModelSpec::from_file(file)?, opts)
    }

    /// The checks a load runs before sizing anything (its spec's features, every linear's
    /// activation kernels), for [`crate::model::memory::plan_load`].
    pub(crate) fn preflight(ctx: &GpuContext, file: &TernFile) -> Result<()> {
        Self::check_spec(&ModelSpec::from_file(file)?)?;
        Self::check_activations(ctx, &ActivationPlan::from_file(file)?)
    }

    /// Refuse an activation plan with a linear the GPU has no kernel for.
    fn check_activations(ctx: &GpuContext, act_plan: &ActivationPlan) -> Result<()> {
        if let Some((layer, i)) = act_plan.unsupported() {
            let at = layer.map_or("the head".to_string(), |l| format!("layer {l}"));
            return Err(GpuError::Unsupported {
                adapter: ctx.info.name.clone(),
                detail: format!(
                    "{} weights of {} ({}) with {} inputs have no GPU kernels; use --device cpu",
                    i.weights.name(),
                    i.linear.name(),
                    at,
                    i.scheme.name(),
                ),
            });
        }
        Ok(())
    }

    /// Load `file` as `spec` (the file's own) says: refused before anything is read or allocated
    /// when the spec needs a feature the graph lacks ([`GpuModel::check_spec`]).
    fn load_spec(
        ctx: Arc<GpuContext>,
        file: &TernFile,
        spec: ModelSpec,
        opts: GpuModelOptions,
    ) -> Result<Self> {
        Self::check_spec(&spec)?;
        let meta = file.meta();
        let hp = meta.hparams.clone();
        let act_plan = ActivationPlan::from_file(file)?;
        Self::check_activations(&ctx, &act_plan)?;
        let (n_embd, n_ff, n_vocab) = (
            u64::from(hp.n_embd),
            u64::from(hp.n_ff),
            u64::from(hp.n_vocab),
        );
        let q_dim = u64::from(hp.n_head) * u64::from(hp.head_dim);
        let kv_dim = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);

        // The budget: decided before anything is allocated (or refused, naming the minimum),
        // then enforced by the context on every allocation.
        let decision = memory::decide(&ctx, file, opts.max_memory, &opts.kv)?;
        ctx.set_budget(opts.max_memory);
        let mut ld = Loader {
            ctx: &ctx,
            file,
            plan: MemoryPlan {
                budget: opts.max_memory,
                min_budget: decision.min_budget,
                session_reserve: decision.session_reserve,
                ..MemoryPlan::default()
            },
            decision,
            jit: Vec::new(),
        };
        // One entry per layer the activation plan found in the file (every tensor checked).
        let mut layers = Vec::with_capacity(act_plan.layers.len());
        // The stacked q/k/v projection's rows go to the FFN's `g` scratch (free during the
        // attention block): stacked when they fit it.
        // (`QkvLayout::Split` keeps three matrices: the comparison path of issue 15's measurements)
        let stack = q_dim + 2 * kv_dim <= n_ff && opts.tuning.qkv == QkvLayout::Stacked;
        let mut rope_freqs: Vec<RopeFreqs> = Vec::new();
        let mut layer_rope = Vec::with_capacity(act_plan.layers.len());
        for l in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            // what the layer holds (its shape is the model's: `GPU_CAPS` has no `LayerShapes`)
            let ls = spec.layer(l as usize)?;
            let freqs = ld.rope_freqs(ls)?;
            let ti = match rope_freqs.iter().position(|f| *f == freqs) {
                Some(i) => i,
                None => {
                    rope_freqs.push(freqs);
                    rope_freqs.len() - 1
                }
            };
            layer_rope.push(ti);
            let hd = u64::from(ls.attn.head_dim);
            let qk = ls.qk_norm == QkNorm::PerHeadRms;
            let opt = |ld: &mut Loader<'_>, on: bool, name: &str, len: u64| -> Result<_> {
                on.then(|| ld.vector(name, len)).transpose()
            };
            layers.push(Layer {
                attn_norm: ld.vector(&n("attn_norm"), n_embd)?,
                qkv: ld.qkv(l, (q_dim, kv_dim), n_embd, stack)?,
                bias: ld.qkv_bias(l, ls.attn.bias, (q_dim, kv_dim))?,
                q_norm: opt(&mut ld, qk, &n("attn_q_norm"), hd)?,
                k_norm: opt(&mut ld, qk, &n("attn_k_norm"), hd)?,
                post_attn_norm: opt(
                    &mut ld,
                    ls.norms.post_attn,
                    &n("post_attention_norm"),
                    n_embd,
                )?,
                post_ffn_norm: opt(&mut ld, ls.norms.post_ffn, &n("post_ffw_norm"), n_embd)?,
                wo: ld.matrix(&n("attn_output"), n_embd, q_dim)?,
                attn_sub_norm: if ls.norms.sub_attn {
                    Some(ld.vector(&n("attn_sub_norm"), q_dim)?)
                } else {
                    None
                },
                ffn_norm: ld.vector(&n("ffn_norm"), n_embd)?,
                gate_up: {
                    let sparse = act_plan
                        .layers
                        .get(l as usize)
                        .is_some_and(|b| b.gate_up.sparse);
                    let split = opts.tuning.gate_up == GateUpLayout::Split;
                    ld.gate_up(l, n_ff, n_embd, sparse || split)?
                },
                down: ld.matrix(&n("ffn_down"), n_embd, n_ff)?,
                ffn_sub_norm: if ls.norms.sub_ffn {
                    Some(ld.vector(&n("ffn_sub_norm"), n_ff)?)
                } else {
                    None
                },
            });
        }
        let output_norm = ld.vector("output_norm.weight", n_embd)?;
        let head_name = if spec.tied_head {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let head = ld.matrix(head_name, n_vocab, n_embd)?;
        let ev = view(file, "token_embd.weight")?;
        check_shape(&ev, &[n_vocab, n_embd])?;
        // Tied embeddings already on the GPU as a float or ggml matrix, or kept NeuZip-compressed
        // in blocks of whole rows: rows are looked up (decoded) there.
        let gpu_embed = spec.tied_head && super::embed_table(&head, &ld.jit).is_some();
        let embed = if gpu_embed {
            None
        } else {
            Some(HostEmbedding {
                encoding: ev.info.encoding.clone(),
                rows: n_vocab,
                cols: n_embd,
                bytes: ev.bytes.to_vec(),
                plan: match ev.info.encoding {
                    Encoding::NeuZip { .. } => Some(tern_format::neuzip::Plan::parse(ev.bytes)?),
                    _ => None,
                },
            })
            .inspect(|_| file.release_tensor("token_embd.weight"))
        };
        if !spec.tied_head {
            ld.plan.tensors.push(TensorPlacement {
                name: "token_embd.weight".into(),
                encoding: ev.info.encoding.name(),
                placement: "host",
                gpu_bytes: 0,
            });
        }
        let mut jit_scratch = Vec::new();
        let chunk = ld
            .jit
            .iter()
            .filter(|j| !j.nz.fusable(j.cols))
            .map(|j| j.nz.max_chunk_output_bytes())
            .max()
            .unwrap_or(0);
        if chunk > 0 {
            for _ in 0..ld.decision.jit_buffers.clamp(1, 2) {
                jit_scratch.push(ctx.zeroed("neuzip jit scratch", chunk)?);
            }
            ld.plan.jit_scratch_bytes = jit_scratch.iter().map(|b| b.size()).sum();
        }
        let Loader { plan, jit, .. } = ld;
        let model = GpuModel {
            ctx,
            hp,
            spec,
            layers,
            rope_freqs,
            layer_rope,
            output_norm,
            head,
            embed,
            jit,
            jit_scratch,
            plan,
            act_plan,
            tuning: opts.tuning,
        };
        // The just-in-time streams decoded once, their status read: a damaged stream that
        // passes the structural checks is a corrupt file now, not garbage later.
        model.verify_jit()?;
        Ok(model)
    }
}

#[cfg(test)]
#[path = "load_spec_test.rs"]
mod spec_test;

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
