//! The registry's tests: the keys a launcher makes are exactly [`KernelKey::all`], each with the
//! override constants it implies; every key compiles with naga (parse, validate, resolve its
//! overrides, validate again, write SPIR-V); labels are unique; the WGSL's KV format names are
//! `KvQuant::index()`.
#![allow(clippy::unwrap_used)] // tests may unwrap

use naga::valid::{Capabilities, ValidationFlags, Validator};

use super::*;

/// The `FMT` override of `kv_store.wgsl` / `attention.wgsl`: the index in `KvQuant::ALL`.
fn kv_fmt_id(q: KvFormat) -> u32 {
    KvFormat::ALL.iter().position(|&x| x == q).unwrap_or(0) as u32
}

fn k_const(k: KernelKey, name: &str) -> Option<u32> {
    let c = k.constants().ok()?;
    c.iter().find(|c| c.0 == name).map(|c| c.1 as u32)
}

/// Every key a launcher can make (listed here by hand) is in the registry, which has no other.
#[test]
fn every_key_has_a_registered_variant() {
    let mut keys = vec![
        KernelKey::ActQuantInt8,
        KernelKey::NeuzipDecode,
        KernelKey::NeuzipGemv,
        KernelKey::NeuzipEmbed,
        KernelKey::RmsNorm,
        KernelKey::RmsNormQuant,
        KernelKey::BiasScale,
        KernelKey::HeadRmsNorm,
        KernelKey::Rope { neox: false },
        KernelKey::Rope { neox: true },
        KernelKey::Argmax,
        KernelKey::QkvSplit,
        KernelKey::AttentionCombine,
        KernelKey::EmbedFloat(FloatType::F32),
        KernelKey::EmbedFloat(FloatType::F16),
        KernelKey::EmbedFloat(FloatType::Bf16),
        KernelKey::TopK { merge: false },
        KernelKey::TopK { merge: true },
        KernelKey::TopkSample(0),
        KernelKey::TopkSample(1),
        KernelKey::TopkSample(2),
        KernelKey::FloatGemv(FloatType::F32),
        KernelKey::FloatGemv(FloatType::F16),
        KernelKey::FloatGemv(FloatType::Bf16),
        KernelKey::CceCombine,
        KernelKey::LogSoftmaxTarget,
        KernelKey::ActStats,
    ];
    for dot in [DotKind::Packed, DotKind::Plain] {
        for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
            for scale_type in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
                for act in [ActBits::Int8, ActBits::Int4] {
                    let (l, s) = (layout, scale_type);
                    keys.push(KernelKey::TernaryGemv {
                        layout: l,
                        scale_type: s,
                        act,
                        dot,
                    });
                    for (tile, grouped) in GemmTile::ALL.map(|t| (t, false)).into_iter().chain([
                        (GemmTile::Tall, true),
                        (GemmTile::TallHalf, true),
                        (GemmTile::Coop, true),
                    ]) {
                        if tile == GemmTile::Narrow || layout == TernaryLayout::Bits2 {
                            keys.push(KernelKey::TernaryGemm {
                                layout: l,
                                scale_type: s,
                                act,
                                dot,
                                tile,
                                grouped,
                            });
                        }
                    }
                    keys.push(KernelKey::TernaryGemvWide {
                        layout: l,
                        scale_type: s,
                        act,
                        dot,
                    });
                    if layout == TernaryLayout::Bits2 {
                        keys.push(KernelKey::TernaryGemvDec {
                            scale_type: s,
                            act,
                            dot,
                        });
                        keys.push(KernelKey::TernaryGemvDecNorm {
                            scale_type: s,
                            act,
                            dot,
                            topk: false,
                        });
                        if act == ActBits::Int8 {
                            keys.push(KernelKey::TernaryGemvDecNorm {
                                scale_type: s,
                                act,
                                dot,
                                topk: true,
                            });
                        }
                    }
                }
            }
        }
        for scale_type in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
            keys.push(KernelKey::TernaryGemvSparse { scale_type, dot });
        }
    }
    for (topk, norm) in [(false, false), (false, true), (true, false), (true, true)] {
        keys.push(KernelKey::ActQuantA48 { topk, norm });
    }
    for bp in [128, 64, 16] {
        for t in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
            keys.push(KernelKey::CceFloat(t, bp));
        }
    }
    for t in GgmlType::ALL
        .into_iter()
        .filter(|t| t.gpu_qtype().is_some())
    {
        keys.push(KernelKey::GgmlGemv(t));
        keys.push(KernelKey::GgmlGemvNorm(t));
        keys.push(KernelKey::GgmlGemm(t));
        keys.push(KernelKey::EmbedGgml(t));
        keys.push(KernelKey::CceGgml(t, 128));
        keys.push(KernelKey::CceGgml(t, 64));
        keys.push(KernelKey::CceGgml(t, 16));
    }
    for kv in KvFormat::ALL {
        for neox in [false, true] {
            let k = KernelKey::RopeKv { quant: kv, neox };
            keys.push(k);
            assert_eq!(k_const(k, "FMT"), Some(kv_fmt_id(kv)), "{kv:?}");
            // the rotated formats' one pass (a workgroup per head unit)
            let pass = kv.is_rotated().then_some(2);
            assert_eq!(k_const(k, "PASS"), pass, "{kv:?}");
        }
        if kv.is_rotated() {
            assert_eq!(k_const(KernelKey::KvStore(kv), "STAGE"), Some(7), "{kv:?}");
        }
        if kv.is_kivi() {
            for (k, st) in [(true, false), (false, false), (true, true), (false, true)] {
                keys.push(KernelKey::KvKivi {
                    quant: kv,
                    keys: k,
                    step: st,
                });
            }
        } else {
            keys.push(KernelKey::KvStore(kv));
        }
        if kv.is_absmax() {
            // the scales pass before the store (kv_store.wgsl STAGE 6, rope_kv.wgsl PASS 1)
            let k = KernelKey::KvScales(kv);
            keys.push(k);
            assert_eq!(k_const(k, "STAGE"), Some(6), "{kv:?}");
            for neox in [false, true] {
                let k = KernelKey::RopeKvScales { quant: kv, neox };
                keys.push(k);
                assert_eq!(k_const(k, "PASS"), Some(1), "{kv:?}");
                assert_eq!(k_const(k, "FMT"), Some(kv_fmt_id(kv)), "{kv:?}");
            }
        }
        for (i, role) in [KvRole::Own, KvRole::First, KvRole::Second]
            .into_iter()
            .enumerate()
        {
            let k = KernelKey::Attention(kv, role);
            keys.push(k);
            assert_eq!(k_const(k, "FMT"), Some(kv_fmt_id(kv)), "{kv:?}");
            assert_eq!(k_const(k, "MC"), Some(i as u32), "{kv:?}");
            if kv.is_kivi() {
                let w = KernelKey::AttentionWords(kv, role);
                keys.push(w);
                assert_eq!(k_const(w, "WORDS"), Some(1), "{kv:?}");
            }
        }
    }
    keys.extend([KvFormat::F32, KvFormat::F16].map(KernelKey::AttentionPrefill));
    keys.push(KernelKey::KvWindow);
    keys.push(KernelKey::MinicacheMerge);
    for op in [EltOp::SwiGlu, EltOp::Relu2Glu, EltOp::Add, EltOp::GeGlu] {
        keys.push(KernelKey::Elementwise(op));
    }
    let all = KernelKey::all();
    for k in &keys {
        assert!(all.contains(k), "{k}");
        let constants = k.constants().unwrap();
        // The block-type override of a ggml kernel is the table's `gpu_qtype` (embed.wgsl's
        // SRC counts the three float tables first).
        let (t, name, base) = match k {
            KernelKey::GgmlGemv(t) | KernelKey::GgmlGemvNorm(t) | KernelKey::GgmlGemm(t) => {
                (Some(*t), "QTYPE", 0)
            }
            KernelKey::EmbedGgml(t) => (Some(*t), "SRC", 3),
            KernelKey::CceGgml(t, _) => (Some(*t), "HEAD", 0),
            _ => (None, "", 0),
        };
        if let Some(t) = t {
            let q = constants.iter().find(|c| c.0 == name).map(|c| c.1 as u32);
            assert_eq!(q, t.gpu_qtype().map(|q| q + base), "{k}");
        }
    }
    assert_eq!(keys.len(), all.len());
    assert_eq!(
        KernelKey::TernaryGemv {
            layout: TernaryLayout::Bits2,
            scale_type: FloatType::F32,
            act: ActBits::Int8,
            dot: DotKind::Packed,
        }
        .to_string(),
        "ternary_gemv_2bit_f32_tpr32"
    );
}

