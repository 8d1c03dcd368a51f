//! The forward pass recorded into a [`Plan`], from small functions that read the layer's
//! [`LayerSpec`] (what it does: RoPE, activation; its sub-norms are the loaded `Layer`'s) and the
//! model's [`ActivationPlan`](crate::ActivationPlan): [`Graph::embed`], [`Graph::attention_block`],
//! [`Graph::ffn_block`], [`Graph::head`], with [`Graph::input`] (a linear's input as the plan
//! says: normed, quantized, fused) and [`Graph::linear`] (the matmul for the weight's storage;
//! both in `graph/linear.rs`).
//!
//! Buffers: `x0` holds the residual stream (embeddings first; ping-pong `x0 → x1 → x0` per
//! block), `a` a normed row, `q/k/v/o` attention, `g/h` the FFN (`g`: `[n][2 · n_ff]`, the
//! gate/up pairs side by side), `proj` a block's output.
//!
//! Decode fusions (issue 15; batches below `GEMM_MIN_TOKENS`, i.e. the GEMV path): a ternary
//! linear whose input is a fused norm + quantization computes that input in its GEMV's prologue
//! (no separate `rmsnorm_quant` dispatch; same bits); the attention output and FFN down
//! projections add their result into the residual stream in place (the GEMV's epilogue, no
//! `add` dispatch: the stream then stays in `x0`, `Graph::cur`); gate and up, loaded as one weight
//! of interleaved row pairs (`GateUp::Paired`), are one GEMV whose epilogue writes the GLU (no
//! second GEMV, no GLU dispatch). Each is the same f32 operation as the pass it replaces, so the
//! results do not change.

use crate::device::context::GpuContext;
use crate::device::pipeline::EltOp;
use crate::device::plan::{Plan, Recorder};
use crate::error::{GpuError, Result};
use crate::kernels::attention::KvRead;
use crate::kernels::sparse::SPARSE_MAX_DENSITY;
use crate::kernels::{self, minicache, A48Quant, ActInt8, GgmlNorm, KvLayout};
use crate::kernels::{Epilogue, HeadRows, NormPrologue, QkvShape, GEMM_MIN_TOKENS};
use crate::model::activation::{BlockInputs, Linear, LinearInput, Producer};
use crate::model::kv_cache::KvRole;
use crate::model::scratch::Scratch;
use crate::model::{GateUp, GpuModel, KvCache, Layer, Lin, Qkv};
use crate::tuning::{FuseNorm, GpuTuning};
use tern_format::spec::Activation;

mod head;
mod linear;

/// Under `mode` ([`GpuTuning::fuse_norm`], where the modes and their measurements are
/// described): whether the ternary GEMVs of linear `l` (its input a4.8's TopK input or not)
/// compute their input's RMSNorm + quantization themselves (the decode GEMV's fused prologue,
/// `ternary_gemv_dec_norm.wgsl`; same bits), and whether the wide kernel may stand in where the
/// decode kernel does not take the shape.
fn fuse_norm_for(mode: FuseNorm, l: Linear, topk: bool) -> (bool, bool) {
    match mode {
        FuseNorm::Off => (false, false),
        FuseNorm::Wide => (true, !topk),
        FuseNorm::NoTopk => (!topk, false),
        FuseNorm::Attn => (matches!(l, Linear::Qkv | Linear::AttnOut), false),
        FuseNorm::Qkv => (l == Linear::Qkv, false),
        FuseNorm::All => (true, false),
    }
}

/// Positions up to which a session runs plans recorded with unsplit attention (no combine
/// dispatch per layer; [`GpuTuning::attn_short`] overrides, 0 = always split as before). One
/// workgroup per (kv head, head group) then walks all keys in tiles of 64: over a short context
/// that is one or two tiles, about the latency of one split chunk, without the combine pass.
/// Past it the session records (once) and runs the split plan. Measured on an H100:
/// docs/measurements.md (issue 15, h-rope).
pub const SHORT_ATTENTION_KEYS: u64 = 128;

