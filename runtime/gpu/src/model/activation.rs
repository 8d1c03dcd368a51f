//! The activation plan: for every linear layer, the scheme of its input (float, INT8 absmax,
//! INT4 absmean, TopK-50% + INT8) and the kernel that produces that input.
//!
//! Built once from the model file (metadata + tensor encodings), before anything is uploaded;
//! the graph (`model/graph.rs`) reads it instead of deciding per call. The rule today:
//!
//! * a linear whose weights are ternary takes the quantized input its scheme names; when a norm
//!   precedes it (the attention/FFN norms, BitNet's sub-norms) the quantization is fused into the
//!   norm (`rmsnorm_quant_int8`, same bits as the unfused pair, one dispatch), otherwise a
//!   separate `act_quant_int8` pass quantizes the f32 row;
//! * weights of both kinds sharing one input (e.g. ternary q with float k) get the norm's f32
//!   rows and, for the ternary ones, a separate `act_quant_int8` pass over them;
//! * a linear with ggml-block or float weights (llama family, the output head) reads f32;
//! * BitNet a4.8's inputs the same way: INT4 absmean for q/k/v and gate/up, TopK-50% + INT8 for
//!   the attention output projection, each fused into the preceding norm when there is one
//!   (`act_quant_a48.wgsl`: [`Producer::NormQuantInt4`], [`Producer::NormTopK`]) or a separate
//!   pass ([`Producer::QuantInt4`], [`Producer::QuantTopK`]);
//! * in an a4.8 model the inputs of the attention output projection and of the FFN down
//!   projection are marked [`LinearInput::sparse`]: their GEMV is the kernel that skips zero
//!   activations when the token's input is sparse enough (`kernels/sparse.rs`); b1.58 models
//!   never take it;
//! * a scheme with no GPU kernel is [`Producer::Unsupported`]: the GPU loader refuses the model
//!   with a typed error naming it (none today for ternary weights).
//!
//! The scheme comes from the file, or from [`ActivationPlan::from_file_with`] when the caller
//! overrides it (`tern bench --activations a8|a4.8`: the same weights run either way).

use std::fmt;

use tern_format::{ActQuant, ActivationScheme, Encoding, HParams, TernFile};

use crate::error::{GpuError, Result};

/// The linear layers of one transformer block, plus the output head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Linear {
    /// q, k and v projections (one shared input).
    Qkv,
    /// Attention output projection.
    AttnOut,
    /// FFN gate and up projections (one shared input).
    GateUp,
    /// FFN down projection.
    Down,
    /// Output head (logits).
    Head,
}

impl Linear {
    /// The activation-sparsity counter slot of this kind (`model/sparsity.rs`); the head takes
    /// float inputs: none.
    pub fn stats_slot(self) -> Option<u32> {
        match self {
            Linear::Qkv => Some(0),
            Linear::AttnOut => Some(1),
            Linear::GateUp => Some(2),
            Linear::Down => Some(3),
            Linear::Head => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Linear::Qkv => "qkv",
            Linear::AttnOut => "attn_out",
            Linear::GateUp => "gate_up",
            Linear::Down => "down",
            Linear::Head => "head",
        }
    }
}

/// How a linear layer's input is represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputScheme {
    /// f32 rows.
    Float,
    /// Per-token absmax INT8 (BitNet b1.58).
    Int8Absmax,
    /// Per-token absmean INT4 (BitNet a4.8 q/k/v and gate/up inputs).
    Int4Absmean,
    /// Per-token TopK-50% by magnitude, then absmax INT8 (BitNet a4.8 attention output input).
    TopK50Int8,
}

impl InputScheme {
    pub fn name(self) -> &'static str {
        match self {
            InputScheme::Float => "f32",
            InputScheme::Int8Absmax => "int8 absmax",
            InputScheme::Int4Absmean => "int4 absmean",
            InputScheme::TopK50Int8 => "topk50% + int8 absmax",
        }
    }

    fn from_act(q: ActQuant) -> Self {
        match q {
            ActQuant::None => InputScheme::Float,
            ActQuant::Int8 => InputScheme::Int8Absmax,
            ActQuant::Int4 => InputScheme::Int4Absmean,
            ActQuant::Topk50Int8 => InputScheme::TopK50Int8,
        }
    }
}

