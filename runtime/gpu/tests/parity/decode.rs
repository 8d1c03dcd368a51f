//! Parity of the decode fusions (issue 15): the ternary GEMV with its norm + quantization
//! prologue (INT8 absmax, INT4 absmean) and its epilogues (residual add, ReLU²/SiLU GLU), and the
//! ggml GEMV's epilogues, each against the unfused GPU passes it replaces (`rmsnorm_quant_int8` /
//! `quantize_act_a48_into` → `ternary_gemv` → `elementwise`), which the other cases check against
//! the reference: the fused result must be the same bits. Run by `parity_a48` with both integer
//! dot products. Shapes: one row/column, odd sizes, scale groups (whole-word and straddling), rows
//! 16-byte aligned (vec4 loads) and not, several tokens, weights split across bindings.

use super::*;
use tern_gpu::kernels::{ActInt8, Epilogue, NormPrologue};

const EPS: f32 = 1e-5;

fn elt(epi: Epilogue) -> Option<EltOp> {
    match epi {
        Epilogue::Store => None,
        Epilogue::Add => Some(EltOp::Add),
        Epilogue::Relu2Glu => Some(EltOp::Relu2Glu),
        Epilogue::SwiGlu => Some(EltOp::SwiGlu),
    }
}

/// `fuse_norm`: the GEMV computes its input from the f32 rows (else from the quantized buffers).
/// `dec`: the shape must go to the decode kernel's fused variant (`ternary_gemv_dec_norm.wgsl`);
/// then the fused result is also checked against the CPU (the GPU norm's tree order, bit-exact
/// with its CPU emulation in parity/fused.rs, then the reference's quantizer and ternary matmul).
#[allow(clippy::too_many_arguments)]
fn run_fused_ternary(
    ctx: &GpuContext,
    rng: &mut Rng,
    layout: TernaryLayout,
    rows: usize,
    cols: usize,
    group: u32,
    tokens: usize,
    act4: bool,
    fuse_norm: bool,
    epi: Epilogue,
    dec: bool,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let ns = ternary::scale_count(rows as u64, cols as u64, group).unwrap() as usize;
    let scales: Vec<f32> = (0..ns).map(|_| 0.01 + rng.unit() * 0.5).collect();
    let st = FloatType::F16;
    let bytes = ternary::pack(layout, rows as u64, cols as u64, &trits, group, st, &scales)
        .map_err(|e| e.to_string())?;
    let w = TernaryWeight::upload(ctx, layout, rows as u64, cols as u64, group, st, &bytes)
        .map_err(e)?;
    let x = activations(rng, tokens, cols);
    let nw: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
    let y0: Vec<f32> = (0..tokens * rows).map(|_| rng.normal()).collect();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let nb = ctx.upload("norm", &f32_bytes(&nw)).map_err(e)?;
    let yb = (tokens * rows * 4) as u64;
    let (proj, want_b) = (
        ctx.zeroed("proj", yb).map_err(e)?,
        ctx.zeroed("want", yb).map_err(e)?,
    );
    let y0b = ctx.upload("y0", &f32_bytes(&y0)).map_err(e)?;
    let got_b = ctx.upload("got", &f32_bytes(&y0)).map_err(e)?;
    let a8 = ActInt8::alloc(ctx, tokens as u64, cols as u64).map_err(e)?;
    let a = if act4 { a8.as_int4().map_err(e)? } else { a8 };
    if dec && !kernels::dec_norm_fits(&w, &a, AUTO_PICK.0) {
        return Err("the decode kernel's fused variant does not take this shape".into());
    }
    // the unfused passes
    let mut enc = ctx.encoder();
    if act4 {
        let k = kernels::A48Quant::Int4Absmean;
        kernels::quantize_act_a48_into(ctx, &mut enc, &xb, Some((&nb, EPS)), k, &a).map_err(e)?;
    } else {
        kernels::rmsnorm_quant_int8(ctx, &mut enc, &xb, &nb, cols as u64, EPS, &a).map_err(e)?;
    }
    kernels::ternary_gemv(ctx, &mut enc, &w, &a, &proj).map_err(e)?;
    let n = (tokens * rows) as u64;
    match elt(epi) {
        Some(op) => kernels::elementwise(ctx, &mut enc, op, &y0b, &proj, &want_b, n).map_err(e)?,
        None => enc.copy_buffer_to_buffer(&proj, 0, &want_b, 0, yb),
    }
    ctx.submit_wait(enc).map_err(e)?;
    // the fused GEMV (reading the quantized buffers the unfused pass left when not fusing the norm)
    let norm = fuse_norm.then_some(NormPrologue {
        x: &xb,
        weight: &nb,
        eps: EPS,
        topk: false,
    });
    let mut enc = ctx.encoder();
    kernels::ternary_gemv_fused(ctx, &mut enc, &w, &a, norm, epi, &got_b, AUTO_PICK.0)
        .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&got_b, tokens * rows).map_err(e)?;
    let want = ctx.read_f32(&want_b, tokens * rows).map_err(e)?;
    let s = score("fused ternary", Check::Exact, &got, &want)?;
    let kernel = if fuse_norm && kernels::dec_norm_fits(&w, &a, AUTO_PICK.0) {
        "decode kernel"
    } else {
        "other kernel"
    };
    if dec && matches!(epi, Epilogue::Store | Epilogue::Add) {
        let normed_b = ctx
            .zeroed("normed", (tokens * cols * 4) as u64)
            .map_err(e)?;
        let (c, t) = (cols as u64, tokens as u64);
        let mut enc = ctx.encoder();
        kernels::rmsnorm(ctx, &mut enc, &xb, &nb, &normed_b, c, t, EPS).map_err(e)?;
        ctx.submit_wait(enc).map_err(e)?;
        let normed = ctx.read_f32(&normed_b, tokens * cols).map_err(e)?;
        let enc_t = Encoding::Ternary {
            layout,
            group,
            scale_type: st,
        };
        let m = Matrix::from_encoded("w", rows, cols, &enc_t, &bytes).map_err(|e| e.to_string())?;
        let aq = if act4 { ActQuant::Int4 } else { ActQuant::Int8 };
        let mut cpu = vec![0f32; tokens * rows];
        m.matmul(&normed, aq, &MatmulOptions::default(), &mut cpu)
            .map_err(|e| e.to_string())?;
        if epi == Epilogue::Add {
            cpu.iter_mut().zip(&y0).for_each(|(c, y)| *c += y);
        }
        score("fused ternary vs CPU", Check::Exact, &got, &cpu)?;
    }
    Ok(format!("{s}, {kernel}, {} binding(s)", w.parts()))
}

