//! What the live panel shows, as plain data: tokens/s over time, and memory by part from the
//! engine's reports (no drawing here, so it is tested without a window).

use std::collections::BTreeMap;
use std::time::Instant;

use tern_engine::{BackendKind, ModelReport, SessionReport};

use crate::worker::Phase;

/// Most points kept per series (older ones are dropped).
const MAX_POINTS: usize = 4096;

/// Prefill and decode tokens/s against seconds since the model was loaded.
#[derive(Debug, Clone)]
pub struct Throughput {
    start: Instant,
    pub prefill: Vec<[f64; 2]>,
    pub decode: Vec<[f64; 2]>,
    /// Where each reply's decode points start in `decode` (the plot draws each reply as its own
    /// line: no line across the idle time between replies).
    pub runs: Vec<usize>,
}

impl Default for Throughput {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            prefill: Vec::new(),
            decode: Vec::new(),
            runs: Vec::new(),
        }
    }
}

impl Throughput {
    /// A reply starts: its decode points form a line of their own.
    pub fn begin_run(&mut self) {
        if self.runs.last() != Some(&self.decode.len()) {
            self.runs.push(self.decode.len());
        }
    }

    /// The decode points, one line per reply.
    pub fn decode_runs(&self) -> Vec<&[[f64; 2]]> {
        let mut starts: Vec<usize> = std::iter::once(0)
            .chain(self.runs.iter().copied())
            .filter(|&i| i <= self.decode.len())
            .collect();
        starts.dedup();
        starts.push(self.decode.len());
        starts
            .windows(2)
            .filter_map(|w| self.decode.get(w[0]..w[1]))
            .filter(|r| !r.is_empty())
            .collect()
    }

    pub fn push(&mut self, phase: Phase, tokens_per_sec: f64) {
        if !tokens_per_sec.is_finite() {
            return;
        }
        let t = self.start.elapsed().as_secs_f64();
        let s = match phase {
            Phase::Prefill => &mut self.prefill,
            Phase::Decode => &mut self.decode,
        };
        if s.len() == MAX_POINTS {
            s.remove(0);
            if phase == Phase::Decode {
                self.runs.retain_mut(|i| {
                    *i = i.saturating_sub(1);
                    *i > 0
                });
            }
        }
        s.push([t, tokens_per_sec]);
    }
}

/// What a memory bar stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    Weights,
    JitScratch,
    KvCache,
    Activations,
}

/// One bar of the memory panel.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPart {
    pub kind: PartKind,
    pub label: String,
    /// `None`: the backend does not report this part.
    pub bytes: Option<u64>,
    /// Extra words after the size (the KV cache's ratio to f16).
    pub note: String,
}

/// Memory by part: weights by encoding and placement, just-in-time scratch, the KV cache (with
/// its size relative to an f16 cache of the same shape) and activation scratch.
pub fn memory_parts(
    model: &ModelReport,
    session: Option<&SessionReport>,
    kv_f16_bytes_per_token: u64,
) -> Vec<MemoryPart> {
    let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
    for t in &model.memory.tensors {
        *by.entry((t.encoding.clone(), t.placement.clone()))
            .or_default() += t.bytes;
    }
    let mut parts: Vec<MemoryPart> = by
        .into_iter()
        .map(|((enc, place), bytes)| MemoryPart {
            kind: PartKind::Weights,
            label: format!("weights {enc} ({place})"),
            bytes: Some(bytes),
            note: String::new(),
        })
        .collect();
    let gpu = model.backend == BackendKind::Gpu;
    parts.push(MemoryPart {
        kind: PartKind::JitScratch,
        label: "just-in-time scratch".into(),
        bytes: gpu.then_some(model.memory.jit_scratch_bytes),
        note: String::new(),
    });
    let (kv, note) = match session {
        Some(s) => {
            let note = if s.kv_bytes_per_token > 0 && kv_f16_bytes_per_token > 0 {
                // Bytes relative to an f16 cache of the same shape: 2.00x for f32 (twice the
                // bytes), 0.52x for q8 (about half).
                format!(
                    "{} ({:.2}x the bytes of f16)",
                    s.kv.quant.name(),
                    s.kv_bytes_per_token as f64 / kv_f16_bytes_per_token as f64
                )
            } else {
                String::new()
            };
            (Some(s.kv_bytes), note)
        }
        None => (None, String::new()),
    };
    parts.push(MemoryPart {
        kind: PartKind::KvCache,
        label: "KV cache".into(),
        bytes: kv,
        note,
    });
    parts.push(MemoryPart {
        kind: PartKind::Activations,
        label: "activations".into(),
        bytes: session.and_then(|s| s.scratch_bytes),
        note: String::new(),
    });
    parts
}