/// Which kernel writes a linear layer's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Producer {
    /// The preceding RMSNorm writes f32 rows.
    Norm,
    /// The preceding op's f32 output is read as it is (no norm in between).
    Direct,
    /// The preceding RMSNorm is fused with INT8 absmax quantization (`rmsnorm_quant_int8`).
    NormQuantInt8,
    /// A separate INT8 absmax pass (`act_quant_int8`) over the preceding op's f32 output
    /// (after the norm, when there is one: then the f32 rows are also there for non-ternary
    /// weights sharing the input).
    QuantInt8,
    /// The preceding RMSNorm fused with INT4 absmean quantization (`rmsnorm_quant_int4`).
    NormQuantInt4,
    /// A separate INT4 absmean pass (`act_quant_int4`), as [`Producer::QuantInt8`].
    QuantInt4,
    /// The preceding RMSNorm (BitNet's sub-norm) fused with TopK-50% + INT8
    /// (`rmsnorm_quant_topk50_int8`).
    NormTopK,
    /// A separate TopK-50% + INT8 pass (`act_quant_topk50_int8`), as [`Producer::QuantInt8`].
    QuantTopK,
    /// The scheme has no GPU kernel yet.
    Unsupported,
}

impl Producer {
    pub fn name(self) -> &'static str {
        match self {
            Producer::Norm => "rmsnorm",
            Producer::Direct => "previous op's f32 output",
            Producer::NormQuantInt8 => "rmsnorm_quant_int8 (fused)",
            Producer::QuantInt8 => "act_quant_int8",
            Producer::NormQuantInt4 => "rmsnorm_quant_int4 (fused)",
            Producer::QuantInt4 => "act_quant_int4",
            Producer::NormTopK => "rmsnorm_quant_topk50_int8 (fused)",
            Producer::QuantTopK => "act_quant_topk50_int8",
            Producer::Unsupported => "no GPU kernel",
        }
    }

    /// The input is quantized (the matmul reads an `ActInt8`, INT8 or INT4).
    pub fn is_int8(self) -> bool {
        matches!(
            self,
            Producer::NormQuantInt8
                | Producer::QuantInt8
                | Producer::NormQuantInt4
                | Producer::QuantInt4
                | Producer::NormTopK
                | Producer::QuantTopK
        )
    }

    /// The producer writes INT4 activations.
    pub fn is_int4(self) -> bool {
        matches!(self, Producer::NormQuantInt4 | Producer::QuantInt4)
    }

    /// The separate (unfused) quantization pass of a scheme, `None` for floats.
    fn quant_pass(q: ActQuant) -> Option<Producer> {
        match q {
            ActQuant::None => None,
            ActQuant::Int8 => Some(Producer::QuantInt8),
            ActQuant::Int4 => Some(Producer::QuantInt4),
            ActQuant::Topk50Int8 => Some(Producer::QuantTopK),
        }
    }

    /// The quantization fused into the preceding norm, `None` for floats.
    fn fused(q: ActQuant) -> Option<Producer> {
        match q {
            ActQuant::None => None,
            ActQuant::Int8 => Some(Producer::NormQuantInt8),
            ActQuant::Int4 => Some(Producer::NormQuantInt4),
            ActQuant::Topk50Int8 => Some(Producer::NormTopK),
        }
    }
}

/// The weights a linear layer multiplies with (what decides the input it can take).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightKind {
    Ternary,
    Ggml,
    /// f32/f16/bf16, raw or NeuZip.
    Float,
    /// Several kinds share one input (q/k/v or gate/up).
    Mixed,
    /// An encoding the GPU has no matmul for.
    Other,
}

