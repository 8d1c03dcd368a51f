//! Hyperparameters checked against each other and against the tensors a file actually holds,
//! before a loader sizes anything from them.
//!
//! A loader allocates per-layer tables, KV caches and activation buffers from [`HParams`]; a file
//! whose metadata says `n_layer = 4294967295` or `n_embd = 2^31` must be refused here with a
//! typed error, not abort the process with "memory allocation of … bytes failed".

use std::collections::BTreeSet;

use crate::container::TernFile;
use crate::error::{FormatError, Result};
use crate::meta::HParams;

fn bad(detail: String) -> FormatError {
    FormatError::Malformed {
        what: "hyperparameters".into(),
        detail,
    }
}

/// `a × b` in u64, or an error naming the product.
fn mul(what: &str, a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| bad(format!("{what} = {a} × {b} overflows")))
}

/// The hyperparameters on their own: every count the forward pass divides or loops by is > 0,
/// `n_head` is a multiple of `n_head_kv`, `rope_dim` is even and ≤ `head_dim`, `rms_eps` and
/// `rope_theta` are finite and in range, and the products the loaders form (`n_head·head_dim`,
/// `n_head_kv·head_dim`, `n_vocab·n_embd`, the KV bytes per position) do not overflow.
pub fn check_hparams_alone(hp: &HParams) -> Result<()> {
    for (name, v) in [
        ("n_vocab", hp.n_vocab),
        ("n_embd", hp.n_embd),
        ("n_layer", hp.n_layer),
        ("n_head", hp.n_head),
        ("n_head_kv", hp.n_head_kv),
        ("head_dim", hp.head_dim),
        ("n_ff", hp.n_ff),
        ("n_ctx_train", hp.n_ctx_train),
    ] {
        if v == 0 {
            return Err(bad(format!("{name} is 0")));
        }
    }
    if hp.n_head % hp.n_head_kv != 0 {
        return Err(bad(format!(
            "n_head {} is not a multiple of n_head_kv {}",
            hp.n_head, hp.n_head_kv
        )));
    }
    if hp.rope_dim > hp.head_dim || hp.rope_dim % 2 != 0 {
        return Err(bad(format!(
            "rope_dim {} must be even and ≤ head_dim {}",
            hp.rope_dim, hp.head_dim
        )));
    }
    if !(hp.rms_eps.is_finite() && hp.rms_eps >= 0.0) {
        return Err(bad(format!("rms_eps {} is not finite and ≥ 0", hp.rms_eps)));
    }
    if !(hp.rope_theta.is_finite() && hp.rope_theta > 0.0) {
        return Err(bad(format!(
            "rope_theta {} is not finite and > 0",
            hp.rope_theta
        )));
    }
    let (hd, layers) = (u64::from(hp.head_dim), u64::from(hp.n_layer));
    mul("n_head·head_dim", hp.n_head.into(), hd)?;
    let kv = mul("n_head_kv·head_dim", hp.n_head_kv.into(), hd)?;
    mul("n_vocab·n_embd", hp.n_vocab.into(), hp.n_embd.into())?;
    let per_pos = mul("n_layer·n_head_kv·head_dim", layers, kv)?;
    mul(
        "KV bytes per position (2·4·n_layer·n_head_kv·head_dim)",
        per_pos,
        8,
    )?;
    Ok(())
}

/// The layer indices `N` of the tensors named `blk.N.…` (a name whose `N` is not a decimal
/// number is an error: no loader would ever read it).
fn layer_indices(file: &TernFile) -> Result<BTreeSet<u64>> {
    let mut set = BTreeSet::new();
    for t in file.tensors() {
        let Some(rest) = t.name.strip_prefix("blk.") else {
            continue;
        };
        let n = rest.split('.').next().unwrap_or("");
        let idx = n
            .parse::<u64>()
            .ok()
            .filter(|_| n.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                bad(format!(
                    "tensor {:?} has no layer number after `blk.`",
                    t.name
                ))
            })?;
        set.insert(idx);
    }
    Ok(set)
}

/// Check that tensor `name`, when present, has shape `expected` (a missing tensor is left to the
/// loader, which names what it needs).
fn shape_if_present(file: &TernFile, name: &str, expected: &[u64], why: &str) -> Result<()> {
    if let Some(i) = file.index_of(name) {
        let found = &file.tensors()[i].shape;
        if found.as_slice() != expected {
            return Err(bad(format!(
                "tensor {name:?} has shape {found:?}, but {why} need {expected:?}"
            )));
        }
    }
    Ok(())
}

/// The file's hyperparameters against each other ([`check_hparams_alone`]) and against its
/// tensors, before anything is allocated from them:
///
/// - `n_layer` is the number of `blk.N.` layers in the directory, and they are exactly
///   `blk.0` … `blk.{n_layer-1}`;
/// - `token_embd.weight` exists and is `[n_vocab, n_embd]`;
/// - each layer's `attn_q` is `[n_head·head_dim, n_embd]`, `attn_k` and `attn_v` are
///   `[n_head_kv·head_dim, n_embd]`, `ffn_up` is `[n_ff, n_embd]` (where present; a missing one
///   is reported by the loader).
///
/// Every mismatch is a [`FormatError::Malformed`] on "hyperparameters" naming both numbers.
pub fn check_hparams(file: &TernFile) -> Result<()> {
    let hp = &file.meta().hparams;
    check_hparams_alone(hp)?;
    let layers = layer_indices(file)?;
    let n_layer = u64::from(hp.n_layer);
    let found = layers.len() as u64;
    if found != n_layer || layers.last().is_some_and(|&m| m >= n_layer) {
        let range = match (layers.first(), layers.last()) {
            (Some(a), Some(b)) => format!("blk.{a} … blk.{b}"),
            _ => "none".to_string(),
        };
        return Err(bad(format!(
            "n_layer = {n_layer}, but the file has {found} layers ({range}); layers blk.0 … \
             blk.{} are needed",
            n_layer - 1
        )));
    }
    let (n_embd, hd) = (u64::from(hp.n_embd), u64::from(hp.head_dim));
    let emb = "token_embd.weight";
    let Some(i) = file.index_of(emb) else {
        return Err(FormatError::NoSuchTensor(emb.into()));
    };
    let shape = &file.tensors()[i].shape;
    if shape.as_slice() != [u64::from(hp.n_vocab), n_embd] {
        return Err(bad(format!(
            "n_vocab = {} and n_embd = {n_embd}, but {emb} has shape {shape:?} \
             (expected [n_vocab, n_embd])",
            hp.n_vocab
        )));
    }
    let q_dim = mul("n_head·head_dim", hp.n_head.into(), hd)?;
    let kv_dim = mul("n_head_kv·head_dim", hp.n_head_kv.into(), hd)?;
    let n_ff = u64::from(hp.n_ff);
    for l in 0..n_layer {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        shape_if_present(
            file,
            &n("attn_q"),
            &[q_dim, n_embd],
            "n_head·head_dim and n_embd",
        )?;
        shape_if_present(
            file,
            &n("attn_k"),
            &[kv_dim, n_embd],
            "n_head_kv·head_dim and n_embd",
        )?;
        shape_if_present(
            file,
            &n("attn_v"),
            &[kv_dim, n_embd],
            "n_head_kv·head_dim and n_embd",
        )?;
        shape_if_present(file, &n("ffn_up"), &[n_ff, n_embd], "n_ff and n_embd")?;
    }
    Ok(())
}