/// [`SHORT_ATTENTION_KEYS`] or its override in `t`.
pub(crate) fn short_attention_keys(t: &GpuTuning) -> u64 {
    t.attn_short.unwrap_or(SHORT_ATTENTION_KEYS)
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
    /// The last token's sampling candidates ([`crate::kernels::sample_candidates`]): the
    /// engine's sampler finishes on the host from a few hundred bytes; the logits stay on the GPU.
    Sample,
    /// `log p(target[i])` of every token through the fused Cut-Cross-Entropy kernel: no logits.
    Score,
}

/// A linear layer's input as recorded: f32 rows, INT8 rows, or both (when weights of both
/// kinds share the input).
#[derive(Clone, Copy)]
struct Input<'a> {
    f32: Option<&'a wgpu::Buffer>,
    int8: Option<&'a ActInt8>,
    /// The plan marks the input sparse (a4.8): its GEMV may skip zero activations.
    sparse: bool,
    /// The ternary GEMVs compute `int8` themselves from these rows (the fused prologue); `int8`
    /// then only describes the scheme, its buffers are not written. With neither `f32` nor
    /// `int8`: ggml GEMVs whose input is the RMSNorm of these rows (their prologue).
    norm: Option<NormPrologue<'a>>,
}

/// A scratch activation buffer seen as INT8 and as INT4 (same buffers).
#[derive(Clone, Copy)]
struct Acts<'a> {
    i8: &'a ActInt8,
    i4: &'a ActInt8,
}

/// One recording: the model, the session's buffers, the batch size.
struct Graph<'a> {
    m: &'a GpuModel,
    ctx: &'a GpuContext,
    s: &'a Scratch,
    kv: &'a KvCache,
    /// Tokens in the batch.
    n: u64,
    /// INT8 / INT4 views of the scratch for this batch: model width, attention width, FFN width.
    act_d: Acts<'a>,
    act_q: Acts<'a>,
    act_f: Acts<'a>,
    /// Just-in-time decodes recorded so far (they alternate between scratch sets).
    jit_turn: usize,
    /// A plan for short contexts (every key within [`SHORT_ATTENTION_KEYS`]-ish): attention
    /// unsplit, no combine dispatch.
    short: bool,
    /// The residual stream (`x0` or `x1`) and the other one.
    cur: &'a wgpu::Buffer,
    other: &'a wgpu::Buffer,
    p: Plan,
}

/// Record the whole pass of `m` for a batch of `n` tokens producing `wanted`, over a session's
/// scratch `s` and cache `kv`, as consecutive segments of `layers_per_segment` layers each (0: one
/// segment; the embedding goes with the first, the head with the last). The session submits
/// segments separately so that it can stop between them (cancellation); they communicate only
/// through the scratch buffers and the KV cache, so running them one after the other equals
/// running their concatenation.
pub(crate) fn record(
    m: &GpuModel,
    s: &Scratch,
    kv: &KvCache,
    n: u64,
    wanted: Wanted,
    layers_per_segment: usize,
    short: bool,
) -> Result<Vec<Plan>> {
    let nt = u32::try_from(n).map_err(|_| GpuError::invalid("plan", "batch too large"))?;
    let (act_d, act_q, act_f) = (
        s.act_embd.prefix(nt)?,
        s.act_q.prefix(nt)?,
        s.act_ff.prefix(nt)?,
    );
    let (act_d4, act_q4, act_f4) = (act_d.as_int4()?, act_q.as_int4()?, act_f.as_int4()?);
    let mut g = Graph {
        m,
        ctx: &m.ctx,
        s,
        kv,
        n,
        act_d: Acts {
            i8: &act_d,
            i4: &act_d4,
        },
        act_q: Acts {
            i8: &act_q,
            i4: &act_q4,
        },
        act_f: Acts {
            i8: &act_f,
            i4: &act_f4,
        },
        jit_turn: 0,
        short,
        cur: &s.x0,
        other: &s.x1,
        p: Plan::new(),
    };
    let mut segments = Vec::new();
    g.embed()?;
    for (li, layer) in m.layers.iter().enumerate() {
        if layers_per_segment > 0 && li > 0 && li % layers_per_segment == 0 {
            segments.push(std::mem::take(&mut g.p));
        }
        let inputs =
            m.act_plan.layers.get(li).ok_or_else(|| {
                GpuError::internal("plan", format!("no activation plan for {li}"))
            })?;
        g.attention_block(li, layer, inputs)?;
        g.ffn_block(li, layer, inputs)?;
    }
    g.head(wanted)?;
    segments.push(g.p);
    Ok(segments)
}

