//! The planner: before anything is loaded, how a model and a context fit a byte budget
//! ([`plan`], `tern plan`, `tern run/chat --max-memory B -c auto`, the C ABI's
//! `tern_model_plan`, the desktop app). User documentation: `docs/planner.md`.
//!
//! Only the file's header and tensor table are read (the file is mapped and validated, no weight
//! is decoded or uploaded). The device is the one loading would pick ([`Device::Auto`] resolved
//! as [`crate::Model::open_with`] resolves it: a hardware GPU when the model loads there under
//! the budget, else the CPU).
//!
//! * **GPU**: the numbers are the loader's own — `tern_gpu::model::memory::plan_load` runs the
//!   load's checks and its memory decision (`decide`: NeuZip decoded or kept compressed) over the
//!   tensor table and sums what it places; a session's bytes are `session_parts`, the function
//!   `GpuSession::new` checks the budget with. So the plan and the load cannot diverge: a
//!   session of a configuration's `max_context` is made under the budget (its batch is at least
//!   [`GPU_PLAN_BATCH`] tokens), one position more is not planned.
//! * **CPU**: the weights the CPU backend keeps resident (`tern_reference::Model::resident_bytes`,
//!   computed here from the encodings; a test compares them), the KV cache as the reference
//!   allocates it, and the forward pass's working buffers for a batch of [`CPU_PLAN_BATCH`]
//!   tokens (an estimate: the CPU has no allocator budget).
//!
//! A configuration's `max_context` is the largest `n` (capped at the model's training context)
//! with `weights + reserve + scratch + kv(n) ≤ budget`.

use std::path::Path;

use tern_format::{Encoding, FloatType, HParams, TernFile};

use crate::error::{EngineError, Result};
use crate::options::{Device, Kivi, KvQuant, KvSpec, LoadOptions};
use crate::report::BackendKind;

/// The KV formats the planner picks from, best quality first (`--kv` spellings), the measured
/// perplexity cost of each on SmolLM2-135M (GPL-3, `-c 2048`, CPU; the README's "Compressed KV
/// cache" table and docs/bench/i28-kv): f16 ~0 %, q8 +0.01 %, q4r/q3r/q2r (rotated KIVI, issue
/// 28) below their unrotated formats, q4 +1.85 %, q3 +9.4 %, q2 and the absmax a4/a3 beyond.
/// f32 is never chosen automatically (it is f16's quality at twice the bytes). A name this build
/// does not know is skipped, so the list may name formats before they land; a format of
/// [`KvQuant::ALL`] missing here is never chosen (a test fails until it is placed).
pub const QUALITY_ORDER: &[&str] = &[
    "f16", "q8", "q4r", "q4", "q3r", "q3", "q2r", "q2", "a4", "a3",
];

/// Tokens per batch a GPU plan sizes the session's scratch for (the batch the load's own
/// session reserve assumes); a session made under the budget takes a larger batch (up to 512)
/// only from bytes beyond its context.
pub const GPU_PLAN_BATCH: u64 = tern_gpu::model::memory::RESERVE_BATCH;
/// Tokens per batch a CPU plan sizes the forward pass's working buffers for.
pub const CPU_PLAN_BATCH: u64 = 512;
/// The context cap when the file does not say its training context.
const NO_TRAIN_CAP: u64 = 1 << 20;
/// The largest context the search tries (beyond it a session's positions overflow `u32`s).
const SEARCH_LIMIT: u64 = 1 << 31;

/// One KV format's line of a [`Plan`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanConfig {
    pub kv: KvQuant,
    /// KV bytes one position takes over all layers at `max_context` positions (codes, scales,
    /// zero points, KIVI's f16 window: `KvQuant::bytes_per_token`, rounded up); at the training
    /// context when nothing fits.
    pub kv_bytes_per_token: u64,
    /// The largest context that fits the budget (0: none), capped at [`Plan::context_cap`].
    pub max_context: u64,
    /// The largest context the budget holds without the training-context cap (what
    /// [`Plan::check`] enforces: the cap is about quality, the budget about memory).
    pub budget_context: u64,
}