impl WeightKind {
    pub fn of(e: &Encoding) -> Self {
        match e {
            Encoding::Ternary { .. } => WeightKind::Ternary,
            Encoding::F32 | Encoding::F16 | Encoding::Bf16 | Encoding::NeuZip { .. } => {
                WeightKind::Float
            }
            // every other encoding is a ggml block type (`Encoding::ggml_block`)
            _ => WeightKind::Ggml,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WeightKind::Ternary => "ternary",
            WeightKind::Ggml => "ggml",
            WeightKind::Float => "float",
            WeightKind::Mixed => "mixed",
            WeightKind::Other => "other",
        }
    }
}

/// One linear layer's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinearInput {
    pub linear: Linear,
    pub weights: WeightKind,
    pub scheme: InputScheme,
    pub producer: Producer,
    /// The matmul may use the GEMV that skips zero activations (a4.8's attention output and FFN
    /// down inputs; see the module doc).
    pub sparse: bool,
}

/// The inputs of one block's four linear kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockInputs {
    pub qkv: LinearInput,
    pub attn_out: LinearInput,
    pub gate_up: LinearInput,
    pub down: LinearInput,
}

impl BlockInputs {
    pub fn all(&self) -> [LinearInput; 4] {
        [self.qkv, self.attn_out, self.gate_up, self.down]
    }
}

/// Every linear layer's input scheme and producer (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationPlan {
    pub scheme: ActivationScheme,
    pub layers: Vec<BlockInputs>,
    pub head: LinearInput,
}

fn input(
    linear: Linear,
    weights: &[WeightKind],
    q: ActQuant,
    norm_before: bool,
    a48: bool,
) -> LinearInput {
    let w = weights.first().copied().unwrap_or(WeightKind::Other);
    let same = weights.iter().all(|k| *k == w);
    let float_producer = if norm_before {
        Producer::Norm
    } else {
        Producer::Direct
    };
    let (scheme, producer) = match (w, same) {
        (WeightKind::Ternary, true) => {
            let p = if norm_before {
                Producer::fused(q)
            } else {
                Producer::quant_pass(q)
            };
            (InputScheme::from_act(q), p.unwrap_or(Producer::Unsupported))
        }
        (WeightKind::Ggml | WeightKind::Float, true) => (InputScheme::Float, float_producer),
        // Kinds mixed in one input (e.g. ternary q with float k): f32 rows from the norm, and
        // a separate quantization pass for the ternary ones.
        (_, false)
            if q != ActQuant::None
                && weights.iter().all(|k| *k != WeightKind::Other)
                && weights.contains(&WeightKind::Ternary) =>
        {
            (
                InputScheme::from_act(q),
                Producer::quant_pass(q).unwrap_or(Producer::Unsupported),
            )
        }
        (_, false)
            if weights
                .iter()
                .all(|k| matches!(k, WeightKind::Ggml | WeightKind::Float)) =>
        {
            (InputScheme::Float, float_producer)
        }
        _ => (InputScheme::from_act(q), Producer::Unsupported),
    };
    LinearInput {
        linear,
        weights: if same { w } else { WeightKind::Mixed },
        scheme,
        producer,
        sparse: a48
            && same
            && w == WeightKind::Ternary
            && matches!(linear, Linear::AttnOut | Linear::Down)
            && matches!(scheme, InputScheme::Int8Absmax | InputScheme::TopK50Int8),
    }
}

impl ActivationPlan {
    /// The plan of the model in `file` (metadata and tensor encodings only; nothing is decoded).
    pub fn from_file(file: &TernFile) -> Result<Self> {
        Self::from_file_with(file, file.meta().activations)
    }