impl<'a> Graph<'a> {
    fn eps(&self) -> f32 {
        self.m.spec.eps
    }

    /// `x0` ← the batch's token embeddings: looked up here in the tied head, or already written
    /// by the host (`GpuSession::write_inputs`).
    fn embed(&mut self) -> Result<()> {
        self.embed_rows()?;
        // Gemma: x ← x · embed_scale (the same f32 product as the CPU's)
        if let Some(scale) = self.m.spec.embed_scale {
            let nd = self.n * u64::from(self.m.spec.n_embd);
            kernels::bias_scale(self.ctx, &mut self.p, &self.s.x0, None, scale, nd)?;
        }
        Ok(())
    }

    /// The embeddings alone (see [`Graph::embed`]).
    fn embed_rows(&mut self) -> Result<()> {
        if self.m.embed.is_some() {
            return Ok(());
        }
        let table = crate::model::embed_table(&self.m.head, &self.m.jit).ok_or_else(|| {
            GpuError::internal("plan", "GPU embedding needs a float, ggml or NeuZip head")
        })?;
        kernels::embed_rows(
            self.ctx,
            &mut self.p,
            &table,
            &self.s.ids,
            self.n,
            &self.s.x0,
        )
    }

    /// `x1` ← `x0` + attention(`x0`), writing this batch's keys and values into the cache:
    /// layer `li` as its spec says.
    fn attention_block(&mut self, li: usize, l: &'a Layer, plan: &BlockInputs) -> Result<()> {
        let (ctx, s, n, ls) = (self.ctx, self.s, self.n, self.m.spec.layer(li)?);
        let (d, nh, nkv, hd) = (
            u64::from(self.m.spec.n_embd),
            u64::from(ls.attn.n_head),
            u64::from(ls.attn.n_head_kv),
            u64::from(ls.attn.head_dim),
        );
        let (q_dim, rd, neox) = (nh * hd, u64::from(ls.rope.dim), ls.rope.neox());
        let kv_dim = nkv * hd;
        let table = s.rope_table(self.m.rope_table_of(li)?)?;
        let eps = self.eps();
        let window = ls.attn.sliding_window.is_some();
        let ws: Vec<&Lin> = match &l.qkv {
            Qkv::Fused(w) => vec![w],
            Qkv::Split { wq, wk, wv } => vec![wq, wk, wv],
        };
        let (cur, act_d) = (self.cur, self.act_d);
        let input = self.input(cur, Some(&l.attn_norm), d, &plan.qkv, &s.a, act_d, &ws)?;
        let rope = |p: &mut Plan| -> Result<()> {
            kernels::rope_with_table(ctx, p, &s.q, table, nh, hd, rd, n, neox)?;
            kernels::rope_with_table(ctx, p, &s.k, table, nkv, hd, rd, n, neox)
        };
        // QK-norm of the planar q and k (Qwen 3, Gemma 3), before RoPE
        let qk_norm_planar = |p: &mut Plan| -> Result<()> {
            if let (Some(wq), Some(wk)) = (&l.q_norm, &l.k_norm) {
                let (rq, rk) = (HeadRows::planar(hd, nh, n), HeadRows::planar(hd, nkv, n));
                kernels::head_rmsnorm(ctx, p, &s.q, wq, rq, eps)?;
                kernels::head_rmsnorm(ctx, p, &s.k, wk, rk, eps)?;
            }
            Ok(())
        };
        match &l.qkv {
            Qkv::Split { wq, wk, wv } => {
                self.linear(wq, input, n, &s.q)?;
                self.linear(wk, input, n, &s.k)?;
                self.linear(wv, input, n, &s.v)?;
                let p = &mut self.p;
                // the projection biases (Qwen 2), after the projection, before RoPE
                if let Some(b) = &l.bias {
                    kernels::bias_scale(ctx, p, &s.q, Some((&b.q, q_dim)), 1.0, n * q_dim)?;
                    kernels::bias_scale(ctx, p, &s.k, Some((&b.k, kv_dim)), 1.0, n * kv_dim)?;
                    kernels::bias_scale(ctx, p, &s.v, Some((&b.v, kv_dim)), 1.0, n * kv_dim)?;
                }
                qk_norm_planar(p)?;
                rope(p)?;
                self.kv_attention(li, n, None)?;
            }
            Qkv::Fused(w) => {
                // one GEMV/GEMM over [Wq; Wk; Wv] into `g` (free until the FFN): [n][q | k | v]
                let qkv = &s.g;
                self.linear(w, input, n, qkv)?;
                let row = q_dim + 2 * kv_dim;
                if let Some(b) = &l.bias {
                    let p = &mut self.p;
                    kernels::bias_scale(ctx, p, qkv, Some((&b.stacked, row)), 1.0, n * row)?;
                }
                if let (Some(wq), Some(wk)) = (&l.q_norm, &l.k_norm) {
                    // the heads of the stacked rows: queries from word 0, keys from q_dim
                    let rows = |n_heads, offset| HeadRows {
                        head_dim: hd,
                        n_heads,
                        n_tokens: n,
                        row_stride: row,
                        offset,
                    };
                    let p = &mut self.p;
                    kernels::head_rmsnorm(ctx, p, qkv, wq, rows(nh, 0), eps)?;
                    kernels::head_rmsnorm(ctx, p, qkv, wk, rows(nkv, q_dim), eps)?;
                }
                let (cache, role) = self.kv.layer(li)?;
                let layout = self.kv.layout();
                let p = &mut self.p;
                let caches = (&cache.k, &cache.v);
                let fuse = match n {
                    1 => kernels::rope_kv_fuses(layout),
                    // a batch: when the prefill attention reads the queries in the stacked rows
                    // (not with a sliding window: the prefill kernel does not take one)
                    _ => {
                        let prefill = self.m.tuning.attn_prefill;
                        !window
                            && kernels::rope_kv_fuses_batch(layout, n)
                            && kernels::attention::prefill_takes(
                                ctx, layout, caches, n, nh, prefill,
                            )
                    }
                };
                if matches!(role, KvRole::Own) && fuse {
                    // rows [q | k | v]: RoPE and the store fused, the queries rotated in place
                    let shape = QkvShape {
                        n_head: nh,
                        rope_dim: rd,
                        neox,
                    };
                    kernels::rope_kv_store(ctx, p, layout, shape, &s.step, qkv, table, caches, n)?;
                    self.kv_attention(li, n, Some(qkv))?;
                } else {
                    kernels::qkv_split(ctx, p, qkv, (q_dim, kv_dim), (&s.q, &s.k, &s.v), n)?;
                    rope(p)?;
                    self.kv_attention(li, n, None)?;
                }
            }
        }
        let sub = l.attn_sub_norm.as_ref();
        let wo = [&l.wo];
        let input = self.input(&s.o, sub, q_dim, &plan.attn_out, &s.o2, self.act_q, &wo)?;
        let post = l.post_attn_norm.as_ref();
        self.residual(&l.wo, input, plan.attn_out.sparse, post)
    }