/// What the planner picked: a format and a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanChoice {
    pub kv: KvQuant,
    pub context: u64,
}

/// How a model and a context fit a budget ([`plan`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The backend loading would pick.
    pub backend: BackendKind,
    /// "cpu", or "gpu (adapter, backend)".
    pub device: String,
    pub budget_bytes: u64,
    /// Weights as they would be placed (GPU: what the loader allocates, the just-in-time
    /// scratch included; CPU: the bytes the CPU backend keeps resident).
    pub weights_bytes: u64,
    /// A session's bytes besides its KV cache, for batches of [`Plan::batch`] tokens (GPU:
    /// activations, logits, staging and the recorded plans' parameter buffers; CPU: the forward
    /// pass's working buffers).
    pub scratch_bytes: u64,
    /// The allowance kept beside the weights (GPU: each buffer's allocation granularity, small
    /// buffers; CPU: 0).
    pub reserve_bytes: u64,
    /// Tokens per batch `scratch_bytes` is sized for.
    pub batch: u64,
    /// The cap of every `max_context`: the model's training context.
    pub context_cap: u64,
    /// GPU: the smallest budget the model loads with (the load also keeps room for a session
    /// of 512 positions); `None` on the CPU.
    pub min_budget_bytes: Option<u64>,
    /// Every KV format of [`KvQuant::ALL`], in that order.
    pub configs: Vec<PlanConfig>,
    /// The context asked for.
    pub context: Option<u64>,
    /// With a context: the first format of [`QUALITY_ORDER`] whose `max_context` reaches it;
    /// `None` when none does or no context was asked.
    pub chosen: Option<PlanChoice>,
    hp: HParams,
}

/// How the KV cache of `n` positions is sized on the plan's backend.
fn kv_alloc(backend: BackendKind, hp: &HParams, spec: &KvSpec, batch: u64, n: u64) -> u64 {
    match backend {
        BackendKind::Gpu => tern_gpu::KvCache::bytes_for(hp, n, spec, batch),
        BackendKind::Cpu => cpu_kv_bytes(hp, spec, n),
    }
}

/// The spec a plan sizes `q` with: the session's KIVI defaults, no MiniCache.
fn spec_of(q: KvQuant) -> KvSpec {
    KvSpec {
        quant: q,
        kivi: Kivi::default(),
        minicache: None,
    }
}

/// Bytes of the reference KV cache of `n` positions as `tern_reference`'s store allocates them
/// (`kv_store.rs` `Stream::new`, no MiniCache): codes in u32 words and f16 scales for every
/// position; KIVI's f16 key parameters per group of `G` positions and value parameters per
/// group of `G` channels, and its f16 window of `min(R, n)` rows; a3's 4-bit row for position 0
/// besides. A format without its own rule here: `KvQuant::layer_bytes`.
fn cpu_kv_bytes(hp: &HParams, spec: &KvSpec, n: u64) -> u64 {
    let layers = u64::from(hp.n_layer);
    let row = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);
    let heads = u64::from(hp.n_head_kv);
    let q = spec.quant;
    let codes = q.code_bytes(row);
    let per_layer = match q {
        KvQuant::F32 | KvQuant::F16 => 2 * n.saturating_mul(codes),
        KvQuant::Q8 | KvQuant::Absmax4 | KvQuant::Absmax3 => {
            let first = if q == KvQuant::Absmax3 {
                KvQuant::Absmax4.code_bytes(row) + heads * 2
            } else {
                0
            };
            2 * (n.saturating_mul(codes + heads * 2) + first)
        }
        // KIVI and any format stored as KIVI is (the rotated ones).
        _ if q.is_kivi() => {
            let (g, r) = (
                u64::from(spec.kivi.group.max(1)),
                u64::from(spec.kivi.residual),
            );
            let key_params = 2 * n.div_ceil(g).saturating_mul(row) * 2;
            let value_params = 2 * n.saturating_mul(row.div_ceil(g)) * 2;
            let window = 2 * r.min(n.max(1)).saturating_mul(row) * 2;
            (2 * n.saturating_mul(codes))
                .saturating_add(key_params)
                .saturating_add(value_params)
                .saturating_add(window)
        }
        _ => q.layer_bytes(hp, spec.kivi, n),
    };
    layers.saturating_mul(per_layer)
}

