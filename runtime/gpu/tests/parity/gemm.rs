//! Tiled GEMMs (`tern_gpu::gemm`) and Q6_K against `tern-reference`'s `Matrix::matmul`.
//!
//! Ternary GEMM: bit-exact (as the GEMV). ggml GEMM and the Q6_K GEMV: NMSE ≤ 1e-10 (f32 sums in
//! another order than `dot_f32` give ~1e-14; a wrong nibble, scale or index gives ≥ ~1e-3).
//! Shapes: 1 row / 1 token, rows and tokens that are not multiples of the 64 × 32 tile, several
//! token tiles, 2B4T's 2560 columns, every kind of scale-group boundary of the ternary kernel
//! (none, on 16-column sub-steps, inside packed words, group 1), and `split` cases whose parts
//! start mid-tile.

use super::*;

/// Which launcher a case runs.
#[derive(Clone, Copy, Debug)]
pub(super) enum Path {
    Gemm,
    Gemv,
    /// `*_matmul` (GEMV or GEMM by token count).
    Matmul,
    /// The ternary GEMM's 64 × 64 tile (`GemmTile::Wide`, 2bit).
    GemmWide,
    /// The ternary GEMM's 64 × 128 tile (`GemmTile::Tall`, 2bit, group 0 or a multiple of 64).
    GemmTall,
    /// Its 64 × 64 form (`GemmTile::TallHalf`, 128 invocations).
    GemmTallHalf,
    /// The cooperative-matrix tile (`GemmTile::Coop`: tensor cores; 2bit, group 0). Where the
    /// adapter lacks the feature the case says so and passes, unless `TERN_EXPECT_COOP=1`
    /// (device runs) makes that a failure.
    GemmCoop,
}

/// Whether a cooperative-matrix case can run on `ctx`: `Ok(false)` (skip, saying why) where
/// the adapter lacks the feature, an error instead under `TERN_EXPECT_COOP=1`.
pub(super) fn coop_available(ctx: &GpuContext) -> Result<bool, String> {
    if ctx.coop_matrix() {
        return Ok(true);
    }
    if std::env::var("TERN_EXPECT_COOP").as_deref() == Ok("1") {
        return Err(format!(
            "TERN_EXPECT_COOP=1 but {} has no cooperative matrices (16×16×16 f16→f32, subgroups of 32)",
            ctx.info.name
        ));
    }
    Ok(false)
}

