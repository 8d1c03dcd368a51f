//! The CPU reference backend (`tern-reference`): weights in host memory, an f32 KV cache, the
//! fused Cut-Cross-Entropy scorer of `tern_reference::cce`.

use std::cell::RefCell;
use std::collections::BTreeMap;

use tern_format::{ActQuant, Encoding, TernFile};
use tern_reference::{ForwardOptions, KvCache, LogitsWanted, NeuZipResidency};

use super::{check_finite, Logits, ModelBackend, SessionBackend, StepOut, Stop};
use crate::capabilities::{Capabilities, Verb};
use crate::error::{EngineError, Result};
use crate::options::{KvSpec, Numerics, ScoreObserver, ScoreOptions};
use crate::report::{
    ActivationPlanReport, ActivationRow, ActivationSparsity, BackendKind, HostTransfers,
    KernelTime, MemoryReport, ModelReport, SessionReport, TensorReport,
};

/// A verb the CPU backend does not have (not in [`Capabilities::CPU`]; the seam test checks
/// that the two agree).
fn lacks<T>(verb: Verb) -> Result<T> {
    Err(EngineError::unsupported(verb, BackendKind::Cpu))
}

pub(crate) struct CpuModel {
    net: tern_reference::Model,
    /// The memory budget it was loaded with (`LoadOptions::max_memory`).
    max_memory: Option<u64>,
    memory: MemoryReport,
    plan: ActivationPlanReport,
}

impl CpuModel {
    /// Load on the CPU. NeuZip matrices are decoded at load to 16-bit (the speed of raw floats:
    /// a compressed head would be decoded again for every token) unless `max_memory` is smaller
    /// than the file's tensors with them decoded; then they stay compressed and are decoded tile by
    /// tile when used (resident weights = the file's tensor bytes) — the GPU's `--max-memory`
    /// rule, applied to host memory.
    pub(crate) fn load(file: &TernFile, max_memory: Option<u64>) -> Result<Self> {
        let mut memory = memory_of(file);
        let stored = memory.weight_bytes;
        let decoded = stored.saturating_add(tern_reference::Model::neuzip_decoded_bytes(file));
        let neuzip = match max_memory {
            Some(b) if decoded > b => NeuZipResidency::Compressed,
            _ => NeuZipResidency::Decoded,
        };
        log::info!(
            "cpu: NeuZip matrices {neuzip:?} (weights {stored} B stored, {decoded} B decoded, budget {max_memory:?})"
        );
        let net = tern_reference::Model::load_with(file, neuzip)?;
        memory.host_resident_bytes = Some(net.resident_bytes());
        Ok(Self {
            net,
            max_memory,
            memory,
            plan: activation_plan(file),
        })
    }
}

impl ModelBackend for CpuModel {
    fn device_name(&self) -> String {
        "cpu".into()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::CPU
    }

    fn new_session(&self, n_ctx: usize, kv: &KvSpec) -> Result<Box<dyn SessionBackend + '_>> {
        Ok(Box::new(CpuSession {
            net: &self.net,
            cache: KvCache::with_spec(&self.net, n_ctx, kv)?,
            opts: self.net.options(),
            tokens: Vec::new(),
            max_memory: self.max_memory,
        }))
    }

    fn score(
        &self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        let mut cache = KvCache::with_spec(&self.net, tokens.len().saturating_sub(1), &opts.kv)?;
        score_in_cache(
            &self.net,
            &self.net.options(),
            &mut cache,
            tokens,
            opts,
            obs,
        )
    }

    fn report(&self) -> ModelReport {
        ModelReport {
            device: self.device_name(),
            backend: BackendKind::Cpu,
            memory: self.memory.clone(),
            activation_plan: self.plan.clone(),
        }
    }

    fn score_in_cache(
        &self,
        cache: &mut KvCache,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        score_in_cache(&self.net, &self.net.options(), cache, tokens, opts, obs)
    }

    fn set_forward_options(&mut self, o: ForwardOptions) -> Result<()> {
        self.net.set_options(o);
        Ok(())
    }

    fn device_lost(&self) -> bool {
        false
    }

    fn simulate_device_loss(&self) -> Result<()> {
        lacks(Verb::SimulateDeviceLoss)
    }
}

