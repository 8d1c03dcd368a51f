//! The whole forward pass on the GPU, recorded once into [`Plan`]s and replayed per step.
//!
//! Same graph as `tern_reference::Model` (see its module doc). Weights stay as stored: ternary
//! codes (2-bit / base-3) with INT8 activations, ggml blocks, raw floats; NeuZip tensors are
//! decoded on the GPU by the memory plan ([`MemoryPlan`]): kept decoded when the budget allows,
//! else kept compressed and decoded just in time into a shared scratch right before use.
//!
//! A [`GpuSession`] owns the KV cache and the activation scratch (sized for `max_batch` tokens)
//! and one recorded plan per batch size it has run. A step writes the token embeddings, the RoPE
//! table and the step parameters (`p0`) with `queue.write_buffer`, encodes the plan (one compute
//! pass), copies the logits to a mapped staging buffer and submits once.

use std::collections::HashMap;
use std::sync::Arc;

use tern_format::{ActQuant, Encoding, FfnAct, FloatType, HParams, TensorView, TernFile};

use crate::attn::{self, StepParams};
use crate::context::GpuContext;
use crate::error::{GpuError, Result};
use crate::float_ops::{self, FloatWeight};
use crate::gemm;
use crate::ops::{self, ActInt8, GgmlWeight, NeuzipTensor, TernaryWeight};
use crate::pipeline::{EltOp, GgmlType};
use crate::plan::{Plan, Recorder};

/// Options of [`GpuModel::load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModelOptions {
    /// GPU memory the weights may take (bytes). NeuZip tensors are kept decoded while the total
    /// stays within it, and decoded just in time otherwise. `None`: no limit (decode everything
    /// once at load).
    pub max_memory: Option<u64>,
}

impl Default for GpuModelOptions {
    fn default() -> Self {
        GpuModelOptions { max_memory: None }
    }
}

/// A linear layer's weight as it lives on the GPU.
enum Lin {
    Ternary(TernaryWeight),
    Ggml(GgmlWeight),
    Float(FloatWeight),
    /// NeuZip, decoded just in time into the shared scratch before each use.
    Jit(usize),
}

struct Layer {
    attn_norm: wgpu::Buffer,
    wq: Lin,
    wk: Lin,
    wv: Lin,
    wo: Lin,
    attn_sub_norm: Option<wgpu::Buffer>,
    ffn_norm: wgpu::Buffer,
    gate: Lin,
    up: Lin,
    down: Lin,
    ffn_sub_norm: Option<wgpu::Buffer>,
}

/// How one tensor is held on the GPU (reported by `tern bench` and `-v`).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlacement {
    pub name: String,
    /// Encoding in the file.
    pub encoding: String,
    /// "resident" (as stored), "decoded" (NeuZip decoded once at load), "jit" (NeuZip kept
    /// compressed, decoded before each use), "host" (token embeddings looked up on the CPU).
    pub placement: &'static str,
    /// Bytes it takes on the GPU.
    pub gpu_bytes: u64,
}

/// What the memory plan decided, with the bytes of each part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPlan {
    pub budget: Option<u64>,
    pub tensors: Vec<TensorPlacement>,
    /// Bytes of the just-in-time decode scratch (one or two sets sized for the largest JIT
    /// tensor).
    pub jit_scratch_bytes: u64,
}

impl MemoryPlan {
    /// Resident weight bytes by encoding name, sorted by name.
    pub fn by_encoding(&self) -> Vec<(String, u64)> {
        let mut m: HashMap<String, u64> = HashMap::new();
        for t in &self.tensors {
            let k = if t.placement == "resident" || t.placement == "host" {
                t.encoding.clone()
            } else {
                format!("{} ({})", t.encoding, t.placement)
            };
            *m.entry(k).or_default() += t.gpu_bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }

    /// All weight bytes on the GPU.
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.gpu_bytes).sum()
    }
}

/// A NeuZip matrix kept compressed; decoded into the scratch before each use.
struct JitTensor {
    nz: NeuzipTensor,
    rows: u64,
    cols: u64,
    dtype: FloatType,
}

/// Token embeddings, looked up on the host (any encoding; one row per token is decoded).
struct HostEmbedding {
    encoding: Encoding,
    rows: u64,
    cols: u64,
    bytes: Vec<u8>,
}

impl HostEmbedding {
    fn row(&self, r: u64, out: &mut Vec<f32>) -> Result<()> {
        if r >= self.rows {
            return Err(GpuError::shape(
                "embedding",
                format!("token {r} outside the vocabulary (0..{})", self.rows),
            ));
        }
        match &self.encoding {
            Encoding::NeuZip { dtype, .. } => {
                let raw = tern_format::neuzip::decode_rows(&self.bytes, r, 1)?;
                let e = Encoding::from(*dtype);
                out.extend(e.decode_f32(&[1, self.cols], &raw)?);
            }
            e => {
                let rb = e
                    .expected_bytes(&[1, self.cols])?
                    .ok_or_else(|| GpuError::shape("embedding", "row size of this encoding"))?;
                let b = self
                    .bytes
                    .get((r * rb) as usize..((r + 1) * rb) as usize)
                    .ok_or_else(|| GpuError::shape("embedding", "row past the tensor"))?;
                out.extend(e.decode_f32(&[1, self.cols], b)?);
            }
        }
        Ok(())
    }
}

