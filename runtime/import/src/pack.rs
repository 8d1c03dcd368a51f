//! Pack-time choices shared by every importer: how float tensors and ternary tensors are encoded.

use std::borrow::Cow;
use std::collections::BTreeMap;

use tern_format::encoding::full_mantissa_bits;
use tern_format::{neuzip, ternary, ActivationScheme, Encoding, FloatType, TernaryLayout};

use crate::error::{ImportError, Result};

/// How float tensors (embeddings, head, norms) are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatMode {
    /// As they are in the source.
    Raw,
    /// NeuZip, lossless (kept raw where NeuZip would not be smaller, e.g. tiny tensors).
    NeuZip,
    /// NeuZip keeping only this many mantissa bits (3, 1 or 0), round-to-nearest.
    NeuZipLossy(u8),
}

impl std::str::FromStr for FloatMode {
    type Err = ImportError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "raw" => FloatMode::Raw,
            "neuzip" => FloatMode::NeuZip,
            "neuzip-lossy3" => FloatMode::NeuZipLossy(3),
            "neuzip-lossy1" => FloatMode::NeuZipLossy(1),
            "neuzip-lossy0" => FloatMode::NeuZipLossy(0),
            _ => {
                return Err(ImportError::InvalidArgument(format!(
                    "--floats {s:?}: expected raw, neuzip, neuzip-lossy3, neuzip-lossy1 or neuzip-lossy0"
                )))
            }
        })
    }
}

impl FloatMode {
    pub fn name(self) -> String {
        match self {
            FloatMode::Raw => "raw".into(),
            FloatMode::NeuZip => "neuzip".into(),
            FloatMode::NeuZipLossy(k) => format!("neuzip-lossy{k}"),
        }
    }
}

/// Options of `tern pack`.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// Layout of ternary weights.
    pub ternary: TernaryLayout,
    /// Encoding of float tensors.
    pub floats: FloatMode,
    /// Activation scheme of BitNet models (`None`: the architecture's default, b1.58 A8).
    pub activations: Option<ActivationScheme>,
    /// NeuZip layout of new blobs: 2 (default; many short rANS lanes, fast GPU decode) or 1
    /// (fewer, longer lanes: ~1% smaller, slow on a GPU). Both load.
    pub neuzip_layout: u8,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            ternary: TernaryLayout::Bits2,
            floats: FloatMode::Raw,
            activations: None,
            neuzip_layout: neuzip::VERSION,
        }
    }
}

impl PackOptions {
    /// The options as recorded in the provenance metadata.
    pub fn describe(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert(
            "ternary".into(),
            match self.ternary {
                TernaryLayout::Bits2 => "2bit".into(),
                TernaryLayout::Base3 => "base3".into(),
            },
        );
        m.insert("floats".into(), self.floats.name());
        if let Some(a) = self.activations {
            m.insert(
                "activations".into(),
                if a == ActivationScheme::A4_8 {
                    "a4.8".into()
                } else {
                    "a8".into()
                },
            );
        }
        m
    }
}

pub fn parse_ternary_layout(s: &str) -> Result<TernaryLayout> {
    match s {
        "2bit" => Ok(TernaryLayout::Bits2),
        "base3" => Ok(TernaryLayout::Base3),
        _ => Err(ImportError::InvalidArgument(format!(
            "--ternary {s:?}: expected 2bit or base3"
        ))),
    }
}

/// Encode one float tensor (`raw`: little-endian elements of `dtype`, row length = last dim).
pub fn encode_float<'a>(
    opts: &PackOptions,
    dtype: FloatType,
    shape: &[u64],
    raw: &'a [u8],
) -> Result<(Encoding, Cow<'a, [u8]>)> {
    let row_len = shape.last().copied().unwrap_or(1).max(1) as usize;
    match opts.floats {
        FloatMode::Raw => Ok((Encoding::from(dtype), Cow::Borrowed(raw))),
        FloatMode::NeuZip => {
            let full = full_mantissa_bits(dtype);
            let blob = neuzip::encode_version(opts.neuzip_layout, dtype, full, raw, row_len)?;
            if blob.len() >= raw.len() {
                Ok((Encoding::from(dtype), Cow::Borrowed(raw)))
            } else {
                Ok((
                    Encoding::NeuZip {
                        dtype,
                        mantissa_bits: full,
                    },
                    Cow::Owned(blob),
                ))
            }
        }
        FloatMode::NeuZipLossy(k) => {
            let blob = neuzip::encode_version(opts.neuzip_layout, dtype, k, raw, row_len)?;
            Ok((
                Encoding::NeuZip {
                    dtype,
                    mantissa_bits: k,
                },
                Cow::Owned(blob),
            ))
        }
    }
}

/// Encode one ternary tensor given its trits (row-major, `shape` order) and scales (`group`
/// consecutive elements of a row per scale; `group == 0`: one scale).
pub fn encode_ternary(
    opts: &PackOptions,
    shape: &[u64],
    trits: &[i8],
    group: u32,
    scale_type: FloatType,
    scales: &[f32],
) -> Result<(Encoding, Vec<u8>)> {
    let (rows, cols) = tern_format::encoding::rows_cols(shape)?;
    let bytes = ternary::pack(opts.ternary, rows, cols, trits, group, scale_type, scales)?;
    Ok((
        Encoding::Ternary {
            layout: opts.ternary,
            group,
            scale_type,
        },
        bytes,
    ))
}