struct CpuSession<'m> {
    net: &'m tern_reference::Model,
    cache: KvCache,
    /// This session's numerics (the model's when the session was made, unless switched).
    opts: ForwardOptions,
    /// The tokens in the cache (a compressed cache that cannot be truncated exactly re-runs
    /// some of them: `restore`).
    tokens: Vec<u32>,
    /// The model's memory budget (reported).
    max_memory: Option<u64>,
}

impl CpuSession<'_> {
    /// Make the cache hold exactly `tokens[..n]`: truncate it, and re-run what a KIVI cache could
    /// not keep (the tokens between the start of a quantized block and `n`). On a failure of
    /// that re-run the cache keeps what it could.
    fn restore(&mut self, n: usize) {
        let n = n.min(self.tokens.len());
        let kept = self.cache.truncate(n);
        if kept < n {
            let redo = self.tokens.get(kept..n).unwrap_or_default().to_vec();
            log::debug!(
                "KV cache: re-running {} tokens after truncating into a quantized block",
                redo.len()
            );
            let r = self.net.forward_until(
                &self.opts,
                &redo,
                &mut self.cache,
                LogitsWanted::None,
                &|| false,
            );
            if let Err(e) = r {
                log::warn!(
                    "KV cache: re-running {} tokens failed ({e}); the cache holds {}",
                    redo.len(),
                    self.cache.len()
                );
            }
        }
        self.tokens.truncate(self.cache.len());
    }
}