/// Resident bytes of one matrix as the CPU reference keeps it (`Matrix::from_encoded_with`).
fn cpu_matrix_bytes(enc: &Encoding, shape: &[u64], stored: u64, decode_neuzip: bool) -> u64 {
    let elems: u64 = shape.iter().product();
    let cols = shape.last().copied().unwrap_or(0);
    use tern_format::ggml::BlockType;
    match (enc, enc.ggml_block()) {
        (_, Some(BlockType::Q8_0 | BlockType::Q4_0 | BlockType::Q4_1)) => stored,
        (_, Some(BlockType::Q6K)) if cols % BlockType::Q6K.block_elems() as u64 == 0 => stored,
        (Encoding::Ternary { .. }, _) => stored,
        (Encoding::F16 | Encoding::Bf16, _) => elems.saturating_mul(2),
        (
            Encoding::NeuZip {
                dtype: FloatType::F16 | FloatType::Bf16,
                ..
            },
            _,
        ) if decode_neuzip => elems.saturating_mul(2),
        (Encoding::NeuZip { .. }, _) if !decode_neuzip => stored,
        _ => elems.saturating_mul(4),
    }
}

/// The CPU backend's resident weights under `budget` (its NeuZip rule, `backend/cpu.rs`).
fn cpu_weights(file: &TernFile, budget: u64) -> u64 {
    let stored: u64 = file.tensors().iter().map(|t| t.size).sum();
    let decoded = stored.saturating_add(tern_reference::Model::neuzip_decoded_bytes(file));
    let decode = decoded <= budget;
    let tied = file.meta().hparams.tied_embeddings;
    file.tensors()
        .iter()
        .filter(|t| !(t.name == "output.weight" && tied))
        .map(|t| match t.shape.as_slice() {
            [n] => n.saturating_mul(4),
            s => cpu_matrix_bytes(&t.encoding, s, t.size, decode),
        })
        .fold(0, u64::saturating_add)
}

/// The CPU forward pass's working buffers for `b` tokens (`tern_reference::Model::forward`):
/// hidden state, norm output and projection (`3·d`), q and two attention outputs (`3·q`), k and
/// v (`2·kv`), gate, up and two FFN temporaries (`4·ff`), f32 each; the last position's logits.
fn cpu_scratch(hp: &HParams, b: u64) -> u64 {
    let (d, ff, vocab) = (
        u64::from(hp.n_embd),
        u64::from(hp.n_ff),
        u64::from(hp.n_vocab),
    );
    let q = u64::from(hp.n_head) * u64::from(hp.head_dim);
    let kv = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);
    4 * (b * (3 * d + 3 * q + 2 * kv + 4 * ff) + vocab)
}

/// What one backend's sizes are, before the per-format search.
struct Sizes {
    backend: BackendKind,
    device: String,
    weights: u64,
    scratch: u64,
    reserve: u64,
    batch: u64,
    min_budget: Option<u64>,
    /// Whether the model loads at all under the budget.
    loads: bool,
    /// Per format, the largest context one binding holds (GPU); `u64::MAX` on the CPU.
    binding_cap: Vec<u64>,
}

