//! The whole forward pass: llama family and BitNet b1.58 / a4.8, as the model's
//! [`ModelSpec`] (`tern_format::spec`) says, layer by layer; a spec needing a feature this pass
//! does not implement is refused at load ([`CPU_CAPS`]).
//!
//! ```text
//! h = Embed[token]
//! for each layer:
//!   a = RMSNorm(h; attn_norm)
//!   q, k, v = Wq·A(a), Wk·A(a), Wv·A(a)          A = activations.qkv quantizer (BitNet) or identity
//!   q, k = RoPE(q, k; pos)                        (the layer's RoPE: base, dims, pairing)
//!   cache[pos] = k, v
//!   o = softmax(q·Kᵀ/√d + causal) · V             GQA: n_head / n_head_kv query heads per kv head
//!   o = RMSNorm(o; attn_sub_norm)                 when the layer has sub-norms (BitNet)
//!   h = h + Wo·A_out(o)
//!   m = RMSNorm(h; ffn_norm)
//!   g = act(Wgate·A_gu(m)) ⊙ Wup·A_gu(m)          the layer's act: silu (llama) or relu² (BitNet)
//!   g = RMSNorm(g; ffn_sub_norm)                  when the layer has sub-norms (BitNet)
//!   h = h + Wdown·A_down(g)
//! logits = Wout · RMSNorm(h; output_norm)         Wout = Embed when tied
//! ```

use tern_format::spec::{Activation, Caps, Feature, QkNorm, RopeScaling, RopeSpec};
use tern_format::{ActQuant, ActivationScheme, Arch, HParams, ModelSpec, TensorView, TernFile};

use crate::error::{probe_alloc, ReferenceError, Result};
use crate::ggml_cpu;
use crate::kernels::{
    add_bias, attention, geglu, llama3_rope_factors, relu2_glu, rmsnorm, rope_ext, softcap, swiglu,
};
use crate::kv::{KvCache, Role};
use crate::kv_attn::{attention_tiled, AttnShape, Rotation};
use crate::matmul::{GgmlActivations, MatmulOptions, Matrix, NeuZipResidency};
use crate::par_map;

/// Which positions' logits (or hidden states) [`Model::forward`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsWanted {
    /// One row per input token.
    All,
    /// Only the last input token's row.
    Last,
    /// Nothing (prefill that only fills the cache).
    None,
}

/// Numerical options of the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardOptions {
    pub matmul: MatmulOptions,
    /// Round K and V through f16 when storing them in the cache, as llama.cpp's default f16 KV
    /// cache does. Off by default (the reference keeps f32).
    pub kv_f16: bool,
    /// Run RMSNorm, RoPE, attention and SwiGLU as llama.cpp's x86 CPU backend does, rounding for
    /// rounding ([`crate::ggml_cpu`]): flash attention (the tiled kernel for batches of ≥ 64
    /// tokens, the one-row kernel below that), libm angles built by repeated f32 products,
    /// double-accumulated norms, the vectorized `expf`. Off by default.
    pub llama_cpp_ops: bool,
}

impl ForwardOptions {
    /// llama.cpp's CPU numerics with its default settings (flash attention on, f16 KV cache),
    /// reproduced bit for bit on x86 for llama-family models with Q4_1 / Q8_0 weights: Q8_1 / Q8_0
    /// activation blocks with llama.cpp's dot-product lane order, an f16 KV cache and
    /// [`ForwardOptions::llama_cpp_ops`]. For bit-exactness feed at most 512 tokens per call
    /// (llama.cpp's micro-batch), and keep prompts and decode steps batched the way llama.cpp
    /// batches them (the attention kernel depends on the batch size).
    pub fn llama_cpp_like() -> Self {
        Self {
            matmul: MatmulOptions {
                ggml_activations: GgmlActivations::LlamaCpp,
                parallel: true,
            },
            kv_f16: true,
            llama_cpp_ops: true,
        }
    }
}

/// What this forward pass implements beyond the baseline layer (`tern_format::spec`): BitNet's
/// sub-norms and ReLU²; Gemma 3's GELU-tanh, post-norms, QK-norm, sliding window, per-layer RoPE,
/// embedding scale and logit soft-cap; Qwen 2's biases; linear and Llama 3 RoPE scaling.
/// [`Model::load`] refuses a spec that needs more (attention soft-cap, YaRN, ungated FFNs,
/// layers of different shapes).
pub const CPU_CAPS: Caps = Caps {
    backend: "CPU",
    features: &[
        Feature::SubNormAttn,
        Feature::SubNormFfn,
        Feature::Relu2,
        Feature::GeluTanh,
        Feature::PostAttnNorm,
        Feature::PostFfnNorm,
        Feature::QkNorm,
        Feature::SlidingWindow,
        Feature::AttnBias,
        Feature::RopeLinear,
        Feature::RopeLlama3,
        Feature::LayerRope,
        Feature::EmbedScale,
        Feature::FinalSoftcap,
    ],
};