/// Progress callback of the importers: `(tensors done, total, current tensor name)`.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

/// What every importer checks of the metadata before writing a byte: the hyperparameters on their
/// own (`tern_format::check_hparams_alone`: counts, finite and in-range RoPE θ and RMS ε, products
/// that fit) and every float the metadata stores is finite. The `.tern` metadata is JSON, where
/// an infinity or NaN becomes `null` and the file could never be read back.
pub fn check_meta(meta: &tern_format::ModelMeta) -> Result<()> {
    tern_format::check_hparams_alone(&meta.hparams)?;
    if let Some(tok) = &meta.tokenizer {
        if let Some((i, s)) = tok.scores.iter().enumerate().find(|(_, s)| !s.is_finite()) {
            let text = tok.tokens.get(i).map(String::as_str).unwrap_or("?");
            return Err(ImportError::InvalidArgument(format!(
                "tokenizer score {s} of token {i} ({text:?}) is not finite: the model file cannot store it"
            )));
        }
    }
    Ok(())
}

/// BitNet b1.58's weight quantizer (absmean) on a float master, shared by every importer: a
/// non-finite weight or scale is refused (it would make `alpha` NaN or clamp it to 1e-5 and
/// silently change every output), as is a non-finite result.
pub fn ternarize_master(name: &str, vals: &[f32], scale: Option<f32>) -> Result<(Vec<i8>, f32)> {
    if let Some(bad) = vals.iter().find(|v| !v.is_finite()) {
        return Err(ImportError::InvalidArgument(format!(
            "{name}: non-finite weight {bad}"
        )));
    }
    let (trits, mut alpha) = ternary::absmean_ternarize(vals);
    if let Some(s) = scale {
        alpha *= s;
    }
    if !alpha.is_finite() {
        return Err(ImportError::InvalidArgument(format!(
            "{name}: non-finite scale {alpha}"
        )));
    }
    Ok((trits, alpha))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod hostile_tests {
    use super::*;

    /// Issue 29, class 6: a NaN in a BitNet float master was silently accepted by the GGUF
    /// importer (the scale became 1e-5); both importers now refuse it through this function.
    #[test]
    fn non_finite_masters_and_scales_are_refused() {
        let w = [0.5f32, -0.25, 0.0, 1.0];
        let (t, a) = ternarize_master("w", &w, None).unwrap();
        assert_eq!(t.len(), 4);
        assert!(a.is_finite() && a > 0.0);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut v = w;
            v[2] = bad;
            let e = ternarize_master("blk.0.attn_q.weight", &v, None).unwrap_err();
            assert!(e.to_string().contains("non-finite weight"), "{e}");
        }
        let e = ternarize_master("w", &w, Some(f32::NAN)).unwrap_err();
        assert!(e.to_string().contains("non-finite scale"), "{e}");
    }

    /// Issue 29, class 5: an infinite RoPE θ or RMS ε, or an SPM score of −inf, packed into a
    /// file whose metadata (JSON) could never be read back.
    #[test]
    fn non_finite_metadata_is_refused() {
        let meta = |f: &dyn Fn(&mut tern_format::ModelMeta)| {
            let mut m: tern_format::ModelMeta = serde_json::from_str(
                r#"{"arch":"llama","hparams":{"n_vocab":2,"n_embd":16,"n_layer":2,"n_head":2,"n_head_kv":1,"head_dim":8,"n_ff":32,"n_ctx_train":2048,"rope_theta":10000.0,"rope_dim":8,"rope_neox":true,"rms_eps":0.00001,"ffn_act":"silu","tied_embeddings":true,"sub_norms":false},"tokenizer":{"kind":"llama","pre":null,"tokens":["a","b"],"token_types":[1,1],"scores":[0.0,-1.0],"bos":null,"eos":null,"unk":null,"pad":null,"add_bos":false,"add_eos":false,"chat_template":null},"activations":{"qkv":"none","out":"none","gate_up":"none","down":"none"},"provenance":{"source_format":"test","source_name":"t","source_hash":null,"model_name":null,"packer":"t","options":{}},"extra":{}}"#,
            )
            .unwrap();
            f(&mut m);
            m
        };
        assert!(check_meta(&meta(&|_| {})).is_ok());
        for what in ["rope_theta", "rms_eps", "score"] {
            let edit = |m: &mut tern_format::ModelMeta| match what {
                "rope_theta" => m.hparams.rope_theta = f32::INFINITY,
                "rms_eps" => m.hparams.rms_eps = f32::NAN,
                _ => {
                    if let Some(t) = m.tokenizer.as_mut() {
                        t.scores[1] = f32::NEG_INFINITY;
                    }
                }
            };
            let e = check_meta(&meta(&edit)).unwrap_err();
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
    }
}