fn run_ggml_epi(
    ctx: &GpuContext,
    rng: &mut Rng,
    qtype: GgmlType,
    rows: usize,
    cols: usize,
    epi: Epilogue,
) -> Result<String, String> {
    let e = |e: GpuError| e.to_string();
    let bytes = random_blocks(rng, qtype, rows * cols / qtype.block_elems());
    let w = GgmlWeight::upload(ctx, qtype, rows as u64, cols as u64, &bytes).map_err(e)?;
    let x = activations(rng, 1, cols);
    let y0: Vec<f32> = (0..rows).map(|_| rng.normal()).collect();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let (proj, want_b) = (
        ctx.zeroed("proj", rows as u64 * 4).map_err(e)?,
        ctx.zeroed("want", rows as u64 * 4).map_err(e)?,
    );
    let y0b = ctx.upload("y0", &f32_bytes(&y0)).map_err(e)?;
    let got_b = ctx.upload("got", &f32_bytes(&y0)).map_err(e)?;
    let mut enc = ctx.encoder();
    kernels::ggml_gemv(ctx, &mut enc, &w, &xb, 1, &proj).map_err(e)?;
    let op = elt(epi).ok_or("no epilogue")?;
    kernels::elementwise(ctx, &mut enc, op, &y0b, &proj, &want_b, rows as u64).map_err(e)?;
    kernels::ggml_gemv_epi(ctx, &mut enc, &w, &xb, 1, epi, &got_b).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&got_b, rows).map_err(e)?;
    let want = ctx.read_f32(&want_b, rows).map_err(e)?;
    score("ggml epilogue", Check::Exact, &got, &want)
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    use Epilogue::*;
    use TernaryLayout::{Base3, Bits2};
    let shapes: [(TernaryLayout, usize, usize, u32, usize, Epilogue); 12] = [
        (Bits2, 1, 1, 0, 1, Store),
        (Bits2, 33, 257, 0, 1, Add),
        (Bits2, 17, 2560, 0, 1, Relu2Glu),
        (Bits2, 9, 1024, 256, 2, SwiGlu),
        (Bits2, 31, 1000, 40, 3, Add),
        (Base3, 1, 31, 0, 1, Store),
        (Base3, 9, 2560, 256, 1, Add),
        (Base3, 17, 1000, 0, 2, Relu2Glu),
        (Base3, 5, 80, 1, 1, SwiGlu),
        // base-3 words across a group boundary on an activation word (the split fast path)
        (Base3, 3, 312, 24, 1, Store),
        (Base3, 7, 640, 128, 2, Add),
        (Bits2, 8, 6912, 0, 1, Add),
    ];
    for (layout, rows, cols, group, tokens, epi) in shapes {
        for act4 in [false, true] {
            for fuse_norm in [true, false] {
                let name = format!(
                    "fused ternary {layout:?} {rows}×{cols} group {group} tokens {tokens} \
                     {} norm {fuse_norm} {epi:?}",
                    if act4 { "int4" } else { "int8" }
                );
                v.push((
                    name,
                    false,
                    Box::new(move |c, r| {
                        run_fused_ternary(
                            c, r, layout, rows, cols, group, tokens, act4, fuse_norm, epi, false,
                        )
                    }),
                ));
            }
        }
    }
    // shapes the decode kernel's fused variant takes (2-bit, rows of whole vec4 words, scale
    // groups of whole 64-column chunks): odd row counts (a last workgroup of 1 live row of 32),
    // rows past the last whole 64 columns, the register path's limit (12 · 256 columns) and the
    // loop path past it, several tokens, one chunk per row (lanes without a chunk); against the
    // unfused passes and the CPU
    let dec_shapes: [(usize, usize, u32, usize, Epilogue); 6] = [
        (65, 3000, 0, 3, Add),
        (40, 3072, 128, 1, Store),
        (34, 3136, 448, 2, Store),
        (3, 64, 0, 1, Store),
        (33, 2560, 0, 1, Add),
        (32, 6912, 0, 2, SwiGlu),
    ];
    for (rows, cols, group, tokens, epi) in dec_shapes {
        for act4 in [false, true] {
            let name = format!(
                "fused decode norm ternary {rows}×{cols} group {group} tokens {tokens} {} {epi:?}",
                if act4 { "int4" } else { "int8" }
            );
            v.push((
                name,
                false,
                Box::new(move |c, r| {
                    run_fused_ternary(
                        c, r, Bits2, rows, cols, group, tokens, act4, true, epi, true,
                    )
                }),
            ));
        }
    }
    for (q, rows, cols, epi) in [
        (GgmlType::Q4_1, 33, 576, Add),
        (GgmlType::Q8_0, 17, 1536, SwiGlu),
        (GgmlType::Q6K, 9, 512, Relu2Glu),
    ] {
        v.push((
            format!("ggml_gemv {} {rows}×{cols} {epi:?}", q.name()),
            false,
            Box::new(move |c, r| run_ggml_epi(c, r, q, rows, cols, epi)),
        ));
    }
    v
}