struct Layer {
    attn_norm: Vec<f32>,
    wq: Matrix,
    wk: Matrix,
    wv: Matrix,
    wo: Matrix,
    attn_sub_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    gate: Matrix,
    up: Matrix,
    down: Matrix,
    ffn_sub_norm: Option<Vec<f32>>,
    /// Per-head query / key RMSNorm weights (`head_dim` each) when the layer has QK-norm.
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    /// Norms of the attention / FFN outputs before the residual adds (Gemma).
    post_attn_norm: Option<Vec<f32>>,
    post_ffn_norm: Option<Vec<f32>>,
    /// q, k, v projection biases (Qwen 2).
    bq: Option<Vec<f32>>,
    bk: Option<Vec<f32>>,
    bv: Option<Vec<f32>>,
    /// RoPE frequency divisors (`rope_dim / 2`): Llama 3 scaling.
    rope_factors: Option<Vec<f32>>,
}

/// A model loaded for the reference forward pass: weights validated against the hyperparameters
/// and held in memory as stored (ternary codes, ggml blocks, f16/bf16, NeuZip streams; only the
/// norm vectors and f32 tensors are f32), decoded per row tile when used
/// ([`Model::resident_bytes`]).
pub struct Model {
    /// What the forward pass does, per layer.
    spec: ModelSpec,
    hp: HParams,
    acts: ActivationScheme,
    tok_embd: Matrix,
    output_norm: Vec<f32>,
    /// `None` when the embeddings are tied.
    output: Option<Matrix>,
    layers: Vec<Layer>,
    opts: ForwardOptions,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("arch", &self.spec.arch)
            .field("hparams", &self.hp)
            .field("activations", &self.acts)
            .finish()
    }
}

fn u(v: u32) -> usize {
    v as usize
}

fn view<'a>(file: &'a TernFile, name: &str) -> Result<TensorView<'a>> {
    if file.index_of(name).is_none() {
        return Err(ReferenceError::MissingTensor { name: name.into() });
    }
    Ok(file.tensor(name)?)
}

fn check_shape(view: &TensorView<'_>, expected: &[u64]) -> Result<()> {
    if view.info.shape != expected {
        return Err(ReferenceError::TensorShape {
            name: view.info.name.clone(),
            expected: expected.to_vec(),
            found: view.info.shape.clone(),
        });
    }
    Ok(())
}

/// A 1-D float vector (norm weights): float encodings only.
fn load_vector(file: &TernFile, name: &str, n: usize) -> Result<Vec<f32>> {
    let v = view(file, name)?;
    check_shape(&v, &[n as u64])?;
    probe_alloc(&format!("tensor {name:?} decoded to f32"), n as u128 * 4)?;
    use tern_format::Encoding as E;
    match v.info.encoding {
        E::F32 | E::F16 | E::Bf16 | E::NeuZip { .. } => Ok(v.to_f32()?),
        ref e => Err(ReferenceError::UnsupportedEncoding {
            name: name.into(),
            encoding: e.name(),
            role: "a norm weight (float only)",
        }),
    }
}

fn load_matrix(
    file: &TernFile,
    name: &str,
    rows: usize,
    cols: usize,
    neuzip: NeuZipResidency,
) -> Result<Matrix> {
    let v = view(file, name)?;
    check_shape(&v, &[rows as u64, cols as u64])?;
    // The weights are kept as stored (a copy of the tensor's bytes); only an f32 tensor or a Q6_K
    // one with partial rows is decoded whole, to `rows × cols` f32. Make sure that much can be had.
    let widened = rows as u128
        * cols as u128
        * match v.info.encoding {
            tern_format::Encoding::F32 | tern_format::Encoding::Q6K => 4,
            tern_format::Encoding::NeuZip { dtype, .. } if neuzip == NeuZipResidency::Decoded => {
                dtype.size() as u128
            }
            _ => 0,
        };
    probe_alloc(
        &format!("tensor {name:?} held in memory"),
        (v.bytes.len() as u128).max(widened),
    )?;
    let m = Matrix::from_encoded_with(name, rows, cols, &v.info.encoding, v.bytes, neuzip)?;
    // The matrix holds its own copy: the mapped pages need not stay resident beside it.
    file.release_tensor(name);
    Ok(m)
}

impl KvCache {
    /// A cache for `model` holding `n_ctx` positions (all memory is allocated here). Defined here
    /// rather than in `kv.rs` so that `kv` does not import `model` (no import cycle).
    pub fn new(model: &Model, n_ctx: usize) -> Result<Self> {
        KvCache::for_hparams(model.hparams(), n_ctx)
    }

    /// A cache for `model` in the format `spec` (`tern_format::kv`).
    pub fn with_spec(model: &Model, n_ctx: usize, spec: &tern_format::kv::KvSpec) -> Result<Self> {
        KvCache::for_spec(model.hparams(), n_ctx, spec)
    }
}

