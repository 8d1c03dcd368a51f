//! The tensor plan: how each tern tensor is made from the checkpoint's tensors.

use super::*;

// ------------------------------------------------------------------------------------------------
// Tensor plan

/// How one tern tensor is made from the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Conv {
    /// Kept float.
    Float,
    /// BitNet linear weight, ternary in tern.
    Ternary,
}

/// One tern tensor: its name, the HF tensor it comes from, its expected shape and conversion.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) tern: String,
    pub(super) hf: String,
    pub(super) shape: Vec<u64>,
    pub(super) conv: Conv,
}

/// The tensors a model of this config consists of, in the order they are written.
pub(super) fn tensor_plan(c: &HfConfig) -> Vec<Planned> {
    let h = &c.hparams;
    let (e, ff, v) = (u64::from(h.n_embd), u64::from(h.n_ff), u64::from(h.n_vocab));
    let q = u64::from(h.n_head) * u64::from(h.head_dim);
    let kv = u64::from(h.n_head_kv) * u64::from(h.head_dim);
    let lin = if c.arch == Arch::Bitnet {
        Conv::Ternary
    } else {
        Conv::Float
    };
    let p = |tern: String, hf: String, shape: Vec<u64>, conv: Conv| Planned {
        tern,
        hf,
        shape,
        conv,
    };
    let mut out = vec![p(
        "token_embd.weight".into(),
        "model.embed_tokens.weight".into(),
        vec![v, e],
        Conv::Float,
    )];
    for i in 0..h.n_layer {
        let b = format!("blk.{i}");
        let m = format!("model.layers.{i}");
        out.push(p(
            format!("{b}.attn_norm.weight"),
            format!("{m}.input_layernorm.weight"),
            vec![e],
            Conv::Float,
        ));
        out.push(p(
            format!("{b}.attn_q.weight"),
            format!("{m}.self_attn.q_proj.weight"),
            vec![q, e],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.attn_k.weight"),
            format!("{m}.self_attn.k_proj.weight"),
            vec![kv, e],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.attn_v.weight"),
            format!("{m}.self_attn.v_proj.weight"),
            vec![kv, e],
            lin.clone(),
        ));
        if h.sub_norms {
            out.push(p(
                format!("{b}.attn_sub_norm.weight"),
                format!("{m}.self_attn.attn_sub_norm.weight"),
                vec![e],
                Conv::Float,
            ));
        }
        out.push(p(
            format!("{b}.attn_output.weight"),
            format!("{m}.self_attn.o_proj.weight"),
            vec![e, q],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.ffn_norm.weight"),
            format!("{m}.post_attention_layernorm.weight"),
            vec![e],
            Conv::Float,
        ));
        out.push(p(
            format!("{b}.ffn_gate.weight"),
            format!("{m}.mlp.gate_proj.weight"),
            vec![ff, e],
            lin.clone(),
        ));
        out.push(p(
            format!("{b}.ffn_up.weight"),
            format!("{m}.mlp.up_proj.weight"),
            vec![ff, e],
            lin.clone(),
        ));
        if h.sub_norms {
            out.push(p(
                format!("{b}.ffn_sub_norm.weight"),
                format!("{m}.mlp.ffn_sub_norm.weight"),
                vec![ff],
                Conv::Float,
            ));
        }
        out.push(p(
            format!("{b}.ffn_down.weight"),
            format!("{m}.mlp.down_proj.weight"),
            vec![e, ff],
            lin.clone(),
        ));
    }
    out.push(p(
        "output_norm.weight".into(),
        "model.norm.weight".into(),
        vec![e],
        Conv::Float,
    ));
    if !h.tied_embeddings {
        // transformers never quantizes the output head (it is in `modules_to_not_convert`).
        out.push(p(
            "output.weight".into(),
            "lm_head.weight".into(),
            vec![v, e],
            Conv::Float,
        ));
    }
    out
}

/// Source tensors that carry nothing tern needs.
pub(super) fn ignorable(name: &str, tied: bool) -> bool {
    name.ends_with(".rotary_emb.inv_freq") || (tied && name == "lm_head.weight")
}
