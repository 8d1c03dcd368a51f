//! BitNet a4.8 on the GPU against `tern-reference`, bit for bit: the INT4 absmean and TopK-50% +
//! INT8 quantizers (alone and fused with RMSNorm), the ternary GEMV/GEMM on packed INT4
//! activations, and the sparse GEMV at several input sparsities and switch settings. Every case
//! runs twice, with the packed integer dot product (`dot4I8Packed`) and with the plain byte sum
//! (`GpuOptions::packed_dot`), on the same adapter.
//!
//! Rows cover odd sizes (1, 2, 31, 257, 1000), 2B4T's 2560 and 6912, many ties at the TopK
//! threshold (values from a small set), an all-zero row, a single huge outlier (1e30) and NaN.
//! Fused quantizers are checked against the reference quantizer applied to the GPU's unfused
//! `rmsnorm` output (the arithmetic the fused kernel repeats; see fused.rs).

use super::*;
use tern_gpu::kernels::{A48Quant, ActInt8};

/// Rows of test activations: `kind` 0 normal with an outlier, 1 ties (small set of values),
/// 2 a single huge outlier, 3 with NaN, 4 magnitudes over 2^±60, 5 keys a few ulps apart with
/// copies, 6 the TopK threshold key on a bin boundary of the GPU's select; the last of several
/// rows is all zeros.
pub(super) fn rows_of(rng: &mut Rng, rows: usize, n: usize, kind: u32) -> Vec<f32> {
    let mut x = activations(rng, rows, n);
    for r in 0..rows {
        let row = &mut x[r * n..(r + 1) * n];
        if rows > 1 && r == rows - 1 {
            continue; // all zero (activations() made it so)
        }
        match kind {
            1 => row
                .iter_mut()
                .for_each(|v| *v = ((rng.next() % 5) as f32 - 2.0) * 0.75),
            2 => {
                let i = rng.next() as usize % n;
                row[i] = if r % 2 == 0 { 1e30 } else { -1e30 };
            }
            3 if n > 3 => row[rng.next() as usize % n] = f32::NAN,
            // Magnitudes spread over 2^±60 (the TopK threshold below its first 8-octave window).
            4 => row.iter_mut().for_each(|v| {
                let e = (rng.next() % 121) as i32 - 60;
                *v = (1.0 + rng.unit())
                    * 2f32.powi(e)
                    * if rng.next() % 2 == 0 { 1.0 } else { -1.0 };
            }),
            // Keys one ulp apart and a few exact copies around the median (the select's last
            // passes, ties straddling the cut).
            5 => {
                let m = 0.75f32.to_bits();
                row.iter_mut().for_each(|v| {
                    let b = m + (rng.next() % 7) as u32;
                    *v = f32::from_bits(if rng.next() % 2 == 0 {
                        b
                    } else {
                        b | 0x8000_0000
                    }) * if rng.next() % 3 == 0 { 4.0 } else { 1.0 };
                });
            }
            // The k-th largest key exactly on the select's first bin boundary (the largest
            // bits − 65535): the top k share one bin, all kept, T = that bin's lowest key.
            6 if n >= 4 => {
                let (a, t) = (0x3f80_0000u32, 0x3f80_0000u32 - 65535);
                for (i, v) in row.iter_mut().enumerate() {
                    let bits = match i {
                        0 => a,
                        1 => t,
                        _ if i < n / 2 => t + 1 + (rng.next() % 65534) as u32,
                        _ => (rng.unit() * 1e-3).to_bits(),
                    };
                    let neg = if rng.next() % 2 == 0 { 0 } else { 0x8000_0000 };
                    *v = f32::from_bits(bits | neg);
                }
            }
            _ => {}
        }
    }
    x
}