    /// The residual stream ← itself + `w · input`: in place through the GEMV's epilogue where it
    /// fuses, else into `proj` and an add into the other stream buffer.
    /// With `post` (Gemma 3's post-attention / post-FFN norm): the stream ← itself +
    /// `RMSNorm(w · input; post)` (the normed block output in `a`, free by then).
    fn residual(
        &mut self,
        w: &Lin,
        input: Input<'_>,
        sparse: bool,
        post: Option<&wgpu::Buffer>,
    ) -> Result<()> {
        let (n, d) = (self.n, u64::from(self.m.spec.n_embd));
        if post.is_none() && self.epilogue_fuses(w, sparse) {
            return self.linear_epi(w, input, n, self.cur, Epilogue::Add);
        }
        let (ctx, s, eps) = (self.ctx, self.s, self.eps());
        self.linear(w, input, n, &s.proj)?;
        let out = match post {
            Some(wn) => {
                kernels::rmsnorm(ctx, &mut self.p, &s.proj, wn, &s.a, d, n, eps)?;
                &s.a
            }
            None => &s.proj,
        };
        let (cur, other) = (self.cur, self.other);
        kernels::elementwise(ctx, &mut self.p, EltOp::Add, cur, out, other, n * d)?;
        (self.cur, self.other) = (other, cur);
        Ok(())
    }