    /// The plan of the model in `file` with its ternary inputs quantized as `acts` says instead of
    /// the file's scheme (the same weights run A8 or a4.8).
    pub fn from_file_with(file: &TernFile, acts: ActivationScheme) -> Result<Self> {
        let meta = file.meta();
        let hp: &HParams = &meta.hparams;
        let a48 = [acts.qkv, acts.out, acts.gate_up, acts.down]
            .iter()
            .any(|q| matches!(q, ActQuant::Int4 | ActQuant::Topk50Int8));
        let kind = |name: &str| -> Result<WeightKind> {
            let i = file
                .index_of(name)
                .ok_or_else(|| GpuError::bad_model(format!("tensor `{name}` is missing")))?;
            let t = file
                .tensors()
                .get(i)
                .ok_or_else(|| GpuError::bad_model(format!("tensor `{name}` is missing")))?;
            Ok(WeightKind::of(&t.encoding))
        };
        let n_layer = hp.n_layer as usize;
        if n_layer > file.tensors().len() {
            return Err(GpuError::bad_model(format!(
                "{} layers in the metadata but only {} tensors in the file",
                hp.n_layer,
                file.tensors().len()
            )));
        }
        // which inputs are normed: the layers' sub-norms, as the spec says
        let spec = tern_format::ModelSpec::from_meta(meta)?;
        let mut layers = Vec::with_capacity(n_layer);
        for (l, ls) in (0..hp.n_layer).zip(&spec.layers) {
            let k = |s: &str| kind(&format!("blk.{l}.{s}.weight"));
            layers.push(BlockInputs {
                qkv: input(
                    Linear::Qkv,
                    &[k("attn_q")?, k("attn_k")?, k("attn_v")?],
                    acts.qkv,
                    true,
                    a48,
                ),
                attn_out: input(
                    Linear::AttnOut,
                    &[k("attn_output")?],
                    acts.out,
                    ls.norms.sub_attn,
                    a48,
                ),
                gate_up: input(
                    Linear::GateUp,
                    &[k("ffn_gate")?, k("ffn_up")?],
                    acts.gate_up,
                    true,
                    a48,
                ),
                down: input(
                    Linear::Down,
                    &[k("ffn_down")?],
                    acts.down,
                    ls.norms.sub_ffn,
                    a48,
                ),
            });
        }
        let head_name = if spec.tied_head {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let head = input(
            Linear::Head,
            &[kind(head_name)?],
            ActQuant::None,
            true,
            false,
        );
        Ok(ActivationPlan {
            scheme: acts,
            layers,
            head,
        })
    }

    /// The first input that has no GPU kernel, with its layer (`None` for the head).
    pub fn unsupported(&self) -> Option<(Option<usize>, LinearInput)> {
        for (l, b) in self.layers.iter().enumerate() {
            if let Some(i) = b
                .all()
                .into_iter()
                .find(|i| i.producer == Producer::Unsupported)
            {
                return Some((Some(l), i));
            }
        }
        (self.head.producer == Producer::Unsupported).then_some((None, self.head))
    }

    /// Rows for printing: (layers, linear, weights, input scheme, producer), runs of identical
    /// layers collapsed (`"0-29"`).
    pub fn rows(
        &self,
    ) -> Vec<(
        String,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    )> {
        let mut out = Vec::new();
        let mut start = 0usize;
        while start < self.layers.len() {
            let mut end = start;
            while self.layers.get(end + 1) == self.layers.get(start) {
                end += 1;
            }
            let span = if end == start {
                format!("{start}")
            } else {
                format!("{start}-{end}")
            };
            if let Some(b) = self.layers.get(start) {
                for i in b.all() {
                    out.push((
                        span.clone(),
                        i.linear.name(),
                        i.weights.name(),
                        i.scheme.name(),
                        i.producer.name(),
                    ));
                }
            }
            start = end + 1;
        }
        let h = self.head;
        out.push((
            "-".into(),
            h.linear.name(),
            h.weights.name(),
            h.scheme.name(),
            h.producer.name(),
        ));
        out
    }
}

impl fmt::Display for ActivationPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<8} {:<9} {:<8} {:<22} producer",
            "layers", "linear", "weights", "input"
        )?;
        for (span, lin, w, s, p) in self.rows() {
            writeln!(f, "{span:<8} {lin:<9} {w:<8} {s:<22} {p}")?;
        }
        Ok(())
    }
}