/// The quantized codes of token `t` as the GPU stored them.
fn codes(q: &[u8], a: &ActInt8, t: usize) -> Vec<i8> {
    let (stride, n) = (a.stride as usize * 4, a.cols as usize);
    let row = &q[t * stride..(t + 1) * stride];
    (0..n)
        .map(|c| match a.act {
            tern_gpu::ActBits::Int8 => row[c] as i8,
            tern_gpu::ActBits::Int4 => {
                let (w, j) = (c / 8, c % 8);
                let byte = row[4 * w + (j % 4)];
                let nib = if j < 4 { byte & 0xf } else { byte >> 4 };
                ((nib << 4) as i8) >> 4
            }
        })
        .collect()
}

fn run_quant(
    ctx: &GpuContext,
    rng: &mut Rng,
    kind: A48Quant,
    fused: bool,
    rows: usize,
    n: usize,
    data: u32,
) -> Result<String, String> {
    let x = rows_of(rng, rows, n, data);
    let w: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let e = |e: GpuError| e.to_string();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let wb = ctx.upload("w", &f32_bytes(&w)).map_err(e)?;
    let yb = ctx.zeroed("y", (rows * n * 4) as u64).map_err(e)?;
    let a8 = ActInt8::alloc(ctx, rows as u64, n as u64).map_err(e)?;
    // Garbage in the buffers first: every word of every row must be written.
    let junk = vec![0xa5u8; a8.q.size() as usize];
    ctx.queue.write_buffer(&a8.q, 0, &junk);
    let a = match kind {
        A48Quant::Int4Absmean => a8.as_int4().map_err(e)?,
        A48Quant::TopK50Int8 => a8,
    };
    let mut enc = ctx.encoder();
    let norm = if fused {
        kernels::rmsnorm(ctx, &mut enc, &xb, &wb, &yb, n as u64, rows as u64, 1e-5).map_err(e)?;
        Some((&wb, 1e-5))
    } else {
        None
    };
    kernels::quantize_act_a48_into(ctx, &mut enc, &xb, norm, kind, &a).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let src = if fused {
        ctx.read_f32(&yb, rows * n).map_err(e)?
    } else {
        x
    };
    let q = ctx
        .read_bytes(&a.q, 0, u64::from(a.stride) * rows as u64 * 4)
        .map_err(e)?;
    let s = ctx.read_f32(&a.s, rows).map_err(e)?;
    let mut kept = 0usize;
    for t in 0..rows {
        let xr = &src[t * n..(t + 1) * n];
        let mut want = vec![0i8; n];
        let ws = match kind {
            A48Quant::Int4Absmean => tern_reference::quantize_act_int4(xr, &mut want),
            A48Quant::TopK50Int8 => tern_reference::topk50_int8(xr, &mut want),
        }
        .map_err(|e| e.to_string())?;
        let got = codes(&q, &a, t);
        if let Some(c) = (0..n).find(|&c| got[c] != want[c]) {
            return Err(format!(
                "row {t}: column {c}: gpu {} vs reference {} (x {})",
                got[c], want[c], xr[c]
            ));
        }
        if ws.to_bits() != s[t].to_bits() {
            return Err(format!("row {t}: scale {} vs reference {ws}", s[t]));
        }
        let stride = a.stride as usize * 4;
        let used = match a.act {
            tern_gpu::ActBits::Int8 => n,
            tern_gpu::ActBits::Int4 => n.div_ceil(8) * 4,
        };
        let pad = &q[t * stride + used..(t + 1) * stride];
        let last_ok = match a.act {
            // The last INT4 word may hold columns past n: those nibbles must be 0.
            tern_gpu::ActBits::Int4 => (n..n.div_ceil(8) * 8).all(|c| {
                let (w, j) = (c / 8, c % 8);
                let byte = q[t * stride + 4 * w + (j % 4)];
                (if j < 4 { byte & 0xf } else { byte >> 4 }) == 0
            }),
            tern_gpu::ActBits::Int8 => true,
        };
        if pad.iter().any(|&b| b != 0) || !last_ok {
            return Err(format!("row {t}: padding past {n} columns is not zero"));
        }
        kept += want.iter().filter(|&&v| v != 0).count();
    }
    Ok(format!(
        "codes and scales bit-exact ({kept} non-zero codes)"
    ))
}