impl Model {
    /// Load and validate every tensor the hyperparameters call for. The hyperparameters are first
    /// checked against each other and against the tensors present
    /// ([`tern_format::check_hparams`]), so nothing below is sized from an unchecked value.
    pub fn load(file: &TernFile) -> Result<Self> {
        Self::load_with(file, NeuZipResidency::Compressed)
    }

    /// [`Self::load`], with NeuZip matrices kept compressed or decoded at load as `neuzip` says
    /// (see [`Self::neuzip_decoded_bytes`] for what decoding costs).
    pub fn load_with(file: &TernFile, neuzip: NeuZipResidency) -> Result<Self> {
        Self::load_spec(file, ModelSpec::from_file(file)?, neuzip)
    }

    /// Load `file` as `spec` (the file's own, [`ModelSpec::from_file`]) says: refused before any
    /// tensor is read when the spec needs a feature this pass lacks ([`Model::check_spec`]).
    fn load_spec(file: &TernFile, spec: ModelSpec, neuzip: NeuZipResidency) -> Result<Self> {
        Self::check_spec(&spec)?;
        let meta = file.meta();
        let hp = meta.hparams.clone();
        let (n_embd, n_vocab) = (u(spec.n_embd), u(spec.n_vocab));
        let tok_embd = load_matrix(file, "token_embd.weight", n_vocab, n_embd, neuzip)?;
        let output_norm = load_vector(file, "output_norm.weight", n_embd)?;
        let output = if spec.tied_head {
            None
        } else {
            Some(load_matrix(file, "output.weight", n_vocab, n_embd, neuzip)?)
        };
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (l, ls) in spec.layers.iter().enumerate() {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            let (q_dim, kv_dim, n_ff) = (ls.q_dim() as usize, ls.kv_dim() as usize, u(ls.ffn.n_ff));
            let hd = u(ls.attn.head_dim);
            let opt = |on: bool, name: &str, len: usize| -> Result<Option<Vec<f32>>> {
                on.then(|| load_vector(file, name, len)).transpose()
            };
            let qk = ls.qk_norm == QkNorm::PerHeadRms;
            let b = ls.attn.bias;
            let bias = |s: &str| format!("blk.{l}.{s}.bias");
            let half = u(ls.rope.dim) / 2;
            let rope_factors = match ls.rope.scaling {
                RopeScaling::FreqFactors => Some(load_vector(file, "rope_freqs.weight", half)?),
                RopeScaling::Llama3 {
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_context,
                } => Some(llama3_rope_factors(
                    ls.rope.theta,
                    u(ls.rope.dim),
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_context,
                )),
                _ => None,
            };
            layers.push(Layer {
                q_norm: opt(qk, &n("attn_q_norm"), hd)?,
                k_norm: opt(qk, &n("attn_k_norm"), hd)?,
                post_attn_norm: opt(ls.norms.post_attn, &n("post_attention_norm"), n_embd)?,
                post_ffn_norm: opt(ls.norms.post_ffn, &n("post_ffw_norm"), n_embd)?,
                bq: opt(b.q, &bias("attn_q"), q_dim)?,
                bk: opt(b.k, &bias("attn_k"), kv_dim)?,
                bv: opt(b.v, &bias("attn_v"), kv_dim)?,
                rope_factors,
                attn_norm: load_vector(file, &n("attn_norm"), n_embd)?,
                wq: load_matrix(file, &n("attn_q"), q_dim, n_embd, neuzip)?,
                wk: load_matrix(file, &n("attn_k"), kv_dim, n_embd, neuzip)?,
                wv: load_matrix(file, &n("attn_v"), kv_dim, n_embd, neuzip)?,
                wo: load_matrix(file, &n("attn_output"), n_embd, q_dim, neuzip)?,
                attn_sub_norm: if ls.norms.sub_attn {
                    Some(load_vector(file, &n("attn_sub_norm"), q_dim)?)
                } else {
                    None
                },
                ffn_norm: load_vector(file, &n("ffn_norm"), n_embd)?,
                gate: load_matrix(file, &n("ffn_gate"), n_ff, n_embd, neuzip)?,
                up: load_matrix(file, &n("ffn_up"), n_ff, n_embd, neuzip)?,
                down: load_matrix(file, &n("ffn_down"), n_embd, n_ff, neuzip)?,
                ffn_sub_norm: if ls.norms.sub_ffn {
                    Some(load_vector(file, &n("ffn_sub_norm"), n_ff)?)
                } else {
                    None
                },
            });
        }
        Ok(Self {
            spec,
            hp,
            acts: meta.activations,
            tok_embd,
            output_norm,
            output,
            layers,
            opts: ForwardOptions::default(),
        })
    }

