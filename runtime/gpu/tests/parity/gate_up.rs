//! Parity of gate/up as one weight of interleaved row pairs (issue 15; `model/load.rs`'s
//! `ternary_gate_up` / `ggml_gate_up`): the GEMV over the pairs with the GLU in its epilogue, and
//! (from `GEMM_MIN_TOKENS` tokens) the matmul over the pairs then `glu_pairs`, each against
//! (1) the two weights as stored through today's GPU passes (gate → matmul, up → matmul, GLU
//! pass): the same bits, and (2) the CPU reference (`tern_reference` matmuls, then its GLU):
//! bit-exact for ternary (integer sums) with ReLU², NMSE otherwise (`exp`, ggml's f32 order).
//! Shapes: one row, odd rows and columns, scale groups (per tensor, whole-word, straddling),
//! base-3, INT4 activations, the fused norm prologue, 1–5 tokens, parts split across bindings.

use super::*;
use tern_gpu::kernels::{ActInt8, Epilogue, NormPrologue, GEMM_MIN_TOKENS};

const EPS: f32 = 1e-5;

fn glu_ref(op: EltOp, g: &[f32], u: &[f32]) -> Result<Vec<f32>, String> {
    let mut out = vec![0f32; g.len()];
    match op {
        EltOp::SwiGlu => tern_reference::swiglu(g, u, &mut out),
        _ => tern_reference::relu2_glu(g, u, &mut out),
    }
    .map_err(|e| e.to_string())?;
    Ok(out)
}

fn epi_of(op: EltOp) -> Epilogue {
    match op {
        EltOp::SwiGlu => Epilogue::SwiGlu,
        _ => Epilogue::Relu2Glu,
    }
}