/// Which matmul launcher a case runs.
#[derive(Clone, Copy, Debug)]
enum Mm {
    Gemv,
    Gemm,
    /// The GEMM's 64 × 64 tile (2bit).
    GemmWide,
    /// The GEMM's 64 × 128 tile (2bit, group 0).
    GemmTall,
    /// Its 64 × 64 form (128 invocations).
    GemmTallHalf,
    /// The cooperative-matrix tile (2bit, group 0; where the adapter has it, see
    /// `gemm::coop_available`).
    GemmCoop,
    /// The sparse GEMV with this switch density (0: dense walk, 1: sparse walk).
    Sparse(f64),
}

/// Ternary weights and their reference matrix.
fn ternary(
    ctx: &GpuContext,
    rng: &mut Rng,
    layout: TernaryLayout,
    st: FloatType,
    rows: usize,
    cols: usize,
    group: u32,
) -> Result<(TernaryWeight, Matrix), String> {
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let ns = ternary::scale_count(rows as u64, cols as u64, group).unwrap() as usize;
    let scales: Vec<f32> = (0..ns).map(|_| 0.01 + rng.unit() * 0.5).collect();
    let r = rows as u64;
    let bytes = ternary::pack(layout, r, cols as u64, &trits, group, st, &scales).unwrap();
    let enc = Encoding::Ternary {
        layout,
        group,
        scale_type: st,
    };
    let m = Matrix::from_encoded("w", rows, cols, &enc, &bytes).map_err(|e| e.to_string())?;
    let w = TernaryWeight::upload(ctx, layout, r, cols as u64, group, st, &bytes)
        .map_err(|e| e.to_string())?;
    Ok((w, m))
}

