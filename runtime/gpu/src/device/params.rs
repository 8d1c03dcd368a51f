//! Every kernel's parameter struct (the WGSL `Params` / `Step` uniforms), defined once here.
//!
//! Each struct is declared with [`params!`], which also records its layout (field names, byte
//! offsets, scalar types, size) and the shaders that declare the same struct. The CPU test at the
//! bottom parses every one of those shaders with naga and checks that the WGSL struct has the
//! same size and every WGSL member has a Rust field of the same name, offset and type: a field
//! added, removed, reordered or retyped on one side only fails `cargo test`, without a GPU.
//! (ggml-metal keeps one C header both sides include; here each WGSL struct is written once, in
//! a module the kernels `// #import` (tern-shaders), and this test ties it to the Rust side.)

use tern_shaders::Shader;

/// One parameter struct's layout, for the naga check.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub rust: &'static str,
    /// (shader, WGSL struct name) pairs that must match this layout.
    pub wgsl: &'static [(Shader, &'static str)],
    pub size: usize,
    /// (name, byte offset, scalar type) of every field.
    pub fields: &'static [(&'static str, usize, &'static str)],
}

macro_rules! params {
    ($(#[$m:meta])* $name:ident in [$(($shader:ident, $wgsl:literal)),+] { $($f:ident : $t:ident),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name { $(pub $f: $t),* }
        impl $name {
            pub const LAYOUT: Layout = Layout {
                rust: stringify!($name),
                wgsl: &[$((Shader::$shader, $wgsl)),+],
                size: std::mem::size_of::<$name>(),
                fields: &[$((stringify!($f), std::mem::offset_of!($name, $f), stringify!($t))),*],
            };
        }
    };
}

params! {
    /// `act_quant_int8.wgsl`.
    ActQuantParams in [(ActQuantInt8, "Params")] {
        cols: u32, q_stride: u32, n_tokens: u32, _pad: u32,
    }
}

params! {
    /// Ternary GEMV and tiled GEMM (same struct in both shaders).
    /// `sparse_max_words`: the sparse GEMV's switch (the others ignore it); `mode` / `eps`: the
    /// GEMV's fused prologue and epilogue (`ternary_gemv.wgsl`; 0 elsewhere).
    TernaryParams in [(TernaryGemv, "Params"), (TernaryGemm, "Params"), (TernaryGemmT128, "Params"), (TernaryGemmCoop, "Params"), (TernaryGemvSparse, "Params"), (TernaryGemvWide, "Params"), (TernaryGemvDec, "Params"), (TernaryGemvDecNorm, "Params")] {
        rows: u32, cols: u32, words_per_row: u32, group: u32, groups_per_row: u32,
        scale_word_offset: u32, act_stride: u32, out_stride: u32, row0: u32, n_tokens: u32,
        sparse_max_words: u32, mode: u32, eps: f32, _pad2: u32, _pad3: u32, _pad4: u32,
    }
}

params! {
    /// ggml-block GEMV and tiled GEMM (`blocks_per_row` counts 32-column units; `mode`: the
    /// GEMV's epilogue, `eps` its fused norm's epsilon; both 0 in the GEMM).
    GgmlParams in [(GgmlGemv, "Params"), (GgmlGemm, "Params")] {
        rows: u32, cols: u32, blocks_per_row: u32, out_stride: u32, row0: u32, n_tokens: u32,
        mode: u32, eps: f32,
    }
}

params! {
    /// `float_gemv.wgsl`.
    FloatParams in [(FloatGemv, "Params")] {
        rows: u32, cols: u32, elem_offset: u32, out_stride: u32, row0: u32, n_tokens: u32,
        _pad0: u32, _pad1: u32,
    }
}

params! {
    /// `neuzip_decode.wgsl`: one chunk of blocks.
    NeuzipParams in [(NeuzipDecode, "Params"), (NeuzipGemv, "Params"), (NeuzipEmbed, "Params")] {
        lanes: u32, block_len: u32, blocks_per_row: u32, row_len: u32, n_elements: u32, b0: u32,
        n_syms: u32, table_word: u32, block_words_word: u32, states_word: u32,
        lane_starts_word: u32, words_base: u32, raw_word_offset: u32, raw_bit_base: u32,
        out_base: u32, man: u32, exp_bits: u32, k: u32, width: u32, group: u32, bpw: u32,
        b_end: u32, status_word: u32, whole_words: u32,
    }
}

params! {
    /// `neuzip_gemv.wgsl`: the GEMV side of the fused decode + GEMV (up to 4 tokens).
    NeuzipGemvParams in [(NeuzipGemv, "Gemv")] {
        rows_per_block: u32, n_tokens: u32, tok0: u32, x_stride: u32, out_stride: u32,
        _pad0: u32, _pad1: u32, _pad2: u32,
    }
}

params! {
    /// `neuzip_embed.wgsl`: token rows looked up in a NeuZip matrix kept compressed.
    NeuzipEmbedParams in [(NeuzipEmbed, "Embed")] {
        rows_per_block: u32, n_tokens: u32, total_rows: u32, out_stride: u32, first_part: u32,
        _pad0: u32, _pad1: u32, _pad2: u32,
    }
}

params! {
    /// `rmsnorm.wgsl`.
    RmsNormParams in [(RmsNorm, "Params")] {
        n: u32, n_rows: u32, eps: f32, _pad: u32,
    }
}

params! {
    /// `rmsnorm_quant.wgsl`.
    RmsNormQuantParams in [(RmsNormQuant, "Params"), (ActQuantA48, "Params"), (ActQuantTopK, "Params")] {
        n: u32, n_rows: u32, eps: f32, q_stride: u32,
    }
}

params! {
    /// `act_stats.wgsl`.
    ActStatsParams in [(ActStats, "Params")] {
        cols: u32, stride: u32, n_tokens: u32, slot: u32, int4: u32, _pad0: u32, _pad1: u32,
        _pad2: u32,
    }
}

params! {
    /// `rope.wgsl`.
    RopeParams in [(Rope, "Params")] {
        n_heads: u32, head_dim: u32, rope_dim: u32, n_tokens: u32,
    }
}

params! {
    /// `rope_kv.wgsl`: RoPE of q and k fused with the KV store (`stride`: words per token row of
    /// the concatenated q/k/v; `wpr`: code words per cache row).
    RopeKvParams in [(RopeKv, "Params")] {
        n_head: u32, n_head_kv: u32, head_dim: u32, rope_dim: u32, n_tokens: u32, stride: u32,
        n_ctx: u32, wpr: u32,
    }
}

params! {
    /// `qkv_split.wgsl`.
    QkvSplitParams in [(QkvSplit, "Params")] {
        n_tokens: u32, q_dim: u32, kv_dim: u32, stride: u32,
    }
}

params! {
    /// `elementwise.wgsl` (`pairs`: the GLU over gate/up row pairs).
    EltParams in [(Elementwise, "Params")] {
        n: u32, pairs: u32, _pad1: u32, _pad2: u32,
    }
}

params! {
    /// `bias_scale.wgsl` (`len` 0: no bias).
    BiasScaleParams in [(BiasScale, "Params")] {
        n: u32, len: u32, scale: f32, _pad: u32,
    }
}

params! {
    /// `head_rmsnorm.wgsl` (QK-norm).
    HeadRmsNormParams in [(HeadRmsNorm, "Params")] {
        head_dim: u32, n_heads: u32, n_tokens: u32, row_stride: u32, offset: u32, eps: f32,
        _pad0: u32, _pad1: u32,
    }
}

params! {
    /// `argmax.wgsl`.
    ArgmaxParams in [(Argmax, "Params")] {
        n: u32, n_rows: u32, _pad0: u32, _pad1: u32,
    }
}

params! {
    /// `topk.wgsl`: `n_in` = logits (pass 1) or candidate pairs (pass 2); `per` = logits per
    /// workgroup (pass 1).
    TopkParams in [(TopK, "Params")] {
        n_in: u32, k: u32, per: u32, _pad: u32,
    }
}

params! {
    /// `topk_sample.wgsl`: `n` = logits (passes 0, 1) or pairs (pass 2); `per` = logits per
    /// workgroup (pass 1); word offsets of the (max, sum) output and of the penalized raw logits.
    SampleParams in [(TopkSample, "Params")] {
        n: u32, per: u32, out_off: u32, hist_off: u32,
    }
}

params! {
    /// `embed.wgsl`.
    EmbedParams in [(Embed, "Params")] {
        cols: u32, row0: u32, rows: u32, total_rows: u32, elem_offset: u32, row_bytes: u32,
        first_part: u32, n: u32,
    }
}

params! {
    /// Per-step values, rewritten by the host before each submit of a recorded plan: `p0` =
    /// position of the batch's first token (`n_tokens` is informational: the recorded dispatches
    /// fix the batch size).
    StepParams in [
        (KvStore, "Step"), (Attention, "Step"), (AttentionCombine, "Step"),
        (MinicacheMerge, "Step"), (RopeKv, "Step"), (AttentionPrefill, "Step")
    ] {
        p0: u32, n_tokens: u32, _pad0: u32, _pad1: u32,
    }
}

params! {
    /// A KV cache's layout (`kv_store.wgsl`'s, `attention.wgsl`'s and `minicache_merge.wgsl`'s
    /// `Geom`; the sections are described in `kv_store.wgsl`): `row` values per position, `wpr`
    /// code words per position (`wpr0` for a3's position 0), word offsets of the parameters and
    /// of the KIVI windows, KIVI's `group`/`resid` (G, R) and value groups per row, the batch
    /// size, whether this store writes keys; a MiniCache pair's sections (word offsets of the
    /// magnitudes, the retained pool, its positions and its count; the pool's capacity); `pend`:
    /// where a pair's first layer finds its unmerged batch rows after the queries; `rot_c`: the
    /// rotated formats' `f32(1/√head_dim)` (`tern_format::kv::rot_scale`, the host's bits).
    KvGeom in [
        (KvStore, "Geom"), (Attention, "Geom"), (MinicacheMerge, "Geom"), (AttentionPrefill, "Geom")
    ] {
        row: u32, heads: u32, head_dim: u32, n_ctx: u32, wpr: u32, wpr0: u32, par: u32,
        k_win: u32, v_win: u32, group: u32, resid: u32, ngroups: u32, n_tokens: u32,
        is_key: u32, mag: u32, pool: u32, pool_pos: u32, count: u32, cap: u32, pend: u32,
        rot_c: f32, _pad0: u32, _pad1: u32, _pad2: u32,
    }
}

params! {
    /// MiniCache merge (`minicache_merge.wgsl`): SLERP parameter, retention threshold (and
    /// `cos(γπ)`, what the kernel compares with), word offset of layer a's rows in their buffer.
    MergeParams in [(MinicacheMerge, "Merge")] {
        t: f32, gamma: f32, xa_off: u32, cos_gamma: f32,
    }
}

params! {
    /// Attention, its split-K merge and the query-tiled prefill kernel (same struct in the three
    /// shaders). `n_split` = key chunks per (token, head group): 1 writes the output directly,
    /// more write partials; `n_hg` = workgroups per kv head; `q_stride` = words from one token's
    /// queries to the next's (the prefill kernel reads them inside the stacked `[n][q | k | v]`
    /// rows; the others read planar `[n][n_head·head_dim]` queries).
    AttnParams in [
        (Attention, "Params"), (AttentionCombine, "Params"), (AttentionPrefill, "Params")
    ] {
        n_head: u32, n_head_kv: u32, head_dim: u32, n_ctx: u32, scale: f32, n_tokens: u32,
        n_split: u32, n_hg: u32, q_stride: u32, window: u32, _pad1: u32, _pad2: u32,
    }
}

params! {
    /// Fused CCE pass A (`cce.wgsl`).
    CceParams in [(Cce, "Params")] {
        rows: u32, cols: u32, blocks_per_row: u32, row0: u32, n_pos: u32, pos0: u32,
        block0: u32, n_blocks: u32, tiles: u32, elem_offset: u32, _pad1: u32, _pad2: u32,
    }
}

params! {
    /// Fused CCE pass B (`cce_combine.wgsl`).
    CceCombineParams in [(CceCombine, "Params")] {
        n_pos: u32, pos0: u32, n_blocks: u32, vocab: u32,
    }
}

params! {
    /// `log_softmax_target.wgsl` (CCE's materialized comparison path).
    LogSoftmaxParams in [(LogSoftmaxTarget, "Params")] {
        vocab: u32, n_pos: u32, pos0: u32, _pad: u32,
    }
}

/// Every parameter struct (what the naga test checks).
pub const ALL: &[Layout] = &[
    ActQuantParams::LAYOUT,
    TernaryParams::LAYOUT,
    GgmlParams::LAYOUT,
    FloatParams::LAYOUT,
    NeuzipParams::LAYOUT,
    NeuzipGemvParams::LAYOUT,
    NeuzipEmbedParams::LAYOUT,
    RmsNormParams::LAYOUT,
    RmsNormQuantParams::LAYOUT,
    ActStatsParams::LAYOUT,
    RopeParams::LAYOUT,
    RopeKvParams::LAYOUT,
    QkvSplitParams::LAYOUT,
    EltParams::LAYOUT,
    BiasScaleParams::LAYOUT,
    HeadRmsNormParams::LAYOUT,
    ArgmaxParams::LAYOUT,
    TopkParams::LAYOUT,
    SampleParams::LAYOUT,
    EmbedParams::LAYOUT,
    StepParams::LAYOUT,
    KvGeom::LAYOUT,
    MergeParams::LAYOUT,
    AttnParams::LAYOUT,
    CceParams::LAYOUT,
    CceCombineParams::LAYOUT,
    LogSoftmaxParams::LAYOUT,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar_name(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
        match &module.types[ty].inner {
            naga::TypeInner::Scalar(s) => match (s.kind, s.width) {
                (naga::ScalarKind::Uint, 4) => "u32".into(),
                (naga::ScalarKind::Sint, 4) => "i32".into(),
                (naga::ScalarKind::Float, 4) => "f32".into(),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        }
    }

    /// `layout` against the WGSL struct `name` of `module`: the same size, and every WGSL member
    /// a Rust field of the same name, offset and scalar type (and no Rust field more).
    fn compare(layout: &Layout, module: &naga::Module, name: &str) -> Result<(), String> {
        let (members, span) = module
            .types
            .iter()
            .find_map(|(_, t)| match (&t.name, &t.inner) {
                (Some(n), naga::TypeInner::Struct { members, span }) if n == name => {
                    Some((members.clone(), *span))
                }
                _ => None,
            })
            .ok_or_else(|| format!("no struct {name}"))?;
        if span as usize != layout.size {
            return Err(format!(
                "{} is {} bytes, {name} is {span}",
                layout.rust, layout.size
            ));
        }
        for m in &members {
            let mname = m.name.as_deref().unwrap_or("?");
            let f = layout
                .fields
                .iter()
                .find(|f| f.0 == mname)
                .ok_or_else(|| format!("{name}.{mname} has no field in {}", layout.rust))?;
            if f.1 != m.offset as usize {
                return Err(format!(
                    "{}.{mname} at byte {}, {name}'s at {}",
                    layout.rust, f.1, m.offset
                ));
            }
            let t = scalar_name(module, m.ty);
            if f.2 != t {
                return Err(format!(
                    "{}.{mname} is {}, {name}'s is {t}",
                    layout.rust, f.2
                ));
            }
        }
        if members.len() != layout.fields.len() {
            return Err(format!(
                "{} has {} fields, {name} {}",
                layout.rust,
                layout.fields.len(),
                members.len()
            ));
        }
        Ok(())
    }

    /// The naga check described in the module doc.
    #[test]
    fn rust_params_match_the_wgsl_structs() {
        let mut checked = 0;
        for l in ALL {
            for (shader, name) in l.wgsl {
                let src = shader
                    .source()
                    .unwrap_or_else(|e| panic!("{shader:?}: {e}"));
                let module = naga::front::wgsl::parse_str(&src)
                    .unwrap_or_else(|e| panic!("{shader:?}: {e}"));
                if let Err(e) = compare(l, &module, name) {
                    panic!("{shader:?}: {e}");
                }
                checked += 1;
            }
        }
        // Every shader with a Params struct is covered.
        for s in tern_shaders::Shader::ALL {
            let src = s.source().unwrap_or_else(|e| panic!("{s:?}: {e}"));
            if src.contains("struct Params") {
                assert!(
                    ALL.iter()
                        .any(|l| l.wgsl.iter().any(|(sh, n)| *sh == s && *n == "Params")),
                    "{s:?} declares Params but no Rust struct is checked against it"
                );
            }
        }
        assert!(checked >= 20, "{checked} structs checked");
    }

    /// The check fails when the two sides differ: a reordered, a retyped, a missing and an extra
    /// member, and a different size.
    #[test]
    fn a_mismatch_is_caught() {
        let l = RmsNormParams::LAYOUT;
        let good = "struct Params { n: u32, n_rows: u32, eps: f32, _pad: u32, }";
        let m = naga::front::wgsl::parse_str(good).expect("parses");
        assert_eq!(compare(&l, &m, "Params"), Ok(()));
        for bad in [
            "struct Params { n_rows: u32, n: u32, eps: f32, _pad: u32, }",
            "struct Params { n: u32, n_rows: u32, eps: u32, _pad: u32, }",
            "struct Params { n: u32, n_rows: u32, _pad: u32, eps: f32, }",
            "struct Params { n: u32, n_rows: u32, eps: f32, }",
            "struct Params { n: u32, n_rows: u32, eps: f32, _pad: u32, more: u32, }",
        ] {
            let m = naga::front::wgsl::parse_str(bad).expect("parses");
            assert!(compare(&l, &m, "Params").is_err(), "{bad}");
        }
    }
}
