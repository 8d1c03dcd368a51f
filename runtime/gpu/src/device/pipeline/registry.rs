//! The kernel registry, derived from the typed key: each [`KernelKey`] names its shader
//! ([`KernelKey::shader`], in `pipeline.rs`), its label (`Display`), its `override` constants
//! ([`KernelKey::constants`], computed from the key's typed parts, never restated numbers) and
//! [`KernelKey::all`] enumerates every key a launcher may ask for (the registry test in
//! `tests.rs` compiles each one with naga).

use tern_format::{FloatType, TernaryLayout};

use super::{ActBits, DotKind, EltOp, GemmTile, GgmlType, KernelKey, KvFormat, KvRole};
use crate::error::{GpuError, Result};

/// One override constant of a pipeline (WGSL name, value).
pub type Constant = (&'static str, f64);

/// `LAYOUT` of the ternary kernels.
fn layout_id(l: TernaryLayout) -> f64 {
    match l {
        TernaryLayout::Bits2 => 0.0,
        TernaryLayout::Base3 => 1.0,
    }
}

/// `SCALE_TYPE` / `DTYPE` / float `SRC` / float `HEAD` order: f32, f16, bf16.
fn float_id(t: FloatType) -> f64 {
    match t {
        FloatType::F32 => 0.0,
        FloatType::F16 => 1.0,
        FloatType::Bf16 => 2.0,
    }
}

/// `ACT4`: 0 INT8, 1 INT4 (2: the TopK prologue, see `TernaryGemvDecNorm`).
fn act_id(a: ActBits) -> f64 {
    match a {
        ActBits::Int8 => 0.0,
        ActBits::Int4 => 1.0,
    }
}

/// `DOT`: 1 `dot4I8Packed`, 0 byte by byte.
fn dot_id(d: DotKind) -> f64 {
    match d {
        DotKind::Packed => 1.0,
        DotKind::Plain => 0.0,
    }
}

/// `MC`: 0 a layer of its own, 1 / 2 the first / second layer of a MiniCache pair.
fn role_id(r: KvRole) -> f64 {
    match r {
        KvRole::Own => 0.0,
        KvRole::First => 1.0,
        KvRole::Second => 2.0,
    }
}

/// `FMT` of the KV kernels: the format's one index.
fn fmt(kv: KvFormat) -> Constant {
    ("FMT", f64::from(kv.index()))
}

/// `STAGE` of `kv_store.wgsl` (0 whole rows, 1 / 2 KIVI key blocks / values leaving the window,
/// 3 the KIVI f16 window, 4 / 5 the one-token forms of 1 / 2).
fn kivi_stage(keys: bool, step: bool) -> f64 {
    let base = if keys { 1.0 } else { 2.0 };
    if step {
        base + 3.0
    } else {
        base
    }
}

/// Positions per workgroup of the fused CCE pass → its (`TY`, `R`).
fn cce_tile(bp: u32) -> Option<[Constant; 2]> {
    match bp {
        128 => Some([("TY", 16.0), ("R", 2.0)]),
        64 => Some([("TY", 16.0), ("R", 1.0)]),
        16 => Some([("TY", 4.0), ("R", 1.0)]),
        _ => None,
    }
}

/// Positions per workgroup of the fused CCE pass a launcher may ask for.
const CCE_POSITIONS: [u32; 3] = [128, 64, 16];
const FLOATS: [FloatType; 3] = [FloatType::F32, FloatType::F16, FloatType::Bf16];
const LAYOUTS: [TernaryLayout; 2] = [TernaryLayout::Bits2, TernaryLayout::Base3];
const ACTS: [ActBits; 2] = [ActBits::Int8, ActBits::Int4];
const DOTS: [DotKind; 2] = [DotKind::Packed, DotKind::Plain];
const ROLES: [KvRole; 3] = [KvRole::Own, KvRole::First, KvRole::Second];

impl KernelKey {
    /// The `override` constants of this key's pipeline; an error for a key outside
    /// [`KernelKey::all`] (a combination no kernel is compiled for).
    pub fn constants(self) -> Result<Vec<Constant>> {
        let none = || GpuError::Wgpu {
            what: self.to_string(),
            detail: "no such kernel variant (not in KernelKey::all)".into(),
        };
        let qtype = |t: GgmlType| t.gpu_qtype().map(f64::from).ok_or_else(none);
        Ok(match self {
            KernelKey::TernaryGemv {
                layout,
                scale_type,
                act,
                dot,
            }
            | KernelKey::TernaryGemvWide {
                layout,
                scale_type,
                act,
                dot,
            } => vec![
                ("LAYOUT", layout_id(layout)),
                ("SCALE_TYPE", float_id(scale_type)),
                ("TPR", 32.0),
                ("ACT4", act_id(act)),
                ("DOT", dot_id(dot)),
            ],
            KernelKey::TernaryGemvDec {
                scale_type,
                act,
                dot,
            } => vec![
                ("SCALE_TYPE", float_id(scale_type)),
                ("ACT4", act_id(act)),
                ("DOT", dot_id(dot)),
            ],
            KernelKey::TernaryGemvDecNorm {
                scale_type,
                act,
                dot,
                topk,
            } => {
                let act4 = match (topk, act) {
                    (false, a) => act_id(a),
                    (true, ActBits::Int8) => 2.0,
                    (true, ActBits::Int4) => return Err(none()),
                };
                vec![
                    ("SCALE_TYPE", float_id(scale_type)),
                    ("ACT4", act4),
                    ("DOT", dot_id(dot)),
                ]
            }
            KernelKey::TernaryGemvSparse { scale_type, dot } => {
                vec![("SCALE_TYPE", float_id(scale_type)), ("DOT", dot_id(dot))]
            }
            KernelKey::TernaryGemm {
                layout,
                scale_type,
                act,
                dot,
                tile,
                grouped,
            } => {
                if tile != GemmTile::Narrow && layout != TernaryLayout::Bits2 {
                    return Err(none());
                }
                let (s, a, d) = (float_id(scale_type), act_id(act), dot_id(dot));
                let mut c = match tile {
                    GemmTile::Narrow | GemmTile::Wide => {
                        vec![("LAYOUT", layout_id(layout)), ("SCALE_TYPE", s)]
                    }
                    GemmTile::Tall | GemmTile::TallHalf | GemmTile::Coop => {
                        vec![("SCALE_TYPE", s)]
                    }
                };
                c.extend([("ACT4", a), ("DOT", d)]);
                match (tile, grouped) {
                    (GemmTile::Narrow, false) => {}
                    (GemmTile::Wide, false) => c.push(("NJ", 4.0)),
                    (GemmTile::Tall, _) => c.push(("WG", 256.0)),
                    (GemmTile::TallHalf, _) => c.push(("WG", 128.0)),
                    (GemmTile::Coop, _) => {}
                    (GemmTile::Narrow | GemmTile::Wide, true) => return Err(none()),
                }
                if grouped {
                    c.push(("GROUPED", 1.0));
                }
                c
            }
            KernelKey::GgmlGemv(t) => vec![("QTYPE", qtype(t)?), ("TPR", 32.0)],
            KernelKey::GgmlGemvNorm(t) => {
                vec![("QTYPE", qtype(t)?), ("TPR", 8.0), ("NORM", 1.0)]
            }
            KernelKey::GgmlGemm(t) => vec![("QTYPE", qtype(t)?)],
            KernelKey::ActQuantA48 { norm, .. } => vec![("NORM", f64::from(u8::from(norm)))],
            KernelKey::Rope { neox } => vec![("NEOX", f64::from(u8::from(neox)))],
            KernelKey::Elementwise(op) => vec![(
                "OP",
                match op {
                    EltOp::SwiGlu => 0.0,
                    EltOp::Relu2Glu => 1.0,
                    EltOp::Add => 2.0,
                    EltOp::GeGlu => 3.0,
                },
            )],
            KernelKey::RopeKv { quant, neox } if quant.is_rotated() => vec![
                ("NEOX", f64::from(u8::from(neox))),
                fmt(quant),
                ("PASS", 2.0),
            ],
            KernelKey::RopeKv { quant, neox } => {
                vec![("NEOX", f64::from(u8::from(neox))), fmt(quant)]
            }
            KernelKey::RopeKvScales { quant, neox } if quant.is_absmax() => vec![
                ("NEOX", f64::from(u8::from(neox))),
                fmt(quant),
                ("PASS", 1.0),
            ],
            KernelKey::KvStore(kv) if kv.is_rotated() => vec![fmt(kv), ("STAGE", 7.0)],
            KernelKey::KvStore(kv) if !kv.is_kivi() => vec![fmt(kv), ("STAGE", 0.0)],
            KernelKey::KvScales(kv) if kv.is_absmax() => vec![fmt(kv), ("STAGE", 6.0)],
            KernelKey::KvKivi { quant, keys, step } if quant.is_kivi() => {
                vec![fmt(quant), ("STAGE", kivi_stage(keys, step))]
            }
            KernelKey::KvWindow => vec![fmt(KvFormat::F16), ("STAGE", 3.0)],
            KernelKey::Attention(kv, role) => vec![fmt(kv), ("MC", role_id(role))],
            KernelKey::AttentionWords(kv, role) if kv.is_kivi() => {
                vec![fmt(kv), ("MC", role_id(role)), ("WORDS", 1.0)]
            }
            KernelKey::AttentionPrefill(kv @ (KvFormat::F32 | KvFormat::F16)) => vec![fmt(kv)],
            KernelKey::EmbedFloat(t) => vec![("SRC", float_id(t))],
            // embed.wgsl's SRC counts the three float tables first.
            KernelKey::EmbedGgml(t) => vec![("SRC", 3.0 + qtype(t)?)],
            KernelKey::TopK { merge } => vec![("MERGE", f64::from(u8::from(merge)))],
            KernelKey::TopkSample(pass) => vec![("PASS", f64::from(pass.min(2)))],
            KernelKey::FloatGemv(t) => vec![("DTYPE", float_id(t))],
            KernelKey::CceGgml(t, bp) => {
                let mut c = vec![("HEAD", qtype(t)?)];
                c.extend(cce_tile(bp).ok_or_else(none)?);
                c
            }
            // cce.wgsl's HEAD numbers the float heads from 16 (the ggml heads are the table's
            // gpu_qtype, 0..=10).
            KernelKey::CceFloat(t, bp) => {
                let mut c = vec![("HEAD", 16.0 + float_id(t))];
                c.extend(cce_tile(bp).ok_or_else(none)?);
                c
            }
            KernelKey::KvStore(_)
            | KernelKey::KvScales(_)
            | KernelKey::RopeKvScales { .. }
            | KernelKey::KvKivi { .. }
            | KernelKey::AttentionWords(..)
            | KernelKey::AttentionPrefill(_) => return Err(none()),
            KernelKey::ActQuantInt8
            | KernelKey::ActStats
            | KernelKey::NeuzipDecode
            | KernelKey::NeuzipGemv
            | KernelKey::NeuzipEmbed
            | KernelKey::RmsNorm
            | KernelKey::RmsNormQuant
            | KernelKey::BiasScale
            | KernelKey::HeadRmsNorm
            | KernelKey::Argmax
            | KernelKey::QkvSplit
            | KernelKey::MinicacheMerge
            | KernelKey::AttentionCombine
            | KernelKey::CceCombine
            | KernelKey::LogSoftmaxTarget => vec![],
        })
    }

    /// Every key a launcher may ask for: each compiles (the registry test validates all of them
    /// with naga) and its label is unique.
    pub fn all() -> Vec<KernelKey> {
        let mut keys = vec![
            KernelKey::ActQuantInt8,
            KernelKey::ActStats,
            KernelKey::NeuzipDecode,
            KernelKey::NeuzipGemv,
            KernelKey::NeuzipEmbed,
            KernelKey::RmsNorm,
            KernelKey::RmsNormQuant,
            KernelKey::Argmax,
            KernelKey::QkvSplit,
            KernelKey::KvWindow,
            KernelKey::MinicacheMerge,
            KernelKey::AttentionCombine,
            KernelKey::CceCombine,
            KernelKey::LogSoftmaxTarget,
            KernelKey::TopK { merge: false },
            KernelKey::TopK { merge: true },
            KernelKey::TopkSample(0),
            KernelKey::TopkSample(1),
            KernelKey::TopkSample(2),
            KernelKey::Elementwise(EltOp::SwiGlu),
            KernelKey::Elementwise(EltOp::Relu2Glu),
            KernelKey::Elementwise(EltOp::Add),
            KernelKey::Elementwise(EltOp::GeGlu),
            KernelKey::BiasScale,
            KernelKey::HeadRmsNorm,
        ];
        for neox in [false, true] {
            keys.push(KernelKey::Rope { neox });
        }
        for (topk, norm) in [(false, false), (false, true), (true, false), (true, true)] {
            keys.push(KernelKey::ActQuantA48 { topk, norm });
        }
        for (layout, scale_type, act, dot) in LAYOUTS.into_iter().flat_map(|l| {
            FLOATS.into_iter().flat_map(move |s| {
                ACTS.into_iter()
                    .flat_map(move |a| DOTS.into_iter().map(move |d| (l, s, a, d)))
            })
        }) {
            keys.push(KernelKey::TernaryGemv {
                layout,
                scale_type,
                act,
                dot,
            });
            keys.push(KernelKey::TernaryGemvWide {
                layout,
                scale_type,
                act,
                dot,
            });
            for tile in GemmTile::ALL {
                for grouped in [false, true] {
                    keys.push(KernelKey::TernaryGemm {
                        layout,
                        scale_type,
                        act,
                        dot,
                        tile,
                        grouped,
                    });
                }
            }
            if layout == TernaryLayout::Bits2 {
                keys.push(KernelKey::TernaryGemvDec {
                    scale_type,
                    act,
                    dot,
                });
                for topk in [false, true] {
                    keys.push(KernelKey::TernaryGemvDecNorm {
                        scale_type,
                        act,
                        dot,
                        topk,
                    });
                }
                if act == ActBits::Int8 {
                    keys.push(KernelKey::TernaryGemvSparse { scale_type, dot });
                }
            }
        }
        for t in FLOATS {
            keys.push(KernelKey::EmbedFloat(t));
            keys.push(KernelKey::FloatGemv(t));
            for bp in CCE_POSITIONS {
                keys.push(KernelKey::CceFloat(t, bp));
            }
        }
        for t in GgmlType::ALL {
            keys.extend([
                KernelKey::GgmlGemv(t),
                KernelKey::GgmlGemvNorm(t),
                KernelKey::GgmlGemm(t),
                KernelKey::EmbedGgml(t),
            ]);
            for bp in CCE_POSITIONS {
                keys.push(KernelKey::CceGgml(t, bp));
            }
        }
        for kv in KvFormat::ALL {
            keys.push(KernelKey::KvStore(kv));
            keys.push(KernelKey::AttentionPrefill(kv));
            for neox in [false, true] {
                keys.push(KernelKey::RopeKv { quant: kv, neox });
            }
            if kv.is_absmax() {
                keys.push(KernelKey::KvScales(kv));
                for neox in [false, true] {
                    keys.push(KernelKey::RopeKvScales { quant: kv, neox });
                }
            }
            for (k, step) in [(true, false), (false, false), (true, true), (false, true)] {
                keys.push(KernelKey::KvKivi {
                    quant: kv,
                    keys: k,
                    step,
                });
            }
            for role in ROLES {
                keys.push(KernelKey::Attention(kv, role));
                keys.push(KernelKey::AttentionWords(kv, role));
            }
        }
        // The product above, less the combinations no kernel is compiled for.
        keys.retain(|k| k.constants().is_ok());
        keys
    }
}