#[allow(clippy::too_many_arguments)]
fn run_ternary_gemm(
    ctx: &GpuContext,
    rng: &mut Rng,
    path: Path,
    layout: TernaryLayout,
    scale_type: FloatType,
    rows: usize,
    cols: usize,
    group: u32,
    tokens: usize,
) -> Result<String, String> {
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next() % 3) as i8 - 1)
        .collect();
    let ns = ternary::scale_count(rows as u64, cols as u64, group).unwrap() as usize;
    let scales: Vec<f32> = (0..ns).map(|_| 0.01 + rng.unit() * 0.5).collect();
    let bytes = ternary::pack(
        layout,
        rows as u64,
        cols as u64,
        &trits,
        group,
        scale_type,
        &scales,
    )
    .unwrap();
    let enc_t = Encoding::Ternary {
        layout,
        group,
        scale_type,
    };
    let m = Matrix::from_encoded("w", rows, cols, &enc_t, &bytes).unwrap();
    let x = activations(rng, tokens, cols);
    let mut want = vec![0f32; tokens * rows];
    m.matmul(&x, ActQuant::Int8, &MatmulOptions::default(), &mut want)
        .unwrap();

    let e = |e: GpuError| e.to_string();
    let w = TernaryWeight::upload(
        ctx,
        layout,
        rows as u64,
        cols as u64,
        group,
        scale_type,
        &bytes,
    )
    .map_err(e)?;
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    // NaN-filled output: a row or token the kernel forgets to write cannot pass.
    let y = ctx
        .upload("y", &f32_bytes(&vec![f32::NAN; tokens * rows]))
        .map_err(e)?;
    let mut enc = ctx.encoder();
    let a =
        kernels::quantize_act_int8(ctx, &mut enc, &xb, tokens as u64, cols as u64).map_err(e)?;
    match path {
        Path::Gemm => tern_gpu::kernels::ternary_gemm(ctx, &mut enc, &w, &a, &y, AUTO_PICK.1),
        Path::Gemv => kernels::ternary_gemv(ctx, &mut enc, &w, &a, &y),
        Path::Matmul => tern_gpu::kernels::ternary_matmul(ctx, &mut enc, &w, &a, &y, AUTO_PICK),
        Path::GemmWide => {
            let wide = tern_gpu::kernels::GemmTile::Wide;
            tern_gpu::kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, wide)
        }
        Path::GemmTall => {
            let tall = tern_gpu::kernels::GemmTile::Tall;
            tern_gpu::kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, tall)
        }
        Path::GemmTallHalf => {
            let half = tern_gpu::kernels::GemmTile::TallHalf;
            tern_gpu::kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, half)
        }
        Path::GemmCoop => {
            if !coop_available(ctx)? {
                return Ok("no cooperative matrices on this adapter: not run".into());
            }
            let coop = tern_gpu::kernels::GemmTile::Coop;
            tern_gpu::kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, coop)
        }
    }
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&y, tokens * rows).map_err(e)?;
    score("ternary gemm", Check::Exact, &got, &want)
        .map(|s| format!("{s}, {} binding(s)", w.parts()))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_ggml_gemm(
    ctx: &GpuContext,
    rng: &mut Rng,
    path: Path,
    qtype: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
) -> Result<String, String> {
    let bytes = random_blocks(rng, qtype, rows * cols / qtype.block_elems() as usize);
    let m = Matrix::from_encoded("w", rows, cols, &ggml_encoding(qtype), &bytes).unwrap();
    let x = activations(rng, tokens, cols);
    let mut want = vec![0f32; tokens * rows];
    m.matmul(&x, ActQuant::None, &MatmulOptions::default(), &mut want)
        .unwrap();
    let e = |e: GpuError| e.to_string();
    let w = GgmlWeight::upload(ctx, qtype, rows as u64, cols as u64, &bytes).map_err(e)?;
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let y = ctx
        .upload("y", &f32_bytes(&vec![f32::NAN; tokens * rows]))
        .map_err(e)?;
    let mut enc = ctx.encoder();
    let n = tokens as u64;
    match path {
        Path::Gemm => tern_gpu::kernels::ggml_gemm(ctx, &mut enc, &w, &xb, n, &y),
        Path::Gemv => kernels::ggml_gemv(ctx, &mut enc, &w, &xb, n, &y),
        Path::Matmul | Path::GemmWide | Path::GemmTall | Path::GemmTallHalf | Path::GemmCoop => {
            tern_gpu::kernels::ggml_matmul(ctx, &mut enc, &w, &xb, n, &y)
        }
    }
    .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    let got = ctx.read_f32(&y, tokens * rows).map_err(e)?;
    score("ggml gemm", Check::Nmse(1e-10), &got, &want)
        .map(|s| format!("{s}, {} binding(s)", w.parts()))
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let mut add = |name: String, split: bool, f: CaseFn| v.push((name, split, f));

    // Ternary GEMM: every layout × scale type over the tile-boundary shapes (group 0), then the
    // scale-group boundaries on f16 scales.
    for layout in [TernaryLayout::Bits2, TernaryLayout::Base3] {
        for st in [FloatType::F32, FloatType::F16, FloatType::Bf16] {
            for (rows, cols, tokens) in [
                (1, 32, 1),
                (33, 96, 7),
                (70, 2560, 9),
                (640, 2560, 33),
                (257, 1000, 64),
            ] {
                add(
                    format!("ternary_gemm {layout:?} {st:?} {rows}×{cols} tokens {tokens}"),
                    false,
                    Box::new(move |x, r| {
                        run_ternary_gemm(x, r, Path::Gemm, layout, st, rows, cols, 0, tokens)
                    }),
                );
            }
        }
        for (rows, cols, group, tokens) in [
            (9, 1000, 40, 5),    // inside packed words (40 % 16 ≠ 0)
            (17, 96, 32, 7),     // on 16-column sub-steps
            (5, 80, 1, 3),       // every column
            (65, 640, 64, 40),   // sub-steps, two token tiles
            (40, 1280, 160, 33), // whole K steps (base3) / sub-steps (2bit)
            (3, 2560, 128, 2),   // whole K steps (2bit)
            (7, 60, 12, 4),      // inside words, cols not a multiple of 16
        ] {
            add(
                format!("ternary_gemm {layout:?} F16 {rows}×{cols} group {group} tokens {tokens}"),
                false,
                Box::new(move |x, r| {
                    run_ternary_gemm(
                        x,
                        r,
                        Path::Gemm,
                        layout,
                        FloatType::F16,
                        rows,
                        cols,
                        group,
                        tokens,
                    )
                }),
            );
        }
        // Parts of ~100 rows (64 KiB bindings): part boundaries fall inside row tiles. (x and y
        // must fit a 64 KiB binding too, which leaves room for one token tile only.)
        add(
            format!("ternary_gemm {layout:?} f32 300×2560 tokens 6 split"),
            true,
            Box::new(move |x, r| {
                run_ternary_gemm(x, r, Path::Gemm, layout, FloatType::F32, 300, 2560, 0, 6)
            }),
        );
        add(
            format!("ternary_gemm {layout:?} bf16 600×640 group 64 tokens 12 split"),
            true,
            Box::new(move |x, r| {
                run_ternary_gemm(x, r, Path::Gemm, layout, FloatType::Bf16, 600, 640, 64, 12)
            }),
        );
        for tokens in [1, 3, 4, 40] {
            add(
                format!("ternary_matmul {layout:?} f32 70×2560 tokens {tokens}"),
                false,
                Box::new(move |x, r| {
                    run_ternary_gemm(
                        x,
                        r,
                        Path::Matmul,
                        layout,
                        FloatType::F32,
                        70,
                        2560,
                        0,
                        tokens,
                    )
                }),
            );
        }
    }

    // The 64 × 64 ternary tile (2bit): every scale type, partial row/token tiles, several token
    // tiles, every kind of scale-group boundary, and a split weight whose parts start mid-tile.
    for (st, rows, cols, group, tokens) in [
        (FloatType::F32, 1, 32, 0, 1),
        (FloatType::F16, 33, 96, 0, 7),
        (FloatType::Bf16, 70, 2560, 0, 65),
        (FloatType::F32, 257, 1000, 0, 130),
        (FloatType::F16, 9, 1000, 40, 66),
        (FloatType::F16, 17, 96, 32, 7),
        (FloatType::F16, 5, 80, 1, 3),
        (FloatType::F16, 65, 640, 64, 64),
        (FloatType::F16, 3, 2560, 128, 2),
        (FloatType::F16, 7, 60, 12, 4),
    ] {
        add(
            format!("ternary_gemm 64x64 {st:?} {rows}×{cols} group {group} tokens {tokens}"),
            false,
            Box::new(move |x, r| {
                let l = TernaryLayout::Bits2;
                run_ternary_gemm(x, r, Path::GemmWide, l, st, rows, cols, group, tokens)
            }),
        );
    }
    add(
        "ternary_gemm 64x64 f32 300×2560 tokens 6 split".into(),
        true,
        Box::new(move |x, r| {
            let (l, st) = (TernaryLayout::Bits2, FloatType::F32);
            run_ternary_gemm(x, r, Path::GemmWide, l, st, 300, 2560, 0, 6)
        }),
    );

    // The 4 × 8 micro-tiles (2bit, group 0), 64 × 128 and 64 × 64j8: every scale type, partial
    // row and token tiles, several token tiles, a partial 64-column K step (1000, 60 columns), a
    // split weight.
    for (st, rows, cols, tokens, path) in [
        (FloatType::F32, 1, 32, 1, Path::GemmTall),
        (FloatType::F16, 33, 96, 7, Path::GemmTall),
        (FloatType::Bf16, 70, 2560, 130, Path::GemmTall),
        (FloatType::F32, 257, 1000, 129, Path::GemmTall),
        (FloatType::F16, 65, 60, 4, Path::GemmTall),
        (FloatType::F16, 1, 32, 1, Path::GemmTallHalf),
        (FloatType::Bf16, 70, 2560, 65, Path::GemmTallHalf),
        (FloatType::F32, 257, 1000, 130, Path::GemmTallHalf),
    ] {
        let tile = if matches!(path, Path::GemmTall) {
            "64x128"
        } else {
            "64x64j8"
        };
        add(
            format!("ternary_gemm {tile} {st:?} {rows}×{cols} tokens {tokens}"),
            false,
            Box::new(move |x, r| {
                let l = TernaryLayout::Bits2;
                run_ternary_gemm(x, r, path, l, st, rows, cols, 0, tokens)
            }),
        );
    }
    // The same tiles over scale groups of a multiple of 64 columns (GROUPED: TQ2_0's 256-column
    // blocks, 2B4T's 2560 and 6912 columns; 16 groups of 64; one group exactly).
    for (st, rows, cols, group, tokens, path) in [
        (FloatType::F16, 70, 2560, 256, 130, Path::GemmTall),
        (FloatType::F32, 257, 1024, 64, 129, Path::GemmTall),
        (FloatType::F32, 1, 64, 64, 1, Path::GemmTall),
        (FloatType::Bf16, 65, 640, 128, 65, Path::GemmTallHalf),
        (FloatType::F16, 33, 6912, 256, 7, Path::GemmTallHalf),
    ] {
        let tile = if matches!(path, Path::GemmTall) {
            "64x128g"
        } else {
            "64x64j8g"
        };
        add(
            format!("ternary_gemm {tile} {st:?} {rows}×{cols} group {group} tokens {tokens}"),
            false,
            Box::new(move |x, r| {
                let l = TernaryLayout::Bits2;
                run_ternary_gemm(x, r, path, l, st, rows, cols, group, tokens)
            }),
        );
    }
    add(
        "ternary_gemm 64x128 f32 300×2560 tokens 6 split".into(),
        true,
        Box::new(move |x, r| {
            let (l, st) = (TernaryLayout::Bits2, FloatType::F32);
            run_ternary_gemm(x, r, Path::GemmTall, l, st, 300, 2560, 0, 6)
        }),
    );
    // The cooperative-matrix tile (where the adapter has it): every scale type, partial row and
    // token tiles, columns not a multiple of its 32-column K step, several token tiles, 2B4T's
    // widths, a split weight.
    for (st, rows, cols, tokens) in [
        (FloatType::F32, 1, 32, 1),
        (FloatType::F16, 33, 96, 7),
        (FloatType::F16, 7, 60, 4),
        (FloatType::Bf16, 70, 2560, 65),
        (FloatType::F32, 257, 1000, 130),
        (FloatType::Bf16, 65, 6912, 64),
        (FloatType::F32, 640, 2560, 512),
    ] {
        add(
            format!("ternary_gemm coop {st:?} {rows}×{cols} tokens {tokens}"),
            false,
            Box::new(move |x, r| {
                let l = TernaryLayout::Bits2;
                run_ternary_gemm(x, r, Path::GemmCoop, l, st, rows, cols, 0, tokens)
            }),
        );
    }
    // ... and over scale groups of a multiple of its 32-column K step (GROUPED: TQ2_0's 256)
    for (st, rows, cols, group, tokens) in [
        (FloatType::F16, 70, 2560, 256, 65),
        (FloatType::Bf16, 33, 6912, 256, 7),
        (FloatType::F16, 65, 640, 64, 64),
        (FloatType::Bf16, 9, 1024, 32, 130),
        (FloatType::F16, 257, 960, 96, 70),
    ] {
        add(
            format!("ternary_gemm coop {st:?} {rows}×{cols} group {group} tokens {tokens}"),
            false,
            Box::new(move |x, r| {
                let l = TernaryLayout::Bits2;
                run_ternary_gemm(x, r, Path::GemmCoop, l, st, rows, cols, group, tokens)
            }),
        );
    }
    add(
        "ternary_gemm coop f32 300×2560 tokens 6 split".into(),
        true,
        Box::new(move |x, r| {
            let (l, st) = (TernaryLayout::Bits2, FloatType::F32);
            run_ternary_gemm(x, r, Path::GemmCoop, l, st, 300, 2560, 0, 6)
        }),
    );
    // The same bits as the 64 × 32 and 64 × 64 tiles: gate/up row pairs (two scales by row
    // parity), INT4 activations, a split pair weight; the tile refuses groups of 40 columns (not
    // a multiple of 64).
    for (pairs, act4, rows, cols, tokens, split) in [
        (true, false, 70, 640, 130, false),
        (true, true, 33, 1000, 129, false),
        (false, true, 257, 1000, 129, false),
        (true, false, 300, 640, 9, true),
    ] {
        add(
            format!("ternary_gemm 64x128/64x64j8 vs 64x32/64x64 pairs {pairs} int4 {act4} {rows}×{cols} tokens {tokens} split {split}"),
            split,
            Box::new(move |x, r| run_tall_vs_old(x, r, pairs, act4, rows, cols, tokens)),
        );
    }

    // ggml GEMM (and the Q6_K GEMV).
    for q in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q6K,
    ] {
        let shapes: [(usize, usize, usize); 5] = if q == GgmlType::Q6K {
            [
                (1, 256, 1),
                (33, 512, 7),
                (70, 2560, 9),
                (640, 2560, 33),
                (257, 1024, 64),
            ]
        } else {
            [
                (1, 32, 1),
                (33, 96, 7),
                (70, 2560, 9),
                (640, 2560, 33),
                (257, 1024, 64),
            ]
        };
        for (rows, cols, tokens) in shapes {
            add(
                format!("ggml_gemm {q:?} {rows}×{cols} tokens {tokens}"),
                false,
                Box::new(move |x, r| run_ggml_gemm(x, r, Path::Gemm, q, rows, cols, tokens)),
            );
        }
        add(
            format!("ggml_gemm {q:?} 500×1024 tokens 15 split"),
            true,
            Box::new(move |x, r| run_ggml_gemm(x, r, Path::Gemm, q, 500, 1024, 15)),
        );
        for tokens in [2, 5] {
            add(
                format!("ggml_matmul {q:?} 33×512 tokens {tokens}"),
                false,
                Box::new(move |x, r| run_ggml_gemm(x, r, Path::Matmul, q, 33, 512, tokens)),
            );
        }
    }
    // Odd sizes: 3, 5, 9 and 17 super-blocks per row (24, 40, 72, 136 units of 32 columns: the
    // GEMV's two-units-per-step loop and its tail; odd super-blocks start 2 bytes past a word),
    // odd row counts; 12 super-blocks (3 rows × 3072, 2 tokens) and 2 (fewer units than lanes).
    for (rows, cols, tokens) in [
        (1, 256, 1),
        (3, 3072, 2),
        (1, 512, 1),
        (31, 576 / 64 * 256, 1),
        (257, 1536, 2),
        (13, 768, 1),
        (9, 1280, 3),
        (5, 4352, 1),
    ] {
        add(
            format!("ggml_gemv Q6K {rows}×{cols} tokens {tokens}"),
            false,
            Box::new(move |x, r| {
                run_ggml_gemm(x, r, Path::Gemv, GgmlType::Q6K, rows, cols, tokens)
            }),
        );
    }
    add(
        "ggml_gemv Q6K 300×2560 tokens 2 split".into(),
        true,
        Box::new(move |x, r| run_ggml_gemm(x, r, Path::Gemv, GgmlType::Q6K, 300, 2560, 2)),
    );
    v
}

