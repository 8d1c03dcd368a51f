//! Parity of the fused NeuZip decode + GEMV (`neuzip_gemv.wgsl`, `NeuzipTensor::fused_gemv`)
//! against the CPU's `neuzip::decode` followed by plain f32 dots (NMSE ≤ 1e-10: only the
//! summation order differs), layouts 1 and 2, lossless and lossy, 1–9 tokens (several fused
//! dispatches), odd shapes, lane counts that are not powers of two, several chunks; and a corrupt
//! stream sets the status.

use super::*;

#[allow(clippy::too_many_arguments)]
fn run_fused(
    ctx: &GpuContext,
    rng: &mut Rng,
    dtype: FloatType,
    k: u8,
    rows: usize,
    cols: usize,
    tokens: usize,
    layout: u8,
    params: Option<neuzip::Params>,
) -> Result<String, String> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    let bytes = to_dtype(dtype, &w);
    let blob = match (layout, params) {
        (2, Some(p)) => neuzip::encode_v2_with(dtype, k, &bytes, cols, p),
        (2, None) => neuzip::encode_v2(dtype, k, &bytes, cols),
        (_, Some(p)) => neuzip::encode_with(dtype, k, &bytes, cols, p),
        (_, None) => neuzip::encode(dtype, k, &bytes, cols),
    }
    .map_err(|e| e.to_string())?;
    let decoded = neuzip::decode(&blob).map_err(|e| e.to_string())?;
    let wd = Encoding::from(dtype)
        .decode_f32(&[rows as u64, cols as u64], &decoded)
        .map_err(|e| e.to_string())?;
    let e = |e: GpuError| e.to_string();
    let t = NeuzipTensor::upload_compressed(ctx, &blob, u64::MAX).map_err(e)?;
    if !t.fusable(cols as u64) {
        return Err("not fusable".into());
    }
    let x = activations(rng, tokens, cols);
    let xb = ctx.upload("x", &f32_bytes(&x)).map_err(e)?;
    let stride = rows + 3; // out_stride > rows: the padding must stay untouched
    let yb = ctx.zeroed("y", (tokens * stride * 4) as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    t.clear_status(&mut enc);
    t.fused_gemv(ctx, &mut enc, &xb, tokens as u64, &yb, stride as u64)
        .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    t.check_status(ctx).map_err(e)?;
    let got = ctx.read_f32(&yb, tokens * stride).map_err(e)?;
    let mut want = vec![0.0f32; tokens * stride];
    for tk in 0..tokens {
        for r in 0..rows {
            want[tk * stride + r] = wd[r * cols..(r + 1) * cols]
                .iter()
                .zip(&x[tk * cols..(tk + 1) * cols])
                .map(|(a, b)| a * b)
                .sum();
        }
    }
    let emb = check_embed_rows(ctx, rng, &t, &decoded, dtype, rows, cols)?;
    score("neuzip_gemv", Check::Nmse(1e-10), &got, &want).map(|s| {
        format!(
            "{s}; {emb}; layout {}, {} blocks × {} lanes, {} rows/block, {} chunk(s)",
            t.plan.version,
            t.plan.n_blocks,
            t.plan.lanes,
            t.plan.rows_per_block,
            t.chunks()
        )
    })
}

/// Rows looked up in the compressed matrix (`neuzip_embed.wgsl`: first, last, middle, random,
/// repeated, past the end → zeros) equal the CPU decode bit for bit; the output is poisoned
/// first so that a skipped write shows. Tensors whose blocks are not whole rows are refused.
fn check_embed_rows(
    ctx: &GpuContext,
    rng: &mut Rng,
    t: &NeuzipTensor,
    decoded: &[u8],
    dtype: FloatType,
    rows: usize,
    cols: usize,
) -> Result<String, String> {
    if !t.embeddable(cols as u64) {
        return Ok("embed: blocks not of whole rows".into());
    }
    let mut ids: Vec<u32> = vec![0, (rows - 1) as u32, (rows / 2) as u32, 0];
    for _ in 0..4 {
        ids.push((rng.next() % rows as u64) as u32);
    }
    ids.extend([rows as u32, u32::MAX]);
    let all = Encoding::from(dtype)
        .decode_f32(&[rows as u64, cols as u64], decoded)
        .map_err(|e| e.to_string())?;
    let mut want = vec![0.0f32; ids.len() * cols];
    for (i, &id) in ids.iter().enumerate() {
        if (id as usize) < rows {
            let r = id as usize;
            want[i * cols..(i + 1) * cols].copy_from_slice(&all[r * cols..(r + 1) * cols]);
        }
    }
    let e = |e: GpuError| e.to_string();
    let idb = ctx
        .upload(
            "ids",
            &ids.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>(),
        )
        .map_err(e)?;
    let ob = ctx
        .zeroed("out", (ids.len() * cols * 4) as u64)
        .map_err(e)?;
    ctx.write(&ob, &f32_bytes(&vec![f32::NAN; ids.len() * cols]));
    let mut enc = ctx.encoder();
    t.clear_status(&mut enc);
    let table = tern_gpu::kernels::EmbedTable::NeuZip(t);
    tern_gpu::kernels::embed_rows(ctx, &mut enc, &table, &idb, ids.len() as u64, &ob).map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    t.check_status(ctx).map_err(e)?;
    let got = ctx.read_f32(&ob, ids.len() * cols).map_err(e)?;
    score("neuzip embed_rows", Check::Exact, &got, &want)
}

