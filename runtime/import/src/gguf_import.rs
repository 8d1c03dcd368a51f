//! GGUF → `.tern`: float tensors per `--floats`, ggml blocks kept as they are, ternary types
//! (TQ1_0, TQ2_0, I2_S, and float weights of BitNet models) re-laid into tern's ternary layouts.

use std::path::Path;

use half::f16;
use tern_format::ggml;
use tern_format::{Arch, Encoding, FloatType, TernWriter};

use crate::error::{ImportError, Result};
use crate::gguf::{GgmlType, GgufFile, GgufTensorInfo};
use crate::pack::{encode_float, encode_ternary, PackOptions, Progress};

/// Linear weights that BitNet runs as ternary × int8.
fn is_bitnet_linear(name: &str) -> bool {
    name.starts_with("blk.")
        && [
            ".attn_q.weight",
            ".attn_k.weight",
            ".attn_v.weight",
            ".attn_output.weight",
            ".ffn_gate.weight",
            ".ffn_up.weight",
            ".ffn_down.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s))
}

fn unsupported(t: &GgufTensorInfo) -> ImportError {
    ImportError::UnsupportedGgufType {
        name: t.name.clone(),
        ty: t.type_id,
        type_name: t.ggml_type.name().to_string(),
    }
}

/// Trits and scales of a ternary GGUF tensor: `(trits, group, scale_type, scales)`.
/// TQ1_0/TQ2_0 carry one f16 `d` per 256-element block: when all blocks of the tensor share one
/// value (a real BitNet export), tern stores a single f32 scale; otherwise one f16 per 256 (exact).
fn ternary_of(
    t: &GgufTensorInfo,
    bytes: &[u8],
) -> Result<Option<(Vec<i8>, u32, FloatType, Vec<f32>)>> {
    let n = usize::try_from(t.n_elements())
        .map_err(|_| ImportError::Gguf(format!("tensor {:?} too large", t.name)))?;
    let (trits, d): (Vec<i8>, Vec<f32>) = match t.ggml_type {
        GgmlType::TQ1_0 => {
            let (tr, d) = ggml::tq1_0_to_trits(bytes, n)?;
            (tr, d.iter().map(|x| x.to_f32()).collect())
        }
        GgmlType::TQ2_0 => {
            let (tr, d) = ggml::tq2_0_to_trits(bytes, n)?;
            (tr, d.iter().map(|x| x.to_f32()).collect())
        }
        GgmlType::I2_S => {
            let (tr, s) = ggml::i2s_to_trits(bytes, n)?;
            return Ok(Some((tr, 0, FloatType::F32, vec![s])));
        }
        _ => return Ok(None),
    };
    if d.windows(2).all(|w| w[0].to_bits() == w[1].to_bits()) {
        Ok(Some((
            trits,
            0,
            FloatType::F32,
            vec![d.first().copied().unwrap_or(0.0)],
        )))
    } else {
        // one f16 `d` per TQ1_0/TQ2_0 block (both QK_K = 256 elements)
        let group = ggml::QK_K as u32;
        Ok(Some((trits, group, FloatType::F16, d)))
    }
}

/// Decode a tensor (for `tern inspect --verify` on GGUF files).
pub fn decode_check(t: &GgufTensorInfo, bytes: &[u8]) -> Result<()> {
    let n = usize::try_from(t.n_elements())
        .map_err(|_| ImportError::Gguf(format!("tensor {:?} too large", t.name)))?;
    match t.ggml_type {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Ok(()),
        GgmlType::TQ1_0 | GgmlType::TQ2_0 | GgmlType::I2_S => ternary_of(t, bytes).map(|_| ()),
        other => match other.block_type() {
            Some(bt) => ggml::dequantize(bt, bytes, n)
                .map(|_| ())
                .map_err(Into::into),
            None => Err(unsupported(t)),
        },
    }
}

/// Import a GGUF file into a `.tern` file at `out`. Tensors are converted one at a time (the
/// source is memory-mapped; the writer streams).
pub fn import_gguf(
    path: &Path,
    out: &Path,
    opts: &PackOptions,
    progress: Progress,
) -> Result<tern_format::ModelMeta> {
    crate::check_output(path, out)?;
    crate::write_via_part(out, |part| import_gguf_to(path, part, opts, progress))
}

fn import_gguf_to(
    path: &Path,
    out: &Path,
    opts: &PackOptions,
    progress: Progress,
) -> Result<tern_format::ModelMeta> {
    let g = GgufFile::open(path)?;
    let mut meta = crate::gguf_meta::model_meta(&g, opts.activations)?;
    meta.provenance.source_name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    meta.provenance.source_hash = Some(format!("{:016x}", tern_format::hash_file(path)?));
    meta.provenance.packer = format!("tern {}", env!("CARGO_PKG_VERSION"));
    meta.provenance.options = opts.describe();
    let arch = meta.arch;
    // Per-tensor `*.scale` tensors (upstream llama.cpp BitNet exports) are folded into the scales.
    let scale_of = |weight: &str| -> Result<Option<f32>> {
        let Some(base) = weight.strip_suffix(".weight") else {
            return Ok(None);
        };
        let Some(s) = g.tensor(&format!("{base}.scale")) else {
            return Ok(None);
        };
        let b = g.tensor_bytes(s)?;
        match (s.ggml_type, s.n_elements()) {
            (GgmlType::F32, 1) if b.len() == 4 => {
                Ok(Some(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            }
            (GgmlType::F16, 1) if b.len() == 2 => {
                Ok(Some(f16::from_le_bytes([b[0], b[1]]).to_f32()))
            }
            _ => Err(ImportError::Gguf(format!(
                "scale tensor {:?} must be one f32/f16",
                s.name
            ))),
        }
    };
    crate::pack::check_meta(&meta)?;
    let mut w = TernWriter::create(out, meta.clone())?;
    let todo: Vec<&GgufTensorInfo> = g
        .tensors()
        .iter()
        .filter(|t| !t.name.ends_with(".scale"))
        .collect();
    let total = todo.len();
    for (i, t) in todo.into_iter().enumerate() {
        progress(i, total, &t.name);
        let bytes = g.tensor_bytes(t)?;
        let shape = t.shape();
        let ternary_weight = arch == Arch::Bitnet && is_bitnet_linear(&t.name);
        if let Some((trits, group, mut st, mut scales)) = ternary_of(t, bytes)? {
            if let Some(s) = scale_of(&t.name)? {
                scales.iter_mut().for_each(|x| *x *= s);
                if group != 0 {
                    st = FloatType::F32; // products of two f16 values need f32
                }
            }
            let (enc, b) = encode_ternary(opts, &shape, &trits, group, st, &scales)?;
            w.add_tensor(&t.name, &shape, enc, &b)?;
            continue;
        }
        let float = match t.ggml_type {
            GgmlType::F32 => Some(FloatType::F32),
            GgmlType::F16 => Some(FloatType::F16),
            GgmlType::BF16 => Some(FloatType::Bf16),
            _ => None,
        };
        match (float, t.ggml_type) {
            (Some(dt), _) if ternary_weight => {
                // A float BitNet weight: ternarize with absmean (BitNet b1.58's weight quantizer).
                let vals = Encoding::from(dt).decode_f32(&shape, bytes)?;
                let (trits, alpha) =
                    crate::pack::ternarize_master(&t.name, &vals, scale_of(&t.name)?)?;
                let (enc, b) = encode_ternary(opts, &shape, &trits, 0, FloatType::F32, &[alpha])?;
                w.add_tensor(&t.name, &shape, enc, &b)?;
            }
            (Some(dt), _) => {
                let (enc, b) = encode_float(opts, dt, &shape, bytes)?;
                w.add_tensor(&t.name, &shape, enc, &b)?;
            }
            // ggml blocks tern keeps as they are (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K)
            (None, gt) => match gt.block_type().and_then(Encoding::from_ggml_block) {
                Some(enc) => w.add_tensor(&t.name, &shape, enc, bytes)?,
                None => return Err(unsupported(t)),
            },
        }
    }
    progress(total, total, "");
    w.finish()?;
    Ok(meta)
}