    /// The KV part of layer `li`'s attention block: store this batch's keys and values (`s.k`,
    /// `s.v`, after RoPE) in the cache's format and attend over the cache into `s.o` (`stored`:
    /// a layer of its own whose rows `rope_kv_store` stored already, its queries there). MiniCache
    /// pairs: the first layer keeps its rows for the merge and attends over the pair's merged
    /// past plus its own rows; the second merges the pair, stores the directions, attends.
    fn kv_attention(&mut self, li: usize, n: u64, stored: Option<&wgpu::Buffer>) -> Result<()> {
        let (ctx, s, attn) = (self.ctx, self.s, &self.m.spec.layer(li)?.attn);
        let (nh, hd) = (u64::from(attn.n_head), u64::from(attn.head_dim));
        let window = attn.sliding_window.map(u64::from);
        let p = &mut self.p;
        let (cache, role) = self.kv.layer(li)?;
        let scale = 1.0 / (hd as f32).sqrt();
        let (k, v, o, step) = (&cache.k, &cache.v, &s.o, &s.step);
        let split = self.short.then_some(1);
        let prefill = self.m.tuning.attn_prefill;
        // queries left in the stacked [n][q | k | v] rows (`stored`) are that far apart
        let q_row = stored.map(|_| nh * hd + 2 * self.kv.row_values());
        let attend = |p: &mut Plan, q: &wgpu::Buffer, l: &KvLayout, read: KvRead| {
            let part = &s.attn_partials;
            kernels::attention::attention_into(
                ctx, p, l, step, q, k, v, o, n, nh, scale, part, read, split, q_row, prefill,
                window,
            )
        };
        let mc = self.kv.mc_scratch();
        // MiniCache: layer a's queries, keys and values side by side (its rows from `pend`)
        let q_words = n * nh * hd;
        let (pend, kv_words) = (q_words, n * self.kv.row_values());
        match (role, mc, self.kv.spec().minicache) {
            (KvRole::Own, ..) => {
                let l = self.kv.layout();
                if let Some(q) = stored {
                    return attend(p, q, l, KvRead::Own);
                }
                kernels::kv_store(ctx, p, l, step, &s.k, k, n, true)?;
                kernels::kv_store(ctx, p, l, step, &s.v, v, n, false)?;
                attend(p, &s.q, l, KvRead::Own)
            }
            (KvRole::First, Some(mc), Some(_)) => {
                p.record_copy(&s.q, 0, &mc.qkv, 0, q_words * 4);
                p.record_copy(&s.k, 0, &mc.qkv, pend * 4, kv_words * 4);
                p.record_copy(&s.v, 0, &mc.qkv, (pend + kv_words) * 4, kv_words * 4);
                attend(p, &mc.qkv, self.kv.pair_layout(), KvRead::First { pend })
            }
            (KvRole::Second, Some(mc), Some(m)) => {
                let l = self.kv.pair_layout();
                let tg = (m.t, m.gamma);
                let (ka, va) = ((&mc.qkv, pend), (&mc.qkv, pend + kv_words));
                minicache::merge(ctx, p, l, step, tg, ka, &s.k, &mc.dir_k, k, n, true)?;
                minicache::merge(ctx, p, l, step, tg, va, &s.v, &mc.dir_v, v, n, false)?;
                kernels::kv_store(ctx, p, l, step, &mc.dir_k, k, n, true)?;
                kernels::kv_store(ctx, p, l, step, &mc.dir_v, v, n, false)?;
                attend(p, &s.q, l, KvRead::Second)
            }
            _ => Err(GpuError::internal(
                "plan",
                "MiniCache layer without its pair",
            )),
        }
    }