/// A model loaded onto the GPU.
pub struct GpuModel {
    ctx: Arc<GpuContext>,
    hp: HParams,
    acts: tern_format::ActivationScheme,
    layers: Vec<Layer>,
    output_norm: wgpu::Buffer,
    head: Lin,
    /// Token embeddings looked up on the host (`None`: looked up on the GPU in the tied head).
    embed: Option<HostEmbedding>,
    jit: Vec<JitTensor>,
    /// Decode scratches used alternately (two when several tensors are decoded just in time;
    /// each sized for the largest chunks of any of them).
    jit_scratch: Vec<Vec<wgpu::Buffer>>,
    plan: MemoryPlan,
    act_plan: crate::activation::ActivationPlan,
}

impl std::fmt::Debug for GpuModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuModel")
            .field("hparams", &self.hp)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

fn view<'a>(file: &'a TernFile, name: &str) -> Result<TensorView<'a>> {
    if file.index_of(name).is_none() {
        return Err(GpuError::shape(
            "load",
            format!("tensor `{name}` is missing"),
        ));
    }
    Ok(file.tensor(name)?)
}

fn check_shape(v: &TensorView<'_>, want: &[u64]) -> Result<()> {
    if v.info.shape != want {
        return Err(GpuError::shape(
            "load",
            format!(
                "tensor `{}` has shape {:?}, the hyperparameters say {want:?}",
                v.info.name, v.info.shape
            ),
        ));
    }
    Ok(())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn ggml_type(e: &Encoding) -> Option<GgmlType> {
    match e {
        Encoding::Q8_0 => Some(GgmlType::Q8_0),
        Encoding::Q4_0 => Some(GgmlType::Q4_0),
        Encoding::Q4_1 => Some(GgmlType::Q4_1),
        Encoding::Q6K => Some(GgmlType::Q6K),
        _ => None,
    }
}

struct Loader<'a> {
    ctx: &'a GpuContext,
    file: &'a TernFile,
    /// Remaining budget for decoded NeuZip tensors.
    left: Option<u64>,
    plan: MemoryPlan,
    jit: Vec<JitTensor>,
    jit_max: u64,
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
                let t = ggml_type(e).ok_or_else(|| GpuError::shape("load", "ggml type"))?;
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
                let fits = self.left.is_none_or(|l| decoded <= l);
                if fits {
                    if let Some(l) = self.left.as_mut() {
                        *l -= decoded;
                    }
                    let nz = NeuzipTensor::upload(ctx, v.bytes)?;
                    let mut enc = ctx.encoder();
                    nz.decode(ctx, &mut enc)?;
                    ctx.submit_wait(enc)?;
                    nz.check_status(ctx)?;
                    let parts = nz.float_parts(cols)?;
                    place("decoded", decoded, &mut self.plan);
                    Lin::Float(FloatWeight::from_parts(*dtype, rows, cols, parts)?)
                } else {
                    let nz = NeuzipTensor::upload_compressed(ctx, v.bytes)?;
                    place("jit", bytes, &mut self.plan);
                    self.jit_max = self.jit_max.max(nz.output_bytes());
                    self.jit.push(JitTensor {
                        nz,
                        rows,
                        cols,
                        dtype: *dtype,
                    });
                    Lin::Jit(self.jit.len() - 1)
                }
            }
            e => {
                return Err(GpuError::shape(
                    "load",
                    format!(
                    "tensor `{name}` is {}: the GPU engine has no kernel for it (use --device cpu)",
                    e.name()
                ),
                ))
            }
        };
        Ok(lin)
    }
}

impl GpuModel {
    /// Upload the model's weights. Errors (typed) when an encoding or activation scheme has no
    /// GPU kernel, when a tensor exceeds the adapter's limits, or on out-of-memory; the caller
    /// can then fall back to the CPU reference.
    pub fn load(ctx: Arc<GpuContext>, file: &TernFile, opts: GpuModelOptions) -> Result<Self> {
        let meta = file.meta();
        let hp = meta.hparams.clone();
        let acts = meta.activations;
        let act_plan = crate::activation::ActivationPlan::from_file(file)?;
        for (what, q) in [
            ("qkv", acts.qkv),
            ("out", acts.out),
            ("gate_up", acts.gate_up),
            ("down", acts.down),
        ] {
            if matches!(q, ActQuant::Int4 | ActQuant::Topk50Int8) {
                return Err(GpuError::Unsupported {
                    adapter: ctx.info.name.clone(),
                    detail: format!(
                        "BitNet a4.8 activations ({what}: {q:?}) have no GPU kernels yet; use --device cpu"
                    ),
                });
            }
        }
        let zero = [
            hp.n_embd,
            hp.n_layer,
            hp.n_head,
            hp.n_head_kv,
            hp.head_dim,
            hp.n_ff,
        ];
        if zero.contains(&0) || hp.n_head % hp.n_head_kv != 0 || hp.rope_dim > hp.head_dim {
            return Err(GpuError::shape(
                "load",
                format!("bad hyperparameters {hp:?}"),
            ));
        }
        let (n_embd, n_ff, n_vocab) = (
            u64::from(hp.n_embd),
            u64::from(hp.n_ff),
            u64::from(hp.n_vocab),
        );
        let q_dim = u64::from(hp.n_head) * u64::from(hp.head_dim);
        let kv_dim = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);