/// The registry test: every key's pipeline, CPU only. Capabilities are WebGPU's defaults (no
/// f16, no subgroups): what every adapter has; the cooperative-matrix kernels (which the
/// context compiles only where the device has them) get those capabilities.
#[test]
fn every_key_compiles_with_naga() {
    let all = KernelKey::all();
    let mut count = 0;
    for shader in Shader::ALL {
        let src = shader.source().unwrap();
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{}: {}", shader.file(), e.emit_to_string(&src)));
        let caps = if shader.needs_coop_matrix() {
            Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP
        } else {
            Capabilities::empty()
        };
        let mut v = Validator::new(ValidationFlags::all(), caps);
        let info = v
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}", shader.file(), e.emit_to_string(&src)));
        let keys: Vec<KernelKey> = all
            .iter()
            .copied()
            .filter(|k| k.shader() == shader)
            .collect();
        assert!(!keys.is_empty(), "{}: no key compiles it", shader.file());
        for key in keys {
            let mut pc = naga::back::PipelineConstants::default();
            for (k, val) in key.constants().unwrap() {
                assert!(
                    module
                        .overrides
                        .iter()
                        .any(|(_, o)| o.name.as_deref() == Some(k)),
                    "{key}: no override named {k}"
                );
                pc.insert(k.to_string(), val);
            }
            let ep = Some((naga::ShaderStage::Compute, shader.entry_point()));
            let (m2, i2) =
                naga::back::pipeline_constants::process_overrides(&module, &info, ep, &pc)
                    .unwrap_or_else(|e| panic!("{key}: overrides: {e}"));
            let mut v2 = Validator::new(ValidationFlags::all(), caps);
            v2.validate(&m2)
                .unwrap_or_else(|e| panic!("{key}: {}", e.emit_to_string(&src)));
            let opts = naga::back::spv::Options::default();
            naga::back::spv::write_vec(&m2, &i2, &opts, None)
                .unwrap_or_else(|e| panic!("{key}: SPIR-V: {e}"));
            count += 1;
        }
    }
    assert_eq!(count, all.len());
}