/// Both paths over the same activations: `split` (gate and up as stored, the GLU pass) and the
/// pairs (`fuse_norm`: the norm + quantization in the GEMV's prologue, decode only).
#[allow(clippy::too_many_arguments)]
fn run_ternary_pairs(
    ctx: &GpuContext,
    rng: &mut Rng,
    layout: TernaryLayout,
    (rows, cols, group): (usize, usize, u32),
    tokens: usize,
    act4: bool,
    fuse_norm: bool,
    op: EltOp,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let st = FloatType::F16;
    let (r, c) = (rows as u64, cols as u64);
    let mut mats = Vec::new();
    for _ in 0..2 {
        let trits: Vec<i8> = (0..rows * cols)
            .map(|_| (rng.next() % 3) as i8 - 1)
            .collect();
        let ns = ternary::scale_count(r, c, group).map_err(|e| e.to_string())? as usize;
        let scales: Vec<f32> = (0..ns).map(|_| 0.01 + rng.unit() * 0.5).collect();
        mats.push(
            ternary::pack(layout, r, c, &trits, group, st, &scales).map_err(|e| e.to_string())?,
        );
    }
    let (gb, ub) = (&mats[0], &mats[1]);
    let gw = TernaryWeight::upload(ctx, layout, r, c, group, st, gb).map_err(e)?;
    let uw = TernaryWeight::upload(ctx, layout, r, c, group, st, ub).map_err(e)?;
    let pw = tern_gpu::model::ternary_gate_up(ctx, layout, r, c, group, st, gb, ub).map_err(e)?;
    let x = activations(rng, tokens, cols);
    let nw: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let nb = ctx.upload("norm", &f32_bytes(&nw)).map_err(e)?;
    let hb = (tokens * rows * 4) as u64;
    let (g, u, want_b, got_b) = (
        ctx.zeroed("g", hb).map_err(e)?,
        ctx.zeroed("u", hb).map_err(e)?,
        ctx.zeroed("want", hb).map_err(e)?,
        ctx.zeroed("got", hb).map_err(e)?,
    );
    let gu = ctx.zeroed("gu", 2 * hb).map_err(e)?;
    let a8 = ActInt8::alloc(ctx, tokens as u64, c).map_err(e)?;
    let a = if act4 { a8.as_int4().map_err(e)? } else { a8 };
    let mut enc = ctx.encoder();
    if act4 {
        let k = kernels::A48Quant::Int4Absmean;
        kernels::quantize_act_a48_into(ctx, &mut enc, &xb, Some((&nb, EPS)), k, &a).map_err(e)?;
    } else {
        kernels::rmsnorm_quant_int8(ctx, &mut enc, &xb, &nb, c, EPS, &a).map_err(e)?;
    }
    kernels::ternary_matmul(ctx, &mut enc, &gw, &a, &g, AUTO_PICK).map_err(e)?;
    kernels::ternary_matmul(ctx, &mut enc, &uw, &a, &u, AUTO_PICK).map_err(e)?;
    let n = (tokens * rows) as u64;
    kernels::elementwise(ctx, &mut enc, op, &g, &u, &want_b, n).map_err(e)?;
    if (tokens as u64) < GEMM_MIN_TOKENS {
        let norm = fuse_norm.then_some(NormPrologue {
            x: &xb,
            weight: &nb,
            eps: EPS,
            topk: false,
        });
        kernels::ternary_gemv_fused(
            ctx,
            &mut enc,
            &pw,
            &a,
            norm,
            epi_of(op),
            &got_b,
            AUTO_PICK.0,
        )
        .map_err(e)?;
    } else {
        kernels::ternary_matmul(ctx, &mut enc, &pw, &a, &gu, AUTO_PICK).map_err(e)?;
        kernels::glu_pairs(ctx, &mut enc, op, &gu, &got_b, n).map_err(e)?;
    }
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&got_b, tokens * rows).map_err(e)?;
    let want = ctx.read_f32(&want_b, tokens * rows).map_err(e)?;
    score("gate/up pairs vs split", Check::Exact, &got, &want)?;
    // the CPU reference: the normed rows (the GPU norm's tree order, bit-exact with its CPU
    // emulation in parity/fused.rs), the reference's quantizer and ternary matmul for gate and
    // up, the reference's GLU
    let normed_b = ctx
        .zeroed("normed", (tokens * cols * 4) as u64)
        .map_err(e)?;
    let mut enc = ctx.encoder();
    kernels::rmsnorm(ctx, &mut enc, &xb, &nb, &normed_b, c, tokens as u64, EPS).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let normed = ctx.read_f32(&normed_b, tokens * cols).map_err(e)?;
    let enc_t = Encoding::Ternary {
        layout,
        group,
        scale_type: st,
    };
    let aq = if act4 { ActQuant::Int4 } else { ActQuant::Int8 };
    let mut refs = Vec::new();
    for m in [gb, ub] {
        let mm = Matrix::from_encoded("w", rows, cols, &enc_t, m).map_err(|e| e.to_string())?;
        let mut out = vec![0f32; tokens * rows];
        mm.matmul(&normed, aq, &MatmulOptions::default(), &mut out)
            .map_err(|e| e.to_string())?;
        refs.push(out);
    }
    let want_ref = glu_ref(op, &refs[0], &refs[1])?;
    let check = if op == EltOp::SwiGlu {
        Check::Nmse(1e-6)
    } else {
        Check::Exact
    };
    score("gate/up pairs vs reference", check, &got, &want_ref)
        .map(|s| format!("{s}, {} binding(s)", pw.parts()))
}