impl SessionBackend for CpuSession<'_> {
    fn eval(&mut self, tokens: &[u32], logits: Logits, stop: Stop<'_>) -> Result<Vec<f32>> {
        let wanted = match logits {
            Logits::Last => LogitsWanted::Last,
            Logits::All => LogitsWanted::All,
        };
        // A stopped or failed pass leaves the cache as it was (restored exactly).
        let p0 = self.cache.len();
        self.tokens.truncate(p0);
        self.tokens.extend_from_slice(tokens);
        let r = self
            .net
            .forward_until(&self.opts, tokens, &mut self.cache, wanted, stop);
        match r {
            Ok(Some(l)) => Ok(l),
            Ok(None) => {
                self.restore(p0);
                Err(EngineError::Cancelled)
            }
            Err(e) => {
                self.restore(p0);
                Err(e.into())
            }
        }
    }

    fn truncate(&mut self, n: usize) {
        self.restore(n);
    }

    fn len(&self) -> usize {
        self.cache.len()
    }

    fn n_ctx(&self) -> usize {
        self.cache.capacity()
    }

    fn score(
        &mut self,
        tokens: &[u32],
        opts: &ScoreOptions,
        obs: &mut dyn ScoreObserver,
    ) -> Result<Vec<f32>> {
        self.tokens.clear();
        let r = score_in_cache(self.net, &self.opts, &mut self.cache, tokens, opts, obs);
        let held = self.cache.len();
        self.tokens
            .extend_from_slice(tokens.get(..held).unwrap_or_default());
        r
    }

    fn kv_bytes_per_token(&self) -> u64 {
        self.cache.bytes_per_token() as u64
    }

    fn report(&mut self) -> Result<SessionReport> {
        let per = self.kv_bytes_per_token();
        Ok(SessionReport {
            backend: BackendKind::Cpu,
            max_memory: self.max_memory,
            kv: *self.cache.spec(),
            numerics: if self.opts.llama_cpp_ops {
                Numerics::LlamaCpp
            } else {
                Numerics::Model
            },
            n_ctx: self.cache.capacity(),
            kv_bytes: self.cache.bytes() as u64,
            kv_bytes_per_token: per,
            scratch_bytes: None,
            dispatches_per_token: None,
        })
    }

    fn eval_sample(
        &mut self,
        _token: u32,
        _penalized: &[u32],
        _temperature: f32,
        _stop: Stop<'_>,
    ) -> Result<Option<StepOut>> {
        lacks(Verb::DeviceSampling)
    }

    fn last_logits(&mut self) -> Result<Vec<f32>> {
        lacks(Verb::DeviceSampling)
    }

    fn host_transfers(&self) -> Result<HostTransfers> {
        lacks(Verb::HostTransfers)
    }

    fn reset_host_transfers(&mut self) -> Result<()> {
        lacks(Verb::HostTransfers)
    }

    fn profile_decode_step(&mut self, _token: u32) -> Result<Vec<KernelTime>> {
        lacks(Verb::Profile)
    }

    fn profile_prefill(&mut self, _tokens: &[u32]) -> Result<Vec<KernelTime>> {
        lacks(Verb::Profile)
    }

    fn measure_activation_sparsity(&mut self, _tokens: &[u32]) -> Result<Vec<ActivationSparsity>> {
        lacks(Verb::ActivationSparsity)
    }

    fn kv_state(&mut self) -> Result<Vec<std::borrow::Cow<'_, [u8]>>> {
        Ok(self.cache.state_sections())
    }

    fn restore_kv_state(&mut self, tokens: &[u32], sections: &[&[u8]]) -> Result<()> {
        self.tokens.clear();
        self.cache.clear();
        self.cache.restore_sections(sections)?;
        if self.cache.len() != tokens.len() {
            let held = self.cache.len();
            self.cache.clear();
            return Err(EngineError::State(crate::error::StateError::Corrupt(
                format!(
                    "the cache holds {held} positions but the history has {} tokens",
                    tokens.len()
                ),
            )));
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    fn set_llama_cpp_numerics(&mut self, on: bool) -> Result<()> {
        let parallel = self.net.options().matmul.parallel;
        self.opts = if on {
            ForwardOptions::llama_cpp_like()
        } else {
            self.net.options()
        };
        self.opts.matmul.parallel = parallel;
        Ok(())
    }
}

/// The CPU scoring loop: clear `cache`, run `tokens[..n-1]` in batches of `opts.batch`, and score
/// each batch's hidden states with the fused scorer. `tokens.len() − 1` fits the cache.
/// `obs.cancelled()` is checked before every batch and every layer; after an error or a cancel
/// the cache is empty.
pub(crate) fn score_in_cache(
    net: &tern_reference::Model,
    fwd: &ForwardOptions,
    cache: &mut KvCache,
    tokens: &[u32],
    opts: &ScoreOptions,
    obs: &mut dyn ScoreObserver,
) -> Result<Vec<f32>> {
    cache.clear();
    let r = score_batches(net, fwd, cache, tokens, opts, obs);
    if r.is_err() {
        cache.clear();
    } else {
        obs.kv_cache(cache.bytes_in_use(), cache.len());
    }
    r
}

fn score_batches(
    net: &tern_reference::Model,
    fwd: &ForwardOptions,
    cache: &mut KvCache,
    tokens: &[u32],
    opts: &ScoreOptions,
    obs: &mut dyn ScoreObserver,
) -> Result<Vec<f32>> {
    let n_in = tokens.len().saturating_sub(1);
    let batch = if opts.batch == 0 { 512 } else { opts.batch };
    let mut out = Vec::with_capacity(n_in);
    let mut start = 0;
    while start < n_in {
        if obs.cancelled() {
            return Err(EngineError::Cancelled);
        }
        let end = (start + batch).min(n_in);
        let (Some(inputs), Some(targets)) =
            (tokens.get(start..end), tokens.get(start + 1..end + 1))
        else {
            break; // unreachable: end + 1 ≤ n_in + 1 = tokens.len()
        };
        let hidden = {
            // The forward pass asks the observer before every layer.
            let cell = RefCell::new(&mut *obs);
            let stop = || cell.try_borrow_mut().is_ok_and(|mut o| o.cancelled());
            net.forward_hidden_until(fwd, inputs, cache, LogitsWanted::All, &stop)?
                .ok_or(EngineError::Cancelled)?
        };
        obs.scoring_started();
        let lp = net.score_hidden_opts(fwd, &hidden, targets, &opts.cce);
        obs.scoring_finished();
        drop(hidden);
        let lp = lp?;
        check_finite(&lp, start)?;
        out.extend_from_slice(&lp);
        start = end;
        obs.progress(start, n_in);
    }
    Ok(out)
}

/// The weights as stored in the file (the CPU keeps them so: `host_resident_bytes`, set by the
/// caller, is what it holds).
fn memory_of(file: &TernFile) -> MemoryReport {
    let tensors: Vec<TensorReport> = file
        .tensors()
        .iter()
        .map(|t| TensorReport {
            name: t.name.clone(),
            encoding: t.encoding.name(),
            placement: "host".into(),
            bytes: t.size,
        })
        .collect();
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for t in &tensors {
        *by.entry(t.encoding.clone()).or_default() += t.bytes;
    }
    MemoryReport {
        budget: None,
        weight_bytes: tensors.iter().map(|t| t.bytes).sum(),
        by_encoding: by.into_iter().collect(),
        tensors,
        jit_scratch_bytes: 0,
        gpu_allocated_peak: None,
        host_resident_bytes: None,
        gpu_allocated_now: None,
        gpu_allocation_measured: None,
        gpu_min_budget: None,
    }
}

fn weight_kind(e: &Encoding) -> &'static str {
    match e {
        Encoding::Ternary { .. } => "ternary",
        Encoding::F32 | Encoding::F16 | Encoding::Bf16 | Encoding::NeuZip { .. } => "float",
        // every other encoding is a ggml block type (`Encoding::ggml_block`)
        _ => "ggml",
    }
}