/// Labels name pipelines in profiles, docs and the cache: one key, one label.
#[test]
fn labels_are_unique() {
    let all = KernelKey::all();
    let mut labels: Vec<String> = all.iter().map(|k| k.to_string()).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), all.len());
    let keys: std::collections::HashSet<KernelKey> = all.iter().copied().collect();
    assert_eq!(keys.len(), all.len());
}

/// A combination no kernel is compiled for is a typed error, not a pipeline.
#[test]
fn a_key_outside_the_registry_is_an_error() {
    for k in [
        KernelKey::KvStore(KvFormat::Kivi4),
        KernelKey::KvKivi {
            quant: KvFormat::F16,
            keys: true,
            step: false,
        },
        KernelKey::AttentionWords(KvFormat::Q8, KvRole::Own),
        KernelKey::AttentionPrefill(KvFormat::Q8),
        KernelKey::CceFloat(FloatType::F32, 32),
        KernelKey::GgmlGemv(GgmlType::Tq2_0),
        KernelKey::TernaryGemm {
            layout: TernaryLayout::Base3,
            scale_type: FloatType::F32,
            act: ActBits::Int8,
            dot: DotKind::Packed,
            tile: GemmTile::Wide,
            grouped: false,
        },
        KernelKey::TernaryGemvDecNorm {
            scale_type: FloatType::F32,
            act: ActBits::Int4,
            dot: DotKind::Packed,
            topk: true,
        },
    ] {
        assert!(k.constants().is_err(), "{k}");
        assert!(!KernelKey::all().contains(&k), "{k}");
    }
}

/// The WGSL names of the KV formats (`kv_formats.wgsl`'s `FMT_*`) are `KvQuant::index()`.
#[test]
fn wgsl_kv_format_names_are_kv_quant_indexes() {
    let (_, text) = tern_shaders::MODULES
        .iter()
        .find(|(n, _)| *n == "kv_formats")
        .unwrap();
    let module = naga::front::wgsl::parse_str(text).unwrap();
    let mut found = 0;
    for (_, c) in module.constants.iter() {
        let Some(name) = c.name.as_deref().and_then(|n| n.strip_prefix("FMT_")) else {
            continue;
        };
        let q = KvFormat::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(name))
            .unwrap_or_else(|| panic!("FMT_{name} names no KvQuant"));
        let naga::Expression::Literal(naga::Literal::U32(v)) = module.global_expressions[c.init]
        else {
            panic!("FMT_{name} is not a u32 literal");
        };
        assert_eq!(v, q.index(), "FMT_{name}");
        found += 1;
    }
    assert_eq!(found, KvFormat::ALL.len());
}
