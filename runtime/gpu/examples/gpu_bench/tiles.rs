//! `--only tiles`: the ternary GEMM's tiles (`GemmTile::{Narrow, Wide, Tall, TallHalf}`: 64 rows ×
//! 32, 64, 128, 64 tokens; `Coop`, 64 × 64 on cooperative matrices, where the device has them) on the same operands at 2B4T's shapes (q/o, k/v, stacked q/k/v, gate/up pairs,
//! down), INT8 and INT4 (a4.8) activations, 512 tokens (and fewer on 2560 × 2560). Each tile's
//! output must equal the 64 × 32 tile's bit for bit. Per entry: µs per GEMM and TOPS (2 ops per
//! multiply-add) of each tile.

use tern_format::{ternary, FloatType, TernaryLayout};
use tern_gpu::kernels::{self, A48Quant, ActInt8, GemmTile};
use tern_gpu::TernaryWeight;
use tern_gpu::{GpuContext, GpuTuning};

use super::{per_call, Rng};

pub fn tiles(
    ctx: &GpuContext,
    rng: &mut Rng,
    (quick, tuning): (bool, &GpuTuning),
    fields: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (shrink, iters) = if quick { (8u64, 1) } else { (1, 20) };
    let l = TernaryLayout::Bits2;
    let mut cases: Vec<(u64, u64, u64)> = [
        (2560u64, 2560u64),
        (640, 2560),
        (3840, 2560),
        (6912, 2560),
        (13824, 2560),
        (2560, 6912),
    ]
    .into_iter()
    .map(|(r, c)| (r / shrink, c, 512 / shrink))
    .collect();
    for t in [128u64, 256, 1024] {
        cases.push((2560 / shrink, 2560, t / shrink));
    }
    for (rows, cols, tokens) in cases {
        let trits: Vec<i8> = (0..rows * cols)
            .map(|_| (rng.next() % 3) as i8 - 1)
            .collect();
        let bytes = ternary::pack(l, rows, cols, &trits, 0, FloatType::F32, &[0.02])?;
        let w = TernaryWeight::upload(ctx, l, rows, cols, 0, FloatType::F32, &bytes)?;
        let x: Vec<u8> = (0..tokens * cols)
            .flat_map(|_| rng.normal().to_le_bytes())
            .collect();
        let xb = ctx.upload("x", &x)?;
        for int4 in [false, true] {
            let a8 = ActInt8::alloc(ctx, tokens, cols)?;
            let mut enc = ctx.encoder();
            let a = if int4 {
                let a4 = a8.as_int4()?;
                let k = A48Quant::Int4Absmean;
                kernels::quantize_act_a48_into(ctx, &mut enc, &xb, None, k, &a4)?;
                a4
            } else {
                kernels::quantize_act_int8_into(ctx, &mut enc, &xb, &a8)?;
                a8
            };
            ctx.submit_wait(enc)?;
            let n = tokens * rows * 4;
            let mut parts = Vec::new();
            let mut first: Option<Vec<u8>> = None;
            let mut tiles = vec![
                ("64x32", GemmTile::Narrow),
                ("64x64", GemmTile::Wide),
                ("64x128", GemmTile::Tall),
                ("64x64j8", GemmTile::TallHalf),
            ];
            if ctx.coop_matrix() {
                tiles.push(("coop64x64", GemmTile::Coop));
            }
            for (name, tile) in tiles {
                let y = ctx.zeroed("y", n)?;
                let t = per_call(ctx, iters, |e| {
                    kernels::ternary_gemm_tiled(ctx, e, &w, &a, &y, tile)
                })?;
                let got = ctx.read_bytes(&y, 0, n)?;
                match &first {
                    None => first = Some(got),
                    Some(f) => anyhow::ensure!(*f == got, "tile {name} differs from 64x32"),
                }
                parts.push(format!(
                    "\"{name}\":{{\"us\":{:.1},\"tops\":{:.1}}}",
                    t * 1e6,
                    2.0 * (rows * cols * tokens) as f64 / t / 1e12
                ));
            }
            let act = if int4 { "int4" } else { "int8" };
            let coop = ctx.coop_matrix();
            let chosen = format!("{:?}", GemmTile::choose(&w, tokens, tuning.gemm_tile, coop));
            fields.push(format!(
                "\"tiles_2bit_{rows}x{cols}_t{tokens}_{act}\":{{{},\"chosen\":\"{chosen}\"}}",
                parts.join(",")
            ));
        }
    }
    Ok(())
}
