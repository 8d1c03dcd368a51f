//! Hugging Face safetensors import (`tern_import::hf`) on the committed checkpoints of
//! `tests/golden/bitnet_hf` (made by its `make_golden.py` with transformers), and on broken copies
//! of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tern_format::{
    ActivationScheme, Arch, Encoding, FfnAct, FloatType, TernFile, TernaryLayout, TokenizerKind,
};
use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_import::ImportError;
use tern_tests::{golden, scratch};

const LINEARS: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

fn import(dir: &Path, scratch_name: &str) -> tern_import::Result<(TernFile, PathBuf)> {
    import_with(dir, scratch_name, &PackOptions::default())
}

fn import_with(
    dir: &Path,
    scratch_name: &str,
    opts: &PackOptions,
) -> tern_import::Result<(TernFile, PathBuf)> {
    let out = scratch(scratch_name).join("model.tern");
    let mut calls = 0usize;
    let mut progress = |_: usize, _: usize, _: &str| calls += 1;
    let meta = import_hf_dir(dir, &out, opts, &mut progress)?;
    assert!(calls > 0, "progress never called");
    let f = TernFile::open(&out).expect("open imported file");
    f.verify().expect("verify imported file");
    assert_eq!(f.meta(), &meta, "returned metadata differs from the file's");
    Ok((f, out))
}

// ------------------------------------------------------------------------------------------------
// A minimal safetensors reader/writer (format: u64 header length, JSON header, data), so the tests
// can read sources and write broken copies without another dependency.