    /// Bytes the NeuZip matrices of `file` take once decoded (0 when there are none):
    /// what [`NeuZipResidency::Decoded`] adds to the resident weights, less their compressed size.
    pub fn neuzip_decoded_bytes(file: &TernFile) -> u64 {
        file.tensors()
            .iter()
            .filter(|t| t.shape.len() == 2)
            .filter_map(|t| match t.encoding {
                tern_format::Encoding::NeuZip { dtype, .. } => Some(
                    t.shape
                        .iter()
                        .product::<u64>()
                        .saturating_mul(dtype.size() as u64)
                        .saturating_sub(t.size),
                ),
                _ => None,
            })
            .fold(0u64, u64::saturating_add)
    }

    /// Bytes of weights held in memory (matrices as stored plus the f32 norm vectors); the KV
    /// cache and per-call scratch are not included.
    pub fn resident_bytes(&self) -> u64 {
        let vec = |v: &Vec<f32>| v.len() * 4;
        let opt = |v: &Option<Vec<f32>>| v.as_ref().map_or(0, vec);
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                vec(&l.attn_norm)
                    + vec(&l.ffn_norm)
                    + opt(&l.attn_sub_norm)
                    + opt(&l.ffn_sub_norm)
                    + [
                        &l.q_norm,
                        &l.k_norm,
                        &l.post_attn_norm,
                        &l.post_ffn_norm,
                        &l.bq,
                        &l.bk,
                        &l.bv,
                        &l.rope_factors,
                    ]
                    .iter()
                    .map(|v| opt(v))
                    .sum::<usize>()
                    + [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]
                        .iter()
                        .map(|m| m.resident_bytes())
                        .sum::<usize>()
            })
            .sum();
        (layers
            + self.tok_embd.resident_bytes()
            + vec(&self.output_norm)
            + self.output.as_ref().map_or(0, Matrix::resident_bytes)) as u64
    }

    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    pub fn arch(&self) -> Arch {
        self.spec.arch
    }

    /// What the forward pass does, per layer.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// `Ok` when this forward pass implements everything `spec` needs ([`CPU_CAPS`]), else the
    /// typed [`tern_format::FormatError::UnsupportedModel`] naming the first missing feature.
    /// [`Model::load`] calls it before reading any tensor.
    pub fn check_spec(spec: &ModelSpec) -> Result<()> {
        spec.check_supported(&CPU_CAPS)
            .map_err(|e| ReferenceError::Format(e.into()))
    }

    pub fn activations(&self) -> ActivationScheme {
        self.acts
    }

    pub fn options(&self) -> ForwardOptions {
        self.opts
    }

    pub fn set_options(&mut self, opts: ForwardOptions) {
        self.opts = opts;
    }

    /// Run `tokens` at positions `cache.len()..` (a batched prefill when there are several), append
    /// their keys and values to the cache, and return `[n, n_vocab]` logits for the positions
    /// `wanted` selects.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
    ) -> Result<Vec<f32>> {
        self.forward_opts(&self.opts, tokens, cache, wanted)
    }

    /// [`Model::forward`] with the numerical options `opts` instead of the model's own (so that
    /// several caches on one model can each use their own numerics).
    pub fn forward_opts(
        &self,
        opts: &ForwardOptions,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
    ) -> Result<Vec<f32>> {
        let hidden = self.forward_hidden_opts(opts, tokens, cache, wanted)?;
        self.logits_opts(opts, &hidden)
    }

    /// Like [`Model::forward`] but returns the final hidden states (after the output norm),
    /// `[n, n_embd]`, so a caller can score tokens without materializing all logits.
    pub fn forward_hidden(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
    ) -> Result<Vec<f32>> {
        self.forward_hidden_opts(&self.opts, tokens, cache, wanted)
    }

    /// [`Model::forward_hidden`] with the numerical options `opts`.
    pub fn forward_hidden_opts(
        &self,
        opts: &ForwardOptions,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
    ) -> Result<Vec<f32>> {
        Ok(self
            .forward_hidden_until(opts, tokens, cache, wanted, &|| false)?
            .unwrap_or_default())
    }

    /// [`Model::forward_opts`] that calls `stop` before every layer and before the head, and
    /// returns `Ok(None)` as soon as it says `true` (cancellation). A stopped or failed pass leaves
    /// the cache truncated to its length before the call (`KvCache::truncate`: a KIVI cache may
    /// keep less — the start of a block the pass quantized — and the caller re-runs the rest).
    pub fn forward_until(
        &self,
        opts: &ForwardOptions,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<f32>>> {
        let p0 = cache.len;
        let Some(hidden) = self.forward_hidden_until(opts, tokens, cache, wanted, stop)? else {
            return Ok(None);
        };
        if stop() {
            cache.truncate(p0);
            return Ok(None);
        }
        self.logits_opts(opts, &hidden).map(Some)
    }

    /// [`Model::forward_hidden_opts`] with the `stop` check of [`Model::forward_until`] before
    /// every layer.
    pub fn forward_hidden_until(
        &self,
        opts: &ForwardOptions,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<f32>>> {
        let p0 = cache.len;
        let r = self.forward_hidden_inner(opts, tokens, cache, wanted, stop);
        if r.is_err() {
            cache.truncate(p0);
        }
        r
    }

    fn forward_hidden_inner(
        &self,
        opts: &ForwardOptions,
        tokens: &[u32],
        cache: &mut KvCache,
        wanted: LogitsWanted,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<f32>>> {
        let hp = &self.hp;
        let (n_embd, n_ff) = (u(hp.n_embd), u(hp.n_ff));
        let (n_head, n_head_kv, hd) = (u(hp.n_head), u(hp.n_head_kv), u(hp.head_dim));
        let (q_dim, kv_dim) = (n_head * hd, n_head_kv * hd);
        let n = tokens.len();
        if n == 0 {
            return Err(ReferenceError::EmptyInput);
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t >= hp.n_vocab) {
            return Err(ReferenceError::TokenOutOfRange {
                token: bad,
                n_vocab: hp.n_vocab,
            });
        }
        if cache.n_layer != self.layers.len() || cache.row != kv_dim {
            return Err(ReferenceError::CacheMismatch {
                detail: format!(
                    "cache has {} layers × {} floats per position, model needs {} × {kv_dim}",
                    cache.n_layer,
                    cache.row,
                    self.layers.len()
                ),
            });
        }
        let p0 = cache.len;
        if p0 + n > cache.n_ctx {
            return Err(ReferenceError::ContextOverflow {
                needed: p0 + n,
                capacity: cache.n_ctx,
            });
        }
        let mm = &opts.matmul;
        let eps = self.spec.eps;

        let mut x = vec![0.0f32; n * n_embd];
        for (&t, row) in tokens.iter().zip(x.chunks_exact_mut(n_embd)) {
            self.tok_embd.row_f32(t as usize, row)?;
        }
        if let Some(s) = self.spec.embed_scale {
            x.iter_mut().for_each(|v| *v *= s);
        }
        let mut a = vec![0.0f32; n * n_embd];
        let mut q = vec![0.0f32; n * q_dim];
        let mut k = vec![0.0f32; n * kv_dim];
        let mut v = vec![0.0f32; n * kv_dim];
        let mut o = vec![0.0f32; n * q_dim];
        let mut o2 = vec![0.0f32; n * q_dim];
        let mut proj = vec![0.0f32; n * n_embd];
        let mut g = vec![0.0f32; n * n_ff];
        let mut up = vec![0.0f32; n * n_ff];
        let mut h = vec![0.0f32; n * n_ff];
        let mut h2 = vec![0.0f32; n * n_ff];
        let mut rope_cache = Vec::new();
        // MiniCache: the first layer of a pair's K/V rows, until the second layer merges them.
        let mut pending: Option<(Vec<f32>, Vec<f32>)> = None;

        for (li, layer) in self.layers.iter().enumerate() {
            if stop() {
                cache.truncate(p0);
                return Ok(None);
            }
            // what this layer does (its shape is the model's: `CPU_CAPS` has no `LayerShapes`)
            let ls = self.spec.layer(li)?;
            // attention
            self.norm(opts, &x, &layer.attn_norm, &mut a)?;
            layer.wq.matmul(&a, self.acts.qkv, mm, &mut q)?;
            layer.wk.matmul(&a, self.acts.qkv, mm, &mut k)?;
            layer.wv.matmul(&a, self.acts.qkv, mm, &mut v)?;
            for (t, b) in [
                (&mut q, &layer.bq),
                (&mut k, &layer.bk),
                (&mut v, &layer.bv),
            ] {
                if let Some(b) = b {
                    add_bias(t, b)?;
                }
            }
            // per-head RMSNorm of queries and keys (rows of head_dim), before RoPE
            for (t, w) in [(&mut q, &layer.q_norm), (&mut k, &layer.k_norm)] {
                if let Some(w) = w {
                    let src = t.clone();
                    self.norm(opts, &src, w, t)?;
                }
            }
            let factors = layer.rope_factors.as_deref();
            for i in 0..n {
                let pos = p0 + i;
                let qi = q.get_mut(i * q_dim..(i + 1) * q_dim).unwrap_or_default();
                self.rope(opts, &ls.rope, factors, qi, n_head, pos, &mut rope_cache)?;
                let ki = k.get_mut(i * kv_dim..(i + 1) * kv_dim).unwrap_or_default();
                self.rope(opts, &ls.rope, factors, ki, n_head_kv, pos, &mut rope_cache)?;
            }
            // the first key position query `pos` sees: its window's start on a sliding layer
            let window = ls.attn.sliding_window.map(u);
            let first_key = |pos: usize| window.map_or(0, |w| (pos + 1).saturating_sub(w));
            if window.is_some_and(|w| p0 + n > w) && !cache.is_plain_f32(li) {
                return Err(ReferenceError::shape(
                    "sliding-window attention",
                    "a compressed KV cache past the window is not implemented; use the f32 cache",
                ));
            }
            if !cache.is_plain_f32(li) {
                // A compressed cache (kv.rs): write (or merge) this layer's rows, then attend
                // reading the cache a tile at a time.
                let pend = compressed_attention(
                    cache,
                    li,
                    p0,
                    (&q, &k, &v),
                    pending.take(),
                    (n_head, n_head_kv, hd),
                    mm.parallel,
                    &mut o,
                )?;
                pending = pend;
            } else {
                let (kc, vc) = cache.layer_mut(li);
                for i in 0..n {
                    let pos = p0 + i;
                    let ki = k.get(i * kv_dim..(i + 1) * kv_dim).unwrap_or_default();
                    let vi = v.get(i * kv_dim..(i + 1) * kv_dim).unwrap_or_default();
                    let kd = kc
                        .get_mut(pos * kv_dim..(pos + 1) * kv_dim)
                        .unwrap_or_default();
                    store(kd, ki, opts.kv_f16);
                    let vd = vc
                        .get_mut(pos * kv_dim..(pos + 1) * kv_dim)
                        .unwrap_or_default();
                    store(vd, vi, opts.kv_f16);
                }
                cache.mark_written(li, p0 + n);
            }
            let (kc, vc) = cache.layer(li);
            let plain = !kc.is_empty();
            let llama_ops = opts.llama_cpp_ops;
            let scale = 1.0 / (hd as f32).sqrt();
            let group = n_head / n_head_kv;
            if !plain {
                // done above
            } else if llama_ops && n >= ggml_cpu::FA_TILE && first_key(p0 + n - 1) == 0 {
                // llama.cpp's tiled flash attention: blocks of 64 query rows × heads
                let n_blocks = n.div_ceil(ggml_cpu::FA_TILE);
                let run = |job: usize| -> Vec<f32> {
                    let (b, h) = (job / n_head, job % n_head);
                    let i0 = b * ggml_cpu::FA_TILE;
                    let i1 = (i0 + ggml_cpu::FA_TILE).min(n);
                    let mut out = vec![0.0f32; (i1 - i0) * hd];
                    let qb = q.get(i0 * q_dim..i1 * q_dim).unwrap_or_default();
                    ggml_cpu::attn_block_tiled(
                        qb,
                        q_dim,
                        h * hd,
                        p0 + i0,
                        kc,
                        vc,
                        kv_dim,
                        (h / group) * hd,
                        hd,
                        scale,
                        &mut out,
                    );
                    out
                };
                for (job, blk) in par_map(n_blocks * n_head, mm.parallel, run)
                    .into_iter()
                    .enumerate()
                {
                    let (b, h) = (job / n_head, job % n_head);
                    for (r, row) in blk.chunks_exact(hd).enumerate() {
                        let i = b * ggml_cpu::FA_TILE + r;
                        if let Some(d) = o.get_mut(i * q_dim + h * hd..i * q_dim + (h + 1) * hd) {
                            d.copy_from_slice(row);
                        }
                    }
                }
            } else {
                let run = |i: usize| -> Result<Vec<f32>> {
                    let mut out = vec![0.0f32; q_dim];
                    let k0 = first_key(p0 + i);
                    let qi = q.get(i * q_dim..(i + 1) * q_dim).unwrap_or_default();
                    if llama_ops {
                        let mut qh = Vec::new();
                        for (h, (qr, or)) in qi
                            .chunks_exact(hd)
                            .zip(out.chunks_exact_mut(hd))
                            .enumerate()
                        {
                            ggml_cpu::attn_row_one_chunk(
                                qr,
                                kc.get(k0 * kv_dim..).unwrap_or_default(),
                                vc.get(k0 * kv_dim..).unwrap_or_default(),
                                kv_dim,
                                (h / group) * hd,
                                p0 + i + 1 - k0,
                                scale,
                                or,
                                &mut qh,
                            );
                        }
                    } else {
                        let (kw, vw) = (
                            kc.get(k0 * kv_dim..).unwrap_or_default(),
                            vc.get(k0 * kv_dim..).unwrap_or_default(),
                        );
                        attention(qi, kw, vw, p0 + i + 1 - k0, n_head, n_head_kv, hd, &mut out)?;
                    }
                    Ok(out)
                };
                for (i, r) in par_map(n, mm.parallel, run).into_iter().enumerate() {
                    if let Some(d) = o.get_mut(i * q_dim..(i + 1) * q_dim) {
                        d.copy_from_slice(&r?);
                    }
                }
            }
            let attn_in = match &layer.attn_sub_norm {
                Some(w) => {
                    rmsnorm(&o, w, eps, &mut o2)?;
                    &o2
                }
                None => &o,
            };
            layer.wo.matmul(attn_in, self.acts.out, mm, &mut proj)?;
            if let Some(w) = &layer.post_attn_norm {
                let src = proj.clone();
                self.norm(opts, &src, w, &mut proj)?;
            }
            add(&mut x, &proj);

            // feed-forward
            self.norm(opts, &x, &layer.ffn_norm, &mut a)?;
            layer.gate.matmul(&a, self.acts.gate_up, mm, &mut g)?;
            layer.up.matmul(&a, self.acts.gate_up, mm, &mut up)?;
            match ls.ffn.act {
                Activation::Silu if opts.llama_cpp_ops => ggml_cpu::swiglu(&g, &up, &mut h),
                Activation::Silu => swiglu(&g, &up, &mut h)?,
                Activation::Relu2 => relu2_glu(&g, &up, &mut h)?,
                Activation::GeluTanh if opts.llama_cpp_ops => ggml_cpu::geglu(&g, &up, &mut h),
                Activation::GeluTanh => geglu(&g, &up, &mut h)?,
            }
            let down_in = match &layer.ffn_sub_norm {
                Some(w) => {
                    rmsnorm(&h, w, eps, &mut h2)?;
                    &h2
                }
                None => &h,
            };
            layer.down.matmul(down_in, self.acts.down, mm, &mut proj)?;
            if let Some(w) = &layer.post_ffn_norm {
                let src = proj.clone();
                self.norm(opts, &src, w, &mut proj)?;
            }
            add(&mut x, &proj);
        }
        cache.len = p0 + n;

        let rows: &[f32] = match wanted {
            LogitsWanted::All => &x,
            LogitsWanted::Last => x.get((n - 1) * n_embd..).unwrap_or_default(),
            LogitsWanted::None => &[],
        };
        let mut out = vec![0.0f32; rows.len()];
        if !rows.is_empty() {
            self.norm(opts, rows, &self.output_norm, &mut out)?;
        }
        Ok(Some(out))
    }

    fn norm(&self, opts: &ForwardOptions, x: &[f32], w: &[f32], out: &mut [f32]) -> Result<()> {
        if opts.llama_cpp_ops {
            if w.is_empty() || x.len() % w.len() != 0 || out.len() != x.len() {
                return Err(ReferenceError::shape("rms_norm", "input is not whole rows"));
            }
            ggml_cpu::rms_norm(x, w, self.spec.eps, out);
            Ok(())
        } else {
            rmsnorm(x, w, self.spec.eps, out)
        }
    }

    /// RoPE as the layer's `r` says: its base, linear scaling, and Llama 3's frequency divisors
    /// `factors` (YaRN is refused at load: not in `CPU_CAPS`).
    #[allow(clippy::too_many_arguments)]
    fn rope(
        &self,
        opts: &ForwardOptions,
        r: &RopeSpec,
        factors: Option<&[f32]>,
        x: &mut [f32],
        heads: usize,
        pos: usize,
        cache: &mut Vec<(f32, f32)>,
    ) -> Result<()> {
        let (hd, rd) = (u(self.hp.head_dim), u(r.dim));
        let scale = match r.scaling {
            RopeScaling::Linear { factor } => 1.0 / factor,
            _ => 1.0,
        };
        if opts.llama_cpp_ops {
            if x.len() != heads * hd {
                return Err(ReferenceError::shape("rope", "x is not n_heads × head_dim"));
            }
            ggml_cpu::rope_ext(x, hd, rd, pos, r.theta, r.neox(), scale, factors, cache);
            Ok(())
        } else {
            rope_ext(x, heads, hd, rd, pos, r.theta, r.neox(), scale, factors)
        }
    }

    /// The output head `[n_vocab, n_embd]`: `output.weight`, or the token embeddings when tied.
    pub fn head(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.tok_embd)
    }

    /// Logits `[n, n_vocab]` from final hidden states `[n, n_embd]` (output of
    /// [`Model::forward_hidden`]). The output head takes float activations.
    pub fn logits(&self, hidden: &[f32]) -> Result<Vec<f32>> {
        self.logits_opts(&self.opts, hidden)
    }

    /// [`Model::logits`] with the numerical options `opts`.
    pub fn logits_opts(&self, opts: &ForwardOptions, hidden: &[f32]) -> Result<Vec<f32>> {
        let head = self.head();
        let n = hidden.len() / u(self.hp.n_embd).max(1);
        let mut y = vec![0.0f32; n * head.rows];
        if n > 0 {
            head.matmul(hidden, ActQuant::None, &opts.matmul, &mut y)?;
        }
        if let Some(cap) = self.spec.final_logit_softcap {
            softcap(&mut y, cap);
        }
        Ok(y)
    }
}

fn store(dst: &mut [f32], src: &[f32], f16: bool) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = if f16 {
            half::f16::from_f32(s).to_f32()
        } else {
            s
        };
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// One layer's attention over a compressed cache (`kv.rs`): write this layer's rows (or keep
/// them pending as a MiniCache pair's first layer, or merge them with the pending ones as its
/// second), then attend with [`attention_tiled`]. Returns the rows still pending.
#[allow(clippy::too_many_arguments)]
fn compressed_attention(
    cache: &mut KvCache,
    li: usize,
    p0: usize,
    (q, k, v): (&[f32], &[f32], &[f32]),
    pending: Option<(Vec<f32>, Vec<f32>)>,
    (n_head, n_head_kv, hd): (usize, usize, usize),
    parallel: bool,
    out: &mut [f32],
) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
    let shape = AttnShape {
        n_head,
        n_head_kv,
        head_dim: hd,
    };
    // Rotated formats: queries, keys and values into the rotated space, the output back.
    if let Some(rot) = Rotation::for_format(cache.spec().quant, hd) {
        let (q, k, v) = (rot.rotate(q)?, rot.rotate(k)?, rot.rotate(v)?);
        let pend =
            compressed_attention_in(cache, li, p0, (&q, &k, &v), pending, shape, parallel, out)?;
        rot.unrotate(out)?;
        return Ok(pend);
    }
    compressed_attention_in(cache, li, p0, (q, k, v), pending, shape, parallel, out)
}