/// A corrupt word stream (structurally valid) makes the fused kernel set the status.
fn run_fused_corrupt(ctx: &GpuContext, rng: &mut Rng) -> Result<String, String> {
    let (rows, cols) = (40, 96);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    let mut blob = neuzip::encode_v2(FloatType::Bf16, 7, &to_dtype(FloatType::Bf16, &w), cols)
        .map_err(|e| e.to_string())?;
    let plan = neuzip::Plan::parse(&blob).map_err(|e| e.to_string())?;
    let at = plan.words.offset as usize + 10;
    blob[at] ^= 0x5A;
    if neuzip::decode(&blob).is_ok() {
        return Err("the CPU accepts the damaged stream".into());
    }
    let e = |e: GpuError| e.to_string();
    let t = NeuzipTensor::upload_compressed(ctx, &blob, u64::MAX).map_err(e)?;
    let xb = ctx.upload("x", &f32_bytes(&vec![1.0; cols])).map_err(e)?;
    let yb = ctx.zeroed("y", (rows * 4) as u64).map_err(e)?;
    let mut enc = ctx.encoder();
    t.clear_status(&mut enc);
    t.fused_gemv(ctx, &mut enc, &xb, 1, &yb, rows as u64)
        .map_err(e)?;
    ctx.submit_wait(enc).map_err(e)?;
    match t.check_status(ctx) {
        Err(GpuError::Corrupt { .. }) => Ok("corrupt stream flagged".into()),
        r => Err(format!("status: {r:?}")),
    }
}

pub fn cases() -> Vec<(String, bool, CaseFn)> {
    let mut v: Vec<(String, bool, CaseFn)> = Vec::new();
    let p = |lanes, block_symbols| {
        Some(neuzip::Params {
            lanes,
            block_symbols,
        })
    };
    for (name, dtype, k, rows, cols, tokens, layout, params) in [
        ("bf16 lossless 1×1", FloatType::Bf16, 7, 1, 1, 1, 2, None),
        (
            "bf16 lossless 37×129",
            FloatType::Bf16,
            7,
            37,
            129,
            1,
            2,
            None,
        ),
        (
            "bf16 lossless 300×576 ×2",
            FloatType::Bf16,
            7,
            300,
            576,
            2,
            2,
            None,
        ),
        (
            "bf16 lossless 20×2560 ×9",
            FloatType::Bf16,
            7,
            20,
            2560,
            9,
            2,
            None,
        ),
        ("bf16 k=3 77×640", FloatType::Bf16, 3, 77, 640, 1, 2, None),
        ("bf16 k=0 50×64 ×3", FloatType::Bf16, 0, 50, 64, 3, 2, None),
        (
            "f16 lossless 41×257 ×4",
            FloatType::F16,
            10,
            41,
            257,
            4,
            2,
            None,
        ),
        (
            "f16 k=3 23×100",
            FloatType::F16,
            3,
            23,
            100,
            1,
            2,
            p(5, 300),
        ),
        (
            "f32 lossless 19×333 ×2",
            FloatType::F32,
            23,
            19,
            333,
            2,
            2,
            p(30, 1000),
        ),
        (
            "bf16 lossless 200×33, 64 lanes",
            FloatType::Bf16,
            7,
            200,
            33,
            1,
            2,
            p(64, 999),
        ),
        (
            "layout 1 bf16 lossless 64×1000",
            FloatType::Bf16,
            7,
            64,
            1000,
            1,
            1,
            None,
        ),
        (
            "layout 1 f16 k=1 9×31, 3 lanes",
            FloatType::F16,
            1,
            9,
            31,
            2,
            1,
            p(3, 50),
        ),
    ] {
        v.push((
            format!("neuzip_gemv {name}"),
            false,
            Box::new(move |c, r| run_fused(c, r, dtype, k, rows, cols, tokens, layout, params)),
        ));
    }
    v.push((
        "neuzip_gemv bf16 400×500 split".into(),
        true,
        Box::new(move |c, r| run_fused(c, r, FloatType::Bf16, 7, 400, 500, 1, 2, p(32, 4000))),
    ));
    v.push((
        "neuzip_gemv corrupt stream".into(),
        false,
        Box::new(run_fused_corrupt),
    ));
    v
}