/// The input scheme of an activation quantization, named as the GPU plan names it.
fn scheme_name(q: ActQuant) -> &'static str {
    match q {
        ActQuant::None => "f32",
        ActQuant::Int8 => "int8 absmax",
        ActQuant::Int4 => "int4 absmean",
        ActQuant::Topk50Int8 => "topk50% + int8 absmax",
    }
}

/// The reference's function that makes that input (`tern_reference::quant`).
fn producer_name(q: ActQuant) -> &'static str {
    match q {
        ActQuant::None => "f32 as computed",
        ActQuant::Int8 => "quantize_act_int8",
        ActQuant::Int4 => "quantize_act_int4",
        ActQuant::Topk50Int8 => "topk50_int8",
    }
}

/// The CPU reference's activation plan: every linear layer quantizes its input with the scheme
/// of the file's metadata (whatever its weights), the head reads f32.
fn activation_plan(file: &TernFile) -> ActivationPlanReport {
    let meta = file.meta();
    let hp = &meta.hparams;
    let acts = meta.activations;
    let kind = |name: &str| -> &'static str {
        file.index_of(name)
            .and_then(|i| file.tensors().get(i))
            .map(|t| weight_kind(&t.encoding))
            .unwrap_or("other")
    };
    let group = |l: u32, names: &[&str]| -> &'static str {
        let kinds: Vec<&'static str> = names
            .iter()
            .map(|s| kind(&format!("blk.{l}.{s}.weight")))
            .collect();
        match kinds.first() {
            Some(&k) if kinds.iter().all(|&x| x == k) => k,
            Some(_) => "mixed",
            None => "other",
        }
    };
    let linears: [(&str, &[&str], ActQuant); 4] = [
        ("qkv", &["attn_q", "attn_k", "attn_v"], acts.qkv),
        ("attn_out", &["attn_output"], acts.out),
        ("gate_up", &["ffn_gate", "ffn_up"], acts.gate_up),
        ("down", &["ffn_down"], acts.down),
    ];
    // Per layer: the weight kind of each linear (the schemes are the same in every layer).
    let layers: Vec<[&'static str; 4]> = (0..hp.n_layer)
        .map(|l| linears.map(|(_, names, _)| group(l, names)))
        .collect();
    let mut rows = Vec::new();
    let mut start = 0usize;
    while start < layers.len() {
        let mut end = start;
        while layers.get(end + 1) == layers.get(start) {
            end += 1;
        }
        let span = if end == start {
            format!("{start}")
        } else {
            format!("{start}-{end}")
        };
        if let Some(kinds) = layers.get(start) {
            for ((name, _, q), w) in linears.iter().zip(kinds) {
                rows.push(ActivationRow {
                    layers: span.clone(),
                    linear: (*name).into(),
                    weights: (*w).into(),
                    input: scheme_name(*q).into(),
                    producer: producer_name(*q).into(),
                });
            }
        }
        start = end + 1;
    }
    let head = if hp.tied_embeddings {
        "token_embd.weight"
    } else {
        "output.weight"
    };
    rows.push(ActivationRow {
        layers: "-".into(),
        linear: "head".into(),
        weights: kind(head).into(),
        input: scheme_name(ActQuant::None).into(),
        producer: "rmsnorm".into(),
    });
    ActivationPlanReport { rows }
}