#[allow(clippy::too_many_arguments)]
fn compressed_attention_in(
    cache: &mut KvCache,
    li: usize,
    p0: usize,
    (q, k, v): (&[f32], &[f32], &[f32]),
    pending: Option<(Vec<f32>, Vec<f32>)>,
    shape: AttnShape,
    parallel: bool,
    out: &mut [f32],
) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
    match cache.role(li)? {
        Role::Own(_) => {
            cache.write_own(li, p0, k, v)?;
            let c = &*cache;
            let read = |p: usize, kr: &mut [f32], vr: &mut [f32]| c.read(li, p, None, kr, vr);
            attention_tiled(q, p0, shape, &read, out, parallel)?;
            Ok(None)
        }
        Role::First(_) => {
            let c = &*cache;
            let read =
                |p: usize, kr: &mut [f32], vr: &mut [f32]| c.read(li, p, Some((p0, k, v)), kr, vr);
            attention_tiled(q, p0, shape, &read, out, parallel)?;
            Ok(Some((k.to_vec(), v.to_vec())))
        }
        Role::Second(pair) => {
            let Some((ka, va)) = pending else {
                return Err(ReferenceError::shape(
                    "MiniCache",
                    "second layer of a pair without the first's rows",
                ));
            };
            cache.write_pair(pair, p0, (&ka, &va), (k, v))?;
            let c = &*cache;
            let read = |p: usize, kr: &mut [f32], vr: &mut [f32]| c.read(li, p, None, kr, vr);
            attention_tiled(q, p0, shape, &read, out, parallel)?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_format::{FfnAct, FormatError, ModelMeta, TernWriter};

    /// The loader checks the spec before it reads a tensor: a spec with an attention soft-cap (not
    /// in [`CPU_CAPS`]) is the typed refusal even for a file with no tensors, whose baseline spec
    /// gets as far as the first missing tensor.
    #[test]
    fn load_refuses_an_unsupported_spec_first() {
        let hp = HParams {
            n_vocab: 8,
            n_embd: 8,
            n_layer: 2,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            n_ff: 16,
            n_ctx_train: 64,
            rope_theta: 1e4,
            rope_dim: 4,
            rope_neox: false,
            rms_eps: 1e-5,
            ffn_act: FfnAct::Silu,
            tied_embeddings: true,
            sub_norms: false,
        };
        let meta = ModelMeta {
            arch: Arch::Llama,
            hparams: hp,
            tokenizer: None,
            activations: ActivationScheme::FLOAT,
            provenance: Default::default(),
            extra: Default::default(),
        };
        let path = std::env::temp_dir().join(format!("tern-spec-{}.tern", std::process::id()));
        TernWriter::create(&path, meta.clone())
            .unwrap()
            .finish()
            .unwrap();
        let file = TernFile::open(&path).unwrap();
        let base = ModelSpec::from_meta(&meta).unwrap();
        let e = Model::load_spec(&file, base.clone(), NeuZipResidency::Compressed).unwrap_err();
        assert!(matches!(e, ReferenceError::MissingTensor { .. }), "{e}");
        let mut spec = base;
        spec.layers[1].attn.logit_softcap = Some(50.0);
        let e = Model::load_spec(&file, spec, NeuZipResidency::Compressed).unwrap_err();
        let _ = std::fs::remove_file(&path);
        match e {
            ReferenceError::Format(FormatError::UnsupportedModel(u)) => {
                assert_eq!(
                    (u.backend, u.feature, u.layer),
                    ("CPU", Feature::AttnSoftcap, Some(1))
                )
            }
            e => panic!("not the typed refusal: {e}"),
        }
    }
}