        // Budget: everything that is not a decoded NeuZip tensor is counted first.
        let fixed: u64 = file
            .tensors()
            .iter()
            .filter(|t| !matches!(t.encoding, Encoding::NeuZip { .. }))
            .map(|t| t.size)
            .sum();
        let mut ld = Loader {
            ctx: &ctx,
            file,
            left: opts.max_memory.map(|m| m.saturating_sub(fixed)),
            plan: MemoryPlan {
                budget: opts.max_memory,
                ..MemoryPlan::default()
            },
            jit: Vec::new(),
            jit_max: 0,
        };
        let mut layers = Vec::with_capacity(hp.n_layer as usize);
        for l in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            layers.push(Layer {
                attn_norm: ld.vector(&n("attn_norm"), n_embd)?,
                wq: ld.matrix(&n("attn_q"), q_dim, n_embd)?,
                wk: ld.matrix(&n("attn_k"), kv_dim, n_embd)?,
                wv: ld.matrix(&n("attn_v"), kv_dim, n_embd)?,
                wo: ld.matrix(&n("attn_output"), n_embd, q_dim)?,
                attn_sub_norm: if hp.sub_norms {
                    Some(ld.vector(&n("attn_sub_norm"), q_dim)?)
                } else {
                    None
                },
                ffn_norm: ld.vector(&n("ffn_norm"), n_embd)?,
                gate: ld.matrix(&n("ffn_gate"), n_ff, n_embd)?,
                up: ld.matrix(&n("ffn_up"), n_ff, n_embd)?,
                down: ld.matrix(&n("ffn_down"), n_embd, n_ff)?,
                ffn_sub_norm: if hp.sub_norms {
                    Some(ld.vector(&n("ffn_sub_norm"), n_ff)?)
                } else {
                    None
                },
            });
        }
        let output_norm = ld.vector("output_norm.weight", n_embd)?;
        let head_name = if hp.tied_embeddings {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let head = ld.matrix(head_name, n_vocab, n_embd)?;
        let ev = view(file, "token_embd.weight")?;
        check_shape(&ev, &[n_vocab, n_embd])?;
        // Tied embeddings already on the GPU as a float or ggml matrix: rows are looked up there.
        let gpu_embed = hp.tied_embeddings && matches!(head, Lin::Float(_) | Lin::Ggml(_));
        let embed = if gpu_embed {
            None
        } else {
            Some(HostEmbedding {
                encoding: ev.info.encoding.clone(),
                rows: n_vocab,
                cols: n_embd,
                bytes: ev.bytes.to_vec(),
            })
        };
        if !hp.tied_embeddings {
            ld.plan.tensors.push(TensorPlacement {
                name: "token_embd.weight".into(),
                encoding: ev.info.encoding.name(),
                placement: "host",
                gpu_bytes: 0,
            });
        }
        let mut jit_scratch = Vec::new();
        if !ld.jit.is_empty() {
            // Two scratches used alternately (decoding the next tensor does not wait for the
            // previous one's readers); one when a single tensor is decoded just in time.
            let sets = if ld.jit.len() > 1 { 2 } else { 1 };
            for _ in 0..sets {
                let mut set = Vec::new();
                for chunk in ld.jit.iter().map(|j| j.nz.chunk_output_bytes()).fold(
                    Vec::<u64>::new(),
                    |mut acc, sizes| {
                        for (i, s) in sizes.iter().enumerate() {
                            if i < acc.len() {
                                acc[i] = acc[i].max(*s);
                            } else {
                                acc.push(*s);
                            }
                        }
                        acc
                    },
                ) {
                    set.push(ctx.zeroed("neuzip jit scratch", chunk)?);
                }
                jit_scratch.push(set);
            }
            ld.plan.jit_scratch_bytes = jit_scratch
                .iter()
                .flatten()
                .map(|b: &wgpu::Buffer| b.size())
                .sum();
        }
        let Loader { plan, jit, .. } = ld;
        Ok(GpuModel {
            ctx,
            hp,
            acts,
            layers,
            output_norm,
            head,
            embed,
            jit,
            jit_scratch,
            plan,
            act_plan,
        })
    }

    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Every linear layer's input scheme and the kernel that produces it.
    pub fn activation_plan(&self) -> &crate::activation::ActivationPlan {
        &self.act_plan
    }

    /// Where every tensor went and what it costs.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }
}

/// Which rows of logits a step produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wanted {
    /// Only the last token's logits.
    Last,
    /// Every token's logits.
    All,
    /// Only the argmax of the last token (greedy decoding without reading logits back).
    Argmax,
    /// `log p(target[i])` of every token through the fused Cut-Cross-Entropy kernel: no logits.
    Score,
}

/// Scratch for one batch size (allocated for `max_batch` tokens, shared by every plan).
struct Scratch {
    x0: wgpu::Buffer,
    x1: wgpu::Buffer,
    a: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    o: wgpu::Buffer,
    o2: wgpu::Buffer,
    proj: wgpu::Buffer,
    g: wgpu::Buffer,
    u: wgpu::Buffer,
    h: wgpu::Buffer,
    h2: wgpu::Buffer,
    act_embd: ActInt8,
    act_q: ActInt8,
    act_ff: ActInt8,
    last: wgpu::Buffer,
    logits: wgpu::Buffer,
    argmax: wgpu::Buffer,
    ids: wgpu::Buffer,
    targets: wgpu::Buffer,
    logprobs: wgpu::Buffer,
    rope: wgpu::Buffer,
    step: wgpu::Buffer,
    staging: wgpu::Buffer,
}