/// The 64 × 128 and 64 × 64j8 tiles against the 64 × 32 and 64 × 64 tiles on the same weight and activations,
/// bit for bit: `pairs` a gate/up pair weight (`ternary_gate_up`, 2 × `rows` rows), `act4` INT4
/// activations. Also checks that the tile refuses a weight with scale groups.
fn run_tall_vs_old(
    ctx: &GpuContext,
    rng: &mut Rng,
    pairs: bool,
    act4: bool,
    rows: usize,
    cols: usize,
    tokens: usize,
) -> Result<String, String> {
    use tern_gpu::kernels::{A48Quant, ActInt8, GemmTile};
    let e = |e: GpuError| e.to_string();
    let (l, st) = (TernaryLayout::Bits2, FloatType::Bf16);
    let (r, c) = (rows as u64, cols as u64);
    let mut mats = Vec::new();
    for _ in 0..2 {
        let trits: Vec<i8> = (0..rows * cols)
            .map(|_| (rng.next() % 3) as i8 - 1)
            .collect();
        let scales = [0.01 + rng.unit() * 0.5];
        mats.push(ternary::pack(l, r, c, &trits, 0, st, &scales).map_err(|e| e.to_string())?);
    }
    let (w, out_rows) = if pairs {
        let pw = tern_gpu::model::ternary_gate_up(ctx, l, r, c, 0, st, &mats[0], &mats[1]);
        (pw.map_err(e)?, 2 * rows)
    } else {
        (
            TernaryWeight::upload(ctx, l, r, c, 0, st, &mats[0]).map_err(e)?,
            rows,
        )
    };
    let x = activations(rng, tokens, cols);
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let a8 = ActInt8::alloc(ctx, tokens as u64, c).map_err(e)?;
    let mut enc = ctx.encoder();
    let a = if act4 {
        let a4 = a8.as_int4().map_err(e)?;
        let k = A48Quant::Int4Absmean;
        kernels::quantize_act_a48_into(ctx, &mut enc, &xb, None, k, &a4).map_err(e)?;
        a4
    } else {
        kernels::quantize_act_int8_into(ctx, &mut enc, &xb, &a8).map_err(e)?;
        a8
    };
    let n = tokens * out_rows;
    let mut ys = Vec::new();
    let mut tiles = vec![
        GemmTile::Narrow,
        GemmTile::Wide,
        GemmTile::Tall,
        GemmTile::TallHalf,
    ];
    let coop = coop_available(ctx)?;
    if coop {
        tiles.push(GemmTile::Coop);
    }
    for tile in tiles {
        let y = ctx.upload("y", &f32_bytes(&vec![f32::NAN; n])).map_err(e)?;
        kernels::ternary_gemm_tiled(ctx, &mut enc, &w, &a, &y, tile).map_err(e)?;
        ys.push(y);
    }
    ctx.submit_wait(enc).map_err(e)?;
    let mut out = String::new();
    let mut pairs_to_check = vec![(2, 0), (2, 1), (3, 0), (3, 1)];
    if coop {
        pairs_to_check.extend([(4, 0), (4, 1)]);
    }
    for (i, j) in pairs_to_check {
        let got = ctx.read_f32(&ys[i], n).map_err(e)?;
        let want = ctx.read_f32(&ys[j], n).map_err(e)?;
        out = score(&format!("tile {i} vs {j}"), Check::Exact, &got, &want)?;
    }
    if coop {
        out.push_str(", coop tile included");
    }
    // grouped scales: the 64 × 128 tile says no (matmul.rs falls back to the older tiles)
    let ns = ternary::scale_count(r, c, 40).map_err(|e| e.to_string())? as usize;
    let gb = ternary::pack(l, r, c, &vec![1i8; rows * cols], 40, st, &vec![0.25f32; ns]);
    let gw = TernaryWeight::upload(ctx, l, r, c, 40, st, &gb.map_err(|e| e.to_string())?);
    let y = ctx.zeroed("y", (tokens * rows * 4) as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    let gw = gw.map_err(e)?;
    for tile in [GemmTile::Tall, GemmTile::TallHalf, GemmTile::Coop] {
        if kernels::ternary_gemm_tiled(ctx, &mut enc, &gw, &a, &y, tile).is_ok() {
            return Err(format!("{tile:?} took a weight with scale groups"));
        }
    }
    Ok(format!("{out}, {} binding(s)", w.parts()))
}