fn gpu_sizes(file: &TernFile, opts: &LoadOptions, allow_software: bool) -> Result<Sizes> {
    let ctx =
        tern_gpu::GpuContext::with_options(crate::backend::gpu::context_options(allow_software))?;
    let mo = crate::backend::gpu::model_options(opts);
    let lp = tern_gpu::model::memory::plan_load(&ctx, file, &mo)?;
    let hp = &file.meta().hparams;
    let parts =
        tern_gpu::model::memory::session_parts(&ctx, hp, 1, GPU_PLAN_BATCH, &spec_of(KvQuant::F32));
    let i = &ctx.info;
    Ok(Sizes {
        backend: BackendKind::Gpu,
        device: format!("gpu ({}, {})", i.name, i.backend),
        weights: lp.weights_bytes,
        scratch: parts.scratch.saturating_add(parts.params),
        reserve: lp.reserve_bytes,
        batch: GPU_PLAN_BATCH,
        min_budget: Some(lp.min_budget),
        loads: lp.fits,
        binding_cap: KvQuant::ALL
            .iter()
            .map(|&q| tern_gpu::KvCache::max_positions(&ctx, hp, &spec_of(q)))
            .collect(),
    })
}

fn cpu_sizes(file: &TernFile, budget: u64) -> Sizes {
    let hp = &file.meta().hparams;
    Sizes {
        backend: BackendKind::Cpu,
        device: "cpu".into(),
        weights: cpu_weights(file, budget),
        scratch: cpu_scratch(hp, CPU_PLAN_BATCH),
        reserve: 0,
        batch: CPU_PLAN_BATCH,
        min_budget: None,
        loads: true,
        binding_cap: vec![u64::MAX; KvQuant::ALL.len()],
    }
}

/// The plan of the model at `path` under `opts` (its `max_memory` is the budget, required)
/// for the device `opts.device` picks; with `context`, the format chosen for it (see
/// [`Plan::chosen`]). Nothing is loaded: the file is mapped and its tensor table read.
pub fn plan(path: &Path, opts: &LoadOptions, context: Option<u64>) -> Result<Plan> {
    let budget = opts.max_memory.ok_or_else(|| {
        EngineError::InvalidArgument(
            "a plan needs a memory budget (LoadOptions::max_memory, --max-memory)".into(),
        )
    })?;
    if context == Some(0) {
        return Err(EngineError::InvalidArgument(
            "a planned context must be at least 1 position".into(),
        ));
    }
    let mut file = TernFile::open(path)?;
    if let Some(acts) = opts.activations {
        file.override_activations(acts);
    }
    let sizes = match opts.device {
        Device::Cpu => cpu_sizes(&file, budget),
        Device::Gpu => gpu_sizes(&file, opts, true)?,
        // As `backend::load`: the hardware GPU when the model loads there, else the CPU.
        Device::Auto => match gpu_sizes(&file, opts, false) {
            Ok(s) if s.loads => s,
            Ok(_) => cpu_sizes(&file, budget),
            Err(e) => {
                log::info!("plan: GPU not used ({e}); planning for the CPU");
                cpu_sizes(&file, budget)
            }
        },
    };
    Ok(Plan::from_sizes(
        sizes,
        file.meta().hparams.clone(),
        budget,
        context,
    ))
}

impl Plan {
    fn from_sizes(s: Sizes, hp: HParams, budget: u64, context: Option<u64>) -> Plan {
        let cap = match u64::from(hp.n_ctx_train) {
            0 => NO_TRAIN_CAP,
            n => n,
        };
        let mut p = Plan {
            backend: s.backend,
            device: s.device,
            budget_bytes: budget,
            weights_bytes: s.weights,
            scratch_bytes: s.scratch,
            reserve_bytes: s.reserve,
            batch: s.batch,
            context_cap: cap,
            min_budget_bytes: s.min_budget,
            configs: Vec::new(),
            context,
            chosen: None,
            hp,
        };
        let fixed = p.fixed_bytes();
        for (i, &q) in KvQuant::ALL.iter().enumerate() {
            let spec = spec_of(q);
            let limit = SEARCH_LIMIT.min(s.binding_cap.get(i).copied().unwrap_or(0));
            let fits = |n: u64| {
                fixed.saturating_add(kv_alloc(p.backend, &p.hp, &spec, p.batch, n)) <= budget
            };
            let budget_context = if !s.loads || spec.check(&p.hp).is_err() {
                0
            } else {
                // The largest n in 0..=limit that fits (bytes grow with n).
                let (mut lo, mut hi) = (0u64, limit);
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if fits(mid) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            };
            let max_context = budget_context.min(cap);
            let at = if max_context > 0 { max_context } else { cap };
            let per = q.bytes_per_token(&p.hp, spec.kivi, at).ceil() as u64;
            p.configs.push(PlanConfig {
                kv: q,
                kv_bytes_per_token: per,
                max_context,
                budget_context,
            });
        }
        p.chosen = context.and_then(|n| {
            Self::order()
                .into_iter()
                .find(|&q| p.config(q).is_some_and(|c| c.max_context >= n))
                .map(|kv| PlanChoice { kv, context: n })
        });
        p
    }