/// GPU memory of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionMemory {
    pub kv_bytes: u64,
    pub scratch_bytes: u64,
}

/// One conversation on the GPU: KV cache, scratch, recorded plans.
pub struct GpuSession {
    model: Arc<GpuModel>,
    n_ctx: u64,
    max_batch: u64,
    len: u64,
    kv: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    s: Scratch,
    plans: HashMap<(u64, Wanted), Plan>,
    mem: SessionMemory,
}

impl std::fmt::Debug for GpuSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSession")
            .field("n_ctx", &self.n_ctx)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl GpuSession {
    /// A session holding up to `n_ctx` positions, running batches of up to `max_batch` tokens.
    pub fn new(model: Arc<GpuModel>, n_ctx: u64, max_batch: u64) -> Result<Self> {
        let ctx = Arc::clone(&model.ctx);
        let hp = &model.hp;
        if n_ctx == 0 || max_batch == 0 {
            return Err(GpuError::shape(
                "session",
                "n_ctx and max_batch must be > 0",
            ));
        }
        let (d, ff, vocab) = (
            u64::from(hp.n_embd),
            u64::from(hp.n_ff),
            u64::from(hp.n_vocab),
        );
        let q_dim = u64::from(hp.n_head) * u64::from(hp.head_dim);
        let kv_dim = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);
        // All-token logits must fit one binding: cap the batch for them in `eval_all`.
        let b = max_batch;
        let kv_bytes = n_ctx.saturating_mul(kv_dim).saturating_mul(4);
        if kv_bytes > ctx.binding_limit() {
            return Err(GpuError::TooLarge {
                what: "KV cache of one layer".into(),
                detail: format!(
                    "{n_ctx} positions × {kv_dim} floats = {kv_bytes} bytes, one binding holds {}; use a smaller context",
                    ctx.binding_limit()
                ),
            });
        }
        let mut kv = Vec::with_capacity(hp.n_layer as usize);
        for _ in 0..hp.n_layer {
            kv.push((
                ctx.zeroed("k cache", kv_bytes)?,
                ctx.zeroed("v cache", kv_bytes)?,
            ));
        }
        let f = |what: &str, n: u64| ctx.zeroed(what, n.max(1) * 4);
        // Rows of logits one `eval_all` batch produces (small: scoring uses the fused path).
        let logits_rows = b.min(32).min((ctx.binding_limit() / (vocab * 4)).max(1));
        let half = u64::from(hp.rope_dim / 2).max(1);
        let s = Scratch {
            x0: f("x0", b * d)?,
            x1: f("x1", b * d)?,
            a: f("a", b * d)?,
            q: f("q", b * q_dim)?,
            k: f("k", b * kv_dim)?,
            v: f("v", b * kv_dim)?,
            o: f("o", b * q_dim)?,
            o2: f("o2", b * q_dim)?,
            proj: f("proj", b * d)?,
            g: f("g", b * ff)?,
            u: f("u", b * ff)?,
            h: f("h", b * ff)?,
            h2: f("h2", b * ff)?,
            act_embd: ActInt8::alloc(&ctx, b, d)?,
            act_q: ActInt8::alloc(&ctx, b, q_dim)?,
            act_ff: ActInt8::alloc(&ctx, b, ff)?,
            last: f("last hidden", d)?,
            logits: f("logits", logits_rows * vocab)?,
            argmax: f("argmax", 1)?,
            ids: f("token ids", b)?,
            targets: f("score targets", b)?,
            logprobs: f("log-probabilities", b)?,
            rope: f("rope table", b * half * 2)?,
            step: ctx.create_buffer(
                "step params",
                std::mem::size_of::<StepParams>() as u64,
                wgpu::BufferUsages::UNIFORM
                    | wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST,
            )?,
            staging: ctx.create_buffer(
                "logits readback",
                logits_rows * vocab * 4,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?,
        };
        let scratch_bytes = [
            &s.x0,
            &s.x1,
            &s.a,
            &s.q,
            &s.k,
            &s.v,
            &s.o,
            &s.o2,
            &s.proj,
            &s.g,
            &s.u,
            &s.h,
            &s.h2,
            &s.act_embd.q,
            &s.act_q.q,
            &s.act_ff.q,
            &s.last,
            &s.logits,
            &s.rope,
            &s.staging,
        ]
        .iter()
        .map(|b| b.size())
        .sum();
        Ok(GpuSession {
            mem: SessionMemory {
                kv_bytes: kv_bytes * 2 * u64::from(hp.n_layer),
                scratch_bytes,
            },
            model,
            n_ctx,
            max_batch: b,
            len: 0,
            kv,
            s,
            plans: HashMap::new(),
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn n_ctx(&self) -> u64 {
        self.n_ctx
    }

    pub fn memory(&self) -> SessionMemory {
        self.mem
    }

    /// KV-cache bytes one position takes over all layers (keys and values).
    pub fn kv_bytes_per_token(&self) -> u64 {
        let hp = &self.model.hp;
        2 * u64::from(hp.n_layer) * u64::from(hp.n_head_kv) * u64::from(hp.head_dim) * 4
    }

    /// Forget the cache beyond the first `n` positions (the KV rows are overwritten later).
    pub fn truncate(&mut self, n: u64) {
        self.len = self.len.min(n);
    }

    /// Largest batch whose every-token logits fit the logits buffer.
    fn all_rows(&self) -> u64 {
        self.s.logits.size() / (u64::from(self.model.hp.n_vocab) * 4).max(1)
    }

    /// Dispatches of a decode step (one token, last logits).
    pub fn dispatches_per_token(&mut self) -> Result<usize> {
        self.plan_for(1, Wanted::Last)?;
        Ok(self
            .plans
            .get(&(1, Wanted::Last))
            .map(Plan::dispatches)
            .unwrap_or(0))
    }

    /// The recorded plan for `n` tokens (built on first use).
    fn plan_for(&mut self, n: u64, wanted: Wanted) -> Result<()> {
        if self.plans.contains_key(&(n, wanted)) {
            return Ok(());
        }
        if self.plans.len() > 8 {
            // Keep decode plans; drop odd prefill sizes.
            self.plans.retain(|(k, _), _| *k == 1);
        }
        let plan = self.record(n, wanted)?;
        self.plans.insert((n, wanted), plan);
        Ok(())
    }

    fn record(&self, n: u64, wanted: Wanted) -> Result<Plan> {
        let m = &self.model;
        let ctx = &*m.ctx;
        let hp = &m.hp;
        let s = &self.s;
        let (d, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
        let (nh, nkv, hd) = (
            u64::from(hp.n_head),
            u64::from(hp.n_head_kv),
            u64::from(hp.head_dim),
        );
        let (q_dim, kv_dim) = (nh * hd, nkv * hd);
        let eps = hp.rms_eps;
        let nt = u32::try_from(n).map_err(|_| GpuError::shape("plan", "batch too large"))?;
        let mut p = Plan::new();
        let act_d = s.act_embd.prefix(nt)?;
        let act_q = s.act_q.prefix(nt)?;
        let act_f = s.act_ff.prefix(nt)?;
        let mut jit_turn = 0usize;
        let mut lin = |p: &mut Plan,
                       w: &Lin,
                       x: &wgpu::Buffer,
                       n: u64,
                       aq: ActQuant,
                       act: &ActInt8,
                       quantized: &mut bool,
                       y: &wgpu::Buffer|
         -> Result<()> {
            match w {
                Lin::Ternary(tw) => {
                    if aq != ActQuant::Int8 {
                        return Err(GpuError::shape(
                            "plan",
                            format!("ternary weight with {aq:?} activations"),
                        ));
                    }
                    if !*quantized {
                        ops::quantize_act_int8_into(ctx, p, x, act)?;
                        *quantized = true;
                    }
                    gemm::ternary_matmul(ctx, p, tw, act, y)
                }
                Lin::Ggml(gw) => gemm::ggml_matmul(ctx, p, gw, x, n, y),
                Lin::Float(fw) => float_ops::float_gemv(ctx, p, fw, x, n, y),
                Lin::Jit(i) => {
                    let j = m
                        .jit
                        .get(*i)
                        .ok_or_else(|| GpuError::shape("plan", "jit index"))?;
                    let set = m
                        .jit_scratch
                        .get(jit_turn % m.jit_scratch.len().max(1))
                        .ok_or_else(|| GpuError::shape("plan", "jit scratch"))?;
                    jit_turn += 1;
                    j.nz.decode_into(ctx, p, set)?;
                    let parts = parts_over(&j.nz, set, j.cols)?;
                    let fw = FloatWeight::from_parts(j.dtype, j.rows, j.cols, parts)?;
                    float_ops::float_gemv(ctx, p, &fw, x, n, y)
                }
            }
        };
        // x0 holds the embeddings (looked up here, or written by the host). Residual ping-pong:
        // x0 → x1 → x0.
        if m.embed.is_none() {
            let table = match &m.head {
                Lin::Float(fw) => float_ops::EmbedTable::Float(fw),
                Lin::Ggml(gw) => float_ops::EmbedTable::Ggml(gw),
                _ => {
                    return Err(GpuError::shape(
                        "plan",
                        "GPU embedding needs a float or ggml head",
                    ))
                }
            };
            float_ops::embed_rows(ctx, &mut p, &table, &s.ids, n, &s.x0)?;
        }
        for (li, l) in m.layers.iter().enumerate() {
            let (kc, vc) = self
                .kv
                .get(li)
                .ok_or_else(|| GpuError::shape("plan", "kv layer"))?;
            let tern8 = |ws: &[&Lin], q: ActQuant| {
                q == ActQuant::Int8 && ws.iter().all(|w| matches!(w, Lin::Ternary(_)))
            };
            // A norm whose only consumers are ternary matmuls with INT8 activations is fused
            // with the quantization (`rmsnorm_quant_int8`): same bits, one dispatch, no f32 row.
            let mut qd = tern8(&[&l.wq, &l.wk, &l.wv], m.acts.qkv);
            if qd {
                ops::rmsnorm_quant_int8(ctx, &mut p, &s.x0, &l.attn_norm, d, eps, &act_d)?;
            } else {
                ops::rmsnorm(ctx, &mut p, &s.x0, &l.attn_norm, &s.a, d, n, eps)?;
            }
            lin(&mut p, &l.wq, &s.a, n, m.acts.qkv, &act_d, &mut qd, &s.q)?;
            lin(&mut p, &l.wk, &s.a, n, m.acts.qkv, &act_d, &mut qd, &s.k)?;
            lin(&mut p, &l.wv, &s.a, n, m.acts.qkv, &act_d, &mut qd, &s.v)?;
            let rd = u64::from(hp.rope_dim);
            ops::rope_with_table(ctx, &mut p, &s.q, &s.rope, nh, hd, rd, n, hp.rope_neox)?;
            ops::rope_with_table(ctx, &mut p, &s.k, &s.rope, nkv, hd, rd, n, hp.rope_neox)?;
            attn::kv_store(ctx, &mut p, &s.step, &s.k, kc, n, kv_dim, self.n_ctx)?;
            attn::kv_store(ctx, &mut p, &s.step, &s.v, vc, n, kv_dim, self.n_ctx)?;
            let scale = 1.0 / (hd as f32).sqrt();
            attn::attention(
                ctx, &mut p, &s.step, &s.q, kc, vc, &s.o, n, nh, nkv, hd, self.n_ctx, scale,
            )?;
            let mut qd = false;
            let o_in = match &l.attn_sub_norm {
                Some(w) if tern8(&[&l.wo], m.acts.out) => {
                    ops::rmsnorm_quant_int8(ctx, &mut p, &s.o, w, q_dim, eps, &act_q)?;
                    qd = true;
                    &s.o2
                }
                Some(w) => {
                    ops::rmsnorm(ctx, &mut p, &s.o, w, &s.o2, q_dim, n, eps)?;
                    &s.o2
                }
                None => &s.o,
            };
            lin(&mut p, &l.wo, o_in, n, m.acts.out, &act_q, &mut qd, &s.proj)?;
            ops::elementwise(ctx, &mut p, EltOp::Add, &s.x0, &s.proj, &s.x1, n * d)?;

            let mut qd = tern8(&[&l.gate, &l.up], m.acts.gate_up);
            if qd {
                ops::rmsnorm_quant_int8(ctx, &mut p, &s.x1, &l.ffn_norm, d, eps, &act_d)?;
            } else {
                ops::rmsnorm(ctx, &mut p, &s.x1, &l.ffn_norm, &s.a, d, n, eps)?;
            }
            lin(
                &mut p,
                &l.gate,
                &s.a,
                n,
                m.acts.gate_up,
                &act_d,
                &mut qd,
                &s.g,
            )?;
            lin(
                &mut p,
                &l.up,
                &s.a,
                n,
                m.acts.gate_up,
                &act_d,
                &mut qd,
                &s.u,
            )?;
            let op = match hp.ffn_act {
                FfnAct::Silu => EltOp::SwiGlu,
                FfnAct::Relu2 => EltOp::Relu2Glu,
            };
            ops::elementwise(ctx, &mut p, op, &s.g, &s.u, &s.h, n * ff)?;
            let mut qd = false;
            let d_in = match &l.ffn_sub_norm {
                Some(w) if tern8(&[&l.down], m.acts.down) => {
                    ops::rmsnorm_quant_int8(ctx, &mut p, &s.h, w, ff, eps, &act_f)?;
                    qd = true;
                    &s.h2
                }
                Some(w) => {
                    ops::rmsnorm(ctx, &mut p, &s.h, w, &s.h2, ff, n, eps)?;
                    &s.h2
                }
                None => &s.h,
            };
            lin(
                &mut p,
                &l.down,
                d_in,
                n,
                m.acts.down,
                &act_f,
                &mut qd,
                &s.proj,
            )?;
            ops::elementwise(ctx, &mut p, EltOp::Add, &s.x1, &s.proj, &s.x0, n * d)?;
        }
        let mut qd = false;
        match wanted {
            Wanted::Score => {
                ops::rmsnorm(ctx, &mut p, &s.x0, &m.output_norm, &s.a, d, n, eps)?;
                let head = match &m.head {
                    Lin::Ggml(gw) => crate::cce::Head::Ggml(gw),
                    Lin::Float(fw) => crate::cce::Head::Float(fw),
                    _ => {
                        return Err(GpuError::Unsupported {
                            adapter: ctx.info.name.clone(),
                            detail: "GPU scoring needs a float or ggml head resident on the GPU \
                                     (not ternary, not decoded just in time)"
                                .into(),
                        })
                    }
                };
                crate::cce::score(ctx, &mut p, &s.a, n, head, &s.targets, &s.logprobs)?;
            }
            Wanted::All => {
                ops::rmsnorm(ctx, &mut p, &s.x0, &m.output_norm, &s.a, d, n, eps)?;
                lin(
                    &mut p,
                    &m.head,
                    &s.a,
                    n,
                    ActQuant::None,
                    &act_d,
                    &mut qd,
                    &s.logits,
                )?;
            }
            Wanted::Last | Wanted::Argmax => {
                p.record_copy(&s.x0, (n - 1) * d * 4, &s.x1, 0, d * 4);
                ops::rmsnorm(ctx, &mut p, &s.x1, &m.output_norm, &s.last, d, 1, eps)?;
                let one = act_d.prefix(1)?;
                lin(
                    &mut p,
                    &m.head,
                    &s.last,
                    1,
                    ActQuant::None,
                    &one,
                    &mut qd,
                    &s.logits,
                )?;
                if wanted == Wanted::Argmax {
                    ops::argmax(ctx, &mut p, &s.logits, u64::from(hp.n_vocab), 1, &s.argmax)?;
                }
            }
        }
        Ok(p)
    }

    /// Write a step's inputs: embeddings of `tokens` into `x0`, the RoPE table of positions
    /// `len()..`, and the step parameters.
    fn write_inputs(&mut self, tokens: &[u32]) -> Result<()> {
        let m = Arc::clone(&self.model);
        let ctx = &*m.ctx;
        let hp = &m.hp;
        let n = tokens.len() as u64;
        match &m.embed {
            Some(e) => {
                let mut emb = Vec::with_capacity(tokens.len() * hp.n_embd as usize);
                for &t in tokens {
                    e.row(u64::from(t), &mut emb)?;
                }
                ctx.queue
                    .write_buffer(&self.s.x0, 0, bytemuck::cast_slice(&emb));
            }
            None => {
                if let Some(&bad) = tokens.iter().find(|&&t| t >= hp.n_vocab) {
                    return Err(GpuError::shape(
                        "embedding",
                        format!("token {bad} outside the vocabulary (0..{})", hp.n_vocab),
                    ));
                }
                ctx.queue
                    .write_buffer(&self.s.ids, 0, bytemuck::cast_slice(tokens));
            }
        }
        let positions: Vec<u64> = (self.len..self.len + n).collect();
        let table = ops::rope_table(&positions, u64::from(hp.rope_dim), hp.rope_theta);
        if !table.is_empty() {
            ctx.queue.write_buffer(&self.s.rope, 0, &table);
        }
        let sp = StepParams {
            p0: self.len as u32, // ok: len < n_ctx, which fits a binding
            n_tokens: n as u32,  // ok: n ≤ max_batch, checked by the caller
            _pad: [0; 2],
        };
        ctx.queue
            .write_buffer(&self.s.step, 0, bytemuck::bytes_of(&sp));
        Ok(())
    }

    /// Run `tokens` at positions `len()..` and return logits as `wanted` says (`Argmax`: a
    /// one-element vector holding the token id as f32 bits — use [`GpuSession::step_argmax`]).
    fn run(&mut self, tokens: &[u32], wanted: Wanted) -> Result<Vec<f32>> {
        let n = tokens.len() as u64;
        if n == 0 {
            return Err(GpuError::shape("eval", "no tokens"));
        }
        if n > self.max_batch {
            return Err(GpuError::shape(
                "eval",
                format!(
                    "{n} tokens in one batch, the session runs at most {}",
                    self.max_batch
                ),
            ));
        }
        if self.len + n > self.n_ctx {
            return Err(GpuError::shape(
                "eval",
                format!(
                    "{} positions needed, the KV cache holds {}",
                    self.len + n,
                    self.n_ctx
                ),
            ));
        }
        if wanted == Wanted::All && n > self.all_rows() {
            return Err(GpuError::shape(
                "eval",
                "too many rows of logits for one batch",
            ));
        }
        self.plan_for(n, wanted)?;
        self.write_inputs(tokens)?;
        let m = Arc::clone(&self.model);
        let ctx = &*m.ctx;
        let hp = &m.hp;
        let plan = self
            .plans
            .get(&(n, wanted))
            .ok_or_else(|| GpuError::shape("eval", "plan missing"))?;
        let mut enc = ctx.encoder();
        plan.encode(&mut enc);
        let (src, bytes) = match wanted {
            Wanted::Score => (&self.s.logprobs, n * 4),
            Wanted::All => (&self.s.logits, n * u64::from(hp.n_vocab) * 4),
            Wanted::Last => (&self.s.logits, u64::from(hp.n_vocab) * 4),
            Wanted::Argmax => (&self.s.argmax, 4),
        };
        enc.copy_buffer_to_buffer(src, 0, &self.s.staging, 0, bytes);
        ctx.submit_wait(enc)?;
        let out = read_mapped(ctx, &self.s.staging, bytes)?;
        self.len += n;
        Ok(out)
    }

    /// Run `tokens` (any number, in batches of at most `max_batch`) and return the last
    /// token's logits.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        for c in tokens.chunks(self.max_batch.max(1) as usize) {
            out = self.run(c, Wanted::Last)?;
        }
        if tokens.is_empty() {
            return Err(GpuError::shape("eval", "no tokens"));
        }
        Ok(out)
    }

    /// Run `tokens` and return every token's logits, `[n][n_vocab]`.
    pub fn eval_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(GpuError::shape("eval", "no tokens"));
        }
        let b = self.all_rows().min(self.max_batch).max(1) as usize;
        let mut out = Vec::with_capacity(tokens.len() * self.model.hp.n_vocab as usize);
        for c in tokens.chunks(b) {
            out.extend(self.run(c, Wanted::All)?);
        }
        Ok(out)
    }

    /// `log p(tokens[i+1] | tokens[..=i])` for `i` in `0..n-1` from an empty cache, through the
    /// fused Cut-Cross-Entropy kernel (no logits materialized; the session's cache holds
    /// `tokens[..n-1]` afterwards).
    pub fn score(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let n_in = tokens.len().saturating_sub(1);
        self.truncate(0);
        let mut out = Vec::with_capacity(n_in);
        let b = self.max_batch.max(1) as usize;
        let mut start = 0;
        while start < n_in {
            let end = (start + b).min(n_in);
            let (Some(inputs), Some(targets)) =
                (tokens.get(start..end), tokens.get(start + 1..end + 1))
            else {
                break;
            };
            if let Some(&bad) = targets.iter().find(|&&t| t >= self.model.hp.n_vocab) {
                return Err(GpuError::shape(
                    "score",
                    format!("token {bad} outside the vocabulary"),
                ));
            }
            self.model
                .ctx
                .queue
                .write_buffer(&self.s.targets, 0, bytemuck::cast_slice(targets));
            out.extend(self.run(inputs, Wanted::Score)?);
            start = end;
        }
        Ok(out)
    }

    /// Run one token and return the greedy next token, argmax taken on the GPU (4 bytes read
    /// back instead of the logits).
    pub fn step_argmax(&mut self, token: u32) -> Result<u32> {
        let v = self.run(&[token], Wanted::Argmax)?;
        Ok(v.first().map(|x| x.to_bits()).unwrap_or(0))
    }

    /// Run one decode step of `token` with a GPU timestamp around every dispatch and return,
    /// per kernel label, (dispatches, total µs), largest first. Needs `TIMESTAMP_QUERY`.
    pub fn profile_decode_step(&mut self, token: u32) -> Result<Vec<(String, u32, f64)>> {
        let m = Arc::clone(&self.model);
        let ctx = &*m.ctx;
        if !ctx.info.timestamp_query {
            return Err(GpuError::Unsupported {
                adapter: ctx.info.name.clone(),
                detail: "no TIMESTAMP_QUERY feature: per-kernel timings are unavailable".into(),
            });
        }
        if self.len + 1 > self.n_ctx {
            return Err(GpuError::shape("profile", "the KV cache is full"));
        }
        self.plan_for(1, Wanted::Last)?;
        self.write_inputs(&[token])?;
        let plan = self
            .plans
            .get(&(1, Wanted::Last))
            .ok_or_else(|| GpuError::shape("profile", "plan missing"))?;
        let keys = plan.keys();
        let n_q = u32::try_from(keys.len() * 2)
            .map_err(|_| GpuError::shape("profile", "too many dispatches"))?;
        let qs = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: n_q,
        });
        let bytes = u64::from(n_q) * 8;
        let resolve = ctx.create_buffer(
            "timestamps",
            bytes,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )?;
        let staging = ctx.create_buffer(
            "timestamps readback",
            bytes,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        )?;
        let mut enc = ctx.encoder();
        plan.encode_timed(&mut enc, &qs);
        enc.resolve_query_set(&qs, 0..n_q, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &staging, 0, bytes);
        ctx.submit_wait(enc)?;
        let raw = read_mapped(ctx, &staging, bytes)?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec::<f32, u64>(&raw);
        let period = f64::from(ctx.queue.get_timestamp_period()); // ns per tick
        let mut by: HashMap<String, (u32, f64)> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            let (a, b) = (ticks.get(2 * i), ticks.get(2 * i + 1));
            if let (Some(&a), Some(&b)) = (a, b) {
                let e = by.entry(k.to_string()).or_default();
                e.0 += 1;
                e.1 += b.saturating_sub(a) as f64 * period / 1000.0;
            }
        }
        self.len += 1;
        let mut v: Vec<_> = by.into_iter().map(|(k, (c, us))| (k, c, us)).collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2));
        Ok(v)
    }

    /// Encode `iters` decode steps of one token each without reading anything back (for
    /// benchmarks: the token and position inputs are those of the current state; the KV cache
    /// length advances by `iters`). Waits for the GPU at the end.
    pub fn bench_decode(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.step_argmax(0)?;
        }
        Ok(())
    }
}