/// ggml gate/up pairs: the GEMV with the GLU epilogue (1–3 tokens) or the GEMM and `glu_pairs`,
/// against the weights as stored (same bits) and the reference (NMSE).
fn run_ggml_pairs(
    ctx: &GpuContext,
    rng: &mut Rng,
    qtype: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
    op: EltOp,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let (r, c) = (rows as u64, cols as u64);
    let nb = rows * cols / qtype.block_elems();
    let (gb, ub) = (random_blocks(rng, qtype, nb), random_blocks(rng, qtype, nb));
    let gw = GgmlWeight::upload(ctx, qtype, r, c, &gb).map_err(e)?;
    let uw = GgmlWeight::upload(ctx, qtype, r, c, &ub).map_err(e)?;
    let pw = tern_gpu::model::ggml_gate_up(ctx, qtype, r, c, &gb, &ub).map_err(e)?;
    let x = activations(rng, tokens, cols);
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let hb = (tokens * rows * 4) as u64;
    let (g, u, want_b, got_b) = (
        ctx.zeroed("g", hb).map_err(e)?,
        ctx.zeroed("u", hb).map_err(e)?,
        ctx.zeroed("want", hb).map_err(e)?,
        ctx.zeroed("got", hb).map_err(e)?,
    );
    let gu = ctx.zeroed("gu", 2 * hb).map_err(e)?;
    let (t, n) = (tokens as u64, (tokens * rows) as u64);
    let mut enc = ctx.encoder();
    kernels::ggml_matmul(ctx, &mut enc, &gw, &xb, t, &g).map_err(e)?;
    kernels::ggml_matmul(ctx, &mut enc, &uw, &xb, t, &u).map_err(e)?;
    kernels::elementwise(ctx, &mut enc, op, &g, &u, &want_b, n).map_err(e)?;
    if t < GEMM_MIN_TOKENS {
        kernels::ggml_gemv_epi(ctx, &mut enc, &pw, &xb, t, epi_of(op), &got_b).map_err(e)?;
    } else {
        kernels::ggml_matmul(ctx, &mut enc, &pw, &xb, t, &gu).map_err(e)?;
        kernels::glu_pairs(ctx, &mut enc, op, &gu, &got_b, n).map_err(e)?;
    }
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&got_b, tokens * rows).map_err(e)?;
    let want = ctx.read_f32(&want_b, tokens * rows).map_err(e)?;
    score("ggml gate/up pairs vs split", Check::Exact, &got, &want)?;
    let mut refs = Vec::new();
    for m in [&gb, &ub] {
        let enc_g = ggml_encoding(qtype);
        let mm = Matrix::from_encoded("w", rows, cols, &enc_g, m).map_err(|e| e.to_string())?;
        let mut out = vec![0f32; tokens * rows];
        mm.matmul(&x, ActQuant::None, &MatmulOptions::default(), &mut out)
            .map_err(|e| e.to_string())?;
        refs.push(out);
    }
    let want_ref = glu_ref(op, &refs[0], &refs[1])?;
    score(
        "ggml gate/up pairs vs reference",
        Check::Nmse(1e-6),
        &got,
        &want_ref,
    )
    .map(|s| format!("{s}, {} binding(s)", pw.parts()))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    use TernaryLayout::{Base3, Bits2};
    // (layout, (rows, cols, group), tokens, int4, fused norm, op, split across bindings)
    let shapes = [
        (Bits2, (1, 1, 0), 1, false, false, EltOp::SwiGlu, false),
        (Bits2, (17, 257, 0), 1, false, true, EltOp::Relu2Glu, false),
        (Bits2, (33, 2560, 0), 1, true, true, EltOp::SwiGlu, false),
        (Bits2, (9, 1024, 256), 2, false, true, EltOp::SwiGlu, false),
        (
            Bits2,
            (31, 1000, 40),
            3,
            true,
            false,
            EltOp::Relu2Glu,
            false,
        ),
        (Base3, (5, 80, 1), 1, false, true, EltOp::SwiGlu, false),
        (Base3, (17, 1000, 0), 1, true, true, EltOp::Relu2Glu, false),
        (Bits2, (300, 2560, 0), 1, false, true, EltOp::Relu2Glu, true),
        (
            Bits2,
            (150, 2560, 128),
            2,
            false,
            false,
            EltOp::SwiGlu,
            true,
        ),
        (Bits2, (70, 513, 0), 5, false, false, EltOp::SwiGlu, false),
        (Bits2, (600, 512, 0), 5, true, false, EltOp::Relu2Glu, true),
        (
            Base3,
            (65, 1000, 0),
            6,
            false,
            false,
            EltOp::Relu2Glu,
            false,
        ),
    ];
    for (layout, shape, tokens, act4, fuse, op, split) in shapes {
        let (rows, cols, group) = shape;
        v.push((
            format!(
                "gate/up pairs ternary {layout:?} {rows}×{cols} group {group} tokens {tokens} {} \
                 norm {fuse} {op:?}",
                if act4 { "int4" } else { "int8" }
            ),
            split,
            Box::new(move |c, r| run_ternary_pairs(c, r, layout, shape, tokens, act4, fuse, op)),
        ));
    }
    for (q, rows, cols, tokens, op, split) in [
        (GgmlType::Q4_1, 33, 576, 1, EltOp::SwiGlu, false),
        (GgmlType::Q8_0, 17, 1536, 2, EltOp::Relu2Glu, false),
        (GgmlType::Q6K, 9, 512, 1, EltOp::SwiGlu, false),
        (GgmlType::Q4_0, 50, 2560, 1, EltOp::SwiGlu, true),
        (GgmlType::Q8_0, 70, 576, 7, EltOp::SwiGlu, false),
        (GgmlType::Q4_1, 150, 512, 5, EltOp::Relu2Glu, true),
    ] {
        v.push((
            format!(
                "gate/up pairs ggml {} {rows}×{cols} tokens {tokens} {op:?}",
                q.name()
            ),
            split,
            Box::new(move |c, r| run_ggml_pairs(c, r, q, rows, cols, tokens, op)),
        ));
    }
    v
}
