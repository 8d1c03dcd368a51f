//! Parity of the ggml GEMV's fused RMSNorm prologue (`ggml_gemv.wgsl`, `NORM` = 1; issue 15): the
//! GEMV given the raw residual rows and the norm weight against `rmsnorm` followed by the plain
//! GEMV (the two passes it replaces at decode), with every epilogue, and against the CPU reference
//! (`tern_reference` RMSNorm then the ggml matmul). The fused variant runs 8 invocations per row
//! (the plain one 32), so its sums are added in another order: NMSE ≤ 1e-11 against the two
//! passes (a wrong multiplier or column is ~1e-2 and more), the usual 1e-6 against the CPU. Shapes: every
//! block type, one block per row, odd row and block counts (the GEMV's two-units-per-step loop and
//! its tail), rows past 4 · 256 columns (the sum of squares' four-loads loop and its tail),
//! SmolLM2's 576 columns, several tokens (with an all-zero row), gate/up row pairs with the GLU
//! epilogue, a weight split across bindings.

use super::*;
use tern_gpu::kernels::{Epilogue, GgmlNorm};

const EPS: f32 = 1e-5;

/// `pairs`: the gate/up weight of row pairs (`rows` gate rows + `rows` up rows) with the SwiGLU
/// epilogue (`epi` ignored); else a plain weight with `epi` (the GLU epilogues with a gate in y).
#[allow(clippy::too_many_arguments)]
fn run_ggml_norm(
    ctx: &GpuContext,
    rng: &mut Rng,
    qtype: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
    epi: Epilogue,
    pairs: bool,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let (r, c, t) = (rows as u64, cols as u64, tokens as u64);
    let nb = rows * cols / qtype.block_elems();
    let (wb, ub) = (random_blocks(rng, qtype, nb), random_blocks(rng, qtype, nb));
    let (w, epi) = if pairs {
        let pw = tern_gpu::model::ggml_gate_up(ctx, qtype, r, c, &wb, &ub).map_err(e)?;
        (pw, Epilogue::SwiGlu)
    } else {
        (GgmlWeight::upload(ctx, qtype, r, c, &wb).map_err(e)?, epi)
    };
    let x = activations(rng, tokens, cols);
    let nw: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
    let y0: Vec<f32> = (0..tokens * rows).map(|_| rng.normal()).collect();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let nwb = ctx.upload("norm", &f32_bytes(&nw)).map_err(e)?;
    let normed = ctx
        .zeroed("normed", (tokens * cols * 4) as u64)
        .map_err(e)?;
    let want_b = ctx.upload("want", &f32_bytes(&y0)).map_err(e)?;
    let got_b = ctx.upload("got", &f32_bytes(&y0)).map_err(e)?;
    let norm = Some(GgmlNorm {
        weight: &nwb,
        eps: EPS,
    });
    let mut enc = ctx.encoder();
    kernels::rmsnorm(ctx, &mut enc, &xb, &nwb, &normed, c, t, EPS).map_err(e)?;
    kernels::ggml_gemv_fused(ctx, &mut enc, &w, &normed, t, None, epi, &want_b).map_err(e)?;
    kernels::ggml_gemv_fused(ctx, &mut enc, &w, &xb, t, norm, epi, &got_b).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&got_b, tokens * rows).map_err(e)?;
    let want = ctx.read_f32(&want_b, tokens * rows).map_err(e)?;
    let s = score(
        "fused norm vs rmsnorm + GEMV",
        Check::Nmse(1e-11),
        &got,
        &want,
    )?;
    // the CPU: RMSNorm, the matmul, the epilogue's arithmetic
    let mut xn = vec![0f32; tokens * cols];
    tern_reference::kernels::rmsnorm(&x, &nw, EPS, &mut xn).map_err(|e| e.to_string())?;
    let dense = |bytes: &[u8]| -> Result<Vec<f32>, String> {
        let m = Matrix::from_encoded("w", rows, cols, &ggml_encoding(qtype), bytes)
            .map_err(|e| e.to_string())?;
        let mut out = vec![0f32; tokens * rows];
        m.matmul(&xn, ActQuant::None, &MatmulOptions::default(), &mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    };
    let silu = |g: f32| g / (1.0 + (-g).exp());
    let cpu: Vec<f32> = match (pairs, epi) {
        (true, _) => {
            let (g, u) = (dense(&wb)?, dense(&ub)?);
            g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect()
        }
        (false, Epilogue::Store) => dense(&wb)?,
        (false, Epilogue::Add) => dense(&wb)?.iter().zip(&y0).map(|(v, y)| y + v).collect(),
        (false, Epilogue::SwiGlu) => dense(&wb)?
            .iter()
            .zip(&y0)
            .map(|(v, g)| silu(*g) * v)
            .collect(),
        (false, Epilogue::Relu2Glu) => {
            let d = dense(&wb)?;
            d.iter()
                .zip(&y0)
                .map(|(v, g)| g.max(0.0).powi(2) * v)
                .collect()
        }
    };
    let c = score("fused norm vs CPU", Check::Nmse(1e-6), &got, &cpu)?;
    Ok(format!("{s}; CPU {c}, {} binding(s)", w.parts()))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    use Epilogue::*;
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let mut add = |q: GgmlType, rows, cols, tokens, epi, pairs, split| {
        let name = format!(
            "ggml norm prologue {q:?} {rows}×{cols} tokens {tokens} {}",
            if pairs {
                "gate/up pairs".into()
            } else {
                format!("{epi:?}")
            }
        );
        let f: CaseFn =
            Box::new(move |c, r| run_ggml_norm(c, r, q, rows, cols, tokens, epi, pairs));
        v.push((name, split, f));
    };
    for q in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        add(q, 1, 32, 1, Store, false, false);
        add(q, 33, 576, 1, Add, false, false);
        add(q, 17, 1184, 3, Store, false, false);
        add(q, 9, 2080, 2, Relu2Glu, false, false);
    }
    add(GgmlType::Q4_1, 31, 576, 1, Store, true, false);
    add(GgmlType::Q8_0, 13, 1536, 2, SwiGlu, false, false);
    add(GgmlType::Q6K, 7, 256, 1, Store, false, false);
    add(GgmlType::Q6K, 19, 2560, 2, Add, false, false);
    add(GgmlType::Q4_1, 500, 1024, 2, Add, false, true);
    v
}