/// Float parts of a NeuZip matrix decoded into `bufs` (one per chunk).
fn parts_over(
    nz: &NeuzipTensor,
    bufs: &[wgpu::Buffer],
    cols: u64,
) -> Result<Vec<float_ops::FloatPart>> {
    Ok(nz
        .row_spans(cols)?
        .into_iter()
        .zip(bufs)
        .map(|((row0, rows, elem_offset), b)| float_ops::FloatPart {
            buffer: b.clone(),
            row0,
            rows,
            elem_offset,
        })
        .collect())
}

/// Map `staging` and read its first `bytes` as f32 (after a completed submission).
fn read_mapped(ctx: &GpuContext, staging: &wgpu::Buffer, bytes: u64) -> Result<Vec<f32>> {
    let slice = staging.slice(..bytes);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    let err = |e: String| GpuError::Readback {
        what: "logits".into(),
        detail: e,
    };
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| err(e.to_string()))?;
    rx.recv()
        .map_err(|e| err(e.to_string()))?
        .map_err(|e| err(e.to_string()))?;
    let out = {
        let view = slice.get_mapped_range().map_err(|e| err(e.to_string()))?;
        bytemuck::pod_collect_to_vec::<u8, f32>(&view)
    };
    staging.unmap();
    Ok(out)
}