    /// The stream ← itself + FFN(itself) (SwiGLU or ReLU² GLU, BitNet's sub-norm before `down`).
    /// Gate and up as one weight of row pairs (`GateUp::Paired`): at decode one GEMV whose
    /// epilogue writes the GLU into `h`; else one matmul into `g` (`[n][2 · n_ff]`, the pairs
    /// side by side) and the GLU over the pairs. As stored (`GateUp::Split`): the gate into `h`
    /// and the up GEMV folding the GLU into its store, or gate and up (into `h2`, free until the
    /// down projection's input) and the GLU pass.
    fn ffn_block(&mut self, li: usize, l: &'a Layer, plan: &BlockInputs) -> Result<()> {
        let (ctx, s, n, ls) = (self.ctx, self.s, self.n, self.m.spec.layer(li)?);
        let (d, ff) = (u64::from(self.m.spec.n_embd), u64::from(ls.ffn.n_ff));
        let gu = &plan.gate_up;
        // the GLU and the GEMV epilogue that computes it (none for GeGLU: a separate pass)
        let (op, epi) = match ls.ffn.act {
            Activation::Silu => (EltOp::SwiGlu, Some(Epilogue::SwiGlu)),
            Activation::Relu2 => (EltOp::Relu2Glu, Some(Epilogue::Relu2Glu)),
            Activation::GeluTanh => (EltOp::GeGlu, None),
        };
        let norm = Some(&l.ffn_norm);
        match &l.gate_up {
            GateUp::Paired(w) => {
                let input = self.input(self.cur, norm, d, gu, &s.a, self.act_d, &[w])?;
                if let (Some(epi), true) = (epi, self.epilogue_fuses(w, gu.sparse)) {
                    self.linear_epi(w, input, n, &s.h, epi)?;
                } else {
                    self.linear(w, input, n, &s.g)?;
                    kernels::glu_pairs(ctx, &mut self.p, op, &s.g, &s.h, n * ff)?;
                }
            }
            GateUp::Split { gate, up } => {
                let input = self.input(self.cur, norm, d, gu, &s.a, self.act_d, &[gate, up])?;
                if let (Some(epi), true) = (epi, self.epilogue_fuses(up, gu.sparse)) {
                    // the gate into h, then the up projection's GEMV folds the GLU into its store
                    self.linear(gate, input, n, &s.h)?;
                    self.linear_epi(up, input, n, &s.h, epi)?;
                } else {
                    self.linear(gate, input, n, &s.g)?;
                    self.linear(up, input, n, &s.h2)?;
                    kernels::elementwise(ctx, &mut self.p, op, &s.g, &s.h2, &s.h, n * ff)?;
                }
            }
        }
        let sub = l.ffn_sub_norm.as_ref();
        let down = [&l.down];
        let input = self.input(&s.h, sub, ff, &plan.down, &s.h2, self.act_f, &down)?;
        let post = l.post_ffn_norm.as_ref();
        self.residual(&l.down, input, plan.down.sparse, post)
    }
}