#[derive(Clone)]
struct StTensor {
    dtype: String,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn read_st(path: &Path) -> BTreeMap<String, StTensor> {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let data = &b[8 + n..];
    let mut out = BTreeMap::new();
    for (k, v) in header.as_object().unwrap() {
        if k == "__metadata__" {
            continue;
        }
        let off = v["data_offsets"].as_array().unwrap();
        let (s, e) = (
            off[0].as_u64().unwrap() as usize,
            off[1].as_u64().unwrap() as usize,
        );
        let shape = v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        out.insert(
            k.clone(),
            StTensor {
                dtype: v["dtype"].as_str().unwrap().to_string(),
                shape,
                data: data[s..e].to_vec(),
            },
        );
    }
    out
}

fn write_st(path: &Path, tensors: &BTreeMap<String, StTensor>) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (k, t) in tensors {
        let start = data.len();
        data.extend_from_slice(&t.data);
        header.insert(
            k.clone(),
            json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    std::fs::write(path, out).unwrap();
}

fn to_f32(t: &StTensor) -> Vec<f32> {
    match t.dtype.as_str() {
        "F32" => t
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        "BF16" => t
            .data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        "F16" => t
            .data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        d => panic!("dtype {d}"),
    }
}

/// Copy a golden HF directory into a scratch directory (to break it).
fn copy_dir(src: &Path, name: &str) -> PathBuf {
    let d = scratch(name).join("model");
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, d.join(p.file_name().unwrap())).unwrap();
    }
    d
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

// ------------------------------------------------------------------------------------------------

/// Trits and the per-tensor scale of an imported ternary tensor (decoded values are `t · alpha`).
fn tern_trits(f: &TernFile, name: &str) -> (Vec<i8>, f32) {
    let v = f.tensor(name).unwrap();
    assert!(
        matches!(
            v.info.encoding,
            Encoding::Ternary {
                group: 0,
                scale_type: FloatType::F32,
                ..
            }
        ),
        "{name}: {:?}",
        v.info.encoding
    );
    let vals = v.to_f32().unwrap();
    let alpha = vals.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(alpha > 0.0, "{name}: all zero");
    let trits = vals
        .iter()
        .map(|&x| {
            assert!(
                x == 0.0 || x.abs() == alpha,
                "{name}: value {x} is not 0 or ±{alpha}"
            );
            (x / alpha) as i8
        })
        .collect();
    (trits, alpha)
}

/// BitNet b1.58's absmean ternarization written out plainly (f64 mean, round half to even).
fn absmean(w: &[f32]) -> (Vec<i8>, f32) {
    let mean = (w.iter().map(|x| f64::from(x.abs())).sum::<f64>() / w.len() as f64) as f32;
    let alpha = mean.max(1e-5);
    let s = 1.0 / alpha; // transformers: `(w * (1 / alpha)).round().clamp(-1, 1)`
    (
        w.iter()
            .map(|x| (x * s).round_ties_even().clamp(-1.0, 1.0) as i8)
            .collect(),
        alpha,
    )
}

fn expected_names(n_layer: usize, tied: bool, sub_norms: bool) -> Vec<String> {
    let mut v = vec![
        "token_embd.weight".to_string(),
        "output_norm.weight".to_string(),
    ];
    if !tied {
        v.push("output.weight".into());
    }
    for i in 0..n_layer {
        for s in ["attn_norm", "ffn_norm"].iter().chain(LINEARS.iter()) {
            v.push(format!("blk.{i}.{s}.weight"));
        }
        if sub_norms {
            v.push(format!("blk.{i}.attn_sub_norm.weight"));
            v.push(format!("blk.{i}.ffn_sub_norm.weight"));
        }
    }
    v.sort();
    v
}

fn names(f: &TernFile) -> Vec<String> {
    let mut v: Vec<String> = f.tensors().iter().map(|t| t.name.clone()).collect();
    v.sort();
    v
}

fn shape_of(f: &TernFile, name: &str) -> Vec<u64> {
    f.tensor(name).unwrap().info.shape.clone()
}

#[test]
fn bitnet_bf16_masters_tied() {
    let dir = golden("bitnet_hf/tiny_a");
    let (f, _) = import(&dir, "hf_tiny_a").unwrap();
    let m = f.meta();
    assert_eq!(m.arch, Arch::Bitnet);
    let h = &m.hparams;
    assert_eq!(
        (
            h.n_vocab,
            h.n_embd,
            h.n_layer,
            h.n_head,
            h.n_head_kv,
            h.head_dim,
            h.n_ff
        ),
        (256, 64, 2, 4, 2, 16, 160)
    );
    assert_eq!((h.n_ctx_train, h.rope_dim), (128, 16));
    assert_eq!(h.rope_theta, 500000.0);
    assert!(h.rope_neox && h.tied_embeddings && h.sub_norms);
    assert_eq!(h.rms_eps, 1e-5);
    assert_eq!(h.ffn_act, FfnAct::Relu2);
    assert_eq!(m.activations, ActivationScheme::A8);
    assert!(m.tokenizer.is_none());
    assert_eq!(m.provenance.source_format, "safetensors");
    assert_eq!(
        m.provenance
            .source_hash
            .as_deref()
            .unwrap()
            .split('+')
            .count(),
        2,
        "config.json + one shard"
    );
    assert_eq!(
        m.provenance.options.get("ternary").map(String::as_str),
        Some("2bit")
    );

    assert_eq!(names(&f), expected_names(2, true, true));
    assert_eq!(shape_of(&f, "token_embd.weight"), [256, 64]);
    assert_eq!(shape_of(&f, "blk.0.attn_q.weight"), [64, 64]);
    assert_eq!(shape_of(&f, "blk.1.attn_k.weight"), [32, 64]);
    assert_eq!(shape_of(&f, "blk.1.attn_v.weight"), [32, 64]);
    assert_eq!(shape_of(&f, "blk.0.attn_output.weight"), [64, 64]);
    assert_eq!(shape_of(&f, "blk.0.ffn_gate.weight"), [160, 64]);
    assert_eq!(shape_of(&f, "blk.0.ffn_down.weight"), [64, 160]);
    assert_eq!(shape_of(&f, "blk.0.attn_sub_norm.weight"), [64]);
    assert_eq!(shape_of(&f, "blk.0.ffn_sub_norm.weight"), [160]);
    for t in f.tensors() {
        let lin = LINEARS
            .iter()
            .any(|l| t.name.ends_with(&format!(".{l}.weight")));
        if lin {
            assert_eq!(
                t.encoding,
                Encoding::Ternary {
                    layout: TernaryLayout::Bits2,
                    group: 0,
                    scale_type: FloatType::F32
                },
                "{}",
                t.name
            );
        } else {
            assert_eq!(
                t.encoding,
                Encoding::Bf16,
                "{}: float tensors keep their dtype",
                t.name
            );
        }
    }

    // Float tensors are bit-exact copies; ternary ones equal absmean recomputed from the masters.
    let src = read_st(&dir.join("model.safetensors"));
    let v = f.tensor("blk.1.ffn_sub_norm.weight").unwrap();
    assert_eq!(
        v.bytes,
        &src["model.layers.1.mlp.ffn_sub_norm.weight"].data[..]
    );
    let v = f.tensor("token_embd.weight").unwrap();
    assert_eq!(v.bytes, &src["model.embed_tokens.weight"].data[..]);
    for (tern, hf) in [
        (
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"),
    ] {
        let (t, a) = tern_trits(&f, tern);
        let (t2, a2) = absmean(&to_f32(&src[hf]));
        assert!((a - a2).abs() <= 1e-6 * a2, "{tern}: alpha {a} vs {a2}");
        assert_eq!(t, t2, "{tern}: trits differ from absmean");
        assert!(
            t.iter().any(|&x| x == 1) && t.iter().any(|&x| x == -1) && t.iter().any(|&x| x == 0)
        );
    }
}

/// The offline (packed uint8 + weight_scale) form made by transformers' `pack_weights` from
/// tiny_a's masters unpacks to the same trits that tern's absmean gives from the masters, and to
/// the bf16-rounded scale.
#[test]
fn bitnet_packed_equals_masters() {
    let (fm, _) = import(&golden("bitnet_hf/tiny_a"), "hf_tiny_a_m").unwrap();
    let (fp, _) = import(&golden("bitnet_hf/tiny_a_packed"), "hf_tiny_a_p").unwrap();
    assert_eq!(fm.meta().hparams, fp.meta().hparams);
    assert_eq!(names(&fm), names(&fp));
    assert_eq!(
        fp.meta()
            .extra
            .get("bitnet_weights")
            .and_then(Value::as_str),
        Some("packed")
    );
    let src = read_st(&golden("bitnet_hf/tiny_a_packed/model.safetensors"));
    let mut n = 0;
    for i in 0..2 {
        for (l, hf) in LINEARS.iter().zip([
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ]) {
            let name = format!("blk.{i}.{l}.weight");
            let (tm, am) = tern_trits(&fm, &name);
            let (tp, ap) = tern_trits(&fp, &name);
            assert_eq!(
                tm, tp,
                "{name}: packed trits differ from the masters' absmean"
            );
            let ws = to_f32(&src[&format!("model.layers.{i}.{hf}.weight_scale")])[0];
            assert_eq!(
                ap, ws,
                "{name}: scale is weight_scale (autobitlinear multiplies)"
            );
            assert!((ap - am).abs() <= am / 256.0, "{name}: {ap} vs {am}");
            n += 1;
        }
    }
    assert_eq!(n, 14);
    for name in [
        "token_embd.weight",
        "blk.0.attn_norm.weight",
        "output_norm.weight",
    ] {
        assert_eq!(
            fm.tensor(name).unwrap().bytes,
            fp.tensor(name).unwrap().bytes,
            "{name}"
        );
    }
}

/// transformers' own WeightQuant trits (dumped by make_golden.py) equal tern's.
#[test]
fn bitnet_f32_masters_untied_odd_sizes() {
    let dir = golden("bitnet_hf/tiny_b");
    let (f, _) = import(&dir, "hf_tiny_b").unwrap();
    let h = &f.meta().hparams;
    assert_eq!(
        (
            h.n_vocab,
            h.n_embd,
            h.n_head,
            h.n_head_kv,
            h.head_dim,
            h.n_ff
        ),
        (300, 72, 4, 2, 18, 100)
    );
    assert!(!h.tied_embeddings);
    assert_eq!(h.rope_theta, 10000.0);
    assert_eq!(h.rms_eps, 1e-6);
    assert_eq!(names(&f), expected_names(2, false, true));
    assert_eq!(shape_of(&f, "output.weight"), [300, 72]);
    assert_eq!(
        f.tensor("output.weight").unwrap().info.encoding,
        Encoding::F32,
        "lm_head stays float"
    );
    assert_eq!(shape_of(&f, "blk.0.attn_k.weight"), [36, 72]);
    assert_eq!(shape_of(&f, "blk.0.ffn_down.weight"), [72, 100]);
    let golden_trits: Value =
        serde_json::from_str(&std::fs::read_to_string(golden("bitnet_hf/trits.json")).unwrap())
            .unwrap();
    for (tern, hf) in [
        (
            "blk.0.attn_k.weight",
            "model.layers.0.self_attn.k_proj.weight",
        ),
        (
            "blk.1.ffn_down.weight",
            "model.layers.1.mlp.down_proj.weight",
        ),
    ] {
        let g = &golden_trits["ternarized"][hf];
        let gt: Vec<i8> = g["trits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap() as i8)
            .collect();
        let ga = g["alpha"].as_f64().unwrap() as f32;
        let (t, a) = tern_trits(&f, tern);
        assert_eq!(t, gt, "{tern}: trits differ from transformers' WeightQuant");
        assert!(
            (a - ga).abs() <= 1e-6 * ga,
            "{tern}: alpha {a} vs transformers {ga}"
        );
    }
}

#[test]
fn llama_f16_with_tokenizer() {
    let dir = golden("bitnet_hf/llama_tiny");
    let (f, _) = import(&dir, "hf_llama_tiny").unwrap();
    let m = f.meta();
    assert_eq!(m.arch, Arch::Llama);
    assert_eq!(m.activations, ActivationScheme::FLOAT);
    let h = &m.hparams;
    assert_eq!(
        (
            h.n_vocab,
            h.n_embd,
            h.n_head,
            h.n_head_kv,
            h.head_dim,
            h.n_ff
        ),
        (320, 48, 6, 2, 8, 96)
    );
    assert!(h.rope_neox && h.tied_embeddings && !h.sub_norms);
    assert_eq!(h.ffn_act, FfnAct::Silu);
    assert_eq!(names(&f), expected_names(2, true, false));
    for t in f.tensors() {
        assert_eq!(
            t.encoding,
            Encoding::F16,
            "{}: llama tensors stay float",
            t.name
        );
    }
    let src = read_st(&dir.join("model.safetensors"));
    assert_eq!(
        f.tensor("blk.1.attn_k.weight").unwrap().bytes,
        &src["model.layers.1.self_attn.k_proj.weight"].data[..],
        "q/k kept in HF (NeoX) order"
    );

    let tok = m.tokenizer.as_ref().expect("tokenizer.json was imported");
    let tj: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    assert_eq!(tok.kind, TokenizerKind::Gpt2);
    assert_eq!(
        tok.pre.as_deref(),
        Some("smollm"),
        "Digits(individual) + ByteLevel is llama.cpp's smollm"
    );
    assert_eq!(tok.tokens.len(), 320, "padded to vocab_size");
    assert_eq!(tok.token_types.len(), 320);
    let vocab = tj["model"]["vocab"].as_object().unwrap();
    for (text, id) in vocab {
        assert_eq!(&tok.tokens[id.as_u64().unwrap() as usize], text);
    }
    let n_real = vocab.len();
    assert!(n_real < 320);
    assert_eq!(
        &tok.tokens[n_real..]
            .iter()
            .filter(|t| t.starts_with("[PAD"))
            .count(),
        &(320 - n_real)
    );
    assert!(tok.token_types[n_real..].iter().all(|&t| t == 5));
    assert_eq!(
        &tok.tokens[..3],
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    );
    assert_eq!(&tok.token_types[..4], [3, 3, 3, 1]);
    let merges = tj["model"]["merges"].as_array().unwrap();
    assert_eq!(tok.merges.len(), merges.len());
    for (a, b) in tok.merges.iter().zip(merges) {
        let want = match b {
            Value::String(s) => s.clone(),
            Value::Array(p) => format!("{} {}", p[0].as_str().unwrap(), p[1].as_str().unwrap()),
            _ => panic!(),
        };
        assert_eq!(a, &want);
    }
    assert_eq!(
        (tok.bos, tok.eos, tok.unk, tok.pad, tok.eot),
        (Some(1), Some(2), Some(0), Some(0), Some(2))
    );
    assert!(!tok.add_bos && !tok.add_eos);
    assert!(tok
        .chat_template
        .as_deref()
        .unwrap()
        .contains("<|im_start|>"));
}

/// Shards listed by model.safetensors.index.json give the same file as one model.safetensors.
#[test]
fn sharded_equals_single() {
    let src = golden("bitnet_hf/tiny_b");
    let d = scratch("hf_sharded").join("model");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(src.join("config.json"), d.join("config.json")).unwrap();
    let all = read_st(&src.join("model.safetensors"));
    let (mut s1, mut s2) = (BTreeMap::new(), BTreeMap::new());
    let mut map = serde_json::Map::new();
    for (k, t) in all {
        let second = k.contains("layers.1") || k == "lm_head.weight";
        let file = if second {
            "model-00002-of-00002.safetensors"
        } else {
            "model-00001-of-00002.safetensors"
        };
        map.insert(k.clone(), json!(file));
        if second {
            s2.insert(k, t)
        } else {
            s1.insert(k, t)
        };
    }
    write_st(&d.join("model-00001-of-00002.safetensors"), &s1);
    write_st(&d.join("model-00002-of-00002.safetensors"), &s2);
    std::fs::write(
        d.join("model.safetensors.index.json"),
        serde_json::to_vec(&json!({"metadata": {}, "weight_map": map})).unwrap(),
    )
    .unwrap();
    let (fs, _) = import(&d, "hf_sharded_out").unwrap();
    let (f1, _) = import(&src, "hf_sharded_single").unwrap();
    assert_eq!(
        fs.meta()
            .provenance
            .source_hash
            .as_deref()
            .unwrap()
            .split('+')
            .count(),
        3
    );
    assert_eq!(fs.tensors().len(), f1.tensors().len());
    for (a, b) in fs.tensors().iter().zip(f1.tensors()) {
        assert_eq!(
            (&a.name, &a.shape, &a.encoding, a.checksum),
            (&b.name, &b.shape, &b.encoding, b.checksum)
        );
    }
}

#[test]
fn activations_option_is_recorded() {
    let opts = PackOptions {
        activations: Some(ActivationScheme::A4_8),
        ..PackOptions::default()
    };
    let (f, _) = import_with(&golden("bitnet_hf/tiny_a_packed"), "hf_a48", &opts).unwrap();
    assert_eq!(f.meta().activations, ActivationScheme::A4_8);
    assert_eq!(
        f.meta()
            .provenance
            .options
            .get("activations")
            .map(String::as_str),
        Some("a4.8")
    );
}

// ------------------------------------------------------------------------------------------------
// Malformed inputs: typed errors, and no output file left behind.

fn import_err(dir: &Path, name: &str) -> ImportError {
    let out = scratch(name).join("model.tern");
    let err = import_hf_dir(dir, &out, &PackOptions::default(), &mut |_, _, _| {})
        .expect_err("import should fail");
    assert!(!out.exists(), "{name}: output left behind");
    assert!(
        !out.with_extension("tern.part").exists(),
        "{name}: partial output left behind"
    );
    err
}

fn hf_msg(e: ImportError) -> String {
    match e {
        ImportError::Hf(m) => m,
        other => panic!("expected ImportError::Hf, got {other:?}"),
    }
}

#[test]
fn missing_config() {
    let d = copy_dir(&golden("bitnet_hf/tiny_a"), "hf_bad_noconfig");
    std::fs::remove_file(d.join("config.json")).unwrap();
    assert!(hf_msg(import_err(&d, "hf_bad_noconfig_out")).contains("config.json"));
}

#[test]
fn bad_json() {
    let d = copy_dir(&golden("bitnet_hf/tiny_a"), "hf_bad_json");
    std::fs::write(d.join("config.json"), "{\"model_type\": \"bitnet\", ").unwrap();
    assert!(hf_msg(import_err(&d, "hf_bad_json_out")).contains("invalid JSON"));
}

#[test]
fn bad_config_fields() {
    let base = golden("bitnet_hf/tiny_a");
    let cases: Vec<(&str, Box<dyn Fn(&mut Value)>, &str)> = vec![
        (
            "nohidden",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("hidden_size");
            }),
            "hidden_size",
        ),
        (
            "strhidden",
            Box::new(|v| v["hidden_size"] = json!("64")),
            "hidden_size",
        ),
        (
            "act",
            Box::new(|v| v["hidden_act"] = json!("gelu")),
            "hidden_act",
        ),
        (
            "ropescale",
            Box::new(|v| v["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0})),
            "rope_scaling",
        ),
        (
            "ropeparams",
            Box::new(|v| v["rope_parameters"] = json!({"rope_type": "yarn", "rope_theta": 1e4})),
            "rope_type",
        ),
        (
            "gqa",
            Box::new(|v| v["num_key_value_heads"] = json!(3)),
            "num_key_value_heads",
        ),
        (
            "bias",
            Box::new(|v| v["attention_bias"] = json!(true)),
            "attention_bias",
        ),
        (
            "quant",
            Box::new(|v| v["quantization_config"]["quant_method"] = json!("gptq")),
            "quant_method",
        ),
        (
            "rmsnorm",
            Box::new(|v| v["quantization_config"]["use_rms_norm"] = json!(true)),
            "use_rms_norm",
        ),
        (
            "offline",
            Box::new(|v| v["quantization_config"]["quantization_mode"] = json!("offline")),
            "packed uint8",
        ),
    ];
    for (name, edit, needle) in cases {
        let d = copy_dir(&base, &format!("hf_badcfg_{name}"));
        edit_config(&d, edit);
        let msg = hf_msg(import_err(&d, &format!("hf_badcfg_{name}_out")));
        assert!(
            msg.contains(needle),
            "{name}: {msg:?} should name {needle:?}"
        );
    }
}

#[test]
fn unsupported_model_type() {
    let d = copy_dir(&golden("bitnet_hf/tiny_a"), "hf_bad_arch");
    edit_config(&d, |v| v["model_type"] = json!("gpt2"));
    match import_err(&d, "hf_bad_arch_out") {
        ImportError::UnsupportedArch(s) => assert!(s.contains("gpt2")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_tensor() {
    let d = copy_dir(&golden("bitnet_hf/tiny_b"), "hf_bad_missing");
    let mut t = read_st(&d.join("model.safetensors"));
    t.remove("model.layers.1.mlp.ffn_sub_norm.weight").unwrap();
    write_st(&d.join("model.safetensors"), &t);
    match import_err(&d, "hf_bad_missing_out") {
        ImportError::MissingTensor(s) => assert_eq!(s, "model.layers.1.mlp.ffn_sub_norm.weight"),
        other => panic!("{other:?}"),
    }
    // The untied head is required too.
    let d = copy_dir(&golden("bitnet_hf/tiny_b"), "hf_bad_missing_head");
    let mut t = read_st(&d.join("model.safetensors"));
    t.remove("lm_head.weight").unwrap();
    write_st(&d.join("model.safetensors"), &t);
    assert!(
        matches!(import_err(&d, "hf_bad_missing_head_out"), ImportError::MissingTensor(s) if s == "lm_head.weight")
    );
}

#[test]
fn wrong_shape_dtype_and_extra_tensor() {
    let base = golden("bitnet_hf/tiny_b");
    // Same bytes, transposed shape.
    let d = copy_dir(&base, "hf_bad_shape");
    let mut t = read_st(&d.join("model.safetensors"));
    t.get_mut("model.layers.0.self_attn.k_proj.weight")
        .unwrap()
        .shape = vec![72, 36];
    write_st(&d.join("model.safetensors"), &t);
    let msg = hf_msg(import_err(&d, "hf_bad_shape_out"));
    assert!(msg.contains("k_proj") && msg.contains("[36, 72]"), "{msg}");
    // Config and tensors disagree.
    let d = copy_dir(&base, "hf_bad_cfgshape");
    edit_config(&d, |v| v["intermediate_size"] = json!(104));
    assert!(hf_msg(import_err(&d, "hf_bad_cfgshape_out")).contains("shape"));
    // Integer where a float is needed.
    let d = copy_dir(&base, "hf_bad_dtype");
    let mut t = read_st(&d.join("model.safetensors"));
    t.get_mut("model.norm.weight").unwrap().dtype = "I32".into();
    write_st(&d.join("model.safetensors"), &t);
    assert!(hf_msg(import_err(&d, "hf_bad_dtype_out")).contains("model.norm.weight"));
    // A bias tern has no place for.
    let d = copy_dir(&base, "hf_bad_extra");
    let mut t = read_st(&d.join("model.safetensors"));
    t.insert(
        "model.layers.0.self_attn.q_proj.bias".into(),
        StTensor {
            dtype: "F32".into(),
            shape: vec![72],
            data: vec![0; 288],
        },
    );
    write_st(&d.join("model.safetensors"), &t);
    assert!(hf_msg(import_err(&d, "hf_bad_extra_out")).contains("q_proj.bias"));
    // Not a safetensors file.
    let d = copy_dir(&base, "hf_bad_st");
    std::fs::write(
        d.join("model.safetensors"),
        b"\x10\0\0\0\0\0\0\0{not json}     ",
    )
    .unwrap();
    hf_msg(import_err(&d, "hf_bad_st_out"));
}

#[test]
fn bad_packed_weights() {
    let base = golden("bitnet_hf/tiny_a_packed");
    // Code 3 is not a trit.
    let d = copy_dir(&base, "hf_bad_code3");
    let mut t = read_st(&d.join("model.safetensors"));
    t.get_mut("model.layers.0.mlp.up_proj.weight").unwrap().data[5] = 0xff;
    write_st(&d.join("model.safetensors"), &t);
    let msg = hf_msg(import_err(&d, "hf_bad_code3_out"));
    assert!(msg.contains("up_proj") && msg.contains("code 3"), "{msg}");
    // Missing weight_scale.
    let d = copy_dir(&base, "hf_bad_noscale");
    let mut t = read_st(&d.join("model.safetensors"));
    t.remove("model.layers.1.self_attn.o_proj.weight_scale")
        .unwrap();
    write_st(&d.join("model.safetensors"), &t);
    assert!(
        matches!(import_err(&d, "hf_bad_noscale_out"), ImportError::MissingTensor(s) if s.ends_with("o_proj.weight_scale"))
    );
    // Packed weights under an "online" config.
    let d = copy_dir(&base, "hf_bad_online");
    edit_config(&d, |v| {
        v["quantization_config"]["quantization_mode"] = json!("online")
    });
    assert!(hf_msg(import_err(&d, "hf_bad_online_out")).contains("U8"));
}

#[test]
fn sharded_index_rejects_paths() {
    let d = copy_dir(&golden("bitnet_hf/tiny_a"), "hf_bad_index");
    std::fs::write(
        d.join("model.safetensors.index.json"),
        r#"{"weight_map": {"model.norm.weight": "../../etc/passwd"}}"#,
    )
    .unwrap();
    assert!(hf_msg(import_err(&d, "hf_bad_index_out")).contains("plain file name"));
}

/// A Llama-3-style tokenizer.json (Split regex + ByteLevel without regex, a TemplateProcessing that
/// adds `<|begin_of_text|>`, merges as [a, b] pairs) and no tokenizer_config.json.
#[test]
fn llama3_style_tokenizer() {
    let d = copy_dir(&golden("bitnet_hf/llama_tiny"), "hf_llama3_tok");
    std::fs::remove_file(d.join("tokenizer_config.json")).unwrap();
    let p = d.join("tokenizer.json");
    let mut tj: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let regex = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    tj["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
    tj["post_processor"] = json!({"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [],
         "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]}}}]});
    let pairs: Vec<Value> = tj["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            Value::String(s) => {
                let (a, b) = s.split_once(' ').unwrap();
                json!([a, b])
            }
            other => other.clone(),
        })
        .collect();
    let want_merges: Vec<String> = pairs
        .iter()
        .map(|p| format!("{} {}", p[0].as_str().unwrap(), p[1].as_str().unwrap()))
        .collect();
    tj["model"]["merges"] = Value::Array(pairs);
    std::fs::write(&p, serde_json::to_vec(&tj).unwrap()).unwrap();
    let (f, _) = import(&d, "hf_llama3_tok_out").unwrap();
    let tok = f.meta().tokenizer.clone().unwrap();
    assert_eq!(tok.pre.as_deref(), Some("llama-bpe"));
    assert!(tok.add_bos && !tok.add_eos);
    assert_eq!(
        tok.bos,
        Some(1),
        "bos from the template (config.json's bos_token_id agrees)"
    );
    assert_eq!(tok.merges, want_merges);
    assert!(tok.chat_template.is_none());

    // A SentencePiece-style BPE (Metaspace, no ByteLevel) is refused by name.
    tj["pre_tokenizer"] = json!({"type": "Metaspace", "replacement": "\u{2581}"});
    tj["decoder"] = json!({"type": "Metaspace"});
    std::fs::write(&p, serde_json::to_vec(&tj).unwrap()).unwrap();
    assert!(hf_msg(import_err(&d, "hf_spm_tok_out")).contains("ByteLevel"));
}

/// The imported tokenizer spec, run by tern's tokenizer, splits text as HF `tokenizers` did
/// (samples dumped by make_golden.py): checks the Digits+ByteLevel → "smollm" mapping, the token
/// table and the merge ranks end to end.
#[test]
fn imported_tokenizer_matches_hf_tokenizers() {
    let (f, _) = import(&golden("bitnet_hf/llama_tiny"), "hf_llama_tok_run").unwrap();
    let tok =
        tern_engine::tokenizer::Tokenizer::from_spec(f.meta().tokenizer.as_ref().unwrap()).unwrap();
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(golden("bitnet_hf/trits.json")).unwrap())
            .unwrap();
    let samples = g["tokenizer_samples"].as_object().unwrap();
    assert!(samples.len() >= 3);
    for (text, ids) in samples {
        let want: Vec<u32> = ids
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text, false).unwrap(), want, "{text:?}");
    }
}