    /// The formats of [`QUALITY_ORDER`] this build has, best first.
    pub fn order() -> Vec<KvQuant> {
        QUALITY_ORDER
            .iter()
            .filter_map(|n| KvQuant::parse(n).ok())
            .collect()
    }

    /// Weights, their reserve and a session's scratch: every byte but the KV cache.
    pub fn fixed_bytes(&self) -> u64 {
        self.weights_bytes
            .saturating_add(self.reserve_bytes)
            .saturating_add(self.scratch_bytes)
    }

    /// Bytes of a KV cache of `n` positions in `kv` as this plan's backend allocates it.
    pub fn kv_bytes(&self, kv: KvQuant, n: u64) -> u64 {
        kv_alloc(self.backend, &self.hp, &spec_of(kv), self.batch, n)
    }

    /// Every byte a session of `n` positions in `kv` needs beside the model
    /// ([`Plan::fixed_bytes`] + [`Plan::kv_bytes`]).
    pub fn bytes_needed(&self, kv: KvQuant, n: u64) -> u64 {
        self.fixed_bytes().saturating_add(self.kv_bytes(kv, n))
    }

    /// The line of format `kv`.
    pub fn config(&self, kv: KvQuant) -> Option<&PlanConfig> {
        self.configs.iter().find(|c| c.kv == kv)
    }

    /// The largest context of `kv` within the budget (0: none).
    pub fn max_context(&self, kv: KvQuant) -> u64 {
        self.config(kv).map_or(0, |c| c.max_context)
    }

    /// `Ok` when a session of `n_ctx` positions in `kv` fits the budget (its
    /// [`PlanConfig::budget_context`]; the training-context cap is not a memory matter); else
    /// the typed refusal [`EngineError::ContextOverBudget`] naming the plan's numbers (nothing
    /// allocated).
    pub fn check(&self, kv: KvQuant, n_ctx: u64) -> Result<()> {
        let max_context = self.config(kv).map_or(0, |c| c.budget_context);
        if n_ctx <= max_context {
            return Ok(());
        }
        Err(EngineError::ContextOverBudget {
            requested: n_ctx,
            kv: kv.name(),
            max_context,
            budget: self.budget_bytes,
            detail: format!(
                "weights {} B, scratch {} B, reserve {} B, KV {} B at {n_ctx} positions; \
                 see `tern plan`",
                self.weights_bytes,
                self.scratch_bytes,
                self.reserve_bytes,
                self.kv_bytes(kv, n_ctx),
            ),
        })
    }

    /// `-c auto`: the largest context of `kv` within the budget, or the refusal of
    /// [`Plan::check`] when not even one position fits.
    pub fn auto_context(&self, kv: KvQuant) -> Result<u64> {
        match self.max_context(kv) {
            0 => self.check(kv, 1).map(|()| 1),
            n => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every format but f32 has a place in the quality order (a new `KvQuant` must be placed).
    #[test]
    fn every_format_is_ordered() {
        let order = Plan::order();
        for q in KvQuant::ALL {
            assert_eq!(
                order.contains(&q),
                q != KvQuant::F32,
                "{} in QUALITY_ORDER",
                q.name()
            );
        }
    }
}