/// `1.5 MiB`, `312 KiB`, `17 B`.
pub fn human_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K * K {
        format!("{:.2} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.0} KiB", f / K)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_engine::{MemoryReport, TensorReport};

    fn tensor(enc: &str, place: &str, bytes: u64) -> TensorReport {
        TensorReport {
            name: "t".into(),
            encoding: enc.into(),
            placement: place.into(),
            bytes,
        }
    }

    #[test]
    fn parts_group_weights_and_rate_the_kv_cache() {
        let model = ModelReport {
            device: "gpu (x, Vulkan)".into(),
            backend: BackendKind::Gpu,
            memory: MemoryReport {
                tensors: vec![
                    tensor("q4_1", "resident", 100),
                    tensor("q8_0", "resident", 50),
                    tensor("q4_1", "resident", 20),
                    tensor("neuzip(bf16)", "jit", 7),
                ],
                jit_scratch_bytes: 4096,
                ..MemoryReport::default()
            },
            activation_plan: Default::default(),
        };
        let s = SessionReport {
            backend: tern_engine::BackendKind::Cpu,
            max_memory: None,
            kv: tern_engine::KvSpec {
                quant: tern_engine::KvQuant::F32,
                ..Default::default()
            },
            numerics: tern_engine::Numerics::Model,
            n_ctx: 10,
            kv_bytes: 4000,
            kv_bytes_per_token: 400,
            scratch_bytes: Some(99),
            dispatches_per_token: None,
        };
        let p = memory_parts(&model, Some(&s), 200);
        let labels: Vec<_> = p.iter().map(|p| (p.label.as_str(), p.bytes)).collect();
        assert_eq!(
            labels,
            vec![
                ("weights neuzip(bf16) (jit)", Some(7)),
                ("weights q4_1 (resident)", Some(120)),
                ("weights q8_0 (resident)", Some(50)),
                ("just-in-time scratch", Some(4096)),
                ("KV cache", Some(4000)),
                ("activations", Some(99)),
            ]
        );
        assert_eq!(p[4].note, "f32 (2.00x the bytes of f16)");
        // The CPU reports no scratch or activations: those bars say so instead of showing 0.
        let cpu = ModelReport {
            backend: BackendKind::Cpu,
            ..model
        };
        let p = memory_parts(&cpu, None, 200);
        assert_eq!(p[3].bytes, None);
        assert_eq!(p[4].bytes, None);
    }

    #[test]
    fn each_reply_is_its_own_decode_line() {
        let mut t = Throughput::default();
        t.begin_run();
        t.push(Phase::Decode, 10.0);
        t.push(Phase::Decode, 11.0);
        t.begin_run();
        t.begin_run();
        t.push(Phase::Decode, 12.0);
        let runs = t.decode_runs();
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[0].len(), 2);
        assert_eq!(runs[1][0][1], 12.0);
    }

    #[test]
    fn throughput_keeps_series_apart() {
        let mut t = Throughput::default();
        t.push(Phase::Prefill, 100.0);
        t.push(Phase::Decode, 10.0);
        t.push(Phase::Decode, f64::NAN);
        assert_eq!(t.prefill.len(), 1);
        assert_eq!(t.decode.len(), 1);
        assert_eq!(t.decode[0][1], 10.0);
    }

    #[test]
    fn bytes_read_well() {
        assert_eq!(human_bytes(17), "17 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