#[allow(clippy::too_many_arguments)]
fn run_matmul(
    ctx: &GpuContext,
    rng: &mut Rng,
    mm: Mm,
    act: ActQuant,
    layout: TernaryLayout,
    st: FloatType,
    (rows, cols, group, tokens): (usize, usize, u32, usize),
    sparsity: f64,
) -> Result<String, String> {
    let (w, m) = ternary(ctx, rng, layout, st, rows, cols, group)?;
    let mut x = rows_of(rng, tokens, cols, 0);
    // Zero a `sparsity` fraction of the inputs (ReLU²-like), in runs so whole words vanish too.
    for v in x.iter_mut() {
        if (rng.unit() as f64) < sparsity {
            *v = 0.0;
        }
    }
    let mut want = vec![0f32; tokens * rows];
    m.matmul(&x, act, &MatmulOptions::default(), &mut want)
        .map_err(|e| e.to_string())?;
    let e = |e: GpuError| e.to_string();
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let y = ctx
        .upload("y", &f32_bytes(&vec![f32::NAN; tokens * rows]))
        .map_err(e)?;
    let a8 = ActInt8::alloc(ctx, tokens as u64, cols as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    let a = match act {
        ActQuant::Int4 => {
            let a4 = a8.as_int4().map_err(e)?;
            let k = A48Quant::Int4Absmean;
            kernels::quantize_act_a48_into(ctx, &mut enc, &xb, None, k, &a4).map_err(e)?;
            a4
        }
        ActQuant::Topk50Int8 => {
            let k = A48Quant::TopK50Int8;
            kernels::quantize_act_a48_into(ctx, &mut enc, &xb, None, k, &a8).map_err(e)?;
            a8
        }
        _ => {
            kernels::quantize_act_int8_into(ctx, &mut enc, &xb, &a8).map_err(e)?;
            a8
        }
    };
    match mm {
        Mm::Gemv => kernels::ternary_gemv(ctx, &mut enc, &w, &a, &y),
        Mm::Gemm => kernels::ternary_gemm(ctx, &mut enc, &w, &a, &y, AUTO_PICK.1),
        Mm::GemmWide => {
            kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, kernels::GemmTile::Wide)
        }
        Mm::GemmTall => {
            kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, kernels::GemmTile::Tall)
        }
        Mm::GemmTallHalf => {
            let half = kernels::GemmTile::TallHalf;
            kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, half)
        }
        Mm::GemmCoop => {
            if !super::gemm::coop_available(ctx)? {
                return Ok("no cooperative matrices on this adapter: not run".into());
            }
            kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, kernels::GemmTile::Coop)
        }
        Mm::Sparse(d) => kernels::ternary_gemv_sparse(ctx, &mut enc, &w, &a, &y, d),
    }
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&y, tokens * rows).map_err(e)?;
    score("a4.8 matmul", Check::Exact, &got, &want)
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let shapes = [
        (1, 1),
        (1, 2),
        (1, 31),
        (3, 257),
        (2, 2560),
        (1, 6912),
        (5, 1000),
        // The register-held rows end at 3072 values; 3073 takes the re-reading path.
        (2, 3072),
        (2, 3073),
        // The 12 register strips of the one-round-trip loads (branch h-a48q): a partial second
        // strip, 11 whole strips, a partial last strip.
        (2, 511),
        (1, 2816),
        (2, 2817),
    ];
    for kind in [A48Quant::Int4Absmean, A48Quant::TopK50Int8] {
        for fused in [false, true] {
            for (rows, n) in shapes {
                for data in [0u32, 1, 2, 3, 4, 5, 6] {
                    if data > 0 && n > 3073 || data > 3 && n < 31 {
                        continue;
                    }
                    v.push((
                        format!("a48 {kind:?} fused {fused} {rows}×{n} data {data}"),
                        false,
                        Box::new(move |c, r| run_quant(c, r, kind, fused, rows, n, data)),
                    ));
                }
            }
        }
    }
    // Ternary × INT4: GEMV and GEMM, both layouts, scale types, groups (none, on 16-column steps,
    // inside packed words), odd shapes, several token tiles.
    let l2 = TernaryLayout::Bits2;
    let l3 = TernaryLayout::Base3;
    let (f32t, f16t, bf16t) = (FloatType::F32, FloatType::F16, FloatType::Bf16);
    let mm_cases: [(Mm, TernaryLayout, FloatType, (usize, usize, u32, usize)); 33] = [
        (Mm::Gemv, l2, f32t, (1, 32, 0, 1)),
        (Mm::Gemv, l2, f16t, (37, 1000, 0, 1)),
        (Mm::Gemv, l2, bf16t, (9, 200, 40, 2)),
        (Mm::Gemv, l2, f16t, (33, 96, 32, 3)),
        (Mm::Gemv, l3, bf16t, (70, 1000, 0, 2)),
        (Mm::Gemv, l2, f32t, (64, 2560, 128, 1)),
        (Mm::Gemv, l3, f16t, (17, 200, 40, 1)),
        (Mm::Gemm, l2, f32t, (1, 32, 0, 1)),
        (Mm::Gemm, l2, f16t, (33, 96, 0, 7)),
        (Mm::Gemm, l3, f32t, (70, 2560, 0, 9)),
        (Mm::Gemm, l2, bf16t, (257, 1000, 0, 40)),
        (Mm::Gemm, l2, f16t, (128, 2560, 128, 33)),
        (Mm::Gemm, l2, f32t, (65, 480, 24, 5)),
        (Mm::Gemm, l3, f16t, (40, 320, 160, 33)),
        // The 64 × 64 tile (2bit): partial row and token tiles, two token tiles, groups.
        (Mm::GemmWide, l2, f32t, (1, 32, 0, 1)),
        (Mm::GemmWide, l2, bf16t, (257, 1000, 0, 70)),
        (Mm::GemmWide, l2, f16t, (128, 2560, 128, 33)),
        (Mm::GemmWide, l2, f32t, (65, 480, 24, 65)),
        (Mm::GemmWide, l2, f16t, (70, 2560, 0, 64)),
        // The 64 × 128 tile (2bit, group 0): partial tiles, a partial K step, two token tiles.
        (Mm::GemmTall, l2, f32t, (1, 32, 0, 1)),
        (Mm::GemmTall, l2, bf16t, (257, 1000, 0, 130)),
        (Mm::GemmTall, l2, f16t, (70, 2560, 0, 128)),
        (Mm::GemmTall, l2, f32t, (65, 60, 0, 5)),
        (Mm::GemmTallHalf, l2, bf16t, (257, 1000, 0, 130)),
        (Mm::GemmTallHalf, l2, f16t, (65, 60, 0, 5)),
        // The cooperative-matrix tile (2bit, group 0): partial tiles and K steps, token tiles.
        (Mm::GemmCoop, l2, f32t, (1, 32, 0, 1)),
        (Mm::GemmCoop, l2, bf16t, (257, 1000, 0, 130)),
        (Mm::GemmCoop, l2, f16t, (70, 2560, 0, 128)),
        (Mm::GemmCoop, l2, f32t, (65, 60, 0, 5)),
        (Mm::GemmCoop, l2, f16t, (70, 2560, 256, 128)),
        (Mm::GemmCoop, l2, bf16t, (65, 1024, 32, 65)),
        // ... and over scale groups of a multiple of 64 columns (GROUPED)
        (Mm::GemmTall, l2, f16t, (70, 2560, 256, 128)),
        (Mm::GemmTallHalf, l2, f32t, (65, 1024, 64, 65)),
    ];
    for (mm, layout, st, shape) in mm_cases {
        v.push((
            format!("ternary×int4 {mm:?} {layout:?} {st:?} {shape:?}"),
            false,
            Box::new(move |c, r| run_matmul(c, r, mm, ActQuant::Int4, layout, st, shape, 0.0)),
        ));
    }
    // The GEMM's 64 × 64 and 64 × 128 tiles on INT8 activations too, so both dot kinds cover
    // them.
    for (mm, shape) in [
        (Mm::GemmWide, (257, 1000, 0, 70)),
        (Mm::GemmWide, (65, 480, 24, 65)),
        (Mm::GemmTall, (257, 1000, 0, 130)),
        (Mm::GemmTallHalf, (70, 2560, 0, 65)),
        (Mm::GemmTall, (70, 2560, 256, 130)),
        (Mm::GemmCoop, (257, 1000, 0, 130)),
    ] {
        v.push((
            format!("ternary×int8 {mm:?} Bits2 F16 {shape:?}"),
            false,
            Box::new(move |c, r| run_matmul(c, r, mm, ActQuant::Int8, l2, f16t, shape, 0.0)),
        ));
    }
    // The sparse GEMV: INT8 (down projection: ReLU²-like zeros) and TopK inputs (attention
    // output), at 0/50/80/90/100% input sparsity, the switch forcing each walk and at half the words.
    for (act, shape) in [
        (ActQuant::Int8, (2560, 6912, 0, 1)),
        (ActQuant::Int8, (100, 1024, 256, 2)),
        (ActQuant::Int8, (33, 36, 4, 1)),
        (ActQuant::Topk50Int8, (640, 2560, 0, 1)),
        (ActQuant::Topk50Int8, (31, 257, 0, 3)),
    ] {
        for sparsity in [0.0, 0.5, 0.8, 0.9, 1.0] {
            for d in [0.0, 1.0, 0.5] {
                v.push((
                    format!("sparse gemv {act:?} {shape:?} sparsity {sparsity} switch {d}"),
                    false,
                    Box::new(move |c, r| {
                        run_matmul(
                            c,
                            r,
                            Mm::Sparse(d),
                            act,
                            l2,
                            FloatType::F16,
                            shape,
                            sparsity,
                        )
                    }),
                ));
            }
        }
    }
    v
}
